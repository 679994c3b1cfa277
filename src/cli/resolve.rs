//! `aicli land --resolve`: each task a land skipped for a conflict with the target is
//! handed back to its agent. The target's head is merged into the task's worktree
//! (conflict markers left in it), the task's CLI session resumes with a prompt naming
//! the files and showing the markers ([`crate::deliver::resolve`]), its work is
//! committed as every attempt's is, and the land is tried again, once. A resolution that
//! leaves markers (or no commit) is undone: the worktree and branch are as before.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::RepoArgs;
use super::common::{batch_containers, recorded_fake, start_engine};
use super::fake::FakeApiArgs;
use crate::deliver::land::{LandHow, LandReport, LandTask, SkippedTask};
use crate::record::BatchRecord;

/// What `--resolve` needs besides the report.
pub(super) struct Resolving<'a> {
    pub config_path: Option<&'a Path>,
    pub r: &'a RepoArgs,
    pub repo: &'a Path,
    pub batch: &'a BatchRecord,
    pub how: LandHow,
    pub author: &'a aicli_providers::CommitAuthor,
    pub fake: FakeApiArgs,
    pub json: bool,
}

/// Resolves the conflicts `report` skipped, landing what resolves; returns what it said
/// of each.
pub(super) async fn resolve(
    x: Resolving<'_>,
    report: &mut LandReport,
) -> anyhow::Result<Vec<String>> {
    let conflicting: Vec<SkippedTask> = report
        .skipped
        .iter()
        .filter(|s| !s.conflicts.is_empty())
        .cloned()
        .collect();
    let mut notes = Vec::new();
    if conflicting.is_empty() {
        return Ok(notes);
    }
    let batch_id = x.batch.batch_id();
    let docker = batch_containers(x.config_path, x.repo, x.r, &batch_id);
    let fake = recorded_fake(x.fake, x.config_path, x.repo, x.r, Some(&batch_id), false);
    let cancel = CancellationToken::new();
    super::common::ctrl_c_cancels(cancel.clone(), true);
    let running = start_engine(x.config_path, x.repo, false, &fake, docker, &cancel).await?;
    let store = running.engine.store(x.repo, x.r.runs_dir.as_deref());
    for s in conflicting {
        let id = s.task.rsplit('/').next().unwrap_or_default().to_owned();
        let rec = x.batch.task(&id).map_err(anyhow::Error::msg)?;
        let (Some(wt), Some(branch)) = (rec.worktree.clone(), rec.branch.clone()) else {
            notes.push(format!(
                "{}: not resolved: it has no worktree to resolve in",
                s.task
            ));
            continue;
        };
        let Some(p) = crate::deliver::resolve::prepare(&wt, &report.target, &report.after).await?
        else {
            notes.push(format!(
                "{}: merges cleanly with {} now",
                s.task, report.target
            ));
            continue;
        };
        if !x.json {
            eprintln!(
                "aicli: {}: handing the conflict on {} back to its agent (its session resumes in {})",
                s.task,
                p.files.join(", "),
                wt.display()
            );
        }
        let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
        let printer = super::printer::spawn(rx, x.json, cancel.clone());
        let ran = running
            .engine
            .resolve(&store, &s.task, &p.prompt, tx, cancel.clone())
            .await;
        let mut printer = printer.await?;
        printer.finish();
        let ok = match ran {
            Ok(r) if r.success => crate::deliver::resolve::check(&wt, &p).await?,
            Ok(r) => {
                crate::deliver::resolve::abandon(&wt, &p.before).await?;
                Err(format!("its run failed ({})", r.error.unwrap_or_default()))
            }
            Err(e) => {
                crate::deliver::resolve::abandon(&wt, &p.before).await?;
                Err(e.to_string())
            }
        };
        if let Err(why) = ok {
            notes.push(format!(
                "{}: not resolved: {why} (its branch is as it was)",
                s.task
            ));
            continue;
        }
        let task = LandTask {
            batch_id: batch_id.clone(),
            task_id: id,
            branch,
            title: rec
                .task
                .prompt
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_owned(),
        };
        let again =
            crate::deliver::land::land(x.repo, Some(&report.target), &[task], x.how, x.author)
                .await?;
        match again.landed.into_iter().next() {
            Some(l) => {
                notes.push(format!("{}: resolved by its agent, then landed", s.task));
                report.skipped.retain(|k| k.task != s.task);
                report.after = again.after;
                report.landed.push(l);
            }
            None => notes.push(format!(
                "{}: resolved, but the land still does not apply: {}",
                s.task,
                again
                    .skipped
                    .first()
                    .map(|k| k.reason.as_str())
                    .unwrap_or("")
            )),
        }
    }
    running.stop();
    Ok(notes)
}
