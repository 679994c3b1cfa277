//! Overlaps between a batch's tasks, before anyone merges: pairs of task branches that
//! change the same files, and each task branch against the target branch's current head
//! where the target changed those files too, each checked by a real trial merge (`git
//! merge-tree --write-tree`, which touches no worktree and no ref), not guessed from the
//! file names.

use std::collections::BTreeSet;
use std::path::Path;

use crate::record::{Overlap, OverlapWith};
use crate::worktree::{WorktreeError, git, git_output_capped};

/// The most of a file list read per branch.
const MAX_LIST_BYTES: usize = 4 << 20;

/// A task's work: its branch over its base.
#[derive(Debug, Clone)]
pub(crate) struct TaskWork {
    /// The task.
    pub task: String,
    /// The commit it started from.
    pub base: String,
    /// Its branch.
    pub branch: String,
}

/// The overlaps among `tasks` (in the batch's order) and with the branch checked out in
/// `repo` (its head as it is now); a task whose branch changes nothing has none.
pub(crate) async fn find(repo: &Path, tasks: &[TaskWork]) -> Result<Vec<Overlap>, WorktreeError> {
    let mut changed = Vec::new();
    for t in tasks {
        let files = names(repo, &t.base, &t.branch).await?;
        if !files.is_empty() {
            changed.push((t, files));
        }
    }
    let mut out = Vec::new();
    for (i, (a, fa)) in changed.iter().enumerate() {
        for (b, fb) in &changed[i + 1..] {
            let files: Vec<String> = fa.intersection(fb).cloned().collect();
            if files.is_empty() {
                continue;
            }
            let conflicts = trial_merge(repo, &a.branch, &b.branch).await?;
            out.push(Overlap {
                task: a.task.clone(),
                with: OverlapWith::Task {
                    id: b.task.clone(),
                },
                files,
                conflicts,
            });
        }
    }
    let (head, target) = target(repo).await?;
    // What the target changed since each base its tasks started from (most share one).
    let mut moved_since: std::collections::HashMap<&str, BTreeSet<String>> = Default::default();
    for (t, files) in &changed {
        if t.base == head {
            continue;
        }
        if !moved_since.contains_key(t.base.as_str()) {
            let moved = names(repo, &t.base, &head).await?;
            moved_since.insert(&t.base, moved);
        }
        let moved = &moved_since[t.base.as_str()];
        let files: Vec<String> = files.intersection(moved).cloned().collect();
        if files.is_empty() {
            continue;
        }
        let conflicts = trial_merge(repo, &head, &t.branch).await?;
        out.push(Overlap {
            task: t.task.clone(),
            with: target.clone(),
            files,
            conflicts,
        });
    }
    Ok(out)
}

/// The head of the branch checked out in `repo`, and that branch as an overlap's other
/// side (no name when HEAD is detached).
async fn target(repo: &Path) -> Result<(String, OverlapWith), WorktreeError> {
    let head = git(repo, &["rev-parse", "HEAD"]).await?;
    let branch = git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"]).await.ok();
    let with = OverlapWith::Target {
        branch,
        head: head.clone(),
    };
    Ok((head, with))
}

/// The files `to` changes over `from`.
async fn names(repo: &Path, from: &str, to: &str) -> Result<BTreeSet<String>, WorktreeError> {
    let args = ["diff", "--name-only", "-z", "--no-renames", from, to];
    let (out, _) = git_output_capped(repo, &args, &[0], MAX_LIST_BYTES).await?;
    Ok(out
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

/// The files a merge of `a` and `b` conflicts on (none: it merges cleanly), from a trial
/// merge that writes only objects.
pub(crate) async fn trial_merge(repo: &Path, a: &str, b: &str) -> Result<Vec<String>, WorktreeError> {
    let args = ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", a, b];
    // 0: clean; 1: conflicts.
    let (out, _) = git_output_capped(repo, &args, &[0, 1], MAX_LIST_BYTES).await?;
    // The tree's id, then each conflicted file once (with -z, NUL-terminated), then the
    // messages (none asked for).
    let mut files: Vec<String> = out
        .split(|&b| b == 0)
        .skip(1)
        .take_while(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    files.dedup();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@e"])
            .args(args)
            .output()
            .unwrap();
        assert!(ok.status.success(), "{args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    }

    fn commit_on(r: &Path, branch: &str, file: &str, text: &str) {
        run(r, &["checkout", "-q", branch]);
        std::fs::write(r.join(file), text).unwrap();
        run(r, &["add", "."]);
        run(r, &["commit", "-qm", file]);
    }

    #[tokio::test]
    async fn pairs_that_touch_the_same_files_are_merged_on_trial() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        run(r, &["init", "-q", "-b", "main"]);
        std::fs::write(r.join("a.txt"), "1\n2\n3\n4\n5\n6\n").unwrap();
        std::fs::write(r.join("b.txt"), "b\n").unwrap();
        run(r, &["add", "."]);
        run(r, &["commit", "-qm", "base"]);
        let base = git(r, &["rev-parse", "HEAD"]).await.unwrap();
        for b in ["x", "y", "z", "w"] {
            run(r, &["branch", b]);
        }
        // x and y edit the same line; z another line of the same file; w another file.
        commit_on(r, "x", "a.txt", "ONE\n2\n3\n4\n5\n6\n");
        commit_on(r, "y", "a.txt", "uno\n2\n3\n4\n5\n6\n");
        commit_on(r, "z", "a.txt", "1\n2\n3\n4\n5\nSIX\n");
        commit_on(r, "w", "c.txt", "c\n");
        // The target moved too: it changed b.txt, which w does not touch, and a.txt's
        // last line, as z did (differently).
        commit_on(r, "main", "a.txt", "1\n2\n3\n4\n5\nsix\n");
        let work = |t: &str| TaskWork {
            task: t.to_owned(),
            base: base.clone(),
            branch: t.to_owned(),
        };
        let found = find(r, &[work("x"), work("y"), work("z"), work("w")]).await.unwrap();
        let seen: Vec<(String, String, Vec<String>)> = found
            .iter()
            .map(|o| {
                let with = match &o.with {
                    OverlapWith::Task { id } => id.clone(),
                    OverlapWith::Target { branch, .. } => format!("target {}", branch.clone().unwrap()),
                };
                (o.task.clone(), with, o.conflicts.clone())
            })
            .collect();
        let a = vec!["a.txt".to_owned()];
        assert_eq!(
            seen,
            vec![
                ("x".into(), "y".into(), a.clone()),
                ("x".into(), "z".into(), vec![]),
                ("y".into(), "z".into(), vec![]),
                ("x".into(), "target main".into(), vec![]),
                ("y".into(), "target main".into(), vec![]),
                ("z".into(), "target main".into(), a.clone()),
            ]
        );
        assert!(found.iter().all(|o| o.files == a));
        // Nothing was touched: main is checked out, clean, at its head.
        assert_eq!(git(r, &["status", "--porcelain"]).await.unwrap(), "");
    }
}
