//! Reading a child's output: stdout as capped lines on a channel bounded in bytes
//! ([`line_channel`], [`read_lines`]), stderr into a bounded tail ([`StderrTail`],
//! [`drain_stderr`]), every byte teed into the run record as it is read.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::mpsc;

use super::stdin::StdoutRecord;

/// One line of a child's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutLine {
    /// A complete line (without `\n`), or the last bytes before EOF.
    Line(Vec<u8>),
    /// A line longer than the cap: its size and first bytes (the rest was not kept in
    /// memory; the tee file has all of it).
    Overlong {
        /// The line's length in bytes.
        len: u64,
        /// Its first bytes (up to 4 KiB).
        prefix: Vec<u8>,
    },
}

/// How much of an over-long line is kept.
const OVERLONG_PREFIX: usize = 4096;

/// Bytes of stdout lines read but not yet taken by the session, per run (one line is
/// always let through, however long): when the session falls behind, the reader waits
/// (and the CLI with it, on a full pipe) instead of queueing the stream in memory.
pub const LINE_QUEUE_BYTES: usize = 256 * 1024;

/// A channel of stdout lines bounded in bytes ([`LINE_QUEUE_BYTES`] by default).
pub fn line_channel(max_bytes: usize) -> (LineSender, LineReceiver) {
    let max_bytes = max_bytes.clamp(1, u32::MAX as usize);
    let room = Arc::new(tokio::sync::Semaphore::new(max_bytes));
    // Every line holds at least this many bytes of room: the count of lines queued is
    // bounded too.
    let (tx, rx) = mpsc::channel(max_bytes / MIN_LINE_COST + 1);
    (
        LineSender {
            tx,
            room,
            max_bytes,
        },
        LineReceiver { rx, held: None },
    )
}

const MIN_LINE_COST: usize = 64;

type Queued = (StdoutLine, tokio::sync::OwnedSemaphorePermit);

/// The reader's side of a [`line_channel`].
#[derive(Debug)]
pub struct LineSender {
    tx: mpsc::Sender<Queued>,
    room: Arc<tokio::sync::Semaphore>,
    max_bytes: usize,
}

impl LineSender {
    /// Queues `line`, waiting for room; `Err` when the receiver is gone.
    pub async fn send(&self, line: StdoutLine) -> Result<(), StdoutLine> {
        let len = match &line {
            StdoutLine::Line(b) => b.len(),
            StdoutLine::Overlong { prefix, .. } => prefix.len(),
        };
        let cost = len.clamp(MIN_LINE_COST, self.max_bytes) as u32;
        let Ok(permit) = self.room.clone().acquire_many_owned(cost).await else {
            return Err(line);
        };
        self.tx.send((line, permit)).await.map_err(|e| e.0.0)
    }
}

/// The session's side of a [`line_channel`]: a line's room is given back when the
/// next one is taken (the session is done with it by then).
#[derive(Debug)]
pub struct LineReceiver {
    rx: mpsc::Receiver<Queued>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl LineReceiver {
    /// The next line; `None` at EOF (when the reader is done).
    pub async fn recv(&mut self) -> Option<StdoutLine> {
        self.held = None;
        let (line, permit) = self.rx.recv().await?;
        self.held = Some(permit);
        Some(line)
    }

    /// A receiver that is closed already (what a handle gives once its lines were
    /// taken).
    pub fn closed() -> LineReceiver {
        let (_, rx) = line_channel(1);
        rx
    }
}

/// The last bytes a child wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail {
    inner: Arc<Mutex<TailBuf>>,
}

#[derive(Debug, Default)]
struct TailBuf {
    buf: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl StderrTail {
    /// A tail keeping the last `cap` bytes.
    pub(crate) fn new(cap: usize) -> StderrTail {
        StderrTail {
            inner: Arc::new(Mutex::new(TailBuf {
                buf: Vec::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let Ok(mut t) = self.inner.lock() else { return };
        t.buf.extend_from_slice(bytes);
        if t.buf.len() > t.cap {
            let excess = t.buf.len() - t.cap;
            t.buf.drain(..excess);
            t.dropped += excess as u64;
        }
    }

    /// The kept tail as text (lossy UTF-8), prefixed with a note when bytes were dropped.
    pub fn text(&self) -> String {
        let Ok(t) = self.inner.lock() else {
            return String::new();
        };
        let body = String::from_utf8_lossy(&t.buf);
        if t.dropped > 0 {
            format!(
                "[aicli: {} earlier bytes of stderr not kept]\n{body}",
                t.dropped
            )
        } else {
            body.into_owned()
        }
    }
}

/// Reads `stdout` into capped lines on `tx`, every byte going to `tee` (the run
/// record) as it is read.
pub(crate) async fn read_lines<R: AsyncRead + Unpin>(
    stdout: R,
    cap: usize,
    tee: impl Into<StdoutRecord>,
    tx: LineSender,
) {
    let tee: StdoutRecord = tee.into();
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line: Vec<u8> = Vec::new();
    // While skipping an over-long line: its length so far.
    let mut overlong: Option<u64> = None;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "reading stdout failed");
                break;
            }
        };
        if chunk.is_empty() {
            break;
        }
        tee.write(chunk);
        let n = chunk.len();
        let mut start = 0;
        let mut out = Vec::new();
        while start < n {
            match memchr(b'\n', &chunk[start..]) {
                Some(i) => {
                    let piece = &chunk[start..start + i];
                    match overlong.take() {
                        Some(len) => out.push(StdoutLine::Overlong {
                            len: len + piece.len() as u64,
                            prefix: std::mem::take(&mut line),
                        }),
                        None => {
                            if line.len() + piece.len() > cap {
                                let total = (line.len() + piece.len()) as u64;
                                extend_prefix(&mut line, piece);
                                out.push(StdoutLine::Overlong {
                                    len: total,
                                    prefix: std::mem::take(&mut line),
                                });
                            } else {
                                line.extend_from_slice(piece);
                                out.push(StdoutLine::Line(std::mem::take(&mut line)));
                            }
                        }
                    }
                    start += i + 1;
                }
                None => {
                    let piece = &chunk[start..];
                    match overlong.as_mut() {
                        Some(len) => *len += piece.len() as u64,
                        None => {
                            if line.len() + piece.len() > cap {
                                let total = (line.len() + piece.len()) as u64;
                                extend_prefix(&mut line, piece);
                                overlong = Some(total);
                            } else {
                                line.extend_from_slice(piece);
                            }
                        }
                    }
                    start = n;
                }
            }
        }
        reader.consume(n);
        for l in out {
            // When nobody listens any more, keep draining so the child never blocks on
            // a full pipe, and keep recording.
            let _ = tx.send(l).await;
        }
    }
    if let Some(len) = overlong {
        let _ = tx
            .send(StdoutLine::Overlong {
                len,
                prefix: std::mem::take(&mut line),
            })
            .await;
    } else if !line.is_empty() {
        let _ = tx.send(StdoutLine::Line(line)).await;
    }
    tee.end_of_stdout();
    sync_off_thread(tee.file_for_sync()).await;
}

/// fsyncs a record file on the blocking pool: an fsync takes milliseconds, and on an
/// async worker it would stall every other run's I/O.
pub async fn sync_off_thread(file: Option<File>) {
    if let Some(f) = file {
        let _ = tokio::task::spawn_blocking(move || f.sync_data()).await;
    }
}

fn extend_prefix(prefix: &mut Vec<u8>, piece: &[u8]) {
    if prefix.len() > OVERLONG_PREFIX {
        prefix.truncate(OVERLONG_PREFIX);
    }
    let room = OVERLONG_PREFIX.saturating_sub(prefix.len());
    prefix.extend_from_slice(&piece[..room.min(piece.len())]);
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

/// Drains `err` into `tail`, teeing up to `file_cap` bytes into the file `tee`, which
/// is opened (made 0600) on the first byte.
pub(crate) async fn drain_stderr<R: AsyncRead + Unpin>(
    mut err: R,
    tail: StderrTail,
    mut tee: Option<std::path::PathBuf>,
    file_cap: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut written: u64 = 0;
    let mut truncated = false;
    let mut file: Option<File> = None;
    loop {
        let n = match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tail.push(&buf[..n]);
        // Opened once, on the first byte (`take`: a failure is said once).
        if let Some(path) = tee.take() {
            file = crate::util::open_private_append(&path)
                .inspect_err(|e| {
                    tracing::warn!(path = %path.display(), error = %e, "cannot record stderr");
                })
                .ok();
        }
        if let Some(f) = file.as_mut() {
            if written < file_cap {
                let take = ((file_cap - written) as usize).min(n);
                let _ = f.write_all(&buf[..take]);
                written += take as u64;
            } else if !truncated {
                truncated = true;
                let _ = writeln!(f, "\n[aicli: stderr.log truncated after {file_cap} bytes]");
            }
        }
    }
    // Nothing appended, nothing to make durable (earlier attempts synced theirs).
    if written > 0 {
        sync_off_thread(file).await;
    }
}

#[cfg(test)]
mod tests;
