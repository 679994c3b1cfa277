//! The part of a decoder's fold every vendor shares.

use std::collections::BTreeMap;

use super::ExitStatus;
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{SessionResult, SessionStatus};
use crate::shared::text::stderr_last_line;
use crate::usage::CanonicalUsage;

/// The part of a decoder's fold every vendor shares: session id, model, tool calls,
/// protocol errors, the errors seen, whether the stream was this vendor's at all, and
/// the usage reported so far (for the [`EventKind::Usage`] increments).
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// The first session id seen.
    pub session_id: Option<String>,
    /// The model from the session start.
    pub model: Option<String>,
    /// The CLI version from the session start.
    pub cli_version: Option<String>,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Tool calls the CLI refused (a [`EventKind::PermissionDenied`]), by call id where
    /// given: a refusal and the error result that carries it count once.
    pub refused: Vec<Option<String>>,
    /// Tool calls that ran and failed (an error result of a call not refused).
    pub tool_calls_failed: u32,
    /// Protocol events.
    pub protocol_errors: u32,
    /// Events that say something (everything but protocol, unknown, log, question).
    pub recognized: u64,
    /// Lines of this vendor's types that the decoder does not read (`system/<new>`).
    pub own_unknown: u64,
    /// JSON lines of types the vendor never prints, and the first few of those types.
    pub foreign: (u64, Vec<String>),
    /// The last fatal error event.
    pub fatal_error: Option<(ErrorKind, String)>,
    /// The last error or retry event of any kind.
    pub last_error: Option<(ErrorKind, String)>,
    /// Whether nothing but unknown lines and statuses came after `last_error`.
    pub last_error_trailing: bool,
    /// Retry events.
    pub retries: u32,
    /// Non-fatal error events (the first [`Tally::WARNINGS_KEPT`]).
    pub warnings: Vec<String>,
    /// Final events.
    pub finals: u32,
    /// Usage given in [`EventKind::Usage`] events so far, by model (`None`: unnamed).
    pub reported: BTreeMap<Option<String>, CanonicalUsage>,
    /// The last rate-limit state the CLI reported as `rejected`: its reset (Unix
    /// seconds) and window, where given.
    pub rejected: Option<(Option<i64>, Option<String>)>,
}

impl Tally {
    /// How many warnings are kept for the result.
    pub const WARNINGS_KEPT: usize = 100;

    /// Folds one event.
    pub fn see(&mut self, ev: &AgentEvent) {
        let mut substantive = true;
        let mut counts = true;
        match &ev.kind {
            EventKind::SessionStarted {
                session_id,
                model,
                cli_version,
                ..
            } => {
                if self.session_id.is_none() && !session_id.is_empty() {
                    self.session_id = Some(session_id.clone());
                }
                if self.model.is_none() {
                    self.model = model.clone();
                }
                if self.cli_version.is_none() {
                    self.cli_version = cli_version.clone();
                }
            }
            EventKind::ToolCall { .. } => self.tool_calls += 1,
            EventKind::PermissionDenied { tool_call_id, .. } => {
                if tool_call_id.is_none() || !self.refused.contains(tool_call_id) {
                    self.refused.push(tool_call_id.clone());
                }
            }
            EventKind::ToolResult {
                id, is_error: true, ..
            } if !self
                .refused
                .iter()
                .any(|r| r.as_deref() == Some(id.as_str())) =>
            {
                self.tool_calls_failed += 1;
            }
            EventKind::Error {
                error_kind,
                message,
                fatal,
                ..
            } => {
                if *fatal {
                    set(&mut self.fatal_error, *error_kind, message);
                } else if self.warnings.len() < Self::WARNINGS_KEPT {
                    self.warnings.push(message.clone());
                }
                set(&mut self.last_error, *error_kind, message);
                self.last_error_trailing = true;
                substantive = false;
            }
            EventKind::Retry {
                error_kind,
                message,
                ..
            } => {
                self.retries += 1;
                set(&mut self.last_error, *error_kind, message);
                self.last_error_trailing = true;
                substantive = false;
            }
            EventKind::Final { .. } => self.finals += 1,
            EventKind::Protocol { .. } => {
                self.protocol_errors += 1;
                counts = false;
            }
            EventKind::Unknown { .. } | EventKind::Log { .. } | EventKind::Question { .. } => {
                counts = false;
                substantive = false;
            }
            EventKind::Status { .. } => substantive = false,
            EventKind::UserMessage { .. }
            | EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolResult { .. }
            | EventKind::Usage { .. }
            | EventKind::Plan { .. }
            | EventKind::Subtask { .. }
            | EventKind::Hook { .. } => {}
            EventKind::RateLimit {
                status,
                resets_at,
                limit_type,
            } => {
                if status == "rejected" {
                    self.rejected = Some((*resets_at, limit_type.clone()));
                }
            }
        }
        if counts {
            self.recognized += 1;
        }
        if substantive {
            self.last_error_trailing = false;
        }
    }

    /// Notes a JSON line of a type the vendor never prints.
    pub fn foreign_line(&mut self, vendor_type: Option<&str>) {
        self.foreign.0 += 1;
        let t = vendor_type.unwrap_or("(no type)");
        if self.foreign.1.len() < 5 && !self.foreign.1.iter().any(|x| x == t) {
            self.foreign.1.push(t.to_owned());
        }
    }

    /// Whether the stream looks like another CLI's: JSON lines of types this vendor
    /// never prints, and nothing it does.
    pub fn looks_foreign(&self) -> bool {
        self.foreign.0 > 0 && self.recognized == 0 && self.own_unknown == 0
    }

    /// A Usage event for `usage` used by `model` (recorded as reported); `None` when
    /// the increment is zero.
    pub fn usage_event(&mut self, model: Option<&str>, usage: CanonicalUsage) -> Option<EventKind> {
        if usage.is_zero() {
            return None;
        }
        match self.reported_mut(model) {
            Some(r) => *r += usage,
            None => {
                self.reported.insert(model.map(str::to_owned), usage);
            }
        }
        Some(EventKind::Usage {
            usage,
            model: model.map(str::to_owned),
        })
    }

    /// Pushes to `out` the Usage events that bring what was reported up to the run's
    /// figures so far: `by_model` per model, and `total` for what no model claims. Never
    /// negative.
    pub fn catch_up(
        &mut self,
        by_model: &BTreeMap<String, CanonicalUsage>,
        total: &CanonicalUsage,
        out: &mut impl Extend<EventKind>,
    ) {
        for (m, u) in by_model {
            let before = self
                .reported_mut(Some(m))
                .map_or_else(Default::default, |r| *r);
            out.extend(self.usage_event(Some(m), u.saturating_sub(&before)));
        }
        let reported = self.usage();
        out.extend(self.usage_event(None, total.saturating_sub(&reported)));
    }

    /// What was reported for `model` (a scan: a run names a handful of models, and a
    /// lookup by key would copy the name).
    fn reported_mut(&mut self, model: Option<&str>) -> Option<&mut CanonicalUsage> {
        self.reported
            .iter_mut()
            .find(|(k, _)| k.as_deref() == model)
            .map(|(_, v)| v)
    }

    /// The sum of the usage reported so far.
    pub fn usage(&self) -> CanonicalUsage {
        self.reported
            .values()
            .fold(CanonicalUsage::default(), |a, u| a + *u)
    }

    /// A result with the shared facts filled in and the status still undecided.
    pub fn result(&self, provider: &str) -> SessionResult {
        SessionResult {
            provider: provider.to_owned(),
            session_id: self.session_id.clone(),
            model: self.model.clone(),
            cli_version: self.cli_version.clone(),
            tool_calls: self.tool_calls,
            tool_calls_refused: self.refused.len() as u32,
            tool_calls_failed: self.tool_calls_failed,
            protocol_errors: self.protocol_errors,
            status: SessionStatus::Failed,
            ..SessionResult::default()
        }
    }

    /// Why a run that printed no final event failed, when nothing vendor-specific says:
    /// an auth failure, else the last fatal error, else a protocol problem (nothing
    /// recognised, or malformed lines), else a retryable error it was still retrying,
    /// else a crash.
    pub fn classify_without_final(
        &self,
        vendor: &str,
        stderr: &str,
        exit: ExitStatus,
        auth_error: Option<String>,
    ) -> (ErrorKind, String) {
        if let Some(msg) = auth_error {
            return (ErrorKind::Auth, msg);
        }
        if let Some((k, m)) = &self.fatal_error {
            return (*k, m.clone());
        }
        let tail = stderr_last_line(stderr)
            .map(|l| format!("; stderr: {l}"))
            .unwrap_or_default();
        let exit_words = exit.in_parens();
        if self.recognized == 0 && self.protocol_errors > 0 {
            let exit = match exit {
                ExitStatus::Code(c) => format!("; exit code {c}"),
                ExitStatus::Signal => "; killed by a signal".to_owned(),
                ExitStatus::Unknown => String::new(),
            };
            return (
                ErrorKind::Protocol,
                format!(
                    "no line was a valid {vendor} event ({} malformed or over-long lines{exit}){tail}",
                    self.protocol_errors
                ),
            );
        }
        if self.recognized == 0 && self.session_id.is_none() {
            return (
                ErrorKind::Crashed,
                format!("the CLI ended without any {vendor} event{exit_words}{tail}"),
            );
        }
        if self.protocol_errors > 0 {
            return (
                ErrorKind::Protocol,
                format!(
                    "the stream ended without a final event after {} malformed or over-long lines{exit_words}{tail}",
                    self.protocol_errors,
                ),
            );
        }
        if let Some((k, m)) = &self.last_error
            && k.is_retryable()
        {
            return (
                *k,
                format!(
                    "{m} (the CLI ended without a final event{})",
                    exit.after_comma()
                ),
            );
        }
        (
            ErrorKind::Crashed,
            format!("the CLI ended without a final event{exit_words}{tail}"),
        )
    }

    /// The message for a foreign stream.
    pub fn foreign_message(&self, vendor: &str) -> String {
        format!(
            "the stream is not {vendor}'s: {} JSON lines of types it never prints ({}); was it recorded from another CLI?",
            self.foreign.0,
            self.foreign.1.join(", ")
        )
    }
}

/// Sets `slot` to `(kind, message)`, reusing its allocation.
fn set(slot: &mut Option<(ErrorKind, String)>, kind: ErrorKind, message: &str) {
    match slot {
        Some((k, m)) => {
            *k = kind;
            m.clear();
            m.push_str(message);
        }
        None => *slot = Some((kind, message.to_owned())),
    }
}

/// Makes a run that failed at a subscription's usage limit say so: `usage_limit` with
/// its reset (see [`crate::shared::usage_limit`]), instead of the plain rate limit (or
/// unknown failure) the vendor's classification found. `rejected` is the tally's.
pub fn settle_usage_limit(r: &mut SessionResult, rejected: Option<&(Option<i64>, Option<String>)>) {
    let candidate = matches!(
        r.error_kind,
        Some(ErrorKind::RateLimit | ErrorKind::Unknown | ErrorKind::UsageLimit)
    );
    if r.success || !candidate {
        return;
    }
    let rejected = rejected.map(|(t, w)| (*t, w.as_deref()));
    let text = r.error.as_deref().unwrap_or_default();
    let local = jiff::tz::TimeZone::system();
    if let Some(limit) =
        crate::shared::usage_limit::detect(rejected, text, jiff::Timestamp::now(), &local)
    {
        r.error_kind = Some(ErrorKind::UsageLimit);
        r.usage_limit = Some(limit);
    }
}
