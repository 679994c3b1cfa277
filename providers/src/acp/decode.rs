//! The ACP decoder's state and its reading of each line: the agent's messages (raw
//! JSON-RPC lines) and, in a recorded run, aicli's own (behind the `aicli_stdin`
//! marker), both folded the same way. The live side (what aicli says) is in `live`.

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::{
    PermissionOption, RequestPermissionRequest, StopReason, ToolKind,
};
use serde_json::Value;
use serde_json::value::RawValue;

use super::AcpProvider;
use super::config::AcpContinue;
use super::live::Live;
use super::usage::Source;
use super::wire::{Envelope, envelope, own_id};
use crate::decode::{Decoder, Events, ExitStatus, Line, Tally, stdin_record};
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{ParseContext, PendingQuestion, SessionResult};
use crate::usage::CanonicalUsage;

/// A request aicli sent that waits for its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    Initialize,
    NewSession,
    Continue {
        how: AcpContinue,
        session_id: String,
    },
    SetMode(String),
    SetOption {
        id: String,
        value: String,
    },
    Prompt,
    /// A request of a method aicli does not use (read from a record).
    Other(String),
}

impl Sent {
    pub(super) fn method(&self) -> &str {
        match self {
            Sent::Initialize => "initialize",
            Sent::NewSession => "session/new",
            Sent::Continue { how, .. } => how.method(),
            Sent::SetMode(_) => "session/set_mode",
            Sent::SetOption { .. } => "session/set_config_option",
            Sent::Prompt => "session/prompt",
            Sent::Other(m) => m,
        }
    }
}

/// A request of the agent's that aicli has not answered yet.
#[derive(Debug, Clone)]
pub(super) struct AgentRequest {
    pub method: String,
    /// An elicitation's message.
    pub message: Option<String>,
    /// For a permission request: the call it is about and the options.
    pub permission: Option<Permission>,
}

#[derive(Debug, Clone)]
pub(super) struct Permission {
    pub tool_call_id: String,
    pub title: String,
    pub kind: Option<ToolKind>,
    pub options: Vec<PermissionOption>,
}

/// A tool call not finished yet.
#[derive(Debug, Clone)]
pub(super) struct OpenTool {
    pub name: String,
    pub title: String,
    pub kind: Option<ToolKind>,
    /// Whether its `ToolCall` event was given (claude announces a call with an empty
    /// input and fills it in with the next update).
    pub announced: bool,
}

/// What the agent said at `initialize`.
#[derive(Debug, Clone, Default)]
pub(super) struct Agent {
    pub name: Option<String>,
    pub version: Option<String>,
    pub load_session: bool,
    pub resume: bool,
    pub mcp_http: bool,
}

/// How the prompt turn ended.
#[derive(Debug, Clone)]
pub(super) struct Turn {
    pub stop: Option<StopReason>,
    pub success: bool,
    pub error: Option<(ErrorKind, String)>,
    pub usage: Option<(BTreeMap<Option<String>, CanonicalUsage>, Source)>,
}

/// Why aicli sent `session/cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CancelWhy {
    /// To ask a human (a permission request in `default` mode, an elicitation).
    Question,
    /// The run was cancelled.
    Stop,
}

/// The ACP decoder of one run.
pub struct AcpDecoder {
    pub(super) provider: AcpProvider,
    pub(super) ctx: ParseContext,
    pub(super) tally: Tally,
    /// aicli's requests waiting for a response, by id.
    pub(super) sent: BTreeMap<i64, Sent>,
    /// The agent's requests aicli has not answered, by raw id.
    pub(super) requests: BTreeMap<String, AgentRequest>,
    pub(super) agent: Option<Agent>,
    /// The MCP servers aicli gave the session (names), for reading tool names.
    pub(super) mcp_servers: Vec<String>,
    pub(super) session_id: Option<String>,
    /// The session the run continues, while `session/load` replays its history.
    pub(super) loading: bool,
    /// aicli sent `session/prompt`: agent text before it (gemini's "[MODE_UPDATE]
    /// autoEdit" after `session/set_mode`) is not the answer.
    pub(super) prompted: bool,
    /// The model the session reports (a `model` config option), else the run's.
    pub(super) model: Option<String>,
    pub(super) tools: BTreeMap<String, OpenTool>,
    /// The answer: agent message chunks, messages separated by a blank line.
    pub(super) response: String,
    /// The text of the turn since the last tool call (codex-acp's hidden errors).
    pub(super) last_text: String,
    pub(super) message_id: Option<String>,
    pub(super) new_message: bool,
    /// The latest cumulative session cost an `usage_update` gave, USD.
    pub(super) cost: Option<f64>,
    /// The latest context fill (`used`, `size`).
    pub(super) context: Option<(u64, u64)>,
    pub(super) turn: Option<Turn>,
    /// A setup request failed, a deadline passed: the run is over.
    pub(super) fatal: Option<(ErrorKind, String)>,
    pub(super) cancelled: Option<CancelWhy>,
    /// The question aicli asked a human on the agent's behalf.
    pub(super) asked: Option<PendingQuestion>,
    /// Permission requests aicli rejected (tool titles).
    pub(super) denied: Vec<String>,
    /// What the first message that broke the protocol did.
    pub(super) protocol_message: Option<String>,
    /// The live side, once connected.
    pub(super) live: Option<Live>,
    /// Events of the messages the live side made while handling a line.
    pub(super) made: Vec<AgentEvent>,
}

impl AcpDecoder {
    pub(super) fn new(provider: AcpProvider, ctx: ParseContext) -> AcpDecoder {
        AcpDecoder {
            model: ctx.model.clone(),
            provider,
            ctx,
            tally: Tally::default(),
            sent: BTreeMap::new(),
            requests: BTreeMap::new(),
            agent: None,
            mcp_servers: Vec::new(),
            session_id: None,
            loading: false,
            prompted: false,
            tools: BTreeMap::new(),
            response: String::new(),
            last_text: String::new(),
            message_id: None,
            new_message: false,
            cost: None,
            context: None,
            turn: None,
            fatal: None,
            cancelled: None,
            asked: None,
            denied: Vec::new(),
            protocol_message: None,
            live: None,
            made: Vec::new(),
        }
    }

    /// The agent's name for messages: its `agentInfo.name`, else the provider's.
    pub(super) fn agent_name(&self) -> String {
        self.agent
            .as_ref()
            .and_then(|a| a.name.clone())
            .unwrap_or_else(|| self.provider.name.clone())
    }

    /// Whether the turn (or the run) is over.
    pub(super) fn done(&self) -> bool {
        self.turn.is_some() || self.fatal.is_some()
    }

    /// The run fails for good: an error event (with the HTTP status a failed request
    /// gave, if any) and a final event.
    pub(super) fn fail_run(
        &mut self,
        kind: ErrorKind,
        message: String,
        http_status: Option<u16>,
    ) -> Vec<EventKind> {
        self.fatal = Some((kind, message.clone()));
        failed(kind, message, http_status, None)
    }

    fn protocol(&mut self, kinds: &mut Vec<EventKind>, message: String) {
        kinds.push(EventKind::Protocol {
            message,
            line_bytes: 0,
        });
    }

    /// One line from the agent.
    fn incoming(&mut self, env: Envelope<'_>) -> Vec<EventKind> {
        let mut kinds = Vec::new();
        match env {
            Envelope::Result { id, result } => match own_id(id).and_then(|i| self.sent.remove(&i)) {
                Some(sent) => kinds = self.response(sent, Ok(result)),
                None => self.protocol(
                    &mut kinds,
                    format!("a response to request id {}, which aicli did not send or was already answered", id.get()),
                ),
            },
            Envelope::Error { id: Some(id), error } => {
                match own_id(id).and_then(|i| self.sent.remove(&i)) {
                    Some(sent) => kinds = self.response(sent, Err(error)),
                    None => self.protocol(
                        &mut kinds,
                        format!(
                            "an error response to request id {}, which aicli did not send or was already answered: {} {}",
                            id.get(),
                            error.code,
                            error.message
                        ),
                    ),
                }
            }
            Envelope::Error { id: None, error } => kinds.push(EventKind::Error {
                error_kind: ErrorKind::Protocol,
                message: format!(
                    "the agent could not read a message of aicli's: {} {}",
                    error.code, error.message
                ),
                fatal: false,
                http_status: None,
            }),
            Envelope::Notification { method, params } => {
                if self.agent.is_none() && !method.starts_with('_') && !method.starts_with("$/") {
                    self.protocol(
                        &mut kinds,
                        format!("a {method} notification before the agent answered initialize"),
                    );
                    return kinds;
                }
                kinds = match method.as_str() {
                    "session/update" => self.update(params),
                    "$/cancel_request" => vec![EventKind::Status {
                        status: "cancel_request".to_owned(),
                    }],
                    _ => vec![EventKind::Unknown {
                        vendor_type: Some(method),
                    }],
                };
            }
            Envelope::Request { id, method, params } => {
                if self.agent.is_none() {
                    self.protocol(
                        &mut kinds,
                        format!("a {method} request before the agent answered initialize"),
                    );
                }
                kinds.extend(self.agent_request(id, method, params));
            }
        }
        kinds
    }

    /// A request of the agent's: noted (and, live, answered).
    fn agent_request(
        &mut self,
        id: &RawValue,
        method: String,
        params: Option<&RawValue>,
    ) -> Vec<EventKind> {
        let mut kinds = Vec::new();
        let mut permission = None;
        if method == "session/request_permission" {
            match params.map(|p| serde_json::from_str::<RequestPermissionRequest>(p.get())) {
                Some(Ok(req)) => {
                    let tc = &req.tool_call;
                    let id_s = tc.tool_call_id.0.to_string();
                    let title = tc
                        .fields
                        .title
                        .clone()
                        .or_else(|| self.tools.get(&id_s).map(|t| t.title.clone()))
                        .unwrap_or_default();
                    let kind = tc
                        .fields
                        .kind
                        .or_else(|| self.tools.get(&id_s).and_then(|t| t.kind));
                    kinds.extend(self.tool_seen(
                        &id_s,
                        tc.fields.name.as_deref(),
                        &title,
                        kind,
                        tc.fields.raw_input.as_ref(),
                    ));
                    kinds.push(EventKind::Status {
                        status: "permission_requested".to_owned(),
                    });
                    permission = Some(Permission {
                        tool_call_id: id_s,
                        title,
                        kind,
                        options: req.options,
                    });
                }
                Some(Err(e)) => self.protocol(
                    &mut kinds,
                    format!("a session/request_permission aicli cannot read: {e}"),
                ),
                None => self.protocol(
                    &mut kinds,
                    "a session/request_permission without params".to_owned(),
                ),
            }
        } else {
            kinds.push(EventKind::Unknown {
                vendor_type: Some(format!("request {method}")),
            });
        }
        let message = (method == "elicitation/create")
            .then(|| {
                params
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            })
            .flatten();
        self.requests.insert(
            id.get().to_owned(),
            AgentRequest {
                method,
                message,
                permission,
            },
        );
        if self.live.is_some() {
            self.answer_request(id.get());
        }
        kinds
    }
}

impl Decoder for AcpDecoder {
    fn decode(&mut self, line: Line<'_>, out: &mut Vec<AgentEvent>) {
        let first = out.len();
        match line.text() {
            Ok(None) => return,
            Err(ev) => {
                self.tally.see(&ev);
                out.push(*ev);
            }
            Ok(Some(text)) => {
                let mut events = Events::new(text, out);
                match stdin_record(text) {
                    Some(msg) => events.extend(self.outgoing(msg)),
                    None => match envelope(text) {
                        Ok(env) => events.extend(self.incoming(env)),
                        Err(message) => events.protocol(message),
                    },
                }
                events.fold(&mut self.tally);
            }
        }
        if self.live.is_some() {
            self.advance();
        }
        out.append(&mut self.made);
        if self.protocol_message.is_none()
            && let Some(EventKind::Protocol { message, .. }) = out[first..]
                .iter()
                .map(|e| &e.kind)
                .find(|k| matches!(k, EventKind::Protocol { .. }))
        {
            self.protocol_message = Some(message.clone());
        }
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.done()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let rejected = self.tally.rejected.clone();
        let mut r = super::result::finish(*self, stderr, exit);
        crate::decode::settle_usage_limit(&mut r, rejected.as_ref());
        r
    }

    fn connect(&mut self, launch: &crate::provider::LaunchContext<'_>) -> Vec<AgentEvent> {
        self.live = Some(Live::new(&self.provider, launch, &self.ctx));
        self.advance();
        std::mem::take(&mut self.made)
    }

    fn take_stdin(&mut self) -> Vec<crate::decode::StdinMessage> {
        self.live
            .as_mut()
            .map(|l| std::mem::take(&mut l.outbox))
            .unwrap_or_default()
    }

    fn stop(&mut self) -> bool {
        self.stop_turn()
    }

    fn awaiting(&self) -> Option<(u64, std::time::Duration)> {
        self.deadline()
    }

    fn overdue(&mut self, id: u64) -> Vec<AgentEvent> {
        self.timed_out(id)
    }
}

/// The events of a failed run or turn: a fatal error, then the final event.
pub(super) fn failed(
    kind: ErrorKind,
    message: String,
    http_status: Option<u16>,
    cost_usd: Option<f64>,
) -> Vec<EventKind> {
    vec![
        EventKind::Error {
            error_kind: kind,
            message: message.clone(),
            fatal: true,
            http_status,
        },
        EventKind::Final {
            success: false,
            text: None,
            error_kind: Some(kind),
            error: Some(message),
            usage: None,
            cost_usd,
            num_turns: None,
            duration_ms: None,
        },
    ]
}
