//! The ACP decoder's state and its reading of each line: the agent's messages (raw
//! JSON-RPC lines) and, in a recorded run, aicli's own (behind the `aicli_stdin`
//! marker), both folded the same way. The live side (what aicli says) is in `live`.

use std::collections::BTreeMap;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    InitializeResponse, NewSessionResponse, PermissionOption, PermissionOptionKind, PromptResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, StopReason,
    ToolKind,
};
use serde_json::Value;
use serde_json::value::RawValue;

use super::AcpProvider;
use super::classify::{For, classify, swallowed_error};
use super::config::AcpContinue;
use super::live::Live;
use super::usage::{Source, run_cost, turn_usage};
use super::wire::{Envelope, RpcError, at, envelope, own_id};
use crate::decode::{Decoder, ExitStatus, Line, Tally, events_of, protocol_of, stdin_record};
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

    /// The run fails for good: an error event and a final event.
    pub(super) fn fail_run(&mut self, kind: ErrorKind, message: String) -> Vec<EventKind> {
        self.fatal = Some((kind, message.clone()));
        vec![
            EventKind::Error {
                error_kind: kind,
                message: message.clone(),
                fatal: true,
                http_status: None,
            },
            EventKind::Final {
                success: false,
                text: None,
                error_kind: Some(kind),
                error: Some(message),
                usage: None,
                cost_usd: None,
                num_turns: None,
                duration_ms: None,
            },
        ]
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

    /// A response to a request of aicli's.
    fn response(&mut self, sent: Sent, outcome: Result<&RawValue, RpcError>) -> Vec<EventKind> {
        let outcome = match outcome {
            Ok(r) => r,
            Err(e) => return self.error_response(&sent, &e),
        };
        let mut kinds = Vec::new();
        match &sent {
            Sent::Initialize => match serde_json::from_str::<InitializeResponse>(outcome.get()) {
                Ok(r) => {
                    let caps = &r.agent_capabilities;
                    let info = r.agent_info.as_ref();
                    self.agent = Some(Agent {
                        name: info.map(|i| i.name.clone()),
                        version: info.map(|i| i.version.clone()),
                        load_session: caps.load_session,
                        resume: caps.session_capabilities.resume.is_some(),
                        mcp_http: caps.mcp_capabilities.http,
                    });
                    kinds.push(EventKind::Status {
                        status: "initialized".to_owned(),
                    });
                    if r.protocol_version != ProtocolVersion::V1 {
                        kinds.extend(self.fail_run(
                            ErrorKind::Protocol,
                            format!(
                                "{} speaks ACP protocol version {}; aicli speaks version 1",
                                self.agent_name(),
                                serde_json::to_string(&r.protocol_version).unwrap_or_default()
                            ),
                        ));
                    }
                }
                Err(e) => kinds.extend(self.unreadable(&sent, &e)),
            },
            Sent::NewSession => match serde_json::from_str::<NewSessionResponse>(outcome.get()) {
                Ok(r) => {
                    let sid = r.session_id.0.to_string();
                    if let Some(live) = self.live.as_mut() {
                        live.session_offers(&r);
                    }
                    kinds.push(self.session_started(sid));
                }
                Err(e) => kinds.extend(self.unreadable(&sent, &e)),
            },
            Sent::Continue { session_id, .. } => {
                self.loading = false;
                let sid = session_id.clone();
                if let (Some(live), Ok(v)) = (
                    self.live.as_mut(),
                    serde_json::from_str::<NewSessionResponse>(&with_session(outcome.get(), &sid)),
                ) {
                    live.session_offers(&v);
                }
                kinds.push(self.session_started(sid));
            }
            Sent::SetMode(m) => kinds.push(EventKind::Status {
                status: format!("mode {m}"),
            }),
            Sent::SetOption { id, value } => kinds.push(EventKind::Status {
                status: format!("{id} {value}"),
            }),
            Sent::Prompt => kinds.extend(self.prompt_done(outcome)),
            Sent::Other(m) => kinds.push(EventKind::Status {
                status: format!("{m} answered"),
            }),
        }
        kinds
    }

    fn session_started(&mut self, sid: String) -> EventKind {
        if self.session_id.is_none() {
            self.session_id = Some(sid.clone());
        }
        EventKind::SessionStarted {
            session_id: sid,
            model: self.model.clone(),
            cwd: None,
            tools: Vec::new(),
            mcp_servers: Vec::new(),
            cli_version: self.agent.as_ref().and_then(|a| a.version.clone()),
        }
    }

    fn unreadable(&mut self, sent: &Sent, e: &serde_json::Error) -> Vec<EventKind> {
        let message = format!(
            "{} answered {} with a result aicli cannot read: {e}",
            self.agent_name(),
            sent.method()
        );
        self.fail_run(ErrorKind::Protocol, message)
    }

    fn error_response(&mut self, sent: &Sent, e: &RpcError) -> Vec<EventKind> {
        let what = match sent {
            Sent::Continue { .. } => For::Continue,
            Sent::Initialize
            | Sent::NewSession
            | Sent::SetMode(_)
            | Sent::SetOption { .. }
            | Sent::Prompt
            | Sent::Other(_) => For::Other,
        };
        let mut kind = classify(e, what);
        let detail = e
            .data
            .as_ref()
            .filter(|d| !d.is_null())
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let mut message = format!(
            "{} answered {} with error {}: {}{detail}",
            self.agent_name(),
            sent.method(),
            e.code,
            e.message
        );
        if matches!(sent, Sent::SetMode(_) | Sent::SetOption { .. }) {
            kind = ErrorKind::BadRequest;
            message.push_str(&format!(
                "; aicli does not run the agent in another mode than the one configured for the task's permission mode (providers.{}.acp.modes): fix the entry, or run with another permission mode",
                self.provider.name
            ));
        }
        let status = u16::try_from(e.code)
            .ok()
            .filter(|s| (400..600).contains(s));
        if let Sent::Prompt = sent {
            // The turn failed: its final event, as for any CLI.
            self.turn = Some(Turn {
                stop: None,
                success: false,
                error: Some((kind, message.clone())),
                usage: None,
            });
            return vec![
                EventKind::Error {
                    error_kind: kind,
                    message: message.clone(),
                    fatal: true,
                    http_status: status,
                },
                EventKind::Final {
                    success: false,
                    text: None,
                    error_kind: Some(kind),
                    error: Some(message),
                    usage: None,
                    cost_usd: self.run_cost(),
                    num_turns: None,
                    duration_ms: None,
                },
            ];
        }
        let mut kinds = self.fail_run(kind, message);
        if let Some(EventKind::Error { http_status, .. }) = kinds.first_mut() {
            *http_status = status;
        }
        kinds
    }

    /// The run's cost so far, from the cumulative figure.
    pub(super) fn run_cost(&self) -> Option<f64> {
        self.cost
            .map(|c| run_cost(c, self.ctx.prior.and_then(|p| p.cost_usd)))
    }

    /// The prompt's response: usage, then the final event.
    fn prompt_done(&mut self, raw: &RawValue) -> Vec<EventKind> {
        let value: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        let typed = serde_json::from_value::<PromptResponse>(value.clone());
        let stop = match typed {
            Ok(r) => r.stop_reason,
            Err(e) => return self.unreadable(&Sent::Prompt, &e),
        };
        let usage = turn_usage(&value, self.model.as_deref());
        let mut kinds = Vec::new();
        if let Some((rows, _)) = &usage {
            let mut by_model = BTreeMap::new();
            let mut total = CanonicalUsage::default();
            for (m, u) in rows {
                total += *u;
                if let Some(m) = m.clone().or_else(|| self.model.clone()) {
                    *by_model.entry(m).or_default() += *u
                }
            }
            kinds.extend(self.tally.catch_up(&by_model, &total));
        }
        kinds.extend(self.close_open_tools());
        let (success, error) = self.verdict(&stop, &value);
        self.turn = Some(Turn {
            stop: Some(stop),
            success,
            error: error.clone(),
            usage: usage.clone(),
        });
        kinds.push(EventKind::Final {
            success,
            text: None,
            error_kind: error.as_ref().map(|(k, _)| *k),
            error: error.map(|(_, m)| m),
            usage: usage
                .map(|(rows, _)| rows.values().fold(CanonicalUsage::default(), |a, u| a + *u)),
            cost_usd: self.run_cost(),
            num_turns: None,
            duration_ms: None,
        });
        kinds
    }

    /// What a stop reason means for the run.
    fn verdict(&self, stop: &StopReason, result: &Value) -> (bool, Option<(ErrorKind, String)>) {
        let agent = self.agent_name();
        match stop {
            StopReason::EndTurn => match swallowed_error(result, self.last_text.trim()) {
                Some(kind) if !self.last_text.trim().is_empty() => (
                    false,
                    Some((
                        kind,
                        format!(
                            "{agent} ended the turn with no usage and this text, which reads as an API error: {}",
                            self.last_text.trim()
                        ),
                    )),
                ),
                Some(_) | None => (true, None),
            },
            StopReason::MaxTokens => (
                false,
                Some((
                    ErrorKind::BadRequest,
                    format!(
                        "{agent} stopped: the model reached its token limit (stopReason max_tokens)"
                    ),
                )),
            ),
            StopReason::MaxTurnRequests => (
                false,
                Some((
                    ErrorKind::MaxTurns,
                    format!("{agent} stopped at its turn limit (stopReason max_turn_requests)"),
                )),
            ),
            StopReason::Refusal => (
                false,
                Some((
                    ErrorKind::Permission,
                    "the model refused to go on (stopReason refusal)".to_owned(),
                )),
            ),
            StopReason::Cancelled => match self.cancelled {
                Some(CancelWhy::Question) => (false, None),
                Some(CancelWhy::Stop) => (
                    false,
                    Some((ErrorKind::Cancelled, "the run was cancelled".to_owned())),
                ),
                None if !self.denied.is_empty() => (
                    false,
                    Some((
                        ErrorKind::Permission,
                        format!(
                            "{agent} ended the turn (stopReason cancelled) after aicli refused its permission request ({}); some agents end the turn on a refusal",
                            self.denied.join("; ")
                        ),
                    )),
                ),
                None => (
                    false,
                    Some((
                        ErrorKind::Cancelled,
                        format!("{agent} ended the turn as cancelled"),
                    )),
                ),
            },
            _ => (
                false,
                Some((
                    ErrorKind::Unknown,
                    format!("{agent} ended the turn with a stop reason aicli does not know"),
                )),
            ),
        }
    }

    /// One of aicli's own messages, from the record (replay) or as the live side made
    /// it: what it changes.
    pub(super) fn outgoing(&mut self, msg: &str) -> Vec<EventKind> {
        let env = match envelope(msg) {
            Ok(e) => e,
            Err(e) => {
                return vec![EventKind::Protocol {
                    message: format!("a recorded message of aicli's that is not JSON-RPC: {e}"),
                    line_bytes: 0,
                }];
            }
        };
        match env {
            Envelope::Request { id, method, params } => {
                let sent = self.sent_request(&method, params);
                let mut kinds = vec![EventKind::Status {
                    status: method.clone(),
                }];
                if sent == Sent::Prompt {
                    self.prompted = true;
                }
                if sent == Sent::Prompt
                    && let Some(text) = params.and_then(|p| prompt_text(p.get()))
                {
                    kinds.push(EventKind::UserMessage { text });
                }
                if let Some(i) = own_id(id) {
                    self.sent.insert(i, sent);
                }
                kinds
            }
            Envelope::Notification { method, params } => {
                if method == "session/cancel" {
                    let why = params
                        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                        .and_then(|v| {
                            at(&v, &["_meta", "aicli", "reason"])
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        });
                    self.cancelled = Some(match why.as_deref() {
                        Some("question") => CancelWhy::Question,
                        Some(_) | None => CancelWhy::Stop,
                    });
                }
                vec![EventKind::Status { status: method }]
            }
            Envelope::Result { id, result } => self.answered(id.get(), Some(result)),
            Envelope::Error { id: Some(id), .. } => self.answered(id.get(), None),
            Envelope::Error { id: None, .. } => Vec::new(),
        }
    }

    fn sent_request(&mut self, method: &str, params: Option<&RawValue>) -> Sent {
        let v: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let sid = || {
            v.get("sessionId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match method {
            "initialize" => Sent::Initialize,
            "session/new" | "session/load" | "session/resume" => {
                self.mcp_servers = v
                    .get("mcpServers")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.get("name")?.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                match method {
                    "session/load" => {
                        self.loading = true;
                        Sent::Continue {
                            how: AcpContinue::Load,
                            session_id: sid(),
                        }
                    }
                    "session/resume" => Sent::Continue {
                        how: AcpContinue::Resume,
                        session_id: sid(),
                    },
                    _ => Sent::NewSession,
                }
            }
            "session/set_mode" => Sent::SetMode(
                v.get("modeId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            "session/set_config_option" => {
                let value = v
                    .get("value")
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                    .unwrap_or_default();
                if v.get("configId").and_then(Value::as_str) == Some(super::live::MODE_OPTION) {
                    Sent::SetMode(value)
                } else {
                    Sent::SetOption {
                        id: v
                            .get("configId")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        value,
                    }
                }
            }
            "session/prompt" => Sent::Prompt,
            other => Sent::Other(other.to_owned()),
        }
    }

    /// aicli answered the agent's request `id` (`result`: `None` for an error answer).
    fn answered(&mut self, id: &str, result: Option<&RawValue>) -> Vec<EventKind> {
        let Some(req) = self.requests.remove(id) else {
            return vec![EventKind::Status {
                status: "answered".to_owned(),
            }];
        };
        let Some(result) = result else {
            return vec![EventKind::Status {
                status: format!("refused {}", req.method),
            }];
        };
        let meta: Option<Value> = serde_json::from_str::<Value>(result.get())
            .ok()
            .and_then(|v| at(&v, &["_meta", "aicli"]).cloned());
        let meta_str = |k: &str| {
            meta.as_ref()
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        // A question to a human, in aicli's `_meta` of its answer.
        if let Some(q) = meta_str("question") {
            let options: Vec<String> = meta
                .as_ref()
                .and_then(|m| m.get("options"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|o| o.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            self.asked = Some(PendingQuestion {
                question: q.clone(),
                options: options.clone(),
                asked_at: String::new(),
            });
            return vec![EventKind::Question {
                question: q,
                options,
            }];
        }
        let Some(p) = req.permission else {
            return vec![EventKind::Status {
                status: format!("answered {}", req.method),
            }];
        };
        let why = meta_str("why").unwrap_or_default();
        let denied = |d: &mut Self, p: Permission| {
            d.denied.push(p.title.clone());
            vec![EventKind::PermissionDenied {
                tool: p.title,
                tool_call_id: Some(p.tool_call_id),
                message: format!("aicli refused it ({why})"),
            }]
        };
        match serde_json::from_str::<RequestPermissionResponse>(result.get()).map(|a| a.outcome) {
            Ok(RequestPermissionOutcome::Selected(s)) => {
                let allowed = p.options.iter().any(|o| {
                    o.option_id == s.option_id
                        && matches!(
                            o.kind,
                            PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways
                        )
                });
                if allowed {
                    vec![EventKind::Status {
                        status: format!("permission allowed: {}", s.option_id.0),
                    }]
                } else {
                    denied(self, p)
                }
            }
            Ok(RequestPermissionOutcome::Cancelled) if !why.is_empty() => denied(self, p),
            Ok(RequestPermissionOutcome::Cancelled) => vec![EventKind::Status {
                status: "permission cancelled".to_owned(),
            }],
            Ok(_) | Err(_) => vec![EventKind::Status {
                status: "permission answered".to_owned(),
            }],
        }
    }
}

/// A load/resume response with the session id it does not carry, to read as a new
/// session's (modes, config options).
fn with_session(result: &str, sid: &str) -> String {
    match serde_json::from_str::<Value>(result) {
        Ok(Value::Object(mut m)) => {
            m.insert("sessionId".to_owned(), Value::String(sid.to_owned()));
            Value::Object(m).to_string()
        }
        Ok(_) | Err(_) => format!("{{\"sessionId\":{}}}", Value::String(sid.to_owned())),
    }
}

/// The text of a `session/prompt`'s params.
fn prompt_text(params: &str) -> Option<String> {
    let v: Value = serde_json::from_str(params).ok()?;
    let blocks = v.get("prompt")?.as_array()?;
    Some(
        blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

impl Decoder for AcpDecoder {
    fn line(&mut self, line: Line<'_>) -> Vec<AgentEvent> {
        let mut out = match line.text() {
            Ok(None) => return Vec::new(),
            Err(ev) => {
                self.tally.see(&ev);
                vec![*ev]
            }
            Ok(Some(text)) => match stdin_record(text) {
                Some(msg) => {
                    let kinds = self.outgoing(msg);
                    events_of(&mut self.tally, text, kinds)
                }
                None => match envelope(text) {
                    Ok(env) => {
                        let kinds = self.incoming(env);
                        events_of(&mut self.tally, text, kinds)
                    }
                    Err(message) => protocol_of(&mut self.tally, text, message),
                },
            },
        };
        if self.live.is_some() {
            self.advance();
        }
        out.append(&mut self.made);
        if self.protocol_message.is_none()
            && let Some(EventKind::Protocol { message, .. }) = out
                .iter()
                .map(|e| &e.kind)
                .find(|k| matches!(k, EventKind::Protocol { .. }))
        {
            self.protocol_message = Some(message.clone());
        }
        out
    }

    fn usage(&self) -> CanonicalUsage {
        self.tally.usage()
    }

    fn finished(&self) -> bool {
        self.done()
    }

    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        super::result::finish(*self, stderr, exit)
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
