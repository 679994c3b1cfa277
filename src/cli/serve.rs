//! `aicli serve`: the agent MCP server alone.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::mcp::{McpServer, McpServerOptions};
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::common::repo_dir;
use super::{RepoArgs, load_config, output};

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
    /// A tool of the config's `mcp_tools` or an upstream of its `mcp_upstreams` the token
    /// may use, besides `engine.mcp_tools` (repeatable).
    #[arg(long = "mcp-tool", value_name = "NAME")]
    pub mcp_tools: Vec<String>,
}

pub(super) async fn serve(
    config_path: Option<&Path>,
    r: RepoArgs,
    a: ServeArgs,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let repo = repo_dir(&r)?;
    if let Some((_, m)) = config.unknown_mcp_grant(&a.mcp_tools) {
        return Err(super::common::usage(format!("--mcp-tool: {m}")));
    }
    let mut opts = McpServerOptions::from_config(&config, &repo);
    if let Some(b) = &a.bind {
        opts.bind = b.clone();
    }
    let cancel = CancellationToken::new();
    let server = McpServer::start(opts, cancel.child_token()).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut skills = config.engine.skills.clone();
    skills.extend(a.skills.iter().cloned());
    let token = server.mint(crate::mcp::TaskContext {
        batch_id: "serve".into(),
        task_id: "serve".into(),
        workspace: a.workspace.clone().unwrap_or(repo),
        skills,
        credentials: a.credentials.clone(),
        tools: config
            .engine
            .mcp_tools
            .iter()
            .chain(&a.mcp_tools)
            .cloned()
            .collect(),
        record_dir: None,
        attempt: 1,
        events: tx,
    });
    for m in server.start_upstreams(&token).await {
        tracing::warn!("{m}");
    }
    outln!("aicli MCP server: {}", server.url());
    outln!("bearer token:     {token}");
    outln!(
        "health:           {}",
        server.url().replace("/mcp", "/healthz")
    );
    outln!(
        "tools:            {}",
        server.endpoint(&token).tools.join(", ")
    );
    outln!("(Ctrl-C stops it)");
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => {
                    if let Some(line) = output::event_line(&ev) {
                        outln!("{line}");
                    }
                }
                None => break,
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    server.revoke(&token);
    server.end_batch("serve").await;
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
