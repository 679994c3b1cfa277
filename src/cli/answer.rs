//! `aicli answer`: answer a blocked task and resume its session.

use std::path::Path;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{batch_uses_docker, ctrl_c_cancels, finish, repo_dir, start_engine, usage};
use super::fake::FakeApiArgs;

pub(super) async fn answer(
    config_path: Option<&Path>,
    task: &str,
    text: &str,
    json_out: bool,
    no_mcp: bool,
    fake: FakeApiArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    if text.trim().is_empty() {
        return Err(usage(format!(
            "the answer to {task} is empty: give the text the agent should continue with, e.g. aicli answer {task} \"Use Postgres\""
        )));
    }
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    // A bare task id may be in any batch: accept the containers' host names then.
    let docker = match task.split_once('/') {
        Some((batch_id, _)) => batch_uses_docker(config_path, &repo, &r, batch_id),
        None => true,
    };
    let running = start_engine(config_path, &repo, no_mcp, &fake, docker, &cancel).await?;
    let store = running.engine.store(&repo, r.runs_dir.as_deref());
    let (tx, rx) = aicli::live::channel(aicli::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), true);
    let printer = super::printer::spawn(rx, json_out, cancel.clone());
    let result = running.engine.answer(&store, task, text, tx, cancel).await;
    running.stop();
    let mut printer = printer.await?;
    let r = result?;
    if !json_out && let Some(c) = &r.continuation {
        outln!("({})", c.reason);
    }
    // The batch, for the hints: named in the reference, else the one the task is in.
    let batch_id = match task.split_once('/') {
        Some((b, _)) => Some(b.to_owned()),
        None => store
            .find_tasks(task)
            .into_iter()
            .map(|(b, _)| b.batch_id())
            .next_back(),
    };
    printer.result(&r, batch_id.as_deref())?;
    Ok(finish(&r))
}
