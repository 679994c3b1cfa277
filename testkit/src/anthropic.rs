//! The fake Anthropic Messages API (`POST /v1/messages?beta=true`, SSE), as Claude Code
//! uses it.
//!
//! Stream: `message_start` (usage with `output_tokens: 1`), `ping`, per content block
//! `content_block_start` / `content_block_delta` (`text_delta` or `input_json_delta`) /
//! `content_block_stop`, then `message_delta` (`stop_reason`, `usage.output_tokens`) and
//! `message_stop`. Errors: `{"type":"error","error":{"type":…,"message":…}}` with the
//! status and a `request-id` header.

use serde_json::{Value, json};

use crate::Vendor;
use crate::render::{
    Ctx, Rendered, Reply, StreamEnd, content_text, default_text, short_id, word_chunks,
};
use crate::script::{ErrorFlavor, ErrorReply, Step};

/// One SSE frame: `event: NAME` + `data: JSON`.
fn frame(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A content block of the answer.
enum Block {
    Text(String),
    ToolUse { name: String, input: Value },
}

fn message_start(ctx: &Ctx<'_>) -> String {
    let u = ctx.usage;
    frame(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_fake{:04}", ctx.seq),
                "type": "message",
                "role": "assistant",
                "model": ctx.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": u.input,
                    "cache_creation_input_tokens": u.cache_write,
                    "cache_read_input_tokens": u.cache_read,
                    "output_tokens": 1
                }
            }
        }),
    )
}

fn ping() -> String {
    frame("ping", &json!({"type": "ping"}))
}

fn block_frames(index: usize, block: &Block) -> Vec<String> {
    let mut out = Vec::new();
    match block {
        Block::Text(text) => {
            out.push(frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}}),
            ));
            for chunk in word_chunks(text) {
                out.push(frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": chunk}}),
                ));
            }
        }
        Block::ToolUse { name, input } => {
            out.push(frame(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": format!("toolu_fake{}", short_id()),
                                          "name": name, "input": {}}}),
            ));
            let json = input.to_string();
            // Two pieces, split on a char boundary, like a real partial-JSON stream.
            let mid = json
                .char_indices()
                .map(|(i, _)| i)
                .find(|&i| i >= json.len() / 2)
                .unwrap_or(json.len());
            for piece in [&json[..mid], &json[mid..]] {
                out.push(frame(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
        }
    }
    out.push(frame(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    ));
    out
}

fn message(ctx: &Ctx<'_>, blocks: &[Block]) -> Reply {
    let mut frames = vec![message_start(ctx), ping()];
    for (i, b) in blocks.iter().enumerate() {
        frames.extend(block_frames(i, b));
    }
    let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    frames.push(frame(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": ctx.usage.output}}),
    ));
    frames.push(frame("message_stop", &json!({"type": "message_stop"})));
    Reply::Sse {
        frames,
        end: StreamEnd::Complete,
    }
}

fn tool_call(ctx: &Ctx<'_>, preamble: Option<&str>, name: &str, input: Value) -> Reply {
    let mut blocks = Vec::new();
    if let Some(p) = preamble {
        blocks.push(Block::Text(p.to_owned()));
    }
    blocks.push(Block::ToolUse {
        name: name.to_owned(),
        input,
    });
    message(ctx, &blocks)
}

/// `(error type, default message)` for a status.
fn error_type(reply: &ErrorReply) -> (&'static str, &'static str) {
    match (reply.flavor, reply.http_status(Vendor::Anthropic)) {
        (ErrorFlavor::InvalidApiKey, _) | (_, 401) => ("authentication_error", "invalid x-api-key"),
        (ErrorFlavor::UsageLimit { .. }, _) => (
            "rate_limit_error",
            "This request would exceed your account's rate limit. Please try again later.",
        ),
        (_, 400) => (
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
        ),
        (_, 403) => (
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        (_, 404) => ("not_found_error", "Not found"),
        (_, 413) => (
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        ),
        (_, 429) => (
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        ),
        (_, 529) => ("overloaded_error", "Overloaded"),
        (_, 500) => ("api_error", "Internal server error"),
        _ => ("api_error", "Internal server error"),
    }
}

fn error_body(reply: &ErrorReply) -> Value {
    let (kind, default_message) = error_type(reply);
    let message = reply.message.as_deref().unwrap_or(default_message);
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The HTTP error reply (headers `request-id` are added by the server).
pub(crate) fn error(reply: &ErrorReply) -> Reply {
    let mut headers = Vec::new();
    if let Some(secs) = reply.retry_after_secs() {
        headers.push(("retry-after".to_owned(), secs.to_string()));
    }
    if let ErrorFlavor::UsageLimit { resets_at } = reply.flavor {
        // What the API sends a subscription over its five-hour window.
        let reset = resets_at.to_string();
        for (name, value) in [
            ("status", "rejected"),
            ("reset", &reset),
            ("representative-claim", "five_hour"),
            ("5h-status", "rejected"),
            ("5h-reset", &reset),
            ("5h-utilization", "1.0"),
            ("overage-status", "rejected"),
            ("overage-disabled-reason", "out_of_credits"),
            ("fallback", "available"),
        ] {
            headers.push((
                format!("anthropic-ratelimit-unified-{name}"),
                value.to_owned(),
            ));
        }
    }
    if reply.flavor == ErrorFlavor::InvalidApiKey || reply.status == 401 {
        headers.push(("x-should-retry".to_owned(), "false".to_owned()));
    }
    Reply::Json {
        status: reply.http_status(Vendor::Anthropic),
        headers,
        body: error_body(reply),
    }
}

/// The last `tool_result` of the last user message, with the name of its `tool_use`.
fn last_tool_result(body: &Value) -> Option<(String, String)> {
    let messages = body.get("messages")?.as_array()?;
    let last = messages.last()?;
    if last.get("role")?.as_str()? != "user" {
        return None;
    }
    let result = last
        .get("content")?
        .as_array()?
        .iter()
        .rev()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    let id = result.get("tool_use_id")?.as_str()?;
    let text = content_text(result.get("content").unwrap_or(&Value::Null))
        .trim_end()
        .to_owned();
    let name = messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .find(|b| {
            b.get("type").and_then(Value::as_str) == Some("tool_use")
                && b.get("id").and_then(Value::as_str) == Some(id)
        })
        .and_then(|b| b.get("name").and_then(Value::as_str))
        .unwrap_or("")
        .to_owned();
    Some((name, text))
}

/// Whether the model may call `name`: it is in `tools[]` and either not deferred, or
/// loaded by a `ToolSearch` result (a `tool_reference` to it in the messages). Claude
/// Code 2.1.332 lists an MCP tool in `tools[]` only once ToolSearch found it, and then
/// still with `defer_loading: true`.
/// Whether the request declares a tool called `name` in `tools[]`, not deferred.
fn declares(body: &Value, name: &str) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            t.get("name").and_then(Value::as_str) == Some(name)
                && t.get("defer_loading").and_then(Value::as_bool) != Some(true)
        })
}

fn has_loaded_tool(body: &Value, name: &str) -> bool {
    let Some(tool) = body
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
        })
    else {
        return false;
    };
    if tool.get("defer_loading").and_then(Value::as_bool) != Some(true) {
        return true;
    }
    body.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .filter_map(|b| b.get("content").and_then(Value::as_array))
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("tool_reference")
                && c.get("tool_name").and_then(Value::as_str) == Some(name)
        })
}

/// Whether a `/v1/messages` request is a side call that wants structured output and
/// offers no tools: Claude Code's session title (claude-agent-acp asks for one when a
/// session's first prompt has 10 characters or more), `output_config.format` of type
/// `json_schema`. It is not a step of the conversation, so it never uses the script.
pub(crate) fn is_side_call(body: &Value) -> bool {
    let no_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    let format = body
        .pointer("/output_config/format/type")
        .and_then(Value::as_str);
    no_tools && format == Some("json_schema")
}

/// Answers a side call ([`is_side_call`]): one text block holding JSON that fits the
/// requested schema (`{"title": "A simple, bounded request."}` for a title), with the
/// script's usage.
pub(crate) fn render_side(ctx: &Ctx<'_>) -> Rendered {
    let schema = ctx
        .body
        .pointer("/output_config/format/schema")
        .cloned()
        .unwrap_or(Value::Null);
    let v = crate::gemini::value_for_schema(&schema, "");
    Rendered::done(
        message(ctx, &[Block::Text(v.to_string())]),
        format!("side call JSON {v}"),
    )
}

/// Calls tool `tool` of MCP server `server`: under the name the client declared it, or
/// after a `ToolSearch` that loads it (see [`Step::McpToolCall`]).
fn mcp_tool_call(ctx: &Ctx<'_>, server: &str, tool: &str, input: &Value) -> Rendered {
    let full = format!("mcp__{server}__{tool}");
    // A client that declares MCP tools directly under its own name (OpenCode:
    // `<server>_<tool>`) gets the call at once, under that name.
    let direct = format!("{server}_{tool}");
    if declares(ctx.body, &direct) {
        return Rendered::done(
            tool_call(ctx, None, &direct, input.clone()),
            format!("tool_use {direct}"),
        );
    }
    // After a search that did not load the tool, call it anyway: the CLI then
    // reports the unknown tool instead of the fake searching forever.
    let searched = matches!(last_tool_result(ctx.body), Some((n, _)) if n == "ToolSearch");
    if has_loaded_tool(ctx.body, &full) || searched {
        Rendered::done(
            tool_call(ctx, None, &full, input.clone()),
            format!("tool_use {full}"),
        )
    } else {
        Rendered::stay(
            tool_call(
                ctx,
                None,
                "ToolSearch",
                json!({"query": format!("select:{full}"), "max_results": 5}),
            ),
            format!("tool_use ToolSearch select:{full}"),
        )
    }
}

/// Renders `step` for this request.
pub(crate) fn render(ctx: &Ctx<'_>, step: &Step) -> Rendered {
    match step {
        Step::DefaultText => Rendered::done(
            message(
                ctx,
                &[Block::Text(default_text(Vendor::Anthropic).to_owned())],
            ),
            "text (default)",
        ),
        Step::Text(t) => Rendered::done(message(ctx, &[Block::Text(t.clone())]), "text"),
        Step::QuoteToolResult => {
            let text = match last_tool_result(ctx.body) {
                Some((name, out)) if name.starts_with("mcp__") => {
                    format!("The MCP tool returned: {out}")
                }
                Some((_, out)) => format!("The tool returned: {out}"),
                None => default_text(Vendor::Anthropic).to_owned(),
            };
            Rendered::done(
                message(ctx, &[Block::Text(text)]),
                "text quoting the tool result",
            )
        }
        Step::ToolCall {
            name,
            input,
            preamble,
        } => Rendered::done(
            tool_call(ctx, preamble.as_deref(), name, input.clone()),
            format!("tool_use {name}"),
        ),
        Step::Shell { command, preamble } => Rendered::done(
            tool_call(
                ctx,
                preamble.as_deref(),
                "Bash",
                json!({"command": command, "description": "Run it"}),
            ),
            "tool_use Bash",
        ),
        Step::McpToolCall {
            server,
            tool,
            input,
        } => mcp_tool_call(ctx, server, tool, input),
        Step::Error(reply) => Rendered::done(
            error(reply),
            format!("error {}", reply.http_status(Vendor::Anthropic)),
        ),
        Step::DropMidStream => {
            let mut frames = vec![message_start(ctx), ping()];
            let blocks = block_frames(0, &Block::Text(default_text(Vendor::Anthropic).to_owned()));
            // content_block_start + the first delta, then the connection goes away.
            frames.extend(blocks.into_iter().take(2));
            Rendered::done(
                Reply::Sse {
                    frames,
                    end: StreamEnd::Drop,
                },
                "stream dropped mid-way",
            )
        }
        Step::StreamError(reply) => {
            let mut frames = vec![message_start(ctx), ping()];
            let blocks = block_frames(0, &Block::Text(default_text(Vendor::Anthropic).to_owned()));
            frames.extend(blocks.into_iter().take(2));
            frames.push(frame("error", &error_body(reply)));
            Rendered::done(
                Reply::Sse {
                    frames,
                    end: StreamEnd::Complete,
                },
                format!("in-stream error {}", error_type(reply).0),
            )
        }
        Step::Hang => Rendered::done(Reply::Hang, "hang"),
        Step::UsageLimit(left) => render(
            ctx,
            &Step::Error(ErrorReply::usage_limit(
                std::time::SystemTime::now() + *left,
            )),
        ),
        Step::WithAnswer(_) => render(ctx, &step.answered(ctx.body)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Usage;
    use pretty_assertions::assert_eq;

    fn ctx(body: &Value) -> Ctx<'_> {
        Ctx {
            seq: 7,
            usage: Usage::default_for(Vendor::Anthropic),
            model: "claude-opus-5-5".into(),
            api_key: None,
            body,
        }
    }

    fn events(reply: &Reply) -> Vec<Value> {
        let Reply::Sse { frames, .. } = reply else {
            panic!("not SSE: {reply:?}");
        };
        frames
            .iter()
            .map(|f| {
                let data = f.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                serde_json::from_str(data).unwrap()
            })
            .collect()
    }

    #[test]
    fn text_stream_has_the_wire_sequence() {
        let body = json!({"model": "claude-opus-5-5", "messages": []});
        let r = render(&ctx(&body), &Step::DefaultText);
        let ev = events(&r.reply);
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types[..4],
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta"
            ]
        );
        assert_eq!(
            types[types.len() - 3..],
            ["content_block_stop", "message_delta", "message_stop"]
        );
        assert_eq!(ev[0]["message"]["id"], "msg_fake0007");
        assert_eq!(ev[0]["message"]["usage"]["cache_read_input_tokens"], 56);
        let text: String = ev
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "Hello from the fake Anthropic API.");
        assert_eq!(ev[ev.len() - 2]["usage"]["output_tokens"], 7);
    }

    #[test]
    fn an_mcp_tool_declared_directly_is_called_under_its_name() {
        let step = Step::McpToolCall {
            server: "aicli".into(),
            tool: "askUser".into(),
            input: json!({"question": "q"}),
        };
        let body = json!({"tools": [{"name": "bash"}, {"name": "aicli_askUser"}], "messages": []});
        let r = render(&ctx(&body), &step);
        assert_eq!(r.note, "tool_use aicli_askUser");
        assert!(r.advance);
    }

    #[test]
    fn a_title_side_call_gets_json_of_its_schema() {
        let title = json!({"model": "claude-opus-5-5", "tools": [], "messages": [],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object",
                "properties": {"title": {"type": "string"}}, "required": ["title"]}}}});
        assert!(is_side_call(&title));
        let turn = json!({"model": "claude-opus-5-5", "tools": [{"name": "Bash"}],
            "output_config": {"format": {"type": "json_schema", "schema": {}}}});
        assert!(!is_side_call(&turn), "a call with tools is a turn");
        assert!(!is_side_call(&json!({"messages": []})));
        let r = render_side(&ctx(&title));
        let text: String = events(&r.reply)
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["title"].is_string(), "{text}");
    }

    #[test]
    fn mcp_call_searches_first_then_calls() {
        let step = Step::McpToolCall {
            server: "echo".into(),
            tool: "echo".into(),
            input: json!({"text": "x"}),
        };
        let body =
            json!({"messages": [{"role": "user", "content": "go"}], "tools": [{"name": "Bash"}]});
        let first = render(&ctx(&body), &step);
        assert!(!first.advance);
        let input: String = events(&first.reply)
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&input).unwrap(),
            json!({"query": "select:mcp__echo__echo", "max_results": 5})
        );
        // As Claude sends it after the search: deferred, and loaded by a tool_reference.
        let body = json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                          "content": [{"type": "tool_reference", "tool_name": "mcp__echo__echo"}]}]}],
                          "tools": [{"name": "mcp__echo__echo", "defer_loading": true}]});
        assert!(has_loaded_tool(&body, "mcp__echo__echo"));
        let second = render(&ctx(&body), &step);
        assert!(second.advance);
        assert_eq!(second.note, "tool_use mcp__echo__echo");
    }

    #[test]
    fn quote_finds_the_tool_name() {
        let body = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "hi"}]}
        ]});
        let r = render(&ctx(&body), &Step::QuoteToolResult);
        let text: String = events(&r.reply)
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "The tool returned: hi");
    }

    #[test]
    fn errors_use_the_vendor_shape() {
        let Reply::Json { status, body, .. } = error(&ErrorReply::status(529)) else {
            panic!()
        };
        assert_eq!(status, 529);
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        );
    }
}
