//! `aicli batch`: a tasks file in parallel with the live display.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::BatchOptions;
use crate::cli::tasks_file::TasksFile;
use crate::providers::RunnerKind;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{
    ctrl_c_cancels, parse_runner, print_batch, start_engine, task_repo, usage, worktree_base,
};
use super::fake::FakeApiArgs;

/// `aicli batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The tasks file (a JSON array of tasks, or {"tasks": [...], ...}).
    #[arg(required_unless_present = "resume")]
    pub tasks: Option<PathBuf>,
    /// Finish an interrupted batch instead of starting one.
    #[arg(long, value_name = "BATCH_ID", conflicts_with = "tasks")]
    pub resume: Option<String>,
    /// Sessions at once (at least 1).
    #[arg(long, allow_negative_numbers = true, value_parser = super::common::positive_count)]
    pub max_parallel: Option<usize>,
    /// Batch budget, USD.
    #[arg(long, value_name = "USD", allow_hyphen_values = true)]
    pub budget: Option<f64>,
    /// The provider for tasks that name none.
    #[arg(long, short)]
    pub provider: Option<String>,
    /// Wall-clock limit per task, seconds (at least 1).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = super::common::positive_secs)]
    pub timeout: Option<u64>,
    /// Idle limit per task, seconds (at least 1).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = super::common::positive_secs)]
    pub idle_timeout: Option<u64>,
    /// Print the batch result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Do not start aicli's MCP server for the batch.
    #[arg(long)]
    pub no_mcp: bool,
    /// Carry the repository's uncommitted changes and untracked files into each task's
    /// worktree (as a commit on the task's branch); without it tasks start from HEAD.
    #[arg(long)]
    pub include_uncommitted: bool,
    /// Where tasks that name no runner run: `local`, `docker` or `swarm` (over the tasks file's
    /// `runner`, the provider's and engine.runner).
    #[arg(long, value_name = "RUNNER", value_parser = parse_runner)]
    pub runner: Option<RunnerKind>,
    /// The permission mode of tasks that name none (over the providers' own): plan,
    /// default, accept_edits, sandbox or bypass (docs/permissions.md).
    #[arg(long, value_name = "MODE", value_parser = super::common::parse_permission_mode)]
    pub permission_mode: Option<crate::providers::PermissionMode>,
    /// Serve the web view of the repository's runs while the batch runs, on ADDR
    /// (default: loopback, a free port); its URL, with a one-time login token, is the
    /// first line on stderr.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub web: Option<std::net::SocketAddr>,
    /// The new batch's id (default: a new one from the time); refused when the runs
    /// directory holds a batch of that id.
    #[arg(long, value_name = "ID", conflicts_with = "resume")]
    pub batch_id: Option<String>,
    #[command(flatten)]
    pub fake: FakeApiArgs,
}

pub(super) async fn batch(
    config_path: Option<&Path>,
    r: RepoArgs,
    a: BatchArgs,
) -> anyhow::Result<ExitCode> {
    let tasks_path = match (&a.tasks, &a.resume) {
        (_, Some(id)) => {
            return super::resume::resume(config_path, id, a.json, a.no_mcp, a.fake.clone(), r)
                .await;
        }
        (Some(t), None) => t.clone(),
        (None, None) => return Err(usage("give a tasks file, or --resume BATCH_ID")),
    };
    let mut file = TasksFile::load(&tasks_path).map_err(usage)?;
    if let Some(mode) = a.permission_mode {
        for t in file
            .tasks
            .iter_mut()
            .filter(|t| t.permission_mode.is_none())
        {
            t.permission_mode = Some(mode);
        }
    }
    let r = match (&r.repo, &file.repo) {
        (None, Some(dir)) => RepoArgs {
            repo: Some(
                tasks_path
                    .parent()
                    .map(|p| p.join(dir))
                    .unwrap_or_else(|| dir.clone()),
            ),
            runs_dir: r.runs_dir.clone(),
        },
        _ => r,
    };
    let repo = task_repo(&r, true).await?;
    let cancel = CancellationToken::new();
    let runner = a.runner.or(file.runner);
    let docker = super::common::container_kind(
        runner
            .into_iter()
            .chain(file.tasks.iter().filter_map(|t| t.runner)),
    );
    let running = start_engine(config_path, &repo, a.no_mcp, &a.fake, docker, &cancel).await?;
    // Warned about once the config and --fake-api are known good.
    let base = match worktree_base(&repo, a.include_uncommitted).await {
        Ok(b) => b,
        Err(e) => {
            running.stop();
            return Err(e);
        }
    };
    // Every task is checked by the engine, once, before anything runs; its errors are
    // given with the file's name (below).
    let default = a
        .provider
        .clone()
        .or(file.provider.clone())
        .unwrap_or_else(|| running.engine.config().default_provider.clone());
    let mut opts = BatchOptions::new(repo);
    opts.runner = runner;
    opts.provider = a.provider.clone().or(file.provider.clone());
    opts.max_parallel = a.max_parallel.or(file.max_parallel);
    opts.budget_usd = a.budget.or(file.budget_usd);
    opts.timeout = a.timeout.map(Duration::from_secs);
    opts.idle_timeout = a.idle_timeout.map(Duration::from_secs);
    opts.runs_dir = r.runs_dir.clone();
    opts.fake_api = a.fake.script.clone();
    opts.base_ref = base;
    opts.batch_id = a.batch_id.clone();
    let prepared = running
        .prepare_images(&file.tasks, &opts, |e| file_error(e, &a, &tasks_path))
        .await;
    if let Err(e) = prepared {
        running.stop();
        return Err(e);
    }
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), false);
    let providers: Vec<String> = file
        .tasks
        .iter()
        .map(|t| t.provider.clone().unwrap_or_else(|| default.clone()))
        .collect();
    let web = match a.web {
        Some(bind) => Some(serve_web(config_path, &running.engine, &opts, &a, bind).await?),
        None => None,
    };
    let display_opts = super::progress::DisplayOptions::new(&providers, cancel.clone());
    let display = tokio::spawn(super::progress::run(rx, display_opts));
    let result = running.engine.run_batch(file.tasks, opts, tx, cancel).await;
    if let Some(w) = web {
        w.stop().await;
    }
    running.stop();
    let _ = display.await;
    let result = result.map_err(|e| file_error(e, &a, &tasks_path))?;
    print_batch(&result, a.json)
}

/// A batch's error in the words of what gave the wrong value: a batch option names its
/// flag when the flag gave it, else the tasks file's key; a task's error names its JSON
/// path in the file (the engine's says `task N (id)`).
fn file_error(e: crate::EngineError, a: &BatchArgs, tasks_path: &Path) -> anyhow::Error {
    let from_flags = [
        ("budget_usd", a.budget.is_some(), "--budget"),
        ("max_parallel", a.max_parallel.is_some(), "--max-parallel"),
        ("timeout", a.timeout.is_some(), "--timeout"),
        ("idle_timeout", a.idle_timeout.is_some(), "--idle-timeout"),
    ];
    match e {
        crate::EngineError::InvalidOption { option, message } => {
            match from_flags
                .iter()
                .find(|(o, given, _)| *o == option && *given)
            {
                Some((_, _, flag)) => usage(format!("{flag}: {message}")),
                None => usage(format!("{}: {option}: {message}", tasks_path.display())),
            }
        }
        crate::EngineError::InvalidTask { index, message, .. } => usage(format!(
            "{}: at tasks[{}].{message}",
            tasks_path.display(),
            index - 1
        )),
        crate::EngineError::NoTasks => usage(format!("{}: {e}", tasks_path.display())),
        other => other.into(),
    }
}

/// The web view of the batch's repository, served while the batch runs (`--web`); its
/// URL goes to stderr (stdout is the result's).
async fn serve_web(
    config_path: Option<&Path>,
    engine: &crate::Engine,
    opts: &BatchOptions,
    a: &BatchArgs,
    bind: std::net::SocketAddr,
) -> anyhow::Result<crate::WebServer> {
    if !bind.ip().is_loopback() {
        return Err(usage(format!(
            "--web {bind}: not a loopback address; `aicli batch --web` serves loopback only. To serve the runs elsewhere, run `aicli web --bind {bind} --allow-remote` beside the batch"
        )));
    }
    let store = engine.store(&opts.repo, opts.runs_dir.as_deref());
    let launcher = crate::web::Launcher::current(
        config_path,
        &opts.repo,
        opts.runs_dir.as_deref(),
        a.fake.script.clone(),
    )
    .map_err(|e| usage(format!("cannot find this aicli's executable: {e}")))?;
    let web_opts = crate::WebOptions {
        bind,
        launcher: Some(launcher),
        ..crate::WebOptions::default()
    };
    let server = crate::WebServer::start(engine.clone(), store, web_opts)
        .await
        .map_err(usage)?;
    eprintln!("{}", server.url());
    eprintln!(
        "aicli batch --web: the URL above is the web view while the batch runs (it logs one browser in, once; `aicli web --link` prints a fresh one); {}",
        super::web::token_line(&server)
    );
    Ok(server)
}
