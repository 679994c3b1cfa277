//! The real `codex exec` against the fake OpenAI Responses API.

use std::time::Duration;

use aicli_testkit::{ErrorReply, FakeApi, RequestKind, Script, WiringOptions};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{REQUEST_TIMEOUT, run};
use crate::mcp_echo::EchoServer;

fn agent_messages(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .map(|e| e["item"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn plain_answer() {
    let fake = FakeApi::openai(Script::new()).await.unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let events = run.events();
    assert_eq!(
        agent_messages(&events),
        ["Hello from the fake OpenAI Responses API."]
    );
    assert_eq!(
        run.last_event(),
        json!({"type": "turn.completed", "usage": {"input_tokens": 120, "cached_input_tokens": 30,
               "cache_write_input_tokens": 0, "output_tokens": 9, "reasoning_output_tokens": 4}})
    );
    // CODEX_HOME is outside /tmp, so only the stdin note is on stderr.
    assert_eq!(run.stderr.trim(), "Reading additional input from stdin...");

    let log = fake.wait_for_requests(1, REQUEST_TIMEOUT).await.unwrap();
    assert_eq!(log.len(), 1, "{log:#?}");
    let req = &log[0];
    assert_eq!(req.kind, RequestKind::Model);
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/responses")
    );
    assert_eq!(req.headers["authorization"], "Bearer sk-fak…REDACTED");
    assert_eq!(req.model().as_deref(), Some("gpt-5.5"));
    let tools = req.declared_tools();
    assert!(tools.contains(&"exec_command".to_owned()), "{tools:?}");
    assert!(tools.contains(&"tool_search".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn shell_tool_runs_in_the_workspace_sandbox() {
    let fake =
        FakeApi::openai(Script::shell("touch created_by_codex.txt").then_quote_tool_result())
            .await
            .unwrap();
    let run = run(
        &fake,
        &fake.wiring(),
        "Create a file",
        &["--sandbox", "workspace-write"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.dirs.work.join("created_by_codex.txt").exists(),
        "{}",
        run.describe()
    );
    let events = run.events();
    let done = events
        .iter()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "command_execution")
        .unwrap_or_else(|| panic!("no command_execution: {}", run.describe()));
    assert_eq!(
        done["item"]["command"],
        "/bin/bash -lc 'touch created_by_codex.txt'"
    );
    assert_eq!(done["item"]["exit_code"], 0);
    let said = agent_messages(&events);
    assert!(
        said[0].starts_with("The shell said: Chunk ID: "),
        "{said:?}"
    );
    assert!(said[0].contains("Process exited with code 0"), "{said:?}");
    assert_eq!(run.last_event()["usage"]["input_tokens"], 240);
}

#[tokio::test]
async fn invalid_key_fails_without_retries() {
    let fake = FakeApi::openai(Script::error_reply(ErrorReply::invalid_api_key()))
        .await
        .unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let last = run.last_event();
    assert_eq!(last["type"], "turn.failed");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "unexpected status 401 Unauthorized: Incorrect API key provided: sk-fake."
        ),
        "{message}"
    );
    assert!(message.contains("request id: req_fake0001"), "{message}");
    assert_eq!(fake.model_requests().len(), 1);
}

#[tokio::test]
async fn rate_limit_without_retry_after_fails_at_once() {
    // Codex 0.171 gives up on a 429 without `retry-after` at once, whatever the retry
    // settings.
    let fake = FakeApi::openai(Script::error(429)).await.unwrap();
    let wiring = fake.wiring_with(&WiringOptions::default().with_max_retries(2));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let last = run.last_event();
    assert_eq!(last["type"], "turn.failed", "{}", run.describe());
    assert_eq!(
        last["error"]["message"],
        "exceeded retry limit, last status: 429 Too Many Requests, request id: req_fake0001"
    );
    assert_eq!(fake.model_requests().len(), 1, "{}", run.describe());
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried() {
    // With `retry-after` it retries `request_max_retries` times (no stream-level retry).
    let fake = FakeApi::openai(Script::error_reply(
        ErrorReply::status(429).with_retry_after(Duration::from_secs(1)),
    ))
    .await
    .unwrap();
    let wiring = fake.wiring_with(&WiringOptions::default().with_max_retries(1));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert_eq!(
        run.last_event()["error"]["message"],
        "exceeded retry limit, last status: 429 Too Many Requests, request id: req_fake0002"
    );
    assert_eq!(fake.model_requests().len(), 2, "{}", run.describe());
}

#[tokio::test]
async fn server_errors_are_retried_at_both_levels() {
    let fake = FakeApi::openai(Script::error(500)).await.unwrap();
    let wiring = fake.wiring_with(&WiringOptions::default().with_max_retries(1));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let events = run.events();
    // One stream-level retry ("Reconnecting... 1/1"), each with one request-level retry.
    assert!(
        events.iter().any(|e| e["type"] == "error"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Reconnecting... 1/1"))),
        "{}",
        run.describe()
    );
    // Codex replaces a 500's message with its own.
    assert_eq!(
        run.last_event()["error"]["message"],
        "We\u{2019}re currently experiencing high demand, which may cause temporary errors."
    );
    assert_eq!(fake.model_requests().len(), 4, "{}", run.describe());
}

#[tokio::test]
async fn mcp_tool_via_tool_search() {
    let echo = EchoServer::start().await;
    let fake = FakeApi::openai(
        Script::mcp_tool_call("echo", "echo", json!({"text": "ping from fake model"}))
            .then_quote_tool_result(),
    )
    .await
    .unwrap();
    let server = format!(
        "mcp_servers.echo={{url=\"{}\",default_tools_approval_mode=\"approve\"}}",
        echo.url
    );
    let run = run(
        &fake,
        &fake.wiring(),
        "Call the echo tool",
        &["-c", &server],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        echo.calls(),
        vec!["ping from fake model"],
        "{}",
        run.describe()
    );
    let model = fake.model_requests();
    let answers: Vec<&str> = model.iter().map(|r| r.answer.as_str()).collect();
    assert_eq!(
        answers,
        [
            "tool_search_call echo",
            "function_call mcp__echo.echo",
            "text quoting the tool result"
        ]
    );
    // The second request carries Codex's tool_search_output with the namespace.
    let output = model[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "tool_search_output")
        .unwrap_or_else(|| panic!("no tool_search_output: {:#}", model[1].body["input"]));
    assert_eq!(output["tools"][0]["type"], "namespace");
    assert_eq!(output["tools"][0]["name"], "mcp__echo");
    let events = run.events();
    let call = events
        .iter()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "mcp_tool_call")
        .unwrap_or_else(|| panic!("no mcp_tool_call: {}", run.describe()));
    assert_eq!(call["item"]["status"], "completed");
    let said = agent_messages(&events);
    assert!(said[0].starts_with("The MCP tool said: "), "{said:?}");
}

#[tokio::test]
async fn dropped_stream_fails_the_turn() {
    let fake = FakeApi::openai(Script::drop_mid_stream()).await.unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert_eq!(
        run.last_event()["type"],
        "turn.failed",
        "{}",
        run.describe()
    );
}
