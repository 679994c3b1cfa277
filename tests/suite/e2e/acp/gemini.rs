//! The contract with `gemini --acp` (the `gemini-acp` entry; gemini 0.61.0, the CLI aicli
//! already pins), through the engine.

use aicli::providers::{ErrorKind, EventKind, PermissionMode, SessionStatus};
use aicli_testkit::Script;

use super::*;

const AGENT: Agent = Agent::Gemini;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_plain_answer() {
    plain_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_shell_tool_runs_in_the_worktree() {
    tool_in_worktree(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_mcp_call_into_aicli() {
    mcp_call(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_question_blocks_and_the_answer_loads_the_session() {
    question_then_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_401_is_auth() {
    api_error(AGENT, 401, ErrorKind::Auth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_429_is_rate_limit_and_the_pool_backs_off() {
    api_error(AGENT, 429, ErrorKind::RateLimit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_cancel_ends_the_turn_and_leaves_no_process() {
    cancel(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_resume_by_session_id() {
    resume(AGENT).await;
}

/// gemini's modes: `plan` offers no shell tool at all (no request), `default` asks (a
/// question); `accept_edits` (autoEdit) asks too for a shell command. (`bypass`, yolo,
/// runs it unasked: [`gemini_acp_shell_tool_runs_in_the_worktree`].)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_acp_permission_requests_follow_the_permission_mode() {
    permission_modes(AGENT).await;
}

/// The body of [`gemini_acp_permission_requests_follow_the_permission_mode`], where `at`
/// says (also in containers: `suite::docker::acp`).
pub async fn permission_modes(at: impl Into<At>) {
    let t = start(at, Script::new()).await;
    let shell = |f: &str| Script::shell(format!("touch {f}")).then_quote_tool_result();

    let ran = run_in(&t, "plan", PermissionMode::Plan, shell("plan.txt")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    assert!(!made(r, "plan.txt"));
    let record = recorded(&t, &ran.batch.batch_id, "plan", 0);
    assert!(permission_requests(&record).is_empty());
    // In plan mode gemini does not even declare its shell tool: the model's call gets an
    // error back (quoted in the answer), and no tool call reaches ACP.
    assert!(r.response.contains("\"error\""), "{}", describe(r));
    assert!(
        !live_kinds(&ran).iter().any(|k| matches!(
            k,
            EventKind::ToolResult {
                is_error: false,
                ..
            }
        )),
        "a tool ran in plan mode"
    );

    let ran = run_in(&t, "default", PermissionMode::Default, shell("default.txt")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Blocked, "{}", describe(r));
    let q = r.question.clone().expect("a question");
    assert_eq!(
        q.question,
        "gemini-acp asks permission to run: touch default.txt"
    );
    assert_eq!(q.options, ["Allow for this session", "Allow", "Reject"]);
    assert!(!made(r, "default.txt"));

    // (The answer to such a question, continuing the session, is tested with claude and
    // codex: for gemini it is a `session/load`, a minute after the session began.)
    let ran = run_in(&t, "edits", PermissionMode::AcceptEdits, shell("edits.txt")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Blocked, "{}", describe(r));
    assert_eq!(
        r.question.as_ref().map(|q| q.question.as_str()),
        Some("gemini-acp asks permission to run: touch edits.txt")
    );
    assert!(!made(r, "edits.txt"));
    t.finish().await;
}
