//! Gemini lines -> events, folding what the result needs as they pass.

use crate::shared::text::push_capped;
use std::collections::BTreeMap;

use super::classify::{classify, text_kind};
use super::wire::{self, Line, Stats, Tokens};
use super::{AUTO_MODEL, GeminiProvider};
use crate::decode::{Decoder, Events, ExitStatus, Line as InputLine, Tally, text_of};
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{ParseContext, SessionResult};
use crate::usage::CanonicalUsage;
use crate::wire::Str;

/// The last `result` line.
#[derive(Debug, Default)]
pub(super) struct ResultFacts {
    pub success: bool,
    pub error: Option<wire::ErrorBody>,
    pub stats: Option<Stats>,
    /// The line, verbatim (its `stats` go into `provider_data` and its timestamp into
    /// the duration, read when the result is built).
    pub line: String,
}

impl ResultFacts {
    /// The line's timestamp, Unix ms.
    pub(super) fn at(&self) -> Option<i64> {
        let v: wire::ResultVerbatim<'_> = serde_json::from_str(&self.line).ok()?;
        unix_millis(v.timestamp?.as_str())
    }
}

/// The Gemini decoder of one run.
pub struct GeminiDecoder {
    pub(super) provider: GeminiProvider,
    pub(super) ctx: ParseContext,
    pub(super) tally: Tally,
    /// The answer: the assistant chunks joined (whole messages separated by a blank line).
    pub(super) response: String,
    prev_delta: bool,
    /// Model responses seen (a run of assistant text and tool calls between results).
    responses: u64,
    in_response: bool,
    /// Whether `init` named the router model (`auto`).
    pub(super) auto: bool,
    /// The first line's timestamp, Unix ms.
    pub(super) first_at: Option<i64>,
    pub(super) result: Option<ResultFacts>,
}

impl GeminiDecoder {
    pub(super) fn new(provider: GeminiProvider, ctx: ParseContext) -> GeminiDecoder {
        GeminiDecoder {
            provider,
            ctx,
            tally: Tally::default(),
            response: String::new(),
            prev_delta: false,
            responses: 0,
            in_response: false,
            auto: false,
            first_at: None,
            result: None,
        }
    }

    /// Requests that answered: one per model response, plus the router's call when the
    /// model is `auto` and any tokens were used.
    pub(super) fn requests(&self, usage: &CanonicalUsage) -> u64 {
        self.responses + u64::from(self.auto && !usage.is_zero())
    }

    fn stamp(&mut self, ts: Option<&Str<'_>>) {
        if self.first_at.is_none() {
            self.first_at = ts.and_then(|t| unix_millis(t.as_str()));
        }
    }

    fn response_part(&mut self) {
        if !self.in_response {
            self.responses += 1;
            self.in_response = true;
        }
    }

    fn line_kinds(&mut self, line: Line<'_>, text: &str, out: &mut Events<'_>) {
        let kind = match line {
            Line::Init(i) => {
                self.stamp(i.timestamp.as_ref());
                let model = i.model.map(|m| m.into_string());
                self.auto = model.as_deref() == Some(AUTO_MODEL);
                EventKind::SessionStarted {
                    session_id: i.session_id.map(|s| s.into_string()).unwrap_or_default(),
                    model,
                    cwd: None,
                    tools: Vec::new(),
                    mcp_servers: Vec::new(),
                    cli_version: None,
                }
            }
            Line::Message(m) => match m.role.as_str() {
                "user" => {
                    self.in_response = false;
                    EventKind::UserMessage {
                        text: m.content.into_string(),
                    }
                }
                "assistant" => {
                    self.response_part();
                    let delta = m.delta.unwrap_or(false);
                    let text = m.content.into_string();
                    if !(self.response.is_empty() || delta && self.prev_delta) {
                        push_capped(&mut self.response, "\n\n");
                    }
                    push_capped(&mut self.response, &text);
                    self.prev_delta = delta;
                    EventKind::AssistantText { text, delta }
                }
                role => {
                    self.tally.own_unknown += 1;
                    EventKind::Unknown {
                        vendor_type: Some(format!("message/{role}")),
                    }
                }
            },
            Line::ToolUse(t) => {
                self.response_part();
                let (name, mcp_server) = match split_mcp_tool_name(&t.tool_name) {
                    Some((server, tool)) => (tool.to_owned(), Some(server.to_owned())),
                    None => (t.tool_name, None),
                };
                EventKind::ToolCall {
                    id: t.tool_id,
                    name,
                    input: t.parameters,
                    mcp_server,
                }
            }
            Line::ToolResult(t) => {
                self.in_response = false;
                let is_error = t.status.as_str() != "success";
                if let Some(e) = &t.error
                    && let Some(tool) = refused_tool(&t.tool_id, e)
                {
                    out.push(EventKind::PermissionDenied {
                        tool: tool.to_owned(),
                        tool_call_id: Some(t.tool_id.clone()),
                        message: e.message.clone(),
                    });
                }
                let mut output = t.output.unwrap_or_default();
                if output.is_empty()
                    && let Some(e) = &t.error
                {
                    output = format!("{}: {}", e.kind, e.message);
                }
                EventKind::ToolResult {
                    id: t.tool_id,
                    name: None,
                    output,
                    is_error,
                    // Gemini does not report a command's exit code.
                    exit_code: None,
                }
            }
            Line::Error(e) => {
                let error_kind = if e.message.contains("session turns") {
                    ErrorKind::MaxTurns
                } else {
                    text_kind(&e.message).unwrap_or(ErrorKind::Unknown)
                };
                EventKind::Error {
                    error_kind,
                    fatal: e.severity.as_ref().map(Str::as_str) != Some("warning"),
                    message: e.message,
                    http_status: None,
                }
            }
            Line::Result(r) => return self.result_line(*r, text, out),
            Line::Other(t) => {
                let t = (!t.is_empty()).then_some(t.as_ref());
                self.tally.foreign_line(t);
                EventKind::Unknown {
                    vendor_type: t.map(str::to_owned),
                }
            }
        };
        out.push(kind);
    }

    /// A `result` line: the Usage increments, then the final event. Its error kind is
    /// decided from the line alone; the session result decides again with the exit code.
    fn result_line(&mut self, r: wire::ResultEvent<'_>, text: &str, out: &mut Events<'_>) {
        self.stamp(r.timestamp.as_ref());
        let success = r.status.as_str() == "success";
        let (error_kind, error) = match (&r.error, success) {
            (_, true) => (None, None),
            (Some(e), false) => {
                let c = classify(Some(&e.kind), &e.message, None, "");
                (Some(c.kind), Some(e.message.trim_end().to_owned()))
            }
            (None, false) => (Some(ErrorKind::Unknown), None),
        };
        let stats = r.stats;
        let usage = stats.as_ref().map(stats_usage);
        let duration_ms = stats
            .as_ref()
            .map(|s| s.duration_ms.0)
            .filter(|ms| success || *ms > 0);
        if let Some(s) = &stats {
            let by_model: BTreeMap<String, CanonicalUsage> = s
                .models
                .iter()
                .map(|(m, t)| (m.clone(), tokens_usage(t)))
                .collect();
            let mut total = usage.unwrap_or_default();
            total.request_count = total.request_count.max(self.requests(&total));
            let by_model = if by_model.is_empty() {
                self.tally
                    .model
                    .clone()
                    .or_else(|| self.ctx.model.clone())
                    .filter(|m| m != AUTO_MODEL)
                    .map(|m| {
                        (
                            m,
                            CanonicalUsage {
                                request_count: 0,
                                ..total
                            },
                        )
                    })
                    .into_iter()
                    .collect()
            } else {
                by_model
            };
            self.tally.catch_up(&by_model, &total, out);
        }
        out.push(EventKind::Final {
            success,
            text: None,
            error_kind,
            error,
            usage,
            cost_usd: None,
            num_turns: None,
            duration_ms,
        });
        let mut line = self.result.take().map(|r| r.line).unwrap_or_default();
        line.clear();
        line.push_str(text);
        self.result = Some(ResultFacts {
            success,
            error: r.error,
            stats,
            line,
        });
    }
}

/// Splits an MCP tool name `mcp_<server>_<tool>` the way Gemini itself does
/// (`parseMcpToolName`: the server is the first `_`-separated segment).
fn split_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp_")?;
    let (server, tool) = rest.split_once('_')?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// One model's (or a run's) tokens in the canonical meaning:
///
/// - `input_tokens = input_tokens - cached` (Gemini's prompt count includes the cached
///   part; its own `input` field is the same difference),
/// - `cache_read = cached`, `cache_write = 0` (the stream reports no cache writes),
/// - `reasoning_tokens = total_tokens - input_tokens - output_tokens` when positive
///   (thinking tokens appear only in the total), and
/// - `output_tokens = output_tokens + reasoning_tokens` (canonical output includes
///   reasoning).
///
/// `request_count` is left 0: the stats do not say.
pub fn canonical_model_usage(
    total_tokens: u64,
    input_tokens: u64,
    output_tokens: u64,
    cached: u64,
) -> CanonicalUsage {
    let reasoning = total_tokens.saturating_sub(input_tokens.saturating_add(output_tokens));
    CanonicalUsage {
        input_tokens: input_tokens.saturating_sub(cached),
        output_tokens: output_tokens.saturating_add(reasoning),
        cache_read: cached,
        cache_write: 0,
        reasoning_tokens: reasoning,
        request_count: 0,
    }
}

pub(super) fn tokens_usage(t: &Tokens) -> CanonicalUsage {
    canonical_model_usage(
        t.total_tokens.0,
        t.input_tokens.0,
        t.output_tokens.0,
        t.cached.0,
    )
}

/// The run's usage from `result.stats`: the sum of the per-model figures (the run totals
/// when no model is listed). `request_count` is the number of models that used tokens,
/// a lower bound the stream's count refines.
pub(super) fn stats_usage(s: &Stats) -> CanonicalUsage {
    if s.models.is_empty() {
        return tokens_usage(&s.tokens());
    }
    let mut total = CanonicalUsage::default();
    for t in s.models.values() {
        let u = tokens_usage(t);
        total += u;
        if !u.is_zero() {
            total.request_count += 1;
        }
    }
    total
}

impl Decoder for GeminiDecoder {
    fn decode(&mut self, line: InputLine<'_>, out: &mut Vec<AgentEvent>) {
        let Some(text) = text_of(line, &mut self.tally, out) else {
            return;
        };
        let mut events = Events::new(text, out);
        match crate::wire::from_line::<Line<'_>>(text) {
            Ok(l) => {
                self.line_kinds(l, text, &mut events);
            }
            Err(e) => events.protocol(crate::decode::malformed("Gemini", text, &e)),
        }
        events.fold(&mut self.tally);
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.result.is_some()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let rejected = self.tally.rejected.clone();
        let mut r = super::result::finish(*self, stderr, exit);
        crate::decode::settle_usage_limit(&mut r, rejected.as_ref());
        r
    }
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time as Gemini writes it
/// (`2026-11-30T03:35:40.563Z`).
fn unix_millis(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if b.len() < 20 || b.last() != Some(&b'Z') || seps.iter().any(|(i, c)| b[*i] != *c) {
        return None;
    }
    let num = |from: usize, to: usize| ts.get(from..to)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, s) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let frac = ts.get(19..ts.len() - 1)?;
    let millis = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        None => return None,
        Some(digits) => {
            let mut ms = 0;
            for (i, c) in digits.chars().enumerate() {
                let d = i64::from(c.to_digit(10)?);
                if i < 3 {
                    ms = ms * 10 + d;
                }
            }
            ms * 10i64.pow(3u32.saturating_sub(digits.len() as u32))
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + millis)
}

/// The tool a failed call's error says Gemini refused, if it says so: a policy's refusal,
/// or `tool_not_registered` for a tool Gemini has but leaves out of a headless run under
/// its approval mode (the shell, writes, web fetches, MCP tools it does not trust). The
/// tool's name is the call id's first part (`run_shell_command__run_shell_command_17…`).
fn refused_tool<'a>(tool_id: &'a str, e: &wire::ErrorBody) -> Option<&'a str> {
    /// Built-in tools that ask before they run, and so are left out when nobody can be
    /// asked (gemini 0.61).
    const ASKING: [&str; 6] = [
        "run_shell_command",
        "write_file",
        "replace",
        "web_fetch",
        "google_web_search",
        "save_memory",
    ];
    let tool = tool_id.split("__").next().unwrap_or(tool_id);
    match e.kind.as_str() {
        "permission_denied" | "policy_violation" | "reject" => Some(tool),
        "tool_not_registered" if ASKING.contains(&tool) || tool.starts_with("mcp_") => Some(tool),
        _ => None,
    }
}
