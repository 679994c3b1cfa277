//! Finding every process of a run: its process group, and every descendant seen while
//! it lived — including those that left the group (`setsid()`, daemonizing tools).
//!
//! A descendant that leaves the group can only be traced through its parent, and only
//! while the parent lives; once the parent exits it is reparented to init. So a single
//! background thread scans `/proc` a few times a second (one scan for all runs) and
//! records, per run, every process in the run's group and every descendant of a process
//! already recorded, with its start time (which tells a pid's processes apart when pids
//! are reused). Kills only ever target recorded (pid, start time) pairs and the run's own
//! process group. When a run has a pid file, each recorded process is appended to it as
//! `pid start_time`, so `aicli resume` can kill what a dead aicli left
//! ([`kill_leftovers`]).
//!
//! The limit: a descendant that is born, leaves the group and loses its parent between
//! two scans (≈ 250 ms) is not seen.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Parent pid.
    pub ppid: u32,
    /// Process group.
    pub pgrp: u32,
    /// Session.
    pub session: u32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Start time after boot, in clock ticks (tells a pid's processes apart over reuse).
    pub start_time: u64,
}

impl ProcStat {
    fn is_live(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Reads `/proc/<pid>/stat`.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // `pid (comm) state ppid pgrp session ...`; comm may contain spaces and parens.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    // Field 22 (starttime): 15 fields after `session` (field 6).
    let start_time = f.nth(15)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        pgrp,
        session,
        state,
        start_time,
    })
}

/// Every live (not zombie) process on the machine, by pid.
pub fn all_processes() -> HashMap<u32, ProcStat> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = proc_stat(pid)
            && st.is_live()
        {
            out.insert(pid, st);
        }
    }
    out
}

/// Whether no process is left in process group `pgid`.
pub fn group_is_empty(pgid: u32) -> bool {
    pgid == 0
        || matches!(
            killpg(Pid::from_raw(pgid as i32), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

/// Adds to `known` every live process in group `root` and every live descendant of a
/// known process (with its start time). Returns the newly found ones.
fn extend(
    root: u32,
    known: &mut BTreeMap<u32, u64>,
    procs: &HashMap<u32, ProcStat>,
) -> Vec<(u32, u64)> {
    let mut new = Vec::new();
    for (pid, st) in procs {
        if (st.pgrp == root || st.session == root || *pid == root) && !known.contains_key(pid) {
            known.insert(*pid, st.start_time);
            new.push((*pid, st.start_time));
        }
    }
    // Descendants of known processes that are still the processes we knew.
    let mut frontier: Vec<u32> = known
        .iter()
        .filter(|(p, t)| procs.get(p).is_some_and(|s| s.start_time == **t))
        .map(|(p, _)| *p)
        .collect();
    while let Some(parent) = frontier.pop() {
        for (pid, st) in procs {
            if st.ppid == parent && !known.contains_key(pid) {
                known.insert(*pid, st.start_time);
                new.push((*pid, st.start_time));
                frontier.push(*pid);
            }
        }
    }
    new
}

struct Watched {
    known: BTreeMap<u32, u64>,
    pid_file: Option<PathBuf>,
}

fn watched() -> &'static Mutex<HashMap<u32, Watched>> {
    static WATCHED: OnceLock<Mutex<HashMap<u32, Watched>>> = OnceLock::new();
    WATCHED.get_or_init(|| {
        // The one scanner thread, started with the first watched run.
        let spawned = std::thread::Builder::new()
            .name("aicli-proctree".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_millis(250));
                    scan_all();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the process watcher; escaped descendants will not be tracked");
        }
        Mutex::new(HashMap::new())
    })
}

fn scan_all() {
    let Ok(mut w) = watched().lock() else { return };
    if w.is_empty() {
        return;
    }
    let procs = all_processes();
    for (root, run) in w.iter_mut() {
        let new = extend(*root, &mut run.known, &procs);
        append(&run.pid_file, &new);
    }
}

fn append(pid_file: &Option<PathBuf>, procs: &[(u32, u64)]) {
    let Some(f) = pid_file else { return };
    if procs.is_empty() {
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(f)
    {
        for (p, t) in procs {
            let _ = writeln!(file, "{p} {t}");
        }
    }
}

/// Starts watching the run whose child (and group leader) is `root`.
pub fn watch(root: u32, pid_file: Option<PathBuf>) {
    if root == 0 {
        return;
    }
    let mut known = BTreeMap::new();
    let start = proc_stat(root).map(|s| s.start_time).unwrap_or(0);
    known.insert(root, start);
    append(&pid_file, &[(root, start)]);
    if let Ok(mut w) = watched().lock() {
        w.insert(root, Watched { known, pid_file });
    }
}

/// Stops watching `root` (after its tree is gone) and removes its pid file.
pub fn unwatch(root: u32) {
    if let Ok(mut w) = watched().lock()
        && let Some(run) = w.remove(&root)
        && let Some(f) = run.pid_file
    {
        let _ = std::fs::remove_file(f);
    }
}

fn watched_known(root: u32) -> BTreeMap<u32, u64> {
    watched()
        .lock()
        .ok()
        .and_then(|w| w.get(&root).map(|r| r.known.clone()))
        .unwrap_or_default()
}

/// The processes of a run: its group, and every descendant seen (now or by the
/// watcher) — each as (pid, start time).
#[derive(Debug, Clone)]
pub struct ProcessTree {
    root: u32,
    known: BTreeMap<u32, u64>,
}

impl ProcessTree {
    /// The tree of `root` (a process-group leader started by
    /// [`crate::process::LocalProcess::spawn`]), as scanned now plus what the watcher saw.
    pub fn of(root: u32) -> ProcessTree {
        let mut t = ProcessTree {
            root,
            known: watched_known(root),
        };
        t.scan();
        t
    }

    /// Only what the watcher recorded for `root` (no scan: cheap).
    pub fn watched(root: u32) -> ProcessTree {
        ProcessTree {
            root,
            known: watched_known(root),
        }
    }

    fn scan(&mut self) {
        if self.root == 0 {
            return;
        }
        let procs = all_processes();
        extend(self.root, &mut self.known, &procs);
    }

    /// A fresh scan, keeping the processes known before.
    pub fn refreshed(&self) -> ProcessTree {
        let mut t = self.clone();
        t.scan();
        t
    }

    /// The pids of the tree still alive (same process as recorded, not a zombie).
    pub fn alive(&self) -> Vec<u32> {
        self.known
            .iter()
            .filter(|(p, t)| proc_stat(**p).is_some_and(|s| s.is_live() && s.start_time == **t))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Sends `sig` to the run's process group and to every known process still alive.
    pub fn signal(&self, sig: Signal) {
        if self.root != 0 {
            let _ = killpg(Pid::from_raw(self.root as i32), sig);
        }
        for p in self.alive() {
            let _ = kill(Pid::from_raw(p as i32), sig);
        }
    }

    /// Waits (up to `max`) until no process of the tree is alive.
    pub async fn wait_gone(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        while !self.refreshed().alive().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Kills what a run of a dead aicli left, from its pid file (`pid start_time` lines,
/// the first being the group leader). Only processes that are still the recorded ones
/// (same start time) are killed, plus the leader's process group when the leader is
/// gone or still the recorded process (a pgid is never reused while any member lives).
/// Removes the file. Returns the pids killed.
pub async fn kill_leftovers(pid_file: &std::path::Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return Vec::new();
    };
    let mut known = BTreeMap::new();
    let mut root = 0;
    for (i, line) in text.lines().enumerate() {
        let mut it = line
            .split_whitespace()
            .map(|x| x.parse::<u64>().unwrap_or(0));
        let (p, t) = (it.next().unwrap_or(0) as u32, it.next().unwrap_or(0));
        if p == 0 {
            continue;
        }
        if i == 0 {
            root = p;
        }
        known.insert(p, t);
    }
    let leader_ok = match (proc_stat(root), known.get(&root)) {
        (Some(st), Some(t)) if st.pgrp == root => st.start_time == *t,
        _ => true,
    };
    let mut tree = ProcessTree {
        root: if leader_ok { root } else { 0 },
        known,
    };
    if leader_ok {
        tree.scan();
    }
    let pids = tree.alive();
    tree.signal(Signal::SIGKILL);
    tree.wait_gone(Duration::from_secs(5)).await;
    let _ = std::fs::remove_file(pid_file);
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let s = "4242 (my (weird) prog) S 1 4242 4242 0 -1 4194560 0 0 0 0 5 3 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse_stat(s),
            Some(ProcStat {
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                state: 'S',
                start_time: 987654,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn extend_follows_groups_and_descendants_that_left_the_group() {
        let st = |ppid, pgrp, t| ProcStat {
            ppid,
            pgrp,
            session: 1,
            state: 'S',
            start_time: t,
        };
        let mut procs = HashMap::new();
        procs.insert(100, st(1, 100, 10)); // the run's leader
        procs.insert(101, st(100, 100, 11)); // a child in the group
        procs.insert(102, st(101, 102, 12)); // a grandchild that made its own group
        procs.insert(103, st(102, 102, 13)); // and its child
        procs.insert(200, st(1, 200, 20)); // unrelated
        let mut known = BTreeMap::new();
        let new = extend(100, &mut known, &procs);
        assert_eq!(new.len(), 4);
        assert_eq!(
            known.keys().copied().collect::<Vec<_>>(),
            [100, 101, 102, 103]
        );
        // The leader exits; 102 is reparented to init: still known from before.
        procs.remove(&100);
        procs.insert(102, st(1, 102, 12));
        assert!(extend(100, &mut known, &procs).is_empty());
        assert!(known.contains_key(&102));
    }
}
