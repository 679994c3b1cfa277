//! Claude lines -> events, folding what the result needs as they pass.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::ClaudeProvider;
use super::classify::{ApiErrorFacts, Outcome};
use super::lines::{hook, push_block, retry_event, snapshot, tool_call, user};
use super::wire::{self, ApiEvent, Block, Delta, Line, MessageUsage, System};
use crate::decode::{Decoder, Events, ExitStatus, Line as InputLine, Tally, text_of};
use crate::event::{AgentEvent, EventKind, McpServerStatus};
use crate::result::{ParseContext, SessionResult};
use crate::usage::CanonicalUsage;
use crate::wire::Str;

/// The model name Claude gives the assistant messages it makes up itself (API errors).
pub(super) const SYNTHETIC_MODEL: &str = "<synthetic>";

/// How many recent message ids are remembered to count each model response once (the
/// lines of one message come together; a subagent's may interleave).
const RECENT_IDS: usize = 32;

/// A model's usage in a `modelUsage` map, canonical, with its reported cost.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Priced {
    pub usage: CanonicalUsage,
    pub cost: Option<f64>,
}

/// What the `result` lines of the run said, added up.
#[derive(Debug, Default)]
pub(super) struct Results {
    /// `result` lines seen.
    pub count: u32,
    /// The last one's verdict facts.
    pub last: Option<Outcome>,
    /// Its session id.
    pub session_id: Option<String>,
    /// The last one, verbatim (its verbatim fields go into `provider_data`; read when
    /// the result is built, not per line).
    pub line: String,
    /// Turns over all results.
    pub turns: Option<u32>,
    /// Durations over all results.
    pub duration_ms: Option<u64>,
    /// `model_usage_since_last_result`, summed over the results, by model.
    pub since: Option<BTreeMap<String, Priced>>,
    /// Whether every result with a since-map gave every model's cost.
    pub since_costed: bool,
    /// The last result's `modelUsage` (session-cumulative), by model.
    pub cumulative: Option<BTreeMap<String, Priced>>,
    /// The last `total_cost_usd` (session-cumulative).
    pub total_cost: Option<f64>,
    /// `result.usage`, summed (main model only).
    pub main_usage: Option<CanonicalUsage>,
}

/// The Claude decoder of one run.
pub struct ClaudeDecoder {
    pub(super) provider: ClaudeProvider,
    pub(super) ctx: ParseContext,
    pub(super) tally: Tally,
    /// The first `system/init` line with facts for `provider_data`, verbatim (read when
    /// the result is built), and whether it listed MCP servers.
    pub(super) init: Option<(String, bool)>,
    pub(super) results: Results,
    /// The last API-error assistant line.
    pub(super) api_error: Option<ApiErrorFacts>,
    /// Recent message ids (each response counted once).
    recent: VecDeque<String>,
    /// Model responses (requests that answered), by model.
    pub(super) requests: BTreeMap<String, u64>,
    /// Per message of the partial-message stream: its model and the usage reported.
    streaming: Option<(String, String, CanonicalUsage)>,
    /// Usage rebuilt from partial messages and assistant snapshots, by model (for a run
    /// without a result line).
    pub(super) streamed: BTreeMap<String, CanonicalUsage>,
    /// Whole text blocks since the last result (not API-error texts), separated by a
    /// blank line.
    pub(super) blocks: String,
    /// Streamed text since the last result.
    pub(super) deltas: String,
    /// Background tasks started and not ended.
    open_tasks: BTreeSet<String>,
    /// Whether the last line that said something was a `result`.
    after_result: bool,
}

impl ClaudeDecoder {
    pub(super) fn new(provider: ClaudeProvider, ctx: ParseContext) -> ClaudeDecoder {
        ClaudeDecoder {
            provider,
            ctx,
            tally: Tally::default(),
            init: None,
            results: Results::default(),
            api_error: None,
            recent: VecDeque::new(),
            requests: BTreeMap::new(),
            streaming: None,
            streamed: BTreeMap::new(),
            blocks: String::new(),
            deltas: String::new(),
            open_tasks: BTreeSet::new(),
            after_result: false,
        }
    }

    /// Whether `id` is a response not counted yet (and notes it).
    fn new_message(&mut self, id: &str) -> bool {
        if id.is_empty() || self.recent.iter().any(|r| r == id) {
            return false;
        }
        // The oldest id's buffer holds the new one.
        let mut slot = if self.recent.len() == RECENT_IDS {
            self.recent.pop_front().unwrap_or_default()
        } else {
            String::new()
        };
        slot.clear();
        slot.push_str(id);
        self.recent.push_back(slot);
        true
    }

    /// A model response starts: counts it and gives its usage snapshot as a Usage event.
    fn response(
        &mut self,
        id: &str,
        model: Option<&str>,
        usage: Option<MessageUsage>,
    ) -> Option<EventKind> {
        let model = model.filter(|m| !m.is_empty());
        if model == Some(SYNTHETIC_MODEL) || !self.new_message(id) {
            return None;
        }
        let name = model
            .map(str::to_owned)
            .or_else(|| self.tally.model.clone())
            .unwrap_or_default();
        add(&mut self.requests, &name, 1);
        let mut u = snapshot(usage.unwrap_or_default());
        u.request_count = 1;
        add(&mut self.streamed, &name, u);
        let model = (!name.is_empty()).then_some(name.as_str());
        let ev = self.tally.usage_event(model, u);
        self.streaming = Some((id.to_owned(), name, u));
        ev
    }

    /// A `message_delta`: the message's counts so far; the increment as a Usage event.
    fn message_delta(
        &mut self,
        api_message_id: Option<&str>,
        usage: MessageUsage,
    ) -> Option<EventKind> {
        let (id, model, before) = self.streaming.as_mut()?;
        if api_message_id.is_some_and(|m| m != id) {
            return None;
        }
        let mut now = *before;
        if let Some(o) = usage.output_tokens {
            now.output_tokens = o.0;
        }
        if let Some(i) = usage.input_tokens {
            now.input_tokens = i.0;
        }
        let delta = now.saturating_sub(before);
        *before = now;
        add(&mut self.streamed, model, delta);
        let model = (!model.is_empty()).then_some(model.as_str());
        self.tally.usage_event(model, delta)
    }

    fn line_kinds(&mut self, line: Line<'_>, text: &str, out: &mut Events<'_>) {
        self.after_result = false;
        match line {
            Line::System(s) => out.push(self.system(s, text)),
            Line::Assistant(a) => self.assistant(a, out),
            Line::User(u) => user(u, out),
            Line::StreamEvent(e) => self.stream_event(e, out),
            Line::RateLimit(r) => {
                let info = r.rate_limit_info.unwrap_or_default();
                out.push(EventKind::RateLimit {
                    status: info
                        .status
                        .map_or_else(|| "unknown".to_owned(), |s| s.into_string()),
                    resets_at: info.resets_at.filter(|f| f.is_finite()).map(|f| f as i64),
                    limit_type: info.rate_limit_type.map(|s| s.into_string()),
                });
            }
            Line::Result(r) => {
                self.result_line(*r, text, out);
                self.after_result = true;
            }
            Line::SubagentTokenUsage(s) => {
                let u = snapshot(s.usage.unwrap_or_default());
                out.push(EventKind::Subtask {
                    task_id: s.agent_id.map(|s| s.into_string()).unwrap_or_default(),
                    status: "token_usage".to_owned(),
                    description: None,
                    tool_call_id: None,
                    total_tokens: Some(u.total_input() + u.output_tokens),
                });
            }
            Line::Other(t) => {
                let t = (!t.is_empty()).then_some(t.as_ref());
                self.tally.foreign_line(t);
                out.push(EventKind::Unknown {
                    vendor_type: t.map(str::to_owned),
                });
            }
        }
    }

    fn system(&mut self, s: System<'_>, text: &str) -> EventKind {
        match s {
            System::Init(i) => {
                let i = *i;
                let servers = i.mcp_servers.unwrap_or_default();
                let facts = i.permission_mode.is_some()
                    || i.api_key_source.is_some()
                    || !servers.is_empty();
                if facts && self.tally.session_id.is_none() && self.init.is_none() {
                    self.init = Some((text.to_owned(), !servers.is_empty()));
                }
                EventKind::SessionStarted {
                    session_id: i.session_id.map(|s| s.into_string()).unwrap_or_default(),
                    model: i.model.map(|s| s.into_string()),
                    cwd: i.cwd.map(|s| s.into_string()),
                    tools: i.tools,
                    mcp_servers: servers
                        .into_iter()
                        .map(|s| McpServerStatus {
                            name: s.name,
                            status: s.status,
                        })
                        .collect(),
                    cli_version: i.claude_code_version.map(|s| s.into_string()),
                }
            }
            System::ApiRetry(l) => retry_event(&l),
            System::PermissionDenied(l) => {
                let tool = l.tool_name.map(|s| s.into_string()).unwrap_or_default();
                EventKind::PermissionDenied {
                    message: l
                        .message
                        .map(|s| s.into_string())
                        .unwrap_or_else(|| format!("permission to use {tool} was denied")),
                    tool,
                    tool_call_id: l.tool_use_id.map(|s| s.into_string()),
                }
            }
            System::Status(s) => EventKind::Status {
                status: s
                    .status
                    .map_or_else(|| "idle".to_owned(), |s| s.into_string()),
            },
            System::HookStarted(h) => hook(h, "started"),
            System::HookResponse(h) => hook(h, "response"),
            System::TaskStarted(t) => self.task(t, Some("started")),
            System::TaskProgress(t) => self.task(t, Some("running")),
            System::TaskUpdated(t) => self.task(t, None),
            System::TaskNotification(t) => self.task(t, None),
            System::Other(sub) => {
                self.tally.own_unknown += 1;
                EventKind::Unknown {
                    vendor_type: Some(if sub.is_empty() {
                        "system".to_owned()
                    } else {
                        format!("system/{sub}")
                    }),
                }
            }
        }
    }

    /// A `task_*` line: the task's state, and whether it is still running.
    fn task(&mut self, t: wire::Task<'_>, status: Option<&str>) -> EventKind {
        let id = t.task_id.map(|s| s.into_string()).unwrap_or_default();
        let status = status
            .map(str::to_owned)
            .or_else(|| t.status.map(|s| s.into_string()))
            .or_else(|| t.patch.and_then(|p| p.status).map(|s| s.into_string()))
            .unwrap_or_else(|| "updated".to_owned());
        match status.as_str() {
            "completed" | "failed" | "stopped" | "killed" => {
                self.open_tasks.remove(&id);
            }
            _ => {
                if !id.is_empty() && self.open_tasks.len() < 4096 {
                    self.open_tasks.insert(id.clone());
                }
            }
        }
        EventKind::Subtask {
            task_id: id,
            status,
            description: t.description.map(|s| s.into_string()),
            tool_call_id: t.tool_use_id.map(|s| s.into_string()),
            total_tokens: t.usage.map(|u| u.total_tokens.0),
        }
    }

    fn assistant(&mut self, l: wire::Assistant<'_>, out: &mut Events<'_>) {
        let is_error = l.is_api_error_message.unwrap_or(false) || l.error.is_some();
        let first = out.len();
        let mut text: Vec<String> = Vec::new();
        if !is_error
            && let Some(id) = &l.message.id
            && let Some(u) = self.response(
                id.as_str(),
                l.message.model.as_ref().map(Str::as_str),
                l.message.usage,
            )
        {
            out.push(u);
        }
        for block in l.message.content {
            out.push(match block {
                Block::Text(t) => {
                    let t = t.text.into_string();
                    if is_error {
                        text.push(t.clone());
                    } else {
                        push_block(&mut self.blocks, &t);
                    }
                    EventKind::AssistantText {
                        text: t,
                        delta: false,
                    }
                }
                Block::Thinking(t) => EventKind::Thinking {
                    text: t.thinking.into_string(),
                },
                Block::ToolUse(b) | Block::ServerToolUse(b) => tool_call(b, &l.tool_use_meta),
                Block::Other(other) => EventKind::Unknown {
                    vendor_type: Some(format!("assistant/{other}")),
                },
            });
        }
        if is_error {
            let message = if text.is_empty() {
                format!(
                    "API error ({})",
                    l.error.as_ref().map_or("unknown", Str::as_str)
                )
            } else {
                text.join("\n")
            };
            let facts = ApiErrorFacts {
                status: l.api_error_status,
                api_error_type: l.api_error_type.map(|s| s.into_string()),
                api_error: l.api_error.map(|s| s.into_string()),
                error_word: l.error.map(|s| s.into_string()),
                text: message.clone(),
            };
            out.push(EventKind::Error {
                error_kind: facts.classify(),
                message,
                fatal: true,
                http_status: facts.status,
            });
            self.api_error = Some(facts);
        }
        if out.len() == first {
            out.push(EventKind::Unknown {
                vendor_type: Some("assistant".to_owned()),
            });
        }
    }

    fn stream_event(&mut self, l: wire::StreamEvent<'_>, out: &mut Events<'_>) {
        let api_id = l.api_message_id;
        let status = |s: &str| EventKind::Status {
            status: s.to_owned(),
        };
        match l.event {
            Some(ApiEvent::MessageStart(m)) => {
                out.push(status("message_start"));
                if let Some(id) = &m.message.id
                    && let Some(u) = self.response(
                        id.as_str(),
                        m.message.model.as_ref().map(Str::as_str),
                        m.message.usage,
                    )
                {
                    out.push(u);
                }
            }
            Some(ApiEvent::MessageDelta(d)) => {
                out.push(status("message_delta"));
                if let Some(u) = d.usage
                    && let Some(ev) = self.message_delta(api_id.as_ref().map(Str::as_str), u)
                {
                    out.push(ev);
                }
            }
            Some(ApiEvent::ContentBlockDelta(d)) => out.push(match d.delta {
                Some(Delta::Text(t)) => {
                    let t = t.text.into_string();
                    crate::shared::text::push_capped(&mut self.deltas, &t);
                    EventKind::AssistantText {
                        text: t,
                        delta: true,
                    }
                }
                Some(Delta::Thinking(t)) => EventKind::Thinking {
                    text: t.thinking.into_string(),
                },
                Some(Delta::InputJson(_)) => status("input_json_delta"),
                Some(Delta::Other(t)) => EventKind::Unknown {
                    vendor_type: Some(format!("stream_event/content_block_delta/{t}")),
                },
                None => status("content_block_delta"),
            }),
            Some(ApiEvent::ContentBlockStart(_)) => out.push(status("content_block_start")),
            Some(ApiEvent::ContentBlockStop(_)) => out.push(status("content_block_stop")),
            Some(ApiEvent::MessageStop(_)) => out.push(status("message_stop")),
            Some(ApiEvent::Ping(_)) => out.push(status("ping")),
            Some(ApiEvent::Other(t)) => {
                self.tally.own_unknown += 1;
                out.push(EventKind::Unknown {
                    vendor_type: Some(if t.is_empty() {
                        "stream_event".to_owned()
                    } else {
                        format!("stream_event/{t}")
                    }),
                });
            }
            None => {
                self.tally.own_unknown += 1;
                out.push(EventKind::Unknown {
                    vendor_type: Some("stream_event".to_owned()),
                });
            }
        }
    }
}

/// Adds `n` to `map[key]` (inserted as the default when absent: the key is copied
/// only then).
fn add<V: std::ops::AddAssign>(map: &mut BTreeMap<String, V>, key: &str, n: V) {
    match map.get_mut(key) {
        Some(v) => *v += n,
        None => {
            map.insert(key.to_owned(), n);
        }
    }
}

impl Decoder for ClaudeDecoder {
    fn decode(&mut self, line: InputLine<'_>, out: &mut Vec<AgentEvent>) {
        let Some(text) = text_of(line, &mut self.tally, out) else {
            return;
        };
        let mut events = Events::new(text, out);
        match crate::wire::from_line::<Line<'_>>(text) {
            Ok(l) => {
                self.line_kinds(l, text, &mut events);
            }
            Err(e) => events.protocol(crate::decode::malformed("claude", text, &e)),
        }
        events.fold(&mut self.tally);
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.after_result && self.open_tasks.is_empty()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let rejected = self.tally.rejected.clone();
        let mut r = super::result::finish(*self, stderr, exit);
        crate::decode::settle_usage_limit(&mut r, rejected.as_ref());
        r
    }
}
