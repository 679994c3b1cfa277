//! A two-way run's stdin ([`StdinWriter`]) and the stdout record it shares with the
//! stdout reader ([`StdoutRecord`]).
//!
//! A two-way CLI (an ACP agent) is spoken to while it runs: the run's decoder makes
//! messages ([`aicli_providers::StdinMessage`]) that the session hands to the
//! [`StdinWriter`]. The writer puts each message's record line into the run record's
//! stdout file — at a line boundary, so it never lands inside a line the CLI is still
//! printing — and then writes the message to the CLI's stdin from a task of its own, so
//! a CLI that stops reading cannot block the session. Both directions end up in one
//! file, in order: the CLI's lines as it printed them, aicli's behind their direction
//! marker.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

use aicli_providers::StdinMessage;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The run record's stdout file (`events.ndjson`), shared by the stdout reader (every
/// byte as it arrives) and a two-way run's [`StdinWriter`] (a record line per message).
/// Without a file (no record) every write is a no-op.
#[derive(Debug, Clone, Default)]
pub struct StdoutRecord {
    inner: Option<Arc<Mutex<RecordFile>>>,
}

#[derive(Debug)]
struct RecordFile {
    file: File,
    /// The last byte written was not a `\n`: a line of the CLI's is in progress.
    mid_line: bool,
    /// Record lines waiting for that line to end.
    pending: Vec<u8>,
    /// The CLI's stdout has ended (a line in progress never ends by itself now).
    ended: bool,
}

impl From<Option<File>> for StdoutRecord {
    fn from(file: Option<File>) -> StdoutRecord {
        StdoutRecord {
            inner: file.map(|file| {
                Arc::new(Mutex::new(RecordFile {
                    file,
                    mid_line: false,
                    pending: Vec::new(),
                    ended: false,
                }))
            }),
        }
    }
}

impl StdoutRecord {
    /// Bytes of the CLI's stdout, as read. A write error stops the recording (logged
    /// once); the run goes on.
    pub fn write(&self, chunk: &[u8]) {
        self.with(|r| {
            r.file.write_all(chunk)?;
            if let Some(last) = chunk.last() {
                r.mid_line = *last != b'\n';
            }
            if !r.mid_line && !r.pending.is_empty() {
                let pending = std::mem::take(&mut r.pending);
                r.file.write_all(&pending)?;
            }
            Ok(())
        });
    }

    /// A record line of aicli's (a message written to stdin): written now when the
    /// CLI's output is at a line boundary, else right after the line in progress.
    pub fn note(&self, line: &str) {
        self.with(|r| {
            if r.mid_line && r.ended {
                // The CLI's last line was cut and nothing will end it.
                r.file.write_all(b"\n")?;
                r.mid_line = false;
            }
            if r.mid_line {
                r.pending.extend_from_slice(line.as_bytes());
                r.pending.push(b'\n');
                Ok(())
            } else {
                r.file.write_all(line.as_bytes())?;
                r.file.write_all(b"\n")
            }
        });
    }

    /// The CLI's stdout ended. A last line without `\n` stays as it was printed,
    /// unless record lines of aicli's wait for it (or come later): then it is ended
    /// here, so that they are lines of their own.
    pub fn end_of_stdout(&self) {
        self.with(|r| {
            r.ended = true;
            if r.pending.is_empty() {
                return Ok(());
            }
            if r.mid_line {
                r.file.write_all(b"\n")?;
                r.mid_line = false;
            }
            let pending = std::mem::take(&mut r.pending);
            r.file.write_all(&pending)
        });
    }

    /// A handle on the file for an fsync (`None` without a record).
    pub fn file_for_sync(&self) -> Option<File> {
        let inner = self.inner.as_ref()?;
        let r = inner.lock().ok()?;
        r.file.try_clone().ok()
    }

    fn with(&self, f: impl FnOnce(&mut RecordFile) -> std::io::Result<()>) {
        let Some(inner) = &self.inner else { return };
        let Ok(mut r) = inner.lock() else { return };
        if let Err(e) = f(&mut r) {
            tracing::warn!(error = %e, "writing the stdout record failed");
        }
    }
}

/// A two-way run's stdin: messages are recorded, then written in order by a task of
/// their own. Dropping the writer (or [`StdinWriter::close`]) closes the CLI's stdin
/// once what was sent is written.
#[derive(Debug)]
pub struct StdinWriter {
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
    record: StdoutRecord,
}

impl StdinWriter {
    /// A writer onto `input` (the child's stdin, a container's attached stdin) that
    /// records into `record`; `first` is written before any message (a command's
    /// `stdin` text).
    pub fn spawn(
        mut input: impl AsyncWrite + Send + Unpin + 'static,
        record: StdoutRecord,
        first: Option<String>,
    ) -> StdinWriter {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            if let Some(text) = first
                && input.write_all(text.as_bytes()).await.is_err()
            {
                return;
            }
            while let Some(bytes) = rx.recv().await {
                // A CLI that exited stops reading: nothing more to write.
                if input.write_all(&bytes).await.is_err() || input.flush().await.is_err() {
                    tracing::debug!("the CLI's stdin is closed; later messages are dropped");
                    return;
                }
            }
            let _ = input.shutdown().await;
        });
        StdinWriter {
            tx: Some(tx),
            record,
        }
    }

    /// Records `message`, then queues it for the CLI's stdin. After
    /// [`StdinWriter::close`] a message is neither recorded nor sent (the log says so).
    pub fn send(&self, message: &StdinMessage) {
        let Some(tx) = &self.tx else {
            tracing::debug!(record = %message.record, "stdin already closed; message not sent");
            return;
        };
        self.record.note(&message.record);
        let mut bytes = Vec::with_capacity(message.line.len() + 1);
        bytes.extend_from_slice(message.line.as_bytes());
        bytes.push(b'\n');
        let _ = tx.send(bytes);
    }

    /// Closes the CLI's stdin after what was sent (its EOF: many agents then exit).
    pub fn close(&mut self) {
        self.tx = None;
    }

    /// Whether [`StdinWriter::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.tx.is_none()
    }
}

#[cfg(test)]
mod tests;
