//! A run that had finished when aicli was killed is never paid for twice: `aicli kill -9`
//! right after the CLI printed its final line (inside the final grace, before the task
//! was closed), then `aicli resume`, closes the task from its recorded stream — no new
//! CLI run — and finishes its record (`result.json`) and worktree as a normal end does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aicli::providers::SessionStatus;
use aicli::record::{RunStore, TaskState};
use serde_json::json;

use super::support::{
    alive, fake_cli_config, git, git_repo, kill_9, recorded_pids, spawn_batch, wait_for_batch,
};

/// Starts `aicli batch` on `tasks` (one task), waits until `ready` holds for the task's
/// record directory, and kills aicli with SIGKILL. Returns the batch directory.
fn batch_killed_when(
    cfg: &Path,
    repo: &Path,
    tasks: serde_json::Value,
    ready: impl Fn(&Path) -> bool,
) -> PathBuf {
    let mut child = spawn_batch(cfg, &tasks, &["--repo", repo.to_str().unwrap()]);
    let batch = wait_for_batch(
        &repo.join(".aicli/runs"),
        Duration::from_secs(30),
        Duration::from_millis(5),
        "the run never got to its end",
        |b| ready(&b.join("tasks/t")),
    );
    kill_9(&mut child);
    batch
}

fn contains(path: &Path, needle: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle))
}

fn resume(cfg: &Path, repo: &Path, batch: &Path) -> aicli::BatchResult {
    let id = batch.file_name().unwrap().to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aicli"))
        .arg("--config")
        .arg(cfg)
        .args(["resume", id, "--json", "--repo"])
        .arg(repo)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_run_that_printed_its_final_line_is_closed_from_its_record_not_run_again() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let argv_log = dir.path().join("argv.log");
    // The CLI prints the whole transcript (its final `result` line last) and then lingers:
    // aicli waits out its final grace (2 s) before it shuts the CLI down and closes the
    // task. aicli is killed in that window.
    let cfg = fake_cli_config(
        dir.path(),
        &[
            "--record-argv",
            argv_log.to_str().unwrap(),
            "--linger-ms",
            "30000",
        ],
    );
    let batch = batch_killed_when(
        &cfg,
        repo.path(),
        json!([{"id": "t", "prompt": "say hello"}]),
        |t| contains(&t.join("events.ndjson"), r#""type":"result""#),
    );
    let task_dir = batch.join("tasks/t");
    assert!(
        !task_dir.join("task.json").exists(),
        "killed before the task was closed"
    );
    let before = aicli::record::task_at(&task_dir).unwrap().unwrap();
    // The CLI that was left running, as the journal names it.
    let lingering: u32 = recorded_pids(&batch, "t")
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .expect("the run's processes are recorded");
    assert_eq!(before.state, TaskState::Running);
    let worktree = before.worktree.clone().expect("a worktree");
    assert!(worktree.is_dir());

    let result = resume(&cfg, repo.path(), &batch);
    assert_eq!((result.n_tasks, result.n_succeeded), (1, 1), "{result:#?}");
    let r = &result.tasks[0];
    assert_eq!(r.status, SessionStatus::Succeeded, "{r:?}");
    assert_eq!(r.response, "Hello from the fake Anthropic API.", "{r:?}");
    // No new CLI run: one start of the CLI in all, one attempt in the record.
    let starts = std::fs::read_to_string(&argv_log).unwrap().lines().count();
    assert_eq!(starts, 1, "the CLI was started again");
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(batch.file_name().unwrap().to_str().unwrap())
        .unwrap()
        .task("t")
        .unwrap();
    assert_eq!(rec.state, TaskState::Succeeded);
    assert_eq!(rec.attempts.len(), 1, "{rec:#?}");
    let a = &rec.attempts[0];
    assert!(a.finished_at.is_some() && a.events_end.is_some());
    assert_eq!(
        a.result.as_ref().map(|r| r.status),
        Some(SessionStatus::Succeeded)
    );
    assert!(
        r.cost_usd.is_some_and(|c| c > 0.0),
        "its cost counts: {r:?}"
    );
    assert!((result.total_cost_usd - r.cost_usd.unwrap()).abs() < 1e-12);
    // Finished as on a normal end: task.json written, the worktree (no work in it)
    // removed with its branch.
    let written: aicli::record::TaskRecord =
        aicli::util::read_json(&task_dir.join("task.json")).unwrap();
    let mut expected = rec.clone();
    expected.task.prompt = String::new();
    assert_eq!(written, expected, "task.json is the journal's last record");
    assert_eq!(
        written.latest_result().map(|r| r.status),
        Some(SessionStatus::Succeeded)
    );
    assert!(!worktree.exists(), "the worktree was not cleaned up");
    let branches = git(repo.path(), &["branch", "--list", "aicli/*"]);
    assert!(branches.is_empty(), "{branches}");
    // And the CLI that lingered is gone (it died with aicli), and so is its record.
    assert!(!alive(lingering));
    assert_eq!(recorded_pids(&batch, "t"), None);
}

#[test]
fn a_run_that_asked_a_question_and_ended_is_closed_blocked_on_it() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let argv_log = dir.path().join("argv.log");
    let asked = dir.path().join("asked.json");
    let cfg = fake_cli_config(
        dir.path(),
        &[
            "--record-argv",
            argv_log.to_str().unwrap(),
            "--mcp-call",
            "ask_user",
            r#"{"question": "Ship it on Friday?", "options": ["yes", "no"]}"#,
            asked.to_str().unwrap(),
            "--linger-ms",
            "30000",
        ],
    );
    let batch = batch_killed_when(
        &cfg,
        repo.path(),
        json!([{"id": "t", "prompt": "ship"}]),
        |t| {
            contains(&t.join("events.ndjson"), r#""type":"result""#)
                && contains(&t.join("aicli-events.ndjson"), "Ship it on Friday?")
        },
    );
    let result = resume(&cfg, repo.path(), &batch);
    let r = &result.tasks[0];
    assert_eq!(r.status, SessionStatus::Blocked, "{r:?}");
    let q = r.question.as_ref().unwrap();
    assert_eq!(q.question, "Ship it on Friday?");
    assert_eq!(q.options, ["yes", "no"]);
    assert_eq!(
        std::fs::read_to_string(&argv_log).unwrap().lines().count(),
        1,
        "the CLI was started again"
    );
    // A blocked task keeps its worktree for the answer.
    let wt = r.worktree.clone().expect("kept worktree");
    assert!(wt.is_dir());
}
