//! The web view under a running batch, side by side in one run (issue 23, the
//! measurements).
//!
//! ```text
//! cargo bench --bench web [-- TASKS [PARALLEL]]    # default: 200 tasks at parallel 8
//! ```
//!
//! Environment: `PAGES` (50), `TASK_MS` (1000: how long each fake CLI takes), `ROUNDS`
//! (2, reported as medians; each round is the three batches, about 2 minutes),
//! `API_SECS` (3: each API load's measured window).
//!
//! A temp git repository and a config with three providers, `fake-claude`, `fake-codex`
//! and `fake-gemini`, each the real vendor adapter over `aicli-fake-cli`. The batch's
//! tasks take every recorded transcript of the three vendors in turn (`fixtures/<vendor>/`
//! and `hand/`: successes, errors, tools, MCP calls, every event type), each paced to
//! last about `TASK_MS`. Retries are off, so each task has one attempt.
//!
//! 1. **The batch with pages open.** `aicli batch TASKS.json --web` (the release binary)
//!    with `PAGES` pages connected, next to the same batch with `--web` and no page, and
//!    without `--web`. A page is what a browser's task page does: one Server-Sent Events
//!    connection to its task's `/api/batches/B/tasks/T/events` (reconnecting with
//!    `Last-Event-ID` like `EventSource`), plus the batch page's poll of
//!    `/api/batches/B` every 2 s; the pages are spread over the batch's tasks
//!    (`t0`, `t4`, …) and open as soon as the batch is in the record. `--web` prints
//!    only the one-time login URL, so the pages share the one session cookie it gives.
//!    Reported: the `aicli` process's own peak RSS (`VmHWM`, sampled from `/proc` every
//!    10 ms) and its own CPU (`utime + stime` of `/proc/PID/stat`, read once it has
//!    exited and before it is reaped), each next to the other columns; every page's
//!    events against `aicli parse --events` of its task's record (the stream must be
//!    lossless); and how long the process takes to exit after its last task, with the
//!    pages still connected.
//! 2. **Transfer sizes** of the index, the batch page of that batch and a task page:
//!    HTML, `app.js` and `app.css`, uncompressed and gzip'd (`gzip -9`, for reference:
//!    the server sends no `Content-Encoding`).
//! 3. **The API under load**: `aicli web --json` over the finished records, `GET
//!    /api/batches/B` and `GET /api/batches` with 8 and 32 concurrent clients (each its
//!    own keep-alive connection, back to back): requests/s, p50 / p99 latency, and the
//!    server's CPU per request. Then the server's RSS and idle CPU with 0, 50 and 200
//!    event streams open on finished tasks.
//!
//! Client and server share the machine's cores: the figures are for loopback on this
//! machine, the client's work included in the wall times.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

#[path = "../tests/support/mod.rs"]
mod support;
use support::fake::{fake_cli, fixtures, replay_args};
use support::git::init_repo;

const VENDORS: [&str; 3] = ["claude", "codex", "gemini"];
/// The batch page's poll period.
const POLL: Duration = Duration::from_secs(2);
/// How long a batch may take to exit after its last task with the pages connected.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// `EventSource`'s reconnection delay in browsers (the server sends no `retry:`).
const RECONNECT: Duration = Duration::from_secs(3);

fn aicli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli"))
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------
// The batch: fixtures, tasks, config.

/// A recorded transcript (its path without extension) and its number of lines.
struct Fixture {
    vendor: &'static str,
    path: PathBuf,
    lines: u64,
}

/// Every transcript of `vendor`, recorded and hand-written, sorted.
fn fixtures_of(vendor: &'static str) -> Vec<Fixture> {
    let root = fixtures().join(vendor);
    let mut out = Vec::new();
    for dir in [root.clone(), root.join("hand")] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
            .collect();
        paths.sort();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push(Fixture {
                vendor,
                path: p.with_extension(""),
                lines: text.lines().filter(|l| !l.trim().is_empty()).count() as u64,
            });
        }
    }
    out
}

/// `n` tasks over the vendors in turn, each over its vendor's transcripts in turn, each
/// paced to take about `task_ms`: a fifth before the first line, the rest between lines.
fn tasks(n: usize, task_ms: u64) -> Vec<serde_json::Value> {
    let fx: Vec<Vec<Fixture>> = VENDORS.iter().map(|v| fixtures_of(v)).collect();
    (0..n)
        .map(|i| {
            let list = &fx[i % VENDORS.len()];
            let f = &list[(i / VENDORS.len()) % list.len()];
            let (start, per_line) = match (task_ms * 4 / 5).checked_div(f.lines) {
                Some(per_line) => (task_ms / 5, per_line),
                None => (task_ms, 0),
            };
            let mut args = replay_args(&f.path);
            args.extend([
                "--start-delay-ms".into(),
                start.to_string(),
                "--line-delay-ms".into(),
                per_line.to_string(),
            ]);
            serde_json::json!({
                "id": format!("t{i}"),
                "prompt": format!("task t{i}: {}", f.path.file_name().unwrap().to_string_lossy()),
                "provider": format!("fake-{}", f.vendor),
                "extra_args": args,
            })
        })
        .collect()
}

fn write_config(path: &Path) {
    let providers: serde_json::Map<String, serde_json::Value> = VENDORS
        .iter()
        .map(|v| {
            (
                format!("fake-{v}"),
                serde_json::json!({
                    "adapter": v,
                    "binary_path": fake_cli(),
                    // It reads its prompt as the real CLI does.
                    "extra_args": ["--record-stdin", "/dev/null"],
                    // So that the adapters' quick credentials check passes.
                    "env": {"ANTHROPIC_API_KEY": "bench", "CODEX_API_KEY": "bench", "GEMINI_API_KEY": "bench"},
                }),
            )
        })
        .collect();
    let cfg = serde_json::json!({
        "default_provider": "fake-claude",
        "providers": providers,
        "engine": {"retry": {"max_attempts": 1}, "timeout_secs": 600, "idle_timeout_secs": 300},
    });
    std::fs::write(path, cfg.to_string()).unwrap();
}

// ---------------------------------------------------------------------------------------
// One process, measured.

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// `utime + stime` of `pid` (a zombie's too, until it is reaped).
fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of proc_pid_stat(5); `rest` starts at field 3.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
}

/// A `/proc/PID/status` field in KiB (`VmHWM`, `VmRSS`), as MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|k| k / 1024.0)
}

/// What one `aicli batch` cost.
#[derive(Clone, Copy, Default)]
struct Usage {
    wall: Duration,
    own_cpu: Duration,
    peak_rss_mib: f64,
    /// `wait4`'s user + system time: aicli and everything it reaped (CLIs, git).
    tree_cpu: Duration,
}

/// A running child: sampled until it exits, its exit announced on `exited`.
struct Measured {
    pid: u32,
    exited: tokio::sync::watch::Receiver<Option<Instant>>,
    waiter: std::thread::JoinHandle<(Usage, i32)>,
    stderr: std::thread::JoinHandle<Vec<String>>,
    url: std::sync::mpsc::Receiver<String>,
    stdout: std::fs::File,
}

fn spawn_measured(mut cmd: Command) -> Measured {
    let stdout = tempfile::tempfile().unwrap();
    cmd.stdout(stdout.try_clone().unwrap())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let t0 = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // stderr: the web view's URL (its first line starting with http), the rest kept for
    // a failure's message; read as it comes (a full pipe would stop aicli).
    let (url_tx, url) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut tail = Vec::new();
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("http://") {
                let _ = url_tx.send(line.trim().to_owned());
            }
            tail.push(line);
            if tail.len() > 200 {
                tail.remove(0);
            }
        }
        tail
    });
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0.0f64;
            while !done.load(Ordering::Relaxed) {
                if let Some(m) = status_mib(pid, "VmHWM:") {
                    peak = peak.max(m);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let (exit_tx, exited) = tokio::sync::watch::channel(None);
    let waiter = std::thread::spawn(move || {
        // SAFETY: waitid and wait4 on our own child, with valid pointers.
        unsafe {
            let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
            // Exited, not reaped: its /proc/PID/stat still holds its final CPU times.
            libc::waitid(
                libc::P_PID,
                pid,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOWAIT,
            );
            let wall = t0.elapsed();
            let _ = exit_tx.send(Some(Instant::now()));
            let own_cpu = cpu_of(pid).unwrap_or_default();
            done.store(true, Ordering::Relaxed);
            let peak = sampler.join().unwrap();
            let mut status = 0;
            let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
            libc::wait4(pid as i32, &mut status, 0, ru.as_mut_ptr());
            let ru = ru.assume_init();
            let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            };
            drop(child);
            (
                Usage {
                    wall,
                    own_cpu,
                    peak_rss_mib: peak,
                    tree_cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
                },
                code,
            )
        }
    });
    Measured {
        pid,
        exited,
        waiter,
        stderr,
        url,
        stdout,
    }
}

impl Measured {
    /// Waits for its end: its usage, exit code, stdout and the tail of its stderr.
    fn finish(self) -> (Usage, i32, Vec<u8>, Vec<String>) {
        let (u, code) = self.waiter.join().unwrap();
        let err = self.stderr.join().unwrap();
        let mut f = self.stdout;
        f.rewind().unwrap();
        let mut out = Vec::new();
        f.read_to_end(&mut out).unwrap();
        (u, code, out, err)
    }
}

// ---------------------------------------------------------------------------------------
// Pages.

/// What one page saw.
#[derive(Default)]
struct PageOut {
    task: String,
    /// Every event's id and data, in order of arrival (across reconnects).
    events: Vec<(String, serde_json::Value)>,
    sse_bytes: u64,
    reconnects: u32,
    sse_errors: Vec<String>,
    poll_latencies: Vec<Duration>,
    poll_bytes: Vec<u64>,
    poll_errors: u32,
}

/// What the pages share: the cookie, the batch.
struct PageCtx {
    base: String,
    cookie: String,
    batch: String,
    close: CancellationToken,
    exited: tokio::sync::watch::Receiver<Option<Instant>>,
}

impl PageCtx {
    fn exited(&self) -> bool {
        self.exited.borrow().is_some()
    }
}

/// One page, opened after `delay`: its event stream and its poll, until told to close
/// (or the server is gone).
async fn page(ctx: Arc<PageCtx>, task: String, delay: Duration) -> PageOut {
    tokio::time::sleep(delay).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut out = PageOut {
        task: task.clone(),
        ..PageOut::default()
    };
    let sse = sse_loop(&ctx, &http, &task, &mut out.events, &mut out.sse_bytes);
    let poll = poll_loop(&ctx, &http);
    let ((reconnects, sse_errors), (lat, bytes, errs)) = tokio::join!(sse, poll);
    out.reconnects = reconnects;
    out.sse_errors = sse_errors;
    out.poll_latencies = lat;
    out.poll_bytes = bytes;
    out.poll_errors = errs;
    out
}

/// The task's events as `EventSource` reads them: reconnecting after `RECONNECT` with
/// `Last-Event-ID` when the stream ends. Its reconnects and errors.
async fn sse_loop(
    ctx: &PageCtx,
    http: &reqwest::Client,
    task: &str,
    events: &mut Vec<(String, serde_json::Value)>,
    bytes: &mut u64,
) -> (u32, Vec<String>) {
    let url = format!("{}/api/batches/{}/tasks/{task}/events", ctx.base, ctx.batch);
    let mut reconnects = 0;
    let mut errors = Vec::new();
    loop {
        let mut req = http
            .get(&url)
            .header("cookie", &ctx.cookie)
            .header("accept", "text/event-stream");
        if let Some((id, _)) = events.last() {
            req = req.header("last-event-id", id.as_str());
        }
        let resp = tokio::select! {
            () = ctx.close.cancelled() => break,
            r = req.send() => r,
        };
        match resp {
            Ok(r) if r.status().is_success() => {
                let mut r = r;
                let mut buf: Vec<u8> = Vec::new();
                loop {
                    let chunk = tokio::select! {
                        () = ctx.close.cancelled() => return (reconnects, errors),
                        c = r.chunk() => c,
                    };
                    match chunk {
                        Ok(Some(c)) => {
                            *bytes += c.len() as u64;
                            buf.extend_from_slice(&c);
                            frames(&mut buf, events);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            errors.push(format!("stream: {e}"));
                            break;
                        }
                    }
                }
            }
            // EventSource gives up on a response that is not 200.
            Ok(r) => {
                errors.push(format!("status {}", r.status()));
                break;
            }
            Err(e) => errors.push(format!("connect: {e}")),
        }
        // EventSource waits before it connects again; a stream that ended because the
        // server stopped (the batch is over) is not a reconnect then.
        tokio::select! {
            () = ctx.close.cancelled() => break,
            () = tokio::time::sleep(RECONNECT) => {}
        }
        if ctx.exited() {
            break;
        }
        reconnects += 1;
    }
    (reconnects, errors)
}

/// Takes the complete SSE frames out of `buf` into `events` (id, JSON data).
fn frames(buf: &mut Vec<u8>, events: &mut Vec<(String, serde_json::Value)>) {
    while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
        let frame: Vec<u8> = buf.drain(..i + 2).collect();
        let text = String::from_utf8_lossy(&frame);
        let (mut id, mut data) = (None, String::new());
        for l in text.lines() {
            if let Some(v) = l.strip_prefix("id:") {
                id = Some(v.trim_start().to_owned());
            } else if let Some(v) = l.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if let Some(id) = id {
            let v = serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data));
            events.push((id, v));
        }
    }
}

/// The batch page's poll: `GET /api/batches/B/rows` every `POLL`. Its latencies,
/// response sizes and errors.
async fn poll_loop(ctx: &PageCtx, http: &reqwest::Client) -> (Vec<Duration>, Vec<u64>, u32) {
    let url = format!("{}/api/batches/{}/rows", ctx.base, ctx.batch);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut lat, mut sizes, mut errors) = (Vec::new(), Vec::new(), 0);
    loop {
        tokio::select! {
            () = ctx.close.cancelled() => break,
            _ = tick.tick() => {}
        }
        let t = Instant::now();
        let got = async {
            let r = http.get(&url).header("cookie", &ctx.cookie).send().await?;
            r.error_for_status()?.bytes().await
        };
        let body = tokio::select! {
            () = ctx.close.cancelled() => break,
            b = got => b,
        };
        match body {
            Ok(b) => {
                lat.push(t.elapsed());
                sizes.push(b.len() as u64);
            }
            Err(_) => {
                errors += 1;
                if ctx.exited() {
                    break;
                }
            }
        }
    }
    (lat, sizes, errors)
}

/// Logs in with the one-time URL: the session cookie.
async fn log_in(url: &str) -> String {
    let http = support::browser::http_for(url);
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 303, "the login URL logs in");
    r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// The id of the batch that is not in `known`, once the web view lists it.
async fn new_batch(base: &str, cookie: &str, known: &[String]) -> String {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list: serde_json::Value = http
            .get(format!("{base}/api/batches"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(id) = list
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["batch_id"].as_str())
            .find(|id| !known.iter().any(|k| k == id))
        {
            return id.to_owned();
        }
        assert!(Instant::now() < deadline, "the batch never showed up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When things happened around a batch with pages, from its spawn.
#[derive(Default, Clone, Copy)]
struct Timeline {
    /// When the batch's `result.json` was seen (every task had ended).
    all_done: Option<Duration>,
    /// When the pages were told to close (after `EXIT_GRACE` if the batch had not
    /// exited by then).
    closed: Option<Duration>,
    exited: Option<Duration>,
    /// The aicli process's own CPU then.
    cpu_at_all_done: Option<Duration>,
    /// The pages' CPU (this process's, while they were open).
    client_cpu: Duration,
}

/// Opens `b.pages` pages on the batch `m` runs as soon as it is listed (the one not in
/// `b.batches`), keeps them until the batch has ended (and exited, or `EXIT_GRACE`
/// passed), then closes them.
async fn drive_pages(
    b: &Bench,
    pid: u32,
    url: String,
    exited: tokio::sync::watch::Receiver<Option<Instant>>,
    t0: Instant,
) -> (String, Vec<PageOut>, Timeline) {
    let (pages, n_tasks, known, runs_dir) = (b.pages, b.n, &b.batches, &b.runs_dir);
    let client0 = support::bench::self_cpu();
    let base = support::browser::loopback_base(&url);
    let cookie = log_in(&url).await;
    let batch = new_batch(&base, &cookie, known).await;
    let ctx = Arc::new(PageCtx {
        base,
        cookie,
        batch: batch.clone(),
        close: CancellationToken::new(),
        exited: exited.clone(),
    });
    let mut handles = Vec::new();
    for i in 0..pages {
        let task = format!("t{}", i * n_tasks / pages);
        // Opened over one poll period, so the polls are spread as a browser's would be.
        let delay = POLL * i as u32 / pages as u32;
        handles.push(tokio::spawn(page(ctx.clone(), task, delay)));
    }
    let mut exited = exited.clone();
    // Until every task has ended: the batch's `result.json` is written then (or the
    // batch exited first).
    let result_file = runs_dir.join(&batch).join("result.json");
    let mut all_done = None;
    loop {
        if result_file.exists() {
            all_done = Some(Instant::now());
            break;
        }
        if exited.borrow().is_some() {
            break;
        }
        tokio::select! {
            _ = exited.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let cpu_at_all_done = all_done.and_then(|_| cpu_of(pid));
    // The pages stay: does the batch exit with them connected?
    let wait_exit = async {
        let mut e = exited.clone();
        while e.borrow().is_none() {
            if e.changed().await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(EXIT_GRACE, wait_exit).await;
    let closed = Instant::now();
    ctx.close.cancel();
    let mut outs = Vec::new();
    for h in handles {
        outs.push(h.await.unwrap());
    }
    let mut e = exited.clone();
    let exited_at = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Some(t) = *e.borrow() {
                return t;
            }
            e.changed().await.unwrap();
        }
    })
    .await
    .expect("the batch exits once the pages are closed");
    let closed = (closed < exited_at).then(|| closed - t0);
    (
        batch,
        outs,
        Timeline {
            all_done: all_done.map(|t| t - t0),
            closed,
            exited: Some(exited_at - t0),
            cpu_at_all_done,
            client_cpu: support::bench::self_cpu() - client0,
        },
    )
}

// ---------------------------------------------------------------------------------------
// Part 1: the batch, three ways.

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Pages,
    WebNoPages,
    NoWeb,
}

impl Side {
    const ALL: [Side; 3] = [Side::Pages, Side::WebNoPages, Side::NoWeb];

    fn label(self, pages: usize) -> String {
        match self {
            Side::Pages => format!("`--web`, {pages} pages connected"),
            Side::WebNoPages => "`--web`, no page".into(),
            Side::NoWeb => "no `--web`".into(),
        }
    }
}

struct Bench {
    dir: PathBuf,
    template: PathBuf,
    runs_dir: PathBuf,
    config: PathBuf,
    tasks_file: PathBuf,
    n: usize,
    pages: usize,
    runs: usize,
    /// The batches run so far, oldest first.
    batches: Vec<String>,
}

/// A pages run's record: its batch, its pages, its timeline.
struct PagesRun {
    batch: String,
    pages: Vec<PageOut>,
    timeline: Timeline,
    wall: Duration,
}

impl Bench {
    fn fresh_repo(&mut self) -> PathBuf {
        self.runs += 1;
        let repo = self.dir.join(format!("repo-{}", self.runs));
        let st = Command::new("cp")
            .arg("-a")
            .arg(&self.template)
            .arg(&repo)
            .status()
            .unwrap();
        assert!(st.success());
        repo
    }

    fn run(&mut self, rt: &tokio::runtime::Runtime, side: Side) -> (Usage, Option<PagesRun>) {
        let repo = self.fresh_repo();
        let mut cmd = Command::new(aicli_bin());
        cmd.arg("--config")
            .arg(&self.config)
            .arg("batch")
            .arg(&self.tasks_file)
            .arg("--json")
            .arg("--repo")
            .arg(&repo)
            .arg("--runs-dir")
            .arg(&self.runs_dir)
            .current_dir(&repo);
        if side != Side::NoWeb {
            cmd.arg("--web");
        }
        let t0 = Instant::now();
        let m = spawn_measured(cmd);
        let pages = (side == Side::Pages).then(|| {
            let url = m
                .url
                .recv_timeout(Duration::from_secs(60))
                .expect("the web view's URL on stderr");
            let exited = m.exited.clone();
            rt.block_on(drive_pages(self, m.pid, url, exited, t0))
        });
        let (u, code, stdout, err) = m.finish();
        let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
            panic!(
                "aicli batch exited {code}, stdout not JSON ({e}): {}\nstderr: {}",
                String::from_utf8_lossy(&stdout),
                err.join("\n")
            )
        });
        let id = v["batch_id"].as_str().expect("a batch id").to_owned();
        assert_eq!(
            v["tasks"].as_array().map(Vec::len),
            Some(self.n),
            "every task has a result"
        );
        if let Some((b, _, _)) = &pages {
            assert_eq!(b, &id, "the pages watched this run's batch");
        }
        self.batches.push(id);
        eprintln!(
            "{:<32} {:>6.1} s, exit {code}, {} succeeded / {} failed / {} blocked; aicli own CPU {:.2} s, peak RSS {:.1} MiB, tree CPU {:.2} s",
            side.label(self.pages),
            u.wall.as_secs_f64(),
            v["n_succeeded"],
            v["n_failed"],
            v["n_blocked"],
            u.own_cpu.as_secs_f64(),
            u.peak_rss_mib,
            u.tree_cpu.as_secs_f64()
        );
        let _ = std::fs::remove_dir_all(&repo);
        (
            u,
            pages.map(|(batch, pages, timeline)| PagesRun {
                batch,
                pages,
                timeline,
                wall: u.wall,
            }),
        )
    }

    /// Each page's events next to `aicli parse --events` of its task's record: the
    /// pages that got exactly those, and what the others missed or repeated.
    fn check_lossless(&self, run: &PagesRun) -> Lossless {
        let mut l = Lossless::default();
        for p in &run.pages {
            let dir = self.runs_dir.join(&run.batch).join("tasks").join(&p.task);
            let out = Command::new(aicli_bin())
                .arg("--config")
                .arg(&self.config)
                .args(["parse", "--events"])
                .arg(&dir)
                .output()
                .unwrap();
            let want: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let got: Vec<&serde_json::Value> = p.events.iter().map(|(_, v)| v).collect();
            let mut ids: Vec<&str> = p.events.iter().map(|(i, _)| i.as_str()).collect();
            let n_ids = ids.len();
            ids.sort_unstable();
            ids.dedup();
            l.expected += want.len();
            l.received += got.len();
            l.repeated += n_ids - ids.len();
            l.reconnects += p.reconnects as usize;
            if got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| *a == b) {
                l.exact += 1;
            } else {
                let same = got.iter().zip(&want).take_while(|(a, b)| **a == *b).count();
                l.missing += want.len().saturating_sub(same);
                l.bad.push(format!(
                    "{}: {} received, {} in the record, the first {} equal; errors {:?}",
                    p.task,
                    got.len(),
                    want.len(),
                    same,
                    p.sse_errors
                ));
            }
        }
        l
    }
}

#[derive(Default)]
struct Lossless {
    exact: usize,
    expected: usize,
    received: usize,
    missing: usize,
    repeated: usize,
    reconnects: usize,
    bad: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Parts 2 and 3: `aicli web` over the finished records.

struct WebChild {
    child: std::process::Child,
    base: String,
    token: String,
}

impl Drop for WebChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_web(config: &Path, repo: &Path, runs: &Path) -> WebChild {
    let mut child = Command::new(aicli_bin())
        .arg("--config")
        .arg(config)
        .args(["web", "--json", "--repo"])
        .arg(repo)
        .arg("--runs-dir")
        .arg(runs)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).expect("aicli web --json's line");
    WebChild {
        child,
        base: format!("http://{}", v["addr"].as_str().unwrap()),
        token: v["api_token"].as_str().unwrap().to_owned(),
    }
}

/// A page and its two files: bytes as sent, and gzip -9'd.
struct Transfer {
    name: String,
    html: usize,
    js: usize,
    css: usize,
    gz_html: usize,
    gz_js: usize,
    gz_css: usize,
}

fn gzip_len(bytes: &[u8]) -> usize {
    let mut gz = Command::new("gzip")
        .arg("-9c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = gz.stdin.take().unwrap();
    let owned = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&owned));
    let out = gz.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out.stdout.len()
}

async fn get_bytes(http: &reqwest::Client, w: &WebChild, path: &str) -> (Vec<u8>, Option<String>) {
    let r = http
        .get(format!("{}{path}", w.base))
        .bearer_auth(&w.token)
        .header("accept-encoding", "gzip, br")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    let enc = r
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().unwrap_or("?").to_owned());
    (r.bytes().await.unwrap().to_vec(), enc)
}

/// The latencies of `clients` clients sending `GET path` back to back for `secs` (after
/// a second's warm-up), and the server's CPU over that window.
struct Load {
    path_label: String,
    clients: usize,
    requests: usize,
    secs: f64,
    p50: Duration,
    p99: Duration,
    server_cpu: Duration,
    bytes: u64,
}

async fn load(w: &WebChild, path: &str, label: &str, clients: usize, secs: f64) -> Load {
    let warm = Instant::now() + Duration::from_secs(1);
    let end = warm + Duration::from_secs_f64(secs);
    let url = format!("{}{path}", w.base);
    let mut hs = Vec::new();
    for _ in 0..clients {
        let url = url.clone();
        let token = w.token.clone();
        hs.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut lat = Vec::new();
            let mut bytes = 0;
            loop {
                let t = Instant::now();
                if t >= end {
                    break;
                }
                let r = http.get(&url).bearer_auth(&token).send().await.unwrap();
                assert!(r.status().is_success());
                let b = r.bytes().await.unwrap();
                let done = Instant::now();
                if t >= warm && done <= end {
                    lat.push(done - t);
                    bytes = b.len() as u64;
                }
            }
            (lat, bytes)
        }));
    }
    let pid = w.child.id();
    tokio::time::sleep_until(warm.into()).await;
    let c0 = cpu_of(pid).unwrap();
    tokio::time::sleep_until(end.into()).await;
    let c1 = cpu_of(pid).unwrap();
    let mut lat = Vec::new();
    let mut bytes = 0;
    for h in hs {
        let (l, b) = h.await.unwrap();
        lat.extend(l);
        bytes = bytes.max(b);
    }
    lat.sort_unstable();
    Load {
        path_label: label.to_owned(),
        clients,
        requests: lat.len(),
        secs,
        p50: pct(&lat, 0.50),
        p99: pct(&lat, 0.99),
        server_cpu: c1.saturating_sub(c0),
        bytes,
    }
}

/// The server's RSS and CPU with `n` event streams open on finished tasks of `batch`.
struct Streams {
    n: usize,
    events: usize,
    rss_mib: f64,
    cpu_pct: f64,
}

async fn idle_streams(w: &WebChild, batch: &str, n_tasks: usize, n: usize, secs: f64) -> Streams {
    let close = CancellationToken::new();
    let mut hs = Vec::new();
    for i in 0..n {
        let url = format!(
            "{}/api/batches/{batch}/tasks/t{}/events",
            w.base,
            i * n_tasks / n.max(1)
        );
        let token = w.token.clone();
        let close = close.clone();
        hs.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut r = http.get(&url).bearer_auth(&token).send().await.unwrap();
            assert!(r.status().is_success());
            let (mut buf, mut evs) = (Vec::new(), Vec::new());
            loop {
                tokio::select! {
                    () = close.cancelled() => break,
                    c = r.chunk() => match c {
                        Ok(Some(c)) => { buf.extend_from_slice(&c); frames(&mut buf, &mut evs); }
                        _ => break,
                    },
                }
            }
            evs.len()
        }));
    }
    // Every stream has sent what its record holds by then.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = w.child.id();
    let c0 = cpu_of(pid).unwrap();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let c1 = cpu_of(pid).unwrap();
    let el = t0.elapsed().as_secs_f64();
    let rss = status_mib(pid, "VmRSS:").unwrap_or(0.0);
    close.cancel();
    let mut events = 0;
    for h in hs {
        events += h.await.unwrap();
    }
    // Let the server drop the closed streams before the next figure.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Streams {
        n,
        events,
        rss_mib: rss,
        cpu_pct: (c1.saturating_sub(c0)).as_secs_f64() / el * 100.0,
    }
}

// ---------------------------------------------------------------------------------------
// Figures.

fn pct(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn kib(b: usize) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

fn main() {
    let (n, parallels) = support::bench::tasks_and_parallels(200, &[8]);
    let parallel = parallels[0];
    let pages = env_num("PAGES", 50) as usize;
    let task_ms = env_num("TASK_MS", 1000);
    let rounds = env_num("ROUNDS", 2).max(1) as usize;
    let api_secs = env_num("API_SECS", 3) as f64;
    let started = Instant::now();

    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    init_repo(&template);
    let config = tmp.path().join("aicli.json");
    write_config(&config);
    let tasks_file = tmp.path().join("tasks.json");
    let tasks = tasks(n, task_ms);
    let n_fixtures: usize = VENDORS.iter().map(|v| fixtures_of(v).len()).sum();
    std::fs::write(
        &tasks_file,
        serde_json::json!({"max_parallel": parallel, "tasks": tasks}).to_string(),
    )
    .unwrap();
    let mut b = Bench {
        dir: tmp.path().to_path_buf(),
        template,
        runs_dir: tmp.path().join("runs"),
        config: config.clone(),
        tasks_file,
        n,
        pages,
        runs: 0,
        batches: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "web bench: {n} tasks at parallel {parallel} over {n_fixtures} transcripts of {} ({task_ms} ms each), {pages} pages, {rounds} rounds (medians)",
        VENDORS.join("/")
    );
    println!("aicli: {}", aicli_bin().display());

    // Part 1.
    let mut usage: Vec<Vec<Usage>> = vec![Vec::new(); Side::ALL.len()];
    let mut pages_runs = Vec::new();
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..Side::ALL.len()).collect()
        } else {
            (0..Side::ALL.len()).rev().collect()
        };
        for i in order {
            let (u, p) = b.run(&rt, Side::ALL[i]);
            usage[i].push(u);
            pages_runs.extend(p);
        }
    }
    let losses: Vec<Lossless> = pages_runs.iter().map(|r| b.check_lossless(r)).collect();

    // Parts 2 and 3 over the records: the last pages run's batch.
    let last = pages_runs.last().expect("a pages run");
    let batch = last.batch.clone();
    let repo = b.fresh_repo();
    let web = start_web(&config, &repo, &b.runs_dir);
    let (transfers, encodings, poll_size, poll_gz, n_batches) = rt.block_on(async {
        let http = reqwest::Client::new();
        let (js, e1) = get_bytes(&http, &web, "/static/app.js").await;
        let (css, e2) = get_bytes(&http, &web, "/static/app.css").await;
        let mut encs = vec![e1, e2];
        let (gz_js, gz_css) = (gzip_len(&js), gzip_len(&css));
        let mut out = Vec::new();
        let mut add = |name: String, html: Vec<u8>| {
            out.push(Transfer {
                name,
                html: html.len(),
                js: js.len(),
                css: css.len(),
                gz_html: gzip_len(&html),
                gz_js,
                gz_css,
            });
        };
        let (index, e) = get_bytes(&http, &web, "/").await;
        encs.push(e);
        let list: serde_json::Value =
            serde_json::from_slice(&get_bytes(&http, &web, "/api/batches").await.0).unwrap();
        let n_batches = list.as_array().map_or(0, Vec::len);
        add(format!("index ({n_batches} batches)"), index);
        let (bp, e) = get_bytes(&http, &web, &format!("/batches/{batch}")).await;
        encs.push(e);
        add(format!("batch page ({n} tasks)"), bp);
        let (tp, _) = get_bytes(&http, &web, &format!("/batches/{batch}/tasks/t0")).await;
        add("task page `t0`".into(), tp);
        let mut largest = (String::new(), Vec::new());
        for i in 0..n {
            let (p, _) = get_bytes(&http, &web, &format!("/batches/{batch}/tasks/t{i}")).await;
            if p.len() > largest.1.len() {
                largest = (format!("t{i}"), p);
            }
        }
        add(
            format!("task page, largest of {n} (`{}`)", largest.0),
            largest.1,
        );
        let (api, e) = get_bytes(&http, &web, &format!("/api/batches/{batch}")).await;
        encs.push(e);
        let api_gz = gzip_len(&api);
        (out, encs, api.len(), api_gz, n_batches)
    });
    let compressed: Vec<String> = encodings.into_iter().flatten().collect();

    // Part 3.
    let mut loads = Vec::new();
    let mut streams = Vec::new();
    rt.block_on(async {
        for (path, label) in [
            (
                format!("/api/batches/{batch}/rows"),
                format!("`GET /api/batches/B/rows`, the page's poll ({n} tasks)"),
            ),
            (
                format!("/api/batches/{batch}"),
                format!("`GET /api/batches/B` ({n} tasks)"),
            ),
            (
                "/api/batches".to_owned(),
                format!("`GET /api/batches` ({n_batches} batches)"),
            ),
        ] {
            for clients in [8, 32] {
                let l = load(&web, &path, &label, clients, api_secs).await;
                eprintln!(
                    "{label} x{clients}: {:.0} req/s, p50 {}, p99 {}",
                    l.requests as f64 / l.secs,
                    ms(l.p50),
                    ms(l.p99)
                );
                loads.push(l);
            }
        }
        for k in [0, 50, 200] {
            streams.push(idle_streams(&web, &batch, n, k, 3.0).await);
        }
    });
    drop(web);

    // The figures.
    println!();
    println!(
        "## 1. `aicli batch --web`: {n} tasks, parallel {parallel}, the `aicli` process (medians of {rounds})"
    );
    println!();
    println!(
        "| | wall | own peak RSS | vs no `--web` | own CPU (user+sys) | vs no `--web` | process tree CPU |"
    );
    println!("|---|---|---|---|---|---|---|");
    let med = |i: usize, f: &dyn Fn(&Usage) -> f64| median(usage[i].iter().map(f).collect());
    let rss = |u: &Usage| u.peak_rss_mib;
    let cpu = |u: &Usage| u.own_cpu.as_secs_f64();
    let base_rss = med(2, &rss);
    let base_cpu = med(2, &cpu);
    for (i, side) in Side::ALL.iter().enumerate() {
        println!(
            "| {} | {:.1} s | {:.1} MiB | {:+.1} MiB ({:.2}x) | {:.2} s | {:+.2} s ({:.2}x) | {:.2} s |",
            side.label(pages),
            med(i, &|u| u.wall.as_secs_f64()),
            med(i, &rss),
            med(i, &rss) - base_rss,
            med(i, &rss) / base_rss,
            med(i, &cpu),
            med(i, &cpu) - base_cpu,
            med(i, &cpu) / base_cpu,
            med(i, &|u| u.tree_cpu.as_secs_f64()),
        );
    }
    let (p_rss, w_rss) = (med(0, &rss), med(1, &rss));
    let (p_cpu, w_cpu) = (med(0, &cpu), med(1, &cpu));
    println!();
    println!(
        "{pages} pages against none: {:+.1} MiB peak RSS ({:.1} KiB per page), {:+.2} s CPU ({:.1} ms per page, {:.2}x)",
        p_rss - w_rss,
        (p_rss - w_rss) * 1024.0 / pages as f64,
        p_cpu - w_cpu,
        (p_cpu - w_cpu) * 1000.0 / pages as f64,
        p_cpu / w_cpu
    );
    let until_done: Vec<f64> = pages_runs
        .iter()
        .filter_map(|r| r.timeline.cpu_at_all_done)
        .map(|d| d.as_secs_f64())
        .collect();
    if !until_done.is_empty() {
        let u = median(until_done);
        println!(
            "of the {pages} pages' run's {p_cpu:.2} s CPU, {u:.2} s were spent until its last task ended ({:+.2} s, {:.2}x against no page; the rest while it waited to exit with the pages connected)",
            u - w_cpu,
            u / w_cpu
        );
    }
    println!();
    println!(
        "| pages run | last task ended | pages lossless | events received / in the records | missing | repeated | reconnects | SSE bytes per page (mean) | polls | poll p50 / p99 | poll response | all ended → exit | the pages' CPU (this process) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, (r, l)) in pages_runs.iter().zip(&losses).enumerate() {
        let mut lat: Vec<Duration> = r
            .pages
            .iter()
            .flat_map(|p| p.poll_latencies.clone())
            .collect();
        lat.sort_unstable();
        let sse: u64 = r.pages.iter().map(|p| p.sse_bytes).sum();
        let poll_max = r
            .pages
            .iter()
            .flat_map(|p| p.poll_bytes.clone())
            .max()
            .unwrap_or(0);
        let poll_err: u32 = r.pages.iter().map(|p| p.poll_errors).sum();
        let t = r.timeline;
        let exit = match (t.all_done, t.closed, t.exited) {
            (Some(d), None, Some(e)) => format!("{:.2} s, pages connected", (e - d).as_secs_f64()),
            (Some(d), Some(c), Some(e)) => format!(
                "not within {:.0} s with the pages connected; {:.2} s after they closed",
                (c - d).as_secs_f64(),
                (e - c).as_secs_f64()
            ),
            _ => "the batch exited before its result.json was seen".into(),
        };
        println!(
            "| {} ({:.1} s) | {} | {} of {} | {} / {} | {} | {} | {} | {} | {}{} | {} / {} | {} | {} | {:.2} s |",
            i + 1,
            r.wall.as_secs_f64(),
            t.all_done
                .map_or("?".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
            l.exact,
            r.pages.len(),
            l.received,
            l.expected,
            l.missing,
            l.repeated,
            l.reconnects,
            kib(sse as usize / r.pages.len().max(1)),
            lat.len(),
            if poll_err > 0 {
                format!(" ({poll_err} failed)")
            } else {
                String::new()
            },
            ms(pct(&lat, 0.5)),
            ms(pct(&lat, 0.99)),
            kib(poll_max as usize),
            exit,
            t.client_cpu.as_secs_f64()
        );
    }
    for l in &losses {
        for bad in &l.bad {
            println!("- lost or different: {bad}");
        }
    }

    println!();
    println!(
        "## 2. Transfer size per page load (uncompressed; gzip -9 for reference; the server compresses: {})",
        if compressed.is_empty() {
            "no".to_owned()
        } else {
            compressed.join(", ")
        }
    );
    println!();
    println!("| page | HTML | + app.js + app.css | total | gzip'd total |");
    println!("|---|---|---|---|---|");
    for t in &transfers {
        println!(
            "| {} | {} | {} + {} | {} | {} ({} + {} + {}) |",
            t.name,
            kib(t.html),
            kib(t.js),
            kib(t.css),
            kib(t.html + t.js + t.css),
            kib(t.gz_html + t.gz_js + t.gz_css),
            kib(t.gz_html),
            kib(t.gz_js),
            kib(t.gz_css)
        );
    }
    println!(
        "| the batch page's poll, `GET /api/batches/B` | {} JSON | | {} every 2 s = {} per page per minute | {} |",
        kib(poll_size),
        kib(poll_size),
        kib(poll_size * 30),
        kib(poll_gz)
    );

    println!();
    println!(
        "## 3. The API over the finished records (`aicli web`), back-to-back clients on loopback"
    );
    println!();
    println!("| endpoint | clients | requests/s | p50 | p99 | server CPU per request | response |");
    println!("|---|---|---|---|---|---|---|");
    for l in &loads {
        println!(
            "| {} | {} | {:.0} | {} | {} | {:.2} ms | {} |",
            l.path_label,
            l.clients,
            l.requests as f64 / l.secs,
            ms(l.p50),
            ms(l.p99),
            l.server_cpu.as_secs_f64() * 1000.0 / l.requests.max(1) as f64,
            kib(l.bytes as usize)
        );
    }
    println!();
    println!(
        "| event streams open on finished tasks | events sent | `aicli web` RSS | its CPU while nothing happens |"
    );
    println!("|---|---|---|---|");
    for s in &streams {
        println!(
            "| {} | {} | {:.1} MiB | {:.1}% of a core |",
            s.n, s.events, s.rss_mib, s.cpu_pct
        );
    }
    println!();
    println!("bench total: {:.0} s", started.elapsed().as_secs_f64());
}
