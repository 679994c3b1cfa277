//! The agent's responses to aicli's requests: what `initialize` says the agent can do,
//! the session a `session/new`, `session/load` or `session/resume` gives, the prompt's
//! end (usage, then the final event and its verdict), and an error answered to any of
//! them.

use std::collections::BTreeMap;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    InitializeResponse, NewSessionResponse, PromptResponse, StopReason,
};
use serde_json::Value;
use serde_json::value::RawValue;

use super::classify::{For, classify, swallowed_error};
use super::decode::{AcpDecoder, Agent, CancelWhy, Sent, Turn};
use super::usage::{run_cost, turn_usage};
use super::wire::RpcError;
use crate::error::ErrorKind;
use crate::event::EventKind;
use crate::usage::CanonicalUsage;

impl AcpDecoder {
    /// A response to a request of aicli's.
    pub(super) fn response(
        &mut self,
        sent: Sent,
        outcome: Result<&RawValue, RpcError>,
    ) -> Vec<EventKind> {
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
                            None,
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
        self.fail_run(ErrorKind::Protocol, message, None)
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
            return super::decode::failed(kind, message, status, self.run_cost());
        }
        self.fail_run(kind, message, status)
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
            self.tally.catch_up(&by_model, &total, &mut kinds);
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
