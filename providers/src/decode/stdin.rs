//! Two-way CLIs: the messages a decoder writes to the CLI's stdin, and the line the run
//! record keeps for each.
//!
//! A two-way run (a [`crate::CommandSpec`] with `stdin_open`) keeps the CLI's stdin
//! open. After each line the engine takes the decoder's [`StdinMessage`]s
//! ([`super::Decoder::take_stdin`]) and, for each in order, puts its `record` line into
//! the run's stdout record at the next line boundary, then writes its `line` (and a
//! `\n`) to the CLI's stdin. The record line is the message wrapped with a direction
//! marker, `{"aicli_stdin":<message>}`, so one file holds both directions: the CLI's
//! own lines as it printed them, aicli's lines marked. A decoder reading a recorded run
//! (`aicli parse`, fixtures) sees the marked lines in their places and folds them as the
//! live decoder folded what it sent.

/// The key of a record line that keeps a message written to the CLI's stdin.
pub const STDIN_RECORD_KEY: &str = "aicli_stdin";

/// The record line's start: `{"aicli_stdin":`.
const PREFIX: &str = "{\"aicli_stdin\":";

/// One message for the CLI's stdin.
#[derive(Clone, PartialEq, Eq)]
pub struct StdinMessage {
    /// The message as written (the engine adds the `\n`).
    pub line: String,
    /// The line the run record keeps in its place: the message with its secrets
    /// redacted, behind the direction marker (see [`StdinMessage::json`]).
    pub record: String,
}

impl std::fmt::Debug for StdinMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The written line may hold a bearer token: show the record form only.
        f.debug_struct("StdinMessage")
            .field("record", &self.record)
            .finish()
    }
}

impl StdinMessage {
    /// A JSON message `line` (one line, no `\n`), recorded as
    /// `{"aicli_stdin":<recorded>}`: `recorded` is `line` with any secret it carries
    /// replaced (it must be JSON too).
    pub fn json(line: String, recorded: &str) -> StdinMessage {
        StdinMessage {
            record: format!("{PREFIX}{recorded}}}"),
            line,
        }
    }

    /// The message the record line keeps (the redacted form).
    pub fn recorded(&self) -> &str {
        stdin_record(&self.record).unwrap_or_default()
    }
}

/// The message a record line keeps, when `text` is one (`{"aicli_stdin":<message>}`).
pub fn stdin_record(text: &str) -> Option<&str> {
    text.trim_end()
        .strip_prefix(PREFIX)?
        .strip_suffix('}')
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_its_record_line() {
        let m = StdinMessage::json(
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"token":"secret"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"token":"[redacted]"}}"#,
        );
        assert_eq!(
            m.record,
            r#"{"aicli_stdin":{"jsonrpc":"2.0","id":1,"method":"x","params":{"token":"[redacted]"}}}"#
        );
        assert_eq!(
            stdin_record(&m.record),
            Some(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"token":"[redacted]"}}"#)
        );
        assert!(!format!("{m:?}").contains("secret"));
        let v: serde_json::Value = serde_json::from_str(&m.record).unwrap_or_default();
        assert_eq!(v[STDIN_RECORD_KEY]["id"], 1);
        assert_eq!(stdin_record(r#"{"jsonrpc":"2.0","id":1}"#), None);
    }
}
