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

/// The agent commits in the container and leaves another change uncommitted: its commit
/// is on the task's branch as it made it (through the mounted git directory on a local
/// engine, the bundle on a remote one), and the other change is in aicli's commit on top
/// of it, with its trailers: the work comes back as commits, as a local run's does.
pub async fn agent_commit_lands_on_the_branch(setup: Setup) {
    use crate::suite::e2e::{E2e, describe};
    use crate::suite::support::git;
    let script = aicli_testkit::Script::shell(
        "echo one > committed.txt && git add committed.txt && git -c user.name=agent -c user.email=agent@example.invalid commit -qm 'agent commit' && echo two > uncommitted.txt",
    )
    .then_quote_tool_result();
    let t = E2e::start_in(setup, Cli::Claude, script).await;
    let ran = t.run_one(t.shell_task("commit", "Commit a file")).await;
    let r = ran.only();
    assert_eq!(
        r.status,
        aicli::providers::SessionStatus::Succeeded,
        "{}",
        describe(r)
    );
    let wt = r.worktree.clone().expect("the worktree holds work");
    let branch = r.branch.clone().expect("branch");
    assert_eq!(
        git(
            t.repo.path(),
            &["log", "--format=%an|%s", &format!("main..{branch}")]
        ),
        format!(
            "{}|commit: Commit a file\nagent|agent commit",
            git(&wt, &["log", "-1", "--format=%an", &branch])
        ),
        "{}",
        describe(r)
    );
    assert_eq!(
        git(&wt, &["show", &format!("{branch}:committed.txt")]),
        "one"
    );
    assert_eq!(
        crate::support::git::aicli_commit(&wt, &branch),
        ("commit".to_owned(), vec!["uncommitted.txt".to_owned()])
    );
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    assert!(git(t.repo.path(), &["for-each-ref", "refs/aicli"]).is_empty());
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_in_a_container_commits_on_the_task_branch() {
    if let Some(s) = setup("claude_in_a_container_commits_on_the_task_branch").await {
        agent_commit_lands_on_the_branch(s).await;
    }
}
