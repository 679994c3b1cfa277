//! What a dead aicli left: each run's processes (the leader, the marker, the cgroup),
//! recorded while the run lives ([`write_pids`]: a task's run in its batch's journal, an
//! MCP tool's or upstream's in a `pid.*` file), and the killing of whatever of the run
//! is still there after a `kill -9` of aicli ([`kill_recorded`], [`kill_leftovers`],
//! from `aicli resume`): the cgroup's members, or every process on the machine that
//! carries the run's marker.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::cgroup::RunCgroup;
use super::procfs::{group_is_empty, marked_anywhere, proc_stat};
use super::reaper::reap_adopted;

/// Where a run names its processes while it lives, so that `aicli resume` can kill what
/// is left of it if aicli dies.
#[derive(Debug, Clone)]
pub enum PidRecord {
    /// A file of its own, removed at the run's end.
    File(PathBuf),
    /// Kept by someone else: a task's run, in its batch's journal.
    Log(Arc<dyn PidLog>),
}

/// A keeper of a run's process names ([`PidRecord::Log`]).
pub trait PidLog: Send + Sync + std::fmt::Debug {
    /// The run's processes are `text` (what [`write_pids`] wrote; replaces the last).
    fn write(&self, text: &str);
    /// The run has ended and nothing of it is left.
    fn clear(&self);
}

impl PidRecord {
    fn write(&self, text: &str) {
        match self {
            PidRecord::File(path) => write_private(path, text),
            PidRecord::Log(log) => log.write(text),
        }
    }

    /// The run has ended and nothing of it is left: its record goes.
    pub fn clear(&self) {
        match self {
            PidRecord::File(path) => {
                let _ = std::fs::remove_file(path);
            }
            PidRecord::Log(log) => log.clear(),
        }
    }
}

/// Records a run's processes: the leader's `pid start_time` (once it exists), the
/// marker and the cgroup. Written first without a leader, before the spawn.
pub fn write_pids(rec: &PidRecord, leader: Option<u32>, marker: &str, cgroup: Option<&RunCgroup>) {
    let mut text = String::new();
    if let Some(leader) = leader {
        let start = proc_stat(leader).map(|s| s.start_time).unwrap_or(0);
        text.push_str(&format!("{leader} {start}\n"));
    }
    text.push_str(&format!("marker {marker}\n"));
    if let Some(c) = cgroup {
        text.push_str(&format!("cgroup {}\n", c.path().display()));
    }
    rec.write(&text);
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
    let killed = kill_recorded(&text).await;
    let _ = std::fs::remove_file(pid_file);
    killed
}

/// [`kill_leftovers`] of a run whose processes were recorded as `text` (what
/// [`write_pids`] wrote), wherever that was kept. Removes the cgroup.
pub async fn kill_recorded(text: &str) -> Vec<u32> {
    let rec = parse_pid_file(text);
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
    killed.into_iter().collect()
}

#[cfg(test)]
mod tests;
