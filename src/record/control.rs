//! The batch's control file (`control.ndjson`): requests that another process (`aicli
//! cancel`, the web view) appends, and the aicli process running the batch reads as
//! they come. Cancelling a batch of another process goes through its record, never
//! through a signal to a pid.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::{Deserialize, Serialize};

use super::{BatchRecord, files};
use crate::util::open_private_append;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum ControlRequest {
    /// Cancel the batch as Ctrl-C would (`task: None`), or one task: a running attempt
    /// is stopped and the task ends `cancelled`; a queued one ends so without running.
    Cancel {
        /// The task, or none for the whole batch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        /// Who asked (`aicli cancel`, `web`) and when, for the record.
        by: String,
        /// When (RFC 3339).
        at: String,
    },
}

/// The longest control line read; a longer one is skipped with a warning.
const MAX_LINE: usize = 64 * 1024;

impl BatchRecord {
    /// Appends `request` to the batch's control file.
    pub fn request(&self, request: &ControlRequest) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One write of one line with O_APPEND: lines of writers at once never interleave.
        open_private_append(&self.dir.join(files::CONTROL))?.write_all(&line)
    }

    /// The requests appended since byte `offset`, and the offset after the last whole
    /// line. Lines that are not requests are reported and skipped.
    pub fn requests_since(&self, offset: u64) -> (Vec<ControlRequest>, u64) {
        let Ok(mut f) = std::fs::File::open(self.dir.join(files::CONTROL)) else {
            return (Vec::new(), offset);
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len <= offset || f.seek(SeekFrom::Start(offset)).is_err() {
            return (Vec::new(), offset);
        }
        let mut buf = Vec::new();
        if f.take((len - offset).min(16 * MAX_LINE as u64))
            .read_to_end(&mut buf)
            .is_err()
        {
            return (Vec::new(), offset);
        }
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return (Vec::new(), offset);
        };
        let mut out = Vec::new();
        for line in buf[..end].split(|&b| b == b'\n') {
            if line.is_empty() || line.len() > MAX_LINE {
                continue;
            }
            match serde_json::from_slice(line) {
                Ok(r) => out.push(r),
                Err(e) => tracing::warn!(
                    file = %self.dir.join(files::CONTROL).display(),
                    error = %e,
                    "a control line is not a request; skipped"
                ),
            }
        }
        (out, offset + end as u64 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_once_each_and_a_partial_line_waits() {
        let d = tempfile::tempdir().unwrap();
        let rec = BatchRecord::at(d.path().to_path_buf());
        assert_eq!(rec.requests_since(0), (Vec::new(), 0));
        let cancel = |task: Option<&str>| ControlRequest::Cancel {
            task: task.map(str::to_owned),
            by: "test".into(),
            at: "now".into(),
        };
        rec.request(&cancel(Some("t1"))).unwrap();
        let (got, off) = rec.requests_since(0);
        assert_eq!(got, vec![cancel(Some("t1"))]);
        let path = d.path().join(files::CONTROL);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"not json\n{\"request\":\"cancel\",\"by\":\"x\"").unwrap();
        assert_eq!(rec.requests_since(off).0, Vec::new(), "the garbage is skipped");
        let (_, off2) = rec.requests_since(off);
        f.write_all(b",\"at\":\"t\"}\n").unwrap();
        let (got, _) = rec.requests_since(off2);
        assert_eq!(
            got,
            vec![ControlRequest::Cancel {
                task: None,
                by: "x".into(),
                at: "t".into()
            }]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
