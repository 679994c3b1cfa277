//! `aicli run`: one task, its progress, a summary.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use aicli::providers::{RunnerKind, TaskSpec};
use aicli::{BatchEvent, BatchOptions};
use anyhow::bail;
use clap::Args;
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::common::{ctrl_c_cancels, engine_with_mcp, finish, parse_runner, repo_dir, stop_mcp};
use super::{RepoArgs, output};

/// `aicli run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// The provider (default: the config's default_provider).
    #[arg(long, short)]
    pub provider: Option<String>,
    /// The model.
    #[arg(long, short)]
    pub model: Option<String>,
    /// Wall-clock limit, seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Idle limit (no output), seconds.
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Turn limit.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Dollar limit.
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    /// Run in the repository itself instead of a new worktree.
    #[arg(long)]
    pub no_worktree: bool,
    /// Print normalized events as NDJSON (and the result as the last line).
    #[arg(long)]
    pub json: bool,
    /// Do not start aicli's MCP server for the run.
    #[arg(long)]
    pub no_mcp: bool,
    /// Where the CLI runs: `local` (a child process) or `docker` (a container; see
    /// engine.docker in the config). Default: the provider's, else engine.runner.
    #[arg(long, value_name = "RUNNER", value_parser = parse_runner)]
    pub runner: Option<RunnerKind>,
    #[command(flatten)]
    pub repo: RepoArgs,
}

pub(super) async fn run(config_path: Option<&Path>, a: RunArgs) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&a.repo)?;
    let cancel = CancellationToken::new();
    let docker = a.runner == Some(RunnerKind::Docker);
    let (engine, mcp) = engine_with_mcp(config_path, &repo, a.no_mcp, docker, &cancel).await?;
    let task = TaskSpec {
        id: "run".to_owned(),
        prompt: a.prompt.clone(),
        model: a.model.clone(),
        max_turns: a.max_turns,
        max_budget_usd: a.budget,
        ..TaskSpec::default()
    };
    let mut opts = BatchOptions::new(repo);
    opts.provider = a.provider.clone();
    opts.timeout = a.timeout.map(Duration::from_secs);
    opts.idle_timeout = a.idle_timeout.map(Duration::from_secs);
    opts.runs_dir = a.repo.runs_dir.clone();
    opts.worktrees = !a.no_worktree;
    opts.runner = a.runner;
    let (tx, mut rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let json = a.json;
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        let mut last_delta = false;
        loop {
            let ev = match rx.recv().await {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("aicli: {n} events were not shown (display too slow)");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => break,
            };
            let BatchEvent::Agent { event, .. } = ev else {
                continue;
            };
            if json {
                if let Ok(line) = serde_json::to_string(&event) {
                    let _ = writeln!(stdout, "{line}");
                }
                continue;
            }
            let is_delta = matches!(
                &event.kind,
                aicli::providers::EventKind::AssistantText { delta: true, .. }
            );
            if let Some(line) = output::event_line(&event) {
                if is_delta {
                    let _ = write!(stdout, "{line}");
                } else {
                    if last_delta {
                        let _ = writeln!(stdout);
                    }
                    let _ = writeln!(stdout, "{line}");
                }
                last_delta = is_delta;
                let _ = stdout.flush();
            }
        }
        if last_delta {
            let _ = writeln!(stdout);
        }
    });
    let result = engine.run_batch(vec![task], opts, tx, cancel).await;
    stop_mcp(mcp);
    let _ = printer.await;
    let batch = result?;
    let Some(r) = batch.tasks.first() else {
        bail!("the run produced no result");
    };
    if a.json {
        let mut v = serde_json::to_value(r)?;
        if let Some(m) = v.as_object_mut() {
            m.insert("type".into(), json!("session_result"));
        }
        println!("{v}");
    } else {
        println!("{}", output::summary(r));
    }
    Ok(finish(r))
}
