//! The Codex command and decoder.

use std::collections::BTreeMap;
use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::config::AiCliConfig;
use crate::decode::Line;
use crate::error::ErrorKind;
use crate::event::EventKind;
use crate::provider::{BinaryLocation, McpEndpoint};
use crate::replay;
use crate::task::{PermissionMode, TaskSpec};

fn provider() -> CodexProvider {
    CodexProvider::new(
        "codex",
        AiCliConfig::builtin().unwrap().providers["codex"].clone(),
    )
}

fn command(task: &TaskSpec, mcp: Option<&McpEndpoint>) -> CommandSpec {
    let binary = BinaryLocation::Path("/bin/codex".into());
    let env = BTreeMap::new();
    let ctx = LaunchContext {
        env: &env,
        task,
        binary: &binary,
        workdir: Path::new("/w"),
        private_dir: Path::new("/p"),
        mcp,
        budget_remaining_usd: None,
        is_root: false,
        search_path: None,
        in_container: false,
    };
    provider().command(&ctx).unwrap()
}

#[test]
fn the_prompt_goes_on_stdin_for_a_new_and_a_resumed_thread() {
    let mut t = TaskSpec::new("--secret prompt");
    t.permission_mode = Some(PermissionMode::AcceptEdits);
    let c = command(&t, None);
    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    assert_eq!(
        args,
        [
            "exec",
            "-C",
            "/w",
            "--sandbox",
            "workspace-write",
            "--json",
            "--skip-git-repo-check",
            "--",
            "-"
        ]
    );
    assert_eq!(c.stdin.as_deref(), Some("--secret prompt"));
    assert!(!c.args.iter().any(|a| a.contains("secret")));
    t.resume_session_id = Some("thread-1".into());
    let c = command(&t, None);
    let n = c.args.len();
    assert_eq!(&c.args[n - 3..], ["--", "thread-1", "-"]);
    let at = |a: &str| c.args.iter().position(|x| x == a).unwrap();
    assert!(at("--sandbox") < at("resume"), "{:?}", c.args);
}

#[test]
fn the_mcp_server_is_a_config_override_and_its_token_an_env_var() {
    let ep = McpEndpoint {
        name: "aicli".into(),
        url: "http://127.0.0.1:4000/mcp".into(),
        token: "tok-123".into(),
        tools: vec![],
    };
    let c = command(&TaskSpec::new("x"), Some(&ep));
    assert!(c.args.contains(&"mcp_servers.aicli={url=\"http://127.0.0.1:4000/mcp\", bearer_token_env_var=\"AICLI_MCP_TOKEN\", default_tools_approval_mode=\"approve\"}".to_owned()));
    assert_eq!(
        c.env.get(MCP_TOKEN_ENV).map(String::as_str),
        Some("tok-123")
    );
    assert!(!c.args.iter().any(|a| a.contains("tok-123")));
}

#[test]
fn retry_notices_and_errors_are_classified() {
    let mut d = provider().decoder(&ParseContext::default());
    let evs = d.line(Line::from(r#"{"type":"error","message":"Reconnecting... 2/5 (unexpected status 401 Unauthorized: nope)"}"#));
    let EventKind::Retry {
        attempt,
        max_retries,
        error_kind,
        http_status,
        ..
    } = &evs[0].kind
    else {
        panic!("{evs:?}")
    };
    assert_eq!(
        (*attempt, *max_retries, *error_kind, *http_status),
        (Some(2), Some(5), ErrorKind::Auth, Some(401))
    );
    let evs = d.line(Line::from(r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}"#));
    assert!(matches!(
        &evs[0].kind,
        EventKind::Final {
            success: false,
            error_kind: Some(ErrorKind::RateLimit),
            ..
        }
    ));
    assert!(d.finished());
    let r = d.finish("", ExitStatus::Code(1));
    assert_eq!(r.error_kind, Some(ErrorKind::RateLimit));
}

#[test]
fn a_run_cut_off_while_reconnecting_is_network_and_says_nothing_of_an_unknown_exit() {
    let stdout = br#"{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion: error sending request)"}
"#;
    let ctx = ParseContext::default();
    let r = replay::replay(&provider(), stdout, "", ExitStatus::Unknown, &ctx);
    assert_eq!(r.error_kind, Some(ErrorKind::Network));
    let m = r.error.unwrap();
    assert!(m.contains("still retrying after 1 retry notices"), "{m}");
    assert!(!m.contains("signal") && !m.contains("exit code"), "{m}");
    let r = replay::replay(&provider(), stdout, "", ExitStatus::Signal, &ctx);
    assert!(r.error.unwrap().contains("killed by a signal"));
}

#[test]
fn usage_is_per_run_on_resume_and_live() {
    let stdout = br#"{"type":"thread.started","thread_id":"t1"}
{"type":"turn.completed","usage":{"input_tokens":240,"cached_input_tokens":60,"output_tokens":18}}
"#;
    let prior = crate::result::SessionTotals {
        usage: crate::usage::CanonicalUsage {
            input_tokens: 90,
            cache_read: 30,
            output_tokens: 9,
            ..Default::default()
        },
        cost_usd: None,
    };
    let ctx = ParseContext {
        model: Some("gpt-5.5".into()),
        prior: Some(prior),
        answered: None,
    };
    let (events, r) = replay::replay_events(&provider(), stdout, "", ExitStatus::Code(0), &ctx);
    assert_eq!(r.canonical_usage.input_tokens, 90);
    assert_eq!(r.canonical_usage.cache_read, 30);
    assert_eq!(r.session_totals.unwrap().usage.input_tokens, 180);
    let live: Vec<_> = events
        .iter()
        .filter_map(|e| {
            let EventKind::Usage { usage, model } = &e.kind else {
                return None;
            };
            Some((model.clone(), *usage))
        })
        .collect();
    assert_eq!(live, [(Some("gpt-5.5".to_owned()), r.canonical_usage)]);
}

#[test]
fn the_precheck_finds_no_credentials_and_accepts_a_provider_key() {
    let home = tempfile::tempdir().unwrap();
    let p = provider();
    let env = BTreeMap::from([("HOME".to_owned(), home.path().display().to_string())]);
    let msg = p.auth_precheck(&env, home.path(), &[]).unwrap();
    assert!(msg.starts_with("not logged in"), "{msg}");
    let mut with_key = env.clone();
    with_key.insert(API_KEY_ENV.into(), "sk-x".into());
    assert_eq!(p.auth_precheck(&with_key, home.path(), &[]), None);
    let args: Vec<String> = [
        "-c",
        "model_provider=fake",
        "-c",
        r#"model_providers.fake={name="fake",env_key="FAKE_KEY"}"#,
    ]
    .map(String::from)
    .to_vec();
    let msg = p.auth_precheck(&env, home.path(), &args).unwrap();
    assert!(msg.contains("FAKE_KEY"), "{msg}");
    let mut fake = env;
    fake.insert("FAKE_KEY".into(), "k".into());
    assert_eq!(p.auth_precheck(&fake, home.path(), &args), None);
}

#[test]
fn in_a_container_accept_edits_needs_no_sandbox_of_codex() {
    use super::argv::sandbox_of;
    assert_eq!(
        sandbox_of(PermissionMode::AcceptEdits, true),
        Some("danger-full-access")
    );
    assert_eq!(
        sandbox_of(PermissionMode::AcceptEdits, false),
        Some("workspace-write")
    );
    assert_eq!(
        sandbox_of(PermissionMode::Sandbox, false),
        Some("workspace-write")
    );
    assert_eq!(
        sandbox_of(PermissionMode::Sandbox, true),
        Some("danger-full-access")
    );
    assert_eq!(sandbox_of(PermissionMode::Plan, true), Some("read-only"));
    assert_eq!(sandbox_of(PermissionMode::Bypass, true), None);
}

#[test]
fn a_session_whose_recording_is_empty_cannot_be_resumed() {
    // Seen: codex killed right after `thread.started`, then `codex exec resume <id>`.
    let stderr = "Error: thread/resume: thread/resume failed: failed to read thread: \
        thread-store internal error: failed to read session metadata /h/.codex/sessions/\
        rollout-x.jsonl: rollout at /h/.codex/sessions/rollout-x.jsonl is empty (code -32603)\n";
    let r = replay::replay(
        &provider(),
        b"",
        stderr,
        ExitStatus::Code(1),
        &ParseContext::default(),
    );
    assert_eq!(r.error_kind, Some(ErrorKind::InvalidResume), "{r:?}");
    assert!(r.error.unwrap().contains("thread/resume failed"));
}
