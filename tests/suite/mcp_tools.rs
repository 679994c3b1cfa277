//! Command-backed MCP tools (`mcp_tools` in the config) through the whole engine: the
//! stand-in CLI (`aicli-fake-cli`, driven by the real Claude adapter, so its argv and
//! `--mcp-config` are Claude's) lists and calls tools on aicli's real MCP server with its
//! task's token, in real worktrees, with real run records.
//!
//! Proven here: a granted tool is listed and runs with its arguments (on stdin, in the
//! worktree, with only the environment its config gives it), and Claude's allowlist names
//! it; a task that was not granted it neither sees it nor can call it (the same answer
//! as an unknown tool); arguments that miss the schema run nothing; a tool that hangs is
//! killed at its timeout, and one still running when its task ends is killed with it,
//! leaving no process; a flood of output is capped; a failure carries its stderr; each
//! call is in the run record and `aicli runs show`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aicli::mcp::{McpServer, McpServerOptions, TOOL_NAMES};
use aicli::providers::{AiCliConfig, ProviderRegistry, SessionStatus, TaskSpec};
use aicli::{BatchOptions, BatchResult, Engine};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::support::{assert_all_gone, collect_events, fake_cli, fixture, git_repo};

/// In aicli's environment, never given to a tool (no `env_passthrough` names it).
pub const LEAKED: (&str, &str) = ("AICLI_TEST_LEAKED_SECRET", "leaked-value-0f3c9a");

/// A batch's harness: a repository, aicli's MCP server with `tools` (and `upstreams`)
/// configured, and an engine whose `fake` provider is the stand-in CLI behind the real
/// Claude adapter.
pub struct Harness {
    pub repo: tempfile::TempDir,
    pub dir: tempfile::TempDir,
    pub engine: Engine,
    pub server: Arc<McpServer>,
    _stop: tokio_util::sync::DropGuard,
}

impl Harness {
    /// `config` is merged over the defaults as a user file (so it is validated).
    pub async fn new(config: Value, extra_env: &[(&str, &str)]) -> Harness {
        let repo = git_repo();
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture("claude", "text");
        let mut user = json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "adapter": "claude",
                "binary_path": fake_cli(),
                "extra_args": ["--replay", fx.with_extension("ndjson").display().to_string()],
            }},
            "engine": {"kill_grace_ms": 300, "retry": {"max_attempts": 1}},
        });
        aicli::providers::config::merge_patch(&mut user, &config);
        let config = AiCliConfig::from_user_json(&user.to_string(), "test config")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut env: BTreeMap<String, String> = std::env::vars().collect();
        env.insert(LEAKED.0.into(), LEAKED.1.into());
        for (k, v) in extra_env {
            env.insert((*k).into(), (*v).into());
        }
        let mut opts = McpServerOptions::from_config(&config, repo.path());
        opts.env = env.clone();
        let cancel = CancellationToken::new();
        let server = Arc::new(McpServer::start(opts, cancel.clone()).await.unwrap());
        let registry = ProviderRegistry::from_config(&config).unwrap();
        let engine = Engine::new(config, registry)
            .with_env(env)
            .with_auth_precheck(false)
            .with_agent_server(server.clone());
        Harness {
            repo,
            dir,
            engine,
            server,
            _stop: cancel.drop_guard(),
        }
    }

    /// A path in the test's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `path(name)` as a string, for argv.
    pub fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// Runs `tasks` as one batch (60 s at most).
    pub async fn run(&self, tasks: Vec<TaskSpec>) -> BatchResult {
        let (tx, collector) = collect_events();
        let opts = BatchOptions::new(self.repo.path());
        let run = self
            .engine
            .run_batch(tasks, opts, tx, CancellationToken::new());
        let batch = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("the batch ends within 60 s")
            .unwrap_or_else(|e| panic!("run_batch: {e}"));
        let _ = collector.await;
        batch
    }

    /// The MCP tool calls recorded for a task.
    pub fn calls(&self, batch: &BatchResult, task: &str) -> Vec<aicli::mcp::McpCallRecord> {
        let b = self
            .engine
            .store(self.repo.path(), None)
            .open_batch(&batch.batch_id)
            .unwrap();
        aicli::mcp::read_calls(&b, task)
    }

    /// A JSON file the stand-in CLI wrote.
    pub fn json(&self, name: &str) -> Value {
        let path = self.path(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The names in a `--mcp-list` file.
    pub fn listed(&self, name: &str) -> Vec<String> {
        let v = self.json(name);
        v.as_array()
            .unwrap_or_else(|| panic!("not a tool list: {v}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The argv the stand-in CLI recorded (`--record-argv`).
    pub fn argv(&self, name: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.path(name)).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    }
}

/// A task running the stand-in CLI with `args`, granted `tools`.
pub fn task(id: &str, tools: &[&str], args: Vec<String>) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        prompt: format!("task {id}"),
        mcp_tools: tools.iter().map(|s| (*s).to_owned()).collect(),
        extra_args: args,
        ..TaskSpec::default()
    }
}

/// `--mcp-call TOOL ARGS FILE` as argv.
pub fn call(h: &Harness, tool: &str, args: Value, file: &str) -> Vec<String> {
    vec![
        "--mcp-call".into(),
        tool.into(),
        args.to_string(),
        h.p(file),
    ]
}

/// The text blocks of a tool result, joined.
pub fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {result}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `--allowedTools` values in Claude's argv (up to the next option).
pub fn allowed_tools(argv: &[String]) -> Vec<String> {
    let i = argv
        .iter()
        .position(|a| a == "--allowedTools")
        .unwrap_or_else(|| panic!("no --allowedTools in {argv:?}"));
    argv[i + 1..]
        .iter()
        .take_while(|a| !a.starts_with("--"))
        .cloned()
        .collect()
}

fn echo_tool(ran: &Path) -> Value {
    json!({
        "description": "Echoes its arguments, working directory and environment",
        "command": ["/bin/sh", "-c",
            "echo ran >> \"$RAN_FILE\"; cat; echo; echo \"cwd=$(pwd)\"; echo \"secret=${TOOL_SECRET:-unset}\"; echo \"leaked=${AICLI_TEST_LEAKED_SECRET:-unset}\"; echo \"task=$AICLI_TASK_ID\"; env | cut -d= -f1 | sort | tr '\\n' ' '"],
        "input_schema": {"type": "object",
            "properties": {"filter": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
            "required": ["filter"], "additionalProperties": false},
        "env": {"TOOL_SECRET": "from-the-config", "RAN_FILE": ran},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_command_tool_is_listed_and_runs_and_an_ungranted_task_neither_sees_nor_calls_it()
{
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let h = Harness::new(json!({"mcp_tools": {"echo_args": echo_tool(&ran)}}), &[]).await;
    let args = json!({"filter": "parser", "n": 2});
    let mut granted_args = vec![
        "--record-argv".into(),
        h.p("granted-argv"),
        "--mcp-list".into(),
        h.p("granted-list"),
    ];
    granted_args.extend(call(&h, "echo_args", args.clone(), "granted-call"));
    let mut other_args = vec![
        "--record-argv".into(),
        h.p("other-argv"),
        "--mcp-list".into(),
        h.p("other-list"),
    ];
    other_args.extend(call(&h, "echo_args", args.clone(), "other-call"));
    other_args.extend(call(&h, "no_such_tool", args.clone(), "other-unknown"));
    let batch = h
        .run(vec![
            task("granted", &["echo_args"], granted_args),
            task("other", &[], other_args),
        ])
        .await;
    for r in &batch.tasks {
        assert_eq!(r.status, SessionStatus::Succeeded, "{r:?}");
    }

    // Listed for the granted task, after the built-ins; not at all for the other.
    let mut want: Vec<String> = TOOL_NAMES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(h.listed("other-list"), want);
    want.push("echo_args".into());
    assert_eq!(h.listed("granted-list"), want);
    let listed = h.json("granted-list");
    let tool = listed.as_array().unwrap().last().unwrap();
    assert_eq!(tool["inputSchema"]["required"], json!(["filter"]));
    assert_eq!(
        tool["description"],
        "Echoes its arguments, working directory and environment"
    );

    // It ran with its arguments on stdin, in the task's worktree, with the config's env
    // and not aicli's secret.
    let res = h.json("granted-call");
    assert_eq!(res["isError"], false, "{res}");
    let out = text(&res);
    let first = out.lines().next().unwrap();
    assert_eq!(serde_json::from_str::<Value>(first).unwrap(), args);
    let cwd = out
        .lines()
        .find_map(|l| l.strip_prefix("cwd="))
        .unwrap()
        .to_owned();
    assert!(
        cwd.contains(".aicli/worktrees/") && cwd.ends_with("granted"),
        "{cwd}"
    );
    assert!(out.contains("secret=from-the-config"), "{out}");
    assert!(out.contains("leaked=unset"), "{out}");
    assert!(out.contains("task=granted"), "{out}");
    assert!(!out.contains(LEAKED.1), "{out}");

    // Not granted: the same answer as a tool that does not exist, and nothing ran.
    let refused = h.json("other-call");
    let unknown = h.json("other-unknown");
    assert!(refused["rpc_error"].is_object(), "{refused}");
    assert_eq!(refused, unknown);
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");

    // Claude's allowlist names the granted tool, and only for the granted task.
    let allowed = allowed_tools(&h.argv("granted-argv"));
    assert!(
        allowed.contains(&"mcp__aicli__echo_args".to_owned()),
        "{allowed:?}"
    );
    assert!(allowed.contains(&"mcp__aicli__getWorkspaceFiles".to_owned()));
    let other = allowed_tools(&h.argv("other-argv"));
    assert!(!other.iter().any(|t| t.contains("echo_args")), "{other:?}");

    // The run record logs the call (tool, duration, exit, the start of its result) ...
    let calls = h.calls(&batch, "granted");
    let c = calls
        .iter()
        .find(|c| c.tool == "echo_args")
        .unwrap_or_else(|| panic!("{calls:?}"));
    assert!(c.ok && c.exit_code == Some(0) && c.attempt == 1, "{c:?}");
    assert!(c.result.contains("\"parser\""), "{c:?}");
    let other_calls = h.calls(&batch, "other");
    assert!(
        other_calls.iter().any(|c| c.tool == "echo_args" && !c.ok),
        "{other_calls:?}"
    );
    // ... and `aicli runs show` lists it.
    let show = std::process::Command::new(env!("CARGO_BIN_EXE_aicli"))
        .args(["runs", "show", &batch.batch_id, "--repo"])
        .arg(h.repo.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{shown}");
    let line = shown
        .lines()
        .find(|l| l.trim_start().starts_with("mcp echo_args"))
        .unwrap_or_else(|| panic!("no call in:\n{shown}"));
    assert!(line.contains("exit 0 ok"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_miss_the_schema_get_a_json_rpc_error_and_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let h = Harness::new(
        json!({"mcp_tools": {"echo_args": echo_tool(&ran)},
               "engine": {"mcp": {"limits": {"tool_argument_bytes": 1000}}}}),
        &[],
    )
    .await;
    let mut args = Vec::new();
    args.extend(call(&h, "echo_args", json!({"filter": 3}), "wrong-type"));
    // Too large (over mcp.limits.tool_argument_bytes), though the schema would take it.
    args.extend(call(
        &h,
        "echo_args",
        json!({"filter": "y".repeat(1000)}),
        "too-large",
    ));
    // The refusal quotes a refused value only in part.
    args.extend(call(
        &h,
        "echo_args",
        json!({"filter": "a", "n": "z".repeat(900)}),
        "long-value",
    ));
    args.extend(call(&h, "echo_args", json!({}), "missing"));
    args.extend(call(
        &h,
        "echo_args",
        json!({"filter": "a", "rm": "-rf"}),
        "extra",
    ));
    args.extend(call(
        &h,
        "echo_args",
        json!({"filter": "a", "n": 0}),
        "too-small",
    ));
    let batch = h.run(vec![task("t", &["echo_args"], args)]).await;
    assert_eq!(batch.tasks[0].status, SessionStatus::Succeeded);
    for (file, at) in [
        ("wrong-type", "/filter"),
        ("missing", "filter"),
        ("extra", "rm"),
        ("too-small", "/n"),
        ("too-large", "mcp.limits.tool_argument_bytes"),
        ("long-value", "/n"),
    ] {
        let e = &h.json(file)["rpc_error"];
        assert_eq!(e["code"], -32602, "{file}: {e}");
        let m = e["message"].as_str().unwrap();
        assert!(
            m.starts_with("invalid arguments for tool echo_args: "),
            "{file}: {m}"
        );
        assert!(m.contains(at), "{file}: {m}");
        assert_eq!(e["data"]["tool"], "echo_args", "{e}");
        assert!(
            e.to_string().len() < 1500,
            "{file}: the refusal echoes the arguments: {e}"
        );
    }
    let large = h.json("too-large")["rpc_error"]["message"].clone();
    assert_eq!(
        large,
        "invalid arguments for tool echo_args: 1013 bytes of JSON; at most 1000 are accepted (mcp.limits.tool_argument_bytes)"
    );
    assert!(!ran.exists(), "the tool ran for a refused call");
    let calls = h.calls(&batch, "t");
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert!(
        calls.iter().all(|c| !c.ok && c.exit_code.is_none()),
        "{calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tool_is_killed_at_its_timeout_and_one_outliving_its_task_with_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let pids = |n: &str| dir.path().join(n).display().to_string();
    // The stand-in CLI as the tool: grandchildren (one in its own session), SIGTERM
    // ignored, then it hangs.
    let hang = |pid_file: String, timeout: u64| {
        json!({
            "command": [fake_cli(), "--spawn-grandchildren", "2", "--ignore-sigterm",
                        "--pid-file", pid_file, "--hang"],
            "timeout_secs": timeout,
        })
    };
    let h = Harness::new(
        json!({"mcp_tools": {
            "hang": hang(pids("hang.pids"), 1),
            "slow": hang(pids("slow.pids"), 600),
        }}),
        &[],
    )
    .await;
    let mut long = task(
        "outlived",
        &["slow"],
        call(&h, "slow", json!({}), "slow-call"),
    );
    long.timeout_secs = Some(3);
    let started = std::time::Instant::now();
    let batch = h
        .run(vec![
            task("hangs", &["hang"], call(&h, "hang", json!({}), "hang-call")),
            long,
        ])
        .await;
    // Killed at its timeout: the call answered with an error saying so.
    let res = h.json("hang-call");
    assert_eq!(res["isError"], true, "{res}");
    assert!(
        text(&res).contains("was killed after 1 s (mcp_tools.hang.timeout_secs)"),
        "{res}"
    );
    assert_all_gone(&dir.path().join("hang.pids"), Duration::from_secs(5)).await;
    let calls = h.calls(&batch, "hangs");
    let c = &calls[0];
    assert!(!c.ok && c.exit_code.is_none(), "{c:?}");
    assert!(
        (1000..10_000).contains(&c.duration_ms),
        "killed after {} ms",
        c.duration_ms
    );
    // The task that ended (its timeout) while its tool ran took the tool with it.
    let outlived = batch
        .tasks
        .iter()
        .find(|t| t.task_id == "outlived")
        .unwrap();
    assert_eq!(outlived.status, SessionStatus::Failed, "{outlived:?}");
    assert_all_gone(&dir.path().join("slow.pids"), Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tool_is_capped_and_a_failing_one_reports_its_stderr() {
    let h = Harness::new(
        json!({"mcp_tools": {
            "flood": {"command": ["/bin/sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x"],
                      "max_output_bytes": 1000},
            "fails": {"command": ["/bin/sh", "-c", "echo partial; echo 'cannot reach the database' >&2; exit 3"]},
        }}),
        &[],
    )
    .await;
    let mut args = call(&h, "flood", json!({}), "flood");
    args.extend(call(&h, "fails", json!({}), "fails"));
    let batch = h.run(vec![task("t", &["flood", "fails"], args)]).await;
    assert_eq!(batch.tasks[0].status, SessionStatus::Succeeded);
    let flood = h.json("flood");
    assert_eq!(flood["isError"], false, "{flood}");
    let out = text(&flood);
    assert!(out.starts_with(&"x".repeat(1000)), "{}", &out[..100]);
    assert!(!out.starts_with(&"x".repeat(1001)));
    assert!(
        out.ends_with(
            "[aicli: output cut at 1000 bytes (mcp_tools.flood.max_output_bytes); the tool printed 20000000 bytes]"
        ),
        "{}",
        &out[1000..]
    );
    let fails = h.json("fails");
    assert_eq!(fails["isError"], true, "{fails}");
    let out = text(&fails);
    assert!(out.contains("tool fails failed (exit code 3)"), "{out}");
    assert!(out.contains("cannot reach the database"), "{out}");
    assert!(out.contains("partial"), "{out}");
    let calls = h.calls(&batch, "t");
    let f = calls.iter().find(|c| c.tool == "fails").unwrap();
    assert_eq!((f.ok, f.exit_code), (false, Some(3)));
    let fl = calls.iter().find(|c| c.tool == "flood").unwrap();
    assert!(fl.ok && fl.truncated && fl.result.len() <= 500, "{fl:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_wide_grants_reach_every_task_and_an_unknown_grant_is_refused_before_anything_runs()
{
    let h = Harness::new(
        json!({"mcp_tools": {
            "everyone": {"command": ["/bin/sh", "-c", "echo for all"]},
            "some": {"command": ["/bin/sh", "-c", "echo for some"]},
        }, "engine": {"mcp_tools": ["everyone"]}}),
        &[],
    )
    .await;
    let args = vec!["--mcp-list".to_owned(), h.p("list")];
    let batch = h.run(vec![task("t", &[], args)]).await;
    assert_eq!(batch.tasks[0].status, SessionStatus::Succeeded);
    let listed = h.listed("list");
    assert!(listed.contains(&"everyone".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"some".to_owned()), "{listed:?}");
    let err = h
        .engine
        .run_batch(
            vec![task("bad", &["some", "nope"], vec![])],
            BatchOptions::new(h.repo.path()),
            collect_events().0,
            CancellationToken::new(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "task 1 (bad): mcp_tools[1]: unknown MCP tool \"nope\": not in mcp_tools or mcp_upstreams (everyone, some)"
    );
}
