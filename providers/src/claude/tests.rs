//! The Claude decoder on recorded and hand-made lines.

use pretty_assertions::assert_eq;

use super::*;
use crate::config::AiCliConfig;
use crate::decode::Line;
use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::replay;
use crate::result::SessionResult;
use crate::usage::CanonicalUsage;

fn provider() -> ClaudeProvider {
    ClaudeProvider::new(
        "claude",
        AiCliConfig::builtin().unwrap().providers["claude"].clone(),
    )
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../fixtures/claude/{name}.ndjson",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn run(stdout: &[u8], exit: ExitStatus) -> (Vec<AgentEvent>, SessionResult) {
    replay::replay_events(&provider(), stdout, "", exit, &ParseContext::default())
}

fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
    events.iter().map(AgentEvent::type_name).collect()
}

#[test]
fn one_line_with_several_blocks_gives_an_event_per_block_sharing_its_raw_line() {
    let line = r#"{"type":"assistant","message":{"id":"m1","model":"claude-opus-5-5","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"t1","name":"mcp__aicli__log","input":{"message":"x"}}],"usage":{"input_tokens":3,"output_tokens":1}},"tool_use_meta":[{"id":"t1","tool_name":"log"}]}"#;
    let mut d = provider().decoder(&ParseContext::default());
    let evs = d.line(Line::from(line));
    assert_eq!(
        kinds(&evs),
        ["usage", "thinking", "assistant_text", "tool_call"]
    );
    assert!(
        evs.iter()
            .all(|e| std::sync::Arc::ptr_eq(&e.raw, &evs[0].raw))
    );
    assert_eq!(&*evs[0].raw, line);
    assert_eq!(
        evs[3].kind,
        EventKind::ToolCall {
            id: "t1".into(),
            name: "log".into(),
            input: serde_json::json!({"message": "x"}),
            mcp_server: Some("aicli".into()),
        }
    );
    // A second line of the same message is not a new request.
    let again = d.line(Line::from(line));
    assert_eq!(kinds(&again), ["thinking", "assistant_text", "tool_call"]);
    assert_eq!(d.usage().request_count, 1);
}

#[test]
fn partial_messages_give_text_deltas_and_live_usage() {
    let (events, r) = run(&fixture("bash_partial"), ExitStatus::Code(0));
    let deltas: String = events
        .iter()
        .filter_map(|e| {
            let EventKind::AssistantText { text, delta: true } = &e.kind else {
                return None;
            };
            Some(text.as_str())
        })
        .collect();
    assert_eq!(deltas, "I will run a command.The tool returned: hi");
    // message_start snapshots, then message_delta increments, then the result's rest.
    let usage: Vec<CanonicalUsage> = events
        .iter()
        .filter_map(|e| {
            let EventKind::Usage { usage, model } = &e.kind else {
                return None;
            };
            assert_eq!(model.as_deref(), Some("claude-opus-5-5"));
            Some(*usage)
        })
        .collect();
    assert_eq!(usage[0].input_tokens, 12);
    assert_eq!(usage[0].request_count, 1);
    assert_eq!(
        usage[1].output_tokens, 6,
        "message_delta: 7 after the snapshot's 1"
    );
    let sum = usage.iter().fold(CanonicalUsage::default(), |a, u| a + *u);
    assert_eq!(sum, r.canonical_usage);
    assert!(r.success);
    assert!(events.iter().any(|e| e.kind
        == EventKind::Status {
            status: "requesting".into()
        }));
}

#[test]
fn hooks_tasks_and_statuses_are_typed_and_the_run_waits_for_background_tasks() {
    let stdout = std::fs::read(format!(
        "{}/../fixtures/claude/hand/two_results_background_agent.ndjson",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut d = provider().decoder(&ParseContext::default());
    let mut finished_after = Vec::new();
    let mut all = Vec::new();
    for line in std::str::from_utf8(&stdout).unwrap().lines() {
        let evs = d.line(Line::from(line));
        finished_after.push((evs.last().map(AgentEvent::type_name), d.finished()));
        all.extend(evs);
    }
    // The first result comes while a background task runs: not the last word.
    let finals: Vec<bool> = finished_after
        .iter()
        .filter(|(t, _)| *t == Some("final"))
        .map(|(_, f)| *f)
        .collect();
    assert_eq!(finals, [false, true]);
    let subtasks: Vec<(String, String)> = all
        .iter()
        .filter_map(|e| {
            let EventKind::Subtask {
                task_id, status, ..
            } = &e.kind
            else {
                return None;
            };
            Some((task_id.clone(), status.clone()))
        })
        .collect();
    assert_eq!(
        subtasks,
        [
            ("bg1".into(), "started".into()),
            ("bg1".into(), "running".into()),
            ("bg1".into(), "completed".into())
        ]
    );
    assert!(all.iter().any(|e| matches!(&e.kind, EventKind::Hook { hook, phase, .. } if hook == "Stop" && phase == "response")));
    let r = d.finish("", ExitStatus::Code(0));
    assert_eq!(r.num_turns, Some(2));
    assert_eq!(r.response, "The build passed.");
}

#[test]
fn no_exit_code_says_nothing_about_signals() {
    let cut = br#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-opus-5-5"}
{"type":"assistant","message":{"id":"m1","model":"claude-opus-5-5","content":[{"type":"text","text":"Work"#;
    let (_, unknown) = run(cut, ExitStatus::Unknown);
    let (_, killed) = run(cut, ExitStatus::Signal);
    let (_, exited) = run(cut, ExitStatus::Code(137));
    assert_eq!(unknown.error_kind, Some(ErrorKind::Protocol));
    let msg = unknown.error.unwrap();
    assert!(
        !msg.contains("signal") && !msg.contains("exit code"),
        "{msg}"
    );
    assert!(killed.error.unwrap().contains("killed by a signal"));
    assert!(exited.error.unwrap().contains("exit code 137"));
    assert_eq!(unknown.exit_code, None);
}

#[test]
fn malformed_lines_are_protocol_events_and_the_rest_still_counts() {
    let mut stdout = fixture("text");
    stdout.splice(
        0..0,
        b"not json\n[1,2]\n{\"type\":\"result\",\"num_turns\":\"x\"}\n\xff\xfe\n"
            .iter()
            .copied(),
    );
    let (events, r) = run(&stdout, ExitStatus::Code(0));
    let protocol: Vec<&str> = events
        .iter()
        .filter_map(|e| {
            let EventKind::Protocol { message, .. } = &e.kind else {
                return None;
            };
            Some(message.as_str())
        })
        .collect();
    assert_eq!(protocol.len(), 4, "{protocol:?}");
    assert!(protocol[0].starts_with("malformed JSON"));
    assert_eq!(protocol[1], "expected a JSON object, got an array");
    assert!(protocol[2].starts_with("a claude line that does not have the expected shape"));
    assert!(protocol[3].starts_with("line is not valid UTF-8"));
    assert!(r.success);
    assert_eq!(r.protocol_errors, 4);
    assert_eq!(r.response, "Hello from the fake Anthropic API.");
}

#[test]
fn another_clis_stream_is_refused_as_foreign() {
    let codex = std::fs::read(format!(
        "{}/../fixtures/codex/text.ndjson",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (_, r) = run(&codex, ExitStatus::Code(0));
    assert_eq!(r.error_kind, Some(ErrorKind::Protocol));
    let m = r.error.unwrap();
    assert!(
        m.contains("not Claude Code stream-json") && m.contains("thread.started"),
        "{m}"
    );
}

#[test]
fn older_auth_failures_without_terminal_reason_are_auth() {
    let stdout = br#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-opus-5-5"}
{"type":"assistant","message":{"id":"x","model":"<synthetic>","content":[{"type":"text","text":"Invalid API key"}]},"error":"authentication_failed"}
{"type":"result","subtype":"success","is_error":true,"result":"Invalid API key","session_id":"s1","total_cost_usd":0}
"#;
    let (_, r) = run(stdout, ExitStatus::Code(1));
    assert_eq!(r.error_kind, Some(ErrorKind::Auth));
    assert_eq!(r.response, "");
}

#[test]
fn a_missing_model_is_bad_request_with_or_without_a_status_field() {
    let with_status = br#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":404,"result":"API Error: model: claude-nope"}"#;
    let text_only = br#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 404 {\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model: claude-nope\"}}"}"#;
    for stdout in [&with_status[..], &text_only[..]] {
        let (_, r) = run(stdout, ExitStatus::Code(1));
        assert_eq!(r.error_kind, Some(ErrorKind::BadRequest), "{r:?}");
    }
}

#[test]
fn over_long_lines_keep_their_start() {
    let mut d = provider().decoder(&ParseContext::default());
    let big = vec![b'x'; 10_000];
    let evs = d.line(Line::Overlong {
        len: 20_000_000,
        prefix: &big,
        cap: 8 * 1024 * 1024,
    });
    let [ev] = evs.as_slice() else {
        panic!("{evs:?}")
    };
    assert_eq!(ev.raw.len(), crate::decode::PROTOCOL_RAW_PREFIX);
    assert!(
        matches!(&ev.kind, EventKind::Protocol { line_bytes: 20_000_000, message } if message.contains("exceeds the cap"))
    );
    assert_eq!(d.finish("", ExitStatus::Code(0)).protocol_errors, 1);
}

#[test]
fn verbatim_fields_a_result_line_cannot_give_are_said_not_lost_silently() {
    // `stop_reason` printed twice: the line decodes (the decoder does not name the key),
    // its verbatim fields cannot be read back, and provider_data says why.
    let twice = br#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-opus-5-5"}
{"type":"result","subtype":"success","is_error":false,"session_id":"s1","result":"ok","num_turns":1,"total_cost_usd":0.01,"stop_reason":"end_turn","stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}
"#;
    let (_, r) = run(twice, ExitStatus::Code(0));
    assert!(r.success, "{r:?}");
    assert_eq!(r.response, "ok");
    let unread = r.provider_data["result_unread"]
        .as_str()
        .unwrap_or_default();
    assert!(unread.contains("duplicate field `stop_reason`"), "{unread}");
    assert!(r.provider_data.get("stop_reason").is_none());
    // Printed once, it is there and nothing is said.
    let once = String::from_utf8_lossy(twice).replacen(r#","stop_reason":"end_turn""#, "", 1);
    let (_, r) = run(once.as_bytes(), ExitStatus::Code(0));
    assert_eq!(r.provider_data["stop_reason"], "end_turn");
    assert!(r.provider_data.get("result_unread").is_none());
}
