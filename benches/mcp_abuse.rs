//! The agent MCP server under the abuse of issue 10, with its default limits: what a
//! slow header, an idle socket, 10,000 held connections and 5,000 session
//! initializations cost the server, and what is freed afterwards.
//!
//! `cargo bench --bench mcp_abuse`. The server runs in a child process (this binary
//! re-run with `--serve`), so its RSS and file descriptors are its own (read from
//! `/proc/<pid>/status` and `/proc/<pid>/fd`). Defaults everywhere except
//! `session_idle_timeout_secs` (5 s instead of 300 s, so the expiry is seen in the run:
//! `MCP_ABUSE_SESSION_IDLE` changes it).

use std::process::Stdio;
use std::time::{Duration, Instant};

use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::McpLimits;
use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

#[path = "../tests/support/mod.rs"]
mod support;
use support::mcp::detached_context;

fn session_idle() -> u64 {
    std::env::var("MCP_ABUSE_SESSION_IDLE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn main() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if std::env::args().any(|a| a == "--serve") {
        return rt.block_on(serve());
    }
    rt.block_on(run())
}

async fn serve() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let limits = McpLimits {
        session_idle_timeout_secs: session_idle(),
        ..McpLimits::default()
    };
    let server = McpServer::start(
        McpServerOptions {
            skills_dir: dir.path().to_path_buf(),
            limits,
            ..McpServerOptions::default()
        },
        CancellationToken::new(),
    )
    .await?;
    let token = server.mint(detached_context("abuse", dir.path(), &[]));
    println!("ADDR {}", server.local_addr());
    println!("TOKEN {token}");
    // Answers "sessions" on stdin with the live session count; EOF stops.
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        if l == "sessions" {
            println!("SESSIONS {}", server.live_sessions());
        }
    }
    server.shutdown().await;
    Ok(())
}

struct Child {
    proc: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    out: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    addr: String,
    token: String,
}

impl Child {
    async fn start() -> Result<Child> {
        let mut proc = tokio::process::Command::new(std::env::current_exe()?)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = proc.stdin.take().context("stdin")?;
        let mut out = BufReader::new(proc.stdout.take().context("stdout")?).lines();
        let mut addr = String::new();
        let mut token = String::new();
        while addr.is_empty() || token.is_empty() {
            let l = out.next_line().await?.context("the server exited")?;
            if let Some(a) = l.strip_prefix("ADDR ") {
                addr = a.to_owned();
            } else if let Some(t) = l.strip_prefix("TOKEN ") {
                token = t.to_owned();
            }
        }
        Ok(Child {
            proc,
            stdin,
            out,
            addr,
            token,
        })
    }

    fn pid(&self) -> u32 {
        self.proc.id().unwrap_or(0)
    }

    /// (RSS MiB, open fds) of the server process.
    fn cost(&self) -> (f64, usize) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0);
        (kb / 1024.0, fds)
    }

    async fn sessions(&mut self) -> Result<usize> {
        self.stdin.write_all(b"sessions\n").await?;
        loop {
            let l = self.out.next_line().await?.context("the server exited")?;
            if let Some(n) = l.strip_prefix("SESSIONS ") {
                return Ok(n.parse()?);
            }
        }
    }
}

/// Seconds until the server closes `c` (reading), up to `max`.
async fn time_to_close(mut c: TcpStream, max: Duration) -> Option<f64> {
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(max.saturating_sub(t0.elapsed()), c.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed().as_secs_f64()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Raises this process's open-files limit to its hard limit (10,000 client sockets).
fn raise_nofile() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 0;
        }
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
    l.rlim_cur
}

async fn run() -> Result<()> {
    let nofile = raise_nofile();
    let mut s = Child::start().await?;
    let limits = McpLimits::default();
    let (rss0, fds0) = s.cost();
    println!(
        "server at rest: {rss0:.1} MiB RSS, {fds0} fds (defaults: {limits:?}, session idle {}s)",
        session_idle()
    );

    // 1. A partial header, held for up to 35 s.
    let mut c = TcpStream::connect(&s.addr).await?;
    c.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .await?;
    match time_to_close(c, Duration::from_secs(35)).await {
        Some(t) => println!("partial header: closed by the server after {t:.1} s"),
        None => println!("partial header: STILL OPEN after 35 s"),
    }
    // 2. An idle socket, held for up to 40 s.
    let c = TcpStream::connect(&s.addr).await?;
    match time_to_close(c, Duration::from_secs(40)).await {
        Some(t) => println!("idle socket: closed by the server after {t:.1} s"),
        None => println!("idle socket: STILL OPEN after 40 s"),
    }

    // 3. 10,000 connections held open (each sends nothing).
    let want = 10_000usize.min(nofile.saturating_sub(100) as usize);
    let t0 = Instant::now();
    let mut held = Vec::with_capacity(want);
    let mut failed = 0;
    for _ in 0..want {
        match TcpStream::connect(&s.addr).await {
            Ok(c) => held.push(c),
            Err(_) => failed += 1,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss, fds) = s.cost();
    // How many of ours the server still holds: those not closed on it.
    let mut open_on_server = 0;
    for c in &held {
        let mut b = [0u8; 1];
        match c.try_read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open_on_server += 1,
            _ => {}
        }
    }
    println!(
        "{want} connections ({failed} failed to connect, {:.1} s): server {rss:.1} MiB RSS (+{:.1}), {fds} fds (+{}); {open_on_server} held by the server, the rest closed at accept",
        t0.elapsed().as_secs_f64(),
        rss - rss0,
        fds.saturating_sub(fds0)
    );
    drop(held);
    // They go after the header read timeout at the latest.
    tokio::time::sleep(Duration::from_secs(limits.header_read_timeout_secs + 1)).await;
    let (rss, fds) = s.cost();
    println!("  after they left: {rss:.1} MiB RSS, {fds} fds");

    // 4. 5,000 session initializations with the one token.
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let url = format!("http://{}/mcp", s.addr);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"abuse","version":"0"}}}"#;
    let (mut ok, mut refused, mut other) = (0, 0, 0);
    let t0 = Instant::now();
    for _ in 0..5_000 {
        let r = http
            .post(&url)
            .header("authorization", format!("Bearer {}", s.token))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init)
            .send()
            .await?;
        match r.status().as_u16() {
            200 => ok += 1,
            429 => refused += 1,
            _ => other += 1,
        }
        let _ = r.bytes().await;
    }
    let (rss, fds) = s.cost();
    let live = s.sessions().await?;
    println!(
        "5000 initializations ({:.1} s): {ok} sessions opened, {refused} refused (429), {other} other; {live} live; server {rss:.1} MiB RSS (+{:.1}), {fds} fds",
        t0.elapsed().as_secs_f64(),
        rss - rss0
    );
    if other > 0 {
        bail!("unexpected answers to initialize");
    }
    // Left idle, they expire.
    let t0 = Instant::now();
    while s.sessions().await? > 0 && t0.elapsed() < Duration::from_secs(session_idle() + 120) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (rss, fds) = s.cost();
    let live = s.sessions().await?;
    println!(
        "  {:.1} s later: {live} live sessions; server {rss:.1} MiB RSS, {fds} fds; a new session opens: {}",
        t0.elapsed().as_secs_f64(),
        http.post(&url)
            .header("authorization", format!("Bearer {}", s.token))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init)
            .send()
            .await?
            .status()
    );
    drop(s.stdin);
    let _ = s.proc.wait().await;
    Ok(())
}
