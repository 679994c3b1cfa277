//! `aicli answer`: answer a blocked task and resume its session.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use crate::record::{RunStore, TaskState};
use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{batch_containers, ctrl_c_cancels, finish, repo_dir, start_engine, usage};
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
    let started = Instant::now();
    let from_stdin;
    let text = if text == "-" {
        from_stdin = read_stdin_answer()?;
        from_stdin.as_str()
    } else {
        text
    };
    if text.trim().is_empty() {
        return Err(usage(format!(
            "the answer to {task} is empty: give the text the agent should continue with, e.g. aicli answer {task} \"Use Postgres\""
        )));
    }
    let repo = repo_dir(&r)?;
    // A bare task id is resolved in the run store first, as the engine resolves it: only
    // then is it known whether its batch runs in containers.
    let store = super::common::engine(config_path)?.store(&repo, r.runs_dir.as_deref());
    let task_ref = match task.split_once('/') {
        Some(_) => task.to_owned(),
        None => qualified(&store, task).unwrap_or_else(|| task.to_owned()),
    };
    // Refused before anything is started or said (the fake API's note, say).
    crate::batch::check_answerable(&store, &task_ref)?;
    let batch_id = task_ref.split_once('/').map(|(b, _)| b.to_owned());
    let docker = batch_id
        .as_deref()
        .and_then(|b| batch_containers(config_path, &repo, &r, b));
    let fake =
        super::common::recorded_fake(fake, config_path, &repo, &r, batch_id.as_deref(), true);
    let cancel = CancellationToken::new();
    let running = start_engine(config_path, &repo, no_mcp, &fake, docker, &cancel).await?;
    let store = running.engine.store(&repo, r.runs_dir.as_deref());
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), true);
    let printer = super::printer::spawn(rx, json_out, cancel.clone());
    let result = running
        .engine
        .answer(&store, &task_ref, text, tx, cancel)
        .await;
    running.stop();
    let mut printer = printer.await?;
    let r = result?;
    if !json_out && let Some(c) = &r.continuation {
        // The answer's streamed text may end without a newline (Gemini's deltas).
        printer.finish();
        outln!("({})", c.reason);
    }
    printer.result(&r, batch_id.as_deref(), started.elapsed())?;
    Ok(finish(&r))
}

/// The answer on stdin (`aicli answer TASK -`): at most 1 MiB, UTF-8.
fn read_stdin_answer() -> anyhow::Result<String> {
    use std::io::Read;
    const MAX: u64 = 1 << 20;
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX + 1)
        .read_to_end(&mut buf)
        .map_err(|e| usage(format!("cannot read the answer from stdin: {e}")))?;
    if buf.len() as u64 > MAX {
        return Err(usage("the answer on stdin is over 1 MiB"));
    }
    String::from_utf8(buf).map_err(|_| usage("the answer on stdin is not UTF-8"))
}

/// `BATCH/TASK` for a bare task id, picked the way the engine picks it: the one batch
/// where the task is blocked, else the newest batch that holds it. `None` when no batch
/// holds it, or several hold it blocked (the engine then says which to name).
fn qualified(store: &RunStore, task: &str) -> Option<String> {
    let found = store.find_tasks(task);
    let blocked: Vec<_> = found
        .iter()
        .filter(|(b, t)| b.task(t).is_ok_and(|r| r.state == TaskState::Blocked))
        .collect();
    let (batch, id) = match blocked.as_slice() {
        [one] => *one,
        [] => found.first()?,
        _ => return None,
    };
    Some(format!("{}/{id}", batch.batch_id()))
}
