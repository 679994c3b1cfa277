//! [`TaskLock`]: an exclusive hold on a task's record.

use std::os::unix::fs::MetadataExt;

use super::{BatchRecord, files};
use crate::util::{create_private_dirs, open_private_append};

/// An exclusive hold on a task's record: only the aicli process holding it runs the
/// task (a batch, an answer, a resume). It is an `flock` on the task's `events.ndjson`
/// (the file its streams are appended to, made here when missing: the lock costs no
/// file of its own), so the kernel releases it when the process dies, however it dies.
/// Where an older aicli left the task a `lock` file, that one is held too: an older
/// aicli still running the task holds it.
#[derive(Debug)]
pub struct TaskLock {
    _file: nix::fcntl::Flock<std::fs::File>,
    _older: Option<nix::fcntl::Flock<std::fs::File>>,
}

/// Why a task's lock was not had: the file another process holds it on.
struct Held(std::fs::File);

impl BatchRecord {
    /// Takes the task's lock, or says which process holds it.
    pub fn lock_task(&self, task_id: &str) -> Result<TaskLock, String> {
        self.try_lock_task(task_id)?.map_err(|Held(f)| {
            let holder = f
                .metadata()
                .ok()
                .and_then(|m| flock_holder(m.dev(), m.ino()))
                .map_or_else(String::new, |pid| format!(" (pid {pid})"));
            format!(
                "task {}/{task_id} is being run by another aicli process{holder}",
                self.batch_id()
            )
        })
    }

    /// Whether another process holds task `task_id`'s lock (runs it, or has it queued).
    pub(crate) fn task_held_elsewhere(&self, task_id: &str) -> bool {
        !matches!(self.try_lock_task(task_id), Ok(Ok(_)))
    }

    /// The lock, or the file it is held on; `Err` when the record cannot be opened.
    fn try_lock_task(&self, task_id: &str) -> Result<Result<TaskLock, Held>, String> {
        use nix::fcntl::{Flock, FlockArg::LockExclusiveNonblock};
        let dir = self.task_dir(task_id);
        create_private_dirs(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(files::EVENTS);
        let file = open_private_append(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let held = match Flock::lock(file, LockExclusiveNonblock) {
            Ok(f) => f,
            Err((f, _)) => return Ok(Err(Held(f))),
        };
        let older = match std::fs::File::open(dir.join(files::OLDER_LOCK)) {
            Ok(f) => match Flock::lock(f, LockExclusiveNonblock) {
                Ok(f) => Some(f),
                Err((f, _)) => return Ok(Err(Held(f))),
            },
            Err(_) => None,
        };
        Ok(Ok(TaskLock {
            _file: held,
            _older: older,
        }))
    }

    /// Takes the task's lock, waiting up to `max` for a holder that is about to let go
    /// (a batch releases a task right after writing its settled state, so a task that
    /// just blocked can be answered at once).
    pub async fn lock_task_within(
        &self,
        task_id: &str,
        max: std::time::Duration,
    ) -> Result<TaskLock, String> {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            match self.try_lock_task(task_id)? {
                Ok(l) => return Ok(l),
                // The holder is looked up once, for the message.
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return self.lock_task(task_id);
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }
}

/// The process holding an `flock` on the file `dev`/`ino`, from `/proc/locks` (its
/// lines read `1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INO 0 EOF`, the device in hex);
/// `None` when it is not listed (another pid namespace, no procfs).
fn flock_holder(dev: u64, ino: u64) -> Option<u32> {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second hold is refused, naming the holder's pid, until the first is let go.
    #[test]
    fn a_held_task_is_refused_with_its_holder_s_pid() {
        let d = tempfile::tempdir().unwrap();
        let rec = BatchRecord::at(d.path().to_path_buf());
        let held = rec.lock_task("t").unwrap();
        let e = rec.lock_task("t").unwrap_err();
        assert!(
            e.contains("is being run by another aicli process")
                && e.contains(&format!("(pid {})", std::process::id())),
            "{e}"
        );
        rec.lock_task("u").expect("another task is free");
        drop(held);
        rec.lock_task("t").expect("free once let go");
        // The lock is the stream's file: no file of its own.
        let names: Vec<_> = std::fs::read_dir(rec.task_dir("t"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [files::EVENTS], "{names:?}");
    }
}
