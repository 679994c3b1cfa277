//! Permission modes through the real binary and the real CLIs (issue 37, item 1): the
//! default (`sandbox`) lets each CLI run ordinary commands in its worktree and keeps it
//! from writing outside; a mode that refuses a tool call says so in the result, the
//! summary line and the table, never a bare "succeeded"; `--permission-mode` on `run` and
//! `batch`.

use super::*;

/// A file outside every CLI's writable places (`/tmp` is writable in Codex's
/// workspace-write, so not there), unique to the test.
fn outside(name: &str) -> PathBuf {
    let dir =
        PathBuf::from("/var/tmp").join(format!("aicli-permissions-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    dir
}

/// The run's result: the last line of `--json` output.
fn result_of(out: &Output) -> serde_json::Value {
    let text = stdout(out);
    let last = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output: {text}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

/// Under the default mode each CLI runs a command that is not on any allowlist (python
/// writing a file) in its worktree, and the file is committed on the task's branch; the
/// same command's write outside the worktree is refused by the confinement, and nothing
/// appears there.
#[test]
fn the_default_mode_runs_ordinary_commands_confined_to_the_worktree() {
    let cli = Cli::new();
    for p in ["claude", "codex", "gemini"] {
        let escape = outside(p);
        let script = format!(
            "shell:python3 -c \"open('hi.txt','w').write('hi')\"; touch {}",
            escape.display()
        );
        let out = cli.run(&[
            "run",
            "-p",
            p,
            "--json",
            &format!("--fake-api={script}"),
            "w",
        ]);
        assert_code(&out, 0, p);
        let r = result_of(&out);
        assert_eq!(r["status"], "succeeded", "{p}: {r}");
        assert_eq!(r["tool_calls_refused"], 0, "{p}: {r}");
        let commit = r["work"]["commit"]
            .as_str()
            .unwrap_or_else(|| panic!("{p} committed nothing: {r}"));
        let files = git(
            cli.repo.path(),
            &["show", "--name-only", "--format=", commit],
        );
        assert_eq!(files, "hi.txt", "{p}");
        assert!(
            !escape.exists(),
            "{p} wrote {} outside its worktree",
            escape.display()
        );
    }
}

/// In `accept_edits` Gemini leaves its shell tool out of a headless run, and Claude asks
/// about a command it cannot classify: each refusal is counted in the result, said in the
/// summary line (with the way out) and in the batch's table.
#[test]
fn refused_tool_calls_are_counted_and_said_everywhere() {
    let cli = Cli::new();
    let script = "--fake-api=shell:python3 -c \"open('hi.txt','w').write('hi')\"; true";
    for p in ["gemini", "claude"] {
        let out = cli.run(&[
            "run",
            "-p",
            p,
            "--permission-mode",
            "accept_edits",
            "--json",
            script,
            "w",
        ]);
        assert_code(&out, 0, p);
        let r = result_of(&out);
        assert_eq!(r["tool_calls_refused"], 1, "{p}: {r}");
        let out = cli.run(&[
            "run",
            "-p",
            p,
            "--permission-mode",
            "accept-edits",
            script,
            "w",
        ]);
        let text = stdout(&out);
        assert!(
            text.contains("✔ succeeded · ⚠ 1 tool call refused"),
            "{p}: {text}"
        );
        assert!(text.contains("--permission-mode sandbox"), "{p}: {text}");
    }
    let tasks = serde_json::json!([
        {"id": "g", "provider": "gemini", "prompt": "w"},
        {"id": "c", "provider": "codex", "prompt": "w"},
    ]);
    let file = cli.file("tasks.json", &tasks.to_string());
    let out = cli.run(&[
        "batch",
        file.to_str().unwrap(),
        "--batch-id",
        "perm",
        "--permission-mode",
        "plan",
        script,
    ]);
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("g ") || l.starts_with("g\u{a0}"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("ok ⚠ 1 refused"), "{row}\n{text}");
    let shown = stdout(&cli.run(&["runs", "show", "perm"]));
    assert!(shown.contains("⚠ 1 tool call refused"), "{shown}");
    // A mode the flag does not know is refused before anything runs.
    let out = cli.run(&["run", "--permission-mode", "yolo", "w"]);
    assert_code(&out, 2, "an unknown mode");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("use plan, default, accept_edits, sandbox, bypass"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sandbox` where nothing can confine Gemini (no `bwrap` on the run's PATH): the run
/// says so as it starts, the command is refused and counted, and `bypass` runs it.
#[test]
fn without_bubblewrap_gemini_says_so_and_bypass_is_the_explicit_choice() {
    let cli = Cli::new();
    // The run's PATH: node and python, no bwrap.
    let bin = cli.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["node", "python3", "sh", "bash", "git", "env", "touch"] {
        if let Ok(p) = which::which(tool) {
            std::os::unix::fs::symlink(p, bin.join(tool)).unwrap();
        }
    }
    let path = bin.display().to_string();
    let script = "--fake-api=shell:touch hi.txt";
    let out = cli
        .command(&["run", "-p", "gemini", script, "w"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_code(&out, 0, "sandbox without bwrap");
    let text = stdout(&out);
    assert!(text.contains("nothing can confine gemini here"), "{text}");
    assert!(text.contains("⚠ 1 tool call refused"), "{text}");
    let out = cli
        .command(&[
            "run",
            "-p",
            "gemini",
            "--permission-mode",
            "bypass",
            "--json",
            script,
            "w",
        ])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_code(&out, 0, "bypass");
    let r = result_of(&out);
    assert_eq!(r["tool_calls_refused"], 0, "{r}");
    assert!(r["work"]["commit"].is_string(), "{r}");
}
