//! Helpers the subcommands share: the repository, the engine (with aicli's MCP
//! server), Ctrl-C, exit codes of results.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use aicli::Engine;
use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::{CommandSpec, RunnerKind, SessionResult, SessionStatus};
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::exit::{BLOCKED, kind_code};
use super::{RepoArgs, load_config, output, registry};

/// The repository a command is about: `--repo`, else the current directory, raised to
/// the top of its git repository (where run records and worktrees live) when it is in
/// one.
pub(super) fn repo_dir(r: &RepoArgs) -> anyhow::Result<PathBuf> {
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

pub(super) fn ctrl_c_cancels(cancel: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\naicli: cancelling (records are kept)…");
            cancel.cancel();
        }
    });
}

pub(super) fn engine(config_path: Option<&Path>) -> anyhow::Result<Engine> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    Ok(Engine::new(config, reg))
}

/// The engine with aicli's MCP server attached (unless disabled in the config or with
/// `--no-mcp`). The server lives until `cancel` or until the returned handle is shut down.
/// `containers`: tasks may run in containers (the server then accepts the names they
/// reach it under).
pub(super) async fn engine_with_mcp(
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

/// `--runner`'s values.
pub(super) fn parse_runner(s: &str) -> Result<RunnerKind, String> {
    RunnerKind::parse(s).ok_or_else(|| format!("'{s}' is not a runner: use local or docker"))
}

/// Whether a recorded batch has tasks that run in containers (its MCP server must then
/// accept the name containers reach it under).
pub(super) fn batch_uses_docker(
    config_path: Option<&Path>,
    repo: &Path,
    r: &RepoArgs,
    batch_id: &str,
) -> bool {
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

pub(super) fn stop_mcp(server: Option<Arc<McpServer>>) {
    if let Some(s) = server {
        s.cancellation_token().cancel();
    }
}

pub(super) fn finish(result: &SessionResult) -> ExitCode {
    match result.status {
        SessionStatus::Succeeded => ExitCode::SUCCESS,
        SessionStatus::Blocked => ExitCode::from(BLOCKED),
        SessionStatus::Failed | SessionStatus::Interrupted => {
            ExitCode::from(result.error_kind.map(kind_code).unwrap_or(1))
        }
    }
}

pub(super) fn print_batch(b: &aicli::BatchResult, json_out: bool) -> anyhow::Result<ExitCode> {
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

/// The installed version of a provider's CLI (`None` when not installed or unreadable).
pub(super) async fn installed_version(p: &aicli::providers::SharedProvider) -> Option<String> {
    let bin = p.binary_path(None).ok()?;
    let mut c = CommandSpec::new(&bin, &std::env::temp_dir());
    c.args(p.config().version_argv.iter().cloned());
    let out = aicli::process::run_capture(&c, Duration::from_secs(30))
        .await
        .ok()?;
    p.parse_version(&out.stdout)
}
