//! The tables every adapter classifies errors with: the model APIs' error types, HTTP
//! statuses quoted in a CLI's words, the words of a network failure and of a model
//! that does not exist.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use memchr::memmem::Finder;
use serde::Deserialize;

use crate::error::ErrorKind;

/// An automaton finding any of `words` without regard to ASCII case (`None` only if the
/// words could not be compiled, which fixed words always can).
pub fn words(words: &[&str]) -> Option<AhoCorasick> {
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .build(words)
        .ok()
}

/// The kind of a model API's error `type` or `code` (Anthropic and OpenAI error JSON).
pub fn kind_of_api_error(type_or_code: &str) -> Option<ErrorKind> {
    Some(match type_or_code {
        "authentication_error" | "invalid_api_key" => ErrorKind::Auth,
        "permission_error" => ErrorKind::Permission,
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => ErrorKind::RateLimit,
        "overloaded_error" => ErrorKind::Overloaded,
        "api_error" | "server_error" => ErrorKind::ServerError,
        "invalid_request_error" | "not_found_error" | "request_too_large" | "model_not_found" => {
            ErrorKind::BadRequest
        }
        _ => return None,
    })
}

/// Words of a failure to reach the API at all (DNS, refused or reset connections, cut
/// streams), as the three CLIs print them. Matched without regard to case.
pub const NETWORK_WORDS: [&str; 20] = [
    "can't reach the api server",
    "econnrefused",
    "econnreset",
    "eai_again",
    "enotfound",
    "etimedout",
    "connection refused",
    "connection reset",
    "connection failed",
    "fetch failed",
    "stream disconnected",
    "error sending request",
    "failed to lookup address",
    "name does not resolve",
    "waiting for network",
    "error while reading the server response",
    "timed out",
    // undici's message when a response body is cut midway (gemini 0.61 on a dropped
    // SSE stream: "[API Error: terminated]", exit 1).
    "api error: terminated",
    "network error",
    "socket hang up",
];

/// Whether `text` says the API could not be reached.
pub fn is_network_text(text: &str) -> bool {
    static AC: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| words(&NETWORK_WORDS));
    AC.as_ref().is_some_and(|ac| ac.is_match(text))
}

/// Words of a request for a model that does not exist (claude 2.0 prints a 404 in its
/// text, OpenAI answers `model_not_found`, gemini throws `ModelNotFoundError`).
pub const MODEL_NOT_FOUND_WORDS: [&str; 5] = [
    "modelnotfounderror",
    "model_not_found",
    "not_found_error",
    "does not exist",
    "model not found",
];

/// Whether `text` says the model does not exist.
pub fn is_model_not_found(text: &str) -> bool {
    static AC: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| words(&MODEL_NOT_FOUND_WORDS));
    AC.as_ref().is_some_and(|ac| ac.is_match(text))
}

/// The HTTP status a CLI quotes in its words: `API Error: 404 ...` (claude), `unexpected
/// status 401 ...`, `last status: 429` (codex), `(status 500`.
pub fn http_status_in(text: &str) -> Option<u16> {
    const MARKERS: [&str; 4] = [
        "API Error: ",
        "unexpected status ",
        "last status: ",
        "(status ",
    ];
    static FINDERS: LazyLock<[Finder<'static>; 4]> = LazyLock::new(|| MARKERS.map(Finder::new));
    FINDERS.iter().zip(MARKERS).find_map(|(finder, marker)| {
        let at = finder.find(text.as_bytes())? + marker.len();
        let digits: String = text[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        (digits.len() == 3)
            .then(|| digits.parse().ok())
            .flatten()
            .filter(|s| (400..600).contains(s))
    })
}

/// The error body quoted in a CLI's words: `{"type":"error","error":{"type":...}}`
/// (Anthropic) or `{"error":{"type":...,"code":...}}` (OpenAI).
#[derive(Debug, Default, Deserialize)]
struct Body {
    #[serde(default)]
    error: Option<BodyError>,
}

#[derive(Debug, Default, Deserialize)]
struct BodyError {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// The kind the first API error body quoted in `text` names (`error.code` first, then
/// `error.type`).
pub fn error_body_kind(text: &str) -> Option<ErrorKind> {
    static ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("\"error\""));
    ERROR.find(text.as_bytes())?;
    for (at, _) in text.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Body>();
        if let Some(Ok(Body { error: Some(e) })) = values.next() {
            let code = e.code.as_ref().and_then(serde_json::Value::as_str);
            return code
                .and_then(kind_of_api_error)
                .or_else(|| e.kind.as_deref().and_then(kind_of_api_error));
        }
    }
    None
}

/// The kind of an API failure from the CLI's words alone: a quoted HTTP status, then a
/// quoted error body, then a missing model, then network words.
pub fn kind_of_api_text(text: &str) -> Option<ErrorKind> {
    if let Some(k) = http_status_in(text).and_then(ErrorKind::from_http_status) {
        return Some(k);
    }
    if let Some(k) = error_body_kind(text) {
        return Some(k);
    }
    if is_model_not_found(text) {
        return Some(ErrorKind::BadRequest);
    }
    is_network_text(text).then_some(ErrorKind::Network)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_bodies_and_words_are_read_from_text() {
        assert_eq!(
            kind_of_api_text(
                r#"API Error: 404 {"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}"#
            ),
            Some(ErrorKind::BadRequest)
        );
        assert_eq!(
            kind_of_api_text("unexpected status 401 Unauthorized: nope"),
            Some(ErrorKind::Auth)
        );
        assert_eq!(
            kind_of_api_text(
                r#"boom {"error":{"type":"invalid_request_error","code":"rate_limit_exceeded"}}"#
            ),
            Some(ErrorKind::RateLimit)
        );
        assert_eq!(
            kind_of_api_text("The model `gpt-x` does not exist or you do not have access to it."),
            Some(ErrorKind::BadRequest)
        );
        assert_eq!(
            kind_of_api_text("API Error: Can't reach the API server (EAI_AGAIN)"),
            Some(ErrorKind::Network)
        );
        assert_eq!(kind_of_api_text("all good"), None);
        assert_eq!(http_status_in("API Error: 200"), None);
    }
}
