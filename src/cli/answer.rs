//! `aicli answer`: answer a blocked task and resume its session.

use std::path::Path;
use std::process::ExitCode;

use aicli::BatchEvent;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::common::{
    batch_uses_docker, ctrl_c_cancels, engine_with_mcp, finish, repo_dir, stop_mcp,
};
use super::{RepoArgs, output};

pub(super) async fn answer(
    config_path: Option<&Path>,
    task: &str,
    text: &str,
    json_out: bool,
    no_mcp: bool,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let repo = repo_dir(&r)?;
    let cancel = CancellationToken::new();
    // A bare task id may be in any batch: accept the containers' host names then.
    let docker = match task.split_once('/') {
        Some((batch_id, _)) => batch_uses_docker(config_path, &repo, &r, batch_id),
        None => true,
    };
    let (engine, mcp) = engine_with_mcp(config_path, &repo, no_mcp, docker, &cancel).await?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let (tx, mut rx) = broadcast::channel::<BatchEvent>(16384);
    ctrl_c_cancels(cancel.clone());
    let printer = tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(BatchEvent::Agent { event, .. }) if !json_out => {
                    if let Some(line) = output::event_line(&event) {
                        println!("{line}");
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    let result = engine.answer(&store, task, text, tx, cancel).await;
    stop_mcp(mcp);
    let _ = printer.await;
    let r = result?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        if let Some(c) = &r.continuation {
            println!("({})", c.reason);
        }
        println!("{}", output::summary(&r));
    }
    Ok(finish(&r))
}
