//! An `ssh://` engine end to end: the second engine behind a real sshd, reached only
//! through `ssh … docker system dial-stdio`. The real claude runs there: the worktree
//! goes up, its shell tool's file comes back as a commit on the task's branch, and its
//! MCP calls reach aicli.

use std::sync::Arc;

use super::remote_engine::RemoteEngine;
use super::sshd::Sshd;
use super::support::{self, DockerSetup};
use crate::suite::e2e::{Cli, Setup, builtin_tool_with, mcp_workspace_files_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_on_an_ssh_engine_sends_its_work_back_and_calls_aicli() {
    let Some(local) = support::local_engine("claude_on_an_ssh_engine").await else {
        return;
    };
    let remote = RemoteEngine::start()
        .await
        .unwrap_or_else(|e| panic!("the second engine does not start: {e}"));
    let sshd = Sshd::start(&remote).unwrap_or_else(|e| panic!("sshd does not start: {e}"));
    let remote = Arc::new(remote);
    let setup = || Setup::in_docker(DockerSetup::on_ssh(local.clone(), remote.clone(), &sshd));
    builtin_tool_with(Cli::Claude, setup()).await;
    mcp_workspace_files_with(Cli::Claude, setup()).await;
    drop(sshd);
}
