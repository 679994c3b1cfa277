//! Discarding a task's work: its worktree and branch removed, after saying what that
//! loses (commits no other branch has and that never landed, changes in the worktree).

use std::path::Path;

use crate::record::TaskRecord;
use crate::util::count;
use crate::worktree::{WorktreeError, git};

/// What discarding a task would lose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lost {
    /// Commits of its branch that no other branch has and that did not land.
    pub commits: u64,
    /// What they change, when there are any (`+12 −3 in 4 files`).
    pub change: Option<String>,
    /// Changes in its worktree.
    pub uncommitted: u64,
}

impl Lost {
    /// Whether anything would be lost.
    pub fn is_nothing(&self) -> bool {
        self.commits == 0 && self.uncommitted == 0
    }

    /// In words: `2 commits not landed (+12 −3 in 4 files) and 1 uncommitted change`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.commits > 0 {
            let change = self.change.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
            parts.push(format!("{} not landed{change}", count(self.commits, "commit", "commits")));
        }
        if self.uncommitted > 0 {
            parts.push(count(self.uncommitted, "uncommitted change", "uncommitted changes"));
        }
        if parts.is_empty() {
            "nothing (its work landed, or there was none)".to_owned()
        } else {
            parts.join(" and ")
        }
    }
}

/// What discarding `rec` (a task of the repository `repo`) would lose now.
pub async fn lost(repo: &Path, rec: &TaskRecord) -> Result<Lost, WorktreeError> {
    let mut lost = Lost::default();
    if let Some(b) = &rec.branch {
        let r = format!("refs/heads/{b}");
        if let Ok(head) = git(repo, &["rev-parse", "--verify", "--quiet", &r]).await
            && rec.landed.as_ref().is_none_or(|l| l.head != head)
        {
            let exclude = format!("--exclude={b}");
            let n = git(repo, &["rev-list", "--count", &r, "--not", &exclude, "--branches"]).await?;
            lost.commits = n.trim().parse().unwrap_or(0);
            if lost.commits > 0
                && let Some(base) = &rec.base_commit
            {
                lost.change = Some(super::diff::stat(repo, base, &head).await?.short());
            }
        }
    }
    if let Some(w) = rec.worktree.as_deref().filter(|w| w.join(".git").exists()) {
        let s = git(w, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"]).await?;
        lost.uncommitted = s.lines().filter(|l| !l.is_empty()).count() as u64;
    }
    Ok(lost)
}
