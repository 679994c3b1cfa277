//! The fakes over plain HTTP (no CLI): SSE framing, errors, cut streams, hanging
//! answers, and the wait-for-requests timeout.

use std::time::{Duration, Instant};

use aicli_testkit::{ErrorReply, FakeApi, FakeApiError, RequestKind, Script, Vendor};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

async fn post(url: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("x-api-key", "sk-ant-secret-key")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// `(event name, data)` of each SSE frame.
fn frames(text: &str) -> Vec<(Option<String>, Value)> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .map(|f| f.trim_matches('\n').to_owned())
        .filter(|f| !f.is_empty())
        .map(|f| {
            let mut event = None;
            let mut data = Value::Null;
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            (event, data)
        })
        .collect()
}

#[tokio::test]
async fn anthropic_frames_and_request_log() {
    let fake = FakeApi::anthropic(Script::text("hi there")).await.unwrap();
    let url = format!("{}/v1/messages?beta=true", fake.base_url());
    let resp = post(&url, json!({"model": "m", "stream": true, "messages": []})).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["request-id"], "req_fake0001");
    let f = frames(&resp.text().await.unwrap());
    for (name, data) in &f {
        assert_eq!(name.as_deref(), data["type"].as_str());
    }
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let log = fake.requests();
    assert_eq!(log[0].headers["x-api-key"], "sk-ant…REDACTED");
    assert_eq!(log[0].body["model"], "m");
    assert_eq!(log[0].answer, "text");
}

#[tokio::test]
async fn openai_sequence_numbers() {
    let fake = FakeApi::openai(Script::new()).await.unwrap();
    let resp = post(
        &format!("{}/v1/responses", fake.base_url()),
        json!({"model": "gpt-5.5", "input": []}),
    )
    .await;
    let f = frames(&resp.text().await.unwrap());
    for (i, (name, data)) in f.iter().enumerate() {
        assert_eq!(data["sequence_number"], i as u64);
        assert_eq!(name.as_deref(), data["type"].as_str());
    }
    assert_eq!(f.last().unwrap().1["type"], "response.completed");
}

#[tokio::test]
async fn gemini_chunks_and_router() {
    let fake = FakeApi::gemini(Script::new()).await.unwrap();
    let base = fake.base_url();
    let resp = post(
        &format!("{base}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
        json!({"contents": []}),
    )
    .await;
    let f = frames(&resp.text().await.unwrap());
    assert_eq!(f.len(), 6);
    assert!(f.iter().all(|(name, _)| name.is_none()));
    assert_eq!(f[5].1["candidates"][0]["finishReason"], "STOP");
    assert_eq!(f[5].1["usageMetadata"]["totalTokenCount"], 236);
    let router = post(
        &format!("{base}/v1beta/models/gemini-3.5-flash-lite:generateContent"),
        json!({"generationConfig": {"responseMimeType": "application/json",
               "responseJsonSchema": {"type": "OBJECT", "properties": {"complexity_score": {"type": "INTEGER"}}}}}),
    )
    .await
    .json::<Value>()
    .await
    .unwrap();
    let text = router["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"complexity_score": 10})
    );
    let kinds: Vec<RequestKind> = fake.requests().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RequestKind::Model, RequestKind::Router]);
    // The router does not use up the script.
    assert_eq!(fake.requests()[0].step, Some(0));
}

#[tokio::test]
async fn errors_with_retry_after() {
    for (vendor, path, status) in [
        (Vendor::Anthropic, "/v1/messages", 529),
        (Vendor::OpenAi, "/v1/responses", 429),
        (
            Vendor::Gemini,
            "/v1beta/models/g:streamGenerateContent",
            503,
        ),
    ] {
        let script = Script::error_reply(
            ErrorReply::status(status).with_retry_after(Duration::from_secs(2)),
        );
        let fake = FakeApi::start(vendor, script).await.unwrap();
        let resp = post(&format!("{}{path}", fake.base_url()), json!({})).await;
        assert_eq!(resp.status().as_u16(), status, "{vendor}");
        assert_eq!(resp.headers()["retry-after"], "2", "{vendor}");
        let body: Value = resp.json().await.unwrap();
        match vendor {
            Vendor::Anthropic => assert_eq!(body["error"]["type"], "overloaded_error"),
            Vendor::OpenAi => assert_eq!(body["error"]["code"], "rate_limit_exceeded"),
            Vendor::Gemini => {
                assert_eq!(body["error"]["status"], "UNAVAILABLE");
                assert_eq!(body["error"]["details"][0]["retryDelay"], "2s");
            }
        }
    }
}

#[tokio::test]
async fn script_steps_advance_and_the_last_repeats() {
    let fake = FakeApi::anthropic(Script::error(500).then_text("ok"))
        .await
        .unwrap();
    let url = format!("{}/v1/messages", fake.base_url());
    let statuses = [
        post(&url, json!({})).await.status().as_u16(),
        post(&url, json!({})).await.status().as_u16(),
        post(&url, json!({})).await.status().as_u16(),
    ];
    assert_eq!(statuses, [500, 200, 200]);
    let steps: Vec<Option<usize>> = fake.requests().iter().map(|r| r.step).collect();
    assert_eq!(steps, [Some(0), Some(1), Some(1)]);
}

#[tokio::test]
async fn dropped_stream_breaks_the_body() {
    for (vendor, path) in [
        (Vendor::Anthropic, "/v1/messages"),
        (Vendor::OpenAi, "/v1/responses"),
        (Vendor::Gemini, "/v1beta/models/g:streamGenerateContent"),
    ] {
        let fake = FakeApi::start(vendor, Script::drop_mid_stream())
            .await
            .unwrap();
        let resp = post(&format!("{}{path}", fake.base_url()), json!({})).await;
        assert_eq!(resp.status(), 200);
        let mut resp = resp;
        let mut got = Vec::new();
        let err = loop {
            match resp.chunk().await {
                Ok(Some(c)) => got.extend_from_slice(&c),
                Ok(None) => panic!("{vendor}: the stream ended cleanly"),
                Err(e) => break e,
            }
        };
        assert!(!got.is_empty(), "{vendor}: nothing before the cut ({err})");
    }
}

#[tokio::test]
async fn hang_answers_nothing_until_shutdown() {
    let fake = FakeApi::openai(Script::hang()).await.unwrap();
    let url = format!("{}/v1/responses", fake.base_url());
    let req = tokio::spawn(async move { reqwest::Client::new().post(url).body("{}").send().await });
    fake.wait_for_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!req.is_finished());
    fake.shutdown().await;
    let resp = tokio::time::timeout(Duration::from_secs(5), req)
        .await
        .unwrap()
        .unwrap();
    // Either the 503 sent on shutdown or a closed connection; never a hang.
    if let Ok(r) = resp {
        assert_eq!(r.status(), 503);
    }
}

#[tokio::test]
async fn waiting_for_requests_times_out_with_a_message() {
    let fake = FakeApi::gemini(Script::new()).await.unwrap();
    // A side call is listed, but does not count as a model request.
    post(
        &format!("{}/v1beta/models/x:countTokens", fake.base_url()),
        json!({}),
    )
    .await;
    let start = Instant::now();
    let err = fake
        .wait_for_requests(1, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(matches!(err, FakeApiError::Timeout { received: 0, .. }));
    let message = err.to_string();
    assert!(
        message.contains("received 0 of the 1 model requests"),
        "{message}"
    );
    assert!(
        message.contains("POST /v1beta/models/x:countTokens"),
        "{message}"
    );
}

#[tokio::test]
async fn unknown_paths_are_logged_404s() {
    let fake = FakeApi::openai(Script::new()).await.unwrap();
    let resp = reqwest::get(format!("{}/v1/models", fake.base_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let log = fake.requests();
    assert_eq!(log[0].kind, RequestKind::Other);
    assert_eq!(log[0].status, 404);
}

/// A usage limit holds every request (the cursor stays) until its reset, in each vendor's
/// shape with the reset counting down; the first request after it gets the next step.
#[tokio::test]
async fn a_usage_limit_answers_in_each_vendors_shape_until_its_reset() {
    let limit = Duration::from_millis(1500);
    for vendor in [Vendor::Anthropic, Vendor::OpenAi, Vendor::Gemini] {
        let fake = FakeApi::start(vendor, Script::usage_limit(limit).then_text("after"))
            .await
            .unwrap();
        assert!(fake.plays_subscription());
        assert_eq!(
            fake.wiring().env.contains_key("CLAUDE_CODE_OAUTH_TOKEN"),
            vendor == Vendor::Anthropic
        );
        let url = match vendor {
            Vendor::Anthropic => format!("{}/v1/messages?beta=true", fake.base_url()),
            Vendor::OpenAi => format!("{}/v1/responses", fake.base_url()),
            Vendor::Gemini => format!(
                "{}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                fake.base_url()
            ),
        };
        let body = json!({"model": "gemini-2.5-flash", "stream": true, "messages": [], "input": [], "contents": []});
        let began = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        for _ in 0..2 {
            let resp = post(&url, body.clone()).await;
            assert_eq!(resp.status(), 429, "{vendor}");
            let headers = resp.headers().clone();
            let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((1..=2).contains(&retry), "{vendor}: retry-after {retry}");
            let v: Value = resp.json().await.unwrap();
            match vendor {
                Vendor::Anthropic => {
                    assert_eq!(headers["anthropic-ratelimit-unified-status"], "rejected");
                    assert_eq!(
                        headers["anthropic-ratelimit-unified-representative-claim"],
                        "five_hour"
                    );
                    let reset: u64 = headers["anthropic-ratelimit-unified-reset"]
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert!(reset >= began && reset <= began + 3, "{reset} vs {began}");
                    assert_eq!(v["error"]["type"], "rate_limit_error");
                }
                Vendor::OpenAi => {
                    assert_eq!(v["error"]["type"], "usage_limit_reached", "{v}");
                    assert!(
                        v["error"]["resets_in_seconds"].as_u64().unwrap() <= 2,
                        "{v}"
                    );
                    assert!(v["error"]["resets_at"].as_u64().unwrap() >= began, "{v}");
                }
                Vendor::Gemini => {
                    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
                    let details = v["error"]["details"].as_array().unwrap();
                    assert!(
                        details
                            .iter()
                            .any(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo"),
                        "{v}"
                    );
                    assert!(
                        v["error"]["message"]
                            .as_str()
                            .unwrap()
                            .contains("Please retry in"),
                        "{v}"
                    );
                }
            }
        }
        tokio::time::sleep(limit).await;
        let resp = post(&url, body.clone()).await;
        assert_eq!(resp.status(), 200, "{vendor}: after the reset");
        let steps: Vec<Option<usize>> = fake.model_requests().iter().map(|r| r.step).collect();
        assert_eq!(steps, [Some(0), Some(0), Some(1)], "{vendor}");
    }
}
