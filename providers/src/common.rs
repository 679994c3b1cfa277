//! Helpers every adapter uses the same way: reading a line as a JSON object, the facts
//! all results share (session id, tool calls, protocol errors), and the classification
//! of a run that ended without a final event.

use serde_json::{Map, Value};

use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{SessionResult, SessionStatus};

/// How much of an over-long or non-UTF-8 line is kept in its protocol event.
pub const PROTOCOL_RAW_PREFIX: usize = 4096;

/// Parses `line` as a JSON object; otherwise says what was wrong (for a protocol event:
/// `AgentEvent::protocol(message, raw)`).
pub fn json_object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!(
            "expected a JSON object, got {}",
            json_type_name(&other)
        )),
        Err(e) => Err(format!("malformed JSON: {e}")),
    }
}

/// `null`, `boolean`, `number`, ...
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `m[key]` as a string.
pub fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

/// `m[key]` as an owned string.
pub fn string_field(m: &Map<String, Value>, key: &str) -> Option<String> {
    str_field(m, key).map(str::to_owned)
}

/// `v[key]` as u64 (0 when absent or not a number).
pub fn u64_at(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Tool output as text: strings as they are, `[{type: text, text}]` blocks joined,
/// anything else as compact JSON.
pub fn content_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let texts: Vec<&str> = items
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.len() == items.len() {
                texts.join("\n")
            } else {
                v.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// The facts every adapter reads from the events the same way.
#[derive(Debug, Default, Clone)]
pub struct Basics {
    /// The first session id seen.
    pub session_id: Option<String>,
    /// The model from the session start.
    pub model: Option<String>,
    /// The CLI version from the session start.
    pub cli_version: Option<String>,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Protocol events.
    pub protocol_errors: u32,
    /// Events the adapter recognised (everything but protocol and unknown).
    pub recognized: usize,
    /// The last fatal error event.
    pub fatal_error: Option<(ErrorKind, String)>,
    /// The last error or retry event of any kind (for a run that never finished).
    pub last_error: Option<(ErrorKind, String)>,
    /// Whether a final event was seen.
    pub has_final: bool,
    /// The last question asked through aicli's MCP server.
    pub question: Option<(String, Vec<String>)>,
}

/// Reads the [`Basics`] of a run.
pub fn basics(events: &[AgentEvent]) -> Basics {
    let mut b = Basics::default();
    for ev in events {
        match &ev.kind {
            EventKind::SessionStarted {
                session_id,
                model,
                cli_version,
                ..
            } => {
                if b.session_id.is_none() && !session_id.is_empty() {
                    b.session_id = Some(session_id.clone());
                }
                if b.model.is_none() {
                    b.model = model.clone();
                }
                if b.cli_version.is_none() {
                    b.cli_version = cli_version.clone();
                }
                b.recognized += 1;
            }
            EventKind::ToolCall { .. } => {
                b.tool_calls += 1;
                b.recognized += 1;
            }
            EventKind::Error {
                error_kind,
                message,
                fatal,
                ..
            } => {
                if *fatal {
                    b.fatal_error = Some((*error_kind, message.clone()));
                }
                b.last_error = Some((*error_kind, message.clone()));
                b.recognized += 1;
            }
            EventKind::Retry {
                error_kind,
                message,
                ..
            } => {
                b.last_error = Some((*error_kind, message.clone()));
                b.recognized += 1;
            }
            EventKind::Final { .. } => {
                b.has_final = true;
                b.recognized += 1;
            }
            EventKind::Question { question, options } => {
                b.question = Some((question.clone(), options.clone()));
            }
            EventKind::Protocol { .. } => b.protocol_errors += 1,
            EventKind::Unknown { .. } | EventKind::Log { .. } => {}
            EventKind::UserMessage { .. }
            | EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolResult { .. }
            | EventKind::Usage { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. } => b.recognized += 1,
        }
    }
    b
}

/// A result with the basics filled in and the status still undecided (failed/unknown).
pub fn base_result(provider: &str, b: &Basics) -> SessionResult {
    SessionResult {
        provider: provider.to_owned(),
        session_id: b.session_id.clone(),
        model: b.model.clone(),
        cli_version: b.cli_version.clone(),
        tool_calls: b.tool_calls,
        protocol_errors: b.protocol_errors,
        status: SessionStatus::Failed,
        ..SessionResult::default()
    }
}

/// The last non-empty line of stderr, trimmed to 500 characters.
pub fn stderr_last_line(stderr: &str) -> Option<String> {
    let line = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    Some(truncate_chars(line, 500))
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// Why a run that printed no final event failed, when nothing vendor-specific says:
/// an auth failure, else the last fatal error, else a protocol problem (nothing
/// recognised, or malformed lines), else a crash.
pub fn classify_without_final(
    vendor: &str,
    b: &Basics,
    stderr: &str,
    exit_code: Option<i32>,
    auth_error: Option<String>,
) -> (ErrorKind, String) {
    if let Some(msg) = auth_error {
        return (ErrorKind::Auth, msg);
    }
    if let Some((k, m)) = &b.fatal_error {
        return (*k, m.clone());
    }
    let exit = match exit_code {
        Some(c) => format!("exit code {c}"),
        None => "killed by a signal".to_owned(),
    };
    let tail = stderr_last_line(stderr)
        .map(|l| format!("; stderr: {l}"))
        .unwrap_or_default();
    if b.recognized == 0 && b.protocol_errors > 0 {
        return (
            ErrorKind::Protocol,
            format!(
                "no line was a valid {vendor} event ({} malformed or over-long lines; {exit}){tail}",
                b.protocol_errors
            ),
        );
    }
    if b.recognized == 0 && b.protocol_errors == 0 && b.session_id.is_none() {
        // Lines that were JSON but none of this vendor's: the wrong transcript?
        return (
            ErrorKind::Crashed,
            format!("the CLI ended without any {vendor} event ({exit}){tail}"),
        );
    }
    if b.protocol_errors > 0 {
        return (
            ErrorKind::Protocol,
            format!(
                "the stream ended without a final event after {} malformed or over-long lines ({exit}){tail}",
                b.protocol_errors
            ),
        );
    }
    if let Some((k, m)) = &b.last_error
        && k.is_retryable()
    {
        return (
            *k,
            format!("{m} (the CLI ended without a final event, {exit})"),
        );
    }
    (
        ErrorKind::Crashed,
        format!("the CLI ended without a final event ({exit}){tail}"),
    )
}

/// Whether the events look like another vendor's transcript: JSON lines that the
/// adapter did not recognise, and nothing it did.
pub fn looks_foreign(events: &[AgentEvent]) -> bool {
    let unknown = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Unknown { .. }))
        .count();
    let recognized = events
        .iter()
        .filter(|e| {
            !matches!(
                e.kind,
                EventKind::Unknown { .. }
                    | EventKind::Protocol { .. }
                    | EventKind::Log { .. }
                    | EventKind::Question { .. }
            )
        })
        .count();
    unknown > 0 && recognized == 0
}

/// Concatenates assistant text: deltas joined as they are, whole blocks separated by a
/// blank line.
pub fn assistant_text(events: &[AgentEvent]) -> String {
    let mut out = String::new();
    let mut prev_delta = false;
    for ev in events {
        if let EventKind::AssistantText { text, delta } = &ev.kind {
            let continues_deltas = *delta && prev_delta;
            if !out.is_empty() && !continues_deltas {
                out.push_str("\n\n");
            }
            out.push_str(text);
            prev_delta = *delta;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_object_reports_what_it_got() {
        assert_eq!(
            json_object("[1]").err().as_deref(),
            Some("expected a JSON object, got an array")
        );
        let e = json_object("{\"a\":").err().unwrap_or_default();
        assert!(e.starts_with("malformed JSON: EOF while parsing"), "{e}");
        assert!(json_object("{\"a\":1}").is_ok());
    }

    #[test]
    fn content_text_joins_text_blocks() {
        let v = serde_json::json!([{"type":"text","text":"a"},{"type":"text","text":"b"}]);
        assert_eq!(content_text(&v), "a\nb");
        assert_eq!(content_text(&serde_json::json!("x")), "x");
        assert_eq!(content_text(&serde_json::json!({"k":1})), "{\"k\":1}");
    }

    #[test]
    fn assistant_text_joins_deltas_and_separates_blocks() {
        let t = |text: &str, delta| {
            AgentEvent::synthetic(EventKind::AssistantText {
                text: text.into(),
                delta,
            })
        };
        assert_eq!(assistant_text(&[t("Hel", true), t("lo", true)]), "Hello");
        assert_eq!(
            assistant_text(&[t("A.", false), t("B.", false)]),
            "A.\n\nB."
        );
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
