//! The contract with the real `gemini` (@google/gemini-cli, pinned in
//! `ai_cli_providers.json`), through the engine.

use aicli::providers::ErrorKind;

use super::*;

const CLI: Cli = Cli::Gemini;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_plain_answer() {
    plain_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_shell_tool_runs_in_the_worktree() {
    builtin_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_mcp_get_workspace_files() {
    mcp_workspace_files(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_calls_a_command_tool_from_the_config() {
    mcp_command_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_calls_an_upstream_mcp_servers_tool_from_the_config() {
    mcp_upstream_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_question_blocks_and_the_answer_resumes_the_session() {
    question_then_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_401_is_auth() {
    let (t, _) = http_error(CLI, 401, ErrorKind::Auth).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_429_is_rate_limit_and_the_pool_backs_off() {
    let (t, _) = http_error(CLI, 429, ErrorKind::RateLimit).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_500_is_server_error() {
    let (t, _) = http_error(CLI, 500, ErrorKind::ServerError).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_503_is_overloaded() {
    let (t, _) = http_error(CLI, 503, ErrorKind::Overloaded).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_resume_reports_the_usage_of_the_run_alone() {
    resume(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_not_installed() {
    not_installed(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_without_credentials_the_precheck_says_auth() {
    let (t, r) = no_credentials(CLI, true).await;
    assert_eq!(r.exit_code, None, "the CLI never started: {}", describe(&r));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_without_credentials_and_no_precheck_is_auth() {
    // Gemini exits 41 at once: "Please set an Auth method ...".
    let (t, r) = no_credentials(CLI, false).await;
    assert_eq!(r.exit_code, Some(41), "{}", describe(&r));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_silent_model_api_ends_by_the_idle_watchdog() {
    silent_api_ends_by_the_idle_watchdog(CLI).await;
}
