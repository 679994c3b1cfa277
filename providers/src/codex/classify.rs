//! Codex's error texts -> kinds: the HTTP status Codex prints, then an API error body,
//! then Codex's own fixed texts; and the retry notices of the top-level `error` line.

use std::sync::LazyLock;

use crate::error::ErrorKind;
use crate::event::EventKind;
use crate::shared::errors::{
    MODEL_NOT_FOUND_WORDS, NETWORK_WORDS, WordGroups, error_body_kind, http_status_in,
};

/// The kind (and HTTP status, where the text has one) of a Codex error message.
pub fn classify_message(message: &str) -> (ErrorKind, Option<u16>) {
    if let Some(status) = http_status_in(message) {
        let kind = ErrorKind::from_http_status(status).unwrap_or(ErrorKind::Unknown);
        return (kind, Some(status));
    }
    if let Some(kind) = error_body_kind(message) {
        return (kind, None);
    }
    // Codex's own fixed texts, the first group that matches deciding; then a model that
    // does not exist, then network words. All in one pass over the message.
    static GROUPS: LazyLock<WordGroups<ErrorKind>> = LazyLock::new(|| {
        WordGroups::new(&[
            // Codex's text for HTTP 500 (`CodexErr::InternalServerError`); it replaces the
            // server's own message.
            (ErrorKind::ServerError, &["high demand"]),
            (ErrorKind::InvalidResume, super::RESUME_FAILED),
            (
                ErrorKind::RateLimit,
                &[
                    "quota exceeded",
                    "usage limit",
                    "rate limit",
                    "too many requests",
                ],
            ),
            (
                ErrorKind::Auth,
                &[
                    "unauthorized",
                    "not logged in",
                    "invalid api key",
                    "incorrect api key",
                    "refresh token",
                    "missing environment variable",
                ],
            ),
            (ErrorKind::Overloaded, &["overloaded", "at capacity"]),
            (ErrorKind::BadRequest, &["context window"]),
            (ErrorKind::BadRequest, &MODEL_NOT_FOUND_WORDS),
            (ErrorKind::Network, &NETWORK_WORDS),
        ])
    });
    (GROUPS.first(message).unwrap_or(ErrorKind::Unknown), None)
}

/// Remembers the last message classified: Codex repeats its retry reasons line after
/// line ("Reconnecting... 3/5 (same reason)").
#[derive(Debug, Default)]
pub struct Memo {
    last: Option<(String, (ErrorKind, Option<u16>))>,
}

impl Memo {
    /// [`classify_message`], from the memo when the message is the last one's.
    pub fn classify(&mut self, message: &str) -> (ErrorKind, Option<u16>) {
        if let Some((m, c)) = &self.last
            && m == message
        {
            return *c;
        }
        let c = classify_message(message);
        match &mut self.last {
            Some((m, k)) => {
                m.clear();
                m.push_str(message);
                *k = c;
            }
            None => self.last = Some((message.to_owned(), c)),
        }
        c
    }
}

/// A top-level `error` line: a retry notice or a fatal error.
pub fn top_level_error(message: &str, memo: &mut Memo) -> EventKind {
    let Some(rest) = message.strip_prefix("Reconnecting...") else {
        let (error_kind, http_status) = memo.classify(message);
        return EventKind::Error {
            error_kind,
            message: message.to_owned(),
            fatal: true,
            http_status,
        };
    };
    let rest = rest.trim_start();
    let reason = rest
        .find('(')
        .map(|i| rest[i + 1..].trim_end().trim_end_matches(')'))
        .unwrap_or_default();
    let (mut error_kind, http_status) = memo.classify(reason);
    let (attempt, max_retries) = if rest.starts_with("waiting for network") {
        error_kind = ErrorKind::Network;
        (None, None)
    } else {
        let counter = rest.split_whitespace().next().unwrap_or_default();
        match counter.split_once('/') {
            Some((n, m)) => (n.parse().ok(), m.parse().ok()),
            None => (None, None),
        }
    };
    EventKind::Retry {
        attempt,
        max_retries,
        delay_ms: None,
        http_status,
        error_kind,
        message: message.to_owned(),
    }
}

/// The first line of a command-line parse error (clap's "error: unexpected argument").
pub fn rejected_argv(stderr: &str) -> Option<String> {
    if !stderr.contains("Usage: codex") {
        return None;
    }
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("error:"))
        .map(str::to_owned)
}
