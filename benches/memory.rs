//! aicli's memory against the length of a CLI's stream and the number of parallel runs
//! (issue 10, item 6), side by side in one run.
//!
//! The CLI is `aicli-fake-cli` (a real process) printing a mixed stream: every line of
//! every fixture of the vendor (recorded and hand-written: every event type) except the
//! final ones, over and over to the size asked (`--repeat-to`), then one final line. The
//! engine runs it through the real `aicli` release binary, with run records, worktrees
//! and the live printer, exactly as a user would (`aicli run`, `aicli batch`). Peak RSS
//! is the `aicli` process's own high-water mark (`VmHWM`, read from `/proc` until it
//! exits; the CLIs are separate processes), next to `aicli parse` (the decoder alone,
//! reading the same bytes from a file) for each size.
//!
//! ```text
//! cargo bench --bench memory                        # claude: 200 MB and 1 GiB; 1, 4, 16 runs of 50 MB
//! cargo bench --bench memory -- 200,1024 1,4,16 50 claude codex gemini
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aicli::providers::{AiCliConfig, EventKind, Line, ParseContext, ProviderRegistry};

#[path = "../tests/support/mod.rs"]
mod support;
use support::fake::{fixture, fixture_json_lines};
use support::git::init_repo;
use support::rss::peak_rss_kib;

const MIB: u64 = 1 << 20;

/// Every fixture line of `vendor` that is valid JSON and not a final event, then one
/// final line (the last line of its `text` fixture).
fn corpus(vendor: &str, dir: &Path) -> PathBuf {
    let registry = ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap()).unwrap();
    let provider = registry.get(vendor).unwrap();
    let mut body = String::new();
    let mut kinds = std::collections::BTreeSet::new();
    for l in fixture_json_lines(vendor) {
        let mut d = provider.decoder(&ParseContext::default());
        let events = d.line(Line::Bytes(l.as_bytes()));
        if d.finished()
            || events
                .iter()
                .any(|e| matches!(e.kind, EventKind::Final { .. }))
        {
            continue;
        }
        kinds.extend(events.iter().map(|e| e.type_name()));
        body.push_str(&l);
        body.push('\n');
    }
    let text = std::fs::read_to_string(fixture(vendor, "text").with_extension("ndjson")).unwrap();
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    body.push_str(last);
    body.push('\n');
    eprintln!(
        "{vendor} corpus: {} KiB, event types {:?}",
        body.len() / 1024,
        kinds
    );
    let path = dir.join(format!("{vendor}.ndjson"));
    std::fs::write(&path, body).unwrap();
    path
}

/// A git repository with one commit, and a config whose provider `fake` runs the fake
/// CLI through the real `vendor` adapter, printing `bytes` of the corpus.
fn setup(dir: &Path, vendor: &str, corpus: &Path, bytes: u64) -> (PathBuf, PathBuf) {
    let repo = dir.join(format!("repo-{vendor}-{bytes}"));
    init_repo(&repo);
    let cfg = dir.join(format!("aicli-{vendor}-{bytes}.json"));
    let json = serde_json::json!({
        "default_provider": "fake",
        "providers": {"fake": {
            "adapter": vendor,
            "binary_path": support::fake::fake_cli(),
            "extra_args": ["--replay", corpus, "--repeat-to", bytes.to_string()],
            // So that the adapters' quick credentials check passes (the fake CLI needs none).
            "env": {"ANTHROPIC_API_KEY": "bench", "CODEX_API_KEY": "bench", "GEMINI_API_KEY": "bench"},
        }},
        "engine": {"timeout_secs": 3600, "idle_timeout_secs": 600},
    });
    std::fs::write(&cfg, json.to_string()).unwrap();
    (repo, cfg)
}

/// Runs `aicli ARGS` to its end; its seconds and peak RSS (MiB, `VmHWM` of the aicli
/// process itself, polled).
fn measured(args: &[&str]) -> (f64, f64) {
    measured_with(args, false)
}

/// [`measured`]; with `slow_reader`, aicli's stdout is a pipe read at about 1.6 MB/s (a
/// display that cannot keep up).
fn measured_with(args: &[&str], slow_reader: bool) -> (f64, f64) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aicli"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(if slow_reader {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stderr is read as it comes: a full pipe would stop aicli.
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
        err
    });
    let reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            while std::io::Read::read(&mut out, &mut buf).is_ok_and(|n| n > 0) {
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
    let (hwm_kib, status) = peak_rss_kib(&mut child, Duration::from_millis(20));
    let secs = start.elapsed().as_secs_f64();
    if let Some(r) = reader {
        r.join().unwrap();
    }
    let err = errors.join().unwrap();
    // A task that failed is fine here (the mixed corpus holds error events, and the
    // vendor may call the run failed); aicli itself failing is not.
    let code = status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 4 || (10..=25).contains(&code),
        "aicli {args:?} failed ({status}): {err}"
    );
    (secs, hwm_kib as f64 / 1024.0)
}

fn list(arg: Option<&String>, default: &[u64]) -> Vec<u64> {
    arg.map(|a| a.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let sizes = list(args.first(), &[200, 1024]);
    let parallel = list(args.get(1), &[1, 4, 16]);
    let per_run: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50);
    let mut vendors: Vec<String> = args.iter().skip(3).cloned().collect();
    if vendors.is_empty() {
        vendors.push("claude".to_owned());
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut stream_rows = Vec::new();
    let mut parallel_rows = Vec::new();
    for v in &vendors {
        let corpus = corpus(v, tmp.path());
        for &mib in &sizes {
            let bytes = mib * MIB;
            let (repo, cfg) = setup(tmp.path(), v, &corpus, bytes);
            let (secs, rss) = measured(&[
                "--config",
                cfg.to_str().unwrap(),
                "--repo",
                repo.to_str().unwrap(),
                "run",
                "print a long stream",
                "--no-mcp",
            ]);
            // The record holds the whole stream: `aicli parse` reads it back alone.
            let record = find_events(&repo.join(".aicli/runs"));
            let recorded = std::fs::metadata(&record).unwrap().len();
            assert!(recorded >= bytes, "{recorded} < {bytes}");
            let (_, parse_rss) = measured(&["parse", "--provider", v, record.to_str().unwrap()]);
            eprintln!(
                "{v} {mib} MiB: aicli run {secs:.1}s ({:.0} MB/s) peak RSS {rss:.1} MiB; aicli parse peak RSS {parse_rss:.1} MiB",
                recorded as f64 / 1e6 / secs
            );
            stream_rows.push(format!(
                "| {v} | {mib} MiB | `run` | {rss:.1} MiB | {parse_rss:.1} MiB | {:.0} MB/s |",
                recorded as f64 / 1e6 / secs
            ));
            std::fs::remove_dir_all(&repo).unwrap();
        }
        // A display that cannot keep up: every event printed as JSON to a pipe read at
        // 1.6 MB/s. It loses events; the stream is not held up and memory stays flat.
        if let Some(&mib) = sizes.first() {
            let bytes = mib * MIB;
            let (repo, cfg) = setup(tmp.path(), v, &corpus, bytes);
            let (secs, rss) = measured_with(
                &[
                    "--config",
                    cfg.to_str().unwrap(),
                    "--repo",
                    repo.to_str().unwrap(),
                    "run",
                    "print a long stream",
                    "--no-mcp",
                    "--json",
                ],
                true,
            );
            let recorded = std::fs::metadata(find_events(&repo.join(".aicli/runs")))
                .unwrap()
                .len();
            eprintln!(
                "{v} {mib} MiB, run --json to a slow reader: {secs:.1}s peak RSS {rss:.1} MiB"
            );
            stream_rows.push(format!(
                "| {v} | {mib} MiB | `run --json`, stdout read at 1.6 MB/s | {rss:.1} MiB | | {:.0} MB/s |",
                recorded as f64 / 1e6 / secs
            ));
            std::fs::remove_dir_all(&repo).unwrap();
        }
        for &n in &parallel {
            let bytes = per_run * MIB;
            let (repo, cfg) = setup(tmp.path(), v, &corpus, bytes);
            let tasks: Vec<serde_json::Value> = (0..n)
                .map(|i| serde_json::json!({"id": format!("t{i}"), "prompt": "print a stream"}))
                .collect();
            let file = tmp.path().join(format!("tasks-{v}-{n}.json"));
            std::fs::write(
                &file,
                serde_json::json!({"max_parallel": n, "tasks": tasks}).to_string(),
            )
            .unwrap();
            let (secs, rss) = measured(&[
                "--config",
                cfg.to_str().unwrap(),
                "--repo",
                repo.to_str().unwrap(),
                "batch",
                file.to_str().unwrap(),
                "--no-mcp",
            ]);
            let goal = 64.0 + 2.0 * n as f64;
            eprintln!(
                "{v} {n} × {per_run} MiB in parallel: {secs:.1}s, peak RSS {rss:.1} MiB (goal {goal:.0} MiB)"
            );
            parallel_rows.push(format!(
                "| {v} | {n} | {per_run} MiB each | {rss:.1} MiB | {goal:.0} MiB | {:.0} MB/s |",
                (n * bytes) as f64 / 1e6 / secs
            ));
            std::fs::remove_dir_all(&repo).unwrap();
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\n| vendor | stream | command | aicli peak RSS | aicli parse peak RSS | through the engine |"
    )
    .unwrap();
    writeln!(out, "|---|---|---|---|---|---|").unwrap();
    for r in stream_rows {
        writeln!(out, "{r}").unwrap();
    }
    writeln!(
        out,
        "\n| vendor | parallel runs | stream | aicli batch peak RSS | goal (64 + 2 × runs) | through the engine |"
    )
    .unwrap();
    writeln!(out, "|---|---|---|---|---|---|").unwrap();
    for r in parallel_rows {
        writeln!(out, "{r}").unwrap();
    }
}

/// The one `events.ndjson` under `runs`.
fn find_events(runs: &Path) -> PathBuf {
    let mut stack = vec![runs.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "events.ndjson") {
                return p;
            }
        }
    }
    panic!("no events.ndjson under {}", runs.display());
}
