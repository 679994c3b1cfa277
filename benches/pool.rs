//! Pool throughput and per-session overhead.
//!
//! `cargo bench --bench pool [-- TASKS [PARALLEL...]]` (default: 1000 tasks at max_parallel
//! 50 and 200). Each task runs the real `aicli-fake-cli` process, which replays the real
//! Claude transcript `fixtures/claude/text` with a fixed delay per line, through the whole
//! engine (session supervision, parsing, run records; no worktrees, so git is not what is
//! measured). Reported side by side, in one run:
//!
//! - tasks/s, next to the same processes started bare (`raw/s`: tokio `Command`, same
//!   parallelism, no aicli) and the ideal (total fake work / parallelism);
//! - aicli's own peak RSS and CPU time (this process only, not the children);
//! - per-session overhead: spawn-to-first-event latency through the engine minus the fake
//!   CLI's own spawn-to-first-line latency measured directly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli::providers::{AiCliConfig, ProviderRegistry, TaskSpec};
use aicli::testing::ReplayProvider;
use aicli::{BatchEvent, BatchOptions, Engine};
use tokio_util::sync::CancellationToken;

const LINE_DELAY_MS: u64 = 20;

fn fake_cli() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli-fake-cli"))
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/claude/text")
}

fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
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

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The fake CLI's own spawn-to-first-line latency, measured directly (ms).
async fn raw_first_line(n: usize) -> Vec<f64> {
    let fx = fixture();
    let mut out = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let mut child = tokio::process::Command::new(fake_cli())
            .args([
                "--replay",
                &format!("{}.ndjson", fx.display()),
                "--line-delay-ms",
                &LINE_DELAY_MS.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        lines.next_line().await.unwrap();
        out.push(t0.elapsed().as_secs_f64() * 1000.0);
        while lines.next_line().await.unwrap().is_some() {}
        child.wait().await.unwrap();
    }
    out
}

/// The same processes without aicli: `n` fake CLIs, `parallel` at a time, each started
/// with a plain `tokio::process::Command`, stdout read to EOF and discarded. Tasks/s.
async fn raw_baseline(n: usize, parallel: usize) -> f64 {
    let fx = fixture();
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel));
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let fx = fx.clone();
        set.spawn(async move {
            let out = tokio::process::Command::new(fake_cli())
                .args([
                    "--replay",
                    &format!("{}.ndjson", fx.display()),
                    "--line-delay-ms",
                    &LINE_DELAY_MS.to_string(),
                ])
                .output()
                .await
                .unwrap();
            assert!(out.status.success());
            drop(permit);
        });
    }
    while set.join_next().await.is_some() {}
    n as f64 / t0.elapsed().as_secs_f64()
}

struct Run {
    parallel: usize,
    wall: Duration,
    cpu: Duration,
    first_event_ms: Vec<f64>,
    succeeded: usize,
}

async fn run(n: usize, parallel: usize, dir: &Path) -> Run {
    let mut config = AiCliConfig::builtin().unwrap();
    config.engine.max_parallel = parallel;
    let mut reg = ProviderRegistry::from_config(&config).unwrap();
    let inner = reg.get("claude").unwrap();
    reg.register(Arc::new(ReplayProvider::new(
        "fake",
        inner,
        &fake_cli(),
        Some(&fixture()),
    )));
    let engine = Engine::new(config, reg);
    let tasks: Vec<TaskSpec> = (0..n)
        .map(|i| TaskSpec {
            id: format!("t{i}"),
            prompt: "bench".into(),
            extra_args: vec!["--line-delay-ms".into(), LINE_DELAY_MS.to_string()],
            ..TaskSpec::default()
        })
        .collect();
    let mut opts = BatchOptions::new(dir);
    opts.provider = Some("fake".into());
    opts.worktrees = false;
    opts.runs_dir = Some(dir.join(format!("runs-{parallel}")));
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
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let r = engine
        .run_batch(tasks, opts, tx, CancellationToken::new())
        .await
        .unwrap();
    let wall = t0.elapsed();
    let cpu = cpu_time() - cpu0;
    Run {
        parallel,
        wall,
        cpu,
        first_event_ms: collector.await.unwrap(),
        succeeded: r.n_succeeded,
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let mut parallels: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    if parallels.is_empty() {
        parallels = vec![50, 200];
    }
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
        let mut raw = raw_first_line(50).await;
        let raw_p50 = percentile(&mut raw, 0.5);
        println!(
            "pool bench: {n} tasks; each runs aicli-fake-cli replaying fixtures/claude/text ({lines} lines, {LINE_DELAY_MS} ms per line = {fake_work_ms} ms of fake work)"
        );
        println!("fake CLI alone, spawn-to-first-line: p50 {raw_p50:.1} ms (50 runs)\n");
        println!(
            "{:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "parallel", "wall s", "ideal s", "tasks/s", "raw/s", "vs raw", "aicli CPU s", "first p50 ms", "overhead ms"
        );
        for p in parallels {
            // Side by side in one run: the bare processes first, then through aicli.
            let raw = raw_baseline(n, p).await;
            let mut r = run(n, p, dir.path()).await;
            assert_eq!(r.succeeded, n, "every task succeeds");
            let ideal = Duration::from_millis(fake_work_ms * n as u64 / r.parallel as u64);
            let p50 = percentile(&mut r.first_event_ms, 0.5);
            let p99 = percentile(&mut r.first_event_ms, 0.99);
            let tps = n as f64 / r.wall.as_secs_f64();
            println!(
                "{:>8} {:>9.2} {:>9.2} {:>9.1} {:>10.1} {:>9.0}% {:>12.2} {:>12.1} {:>12.1}   (first-event p99 {:.1} ms; ideal {:.0}/s)",
                r.parallel,
                r.wall.as_secs_f64(),
                ideal.as_secs_f64(),
                tps,
                raw,
                100.0 * tps / raw,
                r.cpu.as_secs_f64(),
                p50,
                p50 - raw_p50,
                p99,
                n as f64 / ideal.as_secs_f64()
            );
        }
        println!("\naicli peak RSS (this process, all runs): {:.1} MiB", peak_rss_mib());
    });
}
