//! The fake OpenAI Responses API (`POST /v1/responses`, SSE), as Codex uses it through a
//! custom provider with `wire_api = "responses"`.
//!
//! Stream: `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, for a message `response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`,
//! `response.content_part.done`; for a function call
//! `response.function_call_arguments.delta` / `.done`; `response.output_item.done`; and
//! `response.completed` with the usage. Every event has `type` and a `sequence_number`
//! and is sent as `event: TYPE` + `data: JSON`. Errors:
//! `{"error":{"message","type","param","code"}}` with the status and `x-request-id`.

use serde_json::{Value, json};

use crate::Vendor;
use crate::render::{
    Ctx, Rendered, Reply, StreamEnd, content_text, default_text, short_id, word_chunks,
};
use crate::script::{ErrorFlavor, ErrorReply, Step};

/// Builds the frames of one response, numbering the events.
struct Stream<'a> {
    ctx: &'a Ctx<'a>,
    frames: Vec<String>,
    seq: u64,
    output: Vec<Value>,
}

impl<'a> Stream<'a> {
    fn new(ctx: &'a Ctx<'a>) -> Stream<'a> {
        let mut s = Stream {
            ctx,
            frames: Vec::new(),
            seq: 0,
            output: Vec::new(),
        };
        let created = s.response("in_progress", Value::Null);
        s.event("response.created", json!({"response": created}));
        let progress = s.response("in_progress", Value::Null);
        s.event("response.in_progress", json!({"response": progress}));
        s
    }

    fn response_id(&self) -> String {
        format!("resp_fake{:04}", self.ctx.seq)
    }

    fn response(&self, status: &str, usage: Value) -> Value {
        json!({
            "id": self.response_id(),
            "object": "response",
            "created_at": 1_796_000_000u64,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "model": self.ctx.model,
            "output": self.output,
            "parallel_tool_calls": true,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        })
    }

    fn event(&mut self, kind: &str, mut data: Value) {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".to_owned(), Value::from(kind));
            obj.insert("sequence_number".to_owned(), Value::from(self.seq));
        }
        self.seq += 1;
        self.frames.push(format!("event: {kind}\ndata: {data}\n\n"));
    }

    /// A complete assistant message; `cut` stops after the first delta.
    fn message(&mut self, text: &str, cut: bool) {
        let index = self.output.len();
        let id = format!("msg_fake{:04}_{index}", self.ctx.seq);
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": {
                "id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        );
        self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        for chunk in word_chunks(text) {
            self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "delta": chunk, "logprobs": []}),
            );
            if cut {
                return;
            }
        }
        self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "text": text, "logprobs": []}),
        );
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        let item = json!({"id": id, "type": "message", "status": "completed",
                          "role": "assistant", "content": [part]});
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    /// A `function_call` item (with `namespace` for MCP tools).
    fn function_call(&mut self, name: &str, namespace: Option<&str>, input: &Value) {
        let index = self.output.len();
        let id = format!("fc_fake{}", short_id());
        let call_id = format!("call_fake{}", short_id());
        let arguments = input.to_string();
        let mut item = json!({"id": id, "type": "function_call", "status": "in_progress",
                              "call_id": call_id, "name": name, "arguments": ""});
        if let (Some(ns), Some(obj)) = (namespace, item.as_object_mut()) {
            obj.insert("namespace".to_owned(), Value::from(ns));
        }
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": arguments}),
        );
        self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": arguments}),
        );
        if let Some(obj) = item.as_object_mut() {
            obj.insert("status".to_owned(), Value::from("completed"));
            obj.insert("arguments".to_owned(), Value::from(arguments));
        }
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    /// A client-executed `tool_search_call` item.
    fn tool_search_call(&mut self, query: &str) {
        let index = self.output.len();
        let item = json!({"id": format!("ts_fake{}", short_id()), "type": "tool_search_call",
                          "status": "completed", "call_id": format!("call_fake{}", short_id()),
                          "execution": "client", "arguments": {"query": query, "limit": 5}});
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        self.output.push(item);
    }

    fn completed(mut self) -> Reply {
        let u = self.ctx.usage;
        let usage = json!({
            "input_tokens": u.input,
            "input_tokens_details": {"cached_tokens": u.cache_read, "cache_write_tokens": u.cache_write},
            "output_tokens": u.output,
            "output_tokens_details": {"reasoning_tokens": u.reasoning},
            "total_tokens": u.input + u.output,
        });
        let response = self.response("completed", usage);
        self.event("response.completed", json!({"response": response}));
        Reply::Sse {
            frames: self.frames,
            end: StreamEnd::Complete,
        }
    }
}

/// `(type, code, default message)` for an error.
fn error_parts(ctx: &Ctx<'_>, reply: &ErrorReply) -> (&'static str, Value, String) {
    let key = ctx.api_key.as_deref().unwrap_or("");
    match (reply.flavor, reply.http_status(Vendor::OpenAi)) {
        (ErrorFlavor::InvalidApiKey, _) | (_, 401) => (
            "invalid_request_error",
            json!("invalid_api_key"),
            format!(
                "Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."
            ),
        ),
        (ErrorFlavor::UsageLimit { .. }, _) => (
            "usage_limit_reached",
            Value::Null,
            "The usage limit has been reached".to_owned(),
        ),
        (ErrorFlavor::QuotaExhausted, _) => (
            "insufficient_quota",
            json!("insufficient_quota"),
            "You exceeded your current quota, please check your plan and billing details."
                .to_owned(),
        ),
        (_, 400) => (
            "invalid_request_error",
            Value::Null,
            "Invalid request.".to_owned(),
        ),
        (_, 403) => (
            "invalid_request_error",
            json!("unsupported_country_region_territory"),
            "Country, region, or territory not supported".to_owned(),
        ),
        (_, 404) => (
            "invalid_request_error",
            json!("model_not_found"),
            format!(
                "The model `{}` does not exist or you do not have access to it.",
                ctx.model
            ),
        ),
        (_, 429) => (
            "requests",
            json!("rate_limit_exceeded"),
            format!(
                "Rate limit reached for {} in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
                ctx.model
            ),
        ),
        (_, 503) => (
            "server_error",
            Value::Null,
            "The engine is currently overloaded, please try again later.".to_owned(),
        ),
        _ => (
            "server_error",
            Value::Null,
            "The server had an error while processing your request. Sorry about that!".to_owned(),
        ),
    }
}

/// The HTTP error reply.
pub(crate) fn error(ctx: &Ctx<'_>, reply: &ErrorReply) -> Reply {
    let (kind, code, default_message) = error_parts(ctx, reply);
    let message = reply.message.clone().unwrap_or(default_message);
    let mut headers = Vec::new();
    if let Some(secs) = reply.retry_after_secs() {
        headers.push(("retry-after".to_owned(), secs.to_string()));
    }
    let mut body = json!({"message": message, "type": kind, "param": null, "code": code});
    if let (ErrorFlavor::UsageLimit { resets_at }, Some(b)) = (reply.flavor, body.as_object_mut()) {
        // What the ChatGPT backend sends a plan over its limit.
        b.insert("plan_type".to_owned(), json!("plus"));
        b.insert("resets_at".to_owned(), json!(resets_at));
        b.insert(
            "resets_in_seconds".to_owned(),
            json!(reply.retry_after_secs().unwrap_or(0)),
        );
    }
    Reply::Json {
        status: reply.http_status(Vendor::OpenAi),
        headers,
        body: json!({ "error": body }),
    }
}

fn input_items(body: &Value) -> &[Value] {
    body.get("input")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn item_type(item: &Value) -> Option<&str> {
    item.get("type").and_then(Value::as_str)
}

/// The text for an answer after a tool call: quotes the last call output.
fn quote(body: &Value) -> Option<String> {
    let items = input_items(body);
    let last = items.last()?;
    if !matches!(
        item_type(last),
        Some("function_call_output" | "custom_tool_call_output")
    ) {
        return None;
    }
    let call_id = last.get("call_id").and_then(Value::as_str);
    let output = last.get("output").unwrap_or(&Value::Null);
    let namespaced = items.iter().any(|i| {
        item_type(i) == Some("function_call")
            && i.get("call_id").and_then(Value::as_str) == call_id
            && i.get("namespace").is_some_and(|n| !n.is_null())
    });
    // Trailing whitespace trimmed, as the reference fake did ("…Output:\nhi").
    let text = content_text(output).trim_end().to_owned();
    Some(if namespaced {
        format!("The MCP tool said: {}", Value::from(text))
    } else {
        format!("The shell said: {text}")
    })
}

/// Whether the request already knows namespace `ns` with tool `tool`: from a
/// `tool_search_output` in the input, or loaded in `tools[]`.
fn knows_namespace_tool(body: &Value, ns: &str, tool: &str) -> bool {
    let has = |tools: &Value| {
        tools.as_array().is_some_and(|list| {
            list.iter().any(|t| {
                item_type(t) == Some("namespace")
                    && t.get("name").and_then(Value::as_str) == Some(ns)
                    && t.get("tools")
                        .and_then(Value::as_array)
                        .is_some_and(|inner| {
                            inner
                                .iter()
                                .any(|f| f.get("name").and_then(Value::as_str) == Some(tool))
                        })
            })
        })
    };
    input_items(body)
        .iter()
        .filter(|i| item_type(i) == Some("tool_search_output"))
        .any(|i| i.get("tools").is_some_and(has))
        || body.get("tools").is_some_and(has)
}

/// Starts a text answer, then fails it in-band with `response.failed`.
fn stream_error(ctx: &Ctx<'_>, reply: &ErrorReply) -> Rendered {
    let (_, code, default_message) = error_parts(ctx, reply);
    let message = reply.message.clone().unwrap_or(default_message);
    let mut s = Stream::new(ctx);
    s.message(default_text(Vendor::OpenAi), true);
    let mut failed = s.response("failed", Value::Null);
    if let Some(obj) = failed.as_object_mut() {
        let code = if code.is_null() {
            json!("server_error")
        } else {
            code
        };
        obj.insert(
            "error".to_owned(),
            json!({"code": code, "message": message}),
        );
    }
    s.event("response.failed", json!({"response": failed}));
    Rendered::done(
        Reply::Sse {
            frames: s.frames,
            end: StreamEnd::Complete,
        },
        "response.failed",
    )
}

/// Renders `step` for this request.
pub(crate) fn render(ctx: &Ctx<'_>, step: &Step) -> Rendered {
    match step {
        Step::DefaultText => {
            let mut s = Stream::new(ctx);
            s.message(default_text(Vendor::OpenAi), false);
            Rendered::done(s.completed(), "text (default)")
        }
        Step::Text(t) => {
            let mut s = Stream::new(ctx);
            s.message(t, false);
            Rendered::done(s.completed(), "text")
        }
        Step::QuoteToolResult => {
            let text = quote(ctx.body).unwrap_or_else(|| default_text(Vendor::OpenAi).to_owned());
            let mut s = Stream::new(ctx);
            s.message(&text, false);
            Rendered::done(s.completed(), "text quoting the tool result")
        }
        Step::ToolCall {
            name,
            input,
            preamble,
        } => {
            let mut s = Stream::new(ctx);
            if let Some(p) = preamble {
                s.message(p, false);
            }
            s.function_call(name, None, input);
            Rendered::done(s.completed(), format!("function_call {name}"))
        }
        Step::Shell { command, preamble } => {
            let mut s = Stream::new(ctx);
            if let Some(p) = preamble {
                s.message(p, false);
            }
            s.function_call("exec_command", None, &json!({"cmd": command}));
            Rendered::done(s.completed(), "function_call exec_command")
        }
        Step::McpToolCall {
            server,
            tool,
            input,
        } => {
            let ns = format!("mcp__{server}");
            let searched = input_items(ctx.body)
                .last()
                .is_some_and(|i| item_type(i) == Some("tool_search_output"));
            let mut s = Stream::new(ctx);
            if knows_namespace_tool(ctx.body, &ns, tool) || searched {
                s.function_call(tool, Some(&ns), input);
                Rendered::done(s.completed(), format!("function_call {ns}.{tool}"))
            } else {
                s.tool_search_call(tool);
                Rendered::stay(s.completed(), format!("tool_search_call {tool}"))
            }
        }
        Step::Error(reply) => Rendered::done(
            error(ctx, reply),
            format!("error {}", reply.http_status(Vendor::OpenAi)),
        ),
        Step::DropMidStream => {
            let mut s = Stream::new(ctx);
            s.message(default_text(Vendor::OpenAi), true);
            Rendered::done(
                Reply::Sse {
                    frames: s.frames,
                    end: StreamEnd::Drop,
                },
                "stream dropped mid-way",
            )
        }
        Step::StreamError(reply) => stream_error(ctx, reply),
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

/// Whether a `/v1/responses` request is a side call beside the conversation: Codex's
/// background "guardian" scoring, which asks a `*-luna` model on its own (its strings:
/// "Guardian V2 background scoring", "Luna Responses request failed"), at moments of its
/// choosing. It is not a step of the conversation, so it never uses the script.
pub(crate) fn is_side_call(body: &Value) -> bool {
    body.get("model")
        .and_then(Value::as_str)
        .is_some_and(|m| m.ends_with("-luna"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Usage;
    use pretty_assertions::assert_eq;

    fn ctx(body: &Value) -> Ctx<'_> {
        Ctx {
            seq: 3,
            usage: Usage::default_for(Vendor::OpenAi),
            model: "gpt-5.5".into(),
            api_key: Some("sk-fake".into()),
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
                let name = f.lines().next().unwrap().strip_prefix("event: ").unwrap();
                let data = f.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                let v: Value = serde_json::from_str(data).unwrap();
                assert_eq!(v["type"], name);
                v
            })
            .collect()
    }

    #[test]
    fn text_stream_sequence_and_usage() {
        let body = json!({"input": []});
        let ev = events(&render(&ctx(&body), &Step::DefaultText).reply);
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types[0], "response.created");
        assert_eq!(types[1], "response.in_progress");
        assert_eq!(types[2], "response.output_item.added");
        assert_eq!(types[3], "response.content_part.added");
        assert_eq!(*types.last().unwrap(), "response.completed");
        for (i, e) in ev.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        let done = ev
            .iter()
            .find(|e| e["type"] == "response.output_text.done")
            .unwrap();
        assert_eq!(done["text"], "Hello from the fake OpenAI Responses API.");
        let usage = &ev.last().unwrap()["response"]["usage"];
        assert_eq!(usage["input_tokens"], 120);
        assert_eq!(usage["input_tokens_details"]["cached_tokens"], 30);
        assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 4);
        assert_eq!(usage["total_tokens"], 129);
    }

    #[test]
    fn mcp_goes_through_tool_search() {
        let step = Step::McpToolCall {
            server: "echo".into(),
            tool: "echo".into(),
            input: json!({"text": "x"}),
        };
        let first = render(&ctx(&json!({"input": []})), &step);
        assert!(!first.advance);
        assert_eq!(first.note, "tool_search_call echo");
        let body = json!({"input": [
            {"type": "tool_search_call", "call_id": "c1"},
            {"type": "tool_search_output", "call_id": "c1", "execution": "client",
             "tools": [{"type": "namespace", "name": "mcp__echo", "tools": [{"name": "echo"}]}]}
        ]});
        let second = render(&ctx(&body), &step);
        assert!(second.advance);
        let ev = events(&second.reply);
        let item = &ev
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap()["item"];
        assert_eq!(item["namespace"], "mcp__echo");
        assert_eq!(item["name"], "echo");
        assert_eq!(item["arguments"], "{\"text\":\"x\"}");
    }

    #[test]
    fn quote_shell_and_mcp() {
        let body = json!({"input": [
            {"type": "function_call", "call_id": "a", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "hi"}
        ]});
        assert_eq!(quote(&body).unwrap(), "The shell said: hi");
        let body = json!({"input": [
            {"type": "function_call", "call_id": "a", "name": "echo", "namespace": "mcp__echo", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "x\ny"}
        ]});
        assert_eq!(quote(&body).unwrap(), "The MCP tool said: \"x\\ny\"");
    }

    #[test]
    fn error_401_quotes_the_key() {
        let Reply::Json { status, body, .. } = error(&ctx(&Value::Null), &ErrorReply::status(401))
        else {
            panic!()
        };
        assert_eq!(status, 401);
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Incorrect API key provided: sk-fake.")
        );
    }
}
