//! The run's [`SessionResult`] from the Gemini fold.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::classify::{
    ApiError, ApiRetries, Exit, SETTINGS_SKIPPED, classify, http_kind, input_kind, stderr_detail,
    stderr_lines,
};
use super::decode::{GeminiDecoder, stats_usage, tokens_usage};
use super::wire::ResultVerbatim;
use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::result::SessionResult;
use crate::usage::{CanonicalUsage, Cost};

/// The run's result.
pub(super) fn finish(d: GeminiDecoder, stderr: &str, exit: ExitStatus) -> SessionResult {
    let mut r = d.tally.result(&d.provider.name);
    r.exit_code = exit.code();
    if r.model.is_none() {
        r.model = d.ctx.model.clone();
    }
    r.response = d.response.clone();
    let gexit = Exit::from_exit(exit);
    let mut data = Map::new();
    if !matches!(gexit, Exit::Ok | Exit::Unknown) {
        data.insert("exit_code_meaning".into(), gexit.describe().into());
    }
    if let Some(retries) = ApiRetries::from_stderr(stderr) {
        data.insert("api_retries".into(), json!(retries));
    }
    if let Some(skipped) = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix(SETTINGS_SKIPPED))
    {
        // A system settings file (the admin's, or one named by the task's env) that
        // Gemini refused to read: the run went without it.
        data.insert("settings_file_skipped".into(), skipped.trim().into());
    }
    if !d.tally.warnings.is_empty() {
        data.insert("warnings".into(), json!(d.tally.warnings));
    }
    match &d.result {
        Some(_) => apply_result_line(&d, &mut r, &mut data, gexit, stderr),
        None => {
            let (kind, message) = classify_without_result(&d, stderr, exit);
            r.fail(kind, message);
        }
    }
    r.provider_data = Value::Object(data);
    r
}

/// Fills `r` from the run's `result` line.
fn apply_result_line(
    d: &GeminiDecoder,
    r: &mut SessionResult,
    data: &mut Map<String, Value>,
    exit: Exit,
    stderr: &str,
) {
    let Some(res) = &d.result else { return };
    if let Some(stats) = &res.stats {
        if let Some(ResultVerbatim {
            stats: Some(raw), ..
        }) = crate::wire::verbatim(data, "result", &res.line)
        {
            data.insert("stats".into(), crate::wire::value_of(raw));
        }
        let mut usage = stats_usage(stats);
        usage.request_count = usage.request_count.max(d.requests(&usage));
        r.canonical_usage = usage;
        let per_model: BTreeMap<String, CanonicalUsage> = stats
            .models
            .iter()
            .map(|(m, t)| (m.clone(), tokens_usage(t)))
            .collect();
        let estimate = if per_model.is_empty() {
            // No per-model figures (gemini before 0.5x): the run totals, priced at the
            // model the run named, if it named one.
            match r.model.as_deref().filter(|m| *m != super::AUTO_MODEL) {
                Some(m) => {
                    r.usage_by_model.insert(
                        m.to_owned(),
                        CanonicalUsage {
                            request_count: 0,
                            ..usage
                        },
                    );
                    d.provider.config.prices.estimate([(m, &usage)])
                }
                None => usage.is_zero().then_some(0.0),
            }
        } else {
            d.provider
                .config
                .prices
                .estimate(per_model.iter().map(|(m, u)| (m.as_str(), u)))
        };
        if !per_model.is_empty() {
            r.usage_by_model = per_model;
        }
        r.set_cost(Cost::estimated(estimate));
    }
    let cli_ms = res
        .stats
        .as_ref()
        .map(|s| s.duration_ms.0)
        .filter(|ms| res.success || *ms > 0);
    let span = match (d.first_at, res.at()) {
        (Some(a), Some(b)) => u64::try_from(b - a).ok(),
        _ => None,
    };
    match cli_ms.or(span) {
        Some(ms) => {
            r.duration_ms = ms;
            let source = if cli_ms.is_some() {
                "stats"
            } else {
                "timestamps"
            };
            data.insert("duration_source".into(), source.into());
        }
        None => r.duration_ms = 0,
    }
    if res.success {
        r.succeed();
        return;
    }
    let (error_type, message) = match &res.error {
        Some(e) => (Some(e.kind.clone()), e.message.trim_end().to_owned()),
        // An invalid or empty model response: the reason is in the `error` event
        // before the result.
        None => (
            None,
            d.tally
                .fatal_error
                .as_ref()
                .map(|(_, m)| m.clone())
                .unwrap_or_else(|| {
                    "the CLI reported status \"error\" without saying why".to_owned()
                }),
        ),
    };
    let c = classify(error_type.as_deref(), &message, Some(exit), stderr);
    if let Some(t) = error_type {
        data.insert("error_type".into(), t.into());
    }
    if let Some(s) = c.http_status {
        data.insert("http_status".into(), s.into());
    }
    if let Some(api) = &c.api {
        data.insert("api_error".into(), json!(api));
    }
    if let Some(thrown) = &c.thrown {
        data.insert("stderr_error".into(), json!(thrown));
    }
    r.fail(c.kind, message);
}

/// Why a run that printed no `result` line failed: Gemini's exit code first (41, 42,
/// 53, 55, 130, an HTTP status), then a missing model, then the shape of the stream,
/// then stderr.
fn classify_without_result(
    d: &GeminiDecoder,
    stderr: &str,
    exit: ExitStatus,
) -> (ErrorKind, String) {
    let gexit = Exit::from_exit(exit);
    let detail = stderr_detail(stderr);
    let code = exit.in_parens();
    let with_detail = |what: &str| match &detail {
        Some(dt) => format!("{what}: {dt}{code}"),
        None if code.is_empty() => format!("{what} (nothing on stderr)"),
        None => format!(
            "{what} ({}, nothing on stderr)",
            code.trim_start_matches(" (").trim_end_matches(')')
        ),
    };
    match gexit {
        Exit::Auth => return (ErrorKind::Auth, with_detail("not authenticated")),
        Exit::Input => {
            let kind = input_kind(stderr);
            let what = if kind == ErrorKind::InvalidResume {
                "the session to resume does not exist"
            } else {
                "the CLI rejected its input"
            };
            return (kind, with_detail(what));
        }
        Exit::TurnLimit => return (ErrorKind::MaxTurns, with_detail("turn limit reached")),
        Exit::Untrusted => {
            return (
                ErrorKind::Permission,
                with_detail("the CLI refused to run in an untrusted directory"),
            );
        }
        Exit::Cancelled => return (ErrorKind::Cancelled, with_detail("cancelled")),
        Exit::TimedOut => {
            let mut m = "stopped by a time limit (exit code 124, as timeout(1) reports) \
                         before the CLI printed a result"
                .to_owned();
            if let Some(r) = ApiRetries::from_stderr(stderr) {
                m.push_str(&format!(
                    "; it was still retrying its API request ({} failed attempts, the last: {})",
                    r.failed_attempts, r.last_error
                ));
            }
            return (ErrorKind::Timeout, m);
        }
        Exit::Http(status) => {
            let api = ApiError::find(stderr);
            let kind = http_kind(status, api.as_ref(), stderr);
            return (
                kind,
                with_detail(&format!("the API answered HTTP {status}")),
            );
        }
        Exit::Sandbox | Exit::Config | Exit::ToolFatal => {
            return (ErrorKind::Unknown, with_detail(&gexit.describe()));
        }
        Exit::Ok | Exit::Other(_) | Exit::Signal | Exit::Unknown => {}
    }
    if let Some(line) = stderr_lines(stderr).find(|l| l.contains("ModelNotFoundError")) {
        // `-m` names a model the API does not have: exit 1, the error on stderr.
        return (
            ErrorKind::BadRequest,
            format!(
                "the model does not exist: {}",
                crate::shared::text::truncate_chars(line, 500)
            ),
        );
    }
    if d.tally.looks_foreign() {
        return (
            ErrorKind::Protocol,
            format!(
                "no line was a Gemini event ({} lines of another shape: another CLI's \
                 transcript?)",
                d.tally.foreign.0 + u64::from(d.tally.protocol_errors)
            ),
        );
    }
    let filtered: Vec<&str> = stderr_lines(stderr).collect();
    let auth = super::auth_from_stderr(stderr, exit);
    d.tally
        .classify_without_final(&d.provider.name, &filtered.join("\n"), exit, auth)
}
