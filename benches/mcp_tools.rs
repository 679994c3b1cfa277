//! What a task-scoped MCP tool costs, side by side in one run.
//!
//! `cargo bench --bench mcp_tools` (needs `bash .ci/install-mcp-clients.sh`: the Python
//! `mcp` package for the HTTP upstream). aicli's MCP server runs in this process with
//! one token granted a command-backed tool and an HTTP upstream; the same raw
//! streamable-HTTP client (`tests/support/mcp_client.rs`) drives it, at concurrency 1 and 8:
//!
//! - `broadcastLog` through aicli: the built-in baseline (no process, no forward);
//! - a command-backed tool (`/bin/cat`: its stdin, the arguments, is its result) through
//!   aicli: schema check, a supervised process per call (own process group, cgroup
//!   where one can be made, pid file), output capped; the same with `cgroups: off`; next
//!   to the same `/bin/cat` started bare with tokio (arguments on stdin, stdout read to
//!   the end) at the same concurrency;
//! - an upstream's tool (`tracker__add` of `tests/mcp_servers/http_upstream.py`, FastMCP
//!   on uvicorn behind a bearer check) forwarded by aicli; next to the same client
//!   calling that upstream directly with its bearer, one session per worker and one
//!   session for all (aicli holds one upstream session per batch).
//!
//! It prints calls/s and p50/p99 latency per row and the ratios. `MCP_TOOLS_SECS`
//! (seconds per level, default 3).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::{CgroupMode, McpToolConfig, McpUpstreamConfig};
use anyhow::{Result, anyhow, bail};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

#[path = "../tests/support/mod.rs"]
mod support;
use support::mcp::{detached_context, mcp_python, start_http_upstream};
use support::mcp_client::{Client, Load as Row, measure};

const LEVELS: [usize; 2] = [1, 8];
const WARMUP: Duration = Duration::from_millis(500);
/// The upstream's bearer token (aicli reads it from its environment for the header).
const UPSTREAM_TOKEN: &str = "bench-upstream-token";

fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}

/// The FastMCP upstream; its child process (killed on drop) and URL.
async fn start_upstream() -> Result<(tokio::process::Child, String)> {
    let python = mcp_python();
    if !python.exists() {
        bail!(
            "the Python mcp package is not installed at {}: run `bash .ci/install-mcp-clients.sh`",
            python.display()
        );
    }
    start_http_upstream(&python, UPSTREAM_TOKEN).await
}

/// Rows of calls of `tool` with `args` through `client`, one session per worker (or one
/// session for all with `shared`).
async fn mcp_rows(
    client: Arc<Client>,
    tool: &'static str,
    args: &'static str,
    secs: Duration,
    shared: bool,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for c in LEVELS {
        let mut sessions = Vec::new();
        let first = client.initialize().await?;
        for _ in 0..c {
            sessions.push(if shared {
                first.clone()
            } else {
                client.initialize().await?
            });
        }
        let sessions = Arc::new(sessions);
        let cl = client.clone();
        let ss = sessions.clone();
        let row = measure(c, WARMUP, secs, move |w, id| {
            let cl = cl.clone();
            let ss = ss.clone();
            async move { cl.call(&ss[w], id, tool, args).await.map(|_| ()) }
        })
        .await;
        client.delete(&first).await;
        if !shared {
            for s in sessions.iter() {
                client.delete(s).await;
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `/bin/cat` started bare: the arguments on stdin, stdout read to the end.
async fn bare_cat(args: &'static str) -> Result<()> {
    let mut child = tokio::process::Command::new("/bin/cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
    stdin.write_all(args.as_bytes()).await?;
    drop(stdin);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no stdout"))?
        .read_to_end(&mut out)
        .await?;
    if !child.wait().await?.success() || out.is_empty() {
        bail!("cat failed");
    }
    Ok(())
}

/// aicli's MCP server with the `cat` tool and the `tracker` upstream, and a token granted
/// both (the upstream started).
async fn start_aicli(
    dir: &std::path::Path,
    upstream_url: &str,
    cgroups: CgroupMode,
    cancel: &CancellationToken,
) -> Result<(McpServer, String)> {
    let mut opts = McpServerOptions {
        skills_dir: dir.to_path_buf(),
        repo: dir.to_path_buf(),
        cgroups,
        ..McpServerOptions::default()
    };
    opts.env
        .insert("TRACKER_TOKEN".into(), UPSTREAM_TOKEN.into());
    let cat: McpToolConfig = serde_json::from_value(json!({
        "description": "Echoes its arguments",
        "command": ["/bin/cat"],
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }))?;
    opts.tools = BTreeMap::from([("cat".to_owned(), cat)]);
    let tracker: McpUpstreamConfig = serde_json::from_value(json!({
        "url": upstream_url,
        "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"},
    }))?;
    opts.upstreams = BTreeMap::from([("tracker".to_owned(), tracker)]);
    let server = McpServer::start(opts, cancel.child_token()).await?;
    let token = server.mint(detached_context("bench", dir, &["cat", "tracker"]));
    if let Some(m) = server.start_upstreams(&token).await.into_iter().next() {
        bail!("{m}");
    }
    Ok((server, token))
}

async fn run() -> Result<()> {
    let secs: f64 = std::env::var("MCP_TOOLS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let secs = Duration::from_secs_f64(secs);
    let (_upstream, upstream_url) = start_upstream().await?;

    let dir = tempfile::tempdir()?;
    let cancel = CancellationToken::new();
    let (server, token) = start_aicli(dir.path(), &upstream_url, CgroupMode::Auto, &cancel).await?;
    let (plain, plain_token) =
        start_aicli(dir.path(), &upstream_url, CgroupMode::Off, &cancel).await?;
    let aicli = Arc::new(Client::new(&server.url(), &token)?);
    let direct = Arc::new(Client::new(&upstream_url, UPSTREAM_TOKEN)?);

    eprintln!(
        "mcp_tools: {} s per level after {} ms warm-up, concurrency {LEVELS:?}",
        secs.as_secs_f64(),
        WARMUP.as_millis()
    );
    const LOG: &str = r#"{"message":"bench line","level":"info","source":"mcp_tools"}"#;
    const CAT: &str = r#"{"text":"hello from the bench"}"#;
    const ADD: &str = r#"{"a":2,"b":40}"#;
    let mut table: Vec<(&str, Vec<Row>)> = Vec::new();
    table.push((
        "broadcastLog via aicli",
        mcp_rows(aicli.clone(), "broadcastLog", LOG, secs, false).await?,
    ));
    table.push((
        "command tool via aicli",
        mcp_rows(aicli.clone(), "cat", CAT, secs, false).await?,
    ));
    let plain_client = Arc::new(Client::new(&plain.url(), &plain_token)?);
    table.push((
        "command tool, no cgroup",
        mcp_rows(plain_client, "cat", CAT, secs, false).await?,
    ));
    let mut bare = Vec::new();
    for c in LEVELS {
        bare.push(measure(c, WARMUP, secs, |_, _| bare_cat(CAT)).await);
    }
    table.push(("/bin/cat bare (tokio)", bare));
    table.push((
        "upstream via aicli",
        mcp_rows(aicli.clone(), "tracker__add", ADD, secs, false).await?,
    ));
    table.push((
        "upstream direct",
        mcp_rows(direct.clone(), "add", ADD, secs, false).await?,
    ));
    // aicli holds one session with the upstream for the whole batch: the same, direct.
    table.push((
        "upstream direct, 1 sess",
        mcp_rows(direct.clone(), "add", ADD, secs, true).await?,
    ));

    println!();
    println!(
        "{:<24} {:>5} {:>8} {:>9} {:>8} {:>8} {:>6}",
        "path", "conc", "calls", "calls/s", "p50 ms", "p99 ms", "errors"
    );
    for (name, rows) in &table {
        for (r, c) in rows.iter().zip(LEVELS) {
            println!(
                "{name:<24} {c:>5} {:>8} {:>9.0} {:>8.2} {:>8.2} {:>6}",
                r.calls, r.per_sec, r.p50_ms, r.p99_ms, r.errors
            );
        }
    }
    println!();
    let rate = |name: &str, i: usize| -> f64 {
        table
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, r)| r[i].per_sec)
    };
    for (i, c) in LEVELS.iter().enumerate() {
        println!(
            "c={c}: command tool {:.2}x bare /bin/cat; upstream via aicli {:.2}x direct ({:.2}x direct on one session)",
            rate("command tool via aicli", i) / rate("/bin/cat bare (tokio)", i).max(1e-9),
            rate("upstream via aicli", i) / rate("upstream direct", i).max(1e-9),
            rate("upstream via aicli", i) / rate("upstream direct, 1 sess", i).max(1e-9),
        );
    }
    for (s, t) in [(server, &token), (plain, &plain_token)] {
        s.revoke(t);
        s.end_batch("bench").await;
        s.shutdown().await;
    }
    cancel.cancel();
    Ok(())
}
