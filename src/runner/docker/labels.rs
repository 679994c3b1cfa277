//! The labels on aicli's containers, and who owns one.
//!
//! Every container aicli starts carries the batch, the task and the attempt, the paths
//! of the task on this machine (to bring a remote run's work back later), and its owner:
//! the machine, pid and process start time of the aicli that started it. A container
//! whose owner is gone was left by an aicli that was killed: `aicli resume` and
//! `aicli containers prune` find it by these labels.

use std::collections::HashMap;
use std::path::PathBuf;

/// Set on every container aicli starts.
pub const MANAGED: &str = "dev.aicli.managed";
/// The batch id.
pub const BATCH: &str = "dev.aicli.batch";
/// The task id.
pub const TASK: &str = "dev.aicli.task";
/// The attempt number.
pub const ATTEMPT: &str = "dev.aicli.attempt";
/// The provider.
pub const PROVIDER: &str = "dev.aicli.provider";
/// `host:pid:start_time` of the aicli process that started it.
pub const OWNER: &str = "dev.aicli.owner";
/// The task's worktree on aicli's machine.
pub const WORKSPACE: &str = "dev.aicli.workspace";
/// The task's home on aicli's machine.
pub const HOME: &str = "dev.aicli.home";
/// The task's branch.
pub const BRANCH: &str = "dev.aicli.branch";
/// `1` when the engine shares no filesystem with aicli (the work is inside).
pub const REMOTE: &str = "dev.aicli.remote";
/// The commit the remote workspace started from.
pub const BASE: &str = "dev.aicli.base";

/// This aicli process as an owner label: `host:pid:start_time`.
pub fn this_owner() -> String {
    let pid = std::process::id();
    let start = crate::proc::procfs::proc_stat(pid)
        .map(|s| s.start_time)
        .unwrap_or(0);
    format!("{}:{pid}:{start}", hostname())
}

/// The machine's name (`/proc/sys/kernel/hostname`, else `localhost`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether the owner named by an owner label is alive: the same machine, and a live
/// process with that pid and start time. An owner on another machine counts as alive
/// (it cannot be checked from here).
pub fn owner_alive(owner: &str) -> bool {
    let Some((host, pid, start)) = owner_parts(owner) else {
        return false;
    };
    if host != hostname() {
        return true;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    crate::proc::procfs::proc_stat(pid)
        .is_some_and(|s| s.state != 'Z' && s.state != 'X' && s.start_time == start)
}

/// An owner label's machine, pid and start time (`host:pid:start`; the host may hold
/// `:` itself).
pub fn owner_parts(owner: &str) -> Option<(&str, &str, &str)> {
    let mut parts = owner.rsplitn(3, ':');
    let (start, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    Some((host, pid, start))
}

/// Whether the directory `dir` that aicli made for a container, naming its `owner` (as
/// read from it), was left by an aicli that is gone: its owner is dead, or it names
/// none and was made over a minute ago (one being made right now has no owner yet).
pub fn left_behind(dir: &std::path::Path, owner: Option<&str>) -> bool {
    match owner {
        Some(o) => !owner_alive(o),
        None => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(60)),
    }
}

/// What the labels of one container say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Labelled {
    /// The batch.
    pub batch_id: String,
    /// The task.
    pub task_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The provider.
    pub provider: String,
    /// The owner label.
    pub owner: String,
    /// The worktree on aicli's machine.
    pub workspace: Option<PathBuf>,
    /// The task's home on aicli's machine.
    pub home: Option<PathBuf>,
    /// The branch.
    pub branch: Option<String>,
    /// Whether the work is inside the container.
    pub remote: bool,
    /// The remote workspace's start commit.
    pub base: Option<String>,
}

impl Labelled {
    /// Reads a container's labels (`None` when it is not aicli's).
    pub fn read(labels: &HashMap<String, String>) -> Option<Labelled> {
        labels.get(MANAGED)?;
        let get = |k: &str| labels.get(k).cloned();
        Some(Labelled {
            batch_id: get(BATCH).unwrap_or_default(),
            task_id: get(TASK).unwrap_or_default(),
            attempt: get(ATTEMPT).and_then(|a| a.parse().ok()).unwrap_or(0),
            provider: get(PROVIDER).unwrap_or_default(),
            owner: get(OWNER).unwrap_or_default(),
            workspace: get(WORKSPACE).map(PathBuf::from),
            home: get(HOME).map(PathBuf::from),
            branch: get(BRANCH),
            remote: get(REMOTE).as_deref() == Some("1"),
            base: get(BASE),
        })
    }

    /// The labels to set.
    pub fn to_map(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        m.insert(MANAGED.to_owned(), "1".to_owned());
        m.insert(BATCH.to_owned(), self.batch_id.clone());
        m.insert(TASK.to_owned(), self.task_id.clone());
        m.insert(ATTEMPT.to_owned(), self.attempt.to_string());
        m.insert(PROVIDER.to_owned(), self.provider.clone());
        m.insert(OWNER.to_owned(), self.owner.clone());
        if let Some(w) = &self.workspace {
            m.insert(WORKSPACE.to_owned(), w.display().to_string());
        }
        if let Some(h) = &self.home {
            m.insert(HOME.to_owned(), h.display().to_string());
        }
        if let Some(b) = &self.branch {
            m.insert(BRANCH.to_owned(), b.clone());
        }
        if self.remote {
            m.insert(REMOTE.to_owned(), "1".to_owned());
        }
        if let Some(b) = &self.base {
            m.insert(BASE.to_owned(), b.clone());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_owners_are_checked() {
        let l = Labelled {
            batch_id: "b1".into(),
            task_id: "t1".into(),
            attempt: 2,
            provider: "claude".into(),
            owner: this_owner(),
            workspace: Some("/r/wt".into()),
            home: None,
            branch: Some("aicli/b1/t1".into()),
            remote: true,
            base: Some("abc".into()),
        };
        assert_eq!(Labelled::read(&l.to_map()), Some(l.clone()));
        assert!(owner_alive(&l.owner));
        // The same machine, a pid that is not alive (or not with that start time).
        assert!(!owner_alive(&format!(
            "{}:{}:1",
            hostname(),
            std::process::id()
        )));
        assert!(!owner_alive("garbage"));
        // Another machine cannot be checked: it counts as alive.
        assert!(owner_alive("some-other-machine:1:1"));
        assert_eq!(Labelled::read(&HashMap::new()), None);
    }
}
