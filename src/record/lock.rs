//! [`TaskLock`]: an exclusive hold on a task's record.

use super::{BatchRecord, files};
use crate::util::{create_private_dirs, open_private_rw};

/// An exclusive hold on a task's record: only the aicli process holding it runs the
/// task (a batch, an answer, a resume). It is an `flock` on `tasks/<task>/lock`, so the
/// kernel releases it when the process dies, however it dies.
#[derive(Debug)]
pub struct TaskLock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

impl BatchRecord {
    /// Takes the task's lock, or says which process holds it.
    pub fn lock_task(&self, task_id: &str) -> Result<TaskLock, String> {
        use std::io::{Read, Seek, Write};
        let dir = self.task_dir(task_id);
        create_private_dirs(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(files::LOCK);
        let file = open_private_rw(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut f) => {
                let _ = f.set_len(0);
                let _ = f.rewind();
                let _ = write!(f, "{}", std::process::id());
                Ok(TaskLock { _file: f })
            }
            Err((mut f, _)) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                Err(format!(
                    "task {}/{task_id} is being run by another aicli process (pid {})",
                    self.batch_id(),
                    pid.trim()
                ))
            }
        }
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
            match self.lock_task(task_id) {
                Ok(l) => return Ok(l),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }
}
