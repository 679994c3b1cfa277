//! The three real ACP agents (`claude-acp`, `codex-acp`, `gemini-acp`) in containers:
//! their images built from aicli's npm cache (an ACP wrapper's CLI beside it), the
//! agent's stdin attached in both directions for the whole run, against the fake model
//! APIs on this machine through `host.docker.internal`. The same contract checks as
//! `suite::e2e::acp` on this machine: a plain answer, questions to a human (aicli's MCP
//! server in `session/new`), permission requests by mode, resume by `session/load` or
//! `session/resume` (also of another task's session: its home's session store is copied),
//! cancel (`session/cancel` into the container, then the container stopped), and no
//! container left. One agent also on a strictly remote engine.

use std::sync::Arc;

use crate::suite::e2e::acp::{self, Agent, At};

use super::remote_engine::RemoteEngine;
use super::support::{self, DockerSetup};

/// The agent in containers on the local engine (skipped without an engine, unless
/// `AICLI_REQUIRE_DOCKER` is set).
async fn local(test: &str, agent: Agent) -> Option<At> {
    let docker = support::local_engine(test).await?;
    Some(At {
        agent,
        docker: Some(DockerSetup::local(docker).await),
    })
}

macro_rules! contract {
    ($($name:ident: $check:path, $agent:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Some(at) = local(stringify!($name), $agent).await {
                $check(at).await;
            }
        }
    )*};
}

contract! {
    claude_acp_in_a_container_plain_answer: acp::plain_answer, Agent::Claude;
    claude_acp_in_a_container_question_blocks_and_the_answer_resumes: acp::question_then_answer, Agent::Claude;
    claude_acp_in_a_container_permission_requests_follow_the_mode: acp::claude::permission_modes, Agent::Claude;
    claude_acp_in_a_container_cancel_sends_session_cancel: acp::cancel, Agent::Claude;
    codex_acp_in_a_container_plain_answer: acp::plain_answer, Agent::Codex;
    codex_acp_in_a_container_question_blocks_and_the_answer_resumes: acp::question_then_answer, Agent::Codex;
    codex_acp_in_a_container_permission_requests_follow_the_mode: acp::codex::permission_modes, Agent::Codex;
    codex_acp_in_a_container_cancel_sends_session_cancel: acp::cancel, Agent::Codex;
    codex_acp_in_a_container_resume_by_session_id: acp::resume, Agent::Codex;
    gemini_acp_in_a_container_mcp_call_into_aicli: acp::mcp_call, Agent::Gemini;
    gemini_acp_in_a_container_question_blocks_and_the_answer_loads: acp::question_then_answer, Agent::Gemini;
    gemini_acp_in_a_container_permission_requests_follow_the_mode: acp::gemini::permission_modes, Agent::Gemini;
    gemini_acp_in_a_container_cancel_sends_session_cancel: acp::cancel, Agent::Gemini;
}

/// claude-agent-acp on a strictly remote engine (nothing shared but the Engine API):
/// its tool's file comes back into the worktree, and a question blocks the task and the
/// answer resumes the same session in a new container there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_on_a_remote_engine_writes_the_worktree_and_resumes_after_an_answer() {
    let Some(local) = support::local_engine("claude_acp_on_a_remote_engine").await else {
        return;
    };
    let remote = Arc::new(
        RemoteEngine::start()
            .await
            .unwrap_or_else(|e| panic!("the second engine does not start: {e}")),
    );
    let at = || At {
        agent: Agent::Claude,
        docker: Some(DockerSetup::on_remote(local.clone(), remote.clone())),
    };
    acp::tool_in_worktree(at()).await;
    acp::question_then_answer(at()).await;
}

/// claude-agent-acp in containers against a batch budget. It reports a turn's usage
/// when the turn ends (measured: no cost while a turn runs), so what holds is what holds
/// for codex ([`starts_only_while_shares_fit`]): runs start only while their shares fit,
/// nothing starts once the budget is spent, and no container is left. (An ACP run in
/// flight when the budget is spent is asked to stop with `session/cancel`:
/// `suite::budget`.)
///
/// [`starts_only_while_shares_fit`]: crate::suite::e2e::budget::starts_only_while_shares_fit
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_acp_in_containers_starts_only_while_the_budget_allows() {
    let Some(at) = local("claude_acp_in_containers_budget", Agent::Claude).await else {
        return;
    };
    let agent = at.agent;
    let t = acp::start(at, aicli_testkit::Script::text("Done.")).await;
    let c = agent.expected_cost(&agent.expected_usage(1));
    crate::suite::e2e::budget::starts_only_while_shares_fit(&t, c).await;
    t.finish().await;
}
