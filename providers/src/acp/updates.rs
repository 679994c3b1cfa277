//! `session/update` -> events:
//!
//! | update | event |
//! |---|---|
//! | `agent_message_chunk` | `assistant_text` (a chunk; the answer joins them, messages apart by a blank line) |
//! | `agent_thought_chunk` | `thinking` |
//! | `user_message_chunk` | `user_message` |
//! | `tool_call`, `tool_call_update` | `tool_call` (once, when its input is known), `tool_result` when `completed` / `failed` |
//! | `plan` | `plan` |
//! | `usage_update` | `status` (its `cost` and context fill are folded for the result) |
//! | `notice` (warning, error) | `error` (not fatal) |
//! | the others the crate knows | `status` |
//! | an update the crate does not know | `unknown` |
//!
//! While `session/load` replays a session's history (before its response) every update
//! is `status` "history": the replayed text is not this run's answer.

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, NoticeSeverity, PlanEntryStatus, SessionNotification,
    SessionUpdate, ToolCallContent, ToolCallStatus, ToolKind,
};
use serde_json::Value;
use serde_json::value::RawValue;

use super::decode::{AcpDecoder, OpenTool};
use super::wire::update_tag;
use crate::event::{EventKind, PlanItem};

/// The `sessionUpdate` tags the crate's enum reads (the rest pass as `unknown`).
const KNOWN: [&str; 14] = [
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
    "notice",
    "compaction_update",
    "compaction_summary_chunk",
];

fn status(s: &str) -> EventKind {
    EventKind::Status {
        status: s.to_owned(),
    }
}

/// The text of a content block, or what it is.
fn block_text(b: &ContentBlock) -> Option<&str> {
    match b {
        ContentBlock::Text(t) => Some(&t.text),
        _ => None,
    }
}

impl AcpDecoder {
    /// One `session/update` notification.
    pub(super) fn update(&mut self, params: Option<&RawValue>) -> Vec<EventKind> {
        let Some(params) = params else {
            return vec![EventKind::Protocol {
                message: "a session/update without params".to_owned(),
                line_bytes: 0,
            }];
        };
        let n = match serde_json::from_str::<SessionNotification>(params.get()) {
            Ok(n) => n,
            Err(e) => {
                return match update_tag(params) {
                    Some(t) if !KNOWN.contains(&t.as_str()) => vec![EventKind::Unknown {
                        vendor_type: Some(format!("session/update {t}")),
                    }],
                    Some(_) | None => {
                        vec![EventKind::Protocol {
                            message: format!("a session/update aicli cannot read: {e}"),
                            line_bytes: 0,
                        }]
                    }
                };
            }
        };
        if self.loading {
            return vec![status("history")];
        }
        match n.update {
            SessionUpdate::UserMessageChunk(c) => match block_text(&c.content) {
                Some(t) => vec![EventKind::UserMessage { text: t.to_owned() }],
                None => vec![status("user_message_chunk")],
            },
            SessionUpdate::AgentMessageChunk(c) => self.message_chunk(c),
            SessionUpdate::AgentThoughtChunk(c) => match block_text(&c.content) {
                Some(t) => vec![EventKind::Thinking { text: t.to_owned() }],
                None => vec![status("agent_thought_chunk")],
            },
            SessionUpdate::ToolCall(tc) => {
                let id = tc.tool_call_id.0.to_string();
                let pending_without_input = tc.status == ToolCallStatus::Pending
                    && tc.raw_input.as_ref().is_none_or(is_empty);
                let mut kinds = if pending_without_input {
                    self.tools.entry(id.clone()).or_insert_with(|| OpenTool {
                        name: tc.name.clone().unwrap_or_else(|| tc.title.clone()),
                        title: tc.title.clone(),
                        kind: Some(tc.kind),
                        announced: false,
                    });
                    vec![status("tool_call pending")]
                } else {
                    self.tool_seen(
                        &id,
                        tc.name.as_deref(),
                        &tc.title,
                        Some(tc.kind),
                        tc.raw_input.as_ref(),
                    )
                };
                kinds.extend(self.tool_status(
                    &id,
                    Some(&tc.status),
                    &tc.content,
                    tc.raw_output.as_ref(),
                ));
                kinds
            }
            SessionUpdate::ToolCallUpdate(u) => {
                let id = u.tool_call_id.0.to_string();
                let f = &u.fields;
                let known = self.tools.get(&id).cloned();
                let title = f
                    .title
                    .clone()
                    .or_else(|| known.as_ref().map(|t| t.title.clone()))
                    .unwrap_or_default();
                let kind = f.kind.or_else(|| known.as_ref().and_then(|t| t.kind));
                let mut kinds = Vec::new();
                let announce = known.as_ref().is_none_or(|t| !t.announced)
                    && (f.raw_input.is_some() || f.status.is_some() || known.is_none());
                if announce {
                    kinds.extend(self.tool_seen(
                        &id,
                        f.name.as_deref(),
                        &title,
                        kind,
                        f.raw_input.as_ref(),
                    ));
                } else if let Some(t) = self.tools.get_mut(&id)
                    && let Some(new) = &f.title
                {
                    t.title = new.clone();
                }
                let content = f.content.clone().unwrap_or_default();
                let done =
                    self.tool_status(&id, f.status.as_ref(), &content, f.raw_output.as_ref());
                if done.is_empty() && kinds.is_empty() {
                    kinds.push(status("tool_call_update"));
                }
                kinds.extend(done);
                kinds
            }
            SessionUpdate::Plan(p) => vec![EventKind::Plan {
                items: p
                    .entries
                    .iter()
                    .map(|e| PlanItem {
                        text: e.content.clone(),
                        completed: e.status == PlanEntryStatus::Completed,
                    })
                    .collect(),
            }],
            SessionUpdate::UsageUpdate(u) => {
                self.context = Some((u.used, u.size));
                let mut kinds = vec![status("usage_update")];
                if let Some(c) = &u.cost {
                    if c.currency.eq_ignore_ascii_case("USD") && c.amount.is_finite() {
                        self.cost = Some(c.amount);
                    } else {
                        kinds.push(EventKind::Error {
                            error_kind: crate::ErrorKind::Unknown,
                            message: format!(
                                "the agent reported a cost of {} {}; aicli counts USD only",
                                c.amount, c.currency
                            ),
                            fatal: false,
                            http_status: None,
                        });
                    }
                }
                kinds
            }
            SessionUpdate::Notice(n) => match n.severity {
                NoticeSeverity::Warning | NoticeSeverity::Error => vec![EventKind::Error {
                    error_kind: crate::ErrorKind::Unknown,
                    message: match &n.description {
                        Some(d) => format!("{}: {d}", n.title),
                        None => n.title.clone(),
                    },
                    fatal: false,
                    http_status: None,
                }],
                _ => vec![status("notice")],
            },
            SessionUpdate::AvailableCommandsUpdate(_) => vec![status("available_commands_update")],
            SessionUpdate::CurrentModeUpdate(_) => vec![status("current_mode_update")],
            SessionUpdate::ConfigOptionUpdate(_) => vec![status("config_option_update")],
            SessionUpdate::SessionInfoUpdate(_) => vec![status("session_info_update")],
            SessionUpdate::CompactionUpdate(_) => vec![status("compaction_update")],
            SessionUpdate::CompactionSummaryChunk(_) => vec![status("compaction_summary_chunk")],
            _ => vec![EventKind::Unknown {
                vendor_type: update_tag(params).map(|t| format!("session/update {t}")),
            }],
        }
    }

    /// An agent message chunk: text of the answer, or (claude-agent-acp's
    /// `_meta.claudeCode.kind: "informational"` notes, non-text blocks) a status.
    fn message_chunk(&mut self, c: ContentChunk) -> Vec<EventKind> {
        let informational = c
            .meta
            .as_ref()
            .and_then(|m| m.get("claudeCode"))
            .and_then(|cc| cc.get("kind"))
            .and_then(Value::as_str)
            == Some("informational");
        let Some(text) = block_text(&c.content).filter(|_| !informational) else {
            return vec![status(if informational {
                "informational"
            } else {
                "agent_message_chunk"
            })];
        };
        if !self.prompted {
            return vec![EventKind::Status {
                status: format!("the agent said before the prompt: {text}"),
            }];
        }
        let id = c.message_id.as_ref().map(|m| m.0.to_string());
        let new_id = id.is_some() && id != self.message_id;
        if !self.response.is_empty() && (self.new_message || new_id) {
            self.response.push_str("\n\n");
        }
        if self.new_message {
            self.last_text.clear();
        }
        self.new_message = false;
        if id.is_some() {
            self.message_id = id;
        }
        self.response.push_str(text);
        self.last_text.push_str(text);
        vec![EventKind::AssistantText {
            text: text.to_owned(),
            delta: true,
        }]
    }

    /// The first sight of a tool call with its input (a `tool_call`, an update, a
    /// permission request): its `tool_call` event, once.
    pub(super) fn tool_seen(
        &mut self,
        id: &str,
        name: Option<&str>,
        title: &str,
        kind: Option<ToolKind>,
        raw_input: Option<&Value>,
    ) -> Vec<EventKind> {
        let t = self.tools.entry(id.to_owned()).or_insert_with(|| OpenTool {
            name: name.unwrap_or(title).to_owned(),
            title: title.to_owned(),
            kind,
            announced: false,
        });
        if let Some(n) = name {
            t.name = n.to_owned();
        }
        if !title.is_empty() {
            t.title = title.to_owned();
        }
        if kind.is_some() {
            t.kind = kind;
        }
        if t.announced {
            return Vec::new();
        }
        t.announced = true;
        let full = t.name.clone();
        self.new_message = true;
        let (name, mcp_server) = split_mcp(&full, &self.mcp_servers);
        vec![EventKind::ToolCall {
            id: id.to_owned(),
            name,
            input: raw_input
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
            mcp_server,
        }]
    }

    /// A tool call's status: its result when it finished.
    fn tool_status(
        &mut self,
        id: &str,
        status: Option<&ToolCallStatus>,
        content: &[ToolCallContent],
        raw_output: Option<&Value>,
    ) -> Vec<EventKind> {
        let is_error = match status {
            Some(ToolCallStatus::Completed) => false,
            Some(ToolCallStatus::Failed) => true,
            Some(_) | None => return Vec::new(),
        };
        let Some(t) = self.tools.remove(id) else {
            return Vec::new();
        };
        self.new_message = true;
        let mut kinds = Vec::new();
        if !t.announced {
            kinds.push(EventKind::ToolCall {
                id: id.to_owned(),
                name: split_mcp(&t.name, &self.mcp_servers).0,
                input: Value::Object(Default::default()),
                mcp_server: split_mcp(&t.name, &self.mcp_servers).1,
            });
        }
        kinds.push(EventKind::ToolResult {
            id: id.to_owned(),
            name: Some(split_mcp(&t.name, &self.mcp_servers).0),
            output: output_text(content, raw_output),
            is_error,
            exit_code: None,
        });
        kinds
    }

    /// Tool calls the turn left open (gemini never closes a call it was refused): each
    /// gets a failed result when the turn ends, in id order.
    pub(super) fn close_open_tools(&mut self) -> Vec<EventKind> {
        let open = std::mem::take(&mut self.tools);
        let why = match self.cancelled {
            Some(super::decode::CancelWhy::Question) => {
                "not run: aicli ended the turn to ask a human first"
            }
            Some(super::decode::CancelWhy::Stop) => "not finished: the run was cancelled",
            None => "the turn ended before the tool call finished",
        };
        let mut kinds = Vec::new();
        for (id, t) in open {
            let (name, mcp_server) = split_mcp(&t.name, &self.mcp_servers);
            if !t.announced {
                kinds.push(EventKind::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    input: Value::Object(Default::default()),
                    mcp_server,
                });
            }
            kinds.push(EventKind::ToolResult {
                id,
                name: Some(name),
                output: why.to_owned(),
                is_error: true,
                exit_code: None,
            });
        }
        kinds
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// A tool's output as text: its text content, else its raw output.
fn output_text(content: &[ToolCallContent], raw_output: Option<&Value>) -> String {
    let texts: Vec<String> = content
        .iter()
        .filter_map(|c| match c {
            ToolCallContent::Content(c) => block_text(&c.content).map(str::to_owned),
            ToolCallContent::Diff(d) => Some(format!("(diff of {})", d.path.display())),
            _ => None,
        })
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match raw_output {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// A tool name as each agent spells an MCP tool -> (tool, server): `mcp__S__T`
/// (claude), `mcp.S.T` (codex-acp), `T (S MCP Server)` (gemini's title), `mcp_S_T`
/// (gemini's function name), `S_T` (OpenCode, for a server aicli gave the session).
pub fn split_mcp(name: &str, servers: &[String]) -> (String, Option<String>) {
    let pair = |s: &str, t: &str| (t.to_owned(), Some(s.to_owned()));
    if let Some(rest) = name.strip_prefix("mcp__")
        && let Some((s, t)) = rest.split_once("__")
    {
        return pair(s, t);
    }
    if let Some(rest) = name.strip_prefix("mcp.")
        && let Some((s, t)) = rest.split_once('.')
    {
        return pair(s, t);
    }
    if let Some(rest) = name.strip_suffix(" MCP Server)")
        && let Some((t, s)) = rest.rsplit_once(" (")
    {
        return pair(s, t);
    }
    for s in servers {
        for prefix in [format!("mcp_{s}_"), format!("{s}_")] {
            if let Some(t) = name.strip_prefix(&prefix)
                && !t.is_empty()
            {
                return pair(s, t);
            }
        }
    }
    (name.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::split_mcp;

    #[test]
    fn mcp_tool_names_of_each_agent() {
        let servers = vec!["aicli".to_owned()];
        let want = ("listSkills".to_owned(), Some("aicli".to_owned()));
        assert_eq!(split_mcp("mcp__aicli__listSkills", &servers), want);
        assert_eq!(split_mcp("mcp.aicli.listSkills", &servers), want);
        assert_eq!(split_mcp("listSkills (aicli MCP Server)", &servers), want);
        assert_eq!(split_mcp("mcp_aicli_listSkills", &servers), want);
        assert_eq!(split_mcp("aicli_listSkills", &servers), want);
        assert_eq!(split_mcp("Bash", &servers), ("Bash".to_owned(), None));
        assert_eq!(
            split_mcp("other_tool", &servers),
            ("other_tool".to_owned(), None)
        );
    }
}
