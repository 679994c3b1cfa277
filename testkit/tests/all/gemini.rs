//! The real `gemini` against the fake Gemini API.

use aicli_testkit::{ErrorReply, FakeApi, RequestKind, Script, WiringOptions};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{REQUEST_TIMEOUT, run};
use crate::mcp_echo::EchoServer;

fn assistant_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "message" && e["role"] == "assistant")
        .filter_map(|e| e["content"].as_str())
        .collect()
}

fn flash() -> WiringOptions {
    WiringOptions::default().with_model("gemini-2.5-flash")
}

#[tokio::test]
async fn plain_answer_through_the_router() {
    let fake = FakeApi::gemini(Script::new()).await.unwrap();
    let run = run(&fake, &fake.wiring(), "Say hello", &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let events = run.events();
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "message" && e["role"] == "assistant")
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(
        deltas,
        ["Hello ", "from ", "the ", "fake ", "Gemini ", "API."]
    );
    let result = run.last_event();
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "success");
    // The transcript `text`: router call + chat call, 236 tokens each.
    let stats = &result["stats"];
    assert_eq!(stats["total_tokens"], 472);
    assert_eq!(stats["input_tokens"], 400);
    assert_eq!(stats["output_tokens"], 22);
    assert_eq!(stats["cached"], 100);
    assert_eq!(
        stats["models"]["gemini-3.5-flash-lite"]["total_tokens"], 236,
        "{stats}"
    );
    assert_eq!(
        stats["models"]["gemini-3.8-flash"]["total_tokens"], 236,
        "{stats}"
    );

    let log = fake.wait_for_requests(1, REQUEST_TIMEOUT).await.unwrap();
    let kinds: Vec<(RequestKind, String)> = log.iter().map(|r| (r.kind, r.path.clone())).collect();
    assert_eq!(
        kinds,
        [
            (
                RequestKind::Router,
                "/v1beta/models/gemini-3.5-flash-lite:generateContent".to_owned()
            ),
            (
                RequestKind::Model,
                "/v1beta/models/gemini-3.8-flash:streamGenerateContent".to_owned()
            ),
        ]
    );
    assert_eq!(log[1].query.as_deref(), Some("alt=sse"));
    assert_eq!(log[1].headers["x-goog-api-key"], "fake-g…REDACTED");
}

#[tokio::test]
async fn plain_answer_with_model_flag() {
    let fake = FakeApi::gemini(Script::new()).await.unwrap();
    let run = run(&fake, &fake.wiring_with(&flash()), "Say hello", &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        assistant_text(&run.events()),
        "Hello from the fake Gemini API."
    );
    let stats = &run.last_event()["stats"];
    assert_eq!(
        stats["models"],
        json!({"gemini-2.5-flash": {"total_tokens": 236, "input_tokens": 200, "output_tokens": 11, "cached": 50, "input": 150}})
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn shell_tool_runs_in_yolo_mode() {
    let fake =
        FakeApi::gemini(Script::shell("touch created_by_gemini.txt").then_quote_tool_result())
            .await
            .unwrap();
    let run = run(
        &fake,
        &fake.wiring_with(&flash()),
        "Create a file",
        &["--approval-mode", "yolo"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        run.dirs.work.join("created_by_gemini.txt").exists(),
        "{}",
        run.describe()
    );
    let events = run.events();
    let tool_use = events.iter().find(|e| e["type"] == "tool_use").unwrap();
    assert_eq!(tool_use["tool_name"], "run_shell_command");
    let text = assistant_text(&events);
    assert!(
        text.starts_with("The tool run_shell_command returned: {\"output\": \"<untrusted_context>\\nOutput: (empty)"),
        "{text}"
    );
    assert_eq!(run.last_event()["stats"]["tool_calls"], 1);
}

#[tokio::test]
async fn unauthenticated_exits_with_the_status() {
    let fake = FakeApi::gemini(Script::error(401)).await.unwrap();
    let run = run(&fake, &fake.wiring_with(&flash()), "Say hello", &[]).await;
    // Gemini CLI exits with the HTTP status & 0xff.
    assert_eq!(run.code, Some(401 & 0xff), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["status"], "error");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("UNAUTHENTICATED"), "{message}");
    assert_eq!(fake.model_requests().len(), 1);
}

#[tokio::test]
async fn invalid_key_is_a_400() {
    let fake = FakeApi::gemini(Script::error_reply(ErrorReply::invalid_api_key()))
        .await
        .unwrap();
    let run = run(&fake, &fake.wiring_with(&flash()), "Say hello", &[]).await;
    assert_eq!(run.code, Some(144), "{}", run.describe());
    let message = run.last_event()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("API key not valid"), "{message}");
}

#[tokio::test]
async fn rate_limit_with_bounded_attempts() {
    // maxAttempts 2 (one retry): Gemini waits ~5 s before it, so this test takes ~7 s.
    let fake = FakeApi::gemini(Script::error(429)).await.unwrap();
    let wiring = fake.wiring_with(&flash().with_max_retries(1));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(429 & 0xff), "{}", run.describe());
    let message = run.last_event()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("[API Error: Resource has been exhausted (e.g. check quota).]"),
        "{message}"
    );
    assert_eq!(fake.model_requests().len(), 2, "{}", run.describe());
}

#[tokio::test]
async fn daily_quota_is_not_retried() {
    let fake = FakeApi::gemini(Script::error_reply(ErrorReply::quota_exhausted()))
        .await
        .unwrap();
    // Even with the default 10 attempts, a per-day quota fails at once.
    let wiring = fake.wiring_with(&flash().with_max_retries(9));
    let run = run(&fake, &wiring, "Say hello", &[]).await;
    assert_eq!(run.code, Some(429 & 0xff), "{}", run.describe());
    assert_eq!(fake.model_requests().len(), 1, "{}", run.describe());
}

#[tokio::test]
async fn mcp_tool_called_directly() {
    let echo = EchoServer::start().await;
    let fake = FakeApi::gemini(
        Script::mcp_tool_call("echo", "echo", json!({"text": "ping from fake model"}))
            .then_quote_tool_result(),
    )
    .await
    .unwrap();
    let mut wiring = fake.wiring_with(&flash());
    wiring.merge_json(
        ".gemini/settings.json",
        json!({"mcpServers": {"echo": {"httpUrl": echo.url, "trust": true}}}),
    );
    let run = run(&fake, &wiring, "Call the echo tool", &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        echo.calls(),
        vec!["ping from fake model"],
        "{}",
        run.describe()
    );
    let model = fake.model_requests();
    // Gemini CLI declares the MCP tool as `mcp_<server>_<tool>` from the first request.
    assert!(
        model[0]
            .declared_tools()
            .contains(&"mcp_echo_echo".to_owned()),
        "{:?}",
        model[0].declared_tools()
    );
    let answers: Vec<&str> = model.iter().map(|r| r.answer.as_str()).collect();
    assert_eq!(
        answers,
        ["functionCall mcp_echo_echo", "text quoting the tool result"]
    );
    let text = assistant_text(&run.events());
    assert!(
        text.starts_with("The tool mcp_echo_echo returned: {\"output\": \"<untrusted_context>\\necho: ping from fake model"),
        "{text}"
    );
}

#[tokio::test]
async fn max_session_turns_stops_a_tool_loop() {
    let fake = FakeApi::gemini(Script::shell("echo hi")).await.unwrap();
    let mut wiring = fake.wiring_with(&flash());
    wiring.merge_json(
        ".gemini/settings.json",
        json!({"model": {"maxSessionTurns": 2}}),
    );
    let run = run(&fake, &wiring, "Loop", &["--approval-mode", "yolo"]).await;
    assert_eq!(run.code, Some(53), "{}", run.describe());
    let result = run.last_event();
    assert_eq!(result["error"]["type"], "FatalTurnLimitedError");
    assert_eq!(fake.model_requests().len(), 2);
}

#[tokio::test]
async fn dropped_stream_is_an_error() {
    let fake = FakeApi::gemini(Script::drop_mid_stream()).await.unwrap();
    let run = run(&fake, &fake.wiring_with(&flash()), "Say hello", &[]).await;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    // The first chunk got through before the cut.
    assert_eq!(assistant_text(&run.events()), "Hello ");
    let result = run.last_event();
    assert_eq!(result["status"], "error");
    assert_eq!(result["error"]["message"], "[API Error: terminated]");
}
