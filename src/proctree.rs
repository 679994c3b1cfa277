//! Every process of a run, without watching for them: the run's process group, its
//! cgroup where one could be made ([`crate::cgroup`]), and the orphans aicli adopts as
//! their subreaper.
//!
//! aicli is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a descendant whose parent dies
//! (a daemon that `setsid()`s away and whose parent exits at once) is reparented to aicli
//! instead of init, so it can always be found again, however short-lived its ancestors
//! were. Each run's processes carry a marker in their environment (`AICLI_RUN=<id>`),
//! which tells which run an adopted orphan came from when there is no cgroup to say it.
//!
//! A run's end ([`RunTree::shutdown`]) signals the process group, the cgroup's members
//! (or, without a cgroup, the adopted orphans that carry the run's marker), and repeats
//! until nothing is left: killing a process makes its own children orphans, adopted in
//! turn. The run's `pid` file names the leader, the marker and the cgroup, so that after
//! a `kill -9` of aicli, `aicli resume` kills what is left ([`kill_leftovers`]): the
//! cgroup's members, or every process on the machine that carries the run's marker.
//!
//! Zombies: aicli reaps the orphans it adopted from a run (never a child some other code
//! will wait for): those it killed, those still in a run's process group, and, in cgroup
//! v2, those that exited in a run's cgroup (a SIGCHLD-driven reaper thread). An orphan
//! that left the process group and exited on its own stays a zombie in v1 or without
//! cgroups until aicli exits (it holds a pid, nothing else).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::cgroup::{CgroupMode, RunCgroup};

/// The environment variable that marks a run's processes (inherited by descendants).
pub const RUN_MARKER_VAR: &str = "AICLI_RUN";

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

/// The orphans this process adopted (and any child its main thread started), zombies
/// included. The kernel hands an orphan to the subreaper's first live thread, the main
/// one: its `children` file is all there is to read, however many threads aicli has.
fn my_children() -> Vec<u32> {
    let me = std::process::id();
    if let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{me}/children")) {
        return text
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .collect();
    }
    // A kernel without CONFIG_PROC_CHILDREN (or a main thread that is gone): one scan of
    // /proc for every child of the process.
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && proc_stat(pid).is_some_and(|s| s.ppid == me)
            {
                out.push(pid);
            }
        }
    }
    out
}

/// Whether process `pid` carries `AICLI_RUN=<marker>` in its environment.
fn has_marker(pid: u32, marker: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{RUN_MARKER_VAR}={marker}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// Every live process on the machine carrying the run's marker.
fn marked_anywhere(marker: &str) -> Vec<u32> {
    all_processes()
        .into_keys()
        .filter(|p| has_marker(*p, marker))
        .collect()
}

/// State shared by every run of this process: the leaders tokio waits for (never
/// reaped here), the process groups of recent runs (their members' zombies are ours to
/// reap), and the reaper thread.
struct Reaper {
    leaders: HashSet<u32>,
    groups: VecDeque<u32>,
    group_set: HashSet<u32>,
    /// Processes a run's end signalled that were not reaped yet: one that dies late (a
    /// loaded machine, a frozen cgroup thawed late) is reaped by the SIGCHLD thread
    /// whenever it turns into a zombie, whatever group or cgroup it was in. A pid leaves
    /// the set when it is reaped or gone.
    killed: HashSet<u32>,
}

/// How many past runs' process groups the reaper remembers.
const GROUPS_KEPT: usize = 4096;

fn reaper() -> &'static Mutex<Reaper> {
    static REAPER: OnceLock<Mutex<Reaper>> = OnceLock::new();
    REAPER.get_or_init(|| {
        // Orphans of any descendant are reparented to aicli from now on.
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(error = %e, "cannot become a child subreaper; orphans of a run go to init");
        }
        let spawned = std::thread::Builder::new()
            .name("aicli-reaper".into())
            .spawn(reap_on_sigchld);
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the zombie reaper");
        }
        Mutex::new(Reaper {
            leaders: HashSet::new(),
            groups: VecDeque::new(),
            group_set: HashSet::new(),
            killed: HashSet::new(),
        })
    })
}

/// Makes this process a child subreaper (once) and starts its reaper.
pub fn become_subreaper() {
    let _ = reaper();
}

/// Runs `spawn` (which starts a run's leader) with the reaper held off, and registers
/// the leader (`pid_of` its handle) before letting go: a leader that exits at once is
/// never taken for an adopted orphan and reaped under tokio's feet.
pub fn spawn_leader<T, E>(
    spawn: impl FnOnce() -> Result<T, E>,
    pid_of: impl Fn(&T) -> Option<u32>,
) -> Result<T, E> {
    let mut guard = reaper().lock().ok();
    let spawned = spawn()?;
    if let (Some(r), Some(pid)) = (guard.as_mut(), pid_of(&spawned)) {
        r.leaders.insert(pid);
    }
    Ok(spawned)
}

/// Waits for SIGCHLD (on its own small runtime: it outlives any caller's) and reaps the
/// zombies that are ours.
fn reap_on_sigchld() {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async {
        let Ok(mut sig) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        else {
            return;
        };
        while sig.recv().await.is_some() {
            reap_adopted(&[]);
        }
    });
}

/// The v2 cgroup prefix of this process's run cgroups, as `/proc/<pid>/cgroup` shows it
/// (`0::/…/aicli/<pid>-`).
fn own_run_cgroup_prefix() -> Option<String> {
    static PREFIX: OnceLock<Option<String>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let own = text.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(format!(
                "{}/aicli/{}-",
                own.trim_end_matches('/'),
                std::process::id()
            ))
        })
        .clone()
}

/// Reaps zombie children that are orphans adopted from a run: those in `killed`, in a
/// run's process group, or (v2) exited in one of this process's run cgroups. A run's
/// leader is never reaped here (tokio waits for it).
fn reap_adopted(killed: &[u32]) {
    let (leaders, groups, signalled) = match reaper().lock() {
        Ok(mut r) => {
            let r = &mut *r;
            r.killed
                .extend(killed.iter().copied().filter(|p| !r.leaders.contains(p)));
            (r.leaders.clone(), r.group_set.clone(), r.killed.clone())
        }
        Err(_) => return,
    };
    let prefix = own_run_cgroup_prefix();
    let mut reaped = Vec::new();
    for pid in my_children() {
        if leaders.contains(&pid) {
            continue;
        }
        let Some(st) = proc_stat(pid) else { continue };
        if st.state != 'Z' {
            continue;
        }
        let ours = signalled.contains(&pid)
            || groups.contains(&st.pgrp)
            || prefix.as_ref().is_some_and(|p| {
                std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|t| t.lines().any(|l| l.starts_with(&format!("0::{p}"))))
            });
        if ours {
            let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
            reaped.push(pid);
        }
    }
    if signalled.is_empty() {
        return;
    }
    // Reaped, or gone some other way (its own parent reaped it): no longer ours to wait
    // for.
    if let Ok(mut r) = reaper().lock() {
        r.killed
            .retain(|p| !reaped.contains(p) && proc_stat(*p).is_some());
    }
}

/// The processes of one run: its group (the leader's pid), its cgroup if it has one,
/// and the orphans it left to aicli (marked with its id).
#[derive(Debug)]
pub struct RunTree {
    leader: u32,
    marker: String,
    cgroup: Option<RunCgroup>,
    pid_file: Option<PathBuf>,
}

/// A new run marker: random, 128 bits.
pub fn new_marker() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Makes the cgroup a run of `mode` will live in (`None`: there is none to make).
pub fn run_cgroup(mode: CgroupMode) -> Option<RunCgroup> {
    become_subreaper();
    RunCgroup::create(mode)
}

impl RunTree {
    /// The tree of a just-started run whose leader (and group) is `leader`. Writes the
    /// pid file (`pid start_time`, `marker …`, `cgroup …`) when there is one.
    pub fn started(
        leader: u32,
        marker: String,
        cgroup: Option<RunCgroup>,
        pid_file: Option<PathBuf>,
    ) -> RunTree {
        if let Ok(mut r) = reaper().lock() {
            r.leaders.insert(leader);
            if r.group_set.insert(leader) {
                r.groups.push_back(leader);
            }
            while r.groups.len() > GROUPS_KEPT {
                if let Some(old) = r.groups.pop_front() {
                    r.group_set.remove(&old);
                }
            }
        }
        if let Some(f) = &pid_file {
            write_pid_file(f, Some(leader), &marker, cgroup.as_ref());
        }
        RunTree {
            leader,
            marker,
            cgroup,
            pid_file,
        }
    }

    /// The leader's exit was collected: from now on its zombie is nobody's but ours.
    pub fn leader_reaped(&self) {
        if let Ok(mut r) = reaper().lock() {
            r.leaders.remove(&self.leader);
        }
    }

    /// The run's cgroup, if it has one.
    pub fn cgroup(&self) -> Option<&RunCgroup> {
        self.cgroup.as_ref()
    }

    /// The processes of the run outside its process group that aicli can name: the
    /// cgroup's members, or the adopted orphans carrying the run's marker.
    fn members(&self) -> Vec<u32> {
        match &self.cgroup {
            Some(c) => c.pids(),
            None => {
                let leaders = reaper()
                    .lock()
                    .map(|r| r.leaders.clone())
                    .unwrap_or_default();
                my_children()
                    .into_iter()
                    .filter(|p| !leaders.contains(p))
                    .filter(|p| proc_stat(*p).is_some_and(|s| s.is_live()))
                    .filter(|p| has_marker(*p, &self.marker))
                    .collect()
            }
        }
    }

    /// Whether anything of the run is alive.
    pub fn alive(&self) -> bool {
        !group_is_empty(self.leader) || !self.members().is_empty()
    }

    /// Sends `sig` to the run's process group and every member; returns the members.
    pub fn signal(&self, sig: Signal) -> Vec<u32> {
        let _ = killpg(Pid::from_raw(self.leader as i32), sig);
        let members = self.members();
        for p in &members {
            let _ = kill(Pid::from_raw(*p as i32), sig);
        }
        members
    }

    /// SIGKILLs everything of the run now (the cgroup at once, the group, the adopted
    /// orphans), without waiting.
    pub fn kill_now(&self) -> Vec<u32> {
        let _ = killpg(Pid::from_raw(self.leader as i32), Signal::SIGKILL);
        let mut killed = match &self.cgroup {
            Some(c) => c.kill(),
            None => Vec::new(),
        };
        killed.extend(self.signal(Signal::SIGKILL));
        killed
    }

    /// SIGTERM to everything of the run, up to `grace` for it to go (`done` says whether
    /// the leader has exited), then SIGKILL until nothing is left (bounded: 5 s).
    pub async fn shutdown(&self, grace: Duration, mut done: impl FnMut() -> bool) {
        if done() && !self.alive() {
            return;
        }
        // Every member signalled: once dead, the adopted ones are ours to reap.
        let mut signalled: BTreeSet<u32> = self.signal(Signal::SIGTERM).into_iter().collect();
        let deadline = tokio::time::Instant::now() + grace;
        let mut graceful = false;
        loop {
            if done() && !self.alive() {
                graceful = true;
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            // Orphans adopted since (their parent just died) get the same SIGTERM.
            signalled.extend(self.signal(Signal::SIGTERM));
        }
        if !graceful {
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                signalled.extend(self.kill_now());
                reap_adopted(&[]);
                if (done() && !self.alive()) || tokio::time::Instant::now() >= until {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // The dead become zombies a moment after they are gone from the cgroup and the
        // group: reap them (bounded).
        let signalled: Vec<u32> = signalled.into_iter().collect();
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            reap_adopted(&signalled);
            let waiting = my_children().into_iter().any(|p| signalled.contains(&p));
            if !waiting || tokio::time::Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// [`RunTree::finish`] once the processes just killed are gone, on a thread of its
    /// own (for `Drop`, which cannot wait).
    pub fn finish_soon(&mut self) {
        let tree = RunTree {
            leader: self.leader,
            marker: std::mem::take(&mut self.marker),
            cgroup: self.cgroup.take(),
            pid_file: self.pid_file.take(),
        };
        let spawned = std::thread::Builder::new()
            .name("aicli-run-cleanup".into())
            .spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(3);
                while tree.alive() && std::time::Instant::now() < deadline {
                    reap_adopted(&[]);
                    std::thread::sleep(Duration::from_millis(10));
                }
                tree.finish();
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot clean up after a dropped run");
        }
    }

    /// After the run: nothing of it is left, so its cgroup and pid file go.
    pub fn finish(&self) {
        reap_adopted(&[]);
        if let Some(c) = &self.cgroup
            && !c.remove()
        {
            tracing::warn!(cgroup = %c.path().display(), "the run's cgroup is not empty; left for `aicli resume`");
            return;
        }
        if let Some(f) = &self.pid_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Writes a run's pid file: the leader's `pid start_time` (once it exists), the
/// marker and the cgroup. Written first without a leader, before the spawn.
pub fn write_pid_file(path: &Path, leader: Option<u32>, marker: &str, cgroup: Option<&RunCgroup>) {
    let mut text = String::new();
    if let Some(leader) = leader {
        let start = proc_stat(leader).map(|s| s.start_time).unwrap_or(0);
        text.push_str(&format!("{leader} {start}\n"));
    }
    text.push_str(&format!("marker {marker}\n"));
    if let Some(c) = cgroup {
        text.push_str(&format!("cgroup {}\n", c.path().display()));
    }
    write_private(path, &text);
}

fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            let _ = f.write_all(text.as_bytes());
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot write the run's pid file")
        }
    }
}

/// What a run's pid file says.
#[derive(Debug, Default, PartialEq, Eq)]
struct PidFile {
    /// (pid, start time) of the leader, then of any process an older aicli listed.
    pids: Vec<(u32, u64)>,
    marker: Option<String>,
    cgroup: Option<PathBuf>,
}

fn parse_pid_file(text: &str) -> PidFile {
    let mut out = PidFile::default();
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("marker ") {
            out.marker = Some(m.trim().to_owned());
        } else if let Some(c) = line.strip_prefix("cgroup ") {
            out.cgroup = Some(PathBuf::from(c.trim()));
        } else {
            let mut it = line.split_whitespace().map(|x| x.parse::<u64>().ok());
            if let (Some(Some(p)), Some(Some(t))) = (it.next(), it.next())
                && p > 0
            {
                out.pids.push((p as u32, t));
            }
        }
    }
    out
}

/// Kills what a run of a dead aicli left, from its pid file: every process in its
/// cgroup; else every process on the machine carrying its marker, and its process group
/// when the leader is gone or still the recorded process (a pgid is not reused while a
/// member lives). Processes listed by pid only die if they are still the recorded ones
/// (same start time). Removes the cgroup and the file. Returns the pids killed.
pub async fn kill_leftovers(pid_file: &Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(pid_file) else {
        return Vec::new();
    };
    let rec = parse_pid_file(&text);
    let mut killed = BTreeSet::new();
    let cgroup = rec.cgroup.as_deref().and_then(RunCgroup::open);
    let leader = rec.pids.first().map(|(p, _)| *p).unwrap_or(0);
    let leader_ok = match (proc_stat(leader), rec.pids.first()) {
        (Some(st), Some((_, t))) if st.pgrp == leader => st.start_time == *t,
        _ => true,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut round = Vec::new();
        if let Some(c) = &cgroup {
            round.extend(c.kill());
        }
        if let Some(m) = &rec.marker {
            round.extend(marked_anywhere(m));
        }
        for (p, t) in &rec.pids {
            if proc_stat(*p).is_some_and(|s| s.is_live() && s.start_time == *t) {
                round.push(*p);
            }
        }
        if leader_ok && leader != 0 {
            let _ = killpg(Pid::from_raw(leader as i32), Signal::SIGKILL);
        }
        for p in &round {
            let _ = kill(Pid::from_raw(*p as i32), Signal::SIGKILL);
        }
        killed.extend(round.iter().copied());
        reap_adopted(&round);
        let group_left = leader_ok && !group_is_empty(leader);
        if (round.is_empty() && !group_left) || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(c) = &cgroup {
        let until = tokio::time::Instant::now() + Duration::from_secs(2);
        while !c.remove() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = std::fs::remove_file(pid_file);
    killed.into_iter().collect()
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
    fn pid_files_of_this_and_older_versions_parse() {
        assert_eq!(
            parse_pid_file("100 5\nmarker abc\ncgroup /sys/fs/cgroup/aicli/1-2-3\n"),
            PidFile {
                pids: vec![(100, 5)],
                marker: Some("abc".into()),
                cgroup: Some(PathBuf::from("/sys/fs/cgroup/aicli/1-2-3")),
            }
        );
        // An older aicli listed every descendant it had seen.
        assert_eq!(
            parse_pid_file("100 5\n101 6\n\ngarbage\n").pids,
            vec![(100, 5), (101, 6)]
        );
    }
}
