//! Pool throughput and per-session overhead, next to bare tokio and a Python asyncio peer.
//!
//! `cargo bench --bench pool [-- TASKS [PARALLEL...]]` (default: 1000 tasks at max_parallel
//! 50 and 200). Each task runs the real `aicli-fake-cli` process, which replays the real
//! Claude transcript `fixtures/claude/text` with a fixed delay per line, through the whole
//! engine (session supervision, parsing, run records as in a real batch; no worktrees, so
//! git is not what is measured). At each parallelism, side by side in one run:
//!
//! - bare tokio: the same processes with a plain `tokio::process::Command`, stdout read
//!   line by line and discarded (the floor);
//! - the Python peer (`benches/asyncio_peer.py pool`): the orchestrator a user would
//!   write (asyncio subprocesses under a semaphore, `json.loads` of every line, an events
//!   file and a result JSON per task);
//! - aicli with `cgroups: off` and with `cgroups: auto` (a cgroup per run where the
//!   machine allows one).
//!
//! Reported as ratios, since the 2-core machine is shared: aicli / bare and aicli /
//! Python; first-event overhead (the engine's spawn-to-first-event p50 minus the bare
//! processes' spawn-to-first-line p50 at the same parallelism); aicli's own CPU per task
//! and peak RSS (this process, reset before each aicli run; not the children).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli::proc::cgroup::CgroupMode;
use aicli::providers::{AiCliConfig, ProviderRegistry};
use aicli::testing::ReplayProvider;
use aicli::{BatchEvent, BatchOptions, Engine};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

#[path = "../tests/support/mod.rs"]
mod support;
use support::fake::{fake_cli, fake_tasks, replay_args};

const LINE_DELAY_MS: u64 = 20;

fn fixture() -> PathBuf {
    support::fake::fixture("claude", "text")
}

/// The fake CLI's argv as the engine's replay provider builds it (the bare processes
/// and the Python peer run exactly this).
fn fake_argv() -> Vec<String> {
    let mut argv = replay_args(&fixture());
    argv.extend(["--line-delay-ms".into(), LINE_DELAY_MS.to_string()]);
    argv
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Resets this process's peak RSS (`VmHWM`) to its current RSS (Linux 4.0+), so that
/// each aicli run reports its own peak.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One fake CLI started bare: spawn, stdout read line by line to EOF. Returns its
/// spawn-to-first-line latency (ms).
async fn bare_one() -> f64 {
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new(fake_cli())
        .args(fake_argv())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    lines.next_line().await.unwrap();
    let first = t0.elapsed().as_secs_f64() * 1000.0;
    while lines.next_line().await.unwrap().is_some() {}
    assert!(child.wait().await.unwrap().success());
    first
}

/// The fake CLI's own spawn-to-first-line latency, one at a time (ms).
async fn bare_first_line(n: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(bare_one().await);
    }
    out
}

/// The same processes without aicli: `n` fake CLIs, `parallel` at a time. Tasks/s and
/// each one's spawn-to-first-line latency.
async fn bare(n: usize, parallel: usize) -> (f64, Vec<f64>) {
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel));
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let permit = sem.clone().acquire_owned().await.unwrap();
        set.spawn(async move {
            let first = bare_one().await;
            drop(permit);
            first
        });
    }
    let mut first = Vec::new();
    while let Some(f) = set.join_next().await {
        first.push(f.unwrap());
    }
    (n as f64 / t0.elapsed().as_secs_f64(), first)
}

/// What the Python peer reports (see `benches/asyncio_peer.py`).
struct Peer {
    tasks_per_s: f64,
    cpu: Duration,
    peak_rss_mib: f64,
    first_line_ms: Vec<f64>,
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The Python asyncio peer on the same processes, `parallel` at a time.
async fn python_peer(n: usize, parallel: usize, dir: &Path) -> Peer {
    let out_dir = dir.join(format!("peer-{parallel}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/asyncio_peer.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg("pool")
        .args([
            "--tasks",
            &n.to_string(),
            "--parallel",
            &parallel.to_string(),
        ])
        .arg("--out")
        .arg(&out_dir)
        .arg("--")
        .arg(fake_cli())
        .args(fake_argv())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "python peer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["succeeded"].as_u64(),
        Some(n as u64),
        "every peer task succeeds"
    );
    Peer {
        tasks_per_s: n as f64 / v["wall_s"].as_f64().unwrap(),
        cpu: Duration::from_secs_f64(v["cpu_s"].as_f64().unwrap()),
        peak_rss_mib: v["peak_rss_mib"].as_f64().unwrap(),
        first_line_ms: v["first_line_ms"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .collect(),
    }
}

struct Run {
    wall: Duration,
    cpu: Duration,
    peak_rss_mib: f64,
    first_event_ms: Vec<f64>,
    succeeded: usize,
}

async fn run(n: usize, parallel: usize, cgroups: CgroupMode, dir: &Path) -> Run {
    let mut config = AiCliConfig::builtin().unwrap();
    config.engine.max_parallel = parallel;
    config.engine.cgroups = cgroups;
    let mut reg = ProviderRegistry::from_config(&config).unwrap();
    let inner = reg.get("claude").unwrap();
    reg.register(Arc::new(ReplayProvider::new(
        "fake",
        inner,
        &fake_cli(),
        Some(&fixture()),
    )));
    let engine = Engine::new(config, reg);
    let tasks = fake_tasks(n, "bench", LINE_DELAY_MS);
    let mut opts = BatchOptions::new(dir);
    opts.provider = Some("fake".into());
    opts.worktrees = false;
    opts.runs_dir = Some(dir.join(format!("runs-{parallel}-{cgroups:?}")));
    let (tx, mut rx) = aicli::live::channel(256 << 20);
    let collector = tokio::spawn(async move {
        let mut started: HashMap<Arc<str>, Instant> = HashMap::new();
        let mut first: Vec<f64> = Vec::new();
        loop {
            match rx.recv().await {
                Ok(BatchEvent::TaskStarted { task_id, .. }) => {
                    started.insert(task_id, Instant::now());
                }
                Ok(BatchEvent::Agent { task_id, .. }) => {
                    if let Some(t0) = started.remove(&task_id) {
                        first.push(t0.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                Ok(_) => {}
                Err(aicli::live::RecvError::Lagged(k)) => eprintln!("lagged {k}"),
                Err(aicli::live::RecvError::Closed) => break,
            }
        }
        first
    });
    reset_peak_rss();
    let cpu0 = support::bench::self_cpu();
    let t0 = Instant::now();
    let r = engine
        .run_batch(tasks, opts, tx, CancellationToken::new())
        .await
        .unwrap();
    let wall = t0.elapsed();
    let cpu = support::bench::self_cpu() - cpu0;
    Run {
        wall,
        cpu,
        peak_rss_mib: peak_rss_mib(),
        first_event_ms: collector.await.unwrap(),
        succeeded: r.n_succeeded,
    }
}

/// Milliseconds per task.
fn per_task_ms(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1000.0 / n as f64
}

fn main() {
    let (n, parallels) = support::bench::tasks_and_parallels(1000, &[50, 200]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let lines = std::fs::read_to_string(format!("{}.ndjson", fixture().display()))
            .unwrap()
            .lines()
            .count() as u64;
        let fake_work_ms = lines * LINE_DELAY_MS;
        let mut alone = bare_first_line(50).await;
        let alone_p50 = percentile(&mut alone, 0.5);
        println!(
            "pool bench: {n} tasks; each runs aicli-fake-cli replaying fixtures/claude/text ({lines} lines, {LINE_DELAY_MS} ms per line = {fake_work_ms} ms of fake work)"
        );
        println!("fake CLI alone, spawn-to-first-line: p50 {alone_p50:.1} ms (50 runs, one at a time)");
        println!(
            "cgroups: auto gives each run a cgroup {}\n",
            match aicli::proc::cgroup::available(CgroupMode::Auto) {
                Some(v) => format!("({v:?})"),
                None => "(none available here: both aicli columns run without)".into(),
            }
        );
        let mut rows = Vec::new();
        let mut details = Vec::new();
        for &p in &parallels {
            // Side by side in one run, at the same parallelism.
            let (bare_tps, mut bare_first) = bare(n, p).await;
            let bare_p50 = percentile(&mut bare_first, 0.5);
            let mut peer = python_peer(n, p, dir.path()).await;
            let peer_p50 = percentile(&mut peer.first_line_ms, 0.5);
            let mut cells = Vec::new();
            for mode in [CgroupMode::Off, CgroupMode::Auto] {
                let mut r = run(n, p, mode, dir.path()).await;
                assert_eq!(r.succeeded, n, "every task succeeds");
                let tps = n as f64 / r.wall.as_secs_f64();
                let p50 = percentile(&mut r.first_event_ms, 0.5);
                let p99 = percentile(&mut r.first_event_ms, 0.99);
                details.push(format!(
                    "parallel {p}, cgroups {mode:?}: wall {:.2} s, first event p50 {p50:.1} / p99 {p99:.1} ms, aicli CPU {:.2} s",
                    r.wall.as_secs_f64(),
                    r.cpu.as_secs_f64()
                ));
                cells.push((tps, p50 - bare_p50, per_task_ms(r.cpu, n), r.peak_rss_mib));
            }
            let ideal = 1000.0 * p as f64 / fake_work_ms as f64;
            let (off, on) = (cells[0], cells[1]);
            rows.push(format!(
                "| {p} | {off_tps:.0} / {on_tps:.0} | {bare_tps:.0} | {peer_tps:.0} | {ideal:.0} | {:.2}x / {:.2}x | {:.1}x / {:.1}x | {:+.1} / {:+.1} ms | {:.2} / {:.2} ms | {:.1} / {:.1} MiB | {:.2} ms, {:.0} MiB |",
                off.0 / bare_tps,
                on.0 / bare_tps,
                off.0 / peer.tasks_per_s,
                on.0 / peer.tasks_per_s,
                off.1,
                on.1,
                off.2,
                on.2,
                off.3,
                on.3,
                per_task_ms(peer.cpu, n),
                peer.peak_rss_mib,
                off_tps = off.0,
                on_tps = on.0,
                peer_tps = peer.tasks_per_s,
            ));
            details.push(format!(
                "parallel {p}: bare first line p50 {bare_p50:.1} ms, Python peer first line p50 {peer_p50:.1} ms"
            ));
        }
        println!("aicli figures: cgroups off / auto. Ratios: aicli / bare tokio, aicli / Python peer.");
        println!("first-event overhead: aicli's spawn-to-first-event p50 minus the bare processes' spawn-to-first-line p50 at the same parallelism.");
        println!("CPU and peak RSS: the orchestrator's own (aicli: this process; the peer: python3), not the CLIs'.\n");
        println!(
            "| parallel | aicli tasks/s | bare tokio/s | Python peer/s | ideal/s | aicli / bare | aicli / Python | first-event overhead p50 | aicli CPU per task | aicli peak RSS | Python CPU per task, peak RSS |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for r in rows {
            println!("{r}");
        }
        println!();
        for d in details {
            println!("{d}");
        }
    });
}
