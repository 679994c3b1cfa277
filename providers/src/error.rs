//! One error taxonomy across vendors ([`ErrorKind`]) and the typed errors of this crate
//! ([`ProviderError`], [`ConfigError`]).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a run failed, the same words for every vendor.
///
/// Adapters decide the kind from structured signals first (Claude `is_error`,
/// `api_error_status`, `terminal_reason` and the assistant `error` field; Codex
/// `turn.failed`; Gemini `result.error` and the exit code) and from text only as a last
/// resort. The serialized names are part of the result format and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Not logged in, or the credentials were rejected (HTTP 401 and friends).
    Auth,
    /// The vendor's rate limit or usage quota (HTTP 429).
    RateLimit,
    /// The vendor is overloaded (Anthropic 529, Google 503).
    Overloaded,
    /// The vendor's API failed (HTTP 5xx other than the overload codes).
    ServerError,
    /// The API rejected the request as malformed (HTTP 400 other than bad keys).
    BadRequest,
    /// The API could not be reached at all (DNS, refused connection, "Reconnecting...").
    Network,
    /// The CLI stopped at its turn limit.
    MaxTurns,
    /// A dollar budget was spent (the CLI's own or the batch's).
    Budget,
    /// `--resume` named a session the CLI does not know.
    InvalidResume,
    /// The CLI refused to act: untrusted directory, a denied tool, a forbidden key (403).
    Permission,
    /// aicli's wall-clock timeout or idle watchdog ended the run.
    Timeout,
    /// The run was cancelled (Ctrl-C, a batch cancel, a spent batch budget).
    Cancelled,
    /// The CLI's binary is not installed.
    NotInstalled,
    /// The CLI ended without a final event (killed, crashed, cut-off stream).
    Crashed,
    /// The CLI's output broke the protocol (malformed JSON, over-long line, wrong vendor).
    Protocol,
    /// A failure with no better classification.
    Unknown,
    /// A subscription's usage limit (Claude's five-hour or weekly limit, a ChatGPT
    /// plan's, a Gemini quota with a retry time): nothing runs on the account until the
    /// reset, given in the result's `usage_limit`. aicli parks the task until then and
    /// resumes its session; it is the last word only when the task cannot wait.
    UsageLimit,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 17] = [
        ErrorKind::Auth,
        ErrorKind::RateLimit,
        ErrorKind::Overloaded,
        ErrorKind::ServerError,
        ErrorKind::BadRequest,
        ErrorKind::Network,
        ErrorKind::MaxTurns,
        ErrorKind::Budget,
        ErrorKind::InvalidResume,
        ErrorKind::Permission,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::NotInstalled,
        ErrorKind::Crashed,
        ErrorKind::Protocol,
        ErrorKind::Unknown,
        ErrorKind::UsageLimit,
    ];

    /// Whether running the same task again later may succeed without anyone changing
    /// anything: capacity and transport problems are, everything else is not.
    pub fn is_retryable(self) -> bool {
        match self {
            ErrorKind::RateLimit
            | ErrorKind::UsageLimit
            | ErrorKind::Overloaded
            | ErrorKind::ServerError
            | ErrorKind::Network => true,
            ErrorKind::Auth
            | ErrorKind::BadRequest
            | ErrorKind::MaxTurns
            | ErrorKind::Budget
            | ErrorKind::InvalidResume
            | ErrorKind::Permission
            | ErrorKind::Timeout
            | ErrorKind::Cancelled
            | ErrorKind::NotInstalled
            | ErrorKind::Crashed
            | ErrorKind::Protocol
            | ErrorKind::Unknown => false,
        }
    }

    /// Whether this kind means "the vendor asks us to slow down": the pool backs off and
    /// lowers its parallelism for these, and retries the task.
    pub fn is_backoff(self) -> bool {
        match self {
            ErrorKind::RateLimit | ErrorKind::Overloaded => true,
            ErrorKind::UsageLimit
            | ErrorKind::Auth
            | ErrorKind::ServerError
            | ErrorKind::Network
            | ErrorKind::BadRequest
            | ErrorKind::MaxTurns
            | ErrorKind::Budget
            | ErrorKind::InvalidResume
            | ErrorKind::Permission
            | ErrorKind::Timeout
            | ErrorKind::Cancelled
            | ErrorKind::NotInstalled
            | ErrorKind::Crashed
            | ErrorKind::Protocol
            | ErrorKind::Unknown => false,
        }
    }

    /// The serialized name (`rate_limit`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth",
            ErrorKind::RateLimit => "rate_limit",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::ServerError => "server_error",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Network => "network",
            ErrorKind::MaxTurns => "max_turns",
            ErrorKind::Budget => "budget",
            ErrorKind::InvalidResume => "invalid_resume",
            ErrorKind::Permission => "permission",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::NotInstalled => "not_installed",
            ErrorKind::Crashed => "crashed",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Unknown => "unknown",
            ErrorKind::UsageLimit => "usage_limit",
        }
    }

    /// The kind an HTTP status of a model API maps to, where it says anything.
    pub fn from_http_status(status: u16) -> Option<ErrorKind> {
        Some(match status {
            401 => ErrorKind::Auth,
            403 => ErrorKind::Permission,
            429 => ErrorKind::RateLimit,
            529 | 503 => ErrorKind::Overloaded,
            400 | 404 | 413 | 422 => ErrorKind::BadRequest,
            500..=599 => ErrorKind::ServerError,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors a provider returns when asked to act (find its binary, build an argv).
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The CLI's binary is not on PATH, not at the configured path, and npx is missing.
    #[error(
        "{binary} is not installed (looked in {looked_in} and aicli's cache); install it with `aicli install`, or: npm install -g {package}"
    )]
    NotInstalled {
        /// The binary name that was searched for.
        binary: String,
        /// The npm package that provides it.
        package: String,
        /// Where aicli looked, for the message.
        looked_in: String,
    },
    /// The configured `binary_path` does not exist or is not executable.
    #[error(
        "binary_path {path} for provider {provider} does not exist or is not executable; fix binary_path, or remove it and install the CLI with `aicli install {provider}` (or: npm install -g {package})"
    )]
    BadBinaryPath {
        /// The provider whose config named the path.
        provider: String,
        /// The configured path.
        path: PathBuf,
        /// The npm package (with its pinned version) that provides the CLI.
        package: String,
    },
    /// The task asks for something this provider cannot do.
    #[error("provider {provider} does not support {what}")]
    Unsupported {
        /// The provider's name.
        provider: String,
        /// What was asked for.
        what: String,
    },
    /// The run may spend nothing: its budget (the task's limit, or its reservation of
    /// the batch budget) is 0, and the CLI would read a 0 cap as "no limit".
    #[error("no budget for this run of {provider}: {message}")]
    NoBudget {
        /// The provider's name.
        provider: String,
        /// Which limit is 0.
        message: String,
    },
    /// The config names an executable (for an environment variable) that is not found.
    #[error(
        "provider {provider} sets {var} to the path of `{binary}`, which is not on {looked_in} nor in aicli's cache: install it (`aicli install`), or set {var} in the provider's env"
    )]
    MissingExecutable {
        /// The provider's name.
        provider: String,
        /// The variable.
        var: String,
        /// The executable's name.
        binary: String,
        /// Where aicli looked, for the message.
        looked_in: String,
    },
    /// The task spec is invalid for this provider.
    #[error("invalid task for provider {provider}: {message}")]
    InvalidTask {
        /// The provider's name.
        provider: String,
        /// What is wrong.
        message: String,
    },
}

impl ProviderError {
    /// The error kind a run that failed with this error ends with.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProviderError::NotInstalled { .. }
            | ProviderError::BadBinaryPath { .. }
            | ProviderError::MissingExecutable { .. } => ErrorKind::NotInstalled,
            ProviderError::Unsupported { .. } | ProviderError::InvalidTask { .. } => {
                ErrorKind::BadRequest
            }
            ProviderError::NoBudget { .. } => ErrorKind::Budget,
        }
    }
}

/// Errors from loading or validating the provider config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("config {origin} is not valid JSON: {source}")]
    Syntax {
        /// The file (or "built-in defaults").
        origin: String,
        /// The parse error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON does not have the expected shape at some path.
    #[error("config {origin}: at {json_path}: {message}")]
    Shape {
        /// The file (or "built-in defaults").
        origin: String,
        /// Where in the document, e.g. `providers.claude.max_turns`.
        json_path: String,
        /// What was expected.
        message: String,
    },
    /// The JSON parsed but says something impossible.
    #[error("config {origin}: at {json_path}: {message}")]
    Invalid {
        /// The file (or "built-in defaults").
        origin: String,
        /// Where in the document.
        json_path: String,
        /// What is wrong.
        message: String,
    },
    /// A provider name that no registered adapter knows.
    #[error("unknown provider '{name}'; known providers: {}", known.join(", "))]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// A config entry names an adapter that is not registered.
    #[error("config {origin}: at providers.{provider}.adapter: unknown adapter \"{adapter}\" (known: {})", known.join(", "))]
    UnknownAdapter {
        /// The file (or "built-in defaults").
        origin: String,
        /// The provider entry.
        provider: String,
        /// The adapter it names.
        adapter: String,
        /// The adapters that exist.
        known: Vec<String>,
    },
    /// A new config entry names an adapter that is not built in, so it has no built-in
    /// entry's defaults to start from, and it is not complete without them (an adapter a
    /// library registers itself needs a complete entry).
    #[error("config {origin}: at providers.{provider}.adapter: unknown adapter \"{adapter}\" (known: {}); an entry for an adapter registered by a library must be complete: {message}", known.join(", "))]
    UnknownAdapterIncomplete {
        /// The file.
        origin: String,
        /// The provider entry.
        provider: String,
        /// The adapter it names.
        adapter: String,
        /// The built-in adapters ([`crate::config::BUILTIN_ADAPTERS`]).
        known: Vec<String>,
        /// What the entry lacks (serde's message, e.g. "missing field `package`").
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_to_the_documented_names() {
        let names: Vec<String> = ErrorKind::ALL
            .iter()
            .map(|k| serde_json::to_value(k).map(|v| v.as_str().unwrap_or_default().to_owned()))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(
            names,
            [
                "auth",
                "rate_limit",
                "overloaded",
                "server_error",
                "bad_request",
                "network",
                "max_turns",
                "budget",
                "invalid_resume",
                "permission",
                "timeout",
                "cancelled",
                "not_installed",
                "crashed",
                "protocol",
                "unknown",
                "usage_limit"
            ]
        );
        for k in ErrorKind::ALL {
            assert_eq!(k.as_str(), k.to_string());
        }
    }

    #[test]
    fn only_capacity_and_transport_errors_are_retryable() {
        let retryable: Vec<_> = ErrorKind::ALL
            .into_iter()
            .filter(|k| k.is_retryable())
            .collect();
        assert_eq!(
            retryable,
            [
                ErrorKind::RateLimit,
                ErrorKind::Overloaded,
                ErrorKind::ServerError,
                ErrorKind::Network,
                ErrorKind::UsageLimit
            ]
        );
        assert!(ErrorKind::RateLimit.is_backoff());
        assert!(!ErrorKind::ServerError.is_backoff());
    }

    #[test]
    fn http_statuses_map_to_kinds() {
        assert_eq!(ErrorKind::from_http_status(401), Some(ErrorKind::Auth));
        assert_eq!(ErrorKind::from_http_status(429), Some(ErrorKind::RateLimit));
        assert_eq!(
            ErrorKind::from_http_status(529),
            Some(ErrorKind::Overloaded)
        );
        assert_eq!(
            ErrorKind::from_http_status(503),
            Some(ErrorKind::Overloaded)
        );
        assert_eq!(
            ErrorKind::from_http_status(500),
            Some(ErrorKind::ServerError)
        );
        assert_eq!(
            ErrorKind::from_http_status(400),
            Some(ErrorKind::BadRequest)
        );
        assert_eq!(ErrorKind::from_http_status(200), None);
    }
}
