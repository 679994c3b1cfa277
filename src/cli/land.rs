//! `aicli land TASK|BATCH`: a task's work (or every succeeded task of a batch, in its
//! order) into the branch checked out in the repository, or `--into BRANCH`; `--push`
//! sends the result (or with `--branches-only` the task branches, for pull requests) to
//! a remote; `--prune` removes a landed task's worktree and branch.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::RepoArgs;
use super::common::{engine, repo_dir, usage};
use crate::deliver::land::{LandHow, LandReport, LandTask, SkippedTask};
use crate::record::{BatchRecord, LandRecord, TaskRecord, TaskState, Write};
use crate::util::count;

/// `aicli land` flags.
#[derive(Debug, Clone, Args)]
pub struct LandArgs {
    /// A task (`TASK`: its newest batch, or `BATCH/TASK`), or a batch (`BATCH`: its
    /// succeeded tasks, in order).
    target: String,
    /// The branch to land into (default: the one checked out in the repository).
    #[arg(long, value_name = "BRANCH")]
    into: Option<String>,
    /// A merge commit per task, its commits kept (the default).
    #[arg(long, conflicts_with_all = ["squash", "rebase"])]
    merge: bool,
    /// One commit per task with its whole change.
    #[arg(long, conflicts_with = "rebase")]
    squash: bool,
    /// The task's commits replayed one by one on the branch.
    #[arg(long)]
    rebase: bool,
    /// Then push the branch landed into to REMOTE (with --branches-only: the task
    /// branches, landing nothing, for pull requests).
    #[arg(long, value_name = "REMOTE")]
    push: Option<String>,
    /// With --push: push the task branches as they are instead of landing them.
    #[arg(long, requires = "push")]
    branches_only: bool,
    /// Remove each landed task's worktree and branch (a worktree with changes made since
    /// is kept, and said).
    #[arg(long, conflicts_with = "branches_only")]
    prune: bool,
    /// Hand each task that conflicts back to its agent: its session resumes in its
    /// worktree, where the branch's changes are merged with conflict markers, to resolve
    /// them; its resolution is committed and the land tried again, once.
    #[arg(long, conflicts_with = "branches_only")]
    resolve: bool,
    /// Print what happened as one JSON object.
    #[arg(long)]
    json: bool,
    /// With --resolve: the fake model APIs the agents talk to (default: the ones the
    /// batch ran against, if it did).
    #[command(flatten)]
    fake: super::fake::FakeApiArgs,
}

pub(super) async fn land(
    config_path: Option<&Path>,
    a: LandArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let (batch, tasks, mut skipped) = pick(&store, &a.target)?;
    let spec = batch.spec().map_err(usage)?;
    if !spec.worktrees {
        return Err(usage(format!(
            "batch {} ran without worktrees: its changes are in {} already",
            batch.batch_id(),
            spec.repo.display()
        )));
    }
    let here = &spec.repo;
    if a.branches_only {
        return push_branches(here, a.push.as_deref().unwrap_or_default(), &tasks, a.json).await;
    }
    let how = if a.squash {
        LandHow::Squash
    } else if a.rebase {
        LandHow::Rebase
    } else {
        LandHow::Merge
    };
    let author = crate::deliver::commit::author(here, &engine.config().engine.commit).await;
    let to_land: Vec<LandTask> = tasks
        .iter()
        .filter_map(|t| {
            Some(LandTask {
                batch_id: batch.batch_id(),
                task_id: t.task.id.clone(),
                branch: t.branch.clone()?,
                title: t
                    .task
                    .prompt
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .unwrap_or("")
                    .to_owned(),
            })
        })
        .collect();
    for t in tasks.iter().filter(|t| t.branch.is_none()) {
        skipped.push(SkippedTask {
            task: format!("{}/{}", batch.batch_id(), t.task.id),
            reason: "no work: its run changed nothing".to_owned(),
            conflicts: Vec::new(),
        });
    }
    let mut report = crate::deliver::land::land(here, a.into.as_deref(), &to_land, how, &author)
        .await
        .map_err(|e| match e {
            crate::deliver::land::LandError::Git(g) => anyhow::Error::new(g),
            e => usage(e.to_string()),
        })?;
    report.skipped.splice(0..0, skipped);
    // A task landed before whose branch was pruned since: landed, not lost.
    for sk in &mut report.skipped {
        let rec = tasks
            .iter()
            .find(|t| format!("{}/{}", batch.batch_id(), t.task.id) == sk.task);
        if let Some(l) = rec.and_then(|t| t.landed.as_ref())
            && sk.reason.starts_with("no work")
        {
            sk.reason = format!(
                "already landed into {} ({}, {})",
                l.into,
                l.how.as_str(),
                l.at
            );
        }
    }
    let mut notes = Vec::new();
    if a.resolve {
        let x = super::resolve::Resolving {
            config_path,
            r: &r,
            repo: here,
            batch: &batch,
            how,
            author: &author,
            fake: a.fake,
            json: a.json,
        };
        notes.extend(super::resolve::resolve(x, &mut report).await?);
    }
    for l in &report.landed {
        // Read again: a resolution ran attempts since.
        let id = l.task.rsplit('/').next().unwrap_or_default();
        let Ok(mut rec) = batch.task(id) else {
            continue;
        };
        let t = &mut rec;
        t.landed = Some(LandRecord {
            into: report.target.clone(),
            how,
            head: l.head.clone(),
            commit: l.commit.clone(),
            at: crate::util::now_rfc3339(),
        });
        if a.prune {
            notes.extend(prune(here, t).await);
        }
        batch
            .write_task(t, Write::Settled)
            .map_err(anyhow::Error::new)?;
    }
    if let Some(remote) = &a.push
        && !report.landed.is_empty()
    {
        let spec = format!("refs/heads/{0}:refs/heads/{0}", report.target);
        crate::worktree::git(here, &["push", "--quiet", remote, &spec]).await?;
        notes.push(format!("pushed {} to {remote}", report.target));
    }
    print(&report, &notes, a.json);
    Ok(
        if report
            .skipped
            .iter()
            .any(|s| !s.reason.starts_with("already"))
        {
            ExitCode::from(4)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// The batch and the tasks `target` names (a batch: its succeeded tasks, the others
/// skipped with their state; a task: it, unless it runs).
fn pick(
    store: &crate::record::RunStore,
    target: &str,
) -> anyhow::Result<(BatchRecord, Vec<TaskRecord>, Vec<SkippedTask>)> {
    if !target.contains('/')
        && let Ok(batch) = store.open_batch(target)
    {
        let all = batch.tasks().map_err(usage)?;
        let (ok, not): (Vec<TaskRecord>, Vec<TaskRecord>) = all
            .into_iter()
            .partition(|t| t.state == TaskState::Succeeded);
        let skipped = not
            .iter()
            .map(|t| SkippedTask {
                task: format!("{}/{}", batch.batch_id(), t.task.id),
                reason: format!(
                    "{}: land it alone (aicli land {}/{}) to take its work anyway",
                    t.state.as_str(),
                    batch.batch_id(),
                    t.task.id
                ),
                conflicts: Vec::new(),
            })
            .collect();
        return Ok((batch, ok, skipped));
    }
    let Some((batch, id)) = store.find_tasks(target).into_iter().next() else {
        return Err(usage(format!(
            "no task or batch '{target}' in {} (`aicli runs` lists them)",
            store.root().display()
        )));
    };
    let rec = batch.task(&id).map_err(usage)?;
    if matches!(rec.state, TaskState::Running | TaskState::Queued) {
        return Err(usage(format!(
            "{}/{id} is {}: wait for it to end (or aicli cancel it), then land it",
            batch.batch_id(),
            rec.state.as_str()
        )));
    }
    Ok((batch, vec![rec], Vec::new()))
}

/// Removes a landed task's worktree and branch when the worktree holds nothing else.
async fn prune(repo: &Path, t: &mut TaskRecord) -> Option<String> {
    let (Some(w), Some(b)) = (t.worktree.clone(), t.branch.clone()) else {
        return None;
    };
    let r = crate::worktree::Repo::open(repo).await.ok()?;
    match r.remove_landed(&w, &b).await {
        Ok(None) => {
            t.worktree = None;
            Some(format!("{}: worktree and branch {b} removed", t.task.id))
        }
        Ok(Some(why)) => Some(format!(
            "{}: worktree kept ({why}) at {}",
            t.task.id,
            w.display()
        )),
        Err(e) => Some(format!("{}: worktree kept: {e}", t.task.id)),
    }
}

/// `--push REMOTE --branches-only`: each task's branch as it is.
async fn push_branches(
    repo: &Path,
    remote: &str,
    tasks: &[TaskRecord],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut pushed = Vec::new();
    for b in tasks.iter().filter_map(|t| t.branch.as_deref()) {
        let spec = format!("refs/heads/{b}:refs/heads/{b}");
        crate::worktree::git(repo, &["push", "--quiet", remote, &spec]).await?;
        pushed.push(b.to_owned());
    }
    if json {
        outln!(
            "{}",
            serde_json::json!({"remote": remote, "pushed": pushed})
        );
    } else {
        for b in &pushed {
            outln!("pushed {b} to {remote}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print(report: &LandReport, notes: &[String], json: bool) {
    if json {
        let mut v = serde_json::to_value(report).unwrap_or_default();
        v["notes"] = serde_json::json!(notes);
        outln!("{v}");
        return;
    }
    for l in &report.landed {
        outln!(
            "✔ {} landed into {} ({}, now at {})",
            l.task,
            report.target,
            l.how.as_str(),
            &l.commit[..l.commit.len().min(10)]
        );
    }
    for s in &report.skipped {
        outln!("✘ {} not landed: {}", s.task, s.reason);
    }
    for n in notes {
        outln!("  {n}");
    }
    let moved = if report.after == report.before {
        format!(
            "{} unchanged at {}",
            report.target,
            &report.before[..report.before.len().min(10)]
        )
    } else {
        format!(
            "{} moved {} → {}",
            report.target,
            &report.before[..report.before.len().min(10)],
            &report.after[..report.after.len().min(10)]
        )
    };
    outln!(
        "{} landed, {} not · {moved}",
        count(report.landed.len() as u64, "task", "tasks"),
        report.skipped.len()
    );
}
