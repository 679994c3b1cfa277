//! Why a Gemini run failed: its error type, its own exit codes, the HTTP status (quoted
//! in the message, else read back from the exit code), then the error stderr reports
//! (its class and status), then the words.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::shared::errors::{MODEL_NOT_FOUND_WORDS, NETWORK_WORDS, WordGroups};
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

/// The error Gemini threw and reported on stderr: `… ModelNotFoundError: <message>`,
/// its stack, then the error object's own fields (`code: 404`, `status: 400`). Gemini
/// turns every 404 into a `ModelNotFoundError` whose message alone reaches the `result`
/// line (`[API Error: Requested entity was not found.]`, `error.type` `unknown`, exit
/// 1), so stderr is where the class and the status are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Thrown {
    /// The error's class name (`ModelNotFoundError`, `_ApiError`, …).
    pub(super) class: String,
    /// Its `code` or `status` field, where that is an HTTP error status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) http_status: Option<u16>,
}

impl Thrown {
    /// The last error stderr reports (the one that ended the run), if any.
    pub(super) fn from_stderr(stderr: &str) -> Option<Thrown> {
        let mut last: Option<Thrown> = None;
        // Whether the lines after the report still belong to it (its stack and fields).
        let mut in_report = false;
        for line in stderr.lines().map(str::trim) {
            if let Some(class) = thrown_class(line) {
                last = Some(Thrown {
                    class: class.to_owned(),
                    http_status: None,
                });
                in_report = true;
                continue;
            }
            if !in_report || line.starts_with("at ") {
                continue;
            }
            if line.starts_with('}') {
                in_report = false;
                continue;
            }
            let status = ["code: ", "status: "]
                .iter()
                .find_map(|f| line.strip_prefix(f))
                .and_then(|v| v.trim_end_matches(',').parse::<u16>().ok())
                .filter(|s| (400..600).contains(s));
            if let (Some(s), Some(t)) = (status, last.as_mut())
                && t.http_status.is_none()
            {
                t.http_status = Some(s);
            }
        }
        last
    }

    /// The kind the class says (Gemini's own error types), else its HTTP status.
    fn kind(&self, api: Option<&ApiError>, message: &str) -> Option<ErrorKind> {
        fatal_type_kind(&self.class, message)
            .or_else(|| self.http_status.map(|s| http_kind(s, api, message)))
    }
}

/// The class name of an error report line (`<Name>Error: …`, the name an identifier
/// ending in `Error`), not a stack frame's.
fn thrown_class(line: &str) -> Option<&str> {
    if line.starts_with("at ") {
        return None;
    }
    line.match_indices("Error: ").find_map(|(at, _)| {
        let end = at + "Error".len();
        let start = line[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .map_or(0, |i| i + 1);
        let name = &line[start..end];
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
            .then_some(name)
    })
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Classified {
    pub(super) kind: ErrorKind,
    /// The failed API call's HTTP status, from the quoted error, the exit code, or the
    /// error stderr reports.
    pub(super) http_status: Option<u16>,
    pub(super) api: Option<ApiError>,
    /// The error stderr reports, where it decided the kind.
    pub(super) thrown: Option<Thrown>,
}

/// Classifies a failure from the structured fields first: Gemini's error type, its own
/// exit codes, the HTTP status (quoted in the message, else read back from the exit
/// code); then from stderr: the class and status of the error Gemini reports there
/// ([`Thrown`]); then the words of the message. `exit` is `None` where the exit code is
/// not known yet and `stderr` empty where stderr is not (a `result` line parsed on its
/// own, live).
pub(super) fn classify(
    error_type: Option<&str>,
    message: &str,
    exit: Option<Exit>,
    stderr: &str,
) -> Classified {
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
    let mut http_status = api.as_ref().and_then(|a| a.http_status).or(exit_status);
    let mut thrown = None;
    let kind = error_type
        .and_then(|t| fatal_type_kind(t, message))
        .or_else(|| exit.and_then(|e| e.kind(message)))
        .or_else(|| http_status.map(|s| http_kind(s, api.as_ref(), message)))
        .or_else(|| {
            let t = Thrown::from_stderr(stderr)?;
            let kind = t.kind(api.as_ref(), message)?;
            http_status = t.http_status;
            thrown = Some(t);
            Some(kind)
        })
        .or_else(|| text_kind(message))
        .unwrap_or(ErrorKind::Unknown);
    Classified {
        kind,
        http_status,
        api,
        thrown,
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
    static GROUPS: LazyLock<WordGroups<ErrorKind>> = LazyLock::new(|| {
        WordGroups::new(&[
            (
                ErrorKind::RateLimit,
                &["resource has been exhausted", "quota"],
            ),
            (ErrorKind::Auth, &["api key not valid"]),
            (ErrorKind::BadRequest, &MODEL_NOT_FOUND_WORDS),
            // The Google APIs' NOT_FOUND messages, as Gemini quotes a 404 in its `result`
            // line (Vertex and Code Assist say the first, the Gemini API the second).
            (
                ErrorKind::BadRequest,
                &[
                    "api error: requested entity was not found",
                    "is not found for api version",
                ],
            ),
            (ErrorKind::Network, &NETWORK_WORDS),
        ])
    });
    GROUPS.first(text)
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
