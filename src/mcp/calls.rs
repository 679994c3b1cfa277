//! The call log: one [`CallRecord`] per `tools/call`, newest last, bounded.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// Records kept; older ones are dropped first.
pub const CALL_LOG_CAPACITY: usize = 10_000;

/// One tool call as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRecord {
    /// The caller's batch.
    pub batch_id: String,
    /// The caller's task.
    pub task_id: String,
    /// The tool's name as called (possibly one that does not exist).
    pub tool: String,
    /// Whether the call succeeded (false for tool errors and protocol errors alike).
    pub ok: bool,
    /// A command-backed tool's exit code (`None` for other tools, and when it was killed
    /// or nothing ran).
    pub exit_code: Option<i32>,
    /// When the call arrived.
    pub at: SystemTime,
    /// How long the tool took.
    pub duration: Duration,
}

/// The bounded log behind [`McpServer::calls`](super::McpServer::calls).
#[derive(Debug, Default)]
pub(crate) struct CallLog {
    records: Mutex<VecDeque<CallRecord>>,
}

impl CallLog {
    /// Appends a record, dropping the oldest past capacity.
    pub(crate) fn push(&self, rec: CallRecord) {
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if r.len() >= CALL_LOG_CAPACITY {
            r.pop_front();
        }
        r.push_back(rec);
    }

    /// A copy of the records, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<CallRecord> {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.iter().cloned().collect()
    }
}
