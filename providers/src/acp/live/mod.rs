//! The client side of a live ACP run: what aicli says, in order, and its answers to the
//! agent's requests.
//!
//! 1. `initialize` (protocol 1; no `fs` or `terminal` capability: agents read and write
//!    the worktree with their own tools, and gemini mishandles a client's
//!    `fs/read_text_file` errors).
//! 2. `session/new` in the task's directory with aicli's MCP server (HTTP, bearer
//!    header) where the agent advertises `mcpCapabilities.http`; or, for a task that
//!    resumes a session, the first of the entry's `continue_with` the agent advertises.
//! 3. The session mode of the task's permission mode (`session/set_mode`, or the `mode`
//!    config option), then the model (`session/set_config_option`) when so configured.
//! 4. `session/prompt` with the task's prompt, then `session/update`s until its
//!    response.
//!
//! Each setup request has [`super::AcpConfig::setup_timeout`] to be answered. Every
//! message is built from the crate's v1 types and recorded (bearer token redacted).
//!
//! This module holds the setup, the deadlines and the emitting of messages; `answers`
//! holds the answers to the agent's own requests and the cancel of a turn.

mod answers;

use std::path::PathBuf;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, HttpHeader, Implementation, InitializeRequest,
    LoadSessionRequest, McpServer, McpServerHttp, NewSessionRequest, NewSessionResponse,
    PromptRequest, ResumeSessionRequest, SessionConfigKind, SessionConfigOptionCategory,
    SessionConfigSelectOptions, SetSessionConfigOptionRequest, SetSessionModeRequest, TextContent,
};
use serde_json::{Map, Value};

use super::AcpProvider;
use super::config::{AcpContinue, AcpModel};
use super::decode::{AcpDecoder, Sent};
use super::wire;
use crate::decode::{StdinMessage, events_of};
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::provider::{LaunchContext, McpEndpoint};
use crate::result::{AnsweredQuestion, ParseContext};
use crate::task::PermissionMode;

/// The config option id of a session's mode (OpenCode has no `modes`, only this).
pub const MODE_OPTION: &str = "mode";

/// What stands in for the bearer token in the record.
const REDACTED: &str = "[redacted]";

/// A step of the setup that may still be due.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Due(String),
    Done,
}

/// What the session offers: its mode ids and config options (id -> values).
#[derive(Debug, Clone, Default)]
struct Offers {
    modes: Vec<String>,
    options: Vec<(String, bool, Vec<String>)>,
}

/// The live side's state.
#[derive(Debug)]
pub(super) struct Live {
    /// Messages for the CLI's stdin, until the engine takes them.
    pub outbox: Vec<StdinMessage>,
    next_id: i64,
    prompt: String,
    system_prompt: Option<String>,
    cwd: PathBuf,
    mcp: Option<McpEndpoint>,
    mode: PermissionMode,
    mode_step: Option<Step>,
    model_step: Option<(String, Step)>,
    resume: Option<String>,
    answered: Option<AnsweredQuestion>,
    setup_timeout: Duration,
    init_sent: bool,
    session_sent: bool,
    prompt_sent: bool,
    offers: Offers,
}

impl Live {
    pub(super) fn new(p: &AcpProvider, launch: &LaunchContext<'_>, ctx: &ParseContext) -> Live {
        let mode = launch
            .task
            .permission_mode
            .unwrap_or(p.config.permission_mode);
        let model = launch
            .task
            .model
            .clone()
            .or_else(|| p.config.default_model.clone());
        let model_step = match (&p.acp.model, model) {
            (Some(AcpModel::ConfigOption(id)), Some(m)) => Some((id.clone(), Step::Due(m))),
            (Some(AcpModel::ConfigOption(_) | AcpModel::Arg(_) | AcpModel::Env(_)) | None, _) => {
                None
            }
        };
        Live {
            outbox: Vec::new(),
            next_id: 0,
            prompt: launch.task.prompt.clone(),
            system_prompt: launch.task.append_system_prompt.clone(),
            cwd: launch.workdir.to_path_buf(),
            mcp: launch.mcp.cloned(),
            mode,
            mode_step: p
                .acp
                .modes
                .get(mode)
                .and_then(|m| m.mode_id(launch.in_container))
                .map(|m| Step::Due(m.to_owned())),
            model_step,
            resume: launch.task.resume_session_id.clone(),
            answered: ctx.answered.clone(),
            setup_timeout: p.acp.setup_timeout(),
            init_sent: false,
            session_sent: false,
            prompt_sent: false,
            offers: Offers::default(),
        }
    }

    /// Notes what a new (or continued) session offers.
    pub(super) fn session_offers(&mut self, r: &NewSessionResponse) {
        if let Some(m) = &r.modes {
            self.offers.modes = m
                .available_modes
                .iter()
                .map(|m| m.id.0.to_string())
                .collect();
        }
        for o in r.config_options.iter().flatten() {
            let is_mode = matches!(o.category, Some(SessionConfigOptionCategory::Mode));
            let values = match &o.kind {
                SessionConfigKind::Select(s) => match &s.options {
                    SessionConfigSelectOptions::Ungrouped(v) => {
                        v.iter().map(|x| x.value.0.to_string()).collect()
                    }
                    SessionConfigSelectOptions::Grouped(g) => g
                        .iter()
                        .flat_map(|g| g.options.iter().map(|x| x.value.0.to_string()))
                        .collect(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            self.offers
                .options
                .push((o.id.0.to_string(), is_mode, values));
        }
    }

    fn id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn mcp_servers(&self, http: bool) -> Vec<McpServer> {
        match (&self.mcp, http) {
            (Some(m), true) => vec![McpServer::Http(
                McpServerHttp::new(m.name.clone(), m.url.clone()).headers(vec![HttpHeader::new(
                    "Authorization",
                    format!("Bearer {}", m.token),
                )]),
            )],
            (Some(_), false) | (None, _) => Vec::new(),
        }
    }
}

fn aicli_meta(v: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("aicli".to_owned(), v);
    m
}

impl AcpDecoder {
    /// Makes message `msg`: it goes to the outbox, its record form is folded like a
    /// recorded message (its events go with the line's).
    fn emit(&mut self, msg: Value) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        let line = msg.to_string();
        let recorded = match &live.mcp {
            Some(m) if !m.token.is_empty() => line.replace(&m.token, REDACTED),
            Some(_) | None => line.clone(),
        };
        let m = StdinMessage::json(line, &recorded);
        let kinds = self.outgoing(m.recorded());
        let events = events_of(&mut self.tally, &m.record, kinds);
        self.made.extend(events);
        if let Some(live) = self.live.as_mut() {
            live.outbox.push(m);
        }
    }

    fn request(&mut self, method: &str, params: &impl serde::Serialize) {
        let Some(id) = self.live.as_mut().map(Live::id) else {
            return;
        };
        self.emit(wire::request(id, method, params));
    }

    /// The run fails from the live side (a setup step the agent cannot do): the events
    /// go with the line's.
    fn fail_live(&mut self, kind: ErrorKind, message: String) {
        let kinds = self.fail_run(kind, message, None);
        let events = events_of(&mut self.tally, "", kinds);
        self.made.extend(events);
    }

    /// Sends the next message of the setup, if one is due and nothing is awaited.
    pub(super) fn advance(&mut self) {
        if self.done() || !self.sent.is_empty() {
            return;
        }
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if !live.init_sent {
            live.init_sent = true;
            let req = InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(ClientCapabilities::new())
                .client_info(Implementation::new("aicli", env!("CARGO_PKG_VERSION")));
            self.request("initialize", &req);
            return;
        }
        let Some(agent) = self.agent.clone() else {
            return;
        };
        let Some(sid) = self.session_id.clone() else {
            if live.session_sent {
                return;
            }
            live.session_sent = true;
            if live.mcp.is_some() && !agent.mcp_http {
                let warning = EventKind::Error {
                    error_kind: ErrorKind::Unknown,
                    message: format!(
                        "{} does not take HTTP MCP servers (its mcpCapabilities.http is false): aicli's MCP tools (askUser, getWorkspaceFiles, ...) are not available to it",
                        self.agent_name()
                    ),
                    fatal: false,
                    http_status: None,
                };
                let events = events_of(&mut self.tally, "", vec![warning]);
                self.made.extend(events);
            }
            let Some(live) = self.live.as_mut() else {
                return;
            };
            let servers = live.mcp_servers(agent.mcp_http);
            let cwd = live.cwd.clone();
            match live.resume.clone() {
                None => {
                    let req = NewSessionRequest::new(cwd).mcp_servers(servers);
                    self.request("session/new", &req);
                }
                Some(resume) => {
                    match super::result::continue_with(self) {
                        Some(AcpContinue::Resume) => {
                            let req = ResumeSessionRequest::new(resume, cwd).mcp_servers(servers);
                            self.request("session/resume", &req);
                        }
                        Some(AcpContinue::Load) => {
                            let req = LoadSessionRequest::new(resume, cwd).mcp_servers(servers);
                            self.request("session/load", &req);
                        }
                        None => self.fail_live(
                            ErrorKind::InvalidResume,
                            format!(
                                "{} cannot continue session {resume}: it advertises neither of the ways providers.{}.acp.continue_with allows ({})",
                                self.agent_name(),
                                self.provider.name,
                                self.provider
                                    .acp
                                    .continue_with
                                    .iter()
                                    .map(|c| c.method())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ),
                    }
                }
            }
            return;
        };
        if let Some(Step::Due(mode_id)) = live.mode_step.clone() {
            live.mode_step = Some(Step::Done);
            let by_option = live.offers.options.iter().any(|(id, is_mode, values)| {
                (id == MODE_OPTION || *is_mode) && values.contains(&mode_id)
            });
            if live.offers.modes.contains(&mode_id) {
                let req = SetSessionModeRequest::new(sid, mode_id);
                self.request("session/set_mode", &req);
            } else if by_option {
                let req = SetSessionConfigOptionRequest::new(sid, MODE_OPTION, mode_id.as_str());
                self.request("session/set_config_option", &req);
            } else {
                let offered = live.offers.modes.join(", ");
                let mode = live.mode;
                self.fail_live(
                    ErrorKind::BadRequest,
                    format!(
                        "{} offers no session mode {mode_id:?} (for permission mode {}; it offers: {}); fix providers.{}.acp.modes",
                        self.agent_name(),
                        mode.as_str(),
                        if offered.is_empty() { "none".to_owned() } else { offered },
                        self.provider.name
                    ),
                );
            }
            return;
        }
        if let Some((option, Step::Due(model))) = live.model_step.clone() {
            live.model_step = Some((option.clone(), Step::Done));
            let req = SetSessionConfigOptionRequest::new(sid, option, model.as_str());
            self.request("session/set_config_option", &req);
            return;
        }
        if !live.prompt_sent {
            live.prompt_sent = true;
            let text = match &live.system_prompt {
                Some(s) => format!("{s}\n\n{}", live.prompt),
                None => live.prompt.clone(),
            };
            let req = PromptRequest::new(sid, vec![ContentBlock::Text(TextContent::new(text))]);
            self.request("session/prompt", &req);
        }
    }

    /// The setup request the live side waits for, and how long it may take.
    pub(super) fn deadline(&self) -> Option<(u64, Duration)> {
        let live = self.live.as_ref()?;
        if self.done() {
            return None;
        }
        self.sent
            .iter()
            .find(|(_, s)| **s != Sent::Prompt)
            .map(|(id, _)| (u64::try_from(*id).unwrap_or(0), live.setup_timeout))
    }

    /// The setup request `id` was not answered in time: the run fails as a timeout.
    pub(super) fn timed_out(&mut self, id: u64) -> Vec<AgentEvent> {
        let Some(sent) = i64::try_from(id)
            .ok()
            .and_then(|i| self.sent.get(&i))
            .cloned()
        else {
            return Vec::new();
        };
        let secs = self.live.as_ref().map_or(0, |l| l.setup_timeout.as_secs());
        let hint = if sent == Sent::Initialize {
            " (is the command an ACP agent? some need an option such as --acp, set in the entry's extra_args)"
        } else {
            ""
        };
        let message = format!(
            "{} did not answer {} within {secs}s{hint}; providers.{}.acp.setup_timeout_secs sets the limit",
            self.agent_name(),
            sent.method(),
            self.provider.name
        );
        let kinds = self.fail_run(ErrorKind::Timeout, message, None);
        events_of(&mut self.tally, "", kinds)
    }
}
