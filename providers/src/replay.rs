//! Recorded transcripts through a provider's decoder: a capped line reader over any
//! `BufRead` ([`LineReader`]), the whole-stream loop ([`decode_reader`]) and shorthands
//! for bytes in memory ([`replay`], [`replay_events`]).
//!
//! The engine's live reader caps lines the same way (an over-long line is a
//! [`Line::Overlong`] that keeps its first 4 KiB), so a recorded stream replays to
//! exactly the events the live run saw.

use std::io::{self, BufRead};

use crate::decode::{ExitStatus, Line, PROTOCOL_RAW_PREFIX};
use crate::event::AgentEvent;
use crate::provider::AiCliProvider;
use crate::result::{ParseContext, SessionResult};

/// The default cap on one line, bytes (matches the engine's default).
pub const DEFAULT_LINE_CAP: usize = 8 * 1024 * 1024;

/// Splits a stream into lines, holding at most `cap` bytes of one line: a longer line
/// is given as [`Line::Overlong`] with its first bytes, the rest read and dropped. A last
/// line without `\n` (a stream cut mid-line) is given too.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    cap: usize,
    /// A line that spans reads of `inner`.
    buf: Vec<u8>,
    /// Bytes of `inner`'s buffer handed out by the last call, consumed on the next.
    pending: usize,
}

impl<R: BufRead> LineReader<R> {
    /// A reader of `inner` with lines capped at `cap` bytes.
    pub fn new(inner: R, cap: usize) -> LineReader<R> {
        LineReader {
            inner,
            cap,
            buf: Vec::new(),
            pending: 0,
        }
    }

    /// The next line, or `None` at the end of the stream.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        if self.pending > 0 {
            self.inner.consume(self.pending);
            self.pending = 0;
        }
        self.buf.clear();
        let mut len: u64 = 0;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                // EOF: the last line, if any bytes of it came.
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(self.framed(len)));
            }
            match memchr::memchr(b'\n', available) {
                Some(i) => {
                    if len == 0 && i <= self.cap {
                        // The whole line is in the buffer: hand it out without a copy.
                        self.pending = i + 1;
                        let b = self.inner.fill_buf()?;
                        return Ok(Some(Line::Bytes(&b[..i])));
                    }
                    let chunk = available[..i].to_vec();
                    self.keep(&chunk, len);
                    len += i as u64;
                    self.inner.consume(i + 1);
                    return Ok(Some(self.framed(len)));
                }
                None => {
                    let n = available.len();
                    let chunk = available.to_vec();
                    self.keep(&chunk, len);
                    len += n as u64;
                    self.inner.consume(n);
                }
            }
        }
    }

    /// Keeps `chunk` (bytes `len..` of the line) while the line is within the cap, and
    /// only the first bytes once it is over.
    fn keep(&mut self, chunk: &[u8], len: u64) {
        let total = len as usize + chunk.len();
        if total <= self.cap {
            self.buf.extend_from_slice(chunk);
        } else if self.buf.len() < PROTOCOL_RAW_PREFIX {
            let room = PROTOCOL_RAW_PREFIX - self.buf.len();
            self.buf.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        if total > self.cap && self.buf.len() > PROTOCOL_RAW_PREFIX {
            self.buf.truncate(PROTOCOL_RAW_PREFIX);
        }
    }

    fn framed(&self, len: u64) -> Line<'_> {
        if len as usize > self.cap {
            Line::Overlong {
                len,
                prefix: &self.buf,
                cap: self.cap,
            }
        } else {
            Line::Bytes(&self.buf)
        }
    }
}

/// Every line of `reader` through a new decoder of `provider`, each event to
/// `on_event` as its line passes, then the result.
pub fn decode_reader<R: BufRead>(
    provider: &dyn AiCliProvider,
    reader: R,
    line_cap: usize,
    ctx: &ParseContext,
    stderr: &str,
    exit: ExitStatus,
    mut on_event: impl FnMut(AgentEvent),
) -> io::Result<SessionResult> {
    let mut decoder = provider.decoder(ctx);
    let mut lines = LineReader::new(reader, line_cap);
    while let Some(line) = lines.next_line()? {
        for ev in decoder.line(line) {
            on_event(ev);
        }
    }
    Ok(decoder.finish(stderr, exit))
}

/// A recorded transcript in memory (stdout bytes, stderr, how it ended) to its result.
pub fn replay(
    provider: &dyn AiCliProvider,
    stdout: &[u8],
    stderr: &str,
    exit: ExitStatus,
    ctx: &ParseContext,
) -> SessionResult {
    let r = decode_reader(
        provider,
        stdout,
        DEFAULT_LINE_CAP,
        ctx,
        stderr,
        exit,
        |_| {},
    );
    r.unwrap_or_else(|e| {
        SessionResult::not_started(provider.name(), crate::ErrorKind::Unknown, e.to_string())
    })
}

/// As [`replay`], also returning the events (for tests and small inputs).
pub fn replay_events(
    provider: &dyn AiCliProvider,
    stdout: &[u8],
    stderr: &str,
    exit: ExitStatus,
    ctx: &ParseContext,
) -> (Vec<AgentEvent>, SessionResult) {
    let mut events = Vec::new();
    let r = decode_reader(provider, stdout, DEFAULT_LINE_CAP, ctx, stderr, exit, |e| {
        events.push(e)
    });
    let r = r.unwrap_or_else(|e| {
        SessionResult::not_started(provider.name(), crate::ErrorKind::Unknown, e.to_string())
    });
    (events, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<String> {
        let mut r = LineReader::new(io::BufReader::with_capacity(7, input), cap);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap_or_else(|e| panic!("{e}")) {
            out.push(match l {
                Line::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                Line::Overlong { len, prefix, .. } => {
                    format!("overlong {len} {}", String::from_utf8_lossy(prefix))
                }
            });
        }
        out
    }

    #[test]
    fn lines_are_split_capped_and_the_last_one_kept() {
        assert_eq!(lines(b"a\nbb\n\nccc", 100), ["a", "bb", "", "ccc"]);
        assert_eq!(
            lines(b"short\n0123456789abcdef\nend\n", 10),
            [
                "short".to_owned(),
                "overlong 16 0123456789abcdef".to_owned(),
                "end".to_owned()
            ]
        );
        assert!(lines(b"", 10).is_empty());
        let big = vec![b'x'; 100_000];
        let got = lines(&big, 1000);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("overlong 100000 xxx"));
        assert_eq!(got[0].len(), "overlong 100000 ".len() + PROTOCOL_RAW_PREFIX);
    }
}
