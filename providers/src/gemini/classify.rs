//! Why a Gemini run failed: its error type, its own exit codes, the HTTP status (quoted
//! in the message, else read back from the exit code), then the words.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::shared::errors::{is_model_not_found, is_network_text};
use crate::shared::text::truncate_chars;

/// What Gemini's exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    /// 0.
    Ok,
    /// 41: `FatalAuthenticationError` (no auth method, an invalid one, a missing key).
    Auth,
    /// 42: `FatalInputError` (an unknown `--resume` session, an empty prompt, ...).
    Input,
    /// 44: `FatalSandboxError`.
    Sandbox,
    /// 52: `FatalConfigError` (a bad settings file, YOLO disabled by the admin, ...).
    Config,
    /// 53: `FatalTurnLimitedError` (`model.maxSessionTurns` reached).
    TurnLimit,
    /// 54: `FatalToolExecutionError` (a tool error Gemini cannot continue after).
    ToolFatal,
    /// 55: `FatalUntrustedWorkspaceError`.
    Untrusted,
    /// 130: `FatalCancellationError`.
    Cancelled,
    /// 124: not Gemini's own code; timeout(1) exits with it when it stops a command.
    TimedOut,
    /// A failed API call's HTTP status & 0xff (`handleError` exits with the status).
    Http(u16),
    /// Anything else (1 = an uncaught error).
    Other(i32),
    /// Killed by a signal.
    Signal,
    /// No exit code known (a transcript parsed without it).
    Unknown,
}

/// HTTP statuses a model API answers with, for reading them back from `status & 0xff`.
const HTTP_STATUSES: [u16; 15] = [
    400, 401, 403, 404, 408, 409, 413, 422, 429, 499, 500, 501, 502, 503, 504,
];

impl Exit {
    pub(super) fn from_exit(exit: ExitStatus) -> Exit {
        let code = match exit {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal => return Exit::Signal,
            ExitStatus::Unknown => return Exit::Unknown,
        };
        match code {
            0 => Exit::Ok,
            41 => Exit::Auth,
            42 => Exit::Input,
            44 => Exit::Sandbox,
            52 => Exit::Config,
            53 => Exit::TurnLimit,
            54 => Exit::ToolFatal,
            55 => Exit::Untrusted,
            124 => Exit::TimedOut,
            130 => Exit::Cancelled,
            c => HTTP_STATUSES
                .into_iter()
                .find(|s| i32::from(*s & 0xff) == c)
                .map_or(Exit::Other(c), Exit::Http),
        }
    }

    pub(super) fn describe(self) -> String {
        match self {
            Exit::Ok => "success".to_owned(),
            Exit::Auth => "41: authentication error (FatalAuthenticationError)".to_owned(),
            Exit::Input => "42: input error (FatalInputError)".to_owned(),
            Exit::Sandbox => "44: sandbox error (FatalSandboxError)".to_owned(),
            Exit::Config => "52: configuration error (FatalConfigError)".to_owned(),
            Exit::TurnLimit => "53: session turn limit reached (FatalTurnLimitedError)".to_owned(),
            Exit::ToolFatal => "54: fatal tool error (FatalToolExecutionError)".to_owned(),
            Exit::Untrusted => "55: untrusted directory (FatalUntrustedWorkspaceError)".to_owned(),
            Exit::Cancelled => "130: cancelled (FatalCancellationError)".to_owned(),
            Exit::TimedOut => {
                "124: stopped by timeout(1) (gemini never exits 124 itself)".to_owned()
            }
            Exit::Http(s) => format!("{}: HTTP {s} & 0xff (a failed API call)", s & 0xff),
            Exit::Other(c) => format!("{c}: not one of Gemini's documented exit codes"),
            Exit::Signal => "killed by a signal".to_owned(),
            Exit::Unknown => "not known".to_owned(),
        }
    }

    /// The kind this exit code alone decides (Gemini's own fatal errors).
    pub(super) fn kind(self, text: &str) -> Option<ErrorKind> {
        match self {
            Exit::Auth => Some(ErrorKind::Auth),
            Exit::Input => Some(input_kind(text)),
            Exit::TurnLimit => Some(ErrorKind::MaxTurns),
            Exit::Untrusted => Some(ErrorKind::Permission),
            Exit::Cancelled => Some(ErrorKind::Cancelled),
            Exit::TimedOut => Some(ErrorKind::Timeout),
            Exit::Ok
            | Exit::Sandbox
            | Exit::Config
            | Exit::ToolFatal
            | Exit::Http(_)
            | Exit::Other(_)
            | Exit::Signal
            | Exit::Unknown => None,
        }
    }
}

/// An API error quoted in a message: `{"error":{"code":400,"message":..,"status":..,
/// "details":[{"reason":..}]}}`, or the `(Status: RESOURCE_EXHAUSTED)` form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(super) struct ApiError {
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireApiErrorBody {
    error: WireApiError,
}

#[derive(Debug, Deserialize)]
struct WireApiError {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    details: Vec<WireApiErrorDetail>,
}

#[derive(Debug, Deserialize)]
struct WireApiErrorDetail {
    #[serde(default)]
    reason: Option<String>,
}

impl ApiError {
    /// The first API error quoted in `text`, if any.
    pub(super) fn find(text: &str) -> Option<ApiError> {
        for (at, _) in text.match_indices("{\"error\"") {
            let mut values =
                serde_json::Deserializer::from_str(&text[at..]).into_iter::<WireApiErrorBody>();
            if let Some(Ok(body)) = values.next() {
                let e = body.error;
                let http_status = e
                    .code
                    .or_else(|| e.status.as_deref().and_then(http_of_grpc_status));
                return Some(ApiError {
                    http_status,
                    status: e.status,
                    reason: e.details.into_iter().find_map(|d| d.reason),
                    message: e.message,
                });
            }
        }
        let status = text.split("(Status: ").nth(1)?.split(')').next()?.trim();
        Some(ApiError {
            http_status: http_of_grpc_status(status),
            status: Some(status.to_owned()),
            reason: None,
            message: None,
        })
    }
}

/// The HTTP status of a google.rpc status name.
pub(super) fn http_of_grpc_status(status: &str) -> Option<u16> {
    Some(match status {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "CANCELLED" => 499,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => 500,
        "UNIMPLEMENTED" => 501,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => return None,
    })
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Classified {
    pub(super) kind: ErrorKind,
    /// The failed API call's HTTP status, from the quoted error or the exit code.
    pub(super) http_status: Option<u16>,
    pub(super) api: Option<ApiError>,
}

/// Classifies a failure from Gemini's error type, its message and the exit code: the
/// error type first, then Gemini's own exit codes, then the HTTP status (quoted in the
/// message, else read back from the exit code), then the words. `exit` is `None` where
/// the exit code is not known yet (a `result` line parsed on its own).
pub(super) fn classify(error_type: Option<&str>, message: &str, exit: Option<Exit>) -> Classified {
    let api = ApiError::find(message);
    let exit_status = match exit {
        Some(Exit::Http(s)) => Some(s),
        Some(
            Exit::Ok
            | Exit::Auth
            | Exit::Input
            | Exit::Sandbox
            | Exit::Config
            | Exit::TurnLimit
            | Exit::ToolFatal
            | Exit::Untrusted
            | Exit::Cancelled
            | Exit::TimedOut
            | Exit::Other(_)
            | Exit::Signal
            | Exit::Unknown,
        )
        | None => None,
    };
    let http_status = api.as_ref().and_then(|a| a.http_status).or(exit_status);
    let kind = error_type
        .and_then(|t| fatal_type_kind(t, message))
        .or_else(|| exit.and_then(|e| e.kind(message)))
        .or_else(|| http_status.map(|s| http_kind(s, api.as_ref(), message)))
        .or_else(|| text_kind(message))
        .unwrap_or(ErrorKind::Unknown);
    Classified {
        kind,
        http_status,
        api,
    }
}

/// The kind of Gemini's own fatal error types.
pub(super) fn fatal_type_kind(error_type: &str, message: &str) -> Option<ErrorKind> {
    Some(match error_type {
        "FatalTurnLimitedError" => ErrorKind::MaxTurns,
        "FatalCancellationError" => ErrorKind::Cancelled,
        "FatalAuthenticationError" => ErrorKind::Auth,
        "FatalUntrustedWorkspaceError" => ErrorKind::Permission,
        "FatalInputError" => input_kind(message),
        "ModelNotFoundError" => ErrorKind::BadRequest,
        _ => return None,
    })
}

/// Exit 42 is a bad `--resume` or some other bad input (an empty prompt, a failing
/// `@file`).
pub(super) fn input_kind(text: &str) -> ErrorKind {
    let lower = text.to_ascii_lowercase();
    if lower.contains("resuming session") || lower.contains("session identifier") {
        ErrorKind::InvalidResume
    } else {
        ErrorKind::BadRequest
    }
}

/// The kind of a failed API call's HTTP status. A 400 `API_KEY_INVALID` is Google's
/// answer to a bad key (auth); a 403 about the key (blocked, leaked, unregistered caller)
/// is auth too, any other 403 (API disabled for the project, no access to the model) is
/// permission.
pub(super) fn http_kind(status: u16, api: Option<&ApiError>, text: &str) -> ErrorKind {
    let reason = api.and_then(|a| a.reason.as_deref()).unwrap_or("");
    match status {
        400 if reason == "API_KEY_INVALID" || text.contains("API key not valid") => ErrorKind::Auth,
        403 if reason.starts_with("API_KEY")
            || text.contains("API key")
            || text.contains("unregistered callers") =>
        {
            ErrorKind::Auth
        }
        404 => ErrorKind::BadRequest,
        s => ErrorKind::from_http_status(s).unwrap_or(ErrorKind::Unknown),
    }
}

/// The kind the words of a message say, where they say one.
pub(super) fn text_kind(text: &str) -> Option<ErrorKind> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("resource has been exhausted") || lower.contains("quota") {
        Some(ErrorKind::RateLimit)
    } else if lower.contains("api key not valid") {
        Some(ErrorKind::Auth)
    } else if is_model_not_found(text) {
        Some(ErrorKind::BadRequest)
    } else if is_network_text(text) {
        Some(ErrorKind::Network)
    } else {
        None
    }
}

/// stderr lines in which Gemini refuses to start for lack of auth (exit 41).
pub(super) const AUTH_SETUP_MARKERS: [&str; 4] = [
    "Please set an Auth method",
    "Invalid auth method selected",
    "you must specify the GEMINI_API_KEY",
    "When using Vertex AI, you must specify",
];

/// The stderr line in which Gemini says it ignored a system settings file.
pub(super) const SETTINGS_SKIPPED: &str = "Security Warning: Skipping system settings file";

/// stderr lines that say nothing about why a run ended: start-up noise Gemini prints on
/// every run, and the skipped-settings warning (reported on its own).
pub(super) const STDERR_NOISE: [&str; 5] = [
    "Warning: 256-color support not detected",
    "Ripgrep is not available",
    "[STARTUP]",
    "YOLO mode is enabled",
    SETTINGS_SKIPPED,
];

/// The stderr lines that say something: no start-up noise, no stack frames.
pub(super) fn stderr_lines(stderr: &str) -> impl Iterator<Item = &str> {
    stderr.lines().map(str::trim).filter(|l| {
        !(l.is_empty()
            || l.starts_with("at ")
            || *l == "}"
            || l.starts_with("status: ")
            || STDERR_NOISE.iter().any(|n| l.starts_with(n)))
    })
}

/// What stderr says went wrong: the `error.message` of a JSON error report (`-o json`),
/// else the first line that says something.
pub(super) fn stderr_detail(stderr: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<Value>(stderr.trim())
        && let Some(m) = v.pointer("/error/message").and_then(Value::as_str)
    {
        return Some(truncate_chars(m, 500));
    }
    stderr_lines(stderr).next().map(|l| truncate_chars(l, 500))
}

/// The CLI's API retries as stderr shows them (`Attempt N failed ... Retrying with
/// backoff... ERROR`); they never reach the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct ApiRetries {
    /// `Attempt N failed` lines.
    pub(super) failed_attempts: u32,
    /// The last one's error.
    pub(super) last_error: String,
}

impl ApiRetries {
    pub(super) fn from_stderr(stderr: &str) -> Option<ApiRetries> {
        let mut failed_attempts = 0;
        let mut last_error = String::new();
        for line in stderr.lines() {
            if !(line.starts_with("Attempt ") && line.contains(" failed")) {
                continue;
            }
            failed_attempts += 1;
            let error = match line.split_once("Retrying with backoff... ") {
                Some((_, e)) => e,
                None => line.split_once(": ").map_or(line, |(_, e)| e),
            };
            last_error = truncate_chars(error.trim(), 300);
        }
        (failed_attempts > 0).then_some(ApiRetries {
            failed_attempts,
            last_error,
        })
    }
}
