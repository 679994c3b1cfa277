//! No orphans, even from a CLI that exits at once: a daemon grandchild that left the
//! process group, whose parent is already gone, dies with its run — in a cgroup (v2 or
//! v1) where one can be made, through aicli's subreaper otherwise — and after a
//! `kill -9` of aicli, `aicli resume` kills what the dead run left.
//!
//! Each test runs every containment this machine offers (`engine.cgroups` = `v2`, `v1`,
//! `off`); the subreaper path runs everywhere.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aicli::BatchOptions;
use aicli::proc::cgroup::{CgroupMode, available};
use aicli::providers::TaskSpec;
use tokio_util::sync::CancellationToken;

use super::support::*;

/// The containments to test here: each one this machine supports.
fn modes() -> Vec<CgroupMode> {
    let mut out = Vec::new();
    for m in [CgroupMode::V2, CgroupMode::V1] {
        match available(m) {
            Some(_) => out.push(m),
            None => eprintln!("cgroups {m:?}: not available on this machine; not tested here"),
        }
    }
    out.push(CgroupMode::Off);
    out
}

fn pids_in(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` still exists at all (alive, or a zombie nobody reaped).
fn exists(pid: u32) -> bool {
    aicli::proc::procfs::proc_stat(pid).is_some()
}

/// Each pid with what `/proc` says of it (state, parent, group), for a failure message.
fn described(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .map(|p| match aicli::proc::procfs::proc_stat(*p) {
            Some(s) => format!("{p} (state {}, ppid {}, pgrp {})", s.state, s.ppid, s.pgrp),
            None => format!("{p} (gone)"),
        })
        .collect()
}

/// Waits up to `within` until none of `pids` passes `check`; returns those that do.
fn left_after(pids: &[u32], within: Duration, check: fn(u32) -> bool) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| check(*p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_quick_runs_that_leave_a_daemon_leave_no_process() {
    for mode in modes() {
        let repo = git_repo();
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config();
        config.engine.cgroups = mode;
        let engine = engine_with(
            config,
            vec![shared(replay_provider(
                "fake",
                "claude",
                Some(&fixture("claude", "text")),
            ))],
        );
        // Half the CLIs start a setsid daemon and exit before printing anything; the
        // other half start one, print their transcript at once and exit.
        let files: Vec<PathBuf> = (0..20)
            .map(|i| dir.path().join(format!("pids-{i}")))
            .collect();
        let tasks: Vec<TaskSpec> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut t = TaskSpec::new("quick");
                t.id = format!("q{i}");
                let how = if i % 2 == 0 {
                    "--daemon-exit"
                } else {
                    "--spawn-grandchildren"
                };
                t.extra_args = [how, "1", "--pid-file", f.to_str().unwrap()]
                    .iter()
                    .filter(|a| !(how == "--daemon-exit" && **a == "1"))
                    .map(|a| a.to_string())
                    .collect();
                t
            })
            .collect();
        let mut o = BatchOptions::new(repo.path());
        o.provider = Some("fake".into());
        o.max_parallel = Some(4);
        let (tx, _ev) = collect_events();
        let b = engine
            .run_batch(tasks, o, tx, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(b.n_tasks, 20);
        let mut all = Vec::new();
        for f in &files {
            let p = pids_in(f);
            assert_eq!(
                p.len(),
                2,
                "{mode:?}: {} lists the CLI and its daemon",
                f.display()
            );
            all.extend(p);
        }
        // The batch returned: every daemon is gone, killed and reaped by this process
        // (aicli here), not even a zombie.
        let left = left_after(&all, Duration::from_millis(500), exists);
        assert!(
            left.is_empty(),
            "{mode:?}: processes left: {:?}",
            described(&left)
        );
    }
}

/// `aicli batch` with one task whose CLI double-forks a daemon (its parent exits at once;
/// the CLI itself lingers): kill -9 aicli, check the daemon outlived aicli, resume,
/// check nothing of the run is left.
fn kill_9_then_resume(mode: CgroupMode) {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let daemon_file = dir.path().join("daemon");
    let once = dir.path().join("once");
    let engine = serde_json::json!({ "cgroups": serde_json::to_value(mode).unwrap() });
    let cfg = fake_cli_config_with(
        dir.path(),
        &[
            "--once",
            once.to_str().unwrap(),
            "--double-fork-daemon",
            daemon_file.to_str().unwrap(),
            "--linger-ms",
            "30000",
        ],
        engine,
    );
    let tasks = dir.path().join("tasks.json");
    std::fs::write(&tasks, r#"[{"id": "t", "prompt": "p"}]"#).unwrap();
    let aicli = env!("CARGO_BIN_EXE_aicli");
    let mut child = std::process::Command::new(aicli)
        .arg("--config")
        .arg(&cfg)
        .args(["batch", tasks.to_str().unwrap(), "--no-mcp", "--repo"])
        .arg(repo.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The daemon exists (its parent already exited): kill aicli now.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids_in(&daemon_file).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "{mode:?}: the daemon never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let daemon = pids_in(&daemon_file)[1];
    let batch = std::fs::read_dir(repo.path().join(".aicli/runs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let recorded = recorded_pids(&batch, "t").expect("the run's processes are recorded");
    let cli: u32 = recorded.split_whitespace().next().unwrap().parse().unwrap();
    let cgroup = recorded
        .lines()
        .find_map(|l| l.strip_prefix("cgroup "))
        .map(PathBuf::from);
    assert_eq!(
        cgroup.is_some(),
        mode != CgroupMode::Off,
        "{mode:?}: {recorded}"
    );
    kill_9(&mut child);
    // The CLI dies with aicli (parent-death signal); the daemon, out of its group and
    // session, outlives both. (Both were aicli's; this test process is a subreaper too
    // — other tests run engines here —, so their zombies may come here: only the
    // living count.)
    assert!(
        left_after(&[cli], Duration::from_secs(3), alive).is_empty(),
        "{mode:?}: the CLI outlived aicli"
    );
    assert!(
        alive(daemon),
        "{mode:?}: the daemon should have outlived aicli"
    );

    let out = std::process::Command::new(aicli)
        .arg("--config")
        .arg(&cfg)
        .args([
            "resume",
            batch.file_name().unwrap().to_str().unwrap(),
            "--no-mcp",
            "--json",
            "--repo",
        ])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{mode:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = left_after(&[daemon], Duration::from_secs(2), alive);
    assert!(left.is_empty(), "{mode:?}: the daemon survived the resume");
    assert_eq!(
        recorded_pids(&batch, "t"),
        None,
        "{mode:?}: the run's processes are still recorded"
    );
    if let Some(c) = cgroup {
        assert!(
            !c.exists(),
            "{mode:?}: the run's cgroup {} is left",
            c.display()
        );
    }
    // Nothing else of this test's runs: no fake CLI running in this repository.
    let stray: Vec<u32> = aicli::proc::procfs::all_processes()
        .into_keys()
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == fake_cli());
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|c| c.starts_with(repo.path()));
            exe && cwd
        })
        .collect();
    assert!(
        stray.is_empty(),
        "{mode:?}: fake CLI processes left: {stray:?}"
    );
}

#[test]
fn kill_9_of_aicli_while_a_daemon_is_out_of_the_group_then_resume_leaves_nothing() {
    for mode in modes() {
        for _ in 0..2 {
            kill_9_then_resume(mode);
        }
    }
}

/// `aicli batch` of three tasks at once whose CLIs start grandchildren (one a daemon),
/// killed with SIGKILL the moment the first CLI has started — while the others are
/// being spawned, before their pid files could name them —, then `aicli resume`:
/// nothing of any run is left. (A CLI that started after aicli died would run
/// unsupervised; one whose record did not yet say where its processes are would be
/// missed by the resume.)
fn kill_9_while_clis_start_then_resume(mode: CgroupMode) {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let pids = dir.path().join("pids");
    let engine = serde_json::json!({ "cgroups": serde_json::to_value(mode).unwrap() });
    let cfg = fake_cli_config_with(
        dir.path(),
        &[
            "--spawn-grandchildren",
            "2",
            "--line-delay-ms",
            "300",
            "--timeline",
            started.to_str().unwrap(),
            "--pid-file",
            pids.to_str().unwrap(),
        ],
        engine,
    );
    let tasks = dir.path().join("tasks.json");
    std::fs::write(
        &tasks,
        r#"[{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "p"}, {"id": "c", "prompt": "p"}]"#,
    )
    .unwrap();
    let aicli = env!("CARGO_BIN_EXE_aicli");
    let mut child = std::process::Command::new(aicli)
        .arg("--config")
        .arg(&cfg)
        .args([
            "batch",
            tasks.to_str().unwrap(),
            "--no-mcp",
            "--max-parallel",
            "3",
        ])
        .arg("--repo")
        .arg(repo.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "{mode:?}: no CLI ever started");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill_9(&mut child);
    // Long enough for a CLI that outlived aicli to start its grandchildren.
    std::thread::sleep(Duration::from_millis(500));
    let batch = std::fs::read_dir(repo.path().join(".aicli/runs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let out = std::process::Command::new(aicli)
        .arg("--config")
        .arg(&cfg)
        .args([
            "resume",
            batch.file_name().unwrap().to_str().unwrap(),
            "--no-mcp",
            "--json",
            "--repo",
        ])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{mode:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mine = |pid: &u32| {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == fake_cli());
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|c| c.starts_with(repo.path()));
        exe && cwd
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let stray = loop {
        let stray: Vec<u32> = aicli::proc::procfs::all_processes()
            .into_keys()
            .filter(mine)
            .collect();
        if stray.is_empty() || Instant::now() >= deadline {
            break stray;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        stray.is_empty(),
        "{mode:?}: processes of the killed batch left after the resume: {:?}",
        described(&stray)
    );
}

#[test]
fn kill_9_of_aicli_while_its_clis_start_then_resume_leaves_nothing() {
    // Two rounds per cgroup mode in CI; the race campaign's 50 rounds are
    // `AICLI_RACE_ROUNDS=25` (per mode).
    let rounds: usize = std::env::var("AICLI_RACE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    for mode in modes() {
        for _ in 0..rounds {
            kill_9_while_clis_start_then_resume(mode);
        }
    }
}
