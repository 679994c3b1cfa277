//! Parse throughput, side by side in one run, per vendor:
//!
//! - `aicli parse --provider V FILE` (the release binary: read, decode, result) and its
//!   peak RSS (`wait4`'s `ru_maxrss`);
//! - the decoder alone, in process, over the same lines;
//! - serde_json's validation-only pass (`IgnoredAny`, the practical limit of reading
//!   JSON with serde_json);
//! - a Python `json.loads` loop over the file: the whole `python3` process, as a user
//!   would time it, and the loop alone (timed by the script, without the interpreter's
//!   start), so the ratio to each is plain.
//!
//! Every side is timed in CPU seconds (user + system: each runs on one core) and in
//! wall-clock seconds; the table's MB/s and ratios are by CPU time, which the other load
//! of a shared machine moves far less than the wall clock (the wall-clock ratios are
//! printed next to them).
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

#[path = "../tests/support/mod.rs"]
mod support;
use support::fake::fixture_json_lines as fixture_lines;

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

/// How long a run took: wall-clock and CPU (user + system) seconds.
#[derive(Clone, Copy)]
struct Took {
    wall: f64,
    cpu: f64,
}

impl Took {
    const NONE: Took = Took {
        wall: f64::MAX,
        cpu: f64::MAX,
    };

    /// The best of two runs, each figure on its own.
    fn min(self, o: Took) -> Took {
        Took {
            wall: self.wall.min(o.wall),
            cpu: self.cpu.min(o.cpu),
        }
    }
}

/// CPU seconds this process has used.
fn cpu_now() -> f64 {
    // SAFETY: an all-zero `timespec` is valid for clock_gettime to fill in.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid; the clock id is a constant.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime");
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Times `f` in this process.
fn timed(f: impl FnOnce()) -> Took {
    let (start, cpu) = (Instant::now(), cpu_now());
    f();
    Took {
        wall: start.elapsed().as_secs_f64(),
        cpu: cpu_now() - cpu,
    }
}

/// Time and peak RSS (KiB) of a command, measured by a fresh copy of this bench
/// (`--rss-of`): a child started with `vfork` or `fork` counts its parent's memory in its
/// peak RSS, so the parent must be small. The copy times the command itself (from its
/// spawn to its exit, as the Python loop is timed), not its own start.
fn measured(prog: &str, args: &[&str]) -> (Took, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--rss-of")
        .arg(prog)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{prog} {args:?} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (
        Took {
            wall: f[0],
            cpu: f[1],
        },
        f[2] as u64,
    )
}

/// Time and peak RSS (KiB) of a child process, and what it printed.
fn run_child(cmd: &mut Command) -> (Took, u64, String) {
    use std::io::Read;
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut printed = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
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
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    (Took { wall: secs, cpu }, usage.ru_maxrss as u64, printed)
}

fn decoder_secs(vendor: &str, data: &[u8]) -> Took {
    let registry = ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap()).unwrap();
    let p = registry.get(vendor).unwrap();
    let mut events = 0usize;
    let mut provider = String::new();
    let took = timed(|| {
        let mut d = p.decoder(&ParseContext::default());
        let mut buf = Vec::new();
        for line in data.split(|b| *b == b'\n') {
            d.decode(Line::Bytes(line), &mut buf);
            events += buf.len();
            buf.clear();
        }
        provider = d.finish("", ExitStatus::Code(0)).provider;
    });
    assert!(events > 0 && !provider.is_empty());
    took
}

fn ignored_any_secs(data: &[u8]) -> Took {
    let mut ok = 0usize;
    let took = timed(|| {
        for line in data.split(|b| *b == b'\n') {
            if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok() {
                ok += 1;
            }
        }
    });
    assert!(ok > 0);
    took
}

/// The Python loop; prints its line count and the loop's own wall-clock and CPU seconds
/// (the file read and `json.loads`, without the interpreter's start).
const LOADS: &str = r#"
import json, sys, time
n = 0
start, cpu = time.perf_counter(), time.process_time()
with open(sys.argv[1], 'rb') as f:
    for line in f:
        if line.strip():
            json.loads(line)
            n += 1
print(n, time.perf_counter() - start, time.process_time() - cpu)
"#;

/// The Python loop over `path`: the whole `python3` process (spawn to exit), and the
/// loop alone as the script timed it.
fn python_secs(script: &Path, path: &Path) -> (Took, Took) {
    let (process, _, printed) = run_child(Command::new("python3").arg(script).arg(path));
    let f: Vec<f64> = printed
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(f[0] > 0.0, "python3 read no line");
    (
        process,
        Took {
            wall: f[1],
            cpu: f[2],
        },
    )
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--rss-of") {
        let (took, kib, _) = run_child(Command::new(&args[1]).args(&args[2..]));
        println!("{} {} {kib}", took.wall, took.cpu);
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
        let (mut parse, mut dec, mut ign, mut py, mut py_loop) =
            (Took::NONE, Took::NONE, Took::NONE, Took::NONE, Took::NONE);
        let mut rss = 0u64;
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
            // The process figures include starting it: aicli's (~1 ms), and Python's
            // interpreter with the `python3` found on PATH (a pyenv shim here, ~0.1 s);
            // the loop figure leaves Python's start out.
            let (p, l) = python_secs(&script, &path);
            py = py.min(p);
            py_loop = py_loop.min(l);
        }
        // Throughput by CPU seconds (each side runs on one core): what the work costs,
        // far less moved than wall-clock time by the other load of a shared machine.
        let mbs = |t: Took| size / t.cpu;
        let wall = |t: Took| size / t.wall;
        println!(
            "{v}: {size:.1} MB, {lines} lines (every fixture line, repeated), best of {reps}\n  \
             MB/s by CPU time (wall clock)\n  \
             aicli parse       {:>6.1} ({:>6.1})  peak RSS {:.1} MiB\n  \
             decoder alone     {:>6.1} ({:>6.1})\n  \
             serde IgnoredAny  {:>6.1} ({:>6.1})\n  \
             python process    {:>6.1} ({:>6.1})\n  \
             python loop alone {:>6.1} ({:>6.1})",
            mbs(parse),
            wall(parse),
            rss as f64 / 1024.0,
            mbs(dec),
            wall(dec),
            mbs(ign),
            wall(ign),
            mbs(py),
            wall(py),
            mbs(py_loop),
            wall(py_loop)
        );
        table.push(format!(
            "| {v} | {:.0} MB/s | {:.1}x | {:.1}x | {:.2}x | {:.0} MB/s | {:.0} MB/s | {:.0} / {:.0} MB/s | {:.1}x / {:.1}x | {:.0} MiB |",
            mbs(parse),
            py_loop.cpu / parse.cpu,
            py.cpu / parse.cpu,
            ign.cpu / parse.cpu,
            mbs(dec),
            mbs(ign),
            mbs(py_loop),
            mbs(py),
            py_loop.wall / parse.wall,
            py.wall / parse.wall,
            rss as f64 / 1024.0
        ));
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\nMB/s and ratios by CPU seconds, best of {reps} each; the wall-clock ratios for comparison.\n\n\
         | vendor | aicli parse | vs Python loop | vs Python process | vs IgnoredAny | decoder alone | IgnoredAny | Python loop / process | wall clock: vs loop / process | aicli peak RSS |"
    )
    .unwrap();
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|").unwrap();
    for row in table {
        writeln!(out, "{row}").unwrap();
    }
}
