//! Load benchmark of the agent MCP server, side by side with a Python FastMCP server.
//!
//! `cargo bench --bench mcp_load` (needs `bash .ci/install-mcp-clients.sh` for the
//! Python peer). Each server runs in its own process pinned to CPU 0 (`taskset`): aicli's
//! server is this binary re-run with `--serve-rust`, the peer is
//! `benches/fastmcp_server.py` (mcp<2 FastMCP on uvicorn, same `broadcastLog` tool, a
//! bearer middleware). The same Rust client drives both over loopback: raw streamable
//! HTTP with reqwest (initialize -> `Mcp-Session-Id` -> `tools/call` POSTs answered as
//! SSE), one session per concurrent worker, at concurrency 1, 16 and 64. It reports
//! calls/s, p50/p99 latency, the server's RSS after each level and session setup/s.
//!
//! Environment knobs: `MCP_LOAD_SECS` (seconds measured per level, default 3),
//! `MCP_LOAD_ONLY=rust|python` (one server only).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli::mcp::{McpServer, McpServerOptions};
use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

const LEVELS: [usize; 3] = [1, 16, 64];
const WARMUP: Duration = Duration::from_millis(500);
const SETUP_SESSIONS: usize = 100;
const SERVER_CPU: &str = "0";

#[path = "../tests/support/mod.rs"]
mod support;
use support::mcp::{detached_context, mcp_python};
use support::mcp_client::{Client, measure};

fn main() -> Result<()> {
    if std::env::args().any(|a| a == "--serve-rust") {
        return serve_rust();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}

// ---------------------------------------------------------------------------------------
// aicli's server, in a child process.

fn serve_rust() -> Result<()> {
    // Pinned to one core by the parent: one worker thread.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        let cancel = CancellationToken::new();
        // One token drives every worker's session here (64 at once), where a real task
        // opens one or two: the per-token session limit is raised; every other limit is
        // the default.
        let server = McpServer::start(
            McpServerOptions {
                skills_dir: dir.path().to_path_buf(),
                limits: aicli::providers::McpLimits {
                    max_sessions_per_token: 1024,
                    ..aicli::providers::McpLimits::default()
                },
                ..McpServerOptions::default()
            },
            cancel.clone(),
        )
        .await?;
        let token = server.mint(detached_context("bench", dir.path(), &[]));
        println!("URL {}", server.url());
        println!("TOKEN {token}");
        // Serve until the parent closes our stdin.
        let mut sink = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        server.shutdown().await;
        cancel.cancel();
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Server processes.

struct ServerProc {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    token: String,
}

impl ServerProc {
    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// VmRSS and VmHWM of the server process, MiB.
    fn rss(&self) -> (f64, f64) {
        let Some(pid) = self.pid() else {
            return (0.0, 0.0);
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map_or(0.0, |kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    async fn stop(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn pinned(program: &std::path::Path) -> Command {
    if which::which("taskset").is_ok() {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(SERVER_CPU).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Starts a server and reads its `URL`/`PORT` (and `TOKEN`, unless `token` is given).
async fn spawn_server(
    mut cmd: Command,
    name: &'static str,
    token: Option<String>,
) -> Result<ServerProc> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the {name} server"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut url = String::new();
    let mut token = token.unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while url.is_empty() || token.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, lines.next_line())
            .await
            .map_err(|_| anyhow!("{name} server did not start in 60 s"))??
            .ok_or_else(|| anyhow!("{name} server exited before it was ready"))?;
        if let Some(u) = line.strip_prefix("URL ") {
            url = u.to_owned();
        } else if let Some(t) = line.strip_prefix("TOKEN ") {
            token = t.to_owned();
        } else if let Some(p) = line.strip_prefix("PORT ") {
            url = format!("http://127.0.0.1:{p}/mcp");
        }
    }
    Ok(ServerProc {
        name,
        child,
        stdin,
        url,
        token,
    })
}

async fn start_rust() -> Result<ServerProc> {
    let exe = std::env::current_exe()?;
    let mut cmd = pinned(&exe);
    cmd.arg("--serve-rust");
    spawn_server(cmd, "aicli (rmcp)", None).await
}

async fn start_python() -> Result<ServerProc> {
    let python = mcp_python();
    if !python.exists() {
        bail!(
            "the Python mcp package is not installed at {}: run `bash .ci/install-mcp-clients.sh`",
            python.display()
        );
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/fastmcp_server.py");
    let mut token_bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut token_bytes);
    let token = hex::encode(token_bytes);
    let mut cmd = pinned(&python);
    cmd.arg(script)
        .arg(&token)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    spawn_server(cmd, "FastMCP (py)", Some(token)).await
}

// ---------------------------------------------------------------------------------------
// Measuring.

struct Row {
    server: &'static str,
    concurrency: usize,
    calls: usize,
    errors: usize,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    rss_mib: f64,
}

async fn load(client: Arc<Client>, concurrency: usize, secs: Duration) -> Result<Row> {
    let mut sessions = Vec::new();
    for _ in 0..concurrency {
        sessions.push(client.initialize().await?);
    }
    let sessions = Arc::new(sessions);
    let (cl, ss) = (client.clone(), sessions.clone());
    let m = measure(concurrency, WARMUP, secs, move |w, id| {
        let (cl, ss) = (cl.clone(), ss.clone());
        async move {
            let args =
                format!(r#"{{"message":"bench line {id}","level":"info","source":"mcp_load"}}"#);
            cl.call(&ss[w], id, "broadcastLog", &args).await.map(|_| ())
        }
    })
    .await;
    for sid in sessions.iter() {
        client.delete(sid).await;
    }
    Ok(Row {
        server: "",
        concurrency,
        calls: m.calls,
        errors: m.errors,
        per_sec: m.per_sec,
        p50_ms: m.p50_ms,
        p99_ms: m.p99_ms,
        rss_mib: 0.0,
    })
}

/// Sequential initialize + initialized + DELETE, per second.
async fn session_setup_rate(client: &Client) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..SETUP_SESSIONS {
        let sid = client.initialize().await?;
        client.delete(&sid).await;
    }
    Ok(SETUP_SESSIONS as f64 / t0.elapsed().as_secs_f64())
}

async fn bench_server(server: ServerProc, measure: Duration) -> Result<(Vec<Row>, f64, f64)> {
    let client = Arc::new(Client::new(&server.url, &server.token)?);
    // Reject a wrong token first: the bearer middleware is in the path being measured.
    let wrong = client
        .http
        .post(&client.url)
        .header("authorization", "Bearer wrong")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await?;
    if wrong.status() != 401 {
        bail!("{}: a wrong token got HTTP {}", server.name, wrong.status());
    }
    let setup = session_setup_rate(&client).await?;
    let mut rows = Vec::new();
    for c in LEVELS {
        let mut row = load(client.clone(), c, measure).await?;
        row.server = server.name;
        row.rss_mib = server.rss().0;
        eprintln!(
            "  {:<14} c={:<3} {:>9.0} calls/s  p50 {:.2} ms  p99 {:.2} ms  errors {}",
            row.server, row.concurrency, row.per_sec, row.p50_ms, row.p99_ms, row.errors
        );
        rows.push(row);
    }
    let peak = server.rss().1;
    server.stop().await;
    Ok((rows, setup, peak))
}

async fn run() -> Result<()> {
    let secs: f64 = std::env::var("MCP_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let measure = Duration::from_secs_f64(secs);
    let only = std::env::var("MCP_LOAD_ONLY").unwrap_or_default();
    let pinned_note = if which::which("taskset").is_ok() {
        format!("servers pinned to CPU {SERVER_CPU}")
    } else {
        "taskset missing: servers not pinned".to_owned()
    };
    eprintln!(
        "mcp_load: tools/call broadcastLog, sessions + SSE, {secs} s per level after {} ms warm-up, {pinned_note}",
        WARMUP.as_millis()
    );
    let mut results = Vec::new();
    if only.is_empty() || only == "rust" {
        results.push(bench_server(start_rust().await?, measure).await?);
    }
    if only.is_empty() || only == "python" {
        results.push(bench_server(start_python().await?, measure).await?);
    }
    println!();
    println!(
        "{:<14} {:>5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "server", "conc", "calls", "calls/s", "p50 ms", "p99 ms", "RSS MiB", "errors"
    );
    for (rows, _, _) in &results {
        for r in rows {
            println!(
                "{:<14} {:>5} {:>9} {:>10.0} {:>9.2} {:>9.2} {:>9.1} {:>7}",
                r.server,
                r.concurrency,
                r.calls,
                r.per_sec,
                r.p50_ms,
                r.p99_ms,
                r.rss_mib,
                r.errors
            );
        }
    }
    println!();
    for (rows, setup, peak) in &results {
        if let Some(r) = rows.first() {
            println!(
                "{:<14} session setup {setup:>7.0}/s (c=1, initialize+initialized+DELETE); peak RSS {peak:.1} MiB",
                r.server
            );
        }
    }
    Ok(())
}
