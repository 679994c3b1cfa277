//! The fake Gemini API, as Gemini CLI uses it with an API key:
//! `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` for the chat, and
//! `POST /v1beta/models/<model>:generateContent` (not streamed) for the model router,
//! which runs first when the CLI is started without `-m`.
//!
//! Stream: `data: {"candidates":[{"content":{"role":"model","parts":[…]},"index":0}],
//! "modelVersion":…,"responseId":…}` chunks; the last one carries `finishReason: "STOP"`
//! and `usageMetadata`. Errors: `{"error":{"code","message","status"}}` with the status.

use serde_json::{Value, json};

use crate::Vendor;
use crate::pyjson;
use crate::render::{Ctx, Rendered, Reply, StreamEnd, default_text, word_chunks};
use crate::script::{ErrorFlavor, ErrorReply, Step};

fn usage_metadata(ctx: &Ctx<'_>) -> Value {
    let u = ctx.usage;
    json!({
        "promptTokenCount": u.input,
        "candidatesTokenCount": u.output,
        "totalTokenCount": u.input + u.output + u.reasoning,
        "cachedContentTokenCount": u.cache_read,
        "thoughtsTokenCount": u.reasoning,
    })
}

fn response_id(ctx: &Ctx<'_>) -> String {
    format!("fake-gemini-response-{:04}", ctx.seq)
}

/// One response chunk holding `parts`; the last chunk also gets the finish reason and usage.
fn chunk(ctx: &Ctx<'_>, parts: Value, last: bool) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    let mut out =
        json!({"candidates": [], "modelVersion": ctx.model, "responseId": response_id(ctx)});
    if last {
        if let Some(c) = candidate.as_object_mut() {
            c.insert("finishReason".to_owned(), Value::from("STOP"));
        }
        if let Some(o) = out.as_object_mut() {
            o.insert("usageMetadata".to_owned(), usage_metadata(ctx));
        }
    }
    if let Some(o) = out.as_object_mut() {
        o.insert("candidates".to_owned(), json!([candidate]));
    }
    out
}

fn frame(data: &Value) -> String {
    format!("data: {data}\r\n\r\n")
}

fn text_chunks(ctx: &Ctx<'_>, text: &str) -> Vec<String> {
    let words = word_chunks(text);
    let n = words.len();
    words
        .into_iter()
        .enumerate()
        .map(|(i, w)| frame(&chunk(ctx, json!([{"text": w}]), i + 1 == n)))
        .collect()
}

fn text(ctx: &Ctx<'_>, text: &str) -> Reply {
    Reply::Sse {
        frames: text_chunks(ctx, text),
        end: StreamEnd::Complete,
    }
}

fn function_call(ctx: &Ctx<'_>, preamble: Option<&str>, name: &str, args: &Value) -> Reply {
    let mut frames = Vec::new();
    if let Some(p) = preamble {
        frames.push(frame(&chunk(ctx, json!([{"text": p}]), false)));
    }
    frames.push(frame(&chunk(
        ctx,
        json!([{"functionCall": {"name": name, "args": args}}]),
        true,
    )));
    Reply::Sse {
        frames,
        end: StreamEnd::Complete,
    }
}

/// `(status text, default message, details)` for an error.
fn error_parts(ctx: &Ctx<'_>, reply: &ErrorReply) -> (&'static str, String, Vec<Value>) {
    let mut details = Vec::new();
    let (status, message) = match (reply.flavor, reply.http_status(Vendor::Gemini)) {
        (ErrorFlavor::InvalidApiKey, _) => {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"}
            }));
            ("INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.".to_owned())
        }
        (ErrorFlavor::UsageLimit { .. }, _) => {
            // A free-tier quota with the time left until it resets (not the daily one:
            // Gemini CLI reports that one without its reset).
            details.push(free_tier_quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", &ctx.model));
            let left = reply.retry_after.unwrap_or_default().as_secs_f64();
            (
                "RESOURCE_EXHAUSTED",
                format!(
                    "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 250, model: {}\nPlease retry in {left:.3}s.",
                    ctx.model
                ),
            )
        }
        (ErrorFlavor::QuotaExhausted, _) => {
            details.push(free_tier_quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", &ctx.model));
            ("RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.".to_owned())
        }
        (_, 400) => ("INVALID_ARGUMENT", "Request contains an invalid argument.".to_owned()),
        (_, 401) => (
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.".to_owned(),
        ),
        (_, 403) => ("PERMISSION_DENIED", "The caller does not have permission".to_owned()),
        (_, 404) => (
            "NOT_FOUND",
            format!("models/{} is not found for API version v1beta, or is not supported for generateContent.", ctx.model),
        ),
        (_, 429) => ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).".to_owned()),
        (_, 503) => ("UNAVAILABLE", "The model is overloaded. Please try again later.".to_owned()),
        _ => ("INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting".to_owned()),
    };
    if let Some(secs) = reply.retry_after_secs() {
        details.push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{secs}s")}));
    }
    (status, message, details)
}

/// The `QuotaFailure` detail of the free tier's quota `quota_id` on `model`.
fn free_tier_quota(quota_id: &str, model: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": model},
            "quotaValue": "250"
        }]
    })
}

fn error_body(ctx: &Ctx<'_>, reply: &ErrorReply) -> Value {
    let (status, default_message, details) = error_parts(ctx, reply);
    let message = reply.message.clone().unwrap_or(default_message);
    let mut error =
        json!({"code": reply.http_status(Vendor::Gemini), "message": message, "status": status});
    if let (false, Some(e)) = (details.is_empty(), error.as_object_mut()) {
        e.insert("details".to_owned(), Value::from(details));
    }
    json!({"error": error})
}

/// The HTTP error reply.
pub(crate) fn error(ctx: &Ctx<'_>, reply: &ErrorReply) -> Reply {
    let mut headers = Vec::new();
    if let Some(secs) = reply.retry_after_secs() {
        headers.push(("retry-after".to_owned(), secs.to_string()));
    }
    Reply::Json {
        status: reply.http_status(Vendor::Gemini),
        headers,
        body: error_body(ctx, reply),
    }
}

/// The `functionResponse` parts of the last content, if it is a user turn carrying them.
fn last_function_responses(body: &Value) -> Vec<(String, Value)> {
    let Some(last) = body
        .get("contents")
        .and_then(Value::as_array)
        .and_then(|c| c.last())
    else {
        return Vec::new();
    };
    last.get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("functionResponse"))
                .map(|fr| {
                    (
                        fr.get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        fr.get("response").cloned().unwrap_or(Value::Null),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The function names declared in `tools[].functionDeclarations[]`.
pub(crate) fn declared_functions(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten()
        .filter_map(|f| f.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The name Gemini CLI declared for MCP tool `tool` of `server`: `mcp_<server>_<tool>` in
/// 0.61; falls back to a declared name ending in `_<tool>` or equal to `<tool>`.
fn mcp_function_name(body: &Value, server: &str, tool: &str) -> String {
    let wanted = format!("mcp_{server}_{tool}");
    let declared = declared_functions(body);
    if declared.contains(&wanted) {
        return wanted;
    }
    let suffix = format!("_{tool}");
    declared
        .into_iter()
        .find(|d| d.ends_with(&suffix) || d == tool)
        .unwrap_or(wanted)
}

/// Renders `step` for a `:streamGenerateContent` request.
pub(crate) fn render(ctx: &Ctx<'_>, step: &Step) -> Rendered {
    match step {
        Step::DefaultText => {
            Rendered::done(text(ctx, default_text(Vendor::Gemini)), "text (default)")
        }
        Step::Text(t) => Rendered::done(text(ctx, t), "text"),
        Step::QuoteToolResult => {
            let responses = last_function_responses(ctx.body);
            let t = match responses.last() {
                Some((name, response)) => {
                    format!("The tool {name} returned: {}", pyjson::dumps(response))
                }
                None => default_text(Vendor::Gemini).to_owned(),
            };
            Rendered::done(text(ctx, &t), "text quoting the tool result")
        }
        Step::ToolCall {
            name,
            input,
            preamble,
        } => Rendered::done(
            function_call(ctx, preamble.as_deref(), name, input),
            format!("functionCall {name}"),
        ),
        Step::Shell { command, preamble } => Rendered::done(
            function_call(
                ctx,
                preamble.as_deref(),
                "run_shell_command",
                &json!({"command": command, "description": "run it"}),
            ),
            "functionCall run_shell_command",
        ),
        Step::McpToolCall {
            server,
            tool,
            input,
        } => {
            let name = mcp_function_name(ctx.body, server, tool);
            Rendered::done(
                function_call(ctx, None, &name, input),
                format!("functionCall {name}"),
            )
        }
        Step::Error(reply) => Rendered::done(
            error(ctx, reply),
            format!("error {}", reply.http_status(Vendor::Gemini)),
        ),
        Step::DropMidStream => {
            let mut frames = text_chunks(ctx, default_text(Vendor::Gemini));
            frames.truncate(1);
            Rendered::done(
                Reply::Sse {
                    frames,
                    end: StreamEnd::Drop,
                },
                "stream dropped mid-way",
            )
        }
        Step::StreamError(reply) => {
            let mut frames = text_chunks(ctx, default_text(Vendor::Gemini));
            frames.truncate(1);
            frames.push(frame(&error_body(ctx, reply)));
            Rendered::done(
                Reply::Sse {
                    frames,
                    end: StreamEnd::Complete,
                },
                "in-stream error",
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

/// A JSON value that fits a Gemini response schema (`responseJsonSchema` or
/// `responseSchema`). Router fields get the scripted choice: `model_choice` (the
/// classifier) is `router_choice`; `complexity_score` (the numerical classifier, used by
/// 0.61 by default) is 10 for `"flash"` and 90 otherwise; `next_speaker` is `"user"`.
pub(crate) fn value_for_schema(schema: &Value, router_choice: &str) -> Value {
    let kind = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_ascii_lowercase();
    match kind.as_str() {
        "object" => {
            let mut out = serde_json::Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    let v = match name.as_str() {
                        "model_choice" => Value::from(router_choice),
                        "complexity_score" => {
                            Value::from(if router_choice == "flash" { 10 } else { 90 })
                        }
                        "next_speaker" => Value::from("user"),
                        _ => value_for_schema(prop, router_choice),
                    };
                    out.insert(name.clone(), v);
                }
            }
            Value::Object(out)
        }
        "string" => match schema.get("enum").and_then(Value::as_array) {
            Some(options) if !options.is_empty() => options
                .iter()
                .find(|o| o.as_str() == Some(router_choice))
                .unwrap_or(&options[0])
                .clone(),
            _ => Value::from("A simple, bounded request."),
        },
        "integer" | "number" => Value::from(1),
        "boolean" => Value::from(false),
        "array" => Value::Array(Vec::new()),
        _ => Value::Null,
    }
}

/// Answers a `:generateContent` call (not streamed). Gemini CLI uses it for side calls
/// that want JSON: the model router (numerical classifier without `-m`), loop and
/// next-speaker checks, session summaries. When the request asks for JSON the answer
/// fits its schema (see [`value_for_schema`]); otherwise it is the default text. These
/// calls never use the script.
pub(crate) fn render_generate(ctx: &Ctx<'_>, router_choice: &str) -> Rendered {
    let config = ctx.body.get("generationConfig");
    let schema = config.and_then(|g| {
        g.get("responseJsonSchema")
            .or_else(|| g.get("responseSchema"))
    });
    let wants_json = config
        .and_then(|g| g.get("responseMimeType"))
        .and_then(Value::as_str)
        == Some("application/json");
    let (t, note) = match schema {
        Some(schema) => {
            let v = value_for_schema(schema, router_choice);
            let note = format!("generateContent JSON {v}");
            (v.to_string(), note)
        }
        None if wants_json => ("{}".to_owned(), "generateContent JSON {}".to_owned()),
        None => (
            default_text(Vendor::Gemini).to_owned(),
            "generateContent text".to_owned(),
        ),
    };
    Rendered::done(
        Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: chunk(ctx, json!([{"text": t}]), true),
        },
        note,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Usage;
    use pretty_assertions::assert_eq;

    fn ctx(body: &Value) -> Ctx<'_> {
        Ctx {
            seq: 1,
            usage: Usage::default_for(Vendor::Gemini),
            model: "gemini-2.5-flash".into(),
            api_key: None,
            body,
        }
    }

    fn chunks(reply: &Reply) -> Vec<Value> {
        let Reply::Sse { frames, .. } = reply else {
            panic!("not SSE: {reply:?}");
        };
        frames
            .iter()
            .map(|f| serde_json::from_str(f.strip_prefix("data: ").unwrap().trim_end()).unwrap())
            .collect()
    }

    #[test]
    fn text_chunks_end_with_stop_and_usage() {
        let c = chunks(&render(&ctx(&Value::Null), &Step::DefaultText).reply);
        let words: Vec<&str> = c
            .iter()
            .map(|c| {
                c["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            words,
            ["Hello ", "from ", "the ", "fake ", "Gemini ", "API."]
        );
        assert!(c[0]["candidates"][0].get("finishReason").is_none());
        let last = c.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            last["usageMetadata"],
            json!({"promptTokenCount": 200, "candidatesTokenCount": 11, "totalTokenCount": 236,
                   "cachedContentTokenCount": 50, "thoughtsTokenCount": 25})
        );
    }

    #[test]
    fn quote_uses_python_json() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "Run echo hi"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "hi\nthere"}}}]}
        ]});
        let c = chunks(&render(&ctx(&body), &Step::QuoteToolResult).reply);
        let t: String = c
            .iter()
            .map(|c| {
                c["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            t,
            "The tool run_shell_command returned: {\"output\": \"hi\\nthere\"}"
        );
    }

    #[test]
    fn mcp_name_follows_the_declaration() {
        let body = json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}, {"name": "mcp_echo_echo"}]}]});
        assert_eq!(mcp_function_name(&body, "echo", "echo"), "mcp_echo_echo");
        let body = json!({"tools": [{"functionDeclarations": [{"name": "echo__echo"}]}]});
        assert_eq!(mcp_function_name(&body, "srv", "echo"), "echo__echo");
    }

    #[test]
    fn invalid_key_is_a_400_with_error_info() {
        let Reply::Json { status, body, .. } =
            error(&ctx(&Value::Null), &ErrorReply::invalid_api_key())
        else {
            panic!()
        };
        assert_eq!(status, 400);
        assert_eq!(body["error"]["details"][0]["reason"], "API_KEY_INVALID");
    }

    #[test]
    fn router_answer_is_classifier_json() {
        let answer = |schema: Value| {
            let body = json!({"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema}});
            let Reply::Json { body, .. } = render_generate(&ctx(&body), "flash").reply else {
                panic!()
            };
            let t = body["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned();
            serde_json::from_str::<Value>(&t).unwrap()
        };
        assert_eq!(
            answer(
                json!({"type": "OBJECT", "properties": {"complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}}})
            ),
            json!({"complexity_reasoning": "A simple, bounded request.", "complexity_score": 10})
        );
        assert_eq!(
            answer(
                json!({"type": "OBJECT", "properties": {"reasoning": {"type": "STRING"}, "model_choice": {"type": "STRING", "enum": ["flash", "pro"]}}})
            )["model_choice"],
            "flash"
        );
    }
}
