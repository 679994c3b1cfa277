//! What a task's branch holds over its base: its figures ([`DiffStat`]: commits, files,
//! lines added and removed), and the diff itself for `aicli diff`, read from git.

use std::path::Path;

use aicli_providers::DiffStat;

use crate::worktree::{WorktreeError, git, git_output_capped};

/// The most of a `--numstat` list read (a branch that changes more files than this
/// lists is counted as far as it goes).
const MAX_NUMSTAT_BYTES: usize = 4 << 20;

/// What `head` holds over `base`, in `dir`'s repository.
pub(crate) async fn stat(dir: &Path, base: &str, head: &str) -> Result<DiffStat, WorktreeError> {
    let range = format!("{base}..{head}");
    let commits = git(dir, &["rev-list", "--count", &range]).await?;
    let args = ["diff", "--numstat", "--no-renames", "--no-ext-diff", base, head];
    let (numstat, _) = git_output_capped(dir, &args, &[0], MAX_NUMSTAT_BYTES).await?;
    let mut s = DiffStat {
        commits: commits.trim().parse().unwrap_or(0),
        ..DiffStat::default()
    };
    for line in String::from_utf8_lossy(&numstat).lines() {
        let mut f = line.split('\t');
        let (Some(added), Some(removed), Some(_)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        // A binary file is `-\t-`: a file, no lines.
        s.files += 1;
        s.insertions += added.parse::<u64>().unwrap_or(0);
        s.deletions += removed.parse::<u64>().unwrap_or(0);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(ok.status.success(), "{args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    }

    #[tokio::test]
    async fn a_branch_s_commits_files_and_lines_over_its_base() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        run(r, &["init", "-q", "-b", "main"]);
        std::fs::write(r.join("a.txt"), "1\n2\n3\n").unwrap();
        run(r, &["add", "."]);
        run(r, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]);
        let base = git(r, &["rev-parse", "HEAD"]).await.unwrap();
        std::fs::write(r.join("a.txt"), "1\nTWO\n3\n4\n").unwrap();
        std::fs::write(r.join("bin"), [0u8, 1, 2, 0]).unwrap();
        run(r, &["add", "."]);
        run(r, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "one"]);
        std::fs::write(r.join("c.txt"), "c\n").unwrap();
        run(r, &["add", "."]);
        run(r, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "two"]);
        let s = stat(r, &base, "HEAD").await.unwrap();
        assert_eq!(
            s,
            DiffStat {
                commits: 2,
                files: 3,
                insertions: 3,
                deletions: 1
            }
        );
        assert_eq!(s.short(), "+3 −1 in 3 files");
        assert_eq!(stat(r, &base, &base).await.unwrap().short(), "no change");
    }
}
