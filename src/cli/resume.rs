//! `aicli resume`: finish an interrupted batch.

use std::path::Path;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{batch_containers, ctrl_c_cancels, print_batch, repo_dir, start_engine, usage};
use super::fake::FakeApiArgs;

pub(super) async fn resume(
    config_path: Option<&Path>,
    batch_id: &str,
    json_out: bool,
    no_mcp: bool,
    fake: FakeApiArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    let docker = batch_containers(config_path, &repo, &r, batch_id);
    let fake = super::common::recorded_fake(fake, config_path, &repo, &r, Some(batch_id), false);
    let running = start_engine(config_path, &repo, no_mcp, &fake, docker, &cancel).await?;
    let store = running.engine.store(&repo, r.runs_dir.as_deref());
    let spec = match store.open_batch(batch_id).and_then(|b| b.spec()) {
        Ok(s) => s,
        Err(m) => {
            running.stop();
            return Err(usage(m));
        }
    };
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), false);
    let providers: Vec<String> = spec
        .tasks
        .iter()
        .map(|t| t.provider.clone().unwrap_or_else(|| spec.provider.clone()))
        .collect();
    let display_opts = super::progress::DisplayOptions::new(&providers, cancel.clone());
    let display = tokio::spawn(super::progress::run(rx, display_opts));
    let result = running
        .engine
        .resume_batch(&store, batch_id, tx, cancel)
        .await;
    running.stop();
    let _ = display.await;
    print_batch(&result?, json_out)
}
