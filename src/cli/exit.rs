//! Exit codes.
//!
//! One rule for every command:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (every task succeeded) |
//! | 1 | aicli itself failed (I/O, a bug, a missing prerequisite such as npm) |
//! | 2 | bad usage or input (arguments, config, tasks file, repository, unknown provider, task or batch, a refused answer) |
//! | 3 | blocked: a task waits on a question (`aicli answer`), and none failed |
//! | 4 | a batch (`batch`, `resume`, `demo`) finished with failed tasks |
//! | 5 | interrupted (Ctrl-C): `aicli resume BATCH` finishes it |
//! | 10-25 | the one task of `run` / `answer` failed; the code says its error kind (see [`kind_code`]) |

use std::process::ExitCode;

use crate::providers::ErrorKind;

/// A run that ended badly, to report and exit with.
#[derive(Debug)]
pub struct Failure {
    /// Why.
    pub kind: Option<ErrorKind>,
    /// In words.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Some(k) => write!(f, "{k}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Failure {}

impl Failure {
    /// The process exit code: the kind's, or 2 (bad usage or input) without one.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.kind.map(kind_code).unwrap_or(2))
    }
}

/// `auth` 10, `rate_limit` 11, `overloaded` 12, `server_error` 13, `bad_request` 14,
/// `network` 15, `max_turns` 16, `budget` 17, `invalid_resume` 18, `permission` 19,
/// `timeout` 20, `cancelled` 21, `not_installed` 22, `crashed` 23, `protocol` 24,
/// `unknown` 25, `usage_limit` 26.
pub fn kind_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Auth => 10,
        ErrorKind::RateLimit => 11,
        ErrorKind::Overloaded => 12,
        ErrorKind::ServerError => 13,
        ErrorKind::BadRequest => 14,
        ErrorKind::Network => 15,
        ErrorKind::MaxTurns => 16,
        ErrorKind::Budget => 17,
        ErrorKind::InvalidResume => 18,
        ErrorKind::Permission => 19,
        ErrorKind::Timeout => 20,
        ErrorKind::Cancelled => 21,
        ErrorKind::NotInstalled => 22,
        ErrorKind::Crashed => 23,
        ErrorKind::Protocol => 24,
        ErrorKind::Unknown => 25,
        ErrorKind::UsageLimit => 26,
    }
}

/// Exit code of a blocked task.
pub const BLOCKED: u8 = 3;

/// Exit code of a batch with failed tasks.
pub const SOME_FAILED: u8 = 4;

/// Exit code of interrupted work (Ctrl-C).
pub const INTERRUPTED: u8 = 5;
