//! How a run ended, and what that makes of its result: the decoder says what the CLI
//! reported; a limit, a cancel or the budget that cut the CLI off before its last word
//! says why, keeping what the CLI had reported before it.

use std::time::Duration;

use aicli_providers::{ErrorKind, SessionResult, SessionStatus};

use super::RunLimits;

/// Why supervision stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndReason {
    /// stdout reached EOF.
    Eof,
    /// The CLI exited; its stdout stayed open past the pipe grace.
    Exited,
    /// The CLI said its last word and the final grace passed.
    Final,
    /// The batch budget stopped the run.
    Budget,
    /// The wall-clock limit.
    WallTimeout,
    /// The idle watchdog.
    IdleTimeout,
    /// A cancel.
    Cancelled,
}

/// What the supervisor knew at the end, besides the result.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ending<'a> {
    pub reason: EndReason,
    /// The CLI said its last word.
    pub saw_final: bool,
    /// A two-way CLI was asked to end its turn for the budget.
    pub asked_to_stop_for_budget: bool,
    pub exit_code: Option<i32>,
    pub limits: &'a RunLimits,
    /// Why the budget stopped the run, when it did.
    pub budget_reason: Option<&'a str>,
}

/// Applies how the run ended to the decoder's `result`.
pub(super) fn apply(result: &mut SessionResult, e: Ending<'_>) {
    let secs = |d: Duration| d.as_secs();
    match e.reason {
        EndReason::Cancelled if !e.saw_final => {
            result.fail(ErrorKind::Cancelled, "the run was cancelled")
        }
        EndReason::WallTimeout if !e.saw_final => result.fail(
            ErrorKind::Timeout,
            format!(
                "wall-clock timeout: the run took longer than {}s{}",
                secs(e.limits.timeout),
                last_words(result, e.exit_code)
            ),
        ),
        EndReason::IdleTimeout if !e.saw_final => result.fail(
            ErrorKind::Timeout,
            format!(
                "idle watchdog: no output for {}s{}",
                secs(e.limits.idle_timeout),
                last_words(result, e.exit_code)
            ),
        ),
        // (A two-way CLI asked to stop for the budget ends its turn as cancelled.)
        EndReason::Budget
            if !e.saw_final
                || (e.asked_to_stop_for_budget
                    && result.error_kind == Some(ErrorKind::Cancelled)) =>
        {
            result.fail(
                ErrorKind::Budget,
                format!(
                    "stopped by the budget: {}",
                    e.budget_reason.unwrap_or("the budget was reached")
                ),
            )
        }
        EndReason::Cancelled
        | EndReason::Budget
        | EndReason::WallTimeout
        | EndReason::IdleTimeout
        | EndReason::Eof
        | EndReason::Exited
        | EndReason::Final => {}
    }
    result.exit_code = e.exit_code;
}

/// A run the user cancelled (Ctrl-C) is not an outcome of its task: `interrupted`, for
/// `aicli resume` to run again (resuming its session when it has one). (A run the budget
/// stopped says `budget`.)
pub(super) fn cancelled_is_interrupted(result: &mut SessionResult) {
    if result.error_kind == Some(ErrorKind::Cancelled) {
        result.status = SessionStatus::Interrupted;
    }
}

/// What followed the limit, in order: what the CLI had reported before it (when the
/// provider classified something other than the exit aicli's own kill caused), then
/// that aicli stopped it (with the exit code the kill produced).
fn last_words(r: &SessionResult, exit_code: Option<i32>) -> String {
    let stopped = match exit_code {
        Some(c) => format!("; aicli then stopped the CLI (it exited with code {c})"),
        None => "; aicli then stopped the CLI".to_owned(),
    };
    match (&r.error_kind, &r.error) {
        (Some(ErrorKind::Crashed), _) | (None, _) => stopped,
        (Some(k), Some(m)) if !m.is_empty() => {
            format!(", after the CLI had reported {k}: {m}{stopped}")
        }
        (Some(_), _) => stopped,
    }
}
