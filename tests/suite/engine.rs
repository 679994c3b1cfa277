//! Sessions, pool, budget, back-off, cancel, timeouts, worktrees and run records,
//! through the fake CLI (a real process replaying real transcripts) and real git.

use std::collections::BTreeSet;
use std::time::Duration;

use aicli::providers::{ErrorKind, SessionStatus, TaskSpec};
use aicli::record::{RunStore, TaskState};
use aicli::{BatchEvent, BatchOptions};
use tokio_util::sync::CancellationToken;

use super::support::*;

fn task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.to_owned(),
        prompt: format!("prompt of {id}"),
        extra_args: args.iter().map(|s| s.to_string()).collect(),
        ..TaskSpec::default()
    }
}

fn opts(repo: &std::path::Path, provider: &str) -> BatchOptions {
    let mut o = BatchOptions::new(repo);
    o.provider = Some(provider.to_owned());
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_each_task_in_its_own_worktree_and_records_everything() {
    let repo = git_repo();
    let fx = fixture("claude", "text");
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&fx)))],
    );
    let (tx, events) = collect_events();
    let tasks = vec![
        task("clean", &[]),
        task("dirty", &["--touch", "made-by-agent.txt"]),
    ];
    let r = engine
        .run_batch(
            tasks,
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let events = events.await.unwrap();
    assert_eq!((r.n_tasks, r.n_succeeded, r.n_failed), (2, 2, 0));
    let clean = &r.tasks[0];
    assert_eq!(clean.task_id, "clean");
    assert_eq!(clean.provider, "fake");
    assert_eq!(clean.response, "Hello from the fake Anthropic API.");
    assert_eq!(
        clean.session_id.as_deref(),
        Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002")
    );
    assert_eq!(clean.exit_code, Some(0));
    assert_eq!(clean.worktree, None, "a clean worktree is removed");
    // A worktree that holds work is kept and reported.
    let dirty = &r.tasks[1];
    let wt = dirty.worktree.clone().expect("kept worktree");
    assert!(wt.join("made-by-agent.txt").is_file());
    assert_eq!(
        dirty.branch.as_deref(),
        Some(format!("aicli/{}/dirty", r.batch_id).as_str())
    );
    let branches = git(repo.path(), &["branch", "--list", "aicli/*"]);
    assert!(branches.contains(&format!("aicli/{}/dirty", r.batch_id)));
    // Records: the raw stream equals what the CLI printed, the result re-parses.
    let store = RunStore::new(repo.path().join(".aicli/runs"));
    let rec = store.open_batch(&r.batch_id).unwrap();
    let raw = std::fs::read(rec.task_dir("dirty").join("events.ndjson")).unwrap();
    assert_eq!(raw, std::fs::read(fx.with_extension("ndjson")).unwrap());
    let t = rec.task("dirty").unwrap();
    assert_eq!(t.state, TaskState::Succeeded);
    assert_eq!(t.attempts.len(), 1);
    assert_eq!(t.attempts[0].events_start, 0);
    assert_eq!(t.attempts[0].events_end, Some(raw.len() as u64));
    assert!(rec.result().is_some());
    // The live stream saw starts, agent events and ends of both tasks.
    let started: BTreeSet<&str> = events
        .iter()
        .filter_map(|e| match e {
            BatchEvent::TaskStarted { task_id, .. } => Some(&**task_id),
            _ => None,
        })
        .collect();
    assert_eq!(started, BTreeSet::from(["clean", "dirty"]));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, BatchEvent::Agent { event, .. } if event.type_name() == "final"))
    );
    // .aicli is ignored by git: the main checkout stays clean.
    assert_eq!(git(repo.path(), &["status", "--porcelain"]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_worktree_is_removed_with_its_branch() {
    let repo = git_repo();
    let fx = fixture("claude", "text");
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&fx)))],
    );
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert!(t.success, "{t:?}");
    assert_eq!(t.worktree, None);
    assert_eq!(t.branch, None);
    assert_eq!(git(repo.path(), &["branch", "--list", "aicli/*"]), "");
    assert!(
        !repo
            .path()
            .join(".aicli/worktrees")
            .join(&r.batch_id)
            .join("t")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_with_a_commit_is_kept() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let mut o = opts(repo.path(), "fake");
    o.batch_id = Some("b1".into());
    // The task's file is committed on its branch when its run ends: prune must keep it.
    let r = engine
        .run_batch(
            vec![task("t", &["--touch", "f.txt"])],
            o,
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let wt = r.tasks[0].worktree.clone().unwrap();
    assert_eq!(
        git(&wt, &["status", "--porcelain"]),
        "",
        "the work is committed"
    );
    let repo_h = aicli::worktree::Repo::open(repo.path()).await.unwrap();
    let list = repo_h.list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        list[0].holds_work.as_deref(),
        Some("1 commit not on any other branch")
    );
    let pruned = repo_h.prune().await.unwrap();
    assert!(matches!(pruned[0].1, aicli::worktree::Cleanup::Kept { .. }));
    assert!(wt.is_dir());
    // Once the commit is merged into main, prune removes it.
    git(repo.path(), &["merge", "-q", "--ff-only", "aicli/b1/t"]);
    let pruned = repo_h.prune().await.unwrap();
    assert_eq!(pruned[0].1, aicli::worktree::Cleanup::Removed);
    assert!(!wt.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_a_git_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", None))],
    );
    let (tx, _ev) = collect_events();
    let err = engine
        .run_batch(
            vec![task("t", &[])],
            opts(dir.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "not a git repository: {}; run `git init` or pass --repo",
            dir.path().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_provider_lists_the_known_ones() {
    let repo = git_repo();
    let engine = engine_with(test_config(), vec![]);
    let (tx, _ev) = collect_events();
    let err = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path(), "claud"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown provider 'claud'; known providers: claude, claude-acp, codex, codex-acp, gemini, gemini-acp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_binary_fails_fast_with_not_installed_and_the_npm_command() {
    let repo = git_repo();
    let mut config = test_config();
    let mut p = config.providers["codex"].clone();
    p.binary_name = "definitely-not-installed-cli".into();
    config.providers.insert("codex".into(), p);
    let engine = engine_with(config, vec![]);
    let (tx, _ev) = collect_events();
    let t0 = std::time::Instant::now();
    let r = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path(), "codex"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    // At once: no retries, no backoff (slack for a busy machine).
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let t = &r.tasks[0];
    assert_eq!(t.error_kind, Some(ErrorKind::NotInstalled));
    assert_eq!(
        t.error.as_deref(),
        Some(
            "definitely-not-installed-cli is not installed (looked in PATH and aicli's cache); install it with `aicli install`, or: npm install -g @openai/codex@0.171.0"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_timeout_and_idle_watchdog_end_hung_runs_and_leave_nothing() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let pid_wall = repo.path().join("pids-wall");
    let pid_idle = repo.path().join("pids-idle");
    let mut wall = task(
        "wall",
        &[
            "--hang-after",
            "1",
            "--line-delay-ms",
            "0",
            "--spawn-grandchildren",
            "2",
            "--ignore-sigterm",
            "--pid-file",
            pid_wall.to_str().unwrap(),
        ],
    );
    wall.timeout_secs = Some(1);
    wall.idle_timeout_secs = Some(60);
    let mut idle = task(
        "idle",
        &[
            "--hang-after",
            "1",
            "--spawn-grandchildren",
            "1",
            "--pid-file",
            pid_idle.to_str().unwrap(),
        ],
    );
    idle.idle_timeout_secs = Some(1);
    let r = engine
        .run_batch(
            vec![wall, idle],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let (w, i) = (&r.tasks[0], &r.tasks[1]);
    assert_eq!(w.error_kind, Some(ErrorKind::Timeout));
    assert!(
        w.error
            .as_deref()
            .unwrap()
            .starts_with("wall-clock timeout: the run took longer than 1s"),
        "{:?}",
        w.error
    );
    assert_eq!(i.error_kind, Some(ErrorKind::Timeout));
    assert!(
        i.error
            .as_deref()
            .unwrap()
            .starts_with("idle watchdog: no output for 1s"),
        "{:?}",
        i.error
    );
    // In order: the limit, then aicli's own stop (never "before that: crashed" for the
    // exit aicli's kill caused).
    for r in [w, i] {
        let e = r.error.as_deref().unwrap();
        assert!(e.contains("; aicli then stopped the CLI"), "{e}");
        assert!(!e.contains("before that") && !e.contains("crashed"), "{e}");
    }
    // The session id printed before the hang is kept.
    assert_eq!(
        w.session_id.as_deref(),
        Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002")
    );
    assert_all_gone(&pid_wall, Duration::from_secs(2)).await;
    assert_all_gone(&pid_idle, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_batch_stops_running_and_queued_tasks() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let pids = repo.path().join("pids");
    let tasks = vec![
        task(
            "running",
            &[
                "--hang-after",
                "1",
                "--spawn-grandchildren",
                "2",
                "--ignore-sigterm",
                "--pid-file",
                pids.to_str().unwrap(),
            ],
        ),
        task("queued", &[]),
    ];
    let mut o = opts(repo.path(), "fake");
    o.max_parallel = Some(1);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        c2.cancel();
    });
    // Without the cancel the running task hangs forever: the batch ending at all is
    // the cancel's doing. The bound only keeps a broken cancel from hanging the suite.
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        engine.run_batch(tasks, o, tx, cancel),
    )
    .await
    .expect("the cancel ends the batch")
    .unwrap();
    eprintln!("the cancelled batch ended after {:?}", t0.elapsed());
    assert_eq!(r.tasks[0].error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        r.tasks[0].status,
        SessionStatus::Interrupted,
        "a user's cancel leaves the task for `aicli resume`"
    );
    assert_eq!(r.tasks[1].error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        r.tasks[1].error.as_deref(),
        Some("never started (aicli resume runs it)")
    );
    assert_eq!(r.tasks[1].status, SessionStatus::Interrupted);
    assert_eq!((r.n_failed, r.n_interrupted), (0, 2));
    assert_all_gone(&pids, Duration::from_secs(2)).await;
    // The queued task is interrupted in its record, with no attempt, so a resume runs it
    // from the start.
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .unwrap();
    let queued = rec.task("queued").unwrap();
    assert_eq!(queued.state, TaskState::Interrupted);
    assert!(queued.attempts.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_event_ends_the_wait_even_if_the_cli_lingers() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let t0 = std::time::Instant::now();
    let r = engine
        .run_batch(
            vec![task("t", &["--linger-ms", "600000"])],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    // The CLI lingers for 10 minutes after its final event; the wait ends long before.
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
    assert_eq!(r.tasks[0].response, "Hello from the fake Anthropic API.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_line_keeps_what_was_printed_and_says_crashed() {
    let repo = git_repo();
    let engine = fake_engine();
    let fx = fixture("claude", "text");
    let partial = repo.path().join("partial.ndjson");
    let full = std::fs::read_to_string(fx.with_extension("ndjson")).unwrap();
    let first_two: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&partial, first_two).unwrap();
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![task(
                "c",
                &["--replay", partial.to_str().unwrap(), "--crash-mid-line"],
            )],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert!(!t.success);
    assert!(
        matches!(
            t.error_kind,
            Some(ErrorKind::Crashed) | Some(ErrorKind::Protocol)
        ),
        "{t:?}"
    );
    assert_eq!(
        t.session_id.as_deref(),
        Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002")
    );
    assert_eq!(t.exit_code, None, "abort() is a signal");
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .unwrap();
    let raw = std::fs::read_to_string(rec.task_dir("c").join("events.ndjson")).unwrap();
    assert!(
        raw.ends_with("{\"type\":\"result\",\"subtype\":\"succ"),
        "the cut line is recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_parallel_sessions_run_at_once() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, events) = collect_events();
    let timeline = repo.path().join("timeline");
    let tl = timeline.to_str().unwrap().to_owned();
    let tasks: Vec<TaskSpec> = (0..6)
        .map(|i| {
            task(
                &format!("t{i}"),
                &["--start-delay-ms", "300", "--timeline", &tl],
            )
        })
        .collect();
    let mut o = opts(repo.path(), "fake");
    o.max_parallel = Some(2);
    let r = engine
        .run_batch(tasks, o, tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.n_succeeded, 6);
    // The processes themselves say when they ran: never more than 2 at once.
    let mut marks: Vec<(u128, i32)> = std::fs::read_to_string(&timeline)
        .unwrap()
        .lines()
        .map(|l| {
            let (ns, what) = l.split_once(' ').unwrap();
            (ns.parse().unwrap(), if what == "start" { 1 } else { -1 })
        })
        .collect();
    assert_eq!(marks.len(), 12);
    marks.sort_by_key(|(ns, d)| (*ns, *d));
    let (mut running, mut peak) = (0, 0);
    for (_, d) in &marks {
        running += d;
        peak = peak.max(running);
    }
    assert_eq!(peak, 2, "{marks:?}");
    let order: Vec<String> = events
        .await
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            BatchEvent::TaskStarted { task_id, .. } => Some(task_id.to_string()),
            _ => None,
        })
        .collect();
    // FIFO in waves of two (within a wave, which process gets going first is a race).
    let wave =
        |i: usize| -> BTreeSet<&str> { order[i..i + 2].iter().map(String::as_str).collect() };
    assert_eq!(wave(0), BTreeSet::from(["t0", "t1"]), "{order:?}");
    assert_eq!(order.len(), 6);
    assert!(order[4..].contains(&"t5".to_owned()), "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_back_off_lower_parallelism_and_retry() {
    let repo = git_repo();
    let mut config = test_config();
    config.engine.retry.max_attempts = 3;
    let engine = engine_with(
        config,
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "err429_retries1")),
        ))],
    );
    let (tx, events) = collect_events();
    let tasks = vec![task("a", &[]), task("b", &[])];
    let mut o = opts(repo.path(), "fake");
    o.max_parallel = Some(2);
    let r = engine
        .run_batch(tasks, o, tx, CancellationToken::new())
        .await
        .unwrap();
    for t in &r.tasks {
        assert_eq!(t.error_kind, Some(ErrorKind::RateLimit), "{t:?}");
    }
    let events = events.await.unwrap();
    let backoffs: Vec<(u32, usize)> = events
        .iter()
        .filter_map(|e| match e {
            BatchEvent::Backoff {
                attempt,
                parallelism,
                ..
            } => Some((*attempt, *parallelism)),
            _ => None,
        })
        .collect();
    // Each task is tried 3 times: 2 back-offs per task.
    assert_eq!(backoffs.len(), 4, "{backoffs:?}");
    assert_eq!(backoffs[0].1, 1, "parallelism halves");
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .unwrap();
    let a = rec.task("a").unwrap();
    assert_eq!(a.attempts.len(), 3);
    assert_eq!(a.state, TaskState::Failed);
    // Other errors are not retried.
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "err401_retries1")),
        ))],
    );
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![task("x", &[])],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.tasks[0].error_kind, Some(ErrorKind::Auth));
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .unwrap();
    assert_eq!(rec.task("x").unwrap().attempts.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_costs_are_reported_as_unknown_never_zero() {
    let repo = git_repo();
    let mut p = replay_provider("fake", "codex", Some(&fixture("codex", "text")));
    p = p.with_config(|c| c.prices.0.clear());
    let engine = engine_with(test_config(), vec![shared(p)]);
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert!(t.success, "{t:?}");
    assert_eq!(t.cost_usd, None);
    assert_eq!(t.cost_source, aicli::providers::CostSource::Unknown);
    assert_eq!(r.n_cost_unknown, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_over_long_lines_are_reported_not_dropped() {
    let repo = git_repo();
    let mut config = test_config();
    config.engine.line_cap_bytes = 64 * 1024;
    let engine = engine_with(
        config,
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "text")),
        ))],
    );
    let (tx, events) = collect_events();
    let r = engine
        .run_batch(
            vec![task(
                "t",
                &["--garbage", "2", "--overlong", "200000", "--invalid-utf8"],
            )],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert!(t.success, "the run itself finished: {t:?}");
    assert_eq!(t.protocol_errors, 4);
    let events = events.await.unwrap();
    let protocol: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            BatchEvent::Agent { event, .. } => match &event.kind {
                aicli::providers::EventKind::Protocol { message, .. } => Some(message.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(protocol.len(), 4, "{protocol:?}");
    assert!(
        protocol
            .iter()
            .any(|m| m.starts_with("line of 200000 bytes exceeds the cap of 65536 bytes")),
        "{protocol:?}"
    );
    assert!(
        protocol
            .iter()
            .any(|m| m.starts_with("line is not valid UTF-8")),
        "{protocol:?}"
    );
    assert_eq!(t.status, SessionStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonized_grandchild_is_killed_when_its_run_ends_normally() {
    // The fake CLI starts two grandchildren, one of which leaves the process group
    // (setsid, like a daemon), then finishes normally: the escaped one is reparented to
    // init when the CLI exits, and must still be killed.
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let pids = repo.path().join("pids");
    let r = engine
        .run_batch(
            vec![task(
                "t",
                &[
                    "--spawn-grandchildren",
                    "2",
                    "--linger-ms",
                    "800",
                    "--pid-file",
                    pids.to_str().unwrap(),
                ],
            )],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
    assert_all_gone(&pids, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_gets_the_base_set_and_its_providers_variables_not_the_whole_environment() {
    // `Engine::with_env` is where a CLI's variables come from (aicli's own environment by
    // default), never what it inherits whole: the base set and the provider's named
    // variables pass, the config's and the task's `env` go over them, and a secret that
    // nobody named stays out.
    let repo = git_repo();
    let mut env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    env.insert("AICLI_PROVIDER_VAR".into(), "named by the provider".into());
    env.insert("AICLI_NOBODYS_SECRET".into(), "secret".into());
    env.insert("LC_AICLI_TEST".into(), "base set prefix".into());
    let provider = replay_provider("fake", "claude", Some(&fixture("claude", "text")))
        .with_config(|c| c.env_passthrough = vec!["AICLI_PROVIDER_*".into()]);
    let engine = engine_with(test_config(), vec![shared(provider)]).with_env(env);
    let (tx, _ev) = collect_events();
    let mut t = task(
        "t",
        &[
            "--require-env",
            "AICLI_PROVIDER_VAR=named by the provider",
            "--require-env",
            "LC_AICLI_TEST=base set prefix",
            "--require-env-unset",
            "AICLI_NOBODYS_SECRET",
        ],
    );
    t.env
        .insert("AICLI_TASK_VAR".into(), "from the task".into());
    t.extra_args.extend([
        "--require-env".into(),
        "AICLI_TASK_VAR=from the task".into(),
    ]);
    let r = engine
        .run_batch(
            vec![t],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
}

/// `--replay` args for fixture `provider/scenario`.
fn replay_args(provider: &str, scenario: &str) -> Vec<String> {
    let f = fixture(provider, scenario);
    let ext = |e: &str| f.with_extension(e).display().to_string();
    vec![
        "--replay".into(),
        ext("ndjson"),
        "--stderr-file".into(),
        ext("stderr"),
        "--exit-file".into(),
        ext("exit"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_resuming_a_session_runs_where_it_ran_and_counts_only_its_own_usage() {
    // Codex reports usage cumulative over a thread (120 then 240 input tokens in the two
    // recorded runs). A later task with `resume_session_id` finds the session's last run
    // in the records: its totals are subtracted, and it runs in that run's directory.
    let repo = git_repo();
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "codex", None))],
    );
    let run = |t: TaskSpec| {
        let engine = engine.clone();
        let o = opts(repo.path(), "fake");
        async move {
            let (tx, _ev) = collect_events();
            engine
                .run_batch(vec![t], o, tx, CancellationToken::new())
                .await
                .unwrap()
        }
    };
    let mut first = task("first", &[]);
    first.extra_args = replay_args("codex", "resume_first");
    let b1 = run(first).await;
    let r1 = &b1.tasks[0];
    assert!(r1.success, "{r1:?}");
    assert_eq!(r1.worktree, None, "no work: the worktree is removed");
    let sid = r1.session_id.clone().unwrap();
    let totals = r1.session_totals.unwrap();
    assert_eq!(totals.usage.total_input(), 120);

    // The resumed run: per-run usage, the prior recorded, the same directory (the fake
    // CLI touches a file there, so the worktree is kept and reported).
    let mut second = task("second", &["--touch", "resumed.txt"]);
    second.extra_args.extend(replay_args("codex", "resume"));
    second.resume_session_id = Some(sid.clone());
    let b2 = run(second).await;
    let r2 = &b2.tasks[0];
    assert!(r2.success, "{r2:?}");
    assert_eq!(r2.session_id.as_deref(), Some(sid.as_str()));
    assert_eq!(
        r2.canonical_usage, totals.usage,
        "this run alone: 240 - 120"
    );
    assert_eq!(r2.session_totals.unwrap().usage.total_input(), 240);
    let same_dir = repo
        .path()
        .join(".aicli/worktrees")
        .join(&b1.batch_id)
        .join("first");
    assert_eq!(r2.worktree.as_deref(), Some(same_dir.as_path()), "{r2:#?}");
    assert!(same_dir.join("resumed.txt").is_file());
    let c = r2.continuation.as_ref().unwrap();
    assert_eq!(c.mode, aicli::providers::ContinuationMode::Resume);
    assert!(
        c.reason.contains(&format!("{}/first", b1.batch_id)),
        "{c:?}"
    );
    let store = RunStore::new(repo.path().join(".aicli/runs"));
    let rec = store
        .open_batch(&b2.batch_id)
        .unwrap()
        .task("second")
        .unwrap();
    assert_eq!(rec.attempts[0].prior, Some(totals));
    assert_eq!(
        rec.attempts[0].resumed_session.as_deref(),
        Some(sid.as_str())
    );

    // Resumed again while that worktree is kept: the task works in it, on its branch.
    let mut third = task("third", &[]);
    third.extra_args = replay_args("codex", "resume");
    third.resume_session_id = Some(sid.clone());
    let b3 = run(third).await;
    let r3 = &b3.tasks[0];
    assert!(r3.success, "{r3:?}");
    assert_eq!(r3.worktree.as_deref(), Some(same_dir.as_path()), "{r3:#?}");
    assert_eq!(r3.branch, r2.branch);
    assert_eq!(
        r3.canonical_usage.total_input(),
        0,
        "the same cumulative figure as the run it resumed"
    );

    // A session no record knows runs fresh, in a worktree of its own, with no prior.
    let mut other = task("other", &[]);
    other.extra_args = replay_args("codex", "resume");
    other.resume_session_id = Some("no-such-session".into());
    let b4 = run(other).await;
    let rec = store
        .open_batch(&b4.batch_id)
        .unwrap()
        .task("other")
        .unwrap();
    assert_eq!(rec.attempts[0].prior, None);
    assert_eq!(b4.tasks[0].continuation, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cwd_is_a_subdirectory_of_its_worktree_through_a_real_adapter() {
    // The Claude adapter builds the command; the fake CLI stands in for the binary.
    let repo = git_repo();
    std::fs::create_dir_all(repo.path().join("sub")).unwrap();
    std::fs::write(repo.path().join("sub/keep"), "").unwrap();
    git(repo.path(), &["add", "sub/keep"]);
    git(repo.path(), &["commit", "-q", "-m", "sub"]);
    let fx = fixture("claude", "text");
    let mut config = test_config();
    let mut p = config.providers["claude"].clone();
    p.binary_path = Some(fake_cli());
    p.extra_args = vec![
        "--replay".into(),
        fx.with_extension("ndjson").display().to_string(),
    ];
    config.providers.insert("claude".into(), p);
    let engine = engine_with(config, vec![]);
    let mut t = task("t", &["--touch", "made-here.txt"]);
    t.cwd = Some("sub".into());
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![t],
            opts(repo.path(), "claude"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let r = &r.tasks[0];
    assert!(r.success, "{r:?}");
    let wt = r.worktree.clone().expect("kept: it holds a new file");
    assert!(
        wt.join("sub/made-here.txt").is_file(),
        "ran in <worktree>/sub"
    );
    assert!(!wt.join("sub/sub").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_precheck_stops_a_run_without_credentials_unless_turned_off() {
    // Codex (through its real adapter; the fake CLI stands in for the binary) with no
    // CODEX_API_KEY and an empty HOME: the pre-check says `auth` before anything starts.
    // With `engine.auth_precheck` off (credentials aicli cannot see), the CLI runs.
    let repo = git_repo();
    let home = tempfile::tempdir().unwrap();
    let fx = fixture("codex", "text");
    let run = |precheck: bool| {
        let mut config = test_config();
        config.engine.auth_precheck = precheck;
        let mut p = config.providers["codex"].clone();
        p.binary_path = Some(fake_cli());
        p.extra_args = vec![
            "--replay".into(),
            fx.with_extension("ndjson").display().to_string(),
        ];
        config.providers.insert("codex".into(), p);
        let mut env: std::collections::BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| !k.starts_with("CODEX") && k != "OPENAI_API_KEY")
            .collect();
        env.insert("HOME".into(), home.path().display().to_string());
        engine_with(config, vec![]).with_env(env)
    };
    let (tx, _ev) = collect_events();
    let r = run(true)
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path(), "codex"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert_eq!(t.error_kind, Some(ErrorKind::Auth), "{t:?}");
    assert!(
        t.error.as_deref().unwrap().contains("CODEX_API_KEY"),
        "{t:?}"
    );
    assert_eq!(t.exit_code, None, "nothing was started");
    let (tx, _ev) = collect_events();
    let r = run(false)
        .run_batch(
            vec![task("u", &[])],
            opts(repo.path(), "codex"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
}

/// Issue 21, F7: a task's prompt is stored once in its batch's record (in
/// `batch.json`; `task.json` and the results leave it out, the readers put it back),
/// and a prompt over `engine.max_prompt_bytes` is refused, naming the task and the
/// key, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_is_stored_once_and_one_over_the_limit_is_refused() {
    let repo = git_repo();
    let fx = fixture("claude", "text");
    let mut config = test_config();
    config.engine.max_prompt_bytes = 100_000;
    let engine = engine_with(
        config,
        vec![shared(replay_provider("fake", "claude", Some(&fx)))],
    );
    let marker = "unique-prompt-marker-7f3a";
    let mut t = task("big", &[]);
    t.prompt = format!("{marker} {}", "x".repeat(90_000));
    let (tx, _events) = collect_events();
    let r = engine
        .run_batch(
            vec![t.clone()],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
    let runs = repo.path().join(".aicli/runs");
    let mut copies = Vec::new();
    for entry in files_under(&runs) {
        let mut text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        // The test provider puts the prompt into its argv (a real provider writes it to
        // stdin), and the record keeps the argv: that copy is the test's.
        let no_argv = |v: &mut serde_json::Value| {
            for a in v["attempts"].as_array_mut().unwrap() {
                a["argv"] = serde_json::Value::Null;
            }
        };
        if entry.ends_with("task.json") {
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            no_argv(&mut v);
            text = v.to_string();
        }
        if entry.ends_with("journal.ndjson") {
            let mut lines = Vec::new();
            for l in text.lines() {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                // A record's line (the others name a run's processes).
                if v.get("record").is_some() {
                    no_argv(&mut v["record"]);
                }
                lines.push(v.to_string());
            }
            text = lines.join("\n");
        }
        for _ in text.matches(marker) {
            copies.push(entry.clone());
        }
    }
    assert_eq!(
        copies,
        [runs.join(&r.batch_id).join("batch.json")],
        "the prompt's copies in the record"
    );
    // The record reads back whole.
    let rec = RunStore::new(&runs).open_batch(&r.batch_id).unwrap();
    assert_eq!(rec.task("big").unwrap().task.prompt, t.prompt);
    assert_eq!(rec.tasks().unwrap()[0].task.prompt, t.prompt);

    // Over the limit: refused, nothing written.
    let before = std::fs::read_dir(&runs).unwrap().count();
    let mut over = task("over", &[]);
    over.prompt = "y".repeat(100_001);
    let (tx, _events) = collect_events();
    let err = engine
        .run_batch(
            vec![task("fine", &[]), over],
            opts(repo.path(), "fake"),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "task 2 (over): prompt: 100001 bytes is over the limit of 100000 bytes (engine.max_prompt_bytes in the config)"
    );
    assert!(err.is_usage(), "{err:?}");
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), before);
}
