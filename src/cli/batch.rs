//! `aicli batch`: a tasks file in parallel with the live display.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aicli::providers::RunnerKind;
use aicli::tasks_file::TasksFile;
use aicli::{BatchEvent, BatchOptions};
use anyhow::bail;
use clap::Args;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{
    ctrl_c_cancels, engine_with_mcp, parse_runner, print_batch, repo_dir, stop_mcp,
};
use super::exit::Failure;

/// `aicli batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The tasks file (a JSON array of tasks, or {"tasks": [...], ...}).
    #[arg(required_unless_present = "resume")]
    pub tasks: Option<PathBuf>,
    /// Finish an interrupted batch instead of starting one.
    #[arg(long, value_name = "BATCH_ID", conflicts_with = "tasks")]
    pub resume: Option<String>,
    /// Sessions at once.
    #[arg(long)]
    pub max_parallel: Option<usize>,
    /// Batch budget, USD.
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    /// The provider for tasks that name none.
    #[arg(long, short)]
    pub provider: Option<String>,
    /// Wall-clock limit per task, seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Idle limit per task, seconds.
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Print the batch result as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Do not start aicli's MCP server for the batch.
    #[arg(long)]
    pub no_mcp: bool,
    /// Where tasks that name no runner run: `local` or `docker` (over the tasks file's
    /// `runner`, the provider's and engine.runner).
    #[arg(long, value_name = "RUNNER", value_parser = parse_runner)]
    pub runner: Option<RunnerKind>,
    #[command(flatten)]
    pub repo: RepoArgs,
}

pub(super) async fn batch(config_path: Option<&Path>, a: BatchArgs) -> anyhow::Result<ExitCode> {
    let tasks_path = match (&a.tasks, &a.resume) {
        (_, Some(id)) => {
            return super::resume::resume(config_path, id, a.json, a.no_mcp, a.repo.clone()).await;
        }
        (Some(t), None) => t.clone(),
        (None, None) => bail!("give a tasks file, or --resume BATCH_ID"),
    };
    let file = TasksFile::load(&tasks_path).map_err(|m| Failure {
        kind: None,
        message: m,
    })?;
    let repo = match (&a.repo.repo, &file.repo) {
        (Some(r), _) => r.clone(),
        (None, Some(r)) => tasks_path
            .parent()
            .map(|p| p.join(r))
            .unwrap_or_else(|| r.clone()),
        (None, None) => repo_dir(&a.repo)?,
    };
    let cancel = CancellationToken::new();
    let runner = a.runner.or(file.runner);
    let docker = runner == Some(RunnerKind::Docker)
        || file
            .tasks
            .iter()
            .any(|t| t.runner == Some(RunnerKind::Docker));
    let (engine, mcp) = engine_with_mcp(config_path, &repo, a.no_mcp, docker, &cancel).await?;
    let mut opts = BatchOptions::new(repo);
    opts.runner = runner;
    opts.provider = a.provider.clone().or(file.provider.clone());
    opts.max_parallel = a.max_parallel.or(file.max_parallel);
    opts.budget_usd = a.budget.or(file.budget_usd);
    opts.timeout = a.timeout.map(Duration::from_secs);
    opts.idle_timeout = a.idle_timeout.map(Duration::from_secs);
    opts.runs_dir = a.repo.runs_dir.clone();
    let n = file.tasks.len();
    let (tx, rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let display = tokio::spawn(super::progress::run(rx, n));
    let result = engine.run_batch(file.tasks, opts, tx, cancel).await;
    stop_mcp(mcp);
    let _ = display.await;
    print_batch(&result?, a.json)
}
