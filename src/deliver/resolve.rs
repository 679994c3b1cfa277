//! A land's conflict handed back to the agent (`aicli land --resolve`): the target's
//! head merged into the task's worktree, leaving git's conflict markers; a prompt that
//! names the conflicted files and shows the markers; after the agent's run (whose work
//! is committed as every attempt's, which concludes the merge), a check that the
//! conflict is gone, or the worktree and branch put back as they were.

use std::path::Path;

use crate::worktree::{WorktreeError, git, git_with_input};

/// The most of one file's conflict shown in the prompt, lines.
const LINES_PER_FILE: usize = 80;
/// The most of all files' conflicts shown, bytes.
const PROMPT_BYTES: usize = 24 * 1024;

/// A conflict made ready in a task's worktree.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The files git could not merge.
    pub files: Vec<String>,
    /// The prompt that hands them to the agent.
    pub prompt: String,
    /// The task branch's head before the merge (what an unresolved conflict goes back
    /// to).
    pub before: String,
}

/// Merges `head` (the target `target`'s head) into the worktree `wt`, leaving the
/// conflicts in it; `None` when it merges cleanly after all (nothing is left then).
pub async fn prepare(wt: &Path, target: &str, head: &str) -> Result<Option<Prepared>, WorktreeError> {
    let before = git(wt, &["rev-parse", "HEAD"]).await?;
    let args = [
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "user.name=aicli",
        "-c",
        "user.email=aicli@localhost",
        "merge",
        "--no-ff",
        "--no-commit",
        "--quiet",
        head,
    ];
    let (code, _) = git_with_input(wt, &args, &[], b"", &[0, 1]).await?;
    let list = git(wt, &["diff", "--name-only", "--diff-filter=U"]).await?;
    let files: Vec<String> = list.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    if code == 0 || files.is_empty() {
        abandon(wt, &before).await?;
        return Ok(None);
    }
    let prompt = prompt(wt, target, &files);
    Ok(Some(Prepared {
        files,
        prompt,
        before,
    }))
}

/// After the agent's run: `Ok(())` when the merge is concluded (committed) and no file
/// that conflicted holds a marker; else why, with the worktree and branch put back to
/// `p.before`.
pub async fn check(wt: &Path, p: &Prepared) -> Result<Result<(), String>, WorktreeError> {
    let merging = git(wt, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"]).await.is_ok();
    let why = if merging {
        Some("the agent's run ended with the merge not committed".to_owned())
    } else {
        let marked: Vec<&String> = p.files.iter().filter(|f| has_markers(&wt.join(f))).collect();
        (!marked.is_empty()).then(|| {
            let names: Vec<&str> = marked.iter().map(|s| s.as_str()).collect();
            format!("conflict markers are left in {}", names.join(", "))
        })
    };
    match why {
        None => Ok(Ok(())),
        Some(why) => {
            abandon(wt, &p.before).await?;
            Ok(Err(why))
        }
    }
}

/// Puts the worktree and its branch back at `before`: the merge aborted, what the
/// resolution committed or left undone.
pub async fn abandon(wt: &Path, before: &str) -> Result<(), WorktreeError> {
    if git(wt, &["rev-parse", "--verify", "--quiet", "MERGE_HEAD"]).await.is_ok() {
        let _ = git(wt, &["merge", "--abort"]).await;
    }
    git(wt, &["reset", "--quiet", "--hard", before]).await.map(drop)
}

/// Whether `file` holds a line that starts a conflict marker.
fn has_markers(file: &Path) -> bool {
    let Ok(text) = std::fs::read(file) else {
        return false;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .any(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> ") || l == "=======")
}

/// The prompt: what happened, each conflicted file's marked regions (cut), what to do.
fn prompt(wt: &Path, target: &str, files: &[String]) -> String {
    let mut p = format!(
        "Landing your work into the branch `{target}` conflicts: `{target}` changed since you started, and its changes are now merged into this directory. Git could not merge {} and left conflict markers in {} (lines <<<<<<<, =======, >>>>>>>):\n",
        if files.len() == 1 { "one file" } else { "these files" },
        if files.len() == 1 { "it" } else { "them" }
    );
    for f in files {
        let text = std::fs::read(wt.join(f)).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let mut shown = Vec::new();
        let mut inside = false;
        for l in text.lines() {
            if l.starts_with("<<<<<<< ") {
                inside = true;
            }
            if inside && shown.len() < LINES_PER_FILE {
                shown.push(l);
            }
            if l.starts_with(">>>>>>> ") {
                inside = false;
            }
        }
        let block = format!("\n--- {f}\n{}\n", shown.join("\n"));
        if p.len() + block.len() > PROMPT_BYTES {
            p.push_str(&format!("\n--- {f} (open it to see its conflicts)\n"));
        } else {
            p.push_str(&block);
        }
    }
    p.push_str(
        "\nEdit each of these files so that it keeps what both sides meant, and remove every marker. Do not commit and do not run git merge or rebase: when you are done, aicli commits your resolution and lands the work.",
    );
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_and_shown_in_the_prompt() {
        let d = tempfile::tempdir().unwrap();
        let text = "a\n<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> 1234567\nz\n";
        std::fs::write(d.path().join("f.txt"), text).unwrap();
        std::fs::write(d.path().join("ok.txt"), "== fine ==\n<<<<<<<not a marker\n").unwrap();
        assert!(has_markers(&d.path().join("f.txt")));
        assert!(!has_markers(&d.path().join("ok.txt")));
        let p = prompt(d.path(), "main", &["f.txt".to_owned()]);
        assert!(p.starts_with("Landing your work into the branch `main` conflicts"), "{p}");
        assert!(p.contains("\n--- f.txt\n<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> 1234567\n"), "{p}");
        assert!(!p.contains("\nz\n"), "only the marked regions: {p}");
        assert!(p.ends_with("aicli commits your resolution and lands the work."));
    }
}
