//! The rmcp `ServerHandler` of [`AgentTools`]: the server's info, `tools/list` (the
//! built-in tools, then what the caller's token was granted), and `tools/call`, which
//! runs a built-in through the router and a granted tool through its target (a command,
//! or a forward to an upstream), after the size check of its arguments; every call is
//! logged, and recorded in the caller's run record.

use std::time::{Instant, SystemTime};

use axum::http::request::Parts;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ResultType, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use super::auth::Caller;
use super::calls::CallRecord;
use super::granted::Target;
use super::record::McpCallRecord;
use super::tools::AgentTools;

const INSTRUCTIONS: &str = "aicli's tools for the agent of one task: read your workspace (getWorkspaceFiles), the skills connected to your task (listSkills, getSkill) and the credentials granted to it (getCredential); publish progress (broadcastLog); ask the human a question and then end your turn (askUser, also named ask_user). Other tools listed here were granted to your task by its configuration.";

/// What a call produced, for the record: its response, and a command's exit code.
struct Outcome {
    res: Result<CallToolResponse, ErrorData>,
    exit_code: Option<i32>,
}

impl AgentTools {
    /// Runs a call: a built-in through the router, a granted tool through its target;
    /// anything else gets the router's answer for an unknown tool.
    async fn dispatch(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        who: Option<&Caller>,
    ) -> Outcome {
        let builtin = self.router.has_route(request.name.as_ref());
        let target = match who {
            Some(c) if !builtin => self.shared.resolve(&c.ctx, request.name.as_ref()).await,
            Some(_) | None => None,
        };
        let (Some(target), Some(c)) = (target, who) else {
            let tcc = ToolCallContext::new(self, request, context);
            return Outcome {
                res: self.router.call(tcc).await,
                exit_code: None,
            };
        };
        // A granted tool's arguments have a size too: too many bytes and nothing runs
        // (a command never starts, an upstream is never asked).
        let limit = self.shared.limits.tool_argument_bytes;
        let size = request.arguments.as_ref().map_or(0, crate::util::json_len);
        if size > limit {
            tracing::info!(task_id = %c.ctx.task_id, tool = %request.name, size, limit, "refused a tool call: its arguments are too large");
            return Outcome {
                res: Err(ErrorData::invalid_params(
                    format!(
                        "invalid arguments for tool {}: {size} bytes of JSON; at most {limit} are accepted (mcp.limits.tool_argument_bytes)",
                        request.name
                    ),
                    Some(json!({"tool": request.name, "bytes": size, "limit": limit})),
                )),
                exit_code: None,
            };
        }
        // Killed when the client cancels, and when the task's token is revoked.
        let cancel = c.cancel.child_token();
        let _on_request_cancel = {
            let ct = context.ct.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                ct.cancelled().await;
                cancel.cancel();
            })
        };
        let out = match target {
            Target::Command(tool) => {
                match super::command::call(
                    &tool,
                    request.arguments,
                    &c.ctx,
                    &self.shared.tool_env,
                    &cancel,
                )
                .await
                {
                    Ok(ran) => Outcome {
                        res: Ok(ran.result.into()),
                        exit_code: ran.exit_code,
                    },
                    Err(e) => Outcome {
                        res: Err(e),
                        exit_code: None,
                    },
                }
            }
            Target::Upstream(inst, tool) => Outcome {
                res: inst.call(&tool, request, &cancel).await,
                exit_code: None,
            },
        };
        _on_request_cancel.abort();
        out
    }
}

/// The caller the auth middleware put in front of the request (none without a token).
fn caller_of(extensions: &rmcp::model::Extensions) -> Option<&Caller> {
    extensions
        .get::<Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
}


/// A response as text for the record (never a credential's value).
fn result_text(tool: &str, res: &Result<CallToolResponse, ErrorData>) -> String {
    if tool == "getCredential" {
        return "[not recorded: getCredential's answer]".to_owned();
    }
    match res {
        Ok(CallToolResponse::Complete(r)) => {
            let mut parts: Vec<String> = r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            if parts.is_empty()
                && let Some(v) = &r.structured_content
            {
                parts.push(v.to_string());
            }
            parts.join("\n")
        }
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error {}: {}", e.code.0, e.message),
    }
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("aicli", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS.to_owned())
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.router.get(name).cloned()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self.router.list_all();
        if let Some(c) = caller_of(&context.extensions) {
            tools.extend(self.shared.granted_tools(c).await);
        }
        let hints = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: hints.then_some(0),
            // The list depends on the caller's token: no one else may reuse it.
            cache_scope: hints.then_some(CacheScope::Private),
        })
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(c) = caller_of(&context.extensions) {
            self.shared.peers.register(c, context.peer.clone());
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let at = SystemTime::now();
        let started = Instant::now();
        let tool = request.name.to_string();
        let who = caller_of(&context.extensions).cloned();
        let Outcome { res, exit_code } = self.dispatch(request, context, who.as_ref()).await;
        let ok = matches!(&res, Ok(CallToolResponse::Complete(r)) if r.is_error != Some(true));
        let duration = started.elapsed();
        if let Some(c) = who {
            tracing::debug!(token = %c.prefix, task_id = %c.ctx.task_id, tool = %tool, ok, elapsed_us = duration.as_micros() as u64, "MCP tool call");
            if let Some(dir) = &c.ctx.record_dir {
                let rec = McpCallRecord {
                    attempt: c.ctx.attempt,
                    at: humantime::format_rfc3339_millis(at).to_string(),
                    tool: tool.clone(),
                    duration_ms: duration.as_millis() as u64,
                    ok,
                    exit_code,
                    result: String::new(),
                    truncated: false,
                }
                .with_result(&result_text(&tool, &res));
                super::record::append(dir, &rec);
            }
            self.shared.calls.push(CallRecord {
                batch_id: c.ctx.batch_id.clone(),
                task_id: c.ctx.task_id.clone(),
                tool,
                ok,
                exit_code,
                at,
                duration,
            });
        }
        res
    }
}
