//! JSON-RPC errors of ACP agents -> [`ErrorKind`], from structured fields first:
//!
//! | signal | agents | kind |
//! |---|---|---|
//! | code `-32000` (`AuthRequired`) | claude-agent-acp, codex-acp | `auth` |
//! | code = an HTTP status (400–599) | gemini (`"code": 429`) | by the status; a 400 `API_KEY_INVALID` is `auth` |
//! | `data.errorKind` | claude-agent-acp (`rate_limit`, `server_error`, `overloaded`, `unknown`) | by the word |
//! | `data.codexErrorInfo` | codex-acp (`usageLimitExceeded`, ...) | by the word |
//! | `data.codex_error_info` | zed codex-acp (`internal_server_error`, `{"response_too_many_failed_attempts":{"http_status_code":429}}`, `other`) | by the word or the status |
//! | `-32002` / "not found" on `session/load` or `session/resume` | all | `invalid_resume` |
//! | `-32601` (a method aicli needs) | all | `protocol` |
//! | the message (an HTTP status, an API error body, network words) | all, last | by the text |
//!
//! codex-acp (the TypeScript one) reports most API failures (400, 429, 5xx, a dropped
//! stream, a missing key) not as errors but as an ordinary `end_turn` whose text is the
//! error and whose usage is `null`: see [`swallowed_error`].

use serde_json::Value;

use super::wire::{RpcError, at};
use crate::error::ErrorKind;
use crate::shared::errors::kind_of_api_text;

/// What a request was, for the classification of its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum For {
    /// `session/load` or `session/resume`.
    Continue,
    /// Anything else.
    Other,
}

/// The kind of a JSON-RPC error answered to a request of `what`.
pub fn classify(e: &RpcError, what: For) -> ErrorKind {
    let text = format!(
        "{} {}",
        e.message,
        e.data.as_ref().map(Value::to_string).unwrap_or_default()
    );
    if e.code == -32000 {
        return ErrorKind::Auth;
    }
    if what == For::Continue
        && (e.code == -32002
            || ["not found", "No previous sessions", "no rollout found"]
                .iter()
                .any(|w| text.contains(w)))
    {
        return ErrorKind::InvalidResume;
    }
    if let Ok(status) = u16::try_from(e.code)
        && (400..600).contains(&status)
    {
        if status == 400 && (text.contains("API_KEY_INVALID") || text.contains("API key not valid"))
        {
            return ErrorKind::Auth;
        }
        if let Some(k) = ErrorKind::from_http_status(status) {
            return k;
        }
    }
    if let Some(k) = e.data.as_ref().and_then(data_kind) {
        return k;
    }
    if e.code == -32601 {
        return ErrorKind::Protocol;
    }
    kind_of_api_text(&text)
        .or_else(|| word_kind(&e.message))
        .or_else(|| text_kind(&text))
        .unwrap_or(ErrorKind::Unknown)
}

/// The kind of an error's words when nothing structured says (OpenCode's `-32603
/// "Internal error: <the provider's message>"`).
fn text_kind(text: &str) -> Option<ErrorKind> {
    // (Network words are read before this, by `kind_of_api_text`.)
    const WORDS: [(&str, ErrorKind); 8] = [
        ("x-api-key", ErrorKind::Auth),
        ("api key", ErrorKind::Auth),
        ("unauthorized", ErrorKind::Auth),
        ("rate limit", ErrorKind::RateLimit),
        ("too many requests", ErrorKind::RateLimit),
        ("quota", ErrorKind::RateLimit),
        ("overloaded", ErrorKind::Overloaded),
        ("internal server error", ErrorKind::ServerError),
    ];
    let lower = text.to_lowercase();
    WORDS
        .iter()
        .find(|(w, _)| lower.contains(w))
        .map(|(_, k)| *k)
}

/// The kind the agent's structured `data` names.
fn data_kind(data: &Value) -> Option<ErrorKind> {
    if let Some(w) = data.get("errorKind").and_then(Value::as_str) {
        return word_kind(w);
    }
    if let Some(w) = data.get("codexErrorInfo").and_then(Value::as_str) {
        return word_kind(w);
    }
    match data.get("codex_error_info")? {
        Value::String(w) => word_kind(w),
        Value::Object(m) => m.values().find_map(|v| {
            v.get("http_status_code")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
                .and_then(ErrorKind::from_http_status)
        }),
        _ => None,
    }
}

/// The kind of an agent's error word (`rate_limit`, `usageLimitExceeded`,
/// `internal_server_error`, ...).
fn word_kind(word: &str) -> Option<ErrorKind> {
    let w = word.to_ascii_lowercase().replace(['_', '-', ' '], "");
    Some(match w.as_str() {
        "ratelimit" | "ratelimited" | "ratelimitexceeded" | "usagelimitexceeded"
        | "quotaexceeded" | "toomanyrequests" => ErrorKind::RateLimit,
        "overloaded" | "overloadederror" | "serveroverloaded" => ErrorKind::Overloaded,
        "servererror" | "internalservererror" | "apierror" => ErrorKind::ServerError,
        "authentication" | "authenticationerror" | "unauthorized" | "authrequired" => {
            ErrorKind::Auth
        }
        "invalidrequest" | "badrequest" | "contextwindowexceeded" => ErrorKind::BadRequest,
        "network" | "connectionfailed" | "responsestreamdisconnected" => ErrorKind::Network,
        _ => return None,
    })
}

/// An API failure the agent hid in an ordinary end of turn: codex-acp ends a failed turn
/// with `end_turn`, `usage: null` and `_meta.quota.token_count: null`, the error's words
/// being the turn's text. `Some(kind)` when `result` has that shape and `text` (the
/// turn's text) reads as an API error; a turn that merely used no tokens is not one.
pub fn swallowed_error(result: &Value, text: &str) -> Option<ErrorKind> {
    let no_usage = result.get("usage").is_some_and(Value::is_null);
    let no_count = at(result, &["_meta", "quota", "token_count"]).is_some_and(Value::is_null);
    if !(no_usage && no_count) {
        return None;
    }
    if let Some(k) = kind_of_api_text(text) {
        return Some(k);
    }
    // codex-acp runs `codex app-server`: Codex's own error texts ("We're currently
    // experiencing high demand" is its text for HTTP 500).
    match crate::codex::classify_message(text) {
        (ErrorKind::Unknown, _) => {}
        (kind, _) => return Some(kind),
    }
    // (Network words, "stream disconnected" among them, are read by `kind_of_api_text`.)
    const WORDS: [(&str, ErrorKind); 5] = [
        ("high demand", ErrorKind::ServerError),
        ("overloaded", ErrorKind::Overloaded),
        ("exceeded retry limit", ErrorKind::RateLimit),
        ("Missing environment variable", ErrorKind::Auth),
        ("Quota exceeded", ErrorKind::RateLimit),
    ];
    WORDS
        .iter()
        .find(|(w, _)| text.contains(w))
        .map(|(_, k)| *k)
        .or(Some(ErrorKind::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(code: i64, message: &str, data: Option<Value>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data,
        }
    }

    #[test]
    fn structured_codes_and_data_first() {
        assert_eq!(
            classify(&err(-32000, "Authentication required", None), For::Other),
            ErrorKind::Auth
        );
        assert_eq!(
            classify(&err(429, "Resource has been exhausted", None), For::Other),
            ErrorKind::RateLimit
        );
        assert_eq!(
            classify(&err(503, "The model is overloaded.", None), For::Other),
            ErrorKind::Overloaded
        );
        assert_eq!(
            classify(
                &err(
                    400,
                    r#"{"error":{"details":[{"reason":"API_KEY_INVALID"}]}}"#,
                    None
                ),
                For::Other
            ),
            ErrorKind::Auth
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error: API Error: 429",
                    Some(json!({"errorKind": "rate_limit"}))
                ),
                For::Other
            ),
            ErrorKind::RateLimit
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error",
                    Some(json!({"codexErrorInfo": "usageLimitExceeded"}))
                ),
                For::Other
            ),
            ErrorKind::RateLimit
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error",
                    Some(
                        json!({"codex_error_info": {"response_too_many_failed_attempts": {"http_status_code": 429}}})
                    )
                ),
                For::Other
            ),
            ErrorKind::RateLimit
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error",
                    Some(json!({"codex_error_info": "internal_server_error"}))
                ),
                For::Other
            ),
            ErrorKind::ServerError
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error",
                    Some(json!({"details": "No previous sessions found for this project."}))
                ),
                For::Continue
            ),
            ErrorKind::InvalidResume
        );
        assert_eq!(
            classify(&err(-32002, "Resource not found", None), For::Continue),
            ErrorKind::InvalidResume
        );
        assert_eq!(
            classify(&err(-32601, "Method not found", None), For::Other),
            ErrorKind::Protocol
        );
        assert_eq!(
            classify(
                &err(
                    -32603,
                    "Internal error: invalid x-api-key",
                    Some(json!({"errorName": "APIError"}))
                ),
                For::Other
            ),
            ErrorKind::Auth
        );
        assert_eq!(
            classify(
                &err(-32603, "Internal error: something odd", None),
                For::Other
            ),
            ErrorKind::Unknown
        );
    }

    #[test]
    fn codex_acp_hides_api_errors_in_an_end_turn() {
        let hidden = json!({"stopReason":"end_turn","usage":null,"_meta":{"quota":{"token_count":null,"model_usage":[]}}});
        assert_eq!(
            swallowed_error(
                &hidden,
                "exceeded retry limit, last status: 429 Too Many Requests"
            ),
            Some(ErrorKind::RateLimit)
        );
        assert_eq!(
            swallowed_error(
                &hidden,
                "We’re currently experiencing high demand, which may cause temporary errors."
            ),
            Some(ErrorKind::ServerError)
        );
        assert_eq!(
            swallowed_error(&hidden, "unexpected status 529 Overloaded"),
            Some(ErrorKind::Overloaded)
        );
        assert_eq!(
            swallowed_error(
                &json!({"stopReason":"end_turn","usage":{"inputTokens":1}}),
                "exceeded retry limit"
            ),
            None
        );
    }
}
