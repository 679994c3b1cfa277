//! Upstream MCP servers behind aicli's auth (`mcp_upstreams`), with real servers:
//! `@modelcontextprotocol/server-everything` from npm on stdio (installed by
//! `.ci/install-mcp-clients.sh`), and Python `mcp` servers (FastMCP) on streamable HTTP
//! behind a bearer check and on stdio.
//!
//! Proven here: a granted task sees the upstreams' tools as `<upstream>__<tool>` and its
//! calls are forwarded (the stdio server got its `env`, the HTTP one its header); a task
//! not granted them does not see them and gets the unknown-tool answer; the CLI's
//! environment, MCP config, argv and every file it was handed hold neither secret; an
//! upstream starts once per batch, is shared by the batch's tasks, and is gone when the
//! batch ends; one that dies is restarted once, then reported, and
//! `notifications/tools/list_changed` reaches only the sessions granted it.

use std::path::PathBuf;
use std::time::Duration;

use aicli::mcp::{McpServer, McpServerOptions, TaskContext};
use aicli::providers::{EventKind, SessionStatus};
use serde_json::{Value, json};

use tokio_util::sync::CancellationToken;

use super::mcp::{PyClient, cache_dir, need, python};
use super::mcp_tools::{Harness, allowed_tools, call, task, text};
use crate::support::mcp::{mcp_server_script as script, start_http_upstream};

/// The stdio upstream's secret (in its `env` only).
const STDIO_SECRET: &str = "stdio-upstream-secret-6a1e0b";
/// The HTTP upstream's bearer token (in aicli's environment, put in the header by
/// `${TRACKER_TOKEN}`).
const HTTP_SECRET: &str = "http-upstream-token-93d7c2";

pub(super) fn everything_js() -> PathBuf {
    need(
        cache_dir().join(
            "mcp-upstreams/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ),
        "@modelcontextprotocol/server-everything",
    )
}

fn node() -> PathBuf {
    which::which("node").expect("node on PATH (the CLIs need it too)")
}

/// The HTTP upstream: a FastMCP server that answers only `Bearer HTTP_SECRET`; its URL.
struct HttpUpstream {
    _child: tokio::process::Child,
    url: String,
}

async fn http_upstream() -> HttpUpstream {
    let (child, url) = start_http_upstream(&python(), HTTP_SECRET)
        .await
        .unwrap_or_else(|e| panic!("the HTTP upstream does not start: {e:#}"));
    HttpUpstream { _child: child, url }
}

/// Every live process on the machine whose environment holds `needle`.
pub(super) fn processes_with_env(needle: &str) -> Vec<u32> {
    aicli::proc::procfs::all_processes()
        .into_keys()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_task_sees_and_calls_the_upstreams_tools_and_the_cli_never_holds_their_secrets() {
    let http = http_upstream().await;
    let h = Harness::new(
        json!({"mcp_upstreams": {
            "everything": {"command": [node(), everything_js(), "stdio"],
                           "env": {"UPSTREAM_SECRET": STDIO_SECRET}},
            "tracker": {"url": http.url, "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}},
        }, "engine": {"mcp": {"limits": {"tool_argument_bytes": 4096}}}}),
        &[("TRACKER_TOKEN", HTTP_SECRET)],
    )
    .await;
    assert_eq!(
        h.server.running_upstreams(),
        0,
        "started before any task needed it"
    );
    let granted = |id: &str| {
        let mut a = vec![
            "--probe".into(),
            h.p(&format!("{id}-probe")),
            "--record-argv".into(),
            h.p(&format!("{id}-argv")),
            "--mcp-list".into(),
            h.p(&format!("{id}-list")),
        ];
        a.extend(call(
            &h,
            "everything__echo",
            json!({"message": "hello upstream"}),
            &format!("{id}-echo"),
        ));
        a.extend(call(
            &h,
            "everything__get-env",
            json!({}),
            &format!("{id}-env"),
        ));
        a.extend(call(
            &h,
            "tracker__whoami",
            json!({}),
            &format!("{id}-whoami"),
        ));
        a.extend(call(
            &h,
            "tracker__add",
            json!({"a": 2, "b": 40}),
            &format!("{id}-add"),
        ));
        // Over mcp.limits.tool_argument_bytes: refused, never forwarded.
        a.extend(call(
            &h,
            "tracker__add",
            json!({"a": 1, "b": 2, "pad": "p".repeat(5000)}),
            &format!("{id}-large"),
        ));
        task(id, &["everything", "tracker"], a)
    };
    let mut other = vec![
        "--probe".into(),
        h.p("other-probe"),
        "--mcp-list".into(),
        h.p("other-list"),
    ];
    other.extend(call(
        &h,
        "everything__echo",
        json!({"message": "x"}),
        "other-echo",
    ));
    other.extend(call(
        &h,
        "everything__no-such-tool",
        json!({"message": "x"}),
        "other-unknown",
    ));
    let batch = h
        .run(vec![granted("a"), granted("b"), task("other", &[], other)])
        .await;
    for r in &batch.tasks {
        assert_eq!(r.status, SessionStatus::Succeeded, "{r:?}");
    }

    // Under the prefix, for the granted tasks only.
    let listed = h.listed("a-list");
    for t in [
        "everything__echo",
        "everything__get-env",
        "tracker__whoami",
        "tracker__add",
    ] {
        assert!(listed.contains(&t.to_owned()), "{t} not in {listed:?}");
    }
    assert!(
        !h.listed("other-list").iter().any(|t| t.contains("__")),
        "{:?}",
        h.listed("other-list")
    );
    // Claude's allowlist names them (they were listed when the run started).
    let allowed = allowed_tools(&h.argv("a-argv"));
    assert!(
        allowed.contains(&"mcp__aicli__everything__echo".to_owned()),
        "{allowed:?}"
    );
    assert!(
        allowed.contains(&"mcp__aicli__tracker__whoami".to_owned()),
        "{allowed:?}"
    );

    // Forwarded: the stdio server got its env, the HTTP server its header.
    for id in ["a", "b"] {
        let echo = h.json(&format!("{id}-echo"));
        assert!(text(&echo).contains("hello upstream"), "{echo}");
        let whoami = h.json(&format!("{id}-whoami"));
        assert_eq!(whoami["isError"], false, "{whoami}");
        assert!(text(&whoami).starts_with("authorized"), "{whoami}");
        assert_eq!(text(&h.json(&format!("{id}-add"))), "42");
        assert!(text(&h.json(&format!("{id}-env"))).contains(STDIO_SECRET));
        let large = &h.json(&format!("{id}-large"))["rpc_error"];
        assert_eq!(large["code"], -32602, "{large}");
        assert!(
            large["message"]
                .as_str()
                .unwrap()
                .ends_with("at most 4096 are accepted (mcp.limits.tool_argument_bytes)"),
            "{large}"
        );
    }
    // One instance served both tasks of the batch (the same run marker), and it is gone
    // now that the batch ended.
    let marker = |id: &str| -> String {
        let env = text(&h.json(&format!("{id}-env")));
        let v: Value = serde_json::from_str(&env).unwrap_or_else(|e| panic!("{env}: {e}"));
        v["AICLI_RUN"].as_str().unwrap().to_owned()
    };
    assert_eq!(marker("a"), marker("b"));
    assert_eq!(h.server.running_upstreams(), 0);
    let left = processes_with_env(&format!("AICLI_RUN={}", marker("a")));
    assert!(left.is_empty(), "the upstream outlived its batch: {left:?}");

    // Not granted: the same answer as a tool that does not exist.
    let refused = h.json("other-echo");
    assert!(refused["rpc_error"].is_object(), "{refused}");
    assert_eq!(refused, h.json("other-unknown"));

    // The probe: everything each CLI was handed (argv, environment, the MCP config and
    // every other file named there) holds neither upstream's secret.
    for id in ["a", "b", "other"] {
        let probe = h.json(&format!("{id}-probe"));
        let all = probe.to_string();
        assert!(
            !all.contains(STDIO_SECRET),
            "{id}: the stdio upstream's secret reached the CLI"
        );
        assert!(
            !all.contains(HTTP_SECRET),
            "{id}: the HTTP upstream's token reached the CLI"
        );
        assert!(
            !probe["env"]
                .as_object()
                .unwrap()
                .contains_key("TRACKER_TOKEN"),
            "{id}: TRACKER_TOKEN is in the CLI's environment"
        );
        if id != "other" {
            // The probe did see the MCP config the CLI was given (aicli's URL and token).
            let files = probe["files"].as_object().unwrap();
            assert!(
                files
                    .iter()
                    .any(|(_, c)| c.as_str().is_some_and(|c| c.contains("mcpServers"))),
                "{id}: the MCP config was not probed: {:?}",
                files.keys().collect::<Vec<_>>()
            );
        }
    }
    // The records: each forwarded call, none with a secret in it.
    let calls = h.calls(&batch, "a");
    assert!(
        calls.iter().any(|c| c.tool == "tracker__whoami" && c.ok),
        "{calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_dies_is_restarted_once_then_reported_and_list_changed_reaches_only_granted_sessions()
 {
    let dir = tempfile::tempdir().unwrap();
    let task_dir = dir.path().join("batch/tasks/t");
    std::fs::create_dir_all(&task_dir).unwrap();
    let mut opts = McpServerOptions::default();
    opts.upstreams.insert(
        "dying".into(),
        serde_json::from_value(json!({"command": [python(), script("dying_stdio.py")]})).unwrap(),
    );
    opts.kill_grace = Duration::from_millis(300);
    let cancel = CancellationToken::new();
    let server = McpServer::start(opts, cancel.clone()).await.unwrap();
    let mint = |task: &str, tools: &[&str]| {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let token = server.mint(TaskContext {
            batch_id: "b1".into(),
            task_id: task.into(),
            workspace: dir.path().to_path_buf(),
            skills: vec![],
            credentials: vec![],
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            record_dir: Some(task_dir.clone()),
            attempt: 1,
            events,
        });
        (token, rx)
    };
    let (granted, mut events) = mint("t", &["dying"]);
    let (other, _other_events) = mint("u", &[]);
    let mut c = PyClient::connect(&server.url(), &granted).await;
    let mut o = PyClient::connect(&server.url(), &other).await;
    let names = |v: &Value| -> Vec<String> {
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().or(t["name"].as_str()).unwrap().to_owned())
            .collect()
    };
    assert!(
        names(c.hello()).contains(&"dying__pid".to_owned()),
        "{}",
        c.hello()
    );
    assert!(!names(o.hello()).iter().any(|t| t.starts_with("dying")));

    let pid = |r: &Value| -> u32 { r["text"][0].as_str().unwrap().parse().unwrap() };
    let first = c.call("dying__pid", json!({})).await;
    let p1 = pid(&first);
    let died = c.call("dying__die", json!({})).await;
    assert!(
        died["isError"] == true || died["error"].is_string(),
        "{died}"
    );
    // Restarted once: a new process answers (give the restart a moment).
    let mut p2 = None;
    for _ in 0..100 {
        let r = c.call("dying__pid", json!({})).await;
        if r["isError"] == false {
            p2 = Some(pid(&r));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let p2 = p2.expect("the upstream was not restarted");
    assert_ne!(p1, p2);
    assert!(
        !super::support::alive(p1),
        "the dead upstream's process is still there"
    );
    // Dies again: reported, its tools gone, and the granted session told so.
    let _ = c.call("dying__die", json!({})).await;
    let changed = c
        .send(json!({"op": "wait_list_changed", "seconds": 20}))
        .await;
    assert_eq!(changed["list_changed"], true, "{changed}");
    let listed = c.send(json!({"op": "list"})).await;
    assert!(
        !names(&listed).iter().any(|t| t.starts_with("dying")),
        "{listed}"
    );
    let after = c.call("dying__pid", json!({})).await;
    assert_eq!(after["isError"], true, "{after}");
    let m = after["text"][0].as_str().unwrap();
    assert!(
        m.contains("MCP upstream dying died") && m.contains("after its one restart"),
        "{m}"
    );
    assert!(m.contains("dying on request"), "its stderr is quoted: {m}");
    // The task's stream got the report.
    let mut reported = false;
    while let Ok(ev) = events.try_recv() {
        if let EventKind::Log { message, .. } = &ev.kind {
            reported |= message.contains("MCP upstream dying died");
        }
    }
    assert!(reported, "no report in the task's event stream");
    // The session not granted it was never told anything about it.
    let quiet = o
        .send(json!({"op": "wait_list_changed", "seconds": 1}))
        .await;
    assert_eq!(quiet["list_changed"], false, "{quiet}");
    assert!(!super::support::alive(p2));
    // The record has every call.
    std::fs::write(dir.path().join("batch/batch.json"), "{}").unwrap();
    let batch = aicli::RunStore::new(dir.path())
        .open_batch("batch")
        .unwrap();
    let calls = aicli::mcp::read_calls(&batch, "t");
    assert!(
        calls.iter().filter(|c| c.tool == "dying__pid").count() >= 3,
        "{calls:?}"
    );
    c.close().await;
    o.close().await;
    server.revoke(&granted);
    server.revoke(&other);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_message_bytes_never_reaches_the_agent_and_a_stdio_upstream_that_sent_it_is_restarted()
 {
    let http = http_upstream().await;
    // The everything server's tool list is ~7.7 KB: under the limit.
    let h = Harness::new(
        json!({"mcp_upstreams": {
            "everything": {"command": [node(), everything_js(), "stdio"],
                           "max_message_bytes": 16384},
            "tracker": {"url": http.url, "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"},
                        "max_message_bytes": 16384},
        }}),
        &[("TRACKER_TOKEN", HTTP_SECRET)],
    )
    .await;
    let big = "x".repeat(20_000);
    let mut a = Vec::new();
    for (tool, args, file) in [
        ("everything__echo", json!({"message": "before"}), "before"),
        ("everything__echo", json!({"message": big}), "big"),
        ("everything__echo", json!({"message": "after"}), "after"),
        (
            "tracker__repeat",
            json!({"s": "y", "n": 20_000}),
            "http-big",
        ),
        ("tracker__repeat", json!({"s": "y", "n": 10}), "http-small"),
    ] {
        a.extend(call(&h, tool, args, file));
    }
    let batch = h.run(vec![task("t", &["everything", "tracker"], a)]).await;
    assert_eq!(batch.tasks[0].status, SessionStatus::Succeeded, "{batch:?}");

    assert!(text(&h.json("before")).contains("before"));
    // Stdio: the line is not read past the limit; the call says why, nothing of it
    // reaches the agent, and the server is restarted (the next call works).
    let refused = h.json("big");
    assert_eq!(refused["isError"], true, "{refused}");
    let m = text(&refused);
    assert!(
        m.contains("over its limit of 16384 bytes (mcp_upstreams.everything.max_message_bytes)"),
        "{m}"
    );
    assert!(!refused.to_string().contains("xxxxxxxxxx"), "{refused}");
    assert!(text(&h.json("after")).contains("after"), "not restarted");
    // HTTP: the result of 20,000+ bytes is refused after it came, naming its size.
    let refused = h.json("http-big");
    assert_eq!(refused["isError"], true, "{refused}");
    let m = text(&refused);
    assert!(m.contains("sent a result of "), "{m}");
    assert!(
        m.contains("over its limit of 16384 bytes (mcp_upstreams.tracker.max_message_bytes)"),
        "{m}"
    );
    assert!(!refused.to_string().contains("yyyyyyyyyy"), "{refused}");
    assert_eq!(text(&h.json("http-small")), "y".repeat(10));
    // The record says the refused calls failed.
    let calls = h.calls(&batch, "t");
    assert!(
        calls.iter().any(|c| c.tool == "everything__echo" && !c.ok),
        "{calls:?}"
    );
}
