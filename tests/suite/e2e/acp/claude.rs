//! The contract with claude-agent-acp (the `claude-acp` entry: 0.101.0, running aicli's
//! pinned `claude` through `CLAUDE_CODE_EXECUTABLE`), through the engine.

use aicli::providers::{ErrorKind, PermissionMode, SessionStatus};
use aicli_testkit::Script;
use serde_json::json;

use super::*;

const AGENT: Agent = Agent::Claude;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_plain_answer() {
    plain_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_shell_tool_runs_in_the_worktree() {
    tool_in_worktree(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_mcp_call_into_aicli() {
    mcp_call(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_question_blocks_and_the_answer_resumes_the_session() {
    question_then_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_401_is_auth() {
    api_error(AGENT, 401, ErrorKind::Auth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_429_is_rate_limit_and_the_pool_backs_off() {
    api_error(AGENT, 429, ErrorKind::RateLimit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_500_is_server_error() {
    api_error(AGENT, 500, ErrorKind::ServerError).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_cancel_ends_the_turn_and_leaves_no_process() {
    cancel(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_resume_by_session_id() {
    resume(AGENT).await;
}

/// Claude's modes: `plan` still asks before a Write, and aicli rejects it (the turn goes
/// on, the file is not written); `default` asks before Bash (a question) and the answer
/// "Allow" resumes the session, whose repeated request is allowed; `accept_edits` asks
/// before a command that is not a file edit, and the answer "No" rejects it. (`bypass`
/// runs it unasked: [`claude_acp_shell_tool_runs_in_the_worktree`].)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_permission_requests_follow_the_permission_mode() {
    permission_modes(AGENT).await;
}

/// The body of [`claude_acp_permission_requests_follow_the_permission_mode`], where `at`
/// says (also in containers: `suite::docker::acp`).
pub async fn permission_modes(at: impl Into<At>) {
    let t = start(at, Script::new()).await;

    let write = Script::tool_call("Write", json!({"file_path": "plan.txt", "content": "x\n"}))
        .then_quote_tool_result();
    let ran = run_in(&t, "plan", PermissionMode::Plan, write).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    assert!(!made(r, "plan.txt"));
    let record = recorded(&t, &ran.batch.batch_id, "plan", 0);
    assert_eq!(permission_requests(&record).len(), 1);
    let denied = r.provider_data["acp"]["permission_denied"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(denied.len(), 1, "{}", describe(r));

    permission_answered(
        &t,
        AGENT,
        "default",
        PermissionMode::Default,
        Script::shell("touch default.txt").then_quote_tool_result(),
        "default.txt",
    )
    .await;

    let other = Script::shell("python3 -c 'open(\"edits.txt\", \"w\")'").then_quote_tool_result();
    let ran = run_in(&t, "edits", PermissionMode::AcceptEdits, other.clone()).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Blocked, "{}", describe(r));
    t.set_script(other);
    let r2 = t.answer("edits", "No").await;
    assert_eq!(r2.status, SessionStatus::Succeeded, "{}", describe(&r2));
    assert!(!made(&r2, "edits.txt"), "a refused command ran");
    let denied = r2.provider_data["acp"]["permission_denied"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(denied.len(), 1, "{}", describe(&r2));
    t.finish().await;
}
