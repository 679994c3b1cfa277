//! Why a Claude run failed: from the structured fields first (`terminal_reason`,
//! `api_error`, `api_error_status`, `api_error_type`, the assistant line's `error`
//! word), from the CLI's words last.

use crate::error::ErrorKind;
use crate::shared::errors::{kind_of_api_error, kind_of_api_text};

/// What the CLI says about a failed API call, from an `assistant` error line and/or the
/// `result` line.
#[derive(Debug, Default, Clone)]
pub struct ApiErrorFacts {
    /// HTTP status (`api_error_status`; null on connection failures and before 2.1.110).
    pub status: Option<u16>,
    /// The API's error type (`authentication_error`, `overloaded_error`, ...).
    pub api_error_type: Option<String>,
    /// `connection_failed` when the API was not reached.
    pub api_error: Option<String>,
    /// The assistant line's `error` word (`authentication_failed`, `rate_limit`, ...).
    pub error_word: Option<String>,
    /// The CLI's text (only for the last resort).
    pub text: String,
}

impl ApiErrorFacts {
    /// Structured fields first, text last.
    pub fn classify(&self) -> ErrorKind {
        if self.api_error.as_deref() == Some("connection_failed") {
            return ErrorKind::Network;
        }
        if let Some(k) = self.status.and_then(ErrorKind::from_http_status) {
            return k;
        }
        if let Some(k) = self.api_error_type.as_deref().and_then(kind_of_api_error) {
            return k;
        }
        if let Some(k) = self.error_word.as_deref().and_then(kind_of_error_word) {
            return k;
        }
        kind_of_text(&self.text).unwrap_or(ErrorKind::Unknown)
    }
}

/// The `error` word of an assistant API-error line or an `api_retry` line.
pub fn kind_of_error_word(w: &str) -> Option<ErrorKind> {
    Some(match w {
        "authentication_failed" => ErrorKind::Auth,
        "rate_limit" => ErrorKind::RateLimit,
        "overloaded" => ErrorKind::Overloaded,
        "server_error" => ErrorKind::ServerError,
        "invalid_request" => ErrorKind::BadRequest,
        "billing_error" => ErrorKind::Permission,
        _ => return None,
    })
}

/// Auth-failure wording of the CLI (a last resort after the structured fields).
pub fn auth_text(s: &str) -> bool {
    const MARKERS: [&str; 6] = [
        "Not logged in",
        "Please run /login",
        "Invalid API key",
        "invalid x-api-key",
        "OAuth token has expired",
        "authentication_error",
    ];
    MARKERS.iter().any(|m| s.contains(m))
}

/// The last resort: the CLI's wording (claude 2.0 has no structured fields and prints
/// `API Error: 404 {...}`).
pub fn kind_of_text(s: &str) -> Option<ErrorKind> {
    if auth_text(s) {
        return Some(ErrorKind::Auth);
    }
    kind_of_api_text(s)
}

/// The kind of failure an `api_retry` line retries. A null `error_status` means no HTTP
/// answer came back at all (refused connection, DNS): a network failure.
pub fn retry_kind(status: Option<u16>, word: Option<&str>) -> ErrorKind {
    if let Some(k) = status.and_then(ErrorKind::from_http_status) {
        return k;
    }
    if let Some(k) = word.and_then(kind_of_error_word) {
        return k;
    }
    if status.is_none() {
        ErrorKind::Network
    } else {
        ErrorKind::Unknown
    }
}

/// What a `resume` of an unknown session prints (stderr and `errors[]`).
pub const UNKNOWN_SESSION: &str = "No conversation found with session ID";

/// What claude says (lowercased) when its sandbox is on and cannot start.
pub const SANDBOX_UNAVAILABLE: &str = "sandbox required but unavailable";

/// What claude prints when asked to bypass permissions as root without `IS_SANDBOX=1`.
pub const ROOT_BYPASS: &str = "cannot be used with root/sudo privileges";

/// The facts of a `result` line a verdict needs.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// `subtype`.
    pub subtype: Option<String>,
    /// `is_error`.
    pub is_error: Option<bool>,
    /// `terminal_reason`.
    pub terminal_reason: Option<String>,
    /// `result`.
    pub result: Option<String>,
    /// `errors[]` as one message.
    pub errors: Option<String>,
    /// `api_error_status`.
    pub api_error_status: Option<u16>,
    /// `api_error_type`.
    pub api_error_type: Option<String>,
    /// `api_error`.
    pub api_error: Option<String>,
}

/// The run's verdict from its last result line: `Ok` on success, else the kind and
/// message. `assistant` holds the facts of the run's last API-error assistant line.
pub fn verdict(
    r: &Outcome,
    assistant: Option<&ApiErrorFacts>,
    stderr: &str,
) -> Result<(), (ErrorKind, String)> {
    let reason = r.terminal_reason.as_deref();
    let subtype = r.subtype.as_deref().unwrap_or("");
    let is_error = r.is_error.unwrap_or(subtype.starts_with("error"));
    if !is_error && matches!(reason, None | Some("completed")) && !subtype.starts_with("error") {
        return Ok(());
    }
    let message = |fallback: String| {
        r.errors
            .clone()
            .or_else(|| r.result.clone().filter(|s| !s.trim().is_empty()))
            .unwrap_or(fallback)
    };
    if reason == Some("max_turns") || subtype == "error_max_turns" {
        return Err((
            ErrorKind::MaxTurns,
            message("claude stopped at its turn limit".to_owned()),
        ));
    }
    if reason == Some("budget_exhausted") || subtype == "error_max_budget_usd" {
        return Err((
            ErrorKind::Budget,
            message("claude stopped at its dollar budget".to_owned()),
        ));
    }
    // Older 2.x prints no terminal_reason: an API-error assistant line says it.
    let api = reason == Some("api_error")
        || r.api_error_status.is_some()
        || r.api_error.is_some()
        || r.api_error_type.is_some()
        || assistant.is_some();
    if api {
        let text = r
            .result
            .clone()
            .or_else(|| r.errors.clone())
            .or_else(|| assistant.map(|a| a.text.clone()))
            .unwrap_or_else(|| "API error".to_owned());
        let facts = ApiErrorFacts {
            status: r.api_error_status.or(assistant.and_then(|a| a.status)),
            api_error_type: r
                .api_error_type
                .clone()
                .or_else(|| assistant.and_then(|a| a.api_error_type.clone())),
            api_error: r
                .api_error
                .clone()
                .or_else(|| assistant.and_then(|a| a.api_error.clone())),
            error_word: assistant.and_then(|a| a.error_word.clone()),
            text: text.clone(),
        };
        return Err((facts.classify(), text));
    }
    let fallback = format!(
        "claude reported an error (subtype {subtype}, terminal_reason {})",
        reason.unwrap_or("null")
    );
    let msg = message(fallback);
    if msg.contains(UNKNOWN_SESSION) || stderr.contains(UNKNOWN_SESSION) {
        return Err((ErrorKind::InvalidResume, msg));
    }
    if let Some(k) = kind_of_text(&msg) {
        return Err((k, msg));
    }
    Err((ErrorKind::Unknown, msg))
}
