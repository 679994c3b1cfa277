//! The MCP peers the tests and the benches run: where `.ci/install-mcp-clients.sh` put
//! them, and the Python HTTP upstream (`tests/mcp_servers/http_upstream.py`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use aicli::mcp::TaskContext;
use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncBufReadExt, BufReader};

/// aicli's cache (`$AICLI_CACHE_DIR`, else `~/.cache/aicli`), where the MCP clients and
/// servers are installed.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("AICLI_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/aicli"),
    }
}

/// The Python of the venv holding the `mcp` package (there once installed).
pub fn mcp_python() -> PathBuf {
    cache_dir().join("mcp-venv/bin/python")
}

/// `tests/mcp_servers/<name>`.
pub fn mcp_server_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_servers")
        .join(name)
}

/// The FastMCP upstream `http_upstream.py` run by `python`, answering only
/// `Bearer <token>`: its process (killed on drop) and its URL.
pub async fn start_http_upstream(
    python: &Path,
    token: &str,
) -> Result<(tokio::process::Child, String)> {
    let mut child = tokio::process::Command::new(python)
        .arg(mcp_server_script("http_upstream.py"))
        .env("EXPECTED_TOKEN", token)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let line = tokio::time::timeout(
        Duration::from_secs(60),
        BufReader::new(stdout).lines().next_line(),
    )
    .await
    .context("the HTTP upstream did not print its port in 60 s")??
    .unwrap_or_default();
    let port = line
        .strip_prefix("PORT ")
        .ok_or_else(|| anyhow!("the HTTP upstream said {line:?}, not PORT <n>"))?;
    Ok((child, format!("http://127.0.0.1:{}/mcp", port.trim())))
}

/// A task context for a token minted outside a batch (batch and task `id`, working in
/// `workspace`, granted `tools`): the events its calls publish are dropped.
pub fn detached_context(id: &str, workspace: &Path, tools: &[&str]) -> TaskContext {
    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The engine would record and broadcast these.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    TaskContext {
        batch_id: id.into(),
        task_id: id.into(),
        workspace: workspace.to_path_buf(),
        skills: Vec::new(),
        credentials: Vec::new(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        record_dir: None,
        attempt: 1,
        events,
    }
}
