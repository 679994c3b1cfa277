//! The subcommands.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::replay;
use aicli::providers::{
    AuthStatus, CommandSpec, Feature, ParseContext, RunnerKind, SessionResult, SessionStatus,
    TaskSpec,
};
use aicli::store::{RunStore, read_range};
use aicli::tasks_file::TasksFile;
use aicli::worktree::{Cleanup, Repo};
use aicli::{BatchEvent, BatchOptions, Engine};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::exit::{BLOCKED, Failure, kind_code};
use super::{Cli, Command, RepoArgs, load_config, output, registry};

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

/// `--runner`'s values.
fn parse_runner(s: &str) -> Result<RunnerKind, String> {
    RunnerKind::parse(s).ok_or_else(|| format!("'{s}' is not a runner: use local or docker"))
}

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

/// `aicli parse`.
#[derive(Debug, Args)]
pub struct ParseArgs {
    /// The transcript (NDJSON as the CLI printed it), or a run record's task directory.
    pub file: PathBuf,
    /// The provider whose format it is (read from the record when FILE is one).
    #[arg(long, short)]
    pub provider: Option<String>,
    /// The CLI's stderr.
    #[arg(long, value_name = "FILE")]
    pub stderr: Option<PathBuf>,
    /// The CLI's exit code.
    #[arg(long)]
    pub exit_code: Option<i32>,
    /// The model the run asked for (for cost estimates).
    #[arg(long)]
    pub model: Option<String>,
    /// Print the normalized events as NDJSON instead of the result.
    #[arg(long)]
    pub events: bool,
    /// With a run record: which attempt (default: the last).
    #[arg(long)]
    pub attempt: Option<u32>,
}

/// `aicli serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to bind (default: the config's, 127.0.0.1:0).
    #[arg(long)]
    pub bind: Option<String>,
    /// Skills the token may read (repeatable).
    #[arg(long = "skill", value_name = "NAME")]
    pub skills: Vec<String>,
    /// Credential names the token may read (repeatable).
    #[arg(long = "credential", value_name = "NAME")]
    pub credentials: Vec<String>,
    /// The workspace `getWorkspaceFiles` serves (default: the repository).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub repo: RepoArgs,
}

/// `aicli record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The prompt.
    pub prompt: String,
    /// The provider whose CLI to run.
    #[arg(long, short)]
    pub provider: String,
    /// The fixture's name (`fixtures/<provider>/<scenario>.*`).
    #[arg(long)]
    pub scenario: String,
    /// Run against a fake model API on loopback instead of the real one: `text`,
    /// `text:TEXT`, `shell:COMMAND`, `mcp:SERVER/TOOL`, `error:STATUS`, `drop`.
    #[arg(long, value_name = "SCRIPT")]
    pub fake: Option<String>,
    /// The model.
    #[arg(long, short)]
    pub model: Option<String>,
    /// Permission mode (plan, default, accept_edits, bypass).
    #[arg(long)]
    pub permission_mode: Option<String>,
    /// Tools allowed without asking (repeatable).
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub allowed_tools: Vec<String>,
    /// Where fixtures go.
    #[arg(long, default_value = "fixtures", value_name = "DIR")]
    pub out: PathBuf,
    /// Wall-clock limit, seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Extra arguments for the CLI (after `--`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// `aicli runs ...`.
#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Show one batch: its tasks, results, questions and answers.
    Show {
        /// The batch id.
        id: String,
    },
}

/// `aicli worktrees ...`.
#[derive(Debug, Subcommand)]
pub enum WorktreesAction {
    /// Remove every aicli worktree (and branch) that holds no work.
    Prune,
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let config_path = cli.config.clone();
    match cli.command {
        Command::Run(a) => run(config_path.as_deref(), a).await,
        Command::Batch(a) => batch(config_path.as_deref(), a).await,
        Command::Providers { json } => providers(config_path.as_deref(), json, true).await,
        Command::Status { json } => providers(config_path.as_deref(), json, false).await,
        Command::Login { provider } => login(config_path.as_deref(), &provider).await,
        Command::Parse(a) => parse(config_path.as_deref(), a),
        Command::Runs { repo, json, action } => runs(config_path.as_deref(), repo, json, action),
        Command::Worktrees { repo, json, action } => worktrees(repo, json, action).await,
        Command::Serve(a) => serve(config_path.as_deref(), a).await,
        Command::Doctor {
            fixtures,
            strict,
            json,
        } => doctor(config_path.as_deref(), fixtures, strict, json).await,
        Command::Record(a) => record(config_path.as_deref(), a).await,
        Command::Answer {
            task,
            answer: text,
            json,
            no_mcp,
            repo,
        } => answer(config_path.as_deref(), &task, &text, json, no_mcp, repo).await,
        Command::Blocked { repo, json } => blocked(config_path.as_deref(), repo, json),
        Command::Resume {
            batch_id,
            json,
            no_mcp,
            repo,
        } => resume(config_path.as_deref(), &batch_id, json, no_mcp, repo).await,
        Command::Schema { out } => schema(&out),
        Command::Image { action } => {
            super::image::run(&load_config(config_path.as_deref())?, action).await
        }
        Command::Containers { json, action } => {
            super::containers::run(&load_config(config_path.as_deref())?, json, action).await
        }
    }
}

/// The repository a command is about: `--repo`, else the current directory, raised to
/// the top of its git repository (where run records and worktrees live) when it is in
/// one.
fn repo_dir(r: &RepoArgs) -> anyhow::Result<PathBuf> {
    let dir = match &r.repo {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let top = std::process::Command::new("git")
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

fn ctrl_c_cancels(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\naicli: cancelling (records are kept)…");
            cancel.cancel();
        }
    });
}

fn engine(config_path: Option<&Path>) -> anyhow::Result<Engine> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    Ok(Engine::new(config, reg))
}

/// The engine with aicli's MCP server attached (unless disabled in the config or with
/// `--no-mcp`). The server lives until `cancel` or until the returned handle is shut down.
async fn engine_with_mcp(
    config_path: Option<&Path>,
    repo: &Path,
    no_mcp: bool,
    containers: bool,
    cancel: &CancellationToken,
) -> anyhow::Result<(Engine, Option<Arc<McpServer>>)> {
    let engine = engine(config_path)?;
    if no_mcp || !engine.config().engine.mcp.enabled {
        return Ok((engine, None));
    }
    let mut opts = McpServerOptions::from_config(&engine.config().engine, repo);
    if containers || aicli::runner::docker::config_uses_docker(engine.config()) {
        // Containers name aicli's machine host.docker.internal (or a configured address).
        opts.allowed_hosts
            .extend(aicli::runner::docker::container_hosts(&engine.config().engine.docker));
    }
    let server = Arc::new(McpServer::start(opts, cancel.child_token()).await?);
    tracing::info!(url = %server.url(), "agent MCP server listening");
    Ok((engine.with_agent_server(server.clone()), Some(server)))
}

/// Whether a recorded batch has tasks that run in containers (its MCP server must then
/// accept the name containers reach it under).
fn batch_uses_docker(config_path: Option<&Path>, repo: &Path, r: &RepoArgs, batch_id: &str) -> bool {
    let Ok(engine) = engine(config_path) else {
        return false;
    };
    let store = engine.store(repo, r.runs_dir.as_deref());
    let Ok(spec) = store.open_batch(batch_id).and_then(|b| b.spec()) else {
        return false;
    };
    spec.tasks.iter().any(|t| {
        let provider = t.provider.as_deref().unwrap_or(&spec.provider);
        match engine.registry().get(provider) {
            Ok(p) => engine.runner_kind(t, &p) == RunnerKind::Docker,
            Err(_) => t.runner == Some(RunnerKind::Docker),
        }
    })
}

fn stop_mcp(server: Option<Arc<McpServer>>) {
    if let Some(s) = server {
        s.cancellation_token().cancel();
    }
}

fn finish(result: &SessionResult) -> ExitCode {
    match result.status {
        SessionStatus::Succeeded => ExitCode::SUCCESS,
        SessionStatus::Blocked => ExitCode::from(BLOCKED),
        SessionStatus::Failed | SessionStatus::Interrupted => {
            ExitCode::from(result.error_kind.map(kind_code).unwrap_or(1))
        }
    }
}

async fn run(config_path: Option<&Path>, a: RunArgs) -> anyhow::Result<ExitCode> {
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

async fn batch(config_path: Option<&Path>, a: BatchArgs) -> anyhow::Result<ExitCode> {
    let tasks_path = match (&a.tasks, &a.resume) {
        (_, Some(id)) => return resume(config_path, id, a.json, a.no_mcp, a.repo.clone()).await,
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
        || file.tasks.iter().any(|t| t.runner == Some(RunnerKind::Docker));
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

fn print_batch(b: &aicli::BatchResult, json_out: bool) -> anyhow::Result<ExitCode> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(b)?);
    } else {
        println!("{}", output::batch_table(b));
    }
    Ok(if b.n_failed > 0 {
        ExitCode::from(1)
    } else if b.n_blocked > 0 {
        ExitCode::from(BLOCKED)
    } else {
        ExitCode::SUCCESS
    })
}

async fn resume(
    config_path: Option<&Path>,
    batch_id: &str,
    json_out: bool,
    no_mcp: bool,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    let docker = batch_uses_docker(config_path, &repo, &r, batch_id);
    let (engine, mcp) = engine_with_mcp(config_path, &repo, no_mcp, docker, &cancel).await?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let spec = store
        .open_batch(batch_id)
        .and_then(|b| b.spec())
        .map_err(|m| Failure {
            kind: None,
            message: m,
        })?;
    let (tx, rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let display = tokio::spawn(super::progress::run(rx, spec.tasks.len()));
    let result = engine.resume_batch(&store, batch_id, tx, cancel).await;
    stop_mcp(mcp);
    let _ = display.await;
    print_batch(&result?, json_out)
}

async fn answer(
    config_path: Option<&Path>,
    task: &str,
    text: &str,
    json_out: bool,
    no_mcp: bool,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    let batch_id = task.split_once('/').map(|(b, _)| b).unwrap_or_default();
    let docker = batch_id.is_empty() || batch_uses_docker(config_path, &repo, &r, batch_id);
    let (engine, mcp) = engine_with_mcp(config_path, &repo, no_mcp, docker, &cancel).await?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let (tx, mut rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let printer = tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(BatchEvent::Agent { event, .. }) if !json_out => {
                    if let Some(line) = output::event_line(&event) {
                        println!("{line}");
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    let result = engine.answer(&store, task, text, tx, cancel).await;
    stop_mcp(mcp);
    let _ = printer.await;
    let r = result?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        if let Some(c) = &r.continuation {
            println!("({})", c.reason);
        }
        println!("{}", output::summary(&r));
    }
    Ok(finish(&r))
}

fn blocked(config_path: Option<&Path>, r: RepoArgs, json_out: bool) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let list = engine.blocked(&store);
    if json_out {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!("no blocked tasks in {}", store.root().display());
    }
    let now = std::time::SystemTime::now();
    for b in list {
        let age = humantime::parse_rfc3339(&b.question.asked_at)
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string())
            .unwrap_or_else(|| "?".into());
        println!(
            "{}/{} ({}) asked {age} ago:",
            b.batch_id, b.task_id, b.provider
        );
        println!("  {}", b.question.question);
        if !b.question.options.is_empty() {
            println!("  options: {}", b.question.options.join(" / "));
        }
        println!(
            "  answer with: aicli answer {}/{} \"...\"",
            b.batch_id, b.task_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn providers(
    config_path: Option<&Path>,
    json_out: bool,
    details: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let mut rows = Vec::new();
    for p in reg.providers() {
        let bin = p.binary_path(None);
        let mut row = json!({
            "name": p.name(),
            "package": p.package_name(),
            "binary": bin.as_ref().map(|b| b.describe()).ok(),
            "installed": bin.is_ok(),
        });
        if let Err(e) = &bin {
            row["problem"] = json!(e.to_string());
        }
        if let Ok(b) = &bin {
            let cwd = std::env::temp_dir();
            if details {
                let mut c = CommandSpec::new(b, &cwd);
                c.args(p.config().version_argv.iter().cloned());
                let out = aicli::process::run_capture(&c, Duration::from_secs(20)).await;
                row["version"] = json!(out.ok().and_then(|o| p.parse_version(&o.stdout)));
                row["pinned_version"] = json!(p.config().version);
            }
            let status = match p.auth_status_argv() {
                Some(argv) => {
                    let mut c = CommandSpec::new(b, &cwd);
                    c.args(argv);
                    match aicli::process::run_capture(&c, Duration::from_secs(20)).await {
                        Ok(o) if o.timed_out => AuthStatus::Unknown {
                            detail: "the status probe timed out".into(),
                        },
                        Ok(o) => p.parse_auth_status(&o.stdout, &o.stderr, o.exit_code),
                        Err(e) => AuthStatus::Unknown {
                            detail: e.to_string(),
                        },
                    }
                }
                None => {
                    let env: std::collections::BTreeMap<String, String> =
                        std::env::vars().collect();
                    let home = PathBuf::from(env.get("HOME").cloned().unwrap_or_default());
                    match p.auth_precheck(&env, &home, &p.config().extra_args).await {
                        Some(msg) => AuthStatus::LoggedOut { hint: msg },
                        None => AuthStatus::Unknown {
                            detail: "the CLI has no status command; credentials seem present"
                                .into(),
                        },
                    }
                }
            };
            row["auth"] = serde_json::to_value(&status)?;
        }
        if details {
            let features: Vec<&str> = Feature::ALL
                .into_iter()
                .filter(|f| p.supports(*f))
                .map(Feature::as_str)
                .collect();
            row["features"] = json!(features);
            row["default"] = json!(reg.default_provider() == Some(p.name()));
        }
        rows.push(row);
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    for r in &rows {
        let name = r["name"].as_str().unwrap_or_default();
        let auth = match r["auth"]["state"].as_str() {
            Some("logged_in") => "logged in".to_owned(),
            Some("logged_out") => format!(
                "NOT logged in ({})",
                r["auth"]["hint"].as_str().unwrap_or_default()
            ),
            Some(_) => format!(
                "auth unknown ({})",
                r["auth"]["detail"].as_str().unwrap_or_default()
            ),
            None => "-".to_owned(),
        };
        if r["installed"].as_bool() == Some(true) {
            println!("{name}: {}", r["binary"].as_str().unwrap_or_default());
            if details {
                println!(
                    "  version {} (pinned {})",
                    r["version"].as_str().unwrap_or("?"),
                    r["pinned_version"].as_str().unwrap_or("-")
                );
            }
            println!("  {auth}");
        } else {
            println!(
                "{name}: {}",
                r["problem"].as_str().unwrap_or("not installed")
            );
        }
        if details {
            let f: Vec<&str> = r["features"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            println!("  features: {}", f.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn login(config_path: Option<&Path>, provider: &str) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let p = reg.get(provider)?;
    let argv = p.login_argv();
    if argv.is_empty() {
        bail!(
            "{provider} has no login command; set its API key in the environment (see `aicli status`)"
        );
    }
    let bin = p.binary_path(None)?;
    let (program, mut args) = bin.command_prefix();
    args.extend(argv);
    // Interactive: the CLI gets our terminal.
    let status = tokio::process::Command::new(program)
        .args(&args)
        .kill_on_drop(true)
        .status()
        .await?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

fn parse(config_path: Option<&Path>, a: ParseArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    // A run record's task directory (or its events.ndjson) carries its own context.
    let task_dir = if a.file.is_dir() {
        Some(a.file.clone())
    } else if a.file.file_name().is_some_and(|n| n == "events.ndjson")
        && a.file.with_file_name("task.json").is_file()
    {
        a.file.parent().map(Path::to_path_buf)
    } else {
        None
    };
    let (provider_name, stdout, stderr, exit_code, ctx) = if let Some(dir) = task_dir {
        let rec: aicli::store::TaskRecord =
            aicli::util::read_json(&dir.join("task.json")).map_err(anyhow::Error::msg)?;
        let attempt = match a.attempt {
            Some(n) => rec
                .attempts
                .iter()
                .find(|x| x.attempt == n)
                .with_context(|| format!("{} has no attempt {n}", dir.display()))?,
            None => rec
                .attempts
                .last()
                .with_context(|| format!("{} has no attempts", dir.display()))?,
        };
        let stdout = read_range(
            &dir.join("events.ndjson"),
            attempt.events_start,
            attempt.events_end,
        )?;
        let stderr = read_range(
            &dir.join("stderr.log"),
            attempt.stderr_start,
            attempt.stderr_end,
        )
        .unwrap_or_default();
        let exit = a
            .exit_code
            .or(attempt.result.as_ref().and_then(|r| r.exit_code));
        let ctx = ParseContext {
            model: a.model.clone().or(attempt.model.clone()),
            prior: attempt.prior,
        };
        (
            a.provider.clone().unwrap_or(rec.provider.clone()),
            stdout,
            String::from_utf8_lossy(&stderr).into_owned(),
            exit,
            ctx,
        )
    } else {
        let Some(p) = a.provider.clone() else {
            bail!(
                "--provider is required to parse {} (known: {})",
                a.file.display(),
                reg.names().join(", ")
            );
        };
        let stdout =
            std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
        let stderr = match &a.stderr {
            Some(f) => std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {}", f.display()))?,
            None => String::new(),
        };
        (
            p,
            stdout,
            stderr,
            a.exit_code,
            ParseContext {
                model: a.model.clone(),
                prior: None,
            },
        )
    };
    let provider = reg.get(&provider_name)?;
    let ctx = ParseContext {
        model: ctx
            .model
            .or_else(|| provider.config().default_model.clone()),
        ..ctx
    };
    let (events, result) = replay::replay(provider.as_ref(), &stdout, &stderr, exit_code, &ctx);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.events {
        for e in &events {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
    } else {
        serde_json::to_writer_pretty(&mut out, &result)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn runs(
    config_path: Option<&Path>,
    r: RepoArgs,
    json_out: bool,
    action: Option<RunsAction>,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let repo = repo_dir(&r)?;
    let root = r
        .runs_dir
        .clone()
        .or(config.engine.runs_dir.clone())
        .unwrap_or_else(|| repo.join(".aicli/runs"));
    let store = RunStore::new(&root);
    match action {
        None => {
            let rows: Vec<_> = store
                .list()
                .iter()
                .filter_map(|b| b.summary().ok())
                .collect();
            if json_out {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                println!("no runs in {}", root.display());
            } else {
                println!(
                    "{:<24} {:<24} {:<8} {:>5} {:>4} {:>4} {:>4} {:>10}",
                    "batch", "started", "provider", "tasks", "ok", "fail", "blkd", "cost"
                );
                for s in rows {
                    println!(
                        "{:<24} {:<24} {:<8} {:>5} {:>4} {:>4} {:>4} {:>10}",
                        s.batch_id,
                        s.created_at,
                        s.provider,
                        s.n_tasks,
                        s.n_succeeded,
                        s.n_failed,
                        s.n_blocked,
                        format!("${:.4}", s.cost_usd)
                    );
                }
            }
        }
        Some(RunsAction::Show { id }) => {
            let b = store.open_batch(&id).map_err(anyhow::Error::msg)?;
            let spec = b.spec().map_err(anyhow::Error::msg)?;
            let tasks = b.tasks().map_err(anyhow::Error::msg)?;
            if json_out {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"spec": spec, "tasks": tasks, "result": b.result()})
                    )?
                );
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "batch {} · {} · provider {} · repo {}",
                spec.batch_id,
                spec.created_at,
                spec.provider,
                spec.repo.display()
            );
            for t in tasks {
                println!(
                    "\n{} [{}] ({})",
                    t.task.id,
                    serde_json::to_value(t.state)?.as_str().unwrap_or_default(),
                    t.provider
                );
                println!(
                    "  prompt: {}",
                    aicli::providers::common::truncate_chars(&t.task.prompt, 120)
                );
                for at in &t.attempts {
                    let r = at.result.as_ref();
                    println!(
                        "  attempt {} ({}) {}: {}",
                        at.attempt,
                        serde_json::to_value(at.kind)?.as_str().unwrap_or_default(),
                        at.started_at,
                        match r {
                            Some(r) => format!(
                                "{} · {} · {}",
                                match r.status {
                                    SessionStatus::Succeeded => "ok".to_owned(),
                                    SessionStatus::Blocked => "blocked".to_owned(),
                                    SessionStatus::Failed | SessionStatus::Interrupted => format!(
                                        "{}: {}",
                                        r.error_kind.map(|k| k.as_str()).unwrap_or("failed"),
                                        r.error.clone().unwrap_or_default()
                                    ),
                                },
                                output::cost(r),
                                output::tokens(r)
                            ),
                            None => "did not finish".to_owned(),
                        }
                    );
                    if let Some(q) = r.and_then(|r| r.question.as_ref()) {
                        println!("    asked: {}", q.question);
                    }
                }
                for ans in &t.answers {
                    println!(
                        "  answered {}: {} -> {}",
                        ans.answered_at, ans.question, ans.answer
                    );
                }
                if let (Some(b), Some(w)) = (&t.branch, &t.worktree) {
                    println!("  branch {b} at {}", w.display());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn worktrees(
    r: RepoArgs,
    json_out: bool,
    action: Option<WorktreesAction>,
) -> anyhow::Result<ExitCode> {
    let repo = Repo::open(&repo_dir(&r)?).await?;
    match action {
        None => {
            let list = repo.list().await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no aicli worktrees");
            } else {
                for w in list {
                    println!(
                        "{}  {}  {}",
                        w.branch,
                        w.path.display(),
                        w.holds_work
                            .map(|h| format!("holds work: {h}"))
                            .unwrap_or_else(|| "no work (prunable)".into())
                    );
                }
            }
        }
        Some(WorktreesAction::Prune) => {
            let done = repo.prune().await?;
            if json_out {
                let v: Vec<_> = done
                    .iter()
                    .map(|(i, c)| json!({"worktree": i, "cleanup": c}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for (i, c) in &done {
                    match c {
                        Cleanup::Removed => println!("removed {} ({})", i.branch, i.path.display()),
                        Cleanup::Kept { reason } => println!("kept {}: {reason}", i.branch),
                    }
                }
                if done.is_empty() {
                    println!("no aicli worktrees");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve(config_path: Option<&Path>, a: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let repo = repo_dir(&a.repo)?;
    let mut opts = McpServerOptions::from_config(&config.engine, &repo);
    if let Some(b) = &a.bind {
        opts.bind = b.clone();
    }
    let cancel = CancellationToken::new();
    let server = McpServer::start(opts, cancel.child_token()).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut skills = config.engine.skills.clone();
    skills.extend(a.skills.iter().cloned());
    let token = server.mint(aicli::mcp::TaskContext {
        batch_id: "serve".into(),
        task_id: "serve".into(),
        workspace: a.workspace.clone().unwrap_or(repo),
        skills,
        credentials: a.credentials.clone(),
        events: tx,
    });
    println!("aicli MCP server: {}", server.url());
    println!("bearer token:     {token}");
    println!(
        "health:           {}",
        server.url().replace("/mcp", "/healthz")
    );
    println!("tools:            {}", McpServer::tool_names().join(", "));
    println!("(Ctrl-C stops it)");
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => {
                    if let Some(line) = output::event_line(&ev) {
                        println!("{line}");
                    }
                }
                None => break,
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    server.revoke(&token);
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The installed version of a provider's CLI (`None` when not installed or unreadable).
async fn installed_version(p: &aicli::providers::SharedProvider) -> Option<String> {
    let bin = p.binary_path(None).ok()?;
    let mut c = CommandSpec::new(&bin, &std::env::temp_dir());
    c.args(p.config().version_argv.iter().cloned());
    let out = aicli::process::run_capture(&c, Duration::from_secs(30))
        .await
        .ok()?;
    p.parse_version(&out.stdout)
}

/// The CLI versions named in `fixtures/<provider>/*.meta.json`.
fn fixture_versions(dir: &Path, provider: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir.join(provider)) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.to_string_lossy().ends_with(".meta.json")
            && let Ok(v) = aicli::util::read_json::<serde_json::Value>(&p)
            && let Some(ver) = v["cli_version"].as_str()
        {
            out.insert(ver.to_owned());
        }
    }
    out
}

async fn doctor(
    config_path: Option<&Path>,
    fixtures: Option<PathBuf>,
    strict: bool,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let fixtures = fixtures.or_else(|| {
        let d = PathBuf::from("fixtures");
        d.is_dir().then_some(d)
    });
    let mut rows = Vec::new();
    let mut problems = 0;
    let (images, docker_note) = super::image::doctor_reports(&config, &reg).await;
    for p in reg.providers() {
        let bin = p.binary_path(None);
        let installed = installed_version(p).await;
        let pinned = p.config().version.clone();
        let recorded: Vec<String> = fixtures
            .as_deref()
            .map(|d| fixture_versions(d, p.name()).into_iter().collect())
            .unwrap_or_default();
        let mut warnings = Vec::new();
        if let Err(e) = &bin {
            warnings.push(e.to_string());
        }
        if let (Some(i), Some(pin)) = (&installed, &pinned)
            && i != pin
        {
            warnings.push(format!(
                "installed {} {i} differs from the pinned {pin} (adapters and fixtures were checked against {pin}); run .ci/install-clis.sh or re-record the fixtures",
                p.binary_name()
            ));
        }
        if let Some(i) = &installed
            && !recorded.is_empty()
            && !recorded.contains(i)
        {
            warnings.push(format!(
                "the fixtures were recorded with {} but {i} is installed: re-record them with `aicli record`",
                recorded.join(", ")
            ));
        }
        let mine: Vec<_> = images
            .iter()
            .filter(|(n, _)| n == p.name())
            .map(|(_, r)| r)
            .collect();
        warnings.extend(
            mine.iter()
                .filter_map(|r| super::image::version_warning(r, pinned.as_deref())),
        );
        problems += warnings.len();
        rows.push(json!({
            "provider": p.name(),
            "binary": bin.as_ref().map(|b| b.describe()).ok(),
            "installed_version": installed,
            "pinned_version": pinned,
            "fixtures_version": recorded,
            "images": mine,
            "warnings": warnings,
        }));
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        if let Some(note) = &docker_note {
            println!("({note}; images not checked)");
        }
        for r in &rows {
            println!(
                "{}: installed {} · pinned {} · fixtures {}",
                r["provider"].as_str().unwrap_or_default(),
                r["installed_version"].as_str().unwrap_or("-"),
                r["pinned_version"].as_str().unwrap_or("-"),
                r["fixtures_version"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", "))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "-".to_owned())
            );
            if let Some(b) = r["binary"].as_str() {
                println!("  binary: {b}");
            }
            for i in r["images"].as_array().into_iter().flatten() {
                println!(
                    "  image: {} on {}: {}",
                    i["image"].as_str().unwrap_or_default(),
                    i["host"].as_str().unwrap_or_default(),
                    i["version_inside"].as_str().unwrap_or("-")
                );
            }
            for w in r["warnings"].as_array().into_iter().flatten() {
                println!("  warning: {}", w.as_str().unwrap_or_default());
            }
        }
    }
    Ok(if strict && problems > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn fake_script(spec: &str) -> anyhow::Result<aicli_testkit::Script> {
    use aicli_testkit::Script;
    let (kind, arg) = match spec.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    Ok(match (kind, arg) {
        ("text", None) => Script::default_text(),
        ("text", Some(t)) => Script::text(t),
        ("shell", Some(c)) => Script::shell(c).then_quote_tool_result(),
        ("mcp", Some(st)) => {
            let (server, tool) = st.split_once('/').context("--fake mcp:SERVER/TOOL")?;
            Script::mcp_tool_call(server, tool, json!({})).then_quote_tool_result()
        }
        ("error", Some(s)) => Script::error(s.parse().context("--fake error:STATUS")?),
        ("drop", None) => Script::drop_mid_stream(),
        _ => bail!(
            "--fake '{spec}': expected text, text:TEXT, shell:COMMAND, mcp:SERVER/TOOL, error:STATUS or drop"
        ),
    })
}

async fn record(config_path: Option<&Path>, a: RecordArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let provider = reg.get(&a.provider)?;
    let version = installed_version(&provider).await.with_context(|| {
        format!(
            "{} is not installed or does not print a version",
            provider.binary_name()
        )
    })?;
    let scratch = tempfile::tempdir()?;
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work)?;
    let mut task = TaskSpec {
        id: a.scenario.clone(),
        prompt: a.prompt.clone(),
        model: a.model.clone(),
        allowed_tools: a.allowed_tools.clone(),
        timeout_secs: Some(a.timeout),
        ..TaskSpec::default()
    };
    if let Some(m) = &a.permission_mode {
        task.permission_mode = Some(
            serde_json::from_value(json!(m)).with_context(|| format!("--permission-mode {m}"))?,
        );
    }
    let mut engine = Engine::new(config.clone(), reg.clone());
    let mut fake = None;
    let mut source = format!(
        "aicli record: real {} {version} against its real API",
        provider.binary_name()
    );
    if let Some(spec) = &a.fake {
        let vendor = aicli_testkit::Vendor::parse(provider.config().adapter_name(provider.name()))
            .with_context(|| format!("no fake API for provider {}", provider.name()))?;
        let api = aicli_testkit::FakeApi::start(vendor, fake_script(spec)?).await?;
        let mut options = aicli_testkit::WiringOptions::default();
        if let Some(m) = &a.model {
            options = options.with_model(m.clone());
        }
        let mut wiring = api.wiring_with(&options);
        // A model the wiring pins goes through the task, so the run records it (and its
        // cost can be estimated) and the adapter passes it on.
        if task.model.is_none()
            && let Some(i) = wiring.args.iter().position(|a| a == "-m")
            && i + 1 < wiring.args.len()
        {
            task.model = Some(wiring.args[i + 1].clone());
            wiring.args.drain(i..i + 2);
        }
        let dirs = aicli_testkit::RunDirs::new_in(scratch.path())?;
        wiring.write_files(&dirs.home)?;
        task.extra_args.extend(wiring.args.clone());
        engine = engine.with_env(dirs.env_with(&wiring));
        source = format!(
            "aicli record: real {} {version} against the aicli-testkit fake {vendor} API on loopback (script: {spec})",
            provider.binary_name()
        );
        fake = Some((api, dirs));
    }
    task.extra_args.extend(a.extra.iter().cloned());
    let mut opts = BatchOptions::new(&work);
    opts.provider = Some(provider.name().to_owned());
    opts.worktrees = false;
    opts.runs_dir = Some(scratch.path().join("runs"));
    let (tx, _rx) = broadcast::channel::<BatchEvent>(1024);
    let cancel = CancellationToken::new();
    ctrl_c_cancels(cancel.clone());
    let batch = engine.run_batch(vec![task], opts, tx, cancel).await?;
    drop(fake);
    let store = RunStore::new(scratch.path().join("runs"));
    let rec = store
        .open_batch(&batch.batch_id)
        .map_err(anyhow::Error::msg)?;
    let dir = rec.task_dir(&a.scenario);
    let trec = rec.task(&a.scenario).map_err(anyhow::Error::msg)?;
    let attempt = trec.attempts.last().context("the run made no attempt")?;
    if attempt.argv.is_empty() {
        let why = attempt
            .result
            .as_ref()
            .and_then(|r| r.error.clone())
            .unwrap_or_default();
        bail!("the CLI was not started, so there is nothing to record: {why}");
    }
    let stdout = read_range(
        &dir.join("events.ndjson"),
        attempt.events_start,
        attempt.events_end,
    )
    .unwrap_or_default();
    let stderr = read_range(
        &dir.join("stderr.log"),
        attempt.stderr_start,
        attempt.stderr_end,
    )
    .unwrap_or_default();
    let exit = attempt.result.as_ref().and_then(|r| r.exit_code);
    let ctx = ParseContext {
        model: attempt.model.clone(),
        prior: attempt.prior,
    };
    let (_, result) = replay::replay(
        provider.as_ref(),
        &stdout,
        &String::from_utf8_lossy(&stderr),
        exit,
        &ctx,
    );
    let out_dir = a.out.join(provider.name());
    std::fs::create_dir_all(&out_dir)?;
    let path = |ext: &str| out_dir.join(format!("{}.{ext}", a.scenario));
    std::fs::write(path("ndjson"), &stdout)?;
    std::fs::write(path("stderr"), &stderr)?;
    std::fs::write(
        path("exit"),
        match exit {
            Some(c) => format!("{c}\n"),
            None => "signal\n".to_owned(),
        },
    )?;
    let meta = json!({
        "cli_version": version,
        "source": source,
        "cmd": attempt.argv.join(" "),
        "context": ctx,
    });
    std::fs::write(
        path("meta.json"),
        serde_json::to_string_pretty(&meta)? + "\n",
    )?;
    std::fs::write(
        path("result.json"),
        serde_json::to_string_pretty(&result)? + "\n",
    )?;
    println!(
        "recorded {} ({} bytes of stdout, exit {}) with {} {version}: {}",
        path("ndjson").display(),
        stdout.len(),
        exit.map(|c| c.to_string())
            .unwrap_or_else(|| "signal".into()),
        provider.binary_name(),
        output::summary(&result).lines().next().unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

fn schema(out: &Path) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(out)?;
    for (name, s) in aicli::schema::all() {
        std::fs::write(out.join(name), aicli::schema::render(&s))?;
        println!("wrote {}", out.join(name).display());
    }
    Ok(ExitCode::SUCCESS)
}
