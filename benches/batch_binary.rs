//! `aicli batch` through the binary, as a user runs it, next to the Python asyncio peer.
//!
//! `cargo bench --bench batch_binary [-- TASKS [PARALLEL...]]` (default: 120 tasks at
//! parallel 20 and 50; `ROUNDS=N` rounds, default 3, reported as medians;
//! `LINE_DELAY_MS=N` per transcript line, default 0).
//!
//! A temp git repository and a config whose `claude` entry points at `aicli-fake-cli`,
//! which reads its prompt from stdin and prints Claude's recorded `text` transcript. Each
//! side does the same work per task, `parallel` at a time:
//!
//! - `aicli batch TASKS.json --json` (the release binary, the default config: worktrees,
//!   run records, MCP server, cgroups where the machine allows them); also with
//!   `--no-mcp` and with `cgroups: off`, to see what each costs;
//! - the Python peer (`benches/asyncio_peer.py worktree`): `git worktree add`, the same
//!   child with the same argv and the prompt on its stdin, `json.loads` of every line, an
//!   events file and a result JSON, `git worktree remove`.
//!
//! Each run gets a fresh copy of the repository. Reported: tasks/s, aicli / peer, and
//! each orchestrator's own CPU per task and peak RSS (sampled from `/proc` every 2 ms:
//! its own `utime + stime`, `VmHWM`), and the CPU of its whole process tree per task
//! (`wait4`'s rusage: the orchestrator plus the CLIs, git and everything they reaped).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn aicli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli"))
}

#[path = "../tests/support/mod.rs"]
mod support;
use support::fake::{fake_cli, fixture, replay_args};
use support::git::init_repo;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The config entry's `extra_args`: read the prompt from stdin, replay the transcript.
fn fake_args(line_delay_ms: u64) -> Vec<String> {
    let mut args = vec!["--record-stdin".into(), "/dev/null".into()];
    args.extend(replay_args(&fixture("claude", "text")));
    args.extend(["--line-delay-ms".into(), line_delay_ms.to_string()]);
    args
}

/// The template repository: one commit of a few small files.
fn template_repo(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for i in 0..20 {
        std::fs::write(
            dir.join(format!("src/m{i}.rs")),
            format!("pub fn f{i}() -> u32 {{ {i} }}\n"),
        )
        .unwrap();
    }
    init_repo(dir);
}

/// What one orchestrator process cost.
#[derive(Clone, Copy, Default)]
struct Usage {
    wall: Duration,
    /// Its own user + system time (the last `/proc/PID/stat` sample before it exited).
    own_cpu: Duration,
    /// Its own peak RSS (`VmHWM`, last sample), MiB.
    peak_rss_mib: f64,
    /// `wait4`'s user + system time: itself and every descendant it reaped.
    tree_cpu: Duration,
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// `(utime + stime, VmHWM MiB)` of `pid` now.
fn sample(pid: u32) -> Option<(Duration, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())?;
    Some((
        Duration::from_secs_f64(ticks as f64 / clock_ticks()),
        hwm / 1024.0,
    ))
}

/// Runs `cmd` to its end, sampling its own CPU and RSS; returns its usage and stdout.
fn measure(mut cmd: Command) -> (Usage, Vec<u8>) {
    let out_file = tempfile::tempfile().unwrap();
    cmd.stdout(out_file.try_clone().unwrap())
        .stderr(Stdio::inherit())
        .stdin(Stdio::null());
    let t0 = Instant::now();
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut last = (Duration::ZERO, 0.0);
            while !done.load(Ordering::Relaxed) {
                if let Some(s) = sample(pid) {
                    last = s;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            last
        })
    };
    // wait4 itself (not `Child::wait`) for the rusage of the child and what it reaped.
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 on our own child, with valid pointers.
    let ru = unsafe {
        // Reaps the zombie; the sampler's last read is before that.
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        libc::waitid(
            libc::P_PID,
            pid,
            info.as_mut_ptr(),
            libc::WEXITED | libc::WNOWAIT,
        );
        done.store(true, Ordering::Relaxed);
        let last = sampler.join().unwrap();
        let wall = t0.elapsed();
        libc::wait4(pid as i32, &mut status, 0, ru.as_mut_ptr());
        (ru.assume_init(), last, wall)
    };
    let (ru, (own_cpu, peak), wall) = ru;
    drop(child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed: status {status}"
    );
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let mut f = out_file;
    use std::io::{Read, Seek};
    f.rewind().unwrap();
    let mut stdout = Vec::new();
    f.read_to_end(&mut stdout).unwrap();
    (
        Usage {
            wall,
            own_cpu,
            peak_rss_mib: peak,
            tree_cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        },
        stdout,
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Aicli,
    AicliNoMcp,
    AicliNoCgroups,
    Peer,
}

impl Side {
    const ALL: [Side; 4] = [
        Side::Peer,
        Side::Aicli,
        Side::AicliNoMcp,
        Side::AicliNoCgroups,
    ];

    fn label(self) -> &'static str {
        match self {
            Side::Aicli => "`aicli batch` (defaults)",
            Side::AicliNoMcp => "`aicli batch --no-mcp`",
            Side::AicliNoCgroups => "`aicli batch`, `cgroups: off`",
            Side::Peer => "Python asyncio peer",
        }
    }
}

struct Bench {
    dir: PathBuf,
    template: PathBuf,
    n: usize,
    line_delay_ms: u64,
    runs: usize,
}

impl Bench {
    /// A fresh copy of the template repository for one run.
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

    fn config(&self, cgroups: &str) -> PathBuf {
        let path = self.dir.join(format!("aicli-{cgroups}.json"));
        std::fs::write(
            &path,
            serde_json::json!({
                "providers": {"claude": {
                    "binary_path": fake_cli(),
                    "extra_args": fake_args(self.line_delay_ms),
                }},
                "engine": {"cgroups": cgroups},
            })
            .to_string(),
        )
        .unwrap();
        path
    }

    fn run(&mut self, side: Side, parallel: usize) -> Usage {
        let repo = self.fresh_repo();
        match side {
            Side::Peer => self.peer(&repo, parallel),
            Side::Aicli | Side::AicliNoMcp | Side::AicliNoCgroups => {
                self.aicli(&repo, parallel, side)
            }
        }
    }

    fn aicli(&self, repo: &Path, parallel: usize, side: Side) -> Usage {
        let tasks: Vec<serde_json::Value> = (0..self.n)
            .map(|i| serde_json::json!({"id": format!("t{i}"), "prompt": format!("task t{i}: say hello")}))
            .collect();
        let tasks_file = self.dir.join(format!("tasks-{}.json", self.runs));
        std::fs::write(
            &tasks_file,
            serde_json::json!({"max_parallel": parallel, "tasks": tasks}).to_string(),
        )
        .unwrap();
        let cgroups = if side == Side::AicliNoCgroups {
            "off"
        } else {
            "auto"
        };
        let mut cmd = Command::new(aicli_bin());
        cmd.arg("--config")
            .arg(self.config(cgroups))
            .arg("batch")
            .arg(&tasks_file)
            .arg("--json")
            .current_dir(repo);
        if side == Side::AicliNoMcp {
            cmd.arg("--no-mcp");
        }
        let (u, stdout) = measure(cmd);
        let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
            panic!(
                "aicli batch --json: {e}: {}",
                String::from_utf8_lossy(&stdout)
            )
        });
        assert_eq!(
            v["n_succeeded"].as_u64(),
            Some(self.n as u64),
            "every aicli task succeeds: {}",
            String::from_utf8_lossy(&stdout)
                .chars()
                .take(2000)
                .collect::<String>()
        );
        u
    }

    fn peer(&self, repo: &Path, parallel: usize) -> Usage {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/asyncio_peer.py");
        let out = self.dir.join(format!("peer-{}", self.runs));
        let mut cmd = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
        cmd.arg(script)
            .arg("worktree")
            .args(["--tasks", &self.n.to_string()])
            .args(["--parallel", &parallel.to_string()])
            .arg("--out")
            .arg(&out)
            .arg("--repo")
            .arg(repo)
            .arg("--")
            .arg(fake_cli())
            // What the Claude adapter puts first; the fake ignores it.
            .args(["-p", "--output-format", "stream-json", "--verbose"])
            .args(fake_args(self.line_delay_ms))
            .current_dir(repo);
        let (u, stdout) = measure(cmd);
        let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
        assert_eq!(
            v["succeeded"].as_u64(),
            Some(self.n as u64),
            "every peer task succeeds"
        );
        u
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn main() {
    let (n, parallels) = support::bench::tasks_and_parallels(120, &[20, 50]);
    let rounds = env_num("ROUNDS", 3).max(1) as usize;
    let line_delay_ms = env_num("LINE_DELAY_MS", 0);
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    template_repo(&template);
    let mut b = Bench {
        dir: tmp.path().to_path_buf(),
        template,
        n,
        line_delay_ms,
        runs: 0,
    };
    println!(
        "batch_binary bench: {n} tasks per run, {rounds} rounds (medians); aicli-fake-cli reads its prompt and replays fixtures/claude/text ({line_delay_ms} ms per line)"
    );
    println!("aicli: {}", aicli_bin().display());
    let mut table = Vec::new();
    for &p in &parallels {
        // results[side][round]
        let mut results: Vec<Vec<Usage>> = vec![Vec::new(); Side::ALL.len()];
        for round in 0..rounds {
            // Alternate the order each round, so no side always runs on a warmer machine.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..Side::ALL.len()).collect()
            } else {
                (0..Side::ALL.len()).rev().collect()
            };
            for i in order {
                let u = b.run(Side::ALL[i], p);
                eprintln!(
                    "parallel {p} round {round}: {:<32} {:>7.1} tasks/s, own CPU {:.2} ms/task, tree CPU {:.2} ms/task, peak RSS {:.1} MiB",
                    Side::ALL[i].label(),
                    n as f64 / u.wall.as_secs_f64(),
                    u.own_cpu.as_secs_f64() * 1000.0 / n as f64,
                    u.tree_cpu.as_secs_f64() * 1000.0 / n as f64,
                    u.peak_rss_mib
                );
                results[i].push(u);
            }
        }
        let tps = |u: &Usage| n as f64 / u.wall.as_secs_f64();
        let peer = &results[0];
        for (i, side) in Side::ALL.iter().enumerate() {
            let r = &results[i];
            let ratio = median(r.iter().zip(peer).map(|(a, b)| tps(a) / tps(b)).collect());
            table.push(format!(
                "| {p} | {} | {:.1} | {} | {:.2} ms | {:.2} ms | {:.1} MiB |",
                side.label(),
                median(r.iter().map(tps).collect()),
                if *side == Side::Peer {
                    "1.00x".to_string()
                } else {
                    format!("{ratio:.2}x")
                },
                median(
                    r.iter()
                        .map(|u| u.own_cpu.as_secs_f64() * 1000.0 / n as f64)
                        .collect()
                ),
                median(
                    r.iter()
                        .map(|u| u.tree_cpu.as_secs_f64() * 1000.0 / n as f64)
                        .collect()
                ),
                median(r.iter().map(|u| u.peak_rss_mib).collect()),
            ));
        }
    }
    println!();
    println!(
        "| parallel | orchestrator | tasks/s | vs Python peer | own CPU per task | process tree CPU per task | own peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in table {
        println!("{row}");
    }
}
