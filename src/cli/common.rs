//! Helpers the subcommands share: the repository, the engine (with aicli's MCP
//! server), Ctrl-C, exit codes of results.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::Engine;
use crate::mcp::{McpServer, McpServerOptions};
use crate::providers::{CommandSpec, PermissionMode, RunnerKind, SessionResult, SessionStatus};
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::exit::{BLOCKED, Failure, INTERRUPTED, SOME_FAILED, kind_code};
use super::fake::{FakeApiArgs, FakeSetup};
use super::{RepoArgs, load_config, output, registry};

/// The repository a command is about: `--repo`, else the current directory, raised to
/// the top of its git repository (where run records and worktrees live) when it is in
/// one.
pub(super) fn repo_dir(r: &RepoArgs) -> anyhow::Result<PathBuf> {
    let dir = match &r.repo {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let top = std::process::Command::new(crate::worktree::git_binary())
        .arg("-C")
        .arg(&dir)
        .args(["rev-parse", "--show-toplevel"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    Ok(top.unwrap_or(dir))
}

/// The repository of a command that runs tasks: `--repo` (which must exist), else the
/// current directory, raised to the top of its git repository. With `worktrees`, it must
/// be a git repository with a first commit (the worktrees start from one); the errors
/// say what to do.
pub(super) async fn task_repo(r: &RepoArgs, worktrees: bool) -> anyhow::Result<PathBuf> {
    if let Some(p) = &r.repo {
        if !p.exists() {
            return Err(usage(format!(
                "--repo {}: the directory does not exist",
                p.display()
            )));
        }
        if !p.is_dir() {
            return Err(usage(format!("--repo {}: not a directory", p.display())));
        }
    }
    let dir = repo_dir(r)?;
    if !worktrees {
        return Ok(dir);
    }
    if git_out(&dir, &["rev-parse", "--show-toplevel"])
        .await
        .is_none()
    {
        return Err(usage(format!(
            "{} is not in a git repository: aicli runs each task in a git worktree. Run `git init` and make a first commit there, or pass --no-worktree (run) to work in the directory itself",
            dir.display()
        )));
    }
    if git_out(&dir, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .await
        .is_none()
    {
        return Err(usage(format!(
            "{} has no commits yet: make a first commit (e.g. `git commit --allow-empty -m 'first commit'`); each task's worktree starts from one",
            dir.display()
        )));
    }
    Ok(dir)
}

/// `git -C dir ARGS` -> its trimmed stdout, `None` when it fails.
async fn git_out(dir: &Path, args: &[&str]) -> Option<String> {
    git_env(dir, args, &[]).await
}

async fn git_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Option<String> {
    let out = tokio::process::Command::new(crate::worktree::git_binary())
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// What the tasks' worktrees start from: `HEAD`, or with `include_uncommitted` a commit
/// on top of HEAD that holds the working tree as it is (staged, unstaged and untracked
/// files; ignored ones stay out), kept under `refs/aicli/uncommitted/`. Without it a
/// dirty repository gets a warning: the tasks would not see those changes.
pub(super) async fn worktree_base(
    repo: &Path,
    include_uncommitted: bool,
) -> anyhow::Result<String> {
    let status = git_out(repo, &["status", "--porcelain", "--untracked-files=all"])
        .await
        .unwrap_or_default();
    let changed = status.lines().filter(|l| !l.trim().is_empty()).count();
    if changed == 0 {
        return Ok("HEAD".to_owned());
    }
    if !include_uncommitted {
        let head = git_out(repo, &["rev-parse", "--short", "HEAD"])
            .await
            .unwrap_or_default();
        eprintln!(
            "aicli: warning: {} has uncommitted changes ({}); the tasks start from HEAD ({head}) and will not see them. Commit them, or pass --include-uncommitted to carry them into each task's worktree.",
            repo.display(),
            crate::util::count(changed as u64, "file", "files")
        );
        return Ok("HEAD".to_owned());
    }
    let index = tempfile::NamedTempFile::new().context("cannot make a temporary git index")?;
    let index_path = index.path().display().to_string();
    let env = [
        ("GIT_INDEX_FILE", index_path.as_str()),
        ("GIT_AUTHOR_NAME", "aicli"),
        ("GIT_AUTHOR_EMAIL", "aicli@localhost"),
        ("GIT_COMMITTER_NAME", "aicli"),
        ("GIT_COMMITTER_EMAIL", "aicli@localhost"),
    ];
    let step = |what: &str| {
        format!("cannot carry the uncommitted changes into the worktrees ({what} failed)")
    };
    git_env(repo, &["read-tree", "HEAD"], &env)
        .await
        .with_context(|| step("git read-tree"))?;
    git_env(repo, &["add", "-A"], &env)
        .await
        .with_context(|| step("git add -A"))?;
    let tree = git_env(repo, &["write-tree"], &env)
        .await
        .with_context(|| step("git write-tree"))?;
    let message = format!("aicli: the uncommitted changes of {}", repo.display());
    let commit = git_env(
        repo,
        &["commit-tree", &tree, "-p", "HEAD", "-m", &message],
        &env,
    )
    .await
    .with_context(|| step("git commit-tree"))?;
    let name = format!("refs/aicli/uncommitted/{commit}");
    git_out(repo, &["update-ref", &name, &commit])
        .await
        .with_context(|| step("git update-ref"))?;
    eprintln!(
        "aicli: the tasks start from the working tree as it is ({}, commit {} on top of HEAD)",
        crate::util::count(changed as u64, "changed file", "changed files"),
        &commit[..commit.len().min(10)]
    );
    Ok(commit)
}

/// A clap value parser for seconds: at least 1 (0 would stop a task at once).
pub(super) fn positive_secs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n < 1 => Err(format!(
            "{n}: must be at least 1 second (less would stop the task at once)"
        )),
        Ok(n) => u64::try_from(n).map_err(|_| format!("{n}: too many seconds")),
        Err(e) => Err(format!("'{s}' is not a whole number of seconds: {e}")),
    }
}

/// A clap value parser for a parallelism: at least 1.
pub(super) fn positive_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n < 1 => Err(format!("{n}: must be at least 1 (less would run nothing)")),
        Ok(n) => usize::try_from(n).map_err(|_| format!("{n}: too many")),
        Err(e) => Err(format!("'{s}' is not a whole number: {e}")),
    }
}

/// Ctrl-C cancels `cancel`: the running tasks stop and are left `interrupted` (their
/// records kept) for `aicli resume`. With `announce` it says so on stderr; a command
/// with the live display leaves that to the display, which prints above its bars.
pub(super) fn ctrl_c_cancels(cancel: CancellationToken, announce: bool) {
    // SIGTERM is taken as Ctrl-C: the web view stops the commands it started with it,
    // and so do service managers and `kill`; the run stops and its record is kept.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::spawn(async move {
        let term = async {
            match term.as_mut() {
                Some(t) => t.recv().await,
                None => std::future::pending().await,
            }
        };
        let got = tokio::select! {
            r = tokio::signal::ctrl_c() => r.is_ok(),
            _ = term => true,
        };
        if got {
            if announce {
                eprintln!("\naicli: interrupted; stopping the run (its record is kept)…");
            }
            cancel.cancel();
        }
    });
}

pub(super) fn engine(config_path: Option<&Path>) -> anyhow::Result<Engine> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    Ok(Engine::new(config, reg))
}

/// An engine for one command, with what it started: aicli's MCP server (unless
/// disabled in the config or with `--no-mcp`) and, with `--fake-api`, the fake model
/// APIs the CLIs are wired to. Both live until [`Running::stop`] (or `cancel`).
pub(super) struct Running {
    pub engine: Engine,
    mcp: Option<Arc<McpServer>>,
    fake: Option<FakeSetup>,
}

impl Running {
    /// Before a new batch of `tasks` starts: builds the images its containers need and an
    /// engine lacks ([`super::image::build_missing`]), once the options and the tasks are
    /// known good (an error of theirs in `invalid`'s words).
    pub async fn prepare_images(
        &self,
        tasks: &[crate::providers::TaskSpec],
        opts: &crate::BatchOptions,
        invalid: impl FnOnce(crate::EngineError) -> anyhow::Error,
    ) -> anyhow::Result<()> {
        let containers = self
            .engine
            .container_providers(tasks, opts)
            .map_err(invalid)?;
        super::image::build_missing(self.engine.config(), &containers).await
    }

    /// Stops the MCP server and the fakes.
    pub fn stop(self) {
        if let Some(s) = self.mcp {
            s.cancellation_token().cancel();
        }
        drop(self.fake);
    }
}

/// Starts the engine of a command that runs tasks (see [`Running`]).
/// `containers`: the container runner tasks may run under (the MCP server then accepts
/// the names they reach it under, and `--fake-api` serves them where they reach aicli:
/// the bridge, or the swarm manager's address).
pub(super) async fn start_engine(
    config_path: Option<&Path>,
    repo: &Path,
    no_mcp: bool,
    fake: &FakeApiArgs,
    containers: Option<RunnerKind>,
    cancel: &CancellationToken,
) -> anyhow::Result<Running> {
    let mut config = load_config(config_path)?;
    let containers = container_kind(
        containers
            .into_iter()
            .chain(crate::runner::docker::config_uses_docker(&config).then_some(RunnerKind::Docker))
            .chain([config.engine.runner])
            .chain(config.providers.values().filter_map(|p| p.runner)),
    );
    let fake = match &fake.script {
        Some(spec) => {
            let script = super::fake::script(spec)
                .map_err(|e| usage(format!("--fake-api: {e}")))?
                .skipping(fake.served);
            let home = super::fake::home_of(repo);
            Some(if let Some(kind) = containers {
                let bind = super::containers::bridge_address(&config, kind).await?;
                FakeSetup::start_in_containers(&mut config, script, &home, bind).await?
            } else {
                FakeSetup::start(&mut config, script, &home).await?
            })
        }
        None => None,
    };
    let reg = registry(&config)?;
    let mut engine = Engine::new(config, reg);
    if let Some(f) = &fake {
        engine = engine.with_env(f.env());
    }
    if no_mcp || !engine.config().engine.mcp.enabled {
        return Ok(Running {
            engine,
            mcp: None,
            fake,
        });
    }
    let mut opts = McpServerOptions::from_config(engine.config(), repo);
    if containers.is_some() {
        // Containers name aicli's machine host.docker.internal (or a configured address).
        opts.allowed_hosts
            .extend(crate::runner::docker::container_hosts(
                &engine.config().engine.docker,
            ));
    }
    let server = Arc::new(McpServer::start(opts, cancel.child_token()).await?);
    tracing::info!(url = %server.url(), "agent MCP server listening");
    Ok(Running {
        engine: engine.with_agent_server(server.clone()),
        mcp: Some(server),
        fake,
    })
}

/// An error in what the user gave (exit code 2).
pub(super) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind: None,
        message: message.into(),
    })
}

/// The exit code of one task's result (`run`, `answer`): 0, 3 blocked, 5 interrupted,
/// else its error kind's (10-25).
pub(super) fn finish(result: &SessionResult) -> ExitCode {
    match result.status {
        SessionStatus::Succeeded => ExitCode::SUCCESS,
        SessionStatus::Blocked => ExitCode::from(BLOCKED),
        SessionStatus::Interrupted => ExitCode::from(INTERRUPTED),
        SessionStatus::Failed => ExitCode::from(result.error_kind.map(kind_code).unwrap_or(1)),
    }
}

/// Prints a batch's result (the table, or its JSON on one line) and returns its exit
/// code (see [`batch_code`]).
pub(super) fn print_batch(b: &crate::BatchResult, json_out: bool) -> anyhow::Result<ExitCode> {
    if json_out {
        outln!("{}", serde_json::to_string(b)?);
    } else {
        outln!("{}", output::batch_table(b));
    }
    Ok(ExitCode::from(batch_code(b)))
}

/// A batch's exit code: 5 when tasks were interrupted (Ctrl-C), else 4 when some
/// failed, else 3 when some are blocked, else 0.
pub(super) fn batch_code(b: &crate::BatchResult) -> u8 {
    if b.n_interrupted > 0 {
        INTERRUPTED
    } else if b.n_failed > 0 {
        SOME_FAILED
    } else if b.n_blocked > 0 {
        BLOCKED
    } else {
        0
    }
}

/// The installed version of a provider's CLI (`None` when not installed or unreadable).
pub(super) async fn installed_version(p: &crate::providers::SharedProvider) -> Option<String> {
    let bin = p.binary_path(Some(&super::probe::search_path())).ok()?;
    let mut c = CommandSpec::new(&bin, &std::env::temp_dir());
    c.args(p.config().version_argv.iter().cloned());
    let out = crate::proc::capture::run_capture(&c, Duration::from_secs(30))
        .await
        .ok()?;
    p.parse_version(&out.stdout)
}

/// `--permission-mode`'s values.
pub(super) fn parse_permission_mode(s: &str) -> Result<PermissionMode, String> {
    PermissionMode::parse(s).ok_or_else(|| {
        format!(
            "'{s}' is not a permission mode: use {}",
            PermissionMode::ALL.map(|m| m.as_str()).join(", ")
        )
    })
}

/// `--runner`'s values.
pub(super) fn parse_runner(s: &str) -> Result<RunnerKind, String> {
    RunnerKind::parse(s).ok_or_else(|| format!("'{s}' is not a runner: use local, docker or swarm"))
}

/// The container runner a recorded batch's tasks run under, if any ([`container_kind`]).
/// The fake model APIs an answer (`answering`) or a resume of batch `batch_id` talks
/// to: the ones asked for (`--fake-api`), else the ones the batch was recorded with
/// (said on stderr; an answer to an `ask:` script goes on after the question), else
/// none.
pub(super) fn recorded_fake(
    fake: FakeApiArgs,
    config_path: Option<&Path>,
    repo: &Path,
    r: &RepoArgs,
    batch_id: Option<&str>,
    answering: bool,
) -> FakeApiArgs {
    if fake.script.is_some() {
        return fake;
    }
    let recorded = batch_id.and_then(|b| {
        let store = engine(config_path).ok()?.store(repo, r.runs_dir.as_deref());
        store.open_batch(b).ok()?.spec().ok()?.fake_api
    });
    if let Some(script) = &recorded {
        eprintln!(
            "aicli: batch {} ran against aicli's fake model APIs (--fake-api={script}): so does this",
            batch_id.unwrap_or_default()
        );
    }
    let served = match &recorded {
        Some(s) if answering && s.starts_with("ask:") => super::fake::ASK_STEPS_BEFORE_THE_ANSWER,
        _ => 0,
    };
    FakeApiArgs {
        script: recorded,
        served,
    }
}

pub(super) fn batch_containers(
    config_path: Option<&Path>,
    repo: &Path,
    r: &RepoArgs,
    batch_id: &str,
) -> Option<RunnerKind> {
    let config = load_config(config_path).ok()?;
    let reg = registry(&config).ok()?;
    let engine = Engine::new(config, reg);
    let store = engine.store(repo, r.runs_dir.as_deref());
    let spec = store.open_batch(batch_id).and_then(|b| b.spec()).ok()?;
    container_kind(spec.tasks.iter().filter_map(|t| {
        let provider = t.provider.as_deref().unwrap_or(&spec.provider);
        match engine.registry().get(provider) {
            Ok(p) => Some(engine.runner_kind(t, &p)),
            Err(_) => t.runner,
        }
    }))
}

/// The container runner among `kinds`, if any: the swarm when any is (its jobs reach
/// aicli at the manager's address, which is what `--fake-api` then serves on), else
/// Docker.
pub(super) fn container_kind(kinds: impl IntoIterator<Item = RunnerKind>) -> Option<RunnerKind> {
    kinds
        .into_iter()
        .filter(|k| k.is_container())
        .max_by_key(|k| *k == RunnerKind::Swarm)
}
