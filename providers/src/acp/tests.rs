//! Unit tests of the ACP adapter: whole results of conversations in the shape the real
//! agents speak (the recorded fixtures in `fixtures/*-acp/` cover the agents' own
//! lines; these cover the decoder's rules on the cases a fixture cannot pin down).

use serde_json::{Value, json};

use super::AcpProvider;
use crate::config::AiCliConfig;
use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::result::{ParseContext, SessionStatus, SessionTotals};
use crate::usage::{CanonicalUsage, CostSource};

fn provider(name: &str) -> AcpProvider {
    let config = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
    AcpProvider::new(name, config.providers[name].clone())
}

/// A record line of one of aicli's messages.
fn ours(v: Value) -> String {
    json!({ "aicli_stdin": v }).to_string()
}

/// The lines of a conversation up to the prompt: aicli's setup and the agent's answers.
fn setup(continue_with: Option<&str>) -> Vec<String> {
    let mut lines = vec![
        ours(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}})),
        json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,
            "agentCapabilities":{"loadSession":true,"sessionCapabilities":{"resume":{}},
                "mcpCapabilities":{"http":true}},
            "agentInfo":{"name":"agent","version":"1.0.0"}}})
        .to_string(),
    ];
    match continue_with {
        None => {
            lines.push(ours(
                json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}),
            ));
            lines.push(json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}).to_string());
        }
        Some(method) => {
            lines.push(ours(
                json!({"jsonrpc":"2.0","id":1,"method":method,"params":{"sessionId":"s1","cwd":"/w","mcpServers":[]}}),
            ));
            // session/load replays the history before its answer.
            lines.push(update(json!({"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"the old prompt"}})));
            lines.push(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"the old answer"}})));
            lines.push(json!({"jsonrpc":"2.0","id":1,"result":{}}).to_string());
        }
    }
    lines.push(ours(
        json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":"s1","modeId":"x"}}),
    ));
    // gemini says its new mode as agent text, before the prompt.
    lines.push(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"[MODE_UPDATE] x"}})));
    lines.push(json!({"jsonrpc":"2.0","id":2,"result":{}}).to_string());
    lines.push(ours(
        json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"Go"}]}}),
    ));
    lines
}

fn update(u: Value) -> String {
    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":u}})
        .to_string()
}

fn replay(p: &AcpProvider, lines: &[String], ctx: &ParseContext) -> crate::SessionResult {
    let text = lines.join("\n") + "\n";
    crate::replay::replay(p, text.as_bytes(), "", ExitStatus::Code(0), ctx)
}

#[test]
fn setup_text_and_replayed_history_are_not_the_answer() {
    let p = provider("gemini-acp");
    let mut lines = setup(Some("session/load"));
    lines.push(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"The new answer."}})));
    lines.push(json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}).to_string());
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.status, SessionStatus::Succeeded, "{r:?}");
    assert_eq!(r.response, "The new answer.");
    assert_eq!(r.session_id.as_deref(), Some("s1"));
    assert_eq!(r.protocol_errors, 0);
}

#[test]
fn claude_informational_chunks_are_not_the_answer() {
    let p = provider("claude-acp");
    let mut lines = setup(None);
    lines.push(update(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"**Warning:** auto mode"},
        "_meta":{"claudeCode":{"kind":"informational"}}})));
    lines.push(update(
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done."}}),
    ));
    lines.push(json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}).to_string());
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.response, "Done.");
}

#[test]
fn a_session_cumulative_cost_is_reported_per_run_by_difference() {
    let p = provider("claude-acp");
    let mut lines = setup(Some("session/resume"));
    lines.push(update(
        json!({"sessionUpdate":"usage_update","used":109,"size":1000000,
        "cost":{"amount":0.0011076,"currency":"USD"}}),
    ));
    lines.push(
        json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn",
        "usage":{"inputTokens":12,"outputTokens":7,"cachedReadTokens":56,"cachedWriteTokens":34,"totalTokens":109}}})
        .to_string(),
    );
    let ctx = ParseContext {
        prior: Some(SessionTotals {
            usage: CanonicalUsage::default(),
            cost_usd: Some(0.0007384),
        }),
        ..ParseContext::default()
    };
    let r = replay(&p, &lines, &ctx);
    assert_eq!(r.cost_source, CostSource::Reported);
    assert!(
        (r.cost_usd.unwrap_or_default() - 0.0003692).abs() < 1e-12,
        "{r:?}"
    );
    assert_eq!(
        r.session_totals.and_then(|t| t.cost_usd),
        Some(0.0011076),
        "the session's own total is kept"
    );
    assert_eq!(r.canonical_usage.input_tokens, 12);
    assert_eq!(r.canonical_usage.cache_read, 56);
}

#[test]
fn a_rejection_that_ends_the_turn_as_cancelled_is_a_permission_failure() {
    // codex-acp ends the whole turn as `cancelled` when a permission request is
    // rejected: that is the refusal's outcome, not a cancel of the run.
    let p = provider("codex-acp");
    let mut lines = setup(None);
    lines.push(
        json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s1",
        "toolCall":{"toolCallId":"c1","title":"touch x","kind":"execute","status":"pending"},
        "options":[{"optionId":"allow_once","name":"Yes","kind":"allow_once"},
                   {"optionId":"cancel","name":"No","kind":"reject_once"}]}})
        .to_string(),
    );
    lines.push(ours(
        json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"cancel"},
        "_meta":{"aicli":{"why":"permission mode plan: nothing may change"}}}}),
    ));
    lines.push(update(
        json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed"}),
    ));
    lines.push(
        json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled","usage":null}})
            .to_string(),
    );
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.status, SessionStatus::Failed);
    assert_eq!(r.error_kind, Some(ErrorKind::Permission), "{r:?}");
    assert_eq!(
        r.provider_data["acp"]["permission_denied"],
        json!(["touch x"])
    );
    assert_eq!(r.cost_source, CostSource::Unknown, "no usage, no estimate");
}

#[test]
fn a_question_aicli_asked_for_the_agent_blocks_the_run() {
    let p = provider("gemini-acp");
    let mut lines = setup(None);
    lines.push(
        json!({"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s1",
        "toolCall":{"toolCallId":"c1","title":"touch x","kind":"execute","status":"pending"},
        "options":[{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},
                   {"optionId":"cancel","name":"Reject","kind":"reject_once"}]}})
        .to_string(),
    );
    lines.push(ours(
        json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1","_meta":{"aicli":{"reason":"question"}}}}),
    ));
    lines.push(ours(
        json!({"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"},
        "_meta":{"aicli":{"question":"gemini-acp asks permission to run: touch x","options":["Allow","Reject"]}}}}),
    ));
    lines.push(json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}).to_string());
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.status, SessionStatus::Blocked, "{r:?}");
    let q = r.question.expect("a question");
    assert_eq!(q.question, "gemini-acp asks permission to run: touch x");
    assert_eq!(q.options, ["Allow", "Reject"]);
    assert_eq!(r.error_kind, None);
}

#[test]
fn a_run_that_ends_before_its_turn_keeps_what_it_saw() {
    // The agent died mid-turn: the text so far and the session are kept, the kind says
    // it crashed.
    let p = provider("claude-acp");
    let mut lines = setup(None);
    lines.push(update(
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Half an "}}),
    ));
    let text = lines.join("\n") + "\n";
    let r = crate::replay::replay(
        &p,
        text.as_bytes(),
        "Segmentation fault",
        ExitStatus::Code(139),
        &ParseContext::default(),
    );
    assert_eq!(r.status, SessionStatus::Failed);
    assert_eq!(r.response, "Half an");
    assert_eq!(r.session_id.as_deref(), Some("s1"));
    assert!(r.error_kind.is_some(), "{r:?}");
}

#[test]
fn a_session_whose_turn_never_began_is_not_continued() {
    // aicli was stopped after session/new, before the prompt: nothing to resume (and
    // gemini cannot load a session without a turn), so a recovery starts anew.
    let p = provider("claude-acp");
    let mut lines = setup(None);
    lines.pop(); // no session/prompt
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.session_id.as_deref(), Some("s1"));
    assert_eq!(r.provider_data["acp"]["continue_with"], Value::Null);
    assert!(!crate::AiCliProvider::resumable(&p, &r));
    let mut lines = setup(None);
    lines.push(json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}).to_string());
    let r = replay(&p, &lines, &ParseContext::default());
    assert_eq!(r.provider_data["acp"]["continue_with"], "session/resume");
    assert!(crate::AiCliProvider::resumable(&p, &r));
}

/// gemini-acp runs with its own settings home: the user's settings with the session
/// cleanup turned off merged over them (the cleanup deletes a session that a load left
/// an empty recording of), the user's sessions and history linked — not a system
/// defaults file, which gemini skips unless root owns it and every directory above it.
#[test]
fn gemini_acp_runs_in_its_own_settings_home_with_session_cleanup_off() {
    use std::collections::BTreeMap;
    use std::path::Path;

    use crate::provider::{AiCliProvider, BinaryLocation, LaunchContext};
    use crate::task::TaskSpec;

    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"vimMode": true}}"#,
    )
    .unwrap();
    std::fs::write(home.path().join(".gemini/oauth_creds.json"), "{}").unwrap();
    let env = BTreeMap::from([("HOME".to_owned(), home.path().display().to_string())]);
    let binary = BinaryLocation::Path("/bin/gemini".into());
    let task = TaskSpec::new("hello");
    let ctx = LaunchContext {
        env: &env,
        task: &task,
        binary: &binary,
        workdir: Path::new("/w"),
        private_dir: Path::new("/p"),
        mcp: None,
        budget_remaining_usd: None,
        is_root: false,
        search_path: None,
        in_container: false,
    };
    let c = provider("gemini-acp").command(&ctx).unwrap();
    assert_eq!(c.env["GEMINI_CLI_HOME"], "/p/settings-home");
    assert!(
        !c.env.keys().any(|k| k.starts_with("GEMINI_CLI_SYSTEM")),
        "{:?}",
        c.env
    );
    assert_eq!(c.files.len(), 1);
    assert_eq!(
        c.files[0].path,
        Path::new("/p/settings-home/.gemini/settings.json")
    );
    assert_eq!(c.files[0].mode, 0o600);
    let settings: Value = serde_json::from_str(&c.files[0].contents).unwrap();
    assert_eq!(
        settings,
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
               "general": {"vimMode": true, "sessionRetention": {"enabled": false}}})
    );
    let links: Vec<(String, String, bool)> = c
        .links
        .iter()
        .map(|l| {
            (
                l.link.display().to_string(),
                l.target
                    .strip_prefix(home.path())
                    .unwrap()
                    .display()
                    .to_string(),
                l.create_target_dir,
            )
        })
        .collect();
    assert_eq!(
        links,
        [
            (
                "/p/settings-home/.gemini/history".to_owned(),
                ".gemini/history".to_owned(),
                true
            ),
            (
                "/p/settings-home/.gemini/oauth_creds.json".to_owned(),
                ".gemini/oauth_creds.json".to_owned(),
                false
            ),
            (
                "/p/settings-home/.gemini/tmp".to_owned(),
                ".gemini/tmp".to_owned(),
                true
            ),
        ]
    );
}
