//! The tools that write into the caller's task event stream: `broadcastLog` (a log
//! line) and `ask_user` / `askUser` (a question, after which the run ends blocked).

use aicli_providers::{AgentEvent, EventKind, LogLevel};
use axum::http::request::Parts;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};

use super::args::{AskArgs, LogArgs};
use super::{ASK_USER_REPLY, AgentTools, caller, cap, excerpt, tool_error};
use crate::mcp::auth::Caller;

impl AgentTools {
    /// `broadcastLog`: check the level and the source, cut the message, publish it.
    pub(super) fn log(&self, args: LogArgs, parts: &Parts) -> Result<CallToolResult, ErrorData> {
        let caller = caller(parts)?;
        let l = &self.shared.limits;
        let level = match args.level.as_str() {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            other => {
                return Ok(tool_error(format!(
                    "invalid level {:?}: use one of debug, info, warning, error",
                    excerpt(other)
                )));
            }
        };
        check!(cap(
            "source",
            &args.source,
            l.log_source_chars,
            "log_source_chars"
        ));
        let max = l.log_message_chars;
        let mut message = args.message;
        let cut = match message.char_indices().nth(max) {
            Some((i, _)) => {
                message.truncate(i);
                true
            }
            None => false,
        };
        if !self.publish(
            &caller,
            EventKind::Log {
                level,
                message,
                source: args.source,
            },
        ) {
            return Ok(stream_closed());
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(if cut {
            format!("logged (message cut to {max} characters: mcp.limits.log_message_chars)")
        } else {
            "logged".to_owned()
        })]))
    }

    /// `ask_user` / `askUser`: publish the question, tell the agent to end its turn.
    pub(super) fn ask(&self, args: AskArgs, parts: &Parts) -> Result<CallToolResult, ErrorData> {
        let caller = caller(parts)?;
        let l = &self.shared.limits;
        check!(cap(
            "question",
            &args.question,
            l.question_chars,
            "question_chars"
        ));
        if args.options.len() > l.max_options {
            return Ok(tool_error(format!(
                "`options` has {} entries; at most {} are accepted (mcp.limits.max_options)",
                args.options.len(),
                l.max_options
            )));
        }
        for (i, o) in args.options.iter().enumerate() {
            check!(cap(
                &format!("options[{i}]"),
                o,
                l.option_chars,
                "option_chars"
            ));
        }
        let question = args.question.trim().to_owned();
        if question.is_empty() {
            return Ok(tool_error("the question is empty"));
        }
        if !self.publish(
            &caller,
            EventKind::Question {
                question,
                options: args.options,
            },
        ) {
            return Ok(stream_closed());
        }
        tracing::info!(task_id = %caller.ctx.task_id, "askUser: question delivered; the task will block");
        Ok(CallToolResult::success(vec![ContentBlock::text(
            ASK_USER_REPLY,
        )]))
    }

    /// Sends an event into the caller's task stream; `false` when the stream is closed.
    fn publish(&self, caller: &Caller, kind: EventKind) -> bool {
        caller.ctx.events.send(AgentEvent::synthetic(kind)).is_ok()
    }
}

/// The answer when the task's event stream is gone.
fn stream_closed() -> CallToolResult {
    tool_error("this task's event stream is closed: the task has ended")
}
