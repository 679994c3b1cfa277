//! The `aicli` command as a user runs it: the real binary as a subprocess, against real
//! git repositories, with `aicli-fake-cli` replaying recorded transcripts as the CLI
//! (`frictions.rs`), or the real CLIs against the embedded fake model APIs
//! (`newcomer.rs`: install, demo, `--fake-api`); `newuser.rs`: a new user's frictions of
//! issue 21, some on a pseudo-terminal.

mod acp;
mod bad_input;
mod frictions;
mod memory;
mod newcomer;
mod newuser;
mod permissions;
mod round3;
mod round4;
mod tools;
mod usage_limit;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::support::{fake_cli, fixture, git, git_repo, kill_9};

/// The `aicli` binary built with this crate.
pub fn aicli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli"))
}

/// A repository and a config whose providers run `aicli-fake-cli`.
pub struct Cli {
    /// The repository (the current directory of every command).
    pub repo: tempfile::TempDir,
    /// Holds the config and tasks files.
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
}

impl Cli {
    /// Providers `fake` (Claude's adapter, replaying Claude's `text` transcript; the
    /// default) and `fakegem` (Gemini's adapter, replaying Gemini's `shell`).
    pub fn new() -> Cli {
        Cli::with_providers(serde_json::json!({}))
    }

    /// As [`Cli::new`], plus these config providers.
    pub fn with_providers(extra: serde_json::Value) -> Cli {
        let repo = git_repo();
        let dir = tempfile::tempdir().expect("tempdir");
        let replay = |provider: &str, scenario: &str| {
            let fx = fixture(provider, scenario);
            serde_json::json!([
                "--replay",
                fx.with_extension("ndjson"),
                "--stderr-file",
                fx.with_extension("stderr"),
                "--exit-file",
                fx.with_extension("exit")
            ])
        };
        let mut providers = serde_json::json!({
            "fake": {"adapter": "claude", "binary_path": fake_cli(), "extra_args": replay("claude", "text")},
            "fakegem": {"adapter": "gemini", "binary_path": fake_cli(), "extra_args": replay("gemini", "shell"),
                        "env": {"GEMINI_API_KEY": "not-used"}},
        });
        if let (Some(p), Some(e)) = (providers.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                p.insert(k.clone(), v.clone());
            }
        }
        let config = dir.path().join("aicli.json");
        std::fs::write(
            &config,
            serde_json::json!({"default_provider": "fake", "providers": providers}).to_string(),
        )
        .expect("write config");
        Cli { repo, dir, config }
    }

    /// `aicli --config CONFIG ARGS` in the repository.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(aicli_bin());
        c.arg("--config")
            .arg(&self.config)
            .args(args)
            .current_dir(self.repo.path())
            .stdin(Stdio::null());
        c
    }

    /// Runs `aicli ARGS` to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("aicli runs")
    }

    /// A file in the config's directory with `text`.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write file");
        p
    }

    /// The repository's path as a string.
    pub fn repo_arg(&self) -> String {
        self.repo.path().display().to_string()
    }
}

/// stdout of `out` as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr of `out` as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code, with both streams in the message when it is not `want`.
pub fn assert_code(out: &Output, want: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(want),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// Each stdout line parsed as JSON (panics, naming the line, on one that is not).
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON line ({e}): {l}")))
        .collect()
}

/// A task replaying `scenario` of Claude's fixtures (overrides the provider's replay).
pub fn replaying(id: &str, scenario: &str, more: &[&str]) -> serde_json::Value {
    let fx = fixture("claude", scenario);
    let mut args = vec![
        "--replay".to_owned(),
        fx.with_extension("ndjson").display().to_string(),
        "--stderr-file".to_owned(),
        fx.with_extension("stderr").display().to_string(),
        "--exit-file".to_owned(),
        fx.with_extension("exit").display().to_string(),
    ];
    args.extend(more.iter().map(|s| (*s).to_owned()));
    serde_json::json!({"id": id, "prompt": format!("task {id}"), "extra_args": args})
}

/// Whether `repo` holds no batch record (a refused command started nothing).
pub fn no_batches(repo: &Path) -> bool {
    std::fs::read_dir(repo.join(".aicli/runs")).map_or(true, |mut d| d.next().is_none())
}

/// Whether each of `tasks` under `tasks_dir` has printed something (its events file is
/// not empty).
pub fn printed(tasks_dir: &Path, tasks: &[&str]) -> bool {
    tasks.iter().all(|t| {
        std::fs::metadata(tasks_dir.join(t).join("events.ndjson")).is_ok_and(|m| m.len() > 0)
    })
}

/// Sends `child` (an `aicli` command) SIGINT, as Ctrl-C would, once `started` holds
/// (polled every 100 ms, for at most 30 s).
pub fn interrupt_once(child: &std::process::Child, started: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !started() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never got going"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// The repository's only batch id (panics when there is not exactly one).
pub fn only_batch(repo: &Path) -> String {
    let runs: Vec<_> = std::fs::read_dir(repo.join(".aicli/runs"))
        .expect("runs dir")
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "batches: {runs:?}");
    runs[0].file_name().to_string_lossy().into_owned()
}

/// Makes `repo` dirty: an edit to a tracked file and an untracked file.
pub fn make_dirty(repo: &Path) {
    std::fs::write(repo.join("README.md"), "# edited, not committed\n").expect("edit");
    std::fs::write(repo.join("new-file.txt"), "untracked\n").expect("untracked");
    assert!(!git(repo, &["status", "--porcelain"]).is_empty());
}
