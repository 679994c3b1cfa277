//! The contract with the real `codex` (@openai/codex, pinned in `ai_cli_providers.json`),
//! through the engine.

use aicli::providers::ErrorKind;

use super::*;

const CLI: Cli = Cli::Codex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_plain_answer() {
    plain_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_shell_tool_runs_in_the_worktree() {
    builtin_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_mcp_get_workspace_files_after_tool_search() {
    mcp_workspace_files(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_a_command_tool_from_the_config() {
    mcp_command_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_an_upstream_mcp_servers_tool_from_the_config() {
    mcp_upstream_tool(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_question_blocks_and_the_answer_resumes_the_thread() {
    question_then_answer(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_401_is_auth() {
    let (t, _) = http_error(CLI, 401, ErrorKind::Auth).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_429_is_rate_limit_and_the_pool_backs_off() {
    let (t, _) = http_error(CLI, 429, ErrorKind::RateLimit).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_500_is_server_error() {
    let (t, _) = http_error(CLI, 500, ErrorKind::ServerError).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_503_is_overloaded() {
    let (t, _) = http_error(CLI, 503, ErrorKind::Overloaded).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_resume_reports_the_usage_of_the_run_alone() {
    resume(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_not_installed() {
    not_installed(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_without_credentials_the_precheck_says_auth() {
    let (t, r) = no_credentials(CLI, true).await;
    assert_eq!(r.exit_code, None, "the CLI never started: {}", describe(&r));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_without_credentials_and_no_precheck_is_auth() {
    // The CLI itself refuses at once when its provider's key variable is missing.
    let (t, r) = no_credentials(CLI, false).await;
    assert_eq!(r.exit_code, Some(1), "{}", describe(&r));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_silent_model_api_ends_by_the_idle_watchdog() {
    silent_api_ends_by_the_idle_watchdog(CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_without_credentials_or_network_is_ended_by_the_idle_watchdog() {
    // The notes' worst case: no key, no login, nothing answering. Codex's built-in
    // provider then retries forever ("Reconnecting... waiting for network"). Without the
    // pre-check only the engine's idle watchdog ends it — in seconds, with nothing left.
    // (The provider's base URL is a closed port on loopback: nothing leaves the machine.)
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    // Codex's own reconnect steps come at most ~3 s apart, then "waiting for network"
    // every ~8 s: a 4 s watchdog ends the run at the first long wait, not in its start-up.
    let idle = Duration::from_secs(4);
    let setup = Setup {
        credentials: false,
        precheck: false,
        idle_timeout: idle,
        timeout: Duration::from_secs(60),
        ..Setup::default()
    };
    let t = E2e::start_with(CLI, Script::new(), setup, |c| {
        // The wiring's switches (analytics, update check, plugins off), with Codex's own
        // OpenAI provider instead of the fake one.
        let p = c.providers.get_mut("codex").expect("codex");
        let mut args = Vec::new();
        let mut wiring = std::mem::take(&mut p.extra_args).into_iter();
        while let Some(a) = wiring.next() {
            match wiring.next() {
                Some(v) if a == "-c" && v.starts_with("model_provider") => {}
                Some(v) => args.extend([a, v]),
                None => args.push(a),
            }
        }
        args.extend([
            "-c".to_owned(),
            format!("openai_base_url=\"http://127.0.0.1:{port}/v1\""),
        ]);
        assert!(
            args.iter().any(|a| a == "analytics.enabled=false"),
            "{args:?}"
        );
        p.extra_args = args;
    })
    .await;
    let started = Instant::now();
    let ran = t.run_one(t.task("offline", "Say hello")).await;
    let elapsed = started.elapsed();
    let r = ran.only();
    assert_eq!(r.error_kind, Some(ErrorKind::Timeout), "{}", describe(r));
    let msg = r.error.clone().unwrap_or_default();
    assert!(msg.contains("idle watchdog"), "{msg}");
    // What Codex was doing when it was stopped: reconnecting.
    assert!(msg.contains("network"), "{msg}");
    assert!(elapsed < Duration::from_secs(40), "took {elapsed:?}");
    // The pre-check would have said it at once, before starting anything.
    let precheck = t
        .provider()
        .auth_precheck(&t.env, &t.dirs.home, &[])
        .expect("the pre-check finds no credentials");
    assert!(precheck.contains("CODEX_API_KEY"), "{precheck}");
    t.finish().await;
}
