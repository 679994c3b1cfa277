//! Claude lines -> events, folding what the result needs as they pass.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::ClaudeProvider;
use super::classify::{ApiErrorFacts, Outcome};
use super::lines::{hook, push_block, retry_event, snapshot, tool_call, user};
use super::wire::{self, ApiEvent, Block, Delta, Line, MessageUsage, System};
use crate::decode::{Decoder, ExitStatus, Line as InputLine, Tally, events_of, protocol_of};
use crate::event::{AgentEvent, EventKind, McpServerStatus};
use crate::result::{ParseContext, SessionResult};
use crate::usage::CanonicalUsage;
use crate::wire::{RawJson, Str};

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
    /// Its verbatim fields, for `provider_data`.
    pub data: Vec<(&'static str, RawJson)>,
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
    /// `system/init` facts for `provider_data` (the first init's).
    pub(super) init: Vec<(&'static str, RawJson)>,
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
            init: Vec::new(),
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
        if self.recent.len() == RECENT_IDS {
            self.recent.pop_front();
        }
        self.recent.push_back(id.to_owned());
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
        *self.requests.entry(name.clone()).or_default() += 1;
        let mut u = snapshot(usage.unwrap_or_default());
        u.request_count = 1;
        *self.streamed.entry(name.clone()).or_default() += u;
        self.streaming = Some((id.to_owned(), name.clone(), u));
        let model = (!name.is_empty()).then_some(name);
        self.tally.usage_event(model.as_deref(), u)
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
        let model = model.clone();
        *self.streamed.entry(model.clone()).or_default() += delta;
        let model = (!model.is_empty()).then_some(model);
        self.tally.usage_event(model.as_deref(), delta)
    }

    fn line_kinds(&mut self, line: Line<'_>) -> Vec<EventKind> {
        self.after_result = false;
        match line {
            Line::System(s) => self.system(s),
            Line::Assistant(a) => self.assistant(a),
            Line::User(u) => user(u),
            Line::StreamEvent(e) => self.stream_event(e),
            Line::RateLimit(r) => {
                let info = r.rate_limit_info.unwrap_or_default();
                vec![EventKind::RateLimit {
                    status: info
                        .status
                        .map_or_else(|| "unknown".to_owned(), |s| s.into_string()),
                    resets_at: info.resets_at.filter(|f| f.is_finite()).map(|f| f as i64),
                    limit_type: info.rate_limit_type.map(|s| s.into_string()),
                }]
            }
            Line::Result(r) => {
                let kinds = self.result_line(*r);
                self.after_result = true;
                kinds
            }
            Line::SubagentTokenUsage(s) => {
                let u = snapshot(s.usage.unwrap_or_default());
                vec![EventKind::Subtask {
                    task_id: s.agent_id.map(|s| s.into_string()).unwrap_or_default(),
                    status: "token_usage".to_owned(),
                    description: None,
                    tool_call_id: None,
                    total_tokens: Some(u.total_input() + u.output_tokens),
                }]
            }
            Line::Other(t) => {
                let t = (!t.is_empty()).then_some(t.as_ref());
                self.tally.foreign_line(t);
                vec![EventKind::Unknown {
                    vendor_type: t.map(str::to_owned),
                }]
            }
        }
    }

    fn system(&mut self, s: System<'_>) -> Vec<EventKind> {
        let kind = match s {
            System::Init(i) => {
                let i = *i;
                let first = self.tally.session_id.is_none() && self.init.is_empty();
                if first {
                    for (k, v) in [
                        ("permissionMode", i.permission_mode),
                        ("apiKeySource", i.api_key_source),
                    ] {
                        if let Some(v) = v {
                            self.init.push((k, v.to_owned()));
                        }
                    }
                }
                let servers = match i.mcp_servers {
                    Some(k) => {
                        if first && !k.typed.is_empty() {
                            self.init.push(("mcp_servers", k.raw.to_owned()));
                        }
                        k.typed
                    }
                    None => Vec::new(),
                };
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
        };
        vec![kind]
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

    fn assistant(&mut self, l: wire::Assistant<'_>) -> Vec<EventKind> {
        let is_error = l.is_api_error_message.unwrap_or(false) || l.error.is_some();
        let mut out = Vec::with_capacity(l.message.content.len() + 2);
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
        if out.is_empty() {
            out.push(EventKind::Unknown {
                vendor_type: Some("assistant".to_owned()),
            });
        }
        out
    }

    fn stream_event(&mut self, l: wire::StreamEvent<'_>) -> Vec<EventKind> {
        let api_id = l.api_message_id;
        let status = |s: &str| {
            vec![EventKind::Status {
                status: s.to_owned(),
            }]
        };
        match l.event {
            Some(ApiEvent::MessageStart(m)) => {
                let mut out = status("message_start");
                if let Some(id) = &m.message.id
                    && let Some(u) = self.response(
                        id.as_str(),
                        m.message.model.as_ref().map(Str::as_str),
                        m.message.usage,
                    )
                {
                    out.push(u);
                }
                out
            }
            Some(ApiEvent::MessageDelta(d)) => {
                let mut out = status("message_delta");
                if let Some(u) = d.usage
                    && let Some(ev) = self.message_delta(api_id.as_ref().map(Str::as_str), u)
                {
                    out.push(ev);
                }
                out
            }
            Some(ApiEvent::ContentBlockDelta(d)) => match d.delta {
                Some(Delta::Text(t)) => {
                    let t = t.text.into_string();
                    crate::shared::text::push_capped(&mut self.deltas, &t);
                    vec![EventKind::AssistantText {
                        text: t,
                        delta: true,
                    }]
                }
                Some(Delta::Thinking(t)) => vec![EventKind::Thinking {
                    text: t.thinking.into_string(),
                }],
                Some(Delta::InputJson(_)) => status("input_json_delta"),
                Some(Delta::Other(t)) => vec![EventKind::Unknown {
                    vendor_type: Some(format!("stream_event/content_block_delta/{t}")),
                }],
                None => status("content_block_delta"),
            },
            Some(ApiEvent::ContentBlockStart(_)) => status("content_block_start"),
            Some(ApiEvent::ContentBlockStop(_)) => status("content_block_stop"),
            Some(ApiEvent::MessageStop(_)) => status("message_stop"),
            Some(ApiEvent::Ping(_)) => status("ping"),
            Some(ApiEvent::Other(t)) => {
                self.tally.own_unknown += 1;
                vec![EventKind::Unknown {
                    vendor_type: Some(if t.is_empty() {
                        "stream_event".to_owned()
                    } else {
                        format!("stream_event/{t}")
                    }),
                }]
            }
            None => {
                self.tally.own_unknown += 1;
                vec![EventKind::Unknown {
                    vendor_type: Some("stream_event".to_owned()),
                }]
            }
        }
    }
}

impl Decoder for ClaudeDecoder {
    fn line(&mut self, line: InputLine<'_>) -> Vec<AgentEvent> {
        let text = match line.text() {
            Ok(Some(t)) => t,
            Ok(None) => return Vec::new(),
            Err(ev) => {
                self.tally.see(&ev);
                return vec![*ev];
            }
        };
        match serde_json::from_str::<Line<'_>>(text) {
            Ok(l) => {
                let kinds = self.line_kinds(l);
                events_of(&mut self.tally, text, kinds)
            }
            Err(e) => protocol_of(
                &mut self.tally,
                text,
                crate::decode::malformed("claude", text, &e),
            ),
        }
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.after_result && self.open_tasks.is_empty()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        super::result::finish(*self, stderr, exit)
    }
}
