//! What a task's page shows beside its transcript: the diff of its work against its
//! base, the files of its run record (as downloads), and, for the batch page, each
//! task's last line (its last tool call or text).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Mutex;

use aicli_providers::{EventKind, Line, ProviderRegistry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::{BatchRecord, TaskRecord, TaskState, files};
use crate::worktree::git_output_capped;

/// Changed lines past which the diff is shown as its file list only.
const MAX_DIFF_LINES: u64 = 20_000;
/// Bytes of diff text shown at most.
const MAX_DIFF_BYTES: usize = 2 << 20;
/// Bytes of a file list (`--numstat`, untracked files) read at most.
const MAX_LIST_BYTES: usize = 1 << 20;
/// Files larger than this are binary to the diff: git neither diffs nor loads them.
const BIG_FILE_THRESHOLD: &str = "core.bigFileThreshold=8m";
/// Untracked files shown in the diff at most, and the largest one shown whole.
const MAX_NEW_FILES: usize = 200;
const MAX_NEW_FILE_BYTES: u64 = 256 * 1024;

/// A task's work against its base commit, as a unified diff.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskDiff {
    /// The commit the task started from.
    pub base: Option<String>,
    /// What was compared: `commits` (its branch's commits: the work once a run
    /// committed it), `worktree` (its files now, commits and uncommitted changes and new
    /// files alike: while a run goes, or with `engine.commit: off`), `branch` (the
    /// worktree is gone: its branch), or `none`.
    pub source: String,
    /// The unified diff (`git diff` format), cut at 2 MiB.
    pub diff: String,
    /// Why part of it is not shown (too large, binary, cut), if part is not.
    pub note: Option<String>,
}

/// The diff of `rec`'s work against its base: its branch's commits once a run committed
/// them, else the worktree when it is there, else its branch.
pub(crate) async fn diff(rec: &TaskRecord, repo: &Path) -> TaskDiff {
    let Some(base) = rec.base_commit.clone() else {
        return TaskDiff {
            base: None,
            source: "none".to_owned(),
            diff: String::new(),
            note: Some("the task has no base commit yet (it has not started)".to_owned()),
        };
    };
    let mut out = TaskDiff {
        base: Some(base.clone()),
        source: "none".to_owned(),
        diff: String::new(),
        note: None,
    };
    // --no-optional-locks: reading never takes the index lock the agent may need.
    let wt = rec.worktree.as_deref().filter(|w| w.join(".git").exists());
    // Once a run committed its work, the work is the branch's commits; while a run
    // goes, or when commits are off, the worktree as it is.
    let committed = rec.state != TaskState::Running
        && rec.latest_result().is_some_and(|r| r.work.is_some());
    let (dir, range): (&Path, Vec<&str>) = match (wt, rec.branch.as_deref()) {
        (_, Some(b)) if committed => {
            out.source = "commits".to_owned();
            if let Some(w) = wt {
                out.note = uncommitted_note(w).await;
            }
            (repo, vec![base.as_str(), b])
        }
        (Some(w), _) => {
            out.source = "worktree".to_owned();
            (w, vec![base.as_str()])
        }
        (None, Some(b)) => {
            out.source = "branch".to_owned();
            (repo, vec![base.as_str(), b])
        }
        (None, None) => {
            out.note = Some("the task ran without a worktree or branch".to_owned());
            return out;
        }
    };
    let git = |args: Vec<&str>| {
        // Files past the threshold are "binary" to git: it does not diff them (nor hold
        // them in memory to do so).
        let mut a = vec![
            "--no-optional-locks",
            "-c",
            "core.quotepath=off",
            "-c",
            BIG_FILE_THRESHOLD,
        ];
        a.extend(args);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>, cap: usize| async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        git_output_capped(dir, &refs, &[0], cap).await
    };
    let mut numstat = vec!["diff", "--numstat", "--no-ext-diff"];
    numstat.extend(range.iter().copied());
    let lines: u64 = match run(git(numstat), MAX_LIST_BYTES).await {
        // A list of changed files too long to read: far too many lines to show.
        Ok((_, true)) => u64::MAX,
        Ok((b, false)) => String::from_utf8_lossy(&b)
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let a = f.next()?.parse::<u64>().ok()?;
                let d = f.next()?.parse::<u64>().ok()?;
                Some(a + d)
            })
            .sum(),
        Err(e) => {
            out.note = Some(e.to_string());
            return out;
        }
    };
    let mut args = vec!["diff", "--no-color", "--no-ext-diff"];
    if lines > MAX_DIFF_LINES {
        args.push("--stat");
        let n = if lines == u64::MAX {
            "too many".to_owned()
        } else {
            lines.to_string()
        };
        add_note(
            &mut out,
            format!(
                "{n} changed lines: only the list of files is shown (`git diff {}` in {} shows all)",
                range.join(" "),
                dir.display()
            ),
        );
    }
    args.extend(range.iter().copied());
    let mut cut = false;
    match run(git(args), MAX_DIFF_BYTES).await {
        Ok((b, more)) => {
            cut = more;
            out.diff = String::from_utf8_lossy(&b).into_owned();
        }
        Err(e) => out.note = Some(e.to_string()),
    }
    if out.source == "worktree" && !cut {
        new_files(dir, &mut out).await;
    }
    if cut || out.diff.len() > MAX_DIFF_BYTES {
        let mut at = out.diff.len().min(MAX_DIFF_BYTES);
        while !out.diff.is_char_boundary(at) {
            at -= 1;
        }
        out.diff.truncate(at);
        add_note(&mut out, format!("the diff is cut at {} MiB", MAX_DIFF_BYTES >> 20));
    }
    out
}

/// What the worktree `w` holds besides its branch's commits (files left out of them,
/// changes made since), said in a note; `None` when nothing.
async fn uncommitted_note(w: &Path) -> Option<String> {
    let args = ["--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=all"];
    let (out, more) = git_output_capped(w, &args, &[0], MAX_LIST_BYTES).await.ok()?;
    let n = out.split(|&b| b == 0).filter(|e| !e.is_empty()).count();
    (n > 0).then(|| {
        format!(
            "{}{} not committed, in the worktree {} (not shown)",
            crate::util::count(n as u64, "change", "changes"),
            if more { " or more" } else { "" },
            w.display()
        )
    })
}

/// The worktree's untracked (not ignored) files, as new-file diffs.
async fn new_files(dir: &Path, out: &mut TaskDiff) {
    let args = [
        "--no-optional-locks",
        "ls-files",
        "--others",
        "--exclude-standard",
        "-z",
    ];
    let Ok((list, _)) = git_output_capped(dir, &args, &[0], MAX_LIST_BYTES).await else {
        return;
    };
    let names: Vec<String> = list
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    let mut skipped = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i >= MAX_NEW_FILES || out.diff.len() > MAX_DIFF_BYTES {
            skipped.push(format!("{} more new files", names.len() - i));
            break;
        }
        let size = std::fs::symlink_metadata(dir.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        if size > MAX_NEW_FILE_BYTES {
            skipped.push(format!("{name} ({size} bytes)"));
            continue;
        }
        let args = [
            "--no-optional-locks",
            "-c",
            BIG_FILE_THRESHOLD,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-index",
            "--",
            "/dev/null",
            name.as_str(),
        ];
        let room = (MAX_DIFF_BYTES + 1).saturating_sub(out.diff.len());
        if let Ok((b, _)) = git_output_capped(dir, &args, &[0, 1], room).await {
            out.diff.push_str(&String::from_utf8_lossy(&b));
        }
    }
    if !skipped.is_empty() {
        add_note(out, format!("new files not shown: {}", skipped.join(", ")));
    }
}

/// Adds `why` to the diff's note.
fn add_note(out: &mut TaskDiff, why: String) {
    out.note = Some(match out.note.take() {
        Some(n) => format!("{n}; {why}"),
        None => why,
    });
}

/// A file of a task's run record, offered for download.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RecordFile {
    /// Its name in the task's record directory.
    pub name: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// The files of task `task`'s record that may be downloaded: regular files of its
/// directory, not its private directory (credentials, tokens), pid files or locks;
/// never through a symlink, at any level.
pub(crate) fn record_files(batch: &BatchRecord, task: &str) -> Vec<RecordFile> {
    let Ok(names) = batch.task_file_names(task) else {
        return Vec::new();
    };
    let mut v: Vec<RecordFile> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| downloadable(n))
        .filter_map(|name| {
            let bytes = batch.open_task_file(task, &name).ok()?.metadata().ok()?.len();
            Some(RecordFile { name, bytes })
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn downloadable(name: &str) -> bool {
    !name.starts_with('.')
        && name != files::OLDER_LOCK
        && name != files::OLDER_PID
        && !name.starts_with(files::PID_TOOL_PREFIX)
        && !name.starts_with(files::PID_UPSTREAM_PREFIX)
        && name != files::PRIVATE_DIR
}

/// The record file `name` of `task`, opened for download, when it is one
/// [`record_files`] would list (a regular file, never through a symlink).
pub(crate) fn open_record_file(
    batch: &BatchRecord,
    task: &str,
    name: &str,
) -> Option<(std::fs::File, u64)> {
    if !downloadable(name) {
        return None;
    }
    let f = batch.open_task_file(task, name).ok()?;
    let len = f.metadata().ok()?.len();
    Some((f, len))
}

/// Bytes of the end of a task's `events.ndjson` read for its last line.
const LAST_LINE_TAIL: u64 = 32 * 1024;
/// Characters of a last line shown.
const LAST_LINE_CHARS: usize = 160;


/// A task's row as the batch page shows it (`GET /api/batches/B/rows`, and one task's
/// alone at `GET /api/batches/B/tasks/T/row`): what the page polls, a few hundred bytes
/// a task where its record can be many kilobytes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskRow {
    /// The task.
    pub id: String,
    /// Where it stands.
    pub state: TaskState,
    /// Where it runs or ran: its latest attempt's place (`local`, `docker <engine>
    /// (<image>)`), else the runner it will get (`local`, `docker`).
    pub runner: String,
    /// Its state in words, with its error's kind when it failed and its refused or failed
    /// tool calls (the pages draw the state's icon from `state`).
    pub status: String,
    /// Tokens in / out / cache of its latest result.
    pub tokens: String,
    /// Its latest result's cost (`~` marks an estimate).
    pub cost: String,
    /// Its last tool call or text line.
    pub last: String,
}

impl TaskRow {
    /// `rec`'s row, with its last line; `engine` says which runner a task that has not
    /// started yet will get.
    pub(super) fn of(rec: &TaskRecord, last: String, engine: &crate::Engine) -> TaskRow {
        let r = rec.latest_result();
        let runner = rec
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.place.clone())
            .or_else(|| {
                let p = engine.registry().get(&rec.provider).ok()?;
                Some(engine.runner_kind(&rec.task, &p).as_str().to_owned())
            })
            .unwrap_or_default();
        TaskRow {
            id: rec.task.id.clone(),
            state: rec.state,
            runner,
            status: task_status(rec),
            tokens: tokens(r),
            cost: cost(r),
            last,
        }
    }
}

/// A task's state in words, with its error's kind when it failed.
pub(super) fn task_status(t: &TaskRecord) -> String {
    // The pages draw the state's icon beside its word: never colour alone.
    if let (TaskState::Parked, Some(p)) = (t.state, &t.parked) {
        return p.describe(&t.provider);
    }
    let w = t.state.as_str();
    let r = t.latest_result();
    let head = match r.and_then(|r| r.error_kind) {
        Some(k) if t.state == TaskState::Failed => format!("{w} ({})", k.as_str()),
        _ => w.to_owned(),
    };
    let head = match r.and_then(|r| r.tool_trouble()) {
        Some(trouble) => format!("{head} · ⚠ {trouble}"),
        None => head,
    };
    // What its container was refused (the egress allowlist), first host named.
    match t.attempts.last().map(|a| a.egress_denied.as_slice()) {
        Some([only]) => format!("{head} · ⚠ egress refused: {}", only.target()),
        Some([first, rest @ ..]) => format!(
            "{head} · ⚠ egress refused: {} and {} more",
            first.target(),
            rest.len()
        ),
        _ => head,
    }
}


/// Tokens in / out / cache of a result.
pub(super) fn tokens(r: Option<&aicli_providers::SessionResult>) -> String {
    r.map(|r| {
        let u = &r.canonical_usage;
        format!("{} / {} / {}", u.input_tokens, u.output_tokens, u.cache_read + u.cache_write)
    })
    .unwrap_or_default()
}


/// A result's cost: `~` marks an estimate.
pub(super) fn cost(r: Option<&aicli_providers::SessionResult>) -> String {
    match r.and_then(|r| r.cost_usd.map(|c| (c, r.cost_source))) {
        Some((c, aicli_providers::CostSource::Reported)) => format!("${c:.4}"),
        Some((c, _)) => format!("~${c:.4}"),
        None => "cost unknown".to_owned(),
    }
}

/// Each task's last tool call or text line, kept per task with the length of its
/// `events.ndjson` when it was read, so a task whose record has not grown is not read
/// again.
#[derive(Debug, Default)]
pub(crate) struct LastLines {
    seen: Mutex<HashMap<(String, String), (u64, String)>>,
}

impl LastLines {
    /// The last tool call or text of `rec`, from the end of its latest attempt's events.
    pub(crate) fn get(
        &self,
        batch: &BatchRecord,
        rec: &TaskRecord,
        registry: &ProviderRegistry,
    ) -> String {
        let file = batch.open_task_file(&rec.task.id, files::EVENTS).ok();
        let len = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        let key = (batch.batch_id(), rec.task.id.clone());
        if let Some((l, s)) = self.lock().get(&key)
            && *l == len
        {
            return s.clone();
        }
        let line = file
            .and_then(|f| last_line(f, len, rec, registry))
            .unwrap_or_default();
        self.lock().insert(key, (len, line.clone()));
        line
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (u64, String)>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn last_line(
    mut f: std::fs::File,
    len: u64,
    rec: &TaskRecord,
    registry: &ProviderRegistry,
) -> Option<String> {
    let attempt = rec.attempts.last()?;
    let start = attempt.events_start.max(len.saturating_sub(LAST_LINE_TAIL));
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::new();
    f.take(len - start).read_to_end(&mut buf).ok()?;
    // Past the first line break unless the read starts at a line's start.
    let body = if start > attempt.events_start {
        let nl = buf.iter().position(|&b| b == b'\n')?;
        &buf[nl + 1..]
    } else {
        &buf[..]
    };
    let provider = registry.get(&rec.provider).ok()?;
    let ctx = aicli_providers::ParseContext {
        model: attempt.model.clone(),
        prior: attempt.prior,
        answered: None,
    };
    let mut d = provider.decoder(&ctx);
    let mut evs = Vec::new();
    let mut last: Option<String> = None;
    // Streamed text comes in chunks (`delta`): they are joined into one line.
    let mut in_delta = false;
    for l in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        evs.clear();
        d.decode(Line::Bytes(l), &mut evs);
        for e in &evs {
            match &e.kind {
                EventKind::AssistantText { text, delta: true } => {
                    let mut s = if in_delta { last.take().unwrap_or_default() } else { String::new() };
                    s.push_str(text);
                    if s.len() > 4 * LAST_LINE_CHARS {
                        s = s.trim().lines().last().unwrap_or_default().to_owned();
                    }
                    last = Some(s);
                    in_delta = true;
                    continue;
                }
                EventKind::AssistantText { text, .. } if !text.trim().is_empty() => {
                    last = Some(text.to_owned());
                }
                EventKind::ToolCall { name, input, .. } => {
                    last = Some(format!("⚙ {name} {}", serde_json::to_string(input).unwrap_or_default()));
                }
                EventKind::Question { question, .. } => last = Some(format!("? {question}")),
                _ => continue,
            }
            in_delta = false;
        }
    }
    let last = last.map(|s| s.trim().lines().last().unwrap_or_default().to_owned());
    last.map(|s| s.chars().take(LAST_LINE_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AttemptKind, AttemptRecord, EgressDenial};

    #[test]
    fn a_tasks_status_names_what_its_container_was_refused() {
        let mut rec = TaskRecord::queued(aicli_providers::TaskSpec::default(), "claude");
        rec.state = TaskState::Succeeded;
        let mut a = AttemptRecord::not_started(
            1,
            AttemptKind::Run,
            0,
            aicli_providers::SessionResult::not_started(
                "claude",
                aicli_providers::ErrorKind::Unknown,
                String::new(),
            ),
        );
        a.result = None;
        rec.attempts.push(a);
        assert_eq!(task_status(&rec), "succeeded");
        let denial = |host: &str| EgressDenial {
            host: host.to_owned(),
            port: 443,
            method: "CONNECT".to_owned(),
            first_at: "2026-12-07T02:00:00Z".to_owned(),
            last_at: "2026-12-07T02:00:00Z".to_owned(),
            count: 1,
        };
        rec.attempts[0].egress_denied = vec![denial("pypi.org")];
        assert_eq!(
            task_status(&rec),
            "succeeded · ⚠ egress refused: pypi.org:443"
        );
        rec.attempts[0].egress_denied.push(denial("files.pythonhosted.org"));
        assert_eq!(
            task_status(&rec),
            "succeeded · ⚠ egress refused: pypi.org:443 and 1 more"
        );
    }
}
