//! A usage limit as a user meets it, through the binary with the real claude: a batch
//! killed with SIGKILL while its task is parked keeps the reset in its record, and
//! `aicli resume` waits out what is left of it before the session goes on; a reset after
//! the task's timeout ends the task at once, as a timeout.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Cli, assert_code, json_lines, kill_9, stderr};
use crate::suite::support::{batch_id, task_record, task_state, wait_for_batch};

/// `aicli batch` of one claude task `p` against a fake whose account is over its usage
/// limit for `secs`, once the task is parked: the process, the batch's directory, the
/// task's record then.
fn parked_batch(cli: &Cli, secs: u32) -> (std::process::Child, PathBuf, Value) {
    let tasks = cli.file(
        "tasks.json",
        r#"{"provider": "claude", "tasks": [{"id": "p", "prompt": "Say done."}]}"#,
    );
    let child = cli
        .command(&[
            "batch",
            tasks.to_str().expect("path"),
            &format!("--fake-api=limit:{secs}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("aicli batch");
    let batch = wait_for_batch(
        &cli.repo.path().join(".aicli/runs"),
        Duration::from_secs(90),
        Duration::from_millis(100),
        "the task never parked",
        |b| task_state(b, "p").as_deref() == Some("parked"),
    );
    let rec = task_record(&batch, "p").expect("the parked task's record");
    (child, batch, rec)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[test]
fn a_parked_task_keeps_its_reset_across_a_kill_and_resume_goes_on_after_it() {
    let cli = Cli::new();
    let (mut child, batch_dir, parked) = parked_batch(&cli, 15);
    let batch = batch_id(&batch_dir);
    kill_9(&mut child);
    let until = parked["parked"]["until_unix"]
        .as_i64()
        .expect("parked.until_unix");
    assert!(until > unix_now(), "the reset is ahead: {parked}");
    let session = parked["attempts"][0]["result"]["session_id"].clone();
    assert!(session.is_string(), "{parked}");

    // `runs show` says so while nobody runs it.
    let out = cli.run(&["runs", "show", &batch]);
    assert_code(&out, 0, "aicli runs show");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("parked until") && shown.contains("claude five_hour limit"),
        "{shown}"
    );

    // A new fake, with no limit: only the recorded reset holds the task back.
    let out = cli.run(&[
        "resume",
        &batch,
        "--fake-api=text:Done after the reset.",
        "--json",
    ]);
    assert_code(&out, 0, "aicli resume");
    let b = json_lines(&out)
        .pop()
        .unwrap_or_else(|| panic!("no result: {}", stderr(&out)));
    let t = &b["tasks"][0];
    assert_eq!(t["status"], "succeeded", "{t}");
    assert_eq!(t["response"], "Done after the reset.", "{t}");
    assert_eq!(t["continuation"]["mode"], "resume", "{t}");
    assert_eq!(t["session_id"], session, "the parked session went on: {t}");
    let rec = task_record(&batch_dir, "p").expect("the record");
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{rec}");
    assert_eq!(attempts[1]["kind"], "unpark", "{rec}");
    let started = attempts[1]["started_at"].as_str().unwrap_or_default();
    let started = humantime::parse_rfc3339_weak(started)
        .expect("started_at")
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    assert!(
        started >= until,
        "the session went on at {started}, before the reset {until}"
    );
    assert!(rec.get("parked").is_none_or(Value::is_null), "{rec}");
}

#[test]
fn a_reset_after_the_timeout_ends_the_task_at_once_as_a_timeout() {
    let cli = Cli::new();
    let began = Instant::now();
    let out = cli.run(&[
        "run",
        "-p",
        "claude",
        "--fake-api=limit:3600",
        "--timeout",
        "120",
        "--json",
        "Say done.",
    ]);
    assert_code(&out, 20, "aicli run (timeout)");
    assert!(
        began.elapsed() < Duration::from_secs(100),
        "it did not wait: {:?}",
        began.elapsed()
    );
    let r = json_lines(&out)
        .pop()
        .unwrap_or_else(|| panic!("no result: {}", stderr(&out)));
    assert_eq!(r["error_kind"], "timeout", "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("claude usage limit resets at")
            && error.contains("after the task's timeout"),
        "{error}"
    );
}

#[test]
fn a_parked_task_cancelled_on_its_own_ends_now_not_at_the_reset() {
    let cli = Cli::new();
    let (mut child, batch_dir, _) = parked_batch(&cli, 600);
    let batch = batch_id(&batch_dir);
    let out = cli.run(&["cancel", &format!("{batch}/p")]);
    assert_code(&out, 0, "aicli cancel");
    let cancelled = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if cancelled.elapsed() > Duration::from_secs(30) {
            kill_9(&mut child);
            panic!("the batch still waits for the reset 30 s after the cancel");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !status.success(),
        "a cancelled task fails the batch: {status}"
    );
    let rec = task_record(&batch_dir, "p").expect("the record");
    assert_eq!(rec["state"], "failed", "{rec}");
    let last = rec["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["result"]["error_kind"], "cancelled", "{rec}");
    assert!(rec.get("parked").is_none_or(Value::is_null), "{rec}");
}
