//! Task-scoped MCP tools from the config alone, as a user runs them: the `aicli` binary
//! with a config file holding `mcp_tools` and `mcp_upstreams`, `--mcp-tool` on `run` and
//! `serve`, grants in a tasks file, and the errors a wrong config or grant gets.
//!
//! `run` drives the real `claude`, `codex` and `gemini` against `--fake-api`, whose model
//! calls the granted tool; `serve` is driven by the Python `mcp` client.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::suite::mcp::PyClient;
use crate::suite::mcp_upstreams::{everything_js, processes_with_env};

/// What the `run_tests` tool prints first.
const MARKER: &str = "CLI-TOOL-OUTPUT-3e8a";

/// A `Cli` whose config also defines the `run_tests` command tool and the `everything`
/// upstream (server-everything on stdio).
fn with_tools() -> Cli {
    let cli = Cli::new();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&cli.config).unwrap()).unwrap();
    let node = which::which("node").expect("node on PATH");
    config["mcp_tools"] = json!({"run_tests": {
        "description": "Run the project's tests",
        "command": ["/bin/sh", "-c",
            format!("printf '{MARKER} args=%s in=%s' \"$(cat)\" \"$(basename \"$PWD\")\"")],
        "input_schema": {"type": "object", "properties": {"filter": {"type": "string"}}},
        "timeout_secs": 30,
    }});
    config["mcp_upstreams"] = json!({"everything": {
        "command": [node, everything_js(), "stdio"],
        "env": {"UPSTREAM_GREETING": "hello-from-the-upstream-config"},
    }});
    std::fs::write(&cli.config, config.to_string()).unwrap();
    cli
}

#[test]
fn run_grants_a_command_tool_with_mcp_tool_and_every_real_cli_calls_it() {
    for provider in ["claude", "codex", "gemini"] {
        let cli = with_tools();
        let out = cli.run(&[
            "run",
            "Run the tests",
            "--provider",
            provider,
            "--fake-api=mcp:aicli/run_tests",
            "--mcp-tool",
            "run_tests",
            "--json",
        ]);
        assert_code(&out, 0, provider);
        let lines = json_lines(&out);
        let r = lines.last().unwrap();
        assert_eq!(r["status"], "succeeded", "{provider}: {r}");
        let response = r["response"].as_str().unwrap_or_default();
        assert!(
            response.contains(&format!("{MARKER} args={{}} in=run-")),
            "{provider}: the tool's output did not come back: {response}"
        );
        // `runs show` lists the call.
        let batch = only_batch(cli.repo.path());
        let shown = stdout(&cli.run(&["runs", "show", &batch]));
        let line = shown
            .lines()
            .find(|l| l.trim_start().starts_with("mcp run_tests"))
            .unwrap_or_else(|| panic!("{provider}: no call in:\n{shown}"));
        assert!(
            line.contains("exit 0 ok") && line.contains(MARKER),
            "{line}"
        );
    }
}

#[test]
fn a_run_not_granted_the_tool_does_not_get_it() {
    let cli = with_tools();
    let out = cli.run(&[
        "run",
        "Run the tests",
        "--provider",
        "codex",
        "--fake-api=mcp:aicli/run_tests",
        "--json",
    ]);
    let batch = only_batch(cli.repo.path());
    let shown = json_lines(&cli.run(&["runs", "show", &batch, "--json"]));
    let calls = shown[0]["mcp_calls"].as_object().unwrap();
    let tools: Vec<&Value> = calls.values().flat_map(|c| c.as_array().unwrap()).collect();
    // The model asked for a tool the CLI was never offered: either the CLI refused it
    // itself, or aicli answered as for an unknown tool. Nothing ran.
    assert!(
        tools
            .iter()
            .all(|c| c["tool"] != "run_tests" || c["ok"] == false),
        "{tools:?}"
    );
    assert!(!stdout(&out).contains(MARKER), "{}", stdout(&out));
}

#[test]
fn wrong_grants_and_tool_configs_are_usage_errors_naming_where() {
    let cli = with_tools();
    let out = cli.run(&["run", "x", "--mcp-tool", "nope"]);
    assert_code(&out, 2, "an unknown --mcp-tool");
    assert!(
        stderr(&out).contains(
            "--mcp-tool: unknown MCP tool \"nope\": not in mcp_tools or mcp_upstreams (run_tests, everything)"
        ),
        "{}",
        stderr(&out)
    );
    let out = cli.run(&["serve", "--mcp-tool", "nope"]);
    assert_code(&out, 2, "serve with an unknown --mcp-tool");
    assert!(stderr(&out).contains("--mcp-tool: unknown MCP tool \"nope\""));

    let tasks = cli.file(
        "tasks.json",
        &json!([{"prompt": "a", "mcp_tools": ["run_tests"]},
                {"prompt": "b", "mcp_tools": ["everything", "deploy"]}])
        .to_string(),
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap()]);
    assert_code(&out, 2, "a tasks file granting an unknown tool");
    let want = format!(
        "{}: at tasks[1].mcp_tools[1]: unknown MCP tool \"deploy\"",
        tasks.display()
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    assert!(no_batches(cli.repo.path()), "a batch was started");

    // A config whose tool takes a built-in's name, lacks a command, or has a bad schema.
    for (tool, path, what) in [
        (
            json!({"getCredential": {"command": ["/bin/true"]}}),
            "mcp_tools.getCredential",
            "aicli's own MCP tools",
        ),
        (json!({"t": {}}), "mcp_tools.t.command", "required"),
        (
            json!({"t": {"command": ["/bin/true"], "input_schema": {"type": "array"}}}),
            "mcp_tools.t.input_schema",
            "\"type\": \"object\"",
        ),
    ] {
        let cfg = cli.file("bad.json", &json!({"mcp_tools": tool}).to_string());
        let out = std::process::Command::new(aicli_bin())
            .arg("--config")
            .arg(&cfg)
            .args(["run", "x"])
            .current_dir(cli.repo.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_code(&out, 2, path);
        let err = stderr(&out);
        assert!(
            err.contains(&cfg.display().to_string()) && err.contains(path) && err.contains(what),
            "{path}: {err}"
        );
    }
}

/// `aicli serve` with its printed URL and token, stopped (SIGINT) on drop.
struct Serve {
    child: std::process::Child,
    url: String,
    token: String,
    tools: String,
}

impl Serve {
    fn start(cli: &Cli, args: &[&str]) -> Serve {
        let mut child = cli
            .command(&[&["serve"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut field = |name: &str| -> String {
            let line = lines.next().unwrap().unwrap();
            line.strip_prefix(name)
                .unwrap_or_else(|| panic!("expected {name:?}, got {line:?}"))
                .trim()
                .to_owned()
        };
        let url = field("aicli MCP server:");
        let token = field("bearer token:");
        let _health = field("health:");
        let tools = field("tools:");
        Serve {
            child,
            url,
            token,
            tools,
        }
    }

    /// SIGINT, and its exit code.
    fn stop(mut self) -> Option<i32> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        self.child.wait().unwrap().code()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_grants_its_token_the_mcp_tools_named_and_stops_the_upstream_with_it() {
    let cli = with_tools();
    let s = Serve::start(
        &cli,
        &["--mcp-tool", "run_tests", "--mcp-tool", "everything"],
    );
    assert!(
        s.tools.contains("run_tests") && s.tools.contains("everything__echo"),
        "{}",
        s.tools
    );
    let mut c = PyClient::connect(&s.url, &s.token).await;
    let names: Vec<String> = c.hello()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().or(t["name"].as_str()).unwrap().to_owned())
        .collect();
    assert!(names.contains(&"run_tests".to_owned()), "{names:?}");
    assert!(
        names.contains(&"everything__get-env".to_owned()),
        "{names:?}"
    );
    let r = c.call("run_tests", json!({"filter": "parser"})).await;
    assert_eq!(r["isError"], false, "{r}");
    let text = r["text"][0].as_str().unwrap();
    let repo_name = cli.repo.path().file_name().unwrap().to_string_lossy();
    assert_eq!(
        text,
        format!("{MARKER} args={{\"filter\":\"parser\"}} in={repo_name}")
    );
    let env = c.call("everything__get-env", json!({})).await;
    let env: Value = serde_json::from_str(env["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(env["UPSTREAM_GREETING"], "hello-from-the-upstream-config");
    let marker = format!("AICLI_RUN={}", env["AICLI_RUN"].as_str().unwrap());
    assert!(
        !processes_with_env(&marker).is_empty(),
        "no upstream process"
    );
    c.close().await;
    assert_eq!(s.stop(), Some(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !processes_with_env(&marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the upstream outlived aicli serve: {:?}",
            processes_with_env(&marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
