//! Landing: a task's commits into a target branch (the one checked out in the
//! repository, or `--into`), by merge, squash or rebase.
//!
//! Every new commit is made with git's plumbing (`merge-tree --write-tree`,
//! `commit-tree`): no worktree, index or ref changes while they are made, so a land that
//! stops (a conflict, an error) leaves nothing half-done, and the repository is never
//! mid-merge or mid-rebase. Only then does the target move, once: by a fast-forward of
//! the checkout that has it (`merge --ff-only`, which refuses rather than touch the
//! user's uncommitted changes, and then nothing moved), or by a compare-and-swap of the
//! ref when no checkout has it.

use std::path::{Path, PathBuf};

use aicli_providers::CommitAuthor;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::overlaps::trial_merge;
pub use crate::record::LandHow;
use crate::worktree::{WorktreeError, git, git_with_input};

/// A task to land.
#[derive(Debug, Clone)]
pub struct LandTask {
    /// Its batch.
    pub batch_id: String,
    /// Its id.
    pub task_id: String,
    /// Its branch.
    pub branch: String,
    /// The first line of its prompt (for a merge or squash commit's subject).
    pub title: String,
}

/// What a land did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LandReport {
    /// The target branch.
    pub target: String,
    /// Its head before.
    pub before: String,
    /// Its head after (the same when nothing landed).
    pub after: String,
    /// The tasks that landed, in order.
    pub landed: Vec<LandedTask>,
    /// The tasks that did not, and why.
    pub skipped: Vec<SkippedTask>,
}

/// A task that landed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LandedTask {
    /// The task (`BATCH/TASK`).
    pub task: String,
    /// How.
    pub how: LandHow,
    /// Its branch's head that landed.
    pub head: String,
    /// The target's head once it had landed.
    pub commit: String,
}

/// A task that did not land.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SkippedTask {
    /// The task (`BATCH/TASK`).
    pub task: String,
    /// Why, in words.
    pub reason: String,
    /// The files a merge conflicts on, when that is why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// Why a land did not happen at all.
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    /// No target named and HEAD is detached.
    #[error("HEAD is detached in {0}: name the branch to land into with --into")]
    Detached(PathBuf),
    /// The target branch does not exist.
    #[error("no branch '{0}' to land into")]
    NoTarget(String),
    /// Moving the target would touch the user's uncommitted changes (or the target moved
    /// meanwhile): nothing moved.
    #[error("nothing landed: {0}")]
    Refused(String),
    /// git failed.
    #[error(transparent)]
    Git(#[from] WorktreeError),
}

/// The branch checked out in `repo`, when HEAD is on one.
pub(crate) async fn current_branch(repo: &Path) -> Option<String> {
    git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"]).await.ok()
}

/// Lands `tasks` in order into `target` (default: the branch checked out in `repo`):
/// every one that applies cleanly on what landed before it; those that conflict are
/// skipped with their files. `author` signs the new commits.
pub async fn land(
    repo: &Path,
    target: Option<&str>,
    tasks: &[LandTask],
    how: LandHow,
    author: &CommitAuthor,
) -> Result<LandReport, LandError> {
    let target = match target {
        Some(t) => t.to_owned(),
        None => current_branch(repo)
            .await
            .ok_or_else(|| LandError::Detached(repo.to_path_buf()))?,
    };
    let target_ref = format!("refs/heads/{target}");
    let before = git(repo, &["rev-parse", "--verify", "--quiet", &target_ref])
        .await
        .map_err(|_| LandError::NoTarget(target.clone()))?;
    let mut report = LandReport {
        target: target.clone(),
        before: before.clone(),
        after: before.clone(),
        landed: Vec::new(),
        skipped: Vec::new(),
    };
    let mut head = before.clone();
    for t in tasks {
        let name = format!("{}/{}", t.batch_id, t.task_id);
        let skip = |reason: String, conflicts: Vec<String>| SkippedTask {
            task: name.clone(),
            reason,
            conflicts,
        };
        let Ok(tip) = git(repo, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", t.branch)]).await else {
            report.skipped.push(skip("no work: its branch is gone".to_owned(), Vec::new()));
            continue;
        };
        if is_ancestor(repo, &tip, &head).await? {
            report.skipped.push(skip(format!("already in {target}"), Vec::new()));
            continue;
        }
        let conflicts = trial_merge(repo, &head, &tip).await?;
        if !conflicts.is_empty() {
            report.skipped.push(skip(
                format!("conflicts with {target} on {}", conflicts.join(", ")),
                conflicts,
            ));
            continue;
        }
        head = match how {
            LandHow::Merge | LandHow::Squash => merged(repo, &head, &tip, t, how, author).await?,
            LandHow::Rebase => match rebased(repo, &head, &tip, author).await? {
                Ok(h) => h,
                Err(why) => {
                    report.skipped.push(skip(why, Vec::new()));
                    continue;
                }
            },
        };
        report.landed.push(LandedTask {
            task: name,
            how,
            head: tip,
            commit: head.clone(),
        });
    }
    if head != before {
        move_target(repo, &target, &before, &head).await?;
        report.after = head;
    }
    Ok(report)
}

/// Whether `a` is an ancestor of `b` (or `b` itself).
async fn is_ancestor(repo: &Path, a: &str, b: &str) -> Result<bool, WorktreeError> {
    let args = ["merge-base", "--is-ancestor", a, b];
    let (code, _) = git_with_input(repo, &args, &[], b"", &[0, 1]).await?;
    Ok(code == 0)
}

/// The tree of a clean trial merge of `b` into `a` (with `--merge-base=BASE` when
/// given); `None` when it conflicts.
async fn merge_tree(
    repo: &Path,
    base: Option<&str>,
    a: &str,
    b: &str,
) -> Result<Option<String>, WorktreeError> {
    let base = base.map(|c| format!("--merge-base={c}"));
    let mut args = vec!["merge-tree", "--write-tree"];
    args.extend(base.as_deref());
    args.extend([a, b]);
    let (code, out) = git_with_input(repo, &args, &[], b"", &[0, 1]).await?;
    let tree = String::from_utf8_lossy(&out).lines().next().unwrap_or("").to_owned();
    Ok((code == 0 && !tree.is_empty()).then_some(tree))
}

/// The commit of `tip` merged (or squashed) onto `head`, made from their trial merge's
/// tree.
async fn merged(
    repo: &Path,
    head: &str,
    tip: &str,
    t: &LandTask,
    how: LandHow,
    author: &CommitAuthor,
) -> Result<String, WorktreeError> {
    // Checked clean by the trial merge before.
    let tree = merge_tree(repo, None, head, tip).await?.unwrap_or_default();
    let subject = match how {
        LandHow::Squash => format!("{}: {}", t.task_id, t.title),
        LandHow::Merge | LandHow::Rebase => format!("Merge aicli task {}: {}", t.task_id, t.title),
    };
    let message = format!(
        "{}\n\nAicli-Task: {}\nAicli-Batch: {}\nAicli-Landed: {}\n",
        subject.trim_end(),
        t.task_id,
        t.batch_id,
        how.as_str(),
    );
    let mut args = vec!["commit-tree", tree.as_str(), "-p", head];
    if how == LandHow::Merge {
        args.extend(["-p", tip]);
    }
    commit_tree(repo, &args, &message, &identity(author, None)).await
}

/// `tip`'s commits since it forked from `head`'s line, replayed on `head` one by one (a
/// trial merge per commit, `--merge-base` its parent); `Err(why)` for a commit that does
/// not replay (a merge commit, a conflict on the way).
async fn rebased(
    repo: &Path,
    head: &str,
    tip: &str,
    author: &CommitAuthor,
) -> Result<Result<String, String>, WorktreeError> {
    let list = git(repo, &["rev-list", "--reverse", "--parents", &format!("{head}..{tip}")]).await?;
    let mut on = head.to_owned();
    for line in list.lines() {
        let ids: Vec<&str> = line.split_whitespace().collect();
        let [c, parent] = ids[..] else {
            let c = ids.first().copied().unwrap_or("");
            return Ok(Err(format!(
                "its commit {} is a merge: land it with --merge or --squash",
                &c[..10.min(c.len())]
            )));
        };
        let Some(tree) = merge_tree(repo, Some(parent), &on, c).await? else {
            return Ok(Err(format!(
                "its commit {} does not replay cleanly on the target: land it with --merge or --squash",
                &c[..10.min(c.len())]
            )));
        };
        let meta = git(repo, &["log", "-1", "--format=%an%x00%ae%x00%ad%x00%B", "--date=raw", c]).await?;
        let mut f = meta.splitn(4, '\0');
        let (name, email, date, body) = (
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
        );
        let original = CommitAuthor {
            name: name.to_owned(),
            email: email.to_owned(),
        };
        let mut env = identity(&original, Some(date));
        // The committer is whoever lands it.
        env[2] = ("GIT_COMMITTER_NAME", author.name.clone());
        env[3] = ("GIT_COMMITTER_EMAIL", author.email.clone());
        on = commit_tree(repo, &["commit-tree", &tree, "-p", &on], body, &env).await?;
    }
    Ok(Ok(on))
}

/// `author` as git's environment (as author and committer), with an author date.
fn identity(author: &CommitAuthor, date: Option<&str>) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("GIT_AUTHOR_NAME", author.name.clone()),
        ("GIT_AUTHOR_EMAIL", author.email.clone()),
        ("GIT_COMMITTER_NAME", author.name.clone()),
        ("GIT_COMMITTER_EMAIL", author.email.clone()),
    ];
    if let Some(d) = date {
        v.push(("GIT_AUTHOR_DATE", d.to_owned()));
    }
    v
}

async fn commit_tree(
    repo: &Path,
    args: &[&str],
    message: &str,
    env: &[(&'static str, String)],
) -> Result<String, WorktreeError> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = [&["-c", "commit.gpgsign=false"][..], args, &["-F", "-"][..]].concat();
    let (_, out) = git_with_input(repo, &args, &env, message.as_bytes(), &[0]).await?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

/// Moves `target` from `before` to `head`: a fast-forward of the checkout that has it
/// (refused, with nothing moved, when it would touch uncommitted changes), else a
/// compare-and-swap of the ref.
async fn move_target(repo: &Path, target: &str, before: &str, head: &str) -> Result<(), LandError> {
    let list = git(repo, &["worktree", "list", "--porcelain"]).await?;
    let want = format!("branch refs/heads/{target}");
    let checkout = list.split("\n\n").find_map(|block| {
        let mut lines = block.lines();
        let path = lines.next()?.strip_prefix("worktree ")?;
        lines.any(|l| l == want).then(|| PathBuf::from(path))
    });
    match checkout {
        Some(w) => {
            let args = ["-c", "core.hooksPath=/dev/null", "merge", "--ff-only", "--quiet", head];
            git(&w, &args).await.map_err(|e| match e {
                WorktreeError::Git { stderr, .. } => LandError::Refused(format!(
                    "{target} is checked out in {} and moving it would touch what is there: {stderr}",
                    w.display()
                )),
                e => LandError::Git(e),
            })?;
            Ok(())
        }
        None => {
            let r = format!("refs/heads/{target}");
            git(repo, &["update-ref", "-m", "aicli land", &r, head, before])
                .await
                .map_err(|e| LandError::Refused(format!("{target} moved meanwhile: {e}")))?;
            Ok(())
        }
    }
}
