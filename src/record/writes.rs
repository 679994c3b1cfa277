//! A task's record written: its line in the batch's journal, `task.json` as it settles
//! ([`Write`]), and its running attempt's processes ([`BatchRecord::pid_record`]).

use std::path::Path;

use super::{BatchRecord, TaskRecord, Write, files, journal};
use crate::util::create_private_dirs;

/// `task.json`'s text.
fn task_file(rec: &TaskRecord) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)
}

/// Writes `task.json`, without an fsync: the journal's line is the durable copy.
fn store_task_file(dir: &Path, text: Vec<u8>) -> std::io::Result<()> {
    create_private_dirs(dir)?;
    crate::util::write_bytes(&dir.join(files::TASK), text, false)
}

/// A task's run's processes, recorded in its batch's journal.
#[derive(Debug)]
struct TaskPids {
    journal: std::sync::Arc<journal::Journal>,
    task: String,
}

impl crate::proc::leftovers::PidLog for TaskPids {
    fn write(&self, text: &str) {
        if let Err(e) = journal::pids_line(&self.task, text).and_then(|l| self.journal.append(&l)) {
            tracing::warn!(task = %self.task, error = %e, "cannot record the run's processes");
        }
    }

    fn clear(&self) {
        self.write("");
    }
}

impl BatchRecord {
    /// Where a run of task `task_id` records its processes while it lives: lines in
    /// the journal.
    pub fn pid_record(&self, task_id: &str) -> crate::proc::leftovers::PidRecord {
        crate::proc::leftovers::PidRecord::Log(std::sync::Arc::new(TaskPids {
            journal: self.journal.clone(),
            task: task_id.to_owned(),
        }))
    }

    /// Writes a task's record ([`Write`] says how), on this thread: for the few writes
    /// outside a running batch (a recovery, `land`, `discard`).
    pub fn write_task(&self, rec: &TaskRecord, how: Write) -> std::io::Result<()> {
        self.journal.append(&journal::line(rec)?)?;
        if how == Write::Settled {
            store_task_file(&self.task_dir(&rec.task.id), task_file(rec)?)?;
            self.journal.commit_now()?;
        }
        Ok(())
    }

    /// Writes the records of a new batch's queued tasks: their lines in one append.
    pub fn write_queued(&self, recs: &[TaskRecord]) -> std::io::Result<()> {
        let mut lines = Vec::new();
        for rec in recs {
            lines.extend(journal::line(rec)?);
        }
        self.journal.append(&lines).map(drop)
    }

    /// Writes a task's record with the file I/O on the blocking pool (serialized here,
    /// written there). [`Write::Progress`] appends its line to the journal (a killed
    /// aicli leaves it there: the page cache survives it); [`Write::Settled`] also
    /// writes its `task.json`, then waits for the journal's next group commit (a
    /// machine crash keeps it), which the tasks settling meanwhile share.
    pub async fn write_task_off_thread(&self, rec: &TaskRecord, how: Write) -> std::io::Result<()> {
        let line = journal::line(rec)?;
        let copy = match how {
            Write::Settled => Some(task_file(rec)?),
            Write::Progress => None,
        };
        let (journal, dir) = (self.journal.clone(), self.task_dir(&rec.task.id));
        let n = tokio::task::spawn_blocking(move || {
            let n = journal.append(&line)?;
            if let Some(text) = copy {
                store_task_file(&dir, text)?;
            }
            Ok::<_, std::io::Error>(n)
        })
        .await
        .map_err(std::io::Error::other)??;
        if how == Write::Settled {
            self.journal.commit(n).await?;
        }
        Ok(())
    }
}
