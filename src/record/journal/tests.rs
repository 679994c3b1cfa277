use std::io::Write as _;
use std::path::Path;

use aicli_providers::TaskSpec;

use super::*;
use crate::record::TaskState;

fn rec(id: &str, state: TaskState) -> TaskRecord {
    let mut r = TaskRecord::queued(
        TaskSpec {
            id: id.to_owned(),
            prompt: "p".into(),
            ..TaskSpec::default()
        },
        "claude",
    );
    r.state = state;
    r
}

fn open(path: &Path) -> File {
    File::open(path).unwrap()
}

/// A task's record is its last line; a reader that is not the writer sees every line,
/// and what was appended after its last look.
#[test]
fn a_reader_finds_each_task_s_last_line_and_what_came_since() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    let w = Journal::new(path.clone());
    let mut queued = line(&rec("a", TaskState::Queued)).unwrap();
    queued.extend(line(&rec("b", TaskState::Queued)).unwrap());
    w.append(&queued).unwrap();
    w.append(&line(&rec("a", TaskState::Running)).unwrap())
        .unwrap();

    let r = Journal::new(path.clone());
    let got = |task: &str| r.record(&open(&path), task).map(Result::unwrap);
    assert_eq!(got("a").unwrap().state, TaskState::Running);
    assert_eq!(got("b").unwrap().state, TaskState::Queued);
    assert!(got("c").is_none());
    w.append(&line(&rec("b", TaskState::Succeeded)).unwrap())
        .unwrap();
    assert_eq!(got("b").unwrap().state, TaskState::Succeeded);
    assert_eq!(got("a").unwrap().state, TaskState::Running);
    let read = r.index.lock().unwrap().read;
    assert_eq!(read, std::fs::metadata(&path).unwrap().len());
    // The file is 0600: it holds what the agents did.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// A writer killed in the middle of a line leaves it torn: the next append ends it
/// first, readers skip it, and no other line is lost. A line still being written (no
/// newline yet) is not taken until it ends.
#[test]
fn a_torn_line_costs_no_other_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    let w = Journal::new(path.clone());
    w.append(&line(&rec("a", TaskState::Running)).unwrap())
        .unwrap();
    let half = line(&rec("a", TaskState::Failed)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&half[..half.len() / 2])
        .unwrap();
    let r = Journal::new(path.clone());
    let state = |task: &str| r.record(&open(&path), task).unwrap().unwrap().state;
    assert_eq!(state("a"), TaskState::Running, "the torn line is not taken");
    w.append(&line(&rec("b", TaskState::Queued)).unwrap())
        .unwrap();
    assert_eq!(state("b"), TaskState::Queued);
    assert_eq!(state("a"), TaskState::Running);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    // Another process's line glued to a torn one (it checked the end before the torn
    // write): found in it, the torn part alone lost.
    let torn = line(&rec("a", TaskState::Failed)).unwrap();
    let mut glued = torn[..torn.len() - 40].to_vec();
    glued.extend(line(&rec("c", TaskState::Blocked)).unwrap());
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&glued)
        .unwrap();
    assert_eq!(state("c"), TaskState::Blocked);
    assert_eq!(state("a"), TaskState::Running);
    // Garbage in the middle is skipped too (a journal edited by hand).
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"not json\n{\"task\":\"a\"}\n")
        .unwrap();
    w.append(&line(&rec("a", TaskState::Succeeded)).unwrap())
        .unwrap();
    assert_eq!(state("a"), TaskState::Succeeded);
}

/// A record that is JSON but not a task record is an error naming the journal, the task
/// and the byte it starts at.
#[test]
fn a_bad_record_is_an_error_naming_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    std::fs::write(&path, "{\"task\":\"a\",\"record\":{\"state\":\"odd\"}}\n").unwrap();
    let r = Journal::new(path.clone());
    let e = r.record(&open(&path), "a").unwrap().unwrap_err();
    assert!(
        e.contains("journal.ndjson") && e.contains("task a") && e.contains("byte 21"),
        "{e}"
    );
}

/// A journal replaced (another inode) or cut shorter is read again from its start.
#[test]
fn a_replaced_journal_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    std::fs::write(&path, line(&rec("a", TaskState::Running)).unwrap()).unwrap();
    let r = Journal::new(path.clone());
    assert!(r.has(&open(&path), "a"));
    let other = dir.path().join("other");
    std::fs::write(&other, line(&rec("b", TaskState::Queued)).unwrap()).unwrap();
    std::fs::rename(&other, &path).unwrap();
    assert!(r.has(&open(&path), "b"));
    assert!(!r.has(&open(&path), "a"));
}

/// Ends written while an fsync runs share the next one: ten settled tasks queued behind
/// one sync cost one more, not ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ends_written_together_share_one_fdatasync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    let j = Arc::new(Journal::new(path.clone()));
    let first = j.append(&line(&rec("t0", TaskState::Succeeded)).unwrap()).unwrap();
    j.commit(first).await.unwrap();
    assert_eq!(j.syncs.load(Ordering::Relaxed), 1);
    // An fsync under way: the group commit's lock held.
    let held = j.synced.lock().await;
    let mut waiting = Vec::new();
    for i in 1..=10 {
        let n = j
            .append(&line(&rec(&format!("t{i}"), TaskState::Succeeded)).unwrap())
            .unwrap();
        let j = j.clone();
        waiting.push(tokio::spawn(async move { j.commit(n).await }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()), "none returns before its sync");
    drop(held);
    for w in waiting {
        w.await.unwrap().unwrap();
    }
    assert_eq!(j.syncs.load(Ordering::Relaxed), 2);
    // Committed once is committed: no sync for it again.
    j.commit(first).await.unwrap();
    assert_eq!(j.syncs.load(Ordering::Relaxed), 2);
}

/// A running attempt's processes are lines of their own: the last one counts, `""` says
/// the run ended, and a task's record is not touched by them.
#[test]
fn a_run_s_processes_are_recorded_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.ndjson");
    let w = Journal::new(path.clone());
    w.append(&line(&rec("a", TaskState::Running)).unwrap())
        .unwrap();
    w.append(&pids_line("a", "marker m\n").unwrap()).unwrap();
    w.append(&pids_line("a", "10 5\nmarker m\n").unwrap())
        .unwrap();
    w.append(&pids_line("b", "11 6\nmarker n\n").unwrap())
        .unwrap();
    let r = Journal::new(path.clone());
    assert_eq!(r.pids(&open(&path), "a").as_deref(), Some("10 5\nmarker m\n"));
    assert_eq!(r.pids(&open(&path), "b").as_deref(), Some("11 6\nmarker n\n"));
    assert_eq!(
        r.record(&open(&path), "a").unwrap().unwrap().state,
        TaskState::Running
    );
    assert!(!r.has(&open(&path), "b"), "processes alone are no record");
    w.append(&pids_line("a", "").unwrap()).unwrap();
    assert_eq!(r.pids(&open(&path), "a"), None);
    assert!(r.pids(&open(&path), "b").is_some());
}
