//! The real `claude` against the fake Anthropic Messages API.

use aicli_testkit::{ErrorReply, FakeApi, RequestKind, Script, WiringOptions};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{REQUEST_TIMEOUT, run};
use crate::mcp_echo::EchoServer;

#[tokio::test]
async fn plain_answer() {
    let fake = FakeApi::anthropic(Script::new()).await.unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["type"], "result", "{}", run.describe());
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "Hello from the fake Anthropic API.");
    assert_eq!(
        result["usage"]["input_tokens"], 12,
        "usage: {}",
        result["usage"]
    );
    assert_eq!(result["usage"]["cache_creation_input_tokens"], 34);
    assert_eq!(result["usage"]["cache_read_input_tokens"], 56);
    assert_eq!(result["usage"]["output_tokens"], 7);

    let log = fake.wait_for_requests(1, REQUEST_TIMEOUT).await.unwrap();
    // Only the model call: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC stops HEAD /api/hello.
    assert_eq!(log.len(), 1, "{log:#?}");
    let req = &log[0];
    assert_eq!(req.kind, RequestKind::Model);
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(req.query.as_deref(), Some("beta=true"));
    assert_eq!(req.headers["x-api-key"], "sk-ant…REDACTED");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.model().as_deref(), Some("claude-opus-5-5"));
    assert!(req.declared_tools().contains(&"Bash".to_owned()));
}

#[tokio::test]
async fn bash_tool_runs_and_the_answer_quotes_it() {
    let fake = FakeApi::anthropic(
        Script::shell("touch created_by_claude.txt")
            .with_preamble("I will run a command.")
            .then_quote_tool_result(),
    )
    .await
    .unwrap();
    let run = run(
        &fake,
        &fake.wiring(),
        "Create a file",
        &["--allowedTools", "Bash"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.dirs.work.join("created_by_claude.txt").exists(),
        "{}",
        run.describe()
    );
    let result = run.last_event();
    assert_eq!(
        result["result"],
        "The tool returned: (Bash completed with no output)"
    );
    assert_eq!(result["num_turns"], 2);
    let model = fake.model_requests();
    assert_eq!(model.len(), 2);
    // The second request carries the tool result the answer quoted.
    let last = model[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(last["content"][0]["type"], "tool_result");
}

#[tokio::test]
async fn invalid_key_fails_at_once() {
    let fake = FakeApi::anthropic(Script::error_reply(ErrorReply::invalid_api_key()))
        .await
        .unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["is_error"], true);
    assert_eq!(result["api_error_status"], 401);
    assert_eq!(result["terminal_reason"], "api_error");
    assert_eq!(result["result"], "Invalid API key · Fix external API key");
    assert_eq!(fake.model_requests().len(), 1);
}

#[tokio::test]
async fn rate_limit_is_retried_as_configured() {
    let fake = FakeApi::anthropic(Script::error(429)).await.unwrap();
    let wiring = fake.wiring_with(&WiringOptions::default().with_max_retries(1));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let events = run.events();
    let retries: Vec<&Value> = events
        .iter()
        .filter(|e| e["subtype"] == "api_retry")
        .collect();
    assert_eq!(retries.len(), 1, "{}", run.describe());
    assert_eq!(retries[0]["error_status"], 429);
    let result = run.last_event();
    assert_eq!(result["api_error_status"], 429);
    assert_eq!(
        result["result"],
        "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit"
    );
    assert_eq!(fake.model_requests().len(), 2);
}

#[tokio::test]
async fn mcp_tool_via_tool_search() {
    let echo = EchoServer::start().await;
    let fake = FakeApi::anthropic(
        Script::mcp_tool_call("echo", "echo", json!({"text": "ping from fake model"}))
            .then_quote_tool_result(),
    )
    .await
    .unwrap();
    let config = json!({"mcpServers": {"echo": {"type": "http", "url": echo.url}}}).to_string();
    let run = run(
        &fake,
        &fake.wiring(),
        "Call the echo tool",
        &[
            "--mcp-config",
            &config,
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__echo__echo",
        ],
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
            "tool_use ToolSearch select:mcp__echo__echo",
            "tool_use mcp__echo__echo",
            "text quoting the tool result"
        ]
    );
    // Deferred before the search, declared after it.
    assert!(
        !model[0]
            .declared_tools()
            .contains(&"mcp__echo__echo".to_owned())
    );
    assert!(
        model[1]
            .declared_tools()
            .contains(&"mcp__echo__echo".to_owned())
    );
    assert_eq!(
        run.last_event()["result"],
        "The MCP tool returned: {\"result\":\"echo: ping from fake model\"}"
    );
}

#[tokio::test]
async fn max_turns_stops_a_tool_loop() {
    let fake = FakeApi::anthropic(Script::shell("echo hi")).await.unwrap();
    let run = run(
        &fake,
        &fake.wiring(),
        "Loop forever",
        &["--max-turns", "2", "--allowedTools", "Bash"],
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["subtype"], "error_max_turns");
    assert_eq!(result["terminal_reason"], "max_turns");
    assert_eq!(fake.model_requests().len(), 2);
}

#[tokio::test]
async fn dropped_stream_is_an_error() {
    let fake = FakeApi::anthropic(Script::drop_mid_stream()).await.unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["is_error"], true, "{}", run.describe());
}
