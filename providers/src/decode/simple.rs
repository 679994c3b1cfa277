//! A whole decoder for CLIs whose lines each map to events on their own.

use super::{Decoder, Events, ExitStatus, Line, Tally, text_of};
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::SessionResult;
use crate::shared::text::push_capped;
use crate::usage::CanonicalUsage;

/// A whole decoder for a CLI whose lines each map to events on their own: `parse` turns
/// one line of text into its event kinds (or says what is wrong with it), the fold does
/// the rest. The response is the assistant text (chunks joined, whole messages separated
/// by a blank line), the usage the sum of the [`EventKind::Usage`] events (or of the
/// final events' usage when the CLI reports it only there), the cost an estimate at
/// `prices`, success the last final event's; a run without one is classified by
/// [`Tally::classify_without_final`], with `auth` reading stderr.
pub struct SimpleDecoder<F> {
    name: String,
    prices: crate::usage::PriceTable,
    model: Option<String>,
    parse: F,
    auth: fn(&str) -> Option<String>,
    tally: Tally,
    text: String,
    prev_delta: bool,
    verdict: Option<(bool, Option<ErrorKind>, Option<String>)>,
}

impl<F> SimpleDecoder<F>
where
    F: FnMut(&str) -> Result<Vec<EventKind>, String> + Send,
{
    /// A decoder for provider `name` with `config`'s prices; `model` is the model the
    /// run asked for (a session start that names one wins).
    pub fn new(
        name: &str,
        config: &crate::config::ProviderConfig,
        model: Option<String>,
        parse: F,
        auth: fn(&str) -> Option<String>,
    ) -> SimpleDecoder<F> {
        SimpleDecoder {
            name: name.to_owned(),
            prices: config.prices.clone(),
            model,
            parse,
            auth,
            tally: Tally::default(),
            text: String::new(),
            prev_delta: false,
            verdict: None,
        }
    }
}

impl<F> Decoder for SimpleDecoder<F>
where
    F: FnMut(&str) -> Result<Vec<EventKind>, String> + Send,
{
    fn decode(&mut self, line: Line<'_>, events: &mut Vec<AgentEvent>) {
        let Some(text) = text_of(line, &mut self.tally, events) else {
            return;
        };
        let mut events = Events::new(text, events);
        let kinds = match (self.parse)(text) {
            Ok(k) => k,
            Err(message) => {
                events.protocol(message);
                return events.fold(&mut self.tally);
            }
        };
        for k in kinds {
            match &k {
                EventKind::SessionStarted { model: Some(m), .. } => self.model = Some(m.clone()),
                EventKind::AssistantText { text, delta } => {
                    if !(self.text.is_empty() || *delta && self.prev_delta) {
                        push_capped(&mut self.text, "\n\n");
                    }
                    push_capped(&mut self.text, text);
                    self.prev_delta = *delta;
                }
                EventKind::Final {
                    success,
                    error_kind,
                    error,
                    usage,
                    ..
                } => {
                    self.verdict = Some((*success, *error_kind, error.clone()));
                    if let Some(u) = usage
                        && self.tally.reported.is_empty()
                    {
                        let model = self.model.clone();
                        events.extend(self.tally.usage_event(model.as_deref(), *u));
                    }
                }
                EventKind::SessionStarted { .. }
                | EventKind::UserMessage { .. }
                | EventKind::Thinking { .. }
                | EventKind::ToolCall { .. }
                | EventKind::ToolResult { .. }
                | EventKind::Usage { .. }
                | EventKind::Status { .. }
                | EventKind::Plan { .. }
                | EventKind::Subtask { .. }
                | EventKind::Hook { .. }
                | EventKind::Retry { .. }
                | EventKind::RateLimit { .. }
                | EventKind::PermissionDenied { .. }
                | EventKind::Error { .. }
                | EventKind::Log { .. }
                | EventKind::Question { .. }
                | EventKind::Protocol { .. }
                | EventKind::Unknown { .. } => {}
            }
            events.push(k);
        }
        events.fold(&mut self.tally);
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.verdict.is_some()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let mut r = self.tally.result(&self.name);
        r.exit_code = exit.code();
        r.model = self.model.clone();
        r.response = self.text.clone();
        r.canonical_usage = self.tally.usage();
        for (m, u) in &self.tally.reported {
            if let Some(m) = m {
                r.usage_by_model.insert(m.clone(), *u);
            }
        }
        r.set_cost(crate::usage::Cost::estimated(self.prices.estimate_run(
            self.model.as_deref(),
            &r.usage_by_model,
            &r.canonical_usage,
        )));
        match &self.verdict {
            Some((true, _, _)) => r.succeed(),
            Some((false, kind, error)) => r.fail(
                kind.unwrap_or(ErrorKind::Unknown),
                error
                    .clone()
                    .unwrap_or_else(|| format!("{} reported an error", self.name)),
            ),
            None => {
                let (k, m) = self.tally.classify_without_final(
                    &self.name,
                    stderr,
                    exit,
                    (self.auth)(stderr),
                );
                r.fail(k, m);
            }
        }
        super::tally::settle_usage_limit(&mut r, self.tally.rejected.as_ref());
        r
    }
}
