//! The Claude command: flags from the task and the config, the prompt on stdin.

use std::collections::BTreeMap;
use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::config::AiCliConfig;
use crate::provider::{BinaryLocation, CommandSpec, FileSpec, McpEndpoint};
use crate::task::{PermissionMode, TaskSpec};

const MCP_JSON: &str = r#"{"mcpServers":{"aicli":{"type":"http","url":"http://127.0.0.1:4000/mcp","headers":{"Authorization":"Bearer tok-123"}}}}"#;

fn config() -> ProviderConfig {
    AiCliConfig::builtin().unwrap().providers["claude"].clone()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn endpoint() -> McpEndpoint {
    McpEndpoint {
        name: "aicli".into(),
        url: "http://127.0.0.1:4000/mcp".into(),
        token: "tok-123".into(),
        tools: vec!["ask_user".into(), "log".into()],
    }
}

fn argv_for(
    p: &ClaudeProvider,
    task: &TaskSpec,
    is_root: bool,
    remaining: Option<f64>,
) -> Result<CommandSpec, ProviderError> {
    let binary = BinaryLocation::Path("/usr/bin/claude".into());
    let env = BTreeMap::new();
    let ctx = LaunchContext {
        env: &env,
        task,
        binary: &binary,
        workdir: Path::new("/w"),
        private_dir: Path::new("/p"),
        mcp: None,
        budget_remaining_usd: remaining,
        is_root,
        search_path: None,
        in_container: false,
    };
    p.command(&ctx)
}

#[test]
fn argv_with_every_flag_and_the_prompt_on_stdin() {
    let mut cfg = config();
    cfg.default_model = Some("opus".into());
    cfg.allowed_tools = strings(&["Read"]);
    cfg.disallowed_tools = strings(&["WebFetch"]);
    cfg.extra_args = strings(&["--fallback-model", "sonnet"]);
    cfg.env.insert("A".into(), "1".into());
    let p = ClaudeProvider::new("claude", cfg);
    let task = TaskSpec {
        prompt: "Fix the bug with the secret sk-123".into(),
        model: Some("sonnet".into()),
        append_system_prompt: Some("-be brief".into()),
        max_turns: Some(5),
        max_budget_usd: Some(2.0),
        allowed_tools: strings(&["Bash(git log:*)", "Read"]),
        disallowed_tools: strings(&["WebSearch"]),
        permission_mode: Some(PermissionMode::Plan),
        resume_session_id: Some("sess-1".into()),
        extra_args: strings(&["--add-dir", "/x"]),
        env: BTreeMap::from([("A".into(), "override".into()), ("B".into(), "2".into())]),
        cwd: Some("sub".into()),
        ..TaskSpec::default()
    };
    let binary = BinaryLocation::Path("/usr/bin/claude".into());
    let ep = endpoint();
    let env = BTreeMap::new();
    let ctx = LaunchContext {
        env: &env,
        task: &task,
        binary: &binary,
        // The engine joins the task's cwd into the workdir it hands over.
        workdir: Path::new("/w/sub"),
        private_dir: Path::new("/p"),
        mcp: Some(&ep),
        budget_remaining_usd: Some(0.5),
        is_root: true,
        search_path: None,
        in_container: false,
    };
    let c = p.command(&ctx).unwrap();
    assert_eq!(
        c,
        CommandSpec {
            program: "/usr/bin/claude".into(),
            args: strings(&[
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--model",
                "sonnet",
                "--max-turns",
                "5",
                "--max-budget-usd",
                "0.5",
                "--append-system-prompt=-be brief",
                "--permission-mode",
                "plan",
                "--resume",
                "sess-1",
                "--mcp-config",
                "/p/claude-mcp.json",
                "--strict-mcp-config",
                "--allowedTools",
                "Read",
                "Bash(git log:*)",
                "mcp__aicli__ask_user",
                "mcp__aicli__log",
                "--disallowedTools",
                "WebFetch",
                "WebSearch",
                "--fallback-model",
                "sonnet",
                "--add-dir",
                "/x",
            ]),
            env: BTreeMap::from([
                ("A".into(), "override".into()),
                ("B".into(), "2".into()),
                (
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                    "1".into()
                ),
            ]),
            env_remove: vec![],
            env_clear: false,
            stdin: Some("Fix the bug with the secret sk-123".into()),
            stdin_open: false,
            cwd: "/w/sub".into(),
            files: vec![FileSpec {
                path: "/p/claude-mcp.json".into(),
                contents: MCP_JSON.into(),
                mode: 0o600,
            }],
            links: vec![],
            notices: Vec::new(),
        }
    );
}

#[test]
fn a_prompt_is_never_an_argument_even_one_that_starts_with_a_dash() {
    let p = ClaudeProvider::new("claude", config());
    for prompt in ["--help me", "-p --verbose please", "plain words"] {
        let c = argv_for(&p, &TaskSpec::new(prompt), false, None).unwrap();
        assert!(!c.args.iter().any(|a| a.contains(prompt)), "{:?}", c.args);
        assert_eq!(c.stdin.as_deref(), Some(prompt));
    }
    let err = argv_for(&p, &TaskSpec::new("  "), false, None).unwrap_err();
    assert!(err.to_string().contains("non-empty prompt"), "{err}");
}

#[test]
fn permission_modes_map_to_flags_and_root_bypass_sets_is_sandbox() {
    let p = ClaudeProvider::new("claude", config());
    let flag = |mode, root| {
        let mut t = TaskSpec::new("x");
        t.permission_mode = Some(mode);
        let c = argv_for(&p, &t, root, None).unwrap();
        let at = c.args.iter().position(|a| a == "--permission-mode");
        (
            at.map(|i| c.args[i + 1].clone()),
            c.env.get("IS_SANDBOX").cloned(),
        )
    };
    assert_eq!(
        flag(PermissionMode::Plan, false),
        (Some("plan".into()), None)
    );
    assert_eq!(flag(PermissionMode::Default, false), (None, None));
    assert_eq!(
        flag(PermissionMode::AcceptEdits, false),
        (Some("acceptEdits".into()), None)
    );
    assert_eq!(
        flag(PermissionMode::Bypass, false),
        (Some("bypassPermissions".into()), None)
    );
    assert_eq!(
        flag(PermissionMode::Bypass, true),
        (Some("bypassPermissions".into()), Some("1".into()))
    );
}

#[test]
fn budget_is_the_smaller_of_the_task_and_what_remains() {
    let p = ClaudeProvider::new("claude", config());
    let budget = |task: Option<f64>, remaining| {
        let mut t = TaskSpec::new("x");
        t.max_budget_usd = task;
        argv_for(&p, &t, false, remaining).map(|c| {
            c.args
                .iter()
                .position(|a| a == "--max-budget-usd")
                .map(|i| c.args[i + 1].clone())
        })
    };
    assert_eq!(budget(Some(2.0), Some(0.5)).unwrap(), Some("0.5".into()));
    assert_eq!(budget(Some(0.25), Some(0.5)).unwrap(), Some("0.25".into()));
    assert_eq!(budget(None, Some(1.5)).unwrap(), Some("1.5".into()));
    assert_eq!(budget(None, None).unwrap(), None);
    // Nothing to spend is a budget stop (never a bad request).
    let spent = budget(Some(1.0), Some(0.0)).unwrap_err();
    assert_eq!(spent.kind(), crate::ErrorKind::Budget, "{spent}");
    assert!(
        spent.to_string().contains("no budget for this run"),
        "{spent}"
    );
    assert_eq!(
        budget(Some(0.0), None).unwrap_err().kind(),
        crate::ErrorKind::Budget
    );
}

#[test]
fn ide_lockfile_names_the_port_and_carries_the_token() {
    let p = ClaudeProvider::new("claude", config());
    let (name, contents) = p
        .ide_lockfile(&endpoint(), 4000, Path::new("/w"), 42)
        .unwrap();
    assert_eq!(name, "4000.lock");
    let v: serde_json::Value = serde_json::from_str(&contents).unwrap();
    assert_eq!(v["authToken"], "tok-123");
    assert_eq!(v["workspaceFolders"][0], "/w");
    assert_eq!(v["pid"], 42);
}

#[test]
fn auth_status_probe_outputs() {
    let p = ClaudeProvider::new("claude", config());
    assert_eq!(
        p.parse_auth_status(
            r#"{"loggedIn": true, "authMethod": "api_key"}"#,
            "",
            Some(0)
        ),
        AuthStatus::LoggedIn {
            method: Some("api_key".into())
        }
    );
    assert!(matches!(
        p.parse_auth_status(r#"{"loggedIn": false, "authMethod": "none"}"#, "", Some(1)),
        AuthStatus::LoggedOut { .. }
    ));
    assert!(matches!(
        p.parse_auth_status(
            "Not logged in. Run claude auth login to authenticate.",
            "",
            Some(1)
        ),
        AuthStatus::LoggedOut { .. }
    ));
    assert!(matches!(
        p.parse_auth_status("", "", None),
        AuthStatus::Unknown { .. }
    ));
}
