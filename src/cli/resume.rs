//! `aicli resume`: finish an interrupted batch.

use std::path::Path;
use std::process::ExitCode;

use aicli::BatchEvent;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{
    batch_uses_docker, ctrl_c_cancels, engine_with_mcp, print_batch, repo_dir, stop_mcp,
};
use super::exit::Failure;

pub(super) async fn resume(
    config_path: Option<&Path>,
    batch_id: &str,
    json_out: bool,
    no_mcp: bool,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    let docker = batch_uses_docker(config_path, &repo, &r, batch_id);
    let (engine, mcp) = engine_with_mcp(config_path, &repo, no_mcp, docker, &cancel).await?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let spec = store
        .open_batch(batch_id)
        .and_then(|b| b.spec())
        .map_err(|m| Failure {
            kind: None,
            message: m,
        })?;
    let (tx, rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let display = tokio::spawn(super::progress::run(rx, spec.tasks.len()));
    let result = engine.resume_batch(&store, batch_id, tx, cancel).await;
    stop_mcp(mcp);
    let _ = display.await;
    print_batch(&result?, json_out)
}
