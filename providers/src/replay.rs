//! From bytes to events: splitting a stream into lines, checking UTF-8 and the line-length
//! cap, and replaying a recorded transcript through a provider to its result.
//!
//! The engine's live reader and `aicli parse` both go through [`parse_line_bytes`], so
//! a recorded stream replays to exactly the events the live run saw.

use std::sync::Arc;

use crate::common::PROTOCOL_RAW_PREFIX;
use crate::event::AgentEvent;
use crate::provider::AiCliProvider;
use crate::result::{ParseContext, SessionResult};

/// The default cap on one line, bytes (matches the engine's default).
pub const DEFAULT_LINE_CAP: usize = 8 * 1024 * 1024;

/// Events from one line of bytes (without its `\n`; a trailing `\r` is ignored).
/// Blank lines give no events; invalid UTF-8 and lines over `line_cap` give a protocol
/// event that keeps the first 4 KiB.
pub fn parse_line_bytes(
    provider: &dyn AiCliProvider,
    line: &[u8],
    line_cap: usize,
) -> Vec<AgentEvent> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Vec::new();
    }
    if line.len() > line_cap {
        return vec![over_long_line(
            line.len() as u64,
            &line[..PROTOCOL_RAW_PREFIX.min(line.len())],
            line_cap,
        )];
    }
    match std::str::from_utf8(line) {
        Ok(s) => provider.parse_event(s),
        Err(e) => {
            let prefix = String::from_utf8_lossy(&line[..PROTOCOL_RAW_PREFIX.min(line.len())]);
            vec![AgentEvent {
                kind: crate::event::EventKind::Protocol {
                    message: format!(
                        "line is not valid UTF-8 (invalid byte at offset {})",
                        e.valid_up_to()
                    ),
                    line_bytes: line.len() as u64,
                },
                raw: Arc::from(prefix.as_ref()),
            }]
        }
    }
}

/// The protocol event for a line of `len` bytes over `cap`; `prefix` is what was kept.
pub fn over_long_line(len: u64, prefix: &[u8], cap: usize) -> AgentEvent {
    AgentEvent {
        kind: crate::event::EventKind::Protocol {
            message: format!(
                "line of {len} bytes exceeds the cap of {cap} bytes; kept its first {} bytes",
                prefix.len()
            ),
            line_bytes: len,
        },
        raw: Arc::from(String::from_utf8_lossy(prefix).as_ref()),
    }
}

/// Events from a whole stream. A last line without `\n` (a stream cut mid-line) is
/// parsed too: if it is incomplete JSON it becomes a protocol event.
pub fn parse_bytes(provider: &dyn AiCliProvider, bytes: &[u8], line_cap: usize) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', bytes) {
        events.extend(parse_line_bytes(provider, &bytes[start..end], line_cap));
        start = end + 1;
    }
    // The last line: empty after a final newline, else a line cut off mid-way.
    events.extend(parse_line_bytes(provider, &bytes[start..], line_cap));
    events
}

/// Replays a recorded transcript (stdout bytes, stderr, exit code) through `provider`.
pub fn replay(
    provider: &dyn AiCliProvider,
    stdout: &[u8],
    stderr: &str,
    exit_code: Option<i32>,
    ctx: &ParseContext,
) -> (Vec<AgentEvent>, SessionResult) {
    let events = parse_bytes(provider, stdout, DEFAULT_LINE_CAP);
    let result = provider.event_to_session_result(&events, stderr, exit_code, ctx);
    (events, result)
}
