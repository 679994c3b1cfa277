//! The live answers to the agent's own requests (a permission, an elicitation, anything
//! else refused) and the cancel of a turn they may need.

use agent_client_protocol::v1::schema::{
    CancelNotification, RequestPermissionOutcome, RequestPermissionResponse,
    SelectedPermissionOutcome,
};
use serde_json::{Value, json};

use super::aicli_meta;
use crate::acp::decode::{AcpDecoder, CancelWhy};
use crate::acp::permission::{Decision, decide};
use crate::acp::updates::split_mcp;
use crate::acp::wire;

impl AcpDecoder {
    /// Answers the agent's request `id` (live).
    pub(in crate::acp) fn answer_request(&mut self, id: &str) {
        let Some(req) = self.requests.get(id).cloned() else {
            return;
        };
        let Some(live) = self.live.as_ref() else {
            return;
        };
        if req.method == "elicitation/create" {
            if self.cancelled.is_some() {
                self.emit(wire::result(id, &json!({"action": "cancel"})));
                return;
            }
            let question = format!(
                "{} asks: {}",
                self.provider.name,
                req.message
                    .as_deref()
                    .unwrap_or("(a question without words)")
            );
            self.ask(id, question, Vec::new(), json!({"action": "cancel"}));
            return;
        }
        let Some(p) = req.permission else {
            let message = if req.method == "session/request_permission" {
                "aicli could not read this permission request".to_owned()
            } else {
                format!(
                    "aicli does not offer {} (it advertised no fs, terminal or elicitation capability)",
                    req.method
                )
            };
            let code = if req.method == "session/request_permission" {
                -32602
            } else {
                -32601
            };
            self.emit(wire::error(id, code, &message));
            return;
        };
        if self.cancelled.is_some() {
            // The turn is ending (a question, a cancel): every open request is cancelled.
            let r = RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled);
            self.emit(wire::result(id, &r));
            return;
        }
        // aicli's own MCP tools (askUser, getWorkspaceFiles, ...) are always allowed, as
        // the native adapters allow them (Claude's allowedTools, Codex's approval mode,
        // Gemini's trust).
        let own_server = live.mcp.as_ref().map(|m| m.name.as_str());
        let tool_name = self.tools.get(&p.tool_call_id).map(|t| t.name.as_str());
        let own_mcp = own_server.is_some_and(|own| {
            [Some(p.title.as_str()), tool_name]
                .into_iter()
                .flatten()
                .any(|n| split_mcp(n, &self.mcp_servers).1.as_deref() == Some(own))
        });
        let decision = decide(
            &self.provider.name,
            live.mode,
            p.kind.as_ref(),
            &p.title,
            &p.options,
            live.answered.as_ref(),
            own_mcp,
        );
        match decision {
            Decision::Select { option_id, why, .. } => {
                let r = RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
                    SelectedPermissionOutcome::new(option_id),
                ))
                .meta(aicli_meta(json!({"why": why})));
                self.emit(wire::result(id, &r));
            }
            Decision::Refuse { why } => {
                let r = RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled)
                    .meta(aicli_meta(json!({"why": why})));
                self.emit(wire::result(id, &r));
            }
            Decision::Ask { question, options } => {
                let r = RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled);
                let answer = serde_json::to_value(&r).unwrap_or(Value::Null);
                self.ask(id, question, options, answer);
            }
        }
    }

    /// Turns request `id` into the run's question: the turn is cancelled first (so the
    /// agent does not go on as if refused), then the request is answered with `answer`
    /// carrying the question in its `_meta`.
    fn ask(&mut self, id: &str, question: String, options: Vec<String>, mut answer: Value) {
        self.send_cancel(CancelWhy::Question);
        if let Value::Object(m) = &mut answer {
            m.insert(
                "_meta".to_owned(),
                json!({"aicli": {"question": question, "options": options}}),
            );
        }
        self.emit(wire::result(id, &answer));
    }

    fn send_cancel(&mut self, why: CancelWhy) {
        let Some(sid) = self.session_id.clone() else {
            return;
        };
        if self.cancelled.is_some() {
            return;
        }
        let reason = match why {
            CancelWhy::Question => "question",
            CancelWhy::Stop => "cancel",
        };
        let n = CancelNotification::new(sid).meta(aicli_meta(json!({"reason": reason})));
        self.emit(wire::notification("session/cancel", &n));
    }

    /// A cancel of the run: `session/cancel`, and every open request answered
    /// cancelled. `false` when there is no turn to cancel (the engine kills at once).
    pub(in crate::acp) fn stop_turn(&mut self) -> bool {
        let prompting = self.live.as_ref().is_some_and(|l| l.prompt_sent);
        if self.live.is_none() || self.done() || !prompting || self.session_id.is_none() {
            return false;
        }
        self.send_cancel(CancelWhy::Stop);
        let open: Vec<String> = self.requests.keys().cloned().collect();
        for id in open {
            self.answer_request(&id);
        }
        true
    }
}
