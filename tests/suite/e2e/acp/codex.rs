//! The contract with codex-acp (the `codex-acp` entry: 2.6.0, running aicli's pinned
//! `codex app-server` through `CODEX_PATH`), through the engine.

use aicli::providers::{ErrorKind, PermissionMode, SessionStatus};
use aicli_testkit::Script;
use serde_json::json;

use super::*;

const AGENT: Agent = Agent::Codex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_plain_answer() {
    plain_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_shell_tool_runs_in_the_worktree() {
    tool_in_worktree(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_mcp_call_into_aicli() {
    mcp_call(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_question_blocks_and_the_answer_resumes_the_session() {
    question_then_answer(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_401_is_auth() {
    api_error(AGENT, 401, ErrorKind::Auth).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_429_is_rate_limit_though_the_agent_hides_it_in_an_end_turn() {
    api_error(AGENT, 429, ErrorKind::RateLimit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_500_is_server_error_though_the_agent_hides_it_in_an_end_turn() {
    api_error(AGENT, 500, ErrorKind::ServerError).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_cancel_ends_the_turn_and_leaves_no_process() {
    cancel(AGENT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_resume_by_session_id() {
    resume(AGENT).await;
}

/// A command the model asks to run outside Codex's sandbox: the only one codex-acp asks
/// permission for.
fn escalated(file: &str) -> Script {
    Script::tool_call(
        "exec_command",
        json!({"cmd": format!("touch {file}"), "sandbox_permissions": "require_escalated",
               "justification": "Create the file?"}),
    )
    .then_quote_tool_result()
}

/// Codex's modes (sandboxes): `plan` (read-only) rejects an escalation, and codex-acp
/// then ends the whole turn as cancelled: the run fails as `permission`; `default`
/// (read-only) asks (a question) and the answer "Allow" resumes the session, whose
/// repeated request is allowed; `accept_edits` (workspace-write) writes in the worktree
/// unasked and asks before an escalation. (`bypass`, full access:
/// [`codex_acp_shell_tool_runs_in_the_worktree`].)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_acp_permission_requests_follow_the_permission_mode() {
    permission_modes(AGENT).await;
}

/// The body of [`codex_acp_permission_requests_follow_the_permission_mode`], where `at`
/// says (also in containers: `suite::docker::acp`).
pub async fn permission_modes(at: impl Into<At>) {
    let at = at.into();
    let in_container = at.docker.is_some();
    let t = start(at, Script::new()).await;

    let ran = run_in(&t, "plan", PermissionMode::Plan, escalated("plan.txt")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Failed, "{}", describe(r));
    assert_eq!(r.error_kind, Some(ErrorKind::Permission), "{}", describe(r));
    assert!(!made(r, "plan.txt"));
    assert_eq!(r.provider_data["acp"]["stop_reason"], "cancelled");

    permission_answered(
        &t,
        AGENT,
        "default",
        PermissionMode::Default,
        escalated("default.txt"),
        "default.txt",
    )
    .await;

    let plain = Script::shell("touch edits.txt").then_quote_tool_result();
    let ran = run_in(&t, "edits", PermissionMode::AcceptEdits, plain).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    assert!(made(r, "edits.txt"), "{}", describe(r));
    let record = recorded(&t, &ran.batch.batch_id, "edits", 0);
    assert!(permission_requests(&record).is_empty());
    let ran = run_in(
        &t,
        "edits-escalated",
        PermissionMode::AcceptEdits,
        escalated("x.txt"),
    )
    .await;
    if in_container {
        // The container is the sandbox (codex's bubblewrap cannot start there):
        // `accept_edits` is agent-full-access, as `danger-full-access` is for codex
        // itself. Nothing asks a human: codex itself refuses an escalation under
        // approval `never`, and the turn goes on.
        let r = ran.only();
        assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
        assert!(r.question.is_none(), "{}", describe(r));
        let record = recorded(&t, &ran.batch.batch_id, "edits-escalated", 0);
        assert!(permission_requests(&record).is_empty());
        assert!(
            r.response.contains("approval policy is Never"),
            "{}",
            describe(r)
        );
    } else {
        assert_eq!(
            ran.only().status,
            SessionStatus::Blocked,
            "{}",
            describe(ran.only())
        );
    }
    t.finish().await;
}
