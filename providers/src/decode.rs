//! The streaming decoder contract: one [`Decoder`] per run turns the CLI's lines into
//! events as they arrive and folds what the result needs; [`Decoder::finish`] gives the
//! [`SessionResult`]. [`Tally`] is the part of that fold every vendor shares.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{SessionResult, SessionStatus};
use crate::shared::text::stderr_last_line;
use crate::usage::CanonicalUsage;

/// How much of an over-long or non-UTF-8 line is kept in its protocol event.
pub const PROTOCOL_RAW_PREFIX: usize = 4096;

/// One line of a CLI's stdout, as the reader framed it.
#[derive(Debug, Clone, Copy)]
pub enum Line<'a> {
    /// A whole line without its `\n` (or the last bytes before EOF).
    Bytes(&'a [u8]),
    /// A line longer than the reader's cap: its size and the first bytes kept.
    Overlong {
        /// The line's length in bytes.
        len: u64,
        /// Its first bytes.
        prefix: &'a [u8],
        /// The cap it exceeded.
        cap: usize,
    },
}

impl<'a> From<&'a [u8]> for Line<'a> {
    fn from(b: &'a [u8]) -> Line<'a> {
        Line::Bytes(b)
    }
}

impl<'a> From<&'a str> for Line<'a> {
    fn from(s: &'a str) -> Line<'a> {
        Line::Bytes(s.as_bytes())
    }
}

impl<'a> Line<'a> {
    /// The line as text: `Ok(None)` for a blank line (a trailing `\r` is ignored),
    /// `Err` with a protocol event (which keeps the first 4 KiB) for a line over the cap
    /// or not UTF-8.
    pub fn text(self) -> Result<Option<&'a str>, Box<AgentEvent>> {
        match self {
            Line::Overlong { len, prefix, cap } => {
                let kept = &prefix[..PROTOCOL_RAW_PREFIX.min(prefix.len())];
                Err(Box::new(AgentEvent::protocol_with(
                    format!(
                        "line of {len} bytes exceeds the cap of {cap} bytes; kept its first {} bytes",
                        kept.len()
                    ),
                    len,
                    Arc::from(String::from_utf8_lossy(kept).as_ref()),
                )))
            }
            Line::Bytes(b) => {
                let b = b.strip_suffix(b"\r").unwrap_or(b);
                if b.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                match std::str::from_utf8(b) {
                    Ok(s) => Ok(Some(s)),
                    Err(e) => {
                        let kept = &b[..PROTOCOL_RAW_PREFIX.min(b.len())];
                        Err(Box::new(AgentEvent::protocol_with(
                            format!(
                                "line is not valid UTF-8 (invalid byte at offset {})",
                                e.valid_up_to()
                            ),
                            b.len() as u64,
                            Arc::from(String::from_utf8_lossy(kept).as_ref()),
                        )))
                    }
                }
            }
        }
    }
}

/// How the CLI process ended, as far as the caller knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal,
    /// Not known (a transcript parsed without its exit code).
    Unknown,
}

impl ExitStatus {
    /// From a process wait: `None` means a signal ended it.
    pub fn of_wait(code: Option<i32>) -> ExitStatus {
        code.map_or(ExitStatus::Signal, ExitStatus::Code)
    }

    /// The exit code, when there was one.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(c) => Some(c),
            ExitStatus::Signal | ExitStatus::Unknown => None,
        }
    }

    /// `" (exit code 1)"`, `" (killed by a signal)"`, or nothing when unknown.
    pub fn in_parens(self) -> String {
        match self {
            ExitStatus::Code(c) => format!(" (exit code {c})"),
            ExitStatus::Signal => " (killed by a signal)".to_owned(),
            ExitStatus::Unknown => String::new(),
        }
    }

    /// `", exit code 1"`, `", killed by a signal"`, or nothing.
    fn after_comma(self) -> String {
        match self {
            ExitStatus::Code(c) => format!(", exit code {c}"),
            ExitStatus::Signal => ", killed by a signal".to_owned(),
            ExitStatus::Unknown => String::new(),
        }
    }
}

/// Decodes one run of a CLI: made by [`crate::AiCliProvider::decoder`], fed every line
/// of the run's stdout in order, finished once.
///
/// A decoder keeps only what the result needs (ids, the response text, usage
/// accumulators, error facts), never the lines or the events: memory does not grow
/// with the stream, apart from the response text.
pub trait Decoder: Send {
    /// The events of one line. Never fails: a malformed line is a
    /// [`EventKind::Protocol`] event, a line of a type the vendor does not know
    /// [`EventKind::Unknown`]. Every event keeps the line in `raw`.
    fn line(&mut self, line: Line<'_>) -> Vec<AgentEvent>;

    /// The run's usage so far, per run, in the canonical meaning (the sum of the
    /// [`EventKind::Usage`] events given so far).
    fn usage(&self) -> CanonicalUsage;

    /// Whether the CLI has said its last word: the engine then gives it a short grace
    /// to exit before it shuts the run down. The default never says so (the engine
    /// waits for the CLI to exit).
    fn finished(&self) -> bool {
        false
    }

    /// The run's result, from what the lines said, the CLI's stderr and how it ended.
    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult;
}

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
            | EventKind::Hook { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. } => {}
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
        *self.reported.entry(model.map(str::to_owned)).or_default() += usage;
        Some(EventKind::Usage {
            usage,
            model: model.map(str::to_owned),
        })
    }

    /// The Usage events that bring what was reported up to the run's figures so far:
    /// `by_model` per model, and `total` for what no model claims. Never negative.
    pub fn catch_up(
        &mut self,
        by_model: &BTreeMap<String, CanonicalUsage>,
        total: &CanonicalUsage,
    ) -> Vec<EventKind> {
        let mut out = Vec::new();
        for (m, u) in by_model {
            let before = self
                .reported
                .get(&Some(m.clone()))
                .copied()
                .unwrap_or_default();
            out.extend(self.usage_event(Some(m), u.saturating_sub(&before)));
        }
        let reported = self.usage();
        out.extend(self.usage_event(None, total.saturating_sub(&reported)));
        out
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

/// The events of one line, each with the line as its `raw`, folded into `tally`.
pub fn events_of(tally: &mut Tally, raw: &str, kinds: Vec<EventKind>) -> Vec<AgentEvent> {
    let raw: Arc<str> = Arc::from(raw);
    let mut out = Vec::with_capacity(kinds.len());
    for k in kinds {
        let ev = AgentEvent::new(k, raw.clone());
        tally.see(&ev);
        out.push(ev);
    }
    out
}

/// The one event of a line, with the line as its `raw`, folded into `tally`.
pub fn event_of(tally: &mut Tally, raw: &str, kind: EventKind) -> Vec<AgentEvent> {
    let ev = AgentEvent::new(kind, Arc::from(raw));
    tally.see(&ev);
    vec![ev]
}

/// A protocol event for a line that is not the vendor's shape, folded into `tally`.
pub fn protocol_of(tally: &mut Tally, raw: &str, message: String) -> Vec<AgentEvent> {
    let ev = AgentEvent::protocol(message, Arc::from(raw));
    tally.see(&ev);
    vec![ev]
}

/// What was wrong with a line that a vendor's wire enum could not read.
pub fn malformed(vendor: &str, text: &str, e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("malformed JSON: {e}"),
        Category::Io | Category::Data => match text.trim_start().as_bytes().first() {
            Some(b'{') => format!("a {vendor} line that does not have the expected shape: {e}"),
            Some(b'[') => "expected a JSON object, got an array".to_owned(),
            Some(b'"') => "expected a JSON object, got a string".to_owned(),
            Some(b't' | b'f') => "expected a JSON object, got a boolean".to_owned(),
            Some(b'n') => "expected a JSON object, got null".to_owned(),
            _ => "expected a JSON object, got a number".to_owned(),
        },
    }
}

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
    fn line(&mut self, line: Line<'_>) -> Vec<AgentEvent> {
        let text = match line.text() {
            Ok(Some(t)) => t,
            Ok(None) => return Vec::new(),
            Err(ev) => {
                self.tally.see(&ev);
                return vec![*ev];
            }
        };
        let kinds = match (self.parse)(text) {
            Ok(k) => k,
            Err(message) => return protocol_of(&mut self.tally, text, message),
        };
        let mut out = Vec::with_capacity(kinds.len());
        for k in kinds {
            match &k {
                EventKind::SessionStarted { model: Some(m), .. } => self.model = Some(m.clone()),
                EventKind::AssistantText { text, delta } => {
                    if !(self.text.is_empty() || *delta && self.prev_delta) {
                        self.text.push_str("\n\n");
                    }
                    self.text.push_str(text);
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
                        out.extend(self.tally.usage_event(model.as_deref(), *u));
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
            out.push(k);
        }
        events_of(&mut self.tally, text, out)
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
        let model = self.model.clone().unwrap_or_default();
        let by_model: Vec<(&str, &CanonicalUsage)> = if r.usage_by_model.is_empty() {
            vec![(model.as_str(), &r.canonical_usage)]
        } else {
            r.usage_by_model
                .iter()
                .map(|(m, u)| (m.as_str(), u))
                .collect()
        };
        r.set_cost(crate::usage::Cost::estimated(
            self.prices.estimate(by_model),
        ));
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
        r
    }
}
