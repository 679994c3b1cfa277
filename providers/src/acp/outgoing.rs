//! aicli's own messages, as a recorded run keeps them (behind the `aicli_stdin`
//! marker) and as the live side makes them: the requests aicli sent (and so the
//! responses it waits for), its cancel, and its answers to the agent's requests (an
//! allowed or refused permission, a question asked for the agent).

use agent_client_protocol::v1::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionResponse,
};
use serde_json::Value;
use serde_json::value::RawValue;

use super::config::AcpContinue;
use super::decode::{AcpDecoder, CancelWhy, Permission, Sent};
use super::wire::{Envelope, at, envelope, own_id};
use crate::event::EventKind;
use crate::result::PendingQuestion;

impl AcpDecoder {
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
