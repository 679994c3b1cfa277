//! One commit per attempt, in the task's worktree, on the task's branch, whatever the
//! run's end (succeeded, failed, blocked, cancelled, timed out, crashed).
//!
//! What is committed is what `git add -A` would take (the repository's `.gitignore`
//! holds), minus what the run's scaffold laid out (its own list: MCP configs, links, the
//! IDE lockfile) and files over `engine.commit.max_file_bytes`; those are left in the
//! worktree and listed in the attempt's [`AttemptWork`]. The index is the worktree's
//! own, so what the CLI staged counts and git's stat cache spares re-reading every file.
//! Commits the CLI made itself stay as they are, before aicli's. A run that changed
//! nothing adds no commit (one `git status`).
//!
//! The message: `TASK: the first line of its prompt`, the agent's final response as the
//! body, and trailers (`Aicli-Task`, `Aicli-Batch`, `Aicli-Attempt`, `Aicli-Provider`,
//! `Aicli-Model`, `Aicli-Session`, `Aicli-Status`, `Aicli-Cost`). The author is the
//! repository's identity, else `engine.commit.author`, else aicli's own; the committer
//! is aicli. No hook runs and nothing is signed: the commit is aicli's record of what
//! the agent wrote, made without asking anyone.

use std::path::{Path, PathBuf};

use aicli_providers::{
    AttemptWork, CommitAuthor, CommitConfig, CostSource, LeftOut, LeftOutReason, SessionResult,
};

use crate::record::TaskState;
use crate::worktree::{WorktreeError, git_output, git_with_input};

/// aicli's own identity: the committer, and the author when no other is set.
const AICLI: (&str, &str) = ("aicli", "aicli@localhost");
/// The longest subject line, characters.
const SUBJECT_CHARS: usize = 72;
/// The most of the agent's response the body keeps, characters.
const BODY_CHARS: usize = 16 * 1024;
/// Pathspecs are the paths as given, never patterns.
const LITERAL: [(&str, &str); 1] = [("GIT_LITERAL_PATHSPECS", "1")];
/// The paths come on stdin, NUL-separated (any number of them, any bytes).
const FROM_STDIN: [&str; 2] = ["--pathspec-from-file=-", "--pathspec-file-nul"];

/// One attempt's end, as its commit describes it.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    /// The task's worktree.
    pub worktree: &'a Path,
    /// The batch.
    pub batch_id: &'a str,
    /// The task.
    pub task_id: &'a str,
    /// The task's prompt (its first line is the subject).
    pub prompt: &'a str,
    /// The attempt's number in the task's record.
    pub attempt: u32,
    /// The commit the task started from (for what its branch holds over it).
    pub base: Option<&'a str>,
    /// How the run ended.
    pub result: &'a SessionResult,
    /// What the run laid out for its CLI (absolute paths): never committed.
    pub scaffold: &'a [PathBuf],
}

/// The author of a repository's commits: its own identity (`user.name` and
/// `user.email`), else the configured one, else aicli's.
pub(crate) async fn author(repo: &Path, cfg: &CommitConfig) -> CommitAuthor {
    let args = ["config", "-z", "--get-regexp", r"^user\.(name|email)$"];
    let own = git_output(repo, &args, &[0, 1]).await.unwrap_or_default();
    let (mut name, mut email) = (None, None);
    for entry in own.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        match entry.split_once('\n') {
            Some(("user.name", v)) if !v.trim().is_empty() => name = Some(v.to_owned()),
            Some(("user.email", v)) if !v.trim().is_empty() => email = Some(v.to_owned()),
            _ => {}
        }
    }
    match (name, email, &cfg.author) {
        (Some(name), Some(email), _) => CommitAuthor { name, email },
        (_, _, Some(a)) => a.clone(),
        _ => CommitAuthor {
            name: AICLI.0.to_owned(),
            email: AICLI.1.to_owned(),
        },
    }
}

/// Commits what attempt `a` changed in its worktree. Never fails: what went wrong is in
/// the work's `error`, and the work is then in the worktree as the run left it.
pub(crate) async fn commit_attempt(
    a: &Attempt<'_>,
    cfg: &CommitConfig,
    author: &CommitAuthor,
) -> AttemptWork {
    match try_commit(a, cfg, author).await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(task = %a.task_id, error = %e, "the attempt's work was not committed");
            AttemptWork {
                error: Some(e.to_string()),
                ..AttemptWork::default()
            }
        }
    }
}

async fn try_commit(
    a: &Attempt<'_>,
    cfg: &CommitConfig,
    author: &CommitAuthor,
) -> Result<AttemptWork, WorktreeError> {
    let wt = a.worktree;
    let status = git_output(
        wt,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=dirty",
        ],
        &[0],
    )
    .await?;
    let mut work = AttemptWork::default();
    let (mut include, mut unstage) = (Vec::new(), Vec::new());
    let scaffold = scaffold_paths(wt, a.scaffold);
    for entry in status.split(|&b| b == 0).filter(|e| e.len() > 3) {
        let (xy, path) = entry.split_at(3);
        let staged = !matches!(xy[0], b' ' | b'?');
        let path = String::from_utf8_lossy(path).into_owned();
        let meta = std::fs::symlink_metadata(wt.join(&path)).ok();
        let bytes = meta.as_ref().map_or(0, std::fs::Metadata::len);
        let reason = if scaffold.iter().any(|s| Path::new(&path).starts_with(s)) {
            Some(LeftOutReason::Scaffold)
        } else if meta.is_some_and(|m| m.is_file()) && bytes > cfg.max_file_bytes {
            Some(LeftOutReason::TooLarge)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                if reason == LeftOutReason::TooLarge {
                    work.max_file_bytes = Some(cfg.max_file_bytes);
                }
                if staged {
                    unstage.push(path.clone());
                }
                work.left_out.push(LeftOut {
                    path,
                    bytes,
                    reason,
                });
            }
            None => include.push(path),
        }
    }
    if !unstage.is_empty() {
        let args = [&["reset", "-q"][..], &FROM_STDIN[..]].concat();
        git_with_input(wt, &args, &LITERAL, &nul_joined(&unstage), &[0]).await?;
    }
    if !include.is_empty() {
        commit(a, author, &include, &mut work).await?;
    }
    // What the branch holds now: after a commit, or over earlier attempts' commits.
    if let Some(base) = a.base
        && (work.commit.is_some() || a.attempt > 1)
    {
        let head = match &work.commit {
            Some(c) => c.clone(),
            None => crate::worktree::git(wt, &["rev-parse", "HEAD"]).await?,
        };
        work.total = Some(super::diff::stat(wt, base, &head).await?);
        work.head = Some(head);
    }
    Ok(work)
}

/// Stages `include` (paths the status listed) and commits them with `a`'s message.
async fn commit(
    a: &Attempt<'_>,
    author: &CommitAuthor,
    include: &[String],
    work: &mut AttemptWork,
) -> Result<(), WorktreeError> {
    let wt = a.worktree;
    let args = [&["add", "-A"][..], &FROM_STDIN[..]].concat();
    git_with_input(wt, &args, &LITERAL, &nul_joined(include), &[0]).await?;
    let env = [
        ("GIT_AUTHOR_NAME", author.name.as_str()),
        ("GIT_AUTHOR_EMAIL", author.email.as_str()),
        ("GIT_COMMITTER_NAME", AICLI.0),
        ("GIT_COMMITTER_EMAIL", AICLI.1),
    ];
    let commit = [
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "--no-verify",
        "--cleanup=verbatim",
        "-F",
        "-",
    ];
    let message = message(a);
    // 1: nothing to commit after all (what changed was only the stat information).
    let (code, _) = git_with_input(wt, &commit, &env, message.as_bytes(), &[0, 1]).await?;
    if code == 0 {
        work.commit = Some(crate::worktree::git(wt, &["rev-parse", "HEAD"]).await?);
        work.files = include.len() as u32;
    }
    Ok(())
}

/// The scaffold's paths inside the worktree, relative to it.
fn scaffold_paths(wt: &Path, scaffold: &[PathBuf]) -> Vec<PathBuf> {
    let canon = std::fs::canonicalize(wt).ok();
    scaffold
        .iter()
        .filter_map(|p| {
            p.strip_prefix(wt)
                .ok()
                .or_else(|| canon.as_deref().and_then(|c| p.strip_prefix(c).ok()))
                .map(Path::to_path_buf)
        })
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

fn nul_joined(paths: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p.as_bytes());
        out.push(0);
    }
    out
}

/// The commit message of attempt `a`.
pub(crate) fn message(a: &Attempt<'_>) -> String {
    let r = a.result;
    let first = a.prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let subject = cut(&format!("{}: {first}", a.task_id), SUBJECT_CHARS);
    let mut m = subject.trim_end().to_owned();
    m.push_str("\n\n");
    let body = r.response.trim();
    if !body.is_empty() {
        m.push_str(&cut(body, BODY_CHARS));
        m.push_str("\n\n");
    }
    let status = match (TaskState::of(r), r.error_kind) {
        (TaskState::Failed, Some(k)) => format!("failed ({})", k.as_str()),
        (s, _) => s.as_str().to_owned(),
    };
    let cost = match (r.cost_usd, r.cost_source) {
        (Some(c), CostSource::Reported) => format!("{c:.6} USD (reported)"),
        (Some(c), _) => format!("{c:.6} USD (estimated)"),
        (None, _) => "unknown".to_owned(),
    };
    let trailers = [
        ("Aicli-Task", a.task_id.to_owned()),
        ("Aicli-Batch", a.batch_id.to_owned()),
        ("Aicli-Attempt", a.attempt.to_string()),
        ("Aicli-Provider", r.provider.clone()),
        ("Aicli-Model", r.model.clone().unwrap_or_else(|| "unknown".to_owned())),
        ("Aicli-Session", r.session_id.clone().unwrap_or_else(|| "none".to_owned())),
        ("Aicli-Status", status),
        ("Aicli-Cost", cost),
    ];
    for (k, v) in trailers {
        // A trailer is one line.
        let v: String = v.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        m.push_str(&format!("{k}: {}\n", v.trim()));
    }
    m
}

/// `s` cut to `max` characters, with `…` where it was cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aicli_providers::{ErrorKind, SessionStatus};

    #[test]
    fn the_message_has_the_subject_the_response_and_every_trailer() {
        let r = SessionResult {
            provider: "codex".into(),
            model: Some("gpt-5".into()),
            session_id: Some("s-1".into()),
            status: SessionStatus::Failed,
            error_kind: Some(ErrorKind::Timeout),
            response: "  Wrote the test.\n\nDone.  ".into(),
            cost_usd: Some(0.0123),
            cost_source: CostSource::Estimated,
            ..SessionResult::default()
        };
        let a = Attempt {
            worktree: Path::new("/w"),
            batch_id: "b1",
            task_id: "t",
            prompt: "\n  Add a unit test for the parser\nand more",
            attempt: 2,
            base: None,
            result: &r,
            scaffold: &[],
        };
        let m = message(&a);
        assert_eq!(
            m,
            "t: Add a unit test for the parser\n\nWrote the test.\n\nDone.\n\n\
             Aicli-Task: t\nAicli-Batch: b1\nAicli-Attempt: 2\nAicli-Provider: codex\n\
             Aicli-Model: gpt-5\nAicli-Session: s-1\nAicli-Status: failed (timeout)\n\
             Aicli-Cost: 0.012300 USD (estimated)\n"
        );
        let r2 = SessionResult {
            response: String::new(),
            session_id: None,
            status: SessionStatus::Succeeded,
            error_kind: None,
            cost_usd: None,
            ..r.clone()
        };
        let long = "x".repeat(200);
        let a = Attempt {
            prompt: &long,
            result: &r2,
            ..a
        };
        let m = message(&a);
        let subject = m.lines().next().unwrap();
        assert_eq!(subject.chars().count(), SUBJECT_CHARS);
        assert!(subject.ends_with('…'));
        assert!(m.contains("\n\nAicli-Task: t\n") && m.contains("Aicli-Session: none\n"));
        assert!(m.contains("Aicli-Status: succeeded\n") && m.contains("Aicli-Cost: unknown\n"));
    }

    #[test]
    fn scaffold_paths_inside_the_worktree_only() {
        let d = tempfile::tempdir().unwrap();
        let wt = d.path();
        let s = [wt.join(".mcp.json"), PathBuf::from("/elsewhere/x"), wt.to_path_buf()];
        assert_eq!(scaffold_paths(wt, &s), vec![PathBuf::from(".mcp.json")]);
    }
}
