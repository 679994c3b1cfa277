//! The three real CLIs in containers (their images built from aicli's npm cache on
//! local/base), against the fake model APIs on this machine through
//! `host.docker.internal`: the same contract checks as `suite::e2e`, plus no container
//! left.

use crate::suite::e2e::{
    Cli, Setup, builtin_tool_with, mcp_workspace_files_with, plain_answer_with,
    question_then_answer_with,
};

use super::support;

async fn setup(test: &str) -> Option<Setup> {
    let docker = support::local_engine(test).await?;
    Some(Setup::in_docker(support::DockerSetup::local(docker).await))
}

macro_rules! contract {
    ($($name:ident: $check:ident($cli:expr);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Some(s) = setup(stringify!($name)).await {
                $check($cli, s).await;
            }
        }
    )*};
}

contract! {
    claude_in_a_container_plain_answer: plain_answer_with(Cli::Claude);
    claude_in_a_container_bash_tool_writes_the_worktree: builtin_tool_with(Cli::Claude);
    claude_in_a_container_mcp_get_workspace_files: mcp_workspace_files_with(Cli::Claude);
    claude_in_a_container_question_answer_resumes_in_a_new_container: question_then_answer_with(Cli::Claude);
    codex_in_a_container_plain_answer: plain_answer_with(Cli::Codex);
    codex_in_a_container_shell_tool_writes_the_worktree: builtin_tool_with(Cli::Codex);
    codex_in_a_container_mcp_get_workspace_files: mcp_workspace_files_with(Cli::Codex);
    codex_in_a_container_question_answer_resumes_in_a_new_container: question_then_answer_with(Cli::Codex);
    gemini_in_a_container_plain_answer: plain_answer_with(Cli::Gemini);
    gemini_in_a_container_shell_tool_writes_the_worktree: builtin_tool_with(Cli::Gemini);
    gemini_in_a_container_mcp_get_workspace_files: mcp_workspace_files_with(Cli::Gemini);
    gemini_in_a_container_question_answer_resumes_in_a_new_container: question_then_answer_with(Cli::Gemini);
}
