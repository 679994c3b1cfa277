//! The agent MCP server cannot be grown without bound: every limit of
//! `engine.mcp.limits` proven over real HTTP on loopback — a slow header, an idle socket,
//! a stalled body, more connections than allowed, more sessions than a token may hold,
//! sessions left idle, oversized tool arguments and bodies, a malformed body.
//!
//! The limits are set low here so each test takes seconds; their defaults are in
//! `McpLimits::default()` (and the README).

use std::time::Duration;

use aicli::mcp::{McpServer, McpServerOptions, TaskContext};
use aicli::providers::{AgentEvent, EventKind, McpLimits};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::mcp::{Raw, init_body, sse_message};

/// Longest any test waits for the server to do something it must do.
const WAIT: Duration = Duration::from_secs(15);

struct Server {
    server: McpServer,
    _ws: tempfile::TempDir,
    _cancel: tokio_util::sync::DropGuard,
}

impl Server {
    async fn start(limits: McpLimits) -> Server {
        let ws = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let server = McpServer::start(
            McpServerOptions {
                skills_dir: ws.path().join("skills"),
                limits,
                ..McpServerOptions::default()
            },
            cancel.clone(),
        )
        .await
        .unwrap();
        Server {
            server,
            _ws: ws,
            _cancel: cancel.drop_guard(),
        }
    }

    fn mint(&self, task: &str) -> (String, UnboundedReceiver<AgentEvent>) {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let token = self.server.mint(TaskContext {
            batch_id: "b".into(),
            task_id: task.into(),
            workspace: self._ws.path().to_path_buf(),
            skills: vec!["s".into()],
            credentials: vec!["C".into()],
            tools: vec![],
            record_dir: None,
            attempt: 1,
            events,
        });
        (token, rx)
    }

    async fn tcp(&self) -> TcpStream {
        TcpStream::connect(self.server.local_addr()).await.unwrap()
    }
}

/// Reads until the server closes the connection (EOF or reset), up to `within`; returns
/// whether it did, and what it sent before.
async fn closed_within(s: &mut TcpStream, within: Duration) -> (bool, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (false, String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(0)) | Ok(Err(_)) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn limits(f: impl FnOnce(&mut McpLimits)) -> McpLimits {
    let mut l = McpLimits::default();
    f(&mut l);
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_header_and_an_idle_socket_are_closed_after_the_header_read_timeout() {
    let s = Server::start(limits(|l| l.header_read_timeout_secs = 1)).await;
    // Half a request head, never finished.
    let mut partial = s.tcp().await;
    partial
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
        .await
        .unwrap();
    // A socket that never says anything.
    let mut silent = s.tcp().await;
    // A kept-alive connection after a complete request.
    let mut kept = s.tcp().await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 512];
    let n = kept.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    for (what, conn) in [
        ("partial header", &mut partial),
        ("silent socket", &mut silent),
        ("idle keep-alive", &mut kept),
    ] {
        let (closed, _) = closed_within(conn, WAIT).await;
        assert!(closed, "{what}: still open");
    }
    // The same partial header under the default limit (10 s) is still open after 2 s:
    // the close above was the configured timeout.
    let d = Server::start(McpLimits::default()).await;
    let mut partial = d.tcp().await;
    partial
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let (closed, _) = closed_within(&mut partial, Duration::from_secs(2)).await;
    assert!(!closed, "closed before the default header timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_body_is_closed_after_the_idle_timeout() {
    let s = Server::start(limits(|l| {
        l.header_read_timeout_secs = 60;
        l.idle_timeout_secs = 1;
    }))
    .await;
    let (token, _rx) = s.mint("t");
    let mut c = s.tcp().await;
    // A complete, authorized head announcing 1,000 bytes of body; 10 arrive.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 1000\r\n\r\n{{\"jsonrpc\""
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let (closed, _) = closed_within(&mut c, WAIT).await;
    assert!(closed, "a stalled body kept its connection");
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.server.closed_connections().1 == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no idle close was counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A head that announces a body over `mcp.limits.max_body_bytes` gets 413 at once, from
/// its `Content-Length` alone, and its connection is closed (the body is never read).
/// Before, rmcp counted bytes as they came: a client that announced 99,999,999,999 and
/// sent none waited for the 30 s idle close with no answer (issue 21 F7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_announced_over_the_limit_gets_413_at_once() {
    let s = Server::start(McpLimits::default()).await;
    let (token, _rx) = s.mint("t");
    let max = McpLimits::default().max_body_bytes;
    for (length, body) in [
        ("99999999999", ""),
        (&*(max + 1).to_string(), "{\"jsonrpc\""),
    ] {
        let mut c = s.tcp().await;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {length}\r\n\r\n{body}"
        );
        let started = std::time::Instant::now();
        c.write_all(head.as_bytes()).await.unwrap();
        // 15 s: far from an answer at once, and half the 30 s idle close it rules out.
        let (closed, got) = closed_within(&mut c, Duration::from_secs(15)).await;
        assert!(
            got.starts_with("HTTP/1.1 413"),
            "Content-Length {length}: {got:?}"
        );
        assert!(
            got.contains("mcp.limits.max_body_bytes") && got.contains(&max.to_string()),
            "Content-Length {length}: {got}"
        );
        assert!(
            closed,
            "Content-Length {length}: the connection stayed open"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "Content-Length {length}: {:?}",
            started.elapsed()
        );
    }
    // Unauthenticated, the same head is refused at once too (401: nothing about limits).
    let mut c = s.tcp().await;
    c.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Content-Length: 99999999999\r\n\r\n",
    )
    .await
    .unwrap();
    let (_, got) = closed_within(&mut c, Duration::from_secs(3)).await;
    assert!(got.starts_with("HTTP/1.1 401"), "{got:?}");
    // A body at the limit's side still reaches the server: a real request works.
    let raw = Raw::new(s.server.url());
    raw.initialize(&token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let s = Server::start(limits(|l| {
        l.max_connections = 8;
        l.header_read_timeout_secs = 60;
        l.idle_timeout_secs = 60;
    }))
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(s.tcp().await);
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.server.open_connections() < 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "8 connections never opened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Number 9 to 20: closed as soon as they are accepted, answered by nothing.
    for i in 9..=20 {
        let mut extra = s.tcp().await;
        let _ = extra
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await;
        let (closed, said) = closed_within(&mut extra, WAIT).await;
        assert!(closed && said.is_empty(), "connection {i}: {said:?}");
    }
    assert_eq!(s.server.open_connections(), 8);
    assert_eq!(s.server.closed_connections().0, 12);
    // One goes: a new connection is served again.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut c = s.tcp().await;
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let (_, said) = closed_within(&mut c, WAIT).await;
        if said.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never served again: {said:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_holds_a_limited_number_of_sessions_and_idle_ones_expire() {
    let s = Server::start(limits(|l| {
        l.max_sessions_per_token = 3;
        l.session_idle_timeout_secs = 1;
    }))
    .await;
    let raw = Raw::new(s.server.url());
    let (a, _ra) = s.mint("a");
    let (b, _rb) = s.mint("b");
    let auth_a = format!("Bearer {a}");
    let mut sids = Vec::new();
    for _ in 0..3 {
        sids.push(raw.initialize(&a).await);
    }
    let refused = raw.post(Some(&auth_a), None, &init_body()).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "too_many_sessions", "{body}");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("mcp.limits.max_sessions_per_token"),
        "{body}"
    );
    // Another token is not affected.
    raw.initialize(&b).await;
    // Closing one frees its place.
    let del = raw
        .request(reqwest::Method::DELETE, Some(&auth_a), Some(&sids[0]))
        .send()
        .await
        .unwrap();
    assert!(del.status().is_success(), "{}", del.status());
    sids[0] = raw.initialize(&a).await;
    assert_eq!(s.server.live_sessions(), 4);
    // Left idle, every session expires and is forgotten: its memory is freed, its id
    // answers 404, and the token may open new ones.
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.server.live_sessions() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle sessions never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gone = raw
        .post(
            Some(&auth_a),
            Some(&sids[1]),
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}),
        )
        .await;
    assert_eq!(gone.status(), 404);
    for _ in 0..3 {
        raw.initialize(&a).await;
    }
}

/// Calls `tool` with `args` in a new session; returns the JSON-RPC result.
async fn call(raw: &Raw, token: &str, tool: &str, args: Value) -> Value {
    let sid = raw.initialize(token).await;
    let resp = raw
        .post(
            Some(&format!("Bearer {token}")),
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": tool, "arguments": args}}),
        )
        .await;
    assert_eq!(resp.status(), 200);
    sse_message(resp, 7).await["result"].clone()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_string_and_list_argument_is_capped_with_the_limit_named() {
    let s = Server::start(McpLimits::default()).await;
    let raw = Raw::new(s.server.url());
    let (token, mut rx) = s.mint("t");
    let l = McpLimits::default();
    let long = |n: usize| "x".repeat(n);
    let refusals = [
        (
            "broadcastLog",
            json!({"message": "m", "source": long(1_000_000)}),
            "log_source_chars",
        ),
        (
            "ask_user",
            json!({"question": long(l.question_chars + 1)}),
            "question_chars",
        ),
        (
            "askUser",
            json!({"question": "q", "options": vec!["o"; l.max_options + 1]}),
            "max_options",
        ),
        (
            "ask_user",
            json!({"question": "q", "options": ["ok", long(l.option_chars + 1)]}),
            "option_chars",
        ),
        (
            "getWorkspaceFiles",
            json!({"path": long(l.path_chars + 1)}),
            "path_chars",
        ),
        (
            "getWorkspaceFiles",
            json!({"pattern": long(l.pattern_chars + 1)}),
            "pattern_chars",
        ),
        (
            "getSkill",
            json!({"name": long(l.name_chars + 1)}),
            "name_chars",
        ),
        (
            "getCredential",
            json!({"name": long(l.name_chars + 1)}),
            "name_chars",
        ),
    ];
    for (tool, args, limit) in refusals {
        let r = call(&raw, &token, tool, args).await;
        assert_eq!(r["isError"], true, "{tool}: {r}");
        let t = text_of(&r);
        assert!(t.contains(&format!("mcp.limits.{limit}")), "{tool}: {t}");
        assert!(
            t.len() < 300,
            "{tool}: the refusal echoes the argument: {} bytes",
            t.len()
        );
    }
    // Nothing refused reached the task's stream (no log line, no question).
    let refused_events: Vec<AgentEvent> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert!(refused_events.is_empty(), "{refused_events:?}");
    // A bad level is refused without echoing it whole.
    let r = call(
        &raw,
        &token,
        "broadcastLog",
        json!({"message": "m", "level": long(100_000)}),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert!(text_of(&r).len() < 200, "{}", text_of(&r).len());
    // A long message is cut to the limit, and the answer says so.
    let r = call(
        &raw,
        &token,
        "broadcastLog",
        json!({"message": long(l.log_message_chars + 500)}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    assert!(text_of(&r).contains("mcp.limits.log_message_chars"), "{r}");
    match rx.recv().await.map(|e| e.kind) {
        Some(EventKind::Log { message, .. }) => assert_eq!(message.len(), l.log_message_chars),
        other => panic!("{other:?}"),
    }
    // Within the limits, the same tools work.
    let r = call(
        &raw,
        &token,
        "ask_user",
        json!({"question": "Go?", "options": ["yes", "no"]}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_gets_400_and_an_oversized_one_413() {
    let s = Server::start(limits(|l| l.max_body_bytes = 64 * 1024)).await;
    let raw = Raw::new(s.server.url());
    let (token, _rx) = s.mint("t");
    let auth = format!("Bearer {token}");
    let resp = raw
        .request(reqwest::Method::POST, Some(&auth), None)
        .body("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    // The wrong media type is still 415.
    let resp = reqwest::Client::new()
        .post(s.server.url())
        .header("authorization", &auth)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "text/plain")
        .body(init_body().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);
    // A body over mcp.limits.max_body_bytes.
    let mut big = init_body();
    big["params"]["clientInfo"]["name"] = json!("x".repeat(100 * 1024));
    let resp = raw.post(Some(&auth), None, &big).await;
    assert_eq!(resp.status(), 413);
    // And a well-formed one still works.
    raw.initialize(&token).await;
}
