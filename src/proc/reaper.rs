//! aicli as a child subreaper (`PR_SET_CHILD_SUBREAPER`), and the reaping of the zombies
//! that are its own: the orphans it adopted from a run, never a run's leader (tokio
//! waits for that one).
//!
//! Reaped: the orphans a run's end killed, those still in a run's process group, and, in
//! cgroup v2, those that exited in a run's cgroup (a SIGCHLD-driven reaper thread). An
//! orphan that left the process group and exited on its own stays a zombie in v1 or
//! without cgroups until aicli exits (it holds a pid, nothing else).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use super::procfs::{my_children, proc_stat};

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

/// Spawns of run leaders under way: while one is, the reaper reaps nothing (its leader
/// may already be a zombie the reaper does not know as a leader yet).
static SPAWNING: AtomicUsize = AtomicUsize::new(0);

/// Runs `spawn` (which starts a run's leader) with the reaper held off, and registers
/// the leader (`pid_of` its handle) before letting go: a leader that exits at once is
/// never taken for an adopted orphan and reaped from under its waiter. Spawns do not
/// wait for each other (each may take milliseconds joining its cgroup).
pub fn spawn_leader<T, E>(
    spawn: impl FnOnce() -> Result<T, E>,
    pid_of: impl Fn(&T) -> Option<u32>,
) -> Result<T, E> {
    struct Spawning;
    impl Drop for Spawning {
        fn drop(&mut self) {
            SPAWNING.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _ = reaper();
    SPAWNING.fetch_add(1, Ordering::SeqCst);
    let _spawning = Spawning;
    let spawned = spawn()?;
    if let (Ok(mut r), Some(pid)) = (reaper().lock(), pid_of(&spawned)) {
        r.leaders.insert(pid);
    }
    Ok(spawned)
}

/// A run whose leader (and process group) is `leader` started: the leader is tokio's to
/// reap, and the zombies of its group are ours.
pub(super) fn track_run(leader: u32) {
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
}

/// The exit of `leader` was collected: from now on its zombie is nobody's but ours.
pub(super) fn leader_collected(leader: u32) {
    if let Ok(mut r) = reaper().lock() {
        r.leaders.remove(&leader);
    }
}

/// The leaders of the runs alive now (tokio waits for them).
pub(super) fn leaders() -> HashSet<u32> {
    reaper()
        .lock()
        .map(|r| r.leaders.clone())
        .unwrap_or_default()
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
pub(super) fn reap_adopted(killed: &[u32]) {
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
        if !ours {
            continue;
        }
        // Checked again under the lock, which a spawn registers its leader under: no
        // spawn under way, and not a leader registered since the copy above.
        let Ok(r) = reaper().lock() else { return };
        if SPAWNING.load(Ordering::SeqCst) > 0 || r.leaders.contains(&pid) {
            continue;
        }
        let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
        drop(r);
        reaped.push(pid);
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
