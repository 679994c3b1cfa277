//! Forwarding a call to an upstream: started on first use, within its `timeout_secs`,
//! cancelled with the request or the task, its result held to `max_message_bytes`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use tokio_util::sync::CancellationToken;

use super::instance::{Instance, State};

impl Instance {
    /// Forwards a call of its tool `tool` (its own name).
    pub(crate) async fn call(
        self: &Arc<Self>,
        tool: &str,
        mut params: CallToolRequestParams,
        cancel: &CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Err(m) = self.ensure().await {
            return Ok(failed(m));
        }
        let (peer, oversized) = {
            let st = self.state.lock().await;
            match &*st {
                State::Up(c) => (c.peer.clone(), c.oversized.clone()),
                State::Idle | State::Failed(_) | State::Stopped => {
                    return Ok(failed(format!(
                        "MCP upstream {} is not available",
                        self.name
                    )));
                }
            }
        };
        params.name = tool.to_owned().into();
        let timeout = Duration::from_secs(self.config.timeout_secs);
        let res = tokio::select! {
            r = peer.call_tool_once(params) => r,
            () = tokio::time::sleep(timeout) => {
                return Ok(failed(format!(
                    "MCP upstream {} did not answer within {} s (mcp_upstreams.{}.timeout_secs)",
                    self.name, self.config.timeout_secs, self.name
                )));
            }
            () = cancel.cancelled() => {
                return Ok(failed("the call was cancelled or the task ended"));
            }
        };
        match res {
            Ok(r) => {
                let size = response_size(&r);
                if size > self.config.max_message_bytes {
                    return Ok(failed(
                        self.over_limit(&format!("a result of {size} bytes")),
                    ));
                }
                Ok(r)
            }
            // The upstream's own protocol error goes to the agent as it was.
            Err(rmcp::ServiceError::McpError(e)) => Err(e),
            Err(_) if oversized.load(Ordering::SeqCst) => {
                Ok(failed(self.over_limit("a longer message")))
            }
            Err(e) => Ok(failed(format!("MCP upstream {} failed: {e}", self.name))),
        }
    }

    /// Says that it sent `what`, over its `max_message_bytes`.
    pub(super) fn over_limit(&self, what: &str) -> String {
        format!(
            "MCP upstream {} sent {what}, over its limit of {} bytes (mcp_upstreams.{}.max_message_bytes)",
            self.name, self.config.max_message_bytes, self.name
        )
    }
}

/// A tool result with `isError: true` and `message` for the model.
fn failed(message: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message.into())]).into()
}

/// The bytes of a call's response as JSON.
fn response_size(r: &CallToolResponse) -> usize {
    use crate::util::json_len;
    match r {
        CallToolResponse::Complete(r) => json_len(r),
        CallToolResponse::InputRequired(r) => json_len(r),
        CallToolResponse::Task(r) => json_len(r),
        _ => 0,
    }
}
