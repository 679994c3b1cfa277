//! The run record's log of MCP tool calls: `tasks/<task>/mcp-calls.ndjson`, one
//! [`McpCallRecord`] per `tools/call` a task's agent made (built-in, command-backed or
//! forwarded to an upstream), appended as each call ends. `aicli runs show` lists them.

use std::io::Write;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::files::MCP_CALLS as MCP_CALLS_FILE;

/// Characters of a call's result kept in the record.
pub const RECORDED_RESULT_CHARS: usize = 500;

/// One tool call, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpCallRecord {
    /// The task's attempt (1-based) that made it.
    pub attempt: u32,
    /// When it arrived (RFC 3339).
    pub at: String,
    /// The tool's name as called.
    pub tool: String,
    /// How long it took, milliseconds.
    pub duration_ms: u64,
    /// Whether it succeeded (false for tool errors and refused calls alike).
    pub ok: bool,
    /// A command-backed tool's exit code (`null`: not a command, killed, or nothing ran).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The start of its result (or of the error), at most 500 characters.
    pub result: String,
    /// Whether `result` was cut.
    #[serde(default)]
    pub truncated: bool,
}

impl McpCallRecord {
    /// Sets `result` from `text`, cut to [`RECORDED_RESULT_CHARS`].
    pub fn with_result(mut self, text: &str) -> McpCallRecord {
        match text.char_indices().nth(RECORDED_RESULT_CHARS) {
            Some((i, _)) => {
                self.result = text[..i].to_owned();
                self.truncated = true;
            }
            None => {
                self.result = text.to_owned();
                self.truncated = false;
            }
        }
        self
    }
}

/// Appends `rec` to the log in `task_dir` (0600).
pub(crate) fn append(task_dir: &Path, rec: &McpCallRecord) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = task_dir.join(MCP_CALLS_FILE);
    let Ok(mut line) = serde_json::to_vec(rec) else {
        return;
    };
    line.push(b'\n');
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(crate::util::PRIVATE_FILE_MODE)
        .open(&path)
        .and_then(|mut f| f.write_all(&line));
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), error = %e, "cannot record an MCP tool call");
    }
}

/// The calls recorded for task `task` of `batch`, oldest first (unreadable lines are
/// skipped; the file is read without following a symlink).
pub fn read_calls(batch: &crate::record::BatchRecord, task: &str) -> Vec<McpCallRecord> {
    use std::io::Read;
    let mut text = String::new();
    let read = batch
        .open_task_file(task, MCP_CALLS_FILE)
        .and_then(|mut f| f.read_to_string(&mut text));
    if read.is_err() {
        return Vec::new();
    }
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_results_are_cut() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("b/tasks/t")).unwrap();
        std::fs::write(root.path().join("b/batch.json"), "{}").unwrap();
        let batch = crate::record::RunStore::new(root.path()).open_batch("b").unwrap();
        let d = &batch.task_dir("t");
        let r = McpCallRecord {
            attempt: 1,
            at: "2026-12-01T00:00:00Z".into(),
            tool: "run_tests".into(),
            duration_ms: 12,
            ok: true,
            exit_code: Some(0),
            result: String::new(),
            truncated: false,
        };
        append(d, &r.clone().with_result("ok"));
        append(d, &r.clone().with_result(&"é".repeat(600)));
        let got = read_calls(&batch, "t");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].result, "ok");
        assert!(!got[0].truncated);
        assert_eq!(got[1].result.chars().count(), RECORDED_RESULT_CHARS);
        assert!(got[1].truncated);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join(MCP_CALLS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
