//! The contract with the real `claude` (@anthropic-ai/claude-code, pinned in
//! `ai_cli_providers.json`), through the engine.

use aicli::providers::ErrorKind;

use super::*;

const CLI: Cli = Cli::Claude;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_plain_answer() {
    plain_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_bash_tool_runs_in_the_worktree() {
    builtin_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_mcp_get_workspace_files_after_tool_search() {
    mcp_workspace_files(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_calls_a_command_tool_from_the_config() {
    mcp_command_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_calls_an_upstream_mcp_servers_tool_from_the_config() {
    mcp_upstream_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_question_blocks_and_the_answer_resumes_the_session() {
    question_then_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_401_is_auth() {
    let (t, ran) = http_error(CLI, 401, ErrorKind::Auth).await;
    let msg = ran.only().error.clone().unwrap_or_default();
    assert!(msg.contains("Invalid API key"), "{msg}");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_429_is_rate_limit_and_the_pool_backs_off() {
    let (t, _) = http_error(CLI, 429, ErrorKind::RateLimit).await;
    assert_eq!(
        t.fake.model_requests().len(),
        2,
        "one request per attempt: {}",
        t.log()
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_500_is_server_error() {
    let (t, _) = http_error(CLI, 500, ErrorKind::ServerError).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_529_is_overloaded() {
    let (t, _) = http_error(CLI, 529, ErrorKind::Overloaded).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_503_is_overloaded() {
    let (t, _) = http_error(CLI, 503, ErrorKind::Overloaded).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_resume_reports_the_cost_of_the_run_alone() {
    resume(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_not_installed() {
    not_installed(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_without_credentials_is_auth() {
    // No pre-check applies to Claude (its login can live in places the engine does not
    // look): the CLI itself says "Not logged in" at once, without calling the model.
    let (t, r) = no_credentials(CLI, true).await;
    assert_eq!(r.exit_code, Some(1), "{}", describe(&r));
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("Not logged in")),
        "{}",
        describe(&r)
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_silent_model_api_ends_by_the_idle_watchdog() {
    silent_api_ends_by_the_idle_watchdog(CLI).await;
}
