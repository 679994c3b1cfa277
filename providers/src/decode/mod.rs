//! The streaming decoder contract: one [`Decoder`] per run turns the CLI's lines into
//! events as they arrive and folds what the result needs; [`Decoder::finish`] gives the
//! [`SessionResult`]. [`Tally`] is the part of that fold every vendor shares.

mod simple;
mod stdin;
mod tally;

use std::sync::Arc;
use std::time::Duration;

pub use simple::SimpleDecoder;
pub use stdin::{STDIN_RECORD_KEY, StdinMessage, stdin_record};
pub use tally::{Tally, settle_usage_limit};

use crate::event::{AgentEvent, EventKind};
use crate::provider::LaunchContext;
use crate::result::SessionResult;
use crate::usage::CanonicalUsage;

/// How much of an over-long or non-UTF-8 line is kept in its protocol event.
pub const PROTOCOL_RAW_PREFIX: usize = 4096;

/// One line of a CLI's stdout, as the reader framed it.
#[derive(Debug, Clone, Copy)]
pub enum Line<'a> {
    /// A whole line without its `\n` (or the last bytes before EOF).
    Bytes(&'a [u8]),
    /// A line longer than the reader's cap: its size and the first bytes kept.
    Overlong {
        /// The line's length in bytes.
        len: u64,
        /// Its first bytes.
        prefix: &'a [u8],
        /// The cap it exceeded.
        cap: usize,
    },
}

impl<'a> From<&'a [u8]> for Line<'a> {
    fn from(b: &'a [u8]) -> Line<'a> {
        Line::Bytes(b)
    }
}

impl<'a> From<&'a str> for Line<'a> {
    fn from(s: &'a str) -> Line<'a> {
        Line::Bytes(s.as_bytes())
    }
}

impl<'a> Line<'a> {
    /// The line as text: `Ok(None)` for a blank line (a trailing `\r` is ignored),
    /// `Err` with a protocol event (which keeps the first 4 KiB) for a line over the cap
    /// or not UTF-8.
    pub fn text(self) -> Result<Option<&'a str>, Box<AgentEvent>> {
        match self {
            Line::Overlong { len, prefix, cap } => {
                let kept = &prefix[..PROTOCOL_RAW_PREFIX.min(prefix.len())];
                Err(Box::new(AgentEvent::protocol_with(
                    format!(
                        "line of {len} bytes exceeds the cap of {cap} bytes; kept its first {} bytes",
                        kept.len()
                    ),
                    len,
                    Arc::from(String::from_utf8_lossy(kept).as_ref()),
                )))
            }
            Line::Bytes(b) => {
                let b = b.strip_suffix(b"\r").unwrap_or(b);
                if b.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                if let Ok(s) = simdutf8::basic::from_utf8(b) {
                    return Ok(Some(s));
                }
                // Not UTF-8: std's check says where.
                match std::str::from_utf8(b) {
                    Ok(s) => Ok(Some(s)),
                    Err(e) => {
                        let kept = &b[..PROTOCOL_RAW_PREFIX.min(b.len())];
                        Err(Box::new(AgentEvent::protocol_with(
                            format!(
                                "line is not valid UTF-8 (invalid byte at offset {})",
                                e.valid_up_to()
                            ),
                            b.len() as u64,
                            Arc::from(String::from_utf8_lossy(kept).as_ref()),
                        )))
                    }
                }
            }
        }
    }
}

/// How the CLI process ended, as far as the caller knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal,
    /// Not known (a transcript parsed without its exit code).
    Unknown,
}

impl ExitStatus {
    /// From a process wait: `None` means a signal ended it.
    pub fn of_wait(code: Option<i32>) -> ExitStatus {
        code.map_or(ExitStatus::Signal, ExitStatus::Code)
    }

    /// The exit code, when there was one.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(c),
            ExitStatus::Signal | ExitStatus::Unknown => None,
        }
    }

    /// `" (exit code 1)"`, `" (killed by a signal)"`, or nothing when unknown.
    pub fn in_parens(self) -> String {
        match self {
            ExitStatus::Code(c) => format!(" (exit code {c})"),
            ExitStatus::Signal => " (killed by a signal)".to_owned(),
            ExitStatus::Unknown => String::new(),
        }
    }

    /// `", exit code 1"`, `", killed by a signal"`, or nothing.
    fn after_comma(self) -> String {
        match self {
            ExitStatus::Code(c) => format!(", exit code {c}"),
            ExitStatus::Signal => ", killed by a signal".to_owned(),
            ExitStatus::Unknown => String::new(),
        }
    }
}

/// Decodes one run of a CLI: made by [`crate::AiCliProvider::decoder`], fed every line
/// of the run's stdout in order, finished once.
///
/// A decoder keeps only what the result needs (ids, the response text, usage
/// accumulators, error facts), never the events and at most a line or two whole (Claude
/// its first `system/init` and last `result` line, Gemini its last `result` line, each
/// within the line cap, read again for their verbatim `provider_data` fields): memory
/// does not grow with the stream, apart from the response text.
pub trait Decoder: Send {
    /// Appends the events of one line to `out` (a buffer the caller reuses from line to
    /// line: a stream of many short lines then allocates no vector per line). Never
    /// fails: a malformed line is a [`EventKind::Protocol`] event, a line of a type the
    /// vendor does not know [`EventKind::Unknown`]. Every event keeps the line in `raw`.
    fn decode(&mut self, line: Line<'_>, out: &mut Vec<AgentEvent>);

    /// The events of one line, in a new vector ([`Decoder::decode`] without a buffer): a
    /// convenience for tests and one-off callers; the engine and `aicli parse` reuse a
    /// buffer.
    fn line(&mut self, line: Line<'_>) -> Vec<AgentEvent> {
        let mut out = Vec::new();
        self.decode(line, &mut out);
        out
    }

    /// The run's usage so far, per run, in the canonical meaning (the sum of the
    /// [`EventKind::Usage`] events given so far).
    fn usage(&self) -> CanonicalUsage;

    /// Whether the CLI has said its last word: the engine then gives it a short grace
    /// to exit before it shuts the run down. The default never says so (the engine
    /// waits for the CLI to exit).
    fn finished(&self) -> bool {
        false
    }

    /// The run's result, from what the lines said, the CLI's stderr and how it ended.
    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult;

    // Two-way CLIs (a command with `stdin_open`, e.g. ACP agents) also use the methods
    // below; one-way CLIs keep their defaults. See the `stdin` module for the record.

    /// Starts the conversation of a live two-way run: called once, after the CLI
    /// started and before its first line is read. `launch` says what to say (the task,
    /// the working directory, aicli's MCP server). The decoder may then make messages
    /// for the CLI's stdin ([`Decoder::take_stdin`]); the events are those of the
    /// messages it made. Replays never call it: a replaying decoder folds the record
    /// lines of what the live one sent. Default: nothing.
    fn connect(&mut self, launch: &LaunchContext<'_>) -> Vec<AgentEvent> {
        let _ = launch;
        Vec::new()
    }

    /// The messages for the CLI's stdin made since the last call, in order; the
    /// engine records then writes each. Default: none.
    fn take_stdin(&mut self) -> Vec<StdinMessage> {
        Vec::new()
    }

    /// The run is being stopped (cancel): the decoder may make messages that ask the
    /// CLI to stop (ACP `session/cancel`), taken with [`Decoder::take_stdin`]. `true`
    /// when it did and expects the CLI to end the turn itself: the engine then waits for
    /// [`Decoder::finished`] (up to its kill grace) before it kills the process group.
    /// Default: `false` (kill at once).
    fn stop(&mut self) -> bool {
        false
    }

    /// An answer the decoder is waiting for that has a deadline: an id for this wait
    /// and how long it may take from now. The engine arms a timer when the id changes
    /// and calls [`Decoder::overdue`] when it fires. Default: none.
    fn awaiting(&self) -> Option<(u64, Duration)> {
        None
    }

    /// The wait `id` of [`Decoder::awaiting`] passed its deadline: the events that say
    /// so. A decoder usually gives up the run then ([`Decoder::finished`]).
    fn overdue(&mut self, id: u64) -> Vec<AgentEvent> {
        let _ = id;
        Vec::new()
    }
}

/// The text of a line to decode; `None` for a blank line (no events) and for a line
/// over the cap or not UTF-8 (its protocol event folded into `tally` and pushed).
pub fn text_of<'a>(
    line: Line<'a>,
    tally: &mut Tally,
    out: &mut Vec<AgentEvent>,
) -> Option<&'a str> {
    match line.text() {
        Ok(t) => t,
        Err(ev) => {
            tally.see(&ev);
            out.push(*ev);
            None
        }
    }
}

/// The events of the line being decoded, as the decoder makes them: each kind pushed
/// becomes an event in the caller's buffer, with the line as its `raw` (one copy of the
/// line, shared by its events). [`Events::fold`] then folds them into the tally.
#[derive(Debug)]
pub struct Events<'o> {
    raw: Arc<str>,
    out: &'o mut Vec<AgentEvent>,
    /// Where this line's events start in `out`.
    first: usize,
}

impl<'o> Events<'o> {
    /// The events of the line `raw`, appended to `out`.
    pub fn new(raw: &str, out: &'o mut Vec<AgentEvent>) -> Events<'o> {
        let first = out.len();
        Events {
            raw: Arc::from(raw),
            out,
            first,
        }
    }

    /// Adds an event of the line.
    pub fn push(&mut self, kind: EventKind) {
        self.out.push(AgentEvent::new(kind, self.raw.clone()));
    }

    /// Adds a protocol event: the line is not the vendor's shape.
    pub fn protocol(&mut self, message: String) {
        self.out
            .push(AgentEvent::protocol(message, self.raw.clone()));
    }

    /// How many events the line has so far.
    pub fn len(&self) -> usize {
        self.out.len() - self.first
    }

    /// Whether the line has no event so far.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The line's events so far.
    pub fn as_mut_slice(&mut self) -> &mut [AgentEvent] {
        &mut self.out[self.first..]
    }

    /// Folds the line's events into `tally`.
    pub fn fold(self, tally: &mut Tally) {
        for ev in &self.out[self.first..] {
            tally.see(ev);
        }
    }
}

impl Extend<EventKind> for Events<'_> {
    fn extend<I: IntoIterator<Item = EventKind>>(&mut self, kinds: I) {
        for k in kinds {
            self.push(k);
        }
    }
}

/// Events aicli's side of a two-way run made (a message it sent, a timeout), each with
/// `raw` (the record line, or empty) as its `raw`, folded into `tally`.
pub fn events_of(tally: &mut Tally, raw: &str, kinds: Vec<EventKind>) -> Vec<AgentEvent> {
    let mut out = Vec::with_capacity(kinds.len());
    let mut events = Events::new(raw, &mut out);
    events.extend(kinds);
    events.fold(tally);
    out
}

/// What was wrong with a line that a vendor's wire enum could not read.
pub fn malformed(vendor: &str, text: &str, e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("malformed JSON: {e}"),
        Category::Io | Category::Data => match text.trim_start().as_bytes().first() {
            Some(b'{') => format!("a {vendor} line that does not have the expected shape: {e}"),
            Some(b'[') => "expected a JSON object, got an array".to_owned(),
            Some(b'"') => "expected a JSON object, got a string".to_owned(),
            Some(b't' | b'f') => "expected a JSON object, got a boolean".to_owned(),
            Some(b'n') => "expected a JSON object, got null".to_owned(),
            _ => "expected a JSON object, got a number".to_owned(),
        },
    }
}
