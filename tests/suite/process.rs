//! Process supervision against real processes: groups, grandchildren that ignore
//! SIGTERM or leave the session, drop, line caps.

use std::time::Duration;

use aicli::proc::lines::StdoutLine;
use aicli::proc::spawn::{LocalProcess, OutputOptions};
use aicli::providers::{BinaryLocation, CommandSpec};

use super::support::{alive, assert_all_gone, fake_cli};

/// Waits (up to 2 s) until the fake CLI's pid file lists `n` processes.
async fn wait_for_pids(pid_file: &std::path::Path, n: usize) {
    for _ in 0..200 {
        if std::fs::read_to_string(pid_file).is_ok_and(|t| t.lines().count() == n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn cmd(args: &[&str], cwd: &std::path::Path) -> CommandSpec {
    let mut c = CommandSpec::new(&BinaryLocation::Path(fake_cli()), cwd);
    c.args(args.iter().map(|s| s.to_string()));
    c
}

#[tokio::test]
async fn shutdown_kills_grandchildren_that_ignore_sigterm_or_leave_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let c = cmd(
        &[
            "--spawn-grandchildren",
            "3",
            "--ignore-sigterm",
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--hang",
        ],
        dir.path(),
    );
    let mut p = LocalProcess::spawn(&c, OutputOptions::default()).unwrap();
    // Wait until the grandchildren exist.
    wait_for_pids(&pid_file, 4).await;
    let pids: Vec<u32> = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|p| alive(*p)), "all started");
    // The first grandchild left the session: it is not in the child's group.
    let gc = aicli::proc::procfs::proc_stat(pids[1]).unwrap();
    assert_ne!(
        gc.session,
        p.pid(),
        "the setsid grandchild has its own session"
    );

    let t0 = std::time::Instant::now();
    let code = p.shutdown(Duration::from_millis(300)).await;
    assert_eq!(code, None, "killed by a signal");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "SIGTERM was ignored, so the grace ran out"
    );
    assert_all_gone(&pid_file, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_cooperative_child_exits_on_sigterm_without_waiting_for_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let c = cmd(
        &[
            "--spawn-grandchildren",
            "2",
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--hang",
        ],
        dir.path(),
    );
    let mut p = LocalProcess::spawn(&c, OutputOptions::default()).unwrap();
    wait_for_pids(&pid_file, 3).await;
    let t0 = std::time::Instant::now();
    p.shutdown(Duration::from_secs(120)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t0.elapsed()
    );
    assert_all_gone(&pid_file, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn dropping_a_running_process_kills_its_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let c = cmd(
        &[
            "--spawn-grandchildren",
            "2",
            "--ignore-sigterm",
            "--pid-file",
            pid_file.to_str().unwrap(),
            "--hang",
        ],
        dir.path(),
    );
    let p = LocalProcess::spawn(&c, OutputOptions::default()).unwrap();
    wait_for_pids(&pid_file, 3).await;
    drop(p);
    assert_all_gone(&pid_file, Duration::from_secs(3)).await;
}

#[tokio::test]
async fn stdout_is_teed_verbatim_and_over_long_lines_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let tee_path = dir.path().join("events.ndjson");
    let c = cmd(&["--overlong", "100000", "--garbage", "1"], dir.path());
    let out = OutputOptions {
        line_cap: 4096,
        stdout_tee: Some(std::fs::File::create(&tee_path).unwrap()),
        ..OutputOptions::default()
    };
    let mut p = LocalProcess::spawn(&c, out).unwrap();
    let mut lines = Vec::new();
    while let Some(l) = p.lines.recv().await {
        lines.push(l);
    }
    assert_eq!(p.wait().await, Some(0));
    p.drain().await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        lines[0],
        StdoutLine::Line(b"this is not json #0 {{".to_vec())
    );
    match &lines[1] {
        StdoutLine::Overlong { len, prefix } => {
            assert_eq!(*len, 100_000);
            assert_eq!(prefix.len(), 4096);
        }
        other => panic!("{other:?}"),
    }
    // The record has every byte, the over-long line included.
    let recorded = std::fs::read(&tee_path).unwrap();
    assert_eq!(recorded.len(), "this is not json #0 {{\n".len() + 100_001);
}

#[tokio::test]
async fn stderr_is_drained_concurrently_so_a_chatty_child_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // 1 MiB of stderr: more than a pipe holds; the child would block if nobody read.
    let big = dir.path().join("big.stderr");
    std::fs::write(&big, vec![b'e'; 1024 * 1024]).unwrap();
    let c = cmd(
        &["--stderr-file", big.to_str().unwrap(), "--exit", "7"],
        dir.path(),
    );
    let out = OutputOptions {
        stderr_tail: 1000,
        ..OutputOptions::default()
    };
    let mut p = LocalProcess::spawn(&c, out).unwrap();
    let code = tokio::time::timeout(Duration::from_secs(10), p.wait())
        .await
        .unwrap();
    assert_eq!(code, Some(7));
    p.drain().await;
    let tail = p.stderr.text();
    assert!(
        tail.starts_with("[aicli: 1047576 earlier bytes of stderr not kept]"),
        "{}",
        &tail[..80]
    );
}
