//! Every process of a run, without watching for them ([`RunTree`]): the run's process
//! group, its cgroup where one could be made ([`super::cgroup`]), and the orphans aicli
//! adopts as their subreaper ([`super::reaper`]).
//!
//! A daemon that `setsid()`s away and whose parent exits at once is reparented to aicli
//! instead of init, so it can always be found again, however short-lived its ancestors
//! were. Each run's processes carry a marker in their environment (`AICLI_RUN=<id>`),
//! which tells which run an adopted orphan came from when there is no cgroup to say it.
//!
//! A run's end ([`RunTree::shutdown`]) signals the process group, the cgroup's members
//! (or, without a cgroup, the adopted orphans that carry the run's marker), and repeats
//! until nothing is left: killing a process makes its own children orphans, adopted in
//! turn. The run's record of its processes ([`super::leftovers::PidRecord`]) names the
//! leader, the marker and the cgroup, so that what a killed aicli left can be killed
//! later.

use std::collections::BTreeSet;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::cgroup::{CgroupMode, RunCgroup};
use super::leftovers::{PidRecord, write_pids};
use super::procfs::{group_is_empty, has_marker, my_children, proc_stat};
use super::reaper::{self, reap_adopted};

/// The environment variable that marks a run's processes (inherited by descendants).
pub const RUN_MARKER_VAR: &str = "AICLI_RUN";

/// The processes of one run: its group (the leader's pid), its cgroup if it has one,
/// and the orphans it left to aicli (marked with its id).
#[derive(Debug)]
pub struct RunTree {
    leader: u32,
    marker: String,
    cgroup: Option<RunCgroup>,
    pids: Option<PidRecord>,
}

/// A new run marker: random, 128 bits.
pub fn new_marker() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Makes the cgroup a run of `mode` will live in (`None`: there is none to make).
pub fn run_cgroup(mode: CgroupMode) -> Option<RunCgroup> {
    reaper::become_subreaper();
    RunCgroup::create(mode)
}

impl RunTree {
    /// The tree of a just-started run whose leader (and group) is `leader`. Records its
    /// processes (`pid start_time`, `marker …`, `cgroup …`) when it has a record.
    pub fn started(
        leader: u32,
        marker: String,
        cgroup: Option<RunCgroup>,
        pids: Option<PidRecord>,
    ) -> RunTree {
        reaper::track_run(leader);
        if let Some(r) = &pids {
            write_pids(r, Some(leader), &marker, cgroup.as_ref());
        }
        RunTree {
            leader,
            marker,
            cgroup,
            pids,
        }
    }

    /// The leader's exit was collected: from now on its zombie is nobody's but ours.
    pub fn leader_reaped(&self) {
        reaper::leader_collected(self.leader);
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
                let leaders = reaper::leaders();
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

    /// For a run aicli can no longer wait for (dropped, or its pidfd not registered):
    /// everything of it killed now, then [`RunTree::finish`] once it is gone, on a
    /// thread of its own (`Drop` cannot wait). `leader`, when given, is the run leader's
    /// pidfd: its exit is reaped there first (a leader is the child of the thread that
    /// spawned it, which the reaper does not look at).
    pub fn abandon(&mut self, leader: Option<std::os::fd::OwnedFd>) {
        self.kill_now();
        self.leader_reaped();
        let tree = RunTree {
            leader: self.leader,
            marker: std::mem::take(&mut self.marker),
            cgroup: self.cgroup.take(),
            pids: self.pids.take(),
        };
        let spawned = std::thread::Builder::new()
            .name("aicli-run-cleanup".into())
            .spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(3);
                if let Some(fd) = leader {
                    // Killed just now: its exit comes within milliseconds.
                    while matches!(super::direct::wait_pidfd(&fd, libc::WNOHANG), Ok(None))
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
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

    /// After the run: nothing of it is left, so its cgroup and its record go.
    pub fn finish(&self) {
        reap_adopted(&[]);
        if let Some(c) = &self.cgroup
            && !c.remove()
        {
            tracing::warn!(cgroup = %c.path().display(), "the run's cgroup is not empty; left for `aicli resume`");
            return;
        }
        if let Some(r) = &self.pids {
            r.clear();
        }
    }
}
