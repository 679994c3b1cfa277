//! `aicli-fake-cli --acp MODE`: a minimal ACP agent that speaks JSON-RPC 2.0 on stdio,
//! one message a line, and misbehaves on purpose, for the engine's bad-input tests.
//!
//! It answers `initialize` (protocol 1, `loadSession`, HTTP MCP), `session/new` (session
//! `fake-acp-session`), `session/set_mode` and `session/set_config_option` (`{}`), and
//! `session/prompt` with two `agent_message_chunk`s ("Hello " "over ACP.") and
//! `{"stopReason":"end_turn","usage":{...}}`; `session/cancel` ends a prompt as
//! `cancelled`. With a `prompted` file, it creates the file when it gets
//! `session/prompt` (a test waits for the turn to be under way). MODE:
//!
//! | mode | what it does wrong |
//! |---|---|
//! | `ok` | nothing |
//! | `garbage` | prints a line that is not JSON before the prompt's answer |
//! | `unknown-id` | answers request id 999 (never sent) before the prompt's answer |
//! | `early-notification` | sends a `session/update` before it answers `initialize` |
//! | `silent` | reads everything and never answers (`initialize` times out) |
//! | `hang` | answers the setup, then never answers the prompt (a cancel ends it) |

use std::io::{BufRead, Write};

use serde_json::{Value, json};

const SESSION: &str = "fake-acp-session";

fn say(out: &mut impl Write, v: &Value) {
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn chunk(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION,
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
}

/// Runs the agent until stdin closes.
pub fn run(mode: &str, prompted: Option<&str>) {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut prompt_id: Option<Value> = None;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if mode == "silent" {
            continue;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = msg.get("id").cloned();
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        match method {
            "initialize" => {
                if mode == "early-notification" {
                    say(&mut out, &chunk("too early"));
                }
                say(
                    &mut out,
                    &reply(json!({"protocolVersion": 1,
                        "agentCapabilities": {"loadSession": true, "mcpCapabilities": {"http": true}},
                        "agentInfo": {"name": "fake-acp", "version": "0.0.1"}})),
                );
            }
            "session/new" => say(&mut out, &reply(json!({"sessionId": SESSION}))),
            "session/set_mode" | "session/set_config_option" => say(&mut out, &reply(json!({}))),
            "session/prompt" => {
                if let Some(f) = prompted {
                    let _ = std::fs::write(f, b"prompted\n");
                }
                if mode == "hang" {
                    prompt_id = id;
                    continue;
                }
                say(&mut out, &chunk("Hello "));
                match mode {
                    "garbage" => {
                        let _ = writeln!(out, "this line is not JSON-RPC");
                    }
                    "unknown-id" => say(
                        &mut out,
                        &json!({"jsonrpc": "2.0", "id": 999, "result": {}}),
                    ),
                    _ => {}
                }
                say(&mut out, &chunk("over ACP."));
                say(
                    &mut out,
                    &reply(json!({"stopReason": "end_turn",
                        "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}})),
                );
            }
            "session/cancel" => {
                if let Some(pid) = prompt_id.take() {
                    say(
                        &mut out,
                        &json!({"jsonrpc": "2.0", "id": pid, "result": {"stopReason": "cancelled"}}),
                    );
                }
            }
            _ => {
                if id.is_some() && msg.get("result").is_none() && msg.get("error").is_none() {
                    say(
                        &mut out,
                        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
                    );
                }
            }
        }
    }
}
