//! The run's [`SessionResult`] from the Codex fold.

use serde_json::json;

use super::classify::rejected_argv;
use super::decode::CodexDecoder;
use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::result::{SessionResult, SessionTotals};
use crate::usage::Cost;

/// The run's result.
pub(super) fn finish(d: CodexDecoder, stderr: &str, exit: ExitStatus) -> SessionResult {
    let mut r = d.tally.result(&d.provider.name);
    r.exit_code = exit.code();
    r.model = d.model();
    r.response = d.response.clone().unwrap_or_default();
    r.tool_calls = d.tool_calls;
    r.provider_data = json!({
        "warnings": d.tally.warnings,
        "retries": d.tally.retries,
        "completed_items": d.completed_items,
    });
    if let Some(cumulative) = d.cumulative {
        let run = d.per_run(cumulative);
        r.canonical_usage = run;
        if let Some(m) = &r.model {
            r.usage_by_model.insert(m.clone(), run);
        }
        r.session_totals = Some(SessionTotals {
            usage: cumulative,
            cost_usd: None,
        });
        let usd = r
            .model
            .as_deref()
            .and_then(|m| d.provider.config.prices.get(m))
            .map(|price| price.cost(&run));
        r.set_cost(Cost::estimated(usd));
    }
    match (&d.failed, d.completed) {
        (Some((kind, message)), _) => r.fail(*kind, message.clone()),
        (None, true) => r.succeed(),
        (None, false) => {
            let (kind, message) = classify_unfinished(&d, stderr, exit);
            r.fail(kind, message);
        }
    }
    r
}

/// Why a run without `turn.completed` / `turn.failed` failed.
fn classify_unfinished(d: &CodexDecoder, stderr: &str, exit: ExitStatus) -> (ErrorKind, String) {
    let t = &d.tally;
    if t.looks_foreign() {
        return (
            ErrorKind::Protocol,
            format!(
                "not a Codex stream: {} JSON lines of types `codex exec --json` never prints (first: `{}`) and no thread.started, turn.* or item.* event",
                t.foreign.0,
                t.foreign.1.first().map_or("(no type)", String::as_str)
            ),
        );
    }
    if let Some(line) = stderr
        .lines()
        .find(|l| super::RESUME_FAILED.iter().any(|m| l.contains(m)))
    {
        return (ErrorKind::InvalidResume, line.trim().to_owned());
    }
    // Its own limits on the input (codex 0.171: "Input exceeds the maximum length of
    // 1048576 characters. (code -32602), data: {\"input_error_code\":\"input_too_large\"…").
    if let Some(line) = stderr
        .lines()
        .find(|l| l.contains("input_too_large") || l.contains("Input exceeds the maximum length"))
    {
        let line = line.trim();
        let line = line.strip_prefix("Error: ").unwrap_or(line);
        return (
            ErrorKind::BadRequest,
            format!("codex refused the prompt: {line}"),
        );
    }
    if let Some(line) = rejected_argv(stderr) {
        return (
            ErrorKind::BadRequest,
            format!("codex rejected its arguments: {line}"),
        );
    }
    // The last failure decides auth for a run cut off while retrying a 401.
    let auth = if let Some((ErrorKind::Auth, message)) = &t.last_error {
        Some(message.clone())
    } else {
        super::stderr_auth_error(stderr)
    };
    // Only a failure the stream ended on says why it ended: retries the CLI recovered
    // from earlier do not.
    let mut t = t.clone();
    if !t.last_error_trailing {
        t.last_error = None;
    }
    if auth.is_none()
        && t.fatal_error.is_none()
        && t.protocol_errors == 0
        && let Some((kind, last)) = &t.last_error
        && kind.is_retryable()
    {
        // Codex never gives up on a network failure by itself: it was stopped.
        return (
            *kind,
            format!(
                "{last} (codex was still retrying after {} retry notices when the run ended without a final event{})",
                t.retries,
                match exit {
                    ExitStatus::Code(c) => format!(", exit code {c}"),
                    ExitStatus::Signal => ", killed by a signal".to_owned(),
                    ExitStatus::Unknown => String::new(),
                }
            ),
        );
    }
    t.classify_without_final("Codex", stderr, exit, auth)
}
