//! Task-scoped MCP tools for a CLI in a container: the stand-in CLI, in its container on
//! the local engine, reaches aicli's server over the bridge with its own token and calls
//! a command-backed tool (which runs on aicli's side, in the task's worktree, the one
//! bind-mounted into the container) and an upstream's tool (server-everything on stdio,
//! started by aicli); neither the tool's nor the upstream's secret is in anything the
//! container was given.

use std::sync::Arc;

use aicli::BatchOptions;
use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::{SessionStatus, TaskSpec};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::support::{self, assert_no_container, docker_config, fake_provider, local_host};
use crate::suite::mcp_upstreams::everything_js;
use crate::suite::support::collect_events;

/// In the command tool's `env` only.
const TOOL_SECRET: &str = "container-tool-secret-71ad";
/// In the upstream's `env` only.
const UPSTREAM_SECRET: &str = "container-upstream-secret-2f9e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_in_a_container_calls_its_granted_tools_and_never_holds_their_secrets() {
    let Some(docker) = support::local_engine("a_cli_in_a_container_calls_its_granted_tools").await
    else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let repo = crate::suite::support::git_repo();
    let node = which::which("node").expect("node on PATH");
    let mut config = docker_config(vec![local_host()], &image);
    config.mcp_tools.insert(
        "run_tests".into(),
        serde_json::from_value(json!({
            "command": ["/bin/sh", "-c",
                "printf 'args=%s in=%s secret=%s' \"$(cat)\" \"$PWD\" \"${TOOL_SECRET:-unset}\""],
            "input_schema": {"type": "object", "properties": {"filter": {"type": "string"}}},
            "env": {"TOOL_SECRET": TOOL_SECRET},
        }))
        .unwrap(),
    );
    config.mcp_upstreams.insert(
        "everything".into(),
        serde_json::from_value(json!({
            "command": [node, everything_js(), "stdio"],
            "env": {"UPSTREAM_SECRET": UPSTREAM_SECRET},
        }))
        .unwrap(),
    );
    let mut opts = McpServerOptions::from_config(&config, repo.path());
    opts.allowed_hosts
        .extend(aicli::runner::docker::container_hosts(
            &config.engine.docker,
        ));
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    let server = Arc::new(McpServer::start(opts, cancel).await.expect("server"));
    let engine =
        support::engine(config, fake_provider("claude", "text")).with_agent_server(server.clone());
    let args = |v: &[&str]| -> Vec<String> { v.iter().map(|s| (*s).to_owned()).collect() };
    let task = TaskSpec {
        id: "tools".into(),
        prompt: "call the tools".into(),
        mcp_tools: vec!["run_tests".into(), "everything".into()],
        extra_args: args(&[
            "--mcp-list",
            "/workspace/.list.json",
            "--mcp-call",
            "run_tests",
            r#"{"filter":"parser"}"#,
            "/workspace/.run-tests.json",
            "--mcp-call",
            "everything__echo",
            r#"{"message":"hello from a container"}"#,
            "/workspace/.echo.json",
            "--probe",
            "/workspace/.probe.json",
        ]),
        ..TaskSpec::default()
    };
    let mut bo = BatchOptions::new(repo.path());
    bo.provider = Some("fake".into());
    let (tx, events) = collect_events();
    let batch = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        engine.run_batch(vec![task], bo, tx, CancellationToken::new()),
    )
    .await
    .expect("the batch ends")
    .expect("batch");
    let _ = events.await;
    let r = &batch.tasks[0];
    assert_eq!(r.status, SessionStatus::Succeeded, "{r:#?}");
    let wt = r
        .worktree
        .clone()
        .expect("the worktree holds the calls' answers");
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(wt.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
    };
    let listed: Vec<String> = read(".list.json")
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(listed.contains(&"run_tests".to_owned()), "{listed:?}");
    assert!(
        listed.contains(&"everything__echo".to_owned()),
        "{listed:?}"
    );
    // The command ran on aicli's side, in the worktree the container has at /workspace.
    let run = read(".run-tests.json");
    assert_eq!(run["isError"], false, "{run}");
    let text = run["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        text,
        format!(
            "args={{\"filter\":\"parser\"}} in={} secret={TOOL_SECRET}",
            wt.display()
        )
    );
    let echo = read(".echo.json");
    assert!(
        echo.to_string().contains("hello from a container"),
        "{echo}"
    );
    // What the container was given holds neither secret.
    let probe = read(".probe.json").to_string();
    assert!(
        !probe.contains(TOOL_SECRET),
        "the tool's secret reached the CLI"
    );
    assert!(
        !probe.contains(UPSTREAM_SECRET),
        "the upstream's secret reached the CLI"
    );
    let calls = server.calls_for("tools");
    let ok: Vec<(&str, bool)> = calls.iter().map(|c| (c.tool.as_str(), c.ok)).collect();
    assert_eq!(
        ok,
        [("run_tests", true), ("everything__echo", true)],
        "{calls:?}"
    );
    assert_eq!(
        server.running_upstreams(),
        0,
        "the upstream outlived its batch"
    );
    assert_no_container(&docker, &batch.batch_id).await;
}
