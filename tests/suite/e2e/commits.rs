//! The real CLIs' work committed on the task's branch (issue 36): claude, codex and
//! gemini each write two files with their shell tool; the run ends in one commit of
//! exactly those files, with aicli's trailers, which `git merge` takes home. Nothing of
//! aicli's (the CLI's MCP config, its settings home, a lockfile) is in it.

use aicli::providers::SessionStatus;

use super::*;
use crate::suite::support::git;

async fn two_files_one_commit(cli: Cli) {
    let t = E2e::start(
        cli,
        Script::shell("printf 'one\\n' > one.txt && mkdir -p src && printf 'two\\n' > src/two.txt")
            .then_quote_tool_result(),
    )
    .await;
    let ran = t.run_one(t.shell_task("two", "Write two files")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    let branch = r.branch.clone().expect("the branch holds the work");
    let repo = t.repo.path();
    let base = git(repo, &["rev-parse", "HEAD"]);
    let made = git(repo, &["rev-list", &format!("{base}..{branch}")]);
    assert_eq!(made.lines().count(), 1, "one commit: {made}");
    let work = r.work.clone().expect("the result says what was committed");
    assert_eq!(work.commit.as_deref(), Some(made.trim()), "{work:?}");
    assert_eq!(work.files, 2);
    // Exactly the agent's two files: no scaffold (MCP config, settings, lockfile).
    let files = git(repo, &["show", "--name-only", "--format=", &branch]);
    assert_eq!(files, "one.txt\nsrc/two.txt", "{}", describe(r));
    let trailer = |k: &str| {
        git(
            repo,
            &[
                "log",
                "-1",
                &format!("--format=%(trailers:key={k},valueonly)"),
                &branch,
            ],
        )
    };
    assert_eq!(trailer("Aicli-Task"), "two");
    assert_eq!(trailer("Aicli-Batch"), ran.batch.batch_id);
    assert_eq!(trailer("Aicli-Provider"), t.provider_name);
    assert_eq!(trailer("Aicli-Status"), "succeeded");
    assert_eq!(
        trailer("Aicli-Session"),
        r.session_id.clone().unwrap_or_default()
    );
    assert!(
        trailer("Aicli-Cost").contains("USD"),
        "{}",
        trailer("Aicli-Cost")
    );
    assert_eq!(
        git(repo, &["log", "-1", "--format=%s", &branch]),
        "two: Write two files"
    );
    git(repo, &["merge", "-q", "--no-edit", &branch]);
    assert_eq!(
        std::fs::read_to_string(repo.join("one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/two.txt")).unwrap(),
        "two\n"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_s_two_files_are_one_commit_on_the_task_branch() {
    two_files_one_commit(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_s_two_files_are_one_commit_on_the_task_branch() {
    two_files_one_commit(Cli::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_s_two_files_are_one_commit_on_the_task_branch() {
    two_files_one_commit(Cli::Gemini).await;
}
