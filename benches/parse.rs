//! Parse throughput, side by side in one run, per vendor:
//!
//! - `aicli parse --provider V FILE` (the release binary: read, decode, result) and its
//!   peak RSS (`wait4`'s `ru_maxrss`);
//! - the decoder alone, in process, over the same lines;
//! - serde_json's validation-only pass (`IgnoredAny`, the practical limit of reading
//!   JSON with serde_json);
//! - a Python `json.loads` loop over the file.
//!
//! The input is a mixed corpus: every line of every fixture of the vendor (recorded and
//! hand-written: every event type), valid JSON lines only, repeated to ~50 MB.
//!
//! ```text
//! cargo bench --bench parse                 # 50 MB per vendor, best of 3
//! cargo bench --bench parse -- 20 claude    # 20 MB, one vendor
//! REPS=5 cargo bench --bench parse
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use aicli::providers::{AiCliConfig, ExitStatus, Line, ParseContext, ProviderRegistry};

fn fixture_lines(vendor: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(vendor);
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("hand")] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "ndjson") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        for l in text.lines() {
            if serde_json::from_str::<serde::de::IgnoredAny>(l).is_ok() {
                lines.push(l.to_owned());
            }
        }
    }
    lines
}

/// The corpus: the fixture lines in order, repeated to `mb` MB, written to a file (the
/// bench holds no copy while it runs `aicli parse`: a child started with `vfork` counts
/// its parent's memory in its peak RSS).
fn corpus(vendor: &str, mb: usize, dir: &Path) -> (PathBuf, usize, usize) {
    let lines = fixture_lines(vendor);
    let one: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut data = Vec::with_capacity(mb << 20);
    let mut n = 0;
    while data.len() < mb << 20 {
        data.extend_from_slice(one.as_bytes());
        n += lines.len();
    }
    let path = dir.join(format!("{vendor}.ndjson"));
    std::fs::write(&path, &data).unwrap();
    (path, data.len(), n)
}

/// Seconds and peak RSS (KiB) of a command, measured by a fresh copy of this bench
/// (`--rss-of`): a child started with `vfork` or `fork` counts its parent's memory in its
/// peak RSS, so the parent must be small.
fn measured(prog: &str, args: &[&str]) -> (f64, u64) {
    let start = Instant::now();
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--rss-of")
        .arg(prog)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(out.status.success(), "{prog} {args:?} failed");
    let kib = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (secs, kib)
}

/// Seconds and peak RSS (KiB) of a child process.
fn run_child(cmd: &mut Command) -> (f64, u64) {
    let start = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped; both pointers are valid.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(r, pid, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed"
    );
    std::mem::forget(child);
    (secs, usage.ru_maxrss as u64)
}

fn decoder_secs(vendor: &str, data: &[u8]) -> f64 {
    let registry = ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap()).unwrap();
    let p = registry.get(vendor).unwrap();
    let start = Instant::now();
    let mut d = p.decoder(&ParseContext::default());
    let mut events = 0usize;
    for line in data.split(|b| *b == b'\n') {
        events += d.line(Line::Bytes(line)).len();
    }
    let r = d.finish("", ExitStatus::Code(0));
    let secs = start.elapsed().as_secs_f64();
    assert!(events > 0 && !r.provider.is_empty());
    secs
}

fn ignored_any_secs(data: &[u8]) -> f64 {
    let start = Instant::now();
    let mut ok = 0usize;
    for line in data.split(|b| *b == b'\n') {
        if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok() {
            ok += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert!(ok > 0);
    secs
}

const LOADS: &str = r#"
import json, sys
n = 0
with open(sys.argv[1], 'rb') as f:
    for line in f:
        if line.strip():
            json.loads(line)
            n += 1
print(n)
"#;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--rss-of") {
        let (_, kib) = run_child(Command::new(&args[1]).args(&args[2..]));
        println!("{kib}");
        return;
    }
    let mb: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(50);
    let mut vendors: Vec<String> = args.iter().skip(1).cloned().collect();
    if vendors.is_empty() {
        vendors = ["claude", "codex", "gemini"].map(String::from).to_vec();
    }
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let aicli = env!("CARGO_BIN_EXE_aicli");
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("loads.py");
    std::fs::write(&script, LOADS).unwrap();
    let mut table = Vec::new();
    for v in &vendors {
        let (path, bytes, lines) = corpus(v, mb, tmp.path());
        let size = bytes as f64 / 1e6;
        let (mut parse, mut rss, mut dec, mut ign, mut py) =
            (f64::MAX, 0u64, f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..reps {
            // Interleaved, so that a busy spell of the machine hits all alike.
            let file = path.display().to_string();
            let (s, r) = measured(aicli, &["parse", "--provider", v, &file]);
            parse = parse.min(s);
            rss = rss.max(r);
            let data = std::fs::read(&path).unwrap();
            dec = dec.min(decoder_secs(v, &data));
            ign = ign.min(ignored_any_secs(&data));
            drop(data);
            py = py.min(run_child(Command::new("python3").arg(&script).arg(&path)).0);
            // The aicli figure includes starting a second process (~1 ms); so does Python's.
        }
        let mbs = |s: f64| size / s;
        println!(
            "{v}: {size:.1} MB, {lines} lines (every fixture line, repeated), best of {reps}\n  \
             aicli parse      {:>8.1} MB/s  peak RSS {:.1} MiB\n  \
             decoder alone    {:>8.1} MB/s\n  \
             serde IgnoredAny {:>8.1} MB/s\n  \
             python json.loads{:>8.1} MB/s",
            mbs(parse),
            rss as f64 / 1024.0,
            mbs(dec),
            mbs(ign),
            mbs(py)
        );
        table.push(format!(
            "| {v} | {:.0} MB/s | {:.1}x | {:.2}x | {:.0} MB/s | {:.0} MB/s | {:.0} MB/s | {:.0} MiB |",
            mbs(parse),
            py / parse,
            ign / parse,
            mbs(dec),
            mbs(ign),
            mbs(py),
            rss as f64 / 1024.0
        ));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n| vendor | aicli parse | vs Python | vs IgnoredAny | decoder alone | IgnoredAny | Python json.loads | aicli peak RSS |").unwrap();
    writeln!(out, "|---|---|---|---|---|---|---|---|").unwrap();
    for row in table {
        writeln!(out, "{row}").unwrap();
    }
}
