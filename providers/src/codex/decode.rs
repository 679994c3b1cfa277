//! Codex lines -> events, folding what the result needs as they pass.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::CodexProvider;
use super::classify::{Memo, top_level_error};
use super::wire::{Item, Line, Usage};
use crate::decode::{Decoder, Events, ExitStatus, Line as InputLine, Tally, text_of};
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind, PlanItem};
use crate::result::{ParseContext, SessionResult};
use crate::usage::CanonicalUsage;

/// The name of the tool a `command_execution` item is reported as.
const COMMAND_TOOL: &str = "command_execution";

/// The Codex decoder of one run.
pub struct CodexDecoder {
    pub(super) provider: CodexProvider,
    pub(super) ctx: ParseContext,
    pub(super) tally: Tally,
    /// The last agent message.
    pub(super) response: Option<String>,
    /// Tool items started and not completed.
    open_tools: BTreeSet<String>,
    /// Tool items seen (a call seen only by its result counts once).
    pub(super) tool_calls: u32,
    /// The thread's cumulative usage from the last `turn.completed`.
    pub(super) cumulative: Option<CanonicalUsage>,
    /// A completed turn.
    pub(super) completed: bool,
    /// The first failed turn.
    pub(super) failed: Option<(ErrorKind, String)>,
    /// Completed items, by type.
    pub(super) completed_items: BTreeMap<String, u32>,
    memo: Memo,
}

impl CodexDecoder {
    pub(super) fn new(provider: CodexProvider, ctx: ParseContext) -> CodexDecoder {
        CodexDecoder {
            provider,
            ctx,
            tally: Tally::default(),
            response: None,
            open_tools: BTreeSet::new(),
            tool_calls: 0,
            cumulative: None,
            completed: false,
            failed: None,
            completed_items: BTreeMap::new(),
            memo: Memo::default(),
        }
    }

    /// The model the run asked for: the context's, else the configured default.
    pub(super) fn model(&self) -> Option<String> {
        self.ctx
            .model
            .clone()
            .or_else(|| self.provider.config.default_model.clone())
    }

    /// This run's share of a thread-cumulative figure.
    pub(super) fn per_run(&self, cumulative: CanonicalUsage) -> CanonicalUsage {
        match &self.ctx.prior {
            Some(prior) => cumulative.saturating_sub(&prior.usage),
            None => cumulative,
        }
    }

    fn line_kinds(&mut self, line: Line<'_>, out: &mut Events<'_>) {
        match line {
            Line::ThreadStarted(t) => out.push(EventKind::SessionStarted {
                session_id: t.thread_id.map(|s| s.into_string()).unwrap_or_default(),
                model: None,
                cwd: None,
                tools: Vec::new(),
                mcp_servers: Vec::new(),
                cli_version: None,
            }),
            Line::TurnStarted(_) => out.push(EventKind::Status {
                status: "turn_started".to_owned(),
            }),
            Line::TurnCompleted(t) => {
                let cumulative = canonical(&t.usage);
                self.cumulative = Some(cumulative);
                self.completed = true;
                let run = self.per_run(cumulative);
                let by_model: BTreeMap<String, CanonicalUsage> =
                    self.model().map(|m| (m, run)).into_iter().collect();
                self.tally.catch_up(&by_model, &run, out);
                out.push(final_event(true, None));
            }
            Line::TurnFailed(t) => {
                let message = t.error.message.into_string();
                let (kind, _) = self.memo.classify(&message);
                if self.failed.is_none() {
                    self.failed = Some((kind, message.clone()));
                }
                out.push(final_event(false, Some((kind, message))));
            }
            Line::ItemStarted(e) => out.push(self.item("item.started", e.item)),
            Line::ItemUpdated(e) => out.push(self.item("item.updated", e.item)),
            Line::ItemCompleted(e) => out.push(self.item("item.completed", e.item)),
            Line::PlanDelta(_) => out.push(self.own_unknown("item.plan.delta")),
            Line::RequestUserInput(_) => out.push(self.own_unknown("request_user_input")),
            Line::Error(e) => out.push(top_level_error(e.message.as_str(), &mut self.memo)),
            Line::Other(t) => {
                let t = (!t.is_empty()).then_some(t.as_ref());
                self.tally.foreign_line(t);
                out.push(EventKind::Unknown {
                    vendor_type: t.map(str::to_owned),
                });
            }
        }
    }

    fn own_unknown(&mut self, t: &str) -> EventKind {
        self.tally.own_unknown += 1;
        EventKind::Unknown {
            vendor_type: Some(t.to_owned()),
        }
    }

    fn tool_started(&mut self, id: &str) {
        self.tool_calls += 1;
        self.open_tools.insert(id.to_owned());
    }

    fn tool_ended(&mut self, id: &str) {
        if !self.open_tools.remove(id) {
            self.tool_calls += 1;
        }
    }

    /// The event of an `item.*` line.
    fn item(&mut self, phase: &str, item: Option<Box<Item<'_>>>) -> EventKind {
        let Some(item) = item else {
            return malformed(phase);
        };
        let item = *item;
        let started = phase == "item.started";
        let completed = phase == "item.completed";
        let id = match item_id(&item) {
            Some(id) => id,
            None => return malformed(phase),
        };
        if completed {
            let t = item_type(&item);
            match self.completed_items.get_mut(t) {
                Some(n) => *n += 1,
                None => {
                    self.completed_items.insert(t.to_owned(), 1);
                }
            }
        }
        let unknown = |t: &str| EventKind::Unknown {
            vendor_type: Some(format!("{phase}/{t}")),
        };
        match item {
            Item::AgentMessage(t) | Item::AssistantMessage(t) if completed => {
                let text = t.text.unwrap_or_default();
                self.response = Some(text.clone());
                EventKind::AssistantText { text, delta: false }
            }
            Item::Reasoning(t) if completed => EventKind::Thinking {
                text: t.text.unwrap_or_default(),
            },
            Item::Plan(t) if completed => EventKind::Plan {
                items: vec![PlanItem {
                    text: t.text.unwrap_or_default(),
                    completed: false,
                }],
            },
            Item::TodoList(t) => EventKind::Plan {
                items: t
                    .items
                    .into_iter()
                    .map(|i| PlanItem {
                        text: i.text,
                        completed: i.completed,
                    })
                    .collect(),
            },
            Item::CommandExecution(c) if started => {
                self.tool_started(&id);
                EventKind::ToolCall {
                    id,
                    name: COMMAND_TOOL.to_owned(),
                    input: json!({ "command": c.command.unwrap_or_default() }),
                    mcp_server: None,
                }
            }
            Item::CommandExecution(c) if completed => {
                self.tool_ended(&id);
                EventKind::ToolResult {
                    id,
                    name: Some(COMMAND_TOOL.to_owned()),
                    output: c.aggregated_output.0,
                    is_error: is_error_status(c.status.as_ref().map(|s| s.as_str())),
                    exit_code: c.exit_code,
                }
            }
            Item::McpToolCall(c) if started => {
                self.tool_started(&id);
                EventKind::ToolCall {
                    id,
                    name: c.tool.unwrap_or_default(),
                    input: c.arguments,
                    mcp_server: c.server,
                }
            }
            Item::McpToolCall(c) if completed => {
                self.tool_ended(&id);
                let is_error =
                    is_error_status(c.status.as_ref().map(|s| s.as_str())) || c.error.is_some();
                let output = match (c.error, c.result) {
                    (Some(e), _) => e.message.into_string(),
                    (None, Some(r)) => match r.content.map(|o| o.0).filter(|o| !o.is_empty()) {
                        Some(o) => o,
                        None => r
                            .structured_content
                            .map(|v| v.to_string())
                            .unwrap_or_default(),
                    },
                    (None, None) => String::new(),
                };
                EventKind::ToolResult {
                    id,
                    name: c.tool,
                    output,
                    is_error,
                    exit_code: None,
                }
            }
            Item::FileChange(f) if started => {
                self.tool_started(&id);
                EventKind::ToolCall {
                    id,
                    name: "file_change".to_owned(),
                    input: json!({ "changes": f.changes.iter().map(|c| json!({"path": c.path, "kind": c.kind})).collect::<Vec<_>>() }),
                    mcp_server: None,
                }
            }
            Item::FileChange(f) if completed => {
                self.tool_ended(&id);
                EventKind::ToolResult {
                    id,
                    name: Some("file_change".to_owned()),
                    output: f
                        .changes
                        .iter()
                        .map(|c| format!("{} {}", c.kind, c.path))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    is_error: is_error_status(f.status.as_ref().map(|s| s.as_str())),
                    exit_code: None,
                }
            }
            Item::WebSearch(w) if started => {
                self.tool_started(&id);
                EventKind::ToolCall {
                    id,
                    name: "web_search".to_owned(),
                    input: json!({ "query": w.query, "action": w.action }),
                    mcp_server: None,
                }
            }
            Item::WebSearch(w) if completed => {
                self.tool_ended(&id);
                EventKind::ToolResult {
                    id,
                    name: Some("web_search".to_owned()),
                    output: w.query,
                    is_error: false,
                    exit_code: None,
                }
            }
            Item::Error(e) if completed => {
                let message = e.message.unwrap_or_default();
                let (error_kind, http_status) = self.memo.classify(&message);
                EventKind::Error {
                    error_kind,
                    message,
                    fatal: false,
                    http_status,
                }
            }
            other => {
                self.tally.own_unknown += 1;
                unknown(item_type(&other))
            }
        }
    }
}

/// The protocol event of an `item.*` line whose item has no id or type (its size is
/// filled in with the line's).
fn malformed(phase: &str) -> EventKind {
    EventKind::Protocol {
        message: format!(
            "malformed Codex `{phase}` event: the item needs a string `id` and `type`"
        ),
        line_bytes: 0,
    }
}

/// An item's id, when it has one.
fn item_id(item: &Item<'_>) -> Option<String> {
    let id = match item {
        Item::AgentMessage(t) | Item::AssistantMessage(t) | Item::Reasoning(t) | Item::Plan(t) => {
            t.id.as_ref()
        }
        Item::CommandExecution(c) => c.id.as_ref(),
        Item::FileChange(f) => f.id.as_ref(),
        Item::McpToolCall(m) => m.id.as_ref(),
        Item::WebSearch(w) => w.id.as_ref(),
        Item::TodoList(t) => t.id.as_ref(),
        Item::CollabToolCall(b) => b.id.as_ref(),
        Item::Error(e) => e.id.as_ref(),
        Item::Other(t) if t.is_empty() => return None,
        Item::Other(_) => return Some(String::new()),
    }?;
    Some(id.as_str().to_owned())
}

/// An item's type name, as codex prints it.
fn item_type<'b>(item: &'b Item<'_>) -> &'b str {
    match item {
        Item::AgentMessage(_) => "agent_message",
        Item::AssistantMessage(_) => "assistant_message",
        Item::Reasoning(_) => "reasoning",
        Item::Plan(_) => "plan",
        Item::CommandExecution(_) => "command_execution",
        Item::FileChange(_) => "file_change",
        Item::McpToolCall(_) => "mcp_tool_call",
        Item::WebSearch(_) => "web_search",
        Item::TodoList(_) => "todo_list",
        Item::CollabToolCall(_) => "collab_tool_call",
        Item::Error(_) => "error",
        Item::Other(t) => t,
    }
}

/// `failed` and `declined` are errors.
fn is_error_status(s: Option<&str>) -> bool {
    matches!(s, Some("failed" | "declined"))
}

/// `turn.completed.usage` in the canonical meaning: Codex's `input_tokens` includes
/// cached input and cache writes; `output_tokens` already includes reasoning.
pub(super) fn canonical(u: &Usage) -> CanonicalUsage {
    let cached = u.cached_input_tokens.0;
    let written = u.cache_write_input_tokens.0;
    CanonicalUsage {
        input_tokens: u
            .input_tokens
            .0
            .saturating_sub(cached)
            .saturating_sub(written),
        output_tokens: u.output_tokens.0,
        cache_read: cached,
        cache_write: written,
        reasoning_tokens: u.reasoning_output_tokens.0,
        request_count: 0,
    }
}

fn final_event(success: bool, error: Option<(ErrorKind, String)>) -> EventKind {
    let (error_kind, error) = match error {
        Some((k, m)) => (Some(k), Some(m)),
        None => (None, None),
    };
    EventKind::Final {
        success,
        text: None,
        error_kind,
        error,
        usage: None,
        cost_usd: None,
        num_turns: None,
        duration_ms: None,
    }
}

impl Decoder for CodexDecoder {
    fn decode(&mut self, line: InputLine<'_>, out: &mut Vec<AgentEvent>) {
        let Some(text) = text_of(line, &mut self.tally, out) else {
            return;
        };
        let mut events = Events::new(text, out);
        match crate::wire::from_line::<Line<'_>>(text) {
            Ok(l) => {
                self.line_kinds(l, &mut events);
                for ev in events.as_mut_slice() {
                    if let EventKind::Protocol { line_bytes, .. } = &mut ev.kind {
                        *line_bytes = text.len() as u64;
                    }
                }
            }
            Err(e) => events.protocol(crate::decode::malformed("Codex", text, &e)),
        }
        events.fold(&mut self.tally);
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.completed || self.failed.is_some()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let rejected = self.tally.rejected.clone();
        let mut r = super::result::finish(*self, stderr, exit);
        crate::decode::settle_usage_limit(&mut r, rejected.as_ref());
        r
    }
}
