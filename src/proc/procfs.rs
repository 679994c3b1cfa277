//! What `/proc` says of processes: a process's stat line ([`proc_stat`]), every live
//! process ([`all_processes`]), this process's children, and which processes carry a
//! run's marker.

use std::collections::HashMap;

use nix::sys::signal::killpg;
use nix::unistd::Pid;

use super::tree::RUN_MARKER_VAR;

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
    pub(super) fn is_live(&self) -> bool {
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
pub(super) fn my_children() -> Vec<u32> {
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
pub(super) fn has_marker(pid: u32, marker: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{RUN_MARKER_VAR}={marker}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// Every live process on the machine carrying the run's marker.
pub(super) fn marked_anywhere(marker: &str) -> Vec<u32> {
    all_processes()
        .into_keys()
        .filter(|p| has_marker(*p, marker))
        .collect()
}

#[cfg(test)]
mod tests;
