//! `aicli run`: one task, its progress, a summary.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::BatchOptions;
use crate::providers::{PermissionMode, RunnerKind, TaskSpec};
use anyhow::bail;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{ctrl_c_cancels, finish, parse_runner, start_engine, task_repo, worktree_base};
use super::fake::FakeApiArgs;

/// `aicli run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt; `-` reads it from stdin (it is then in no process's arguments, and
    /// has no shell limit on its length).
    #[arg(
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from this file.
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<std::path::PathBuf>,
    /// The provider (default: the config's default_provider).
    #[arg(long, short)]
    pub provider: Option<String>,
    /// The model.
    #[arg(long, short)]
    pub model: Option<String>,
    /// Wall-clock limit, seconds (at least 1).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = super::common::positive_secs)]
    pub timeout: Option<u64>,
    /// Idle limit (no output), seconds (at least 1).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true, value_parser = super::common::positive_secs)]
    pub idle_timeout: Option<u64>,
    /// Turn limit.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Dollar limit.
    #[arg(long, value_name = "USD", allow_hyphen_values = true)]
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
    /// A credential the agent may read through the MCP server's getCredential
    /// (repeatable; the CLI's environment never carries it).
    #[arg(long, value_name = "NAME")]
    pub credential: Vec<String>,
    /// A tool of the config's `mcp_tools`, or an upstream of its `mcp_upstreams`, the
    /// agent may call through aicli's MCP server (repeatable; besides `engine.mcp_tools`).
    #[arg(long = "mcp-tool", value_name = "NAME")]
    pub mcp_tool: Vec<String>,
    /// Carry the repository's uncommitted changes and untracked files into the task's
    /// worktree (as a commit on the task's branch); without it the task starts from HEAD.
    #[arg(long)]
    pub include_uncommitted: bool,
    /// Where the CLI runs: `local` (a child process), `docker` (a container; see
    /// engine.docker in the config) or `swarm` (a Docker Swarm job). Default: the
    /// provider's, else engine.runner.
    #[arg(long, value_name = "RUNNER", value_parser = parse_runner)]
    pub runner: Option<RunnerKind>,
    /// What the CLI may do without asking: plan, default, accept_edits, sandbox (edits and
    /// commands, confined to the worktree; the default) or bypass (anything, unconfined).
    /// docs/permissions.md has what each means for each CLI.
    #[arg(long, value_name = "MODE", value_parser = super::common::parse_permission_mode)]
    pub permission_mode: Option<PermissionMode>,
    #[command(flatten)]
    pub fake: FakeApiArgs,
}

/// The most of a prompt read from stdin or a file, bytes: past the engine's own limit
/// (`engine.max_prompt_bytes`, which then refuses it, naming it), never unbounded.
const MAX_PROMPT_READ: u64 = 64 << 20;

/// The prompt: the argument, stdin for `-`, or `--prompt-file`.
fn prompt_of(a: &RunArgs) -> anyhow::Result<String> {
    use std::io::Read;
    let usage = super::common::usage;
    let (mut reader, what): (Box<dyn Read>, String) = match (&a.prompt, &a.prompt_file) {
        (Some(p), None) if p != "-" => return Ok(p.clone()),
        (Some(_), None) => (Box::new(std::io::stdin()), "the prompt on stdin".to_owned()),
        (_, Some(f)) => {
            let file = std::fs::File::open(f)
                .map_err(|e| usage(format!("--prompt-file {}: {e}", f.display())))?;
            (Box::new(file), format!("--prompt-file {}", f.display()))
        }
        (None, None) => {
            return Err(usage(
                "give the prompt, `-` (stdin) or --prompt-file FILE".to_owned(),
            ));
        }
    };
    let mut buf = Vec::new();
    reader
        .by_ref()
        .take(MAX_PROMPT_READ + 1)
        .read_to_end(&mut buf)
        .map_err(|e| usage(format!("cannot read {what}: {e}")))?;
    if buf.len() as u64 > MAX_PROMPT_READ {
        return Err(usage(format!(
            "{what} is over {} MiB",
            MAX_PROMPT_READ >> 20
        )));
    }
    let text = String::from_utf8(buf).map_err(|_| usage(format!("{what} is not UTF-8")))?;
    if text.trim().is_empty() {
        return Err(usage(format!("{what} is empty")));
    }
    Ok(text)
}

pub(super) async fn run(
    config_path: Option<&Path>,
    r: RepoArgs,
    a: RunArgs,
) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let prompt = prompt_of(&a)?;
    let repo = task_repo(&r, !a.no_worktree).await?;
    let cancel = CancellationToken::new();
    let docker = super::common::container_kind(a.runner);
    // The config and --fake-api are checked (in starting the engine) before the
    // repository's state is warned about.
    let running = start_engine(config_path, &repo, a.no_mcp, &a.fake, docker, &cancel).await?;
    if let Some((_, m)) = running.engine.config().unknown_mcp_grant(&a.mcp_tool) {
        running.stop();
        return Err(super::common::usage(format!("--mcp-tool: {m}")));
    }
    let base = if a.no_worktree {
        None
    } else {
        match worktree_base(&repo, a.include_uncommitted).await {
            Ok(b) => Some(b),
            Err(e) => {
                running.stop();
                return Err(e);
            }
        }
    };
    // Each run is a batch of its own; its task gets an id of its own too, so answers and
    // hints can name it alone.
    let batch_id = crate::util::new_batch_id();
    let task = TaskSpec {
        id: format!("run-{}", batch_id.rsplit('-').next().unwrap_or("0")),
        prompt,
        model: a.model.clone(),
        max_turns: a.max_turns,
        max_budget_usd: a.budget,
        credentials: a.credential.clone(),
        mcp_tools: a.mcp_tool.clone(),
        permission_mode: a.permission_mode,
        ..TaskSpec::default()
    };
    let mut opts = BatchOptions::new(repo);
    opts.batch_id = Some(batch_id);
    opts.provider = a.provider.clone();
    opts.timeout = a.timeout.map(Duration::from_secs);
    opts.idle_timeout = a.idle_timeout.map(Duration::from_secs);
    opts.runs_dir = r.runs_dir.clone();
    opts.fake_api = a.fake.script.clone();
    opts.worktrees = !a.no_worktree;
    opts.runner = a.runner;
    if let Some(b) = base {
        opts.base_ref = b;
    }
    let prepared = running
        .prepare_images(std::slice::from_ref(&task), &opts, Into::into)
        .await;
    if let Err(e) = prepared {
        running.stop();
        return Err(e);
    }
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), true);
    let printer = super::printer::spawn(rx, a.json, cancel.clone());
    let result = running.engine.run_batch(vec![task], opts, tx, cancel).await;
    running.stop();
    let mut printer = printer.await?;
    let batch = result?;
    let Some(r) = batch.tasks.first() else {
        bail!("the run produced no result");
    };
    printer.result(r, Some(&batch.batch_id), started.elapsed())?;
    Ok(finish(r))
}
