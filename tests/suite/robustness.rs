//! Concurrency, interruption, records and the command line at their edges. Each test
//! began as the reproduction of a bug found in a review of the engine (its comment says
//! what went wrong then) and asserts the behaviour the docs promise.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aicli::BatchOptions;
use aicli::engine::{AgentGrant, AgentServer, TaskScope};
use aicli::providers::{AgentEvent, CostSource, EventKind, McpEndpoint, SessionStatus, TaskSpec};
use aicli::record::{RunStore, TaskState};
use aicli::worktree::{Cleanup, Repo};
use tokio_util::sync::CancellationToken;

use super::support::*;

/// An agent server that asks, per task, the next question of its script on each grant.
#[derive(Debug, Default)]
struct PerTask {
    questions: Mutex<HashMap<String, VecDeque<Option<String>>>>,
    grants: Mutex<Vec<(String, String, PathBuf)>>,
    revoked: Mutex<Vec<(String, Instant)>>,
}

impl PerTask {
    fn new(script: &[(&str, &[Option<&str>])]) -> Arc<PerTask> {
        let mut m = HashMap::new();
        for (t, qs) in script {
            m.insert(
                t.to_string(),
                qs.iter().map(|q| q.map(str::to_owned)).collect(),
            );
        }
        Arc::new(PerTask {
            questions: Mutex::new(m),
            ..PerTask::default()
        })
    }
}

#[async_trait::async_trait]
impl AgentServer for PerTask {
    async fn grant(
        &self,
        scope: TaskScope,
        _reach: Option<&aicli::runner::AgentReach>,
    ) -> Result<AgentGrant, String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let q = self
            .questions
            .lock()
            .unwrap()
            .get_mut(&scope.task_id)
            .and_then(|d| d.pop_front())
            .flatten();
        if let Some(q) = q {
            tx.send(AgentEvent::synthetic(EventKind::Question {
                question: q,
                options: vec![],
            }))
            .unwrap();
        }
        let mut g = self.grants.lock().unwrap();
        let token = format!("token-{}-{}", scope.task_id, g.len());
        g.push((
            scope.task_id.clone(),
            token.clone(),
            scope.workspace.clone(),
        ));
        Ok(AgentGrant {
            endpoint: McpEndpoint {
                name: "aicli".into(),
                url: "http://127.0.0.1:9/mcp".into(),
                token,
                tools: vec![],
            },
            port: 9,
            events: rx,
        })
    }
    fn revoke(&self, token: &str) {
        self.revoked
            .lock()
            .unwrap()
            .push((token.to_owned(), Instant::now()));
    }
    fn restrict(&self, _token: &str, _peer: std::net::IpAddr) {}
}

fn task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.to_owned(),
        prompt: format!("prompt of {id}"),
        extra_args: args.iter().map(|s| s.to_string()).collect(),
        ..TaskSpec::default()
    }
}

fn opts(repo: &Path) -> BatchOptions {
    let mut o = BatchOptions::new(repo);
    o.provider = Some("fake".into());
    o
}

fn state_of(repo: &Path, id: &str) -> Option<(String, serde_json::Value)> {
    let runs = repo.join(".aicli/runs");
    let b = std::fs::read_dir(&runs).ok()?.flatten().next()?.path();
    let v = task_record(&b, id)?;
    Some((v["state"].as_str()?.to_owned(), v))
}

async fn wait_state(repo: &Path, id: &str, want: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((s, v)) = state_of(repo, id)
            && s == want
        {
            return v;
        }
        assert!(Instant::now() < deadline, "{id} never got to {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// R1: `resume_batch` of a batch whose aicli is still alive kills the live run and
/// runs the task a second time, in parallel with the live batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r1_resume_of_a_live_batch_is_refused() {
    let repo = git_repo();
    let engine = fake_engine();
    let e2 = engine.clone();
    let root = repo.path().to_path_buf();
    let live = tokio::spawn(async move {
        let (tx, _ev) = collect_events();
        e2.run_batch(
            vec![task("slow", &["--line-delay-ms", "700"])],
            opts(&root),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap()
    });
    wait_state(repo.path(), "slow", "running").await;
    tokio::time::sleep(Duration::from_millis(900)).await; // it printed a line
    let store = engine.store(repo.path(), None);
    let batch_id = store.list()[0].batch_id();
    let (tx, _ev) = collect_events();
    let resumed = engine
        .resume_batch(&store, &batch_id, tx, CancellationToken::new())
        .await;
    let live = live.await.unwrap();
    let rec = store.open_batch(&batch_id).unwrap().task("slow").unwrap();
    let kinds: Vec<String> = rec
        .attempts
        .iter()
        .map(|a| {
            format!(
                "#{} {:?} {:?}/{:?}",
                a.attempt,
                a.kind,
                a.result.as_ref().map(|r| r.status),
                a.result.as_ref().and_then(|r| r.error_kind)
            )
        })
        .collect();
    eprintln!(
        "live batch's own result for 'slow': {:?} {:?} {:?}",
        live.tasks[0].status, live.tasks[0].error_kind, live.tasks[0].error
    );
    eprintln!("attempts in task.json: {kinds:?}");
    assert!(
        resumed.is_err(),
        "resume of a batch that is still running was accepted; the live run got {:?} ({:?}), attempts: {kinds:?}",
        live.tasks[0].error_kind,
        live.tasks[0].error
    );
}

/// R2: answering a blocked task while its batch still runs other tasks: at the end the
/// batch's result.json says the task is still blocked (the live batch overwrote it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r2_an_answer_during_a_live_batch_shows_in_its_batch_result() {
    let repo = git_repo();
    let asker = PerTask::new(&[("ask", &[Some("Which DB?"), None])]);
    let engine = fake_engine().with_agent_server(asker);
    let e2 = engine.clone();
    let root = repo.path().to_path_buf();
    let live = tokio::spawn(async move {
        let (tx, _ev) = collect_events();
        let mut o = opts(&root);
        o.max_parallel = Some(2);
        e2.run_batch(
            vec![task("ask", &[]), task("slow", &["--line-delay-ms", "1000"])],
            o,
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap()
    });
    wait_state(repo.path(), "ask", "blocked").await;
    let store = engine.store(repo.path(), None);
    let (tx, _ev) = collect_events();
    let answered = engine
        .answer(&store, "ask", "Postgres", tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(answered.status, SessionStatus::Succeeded);
    let live = live.await.unwrap();
    let rec = store.open_batch(&live.batch_id).unwrap();
    let on_disk = rec.result().unwrap();
    let task_json = rec.task("ask").unwrap();
    eprintln!(
        "task.json state: {:?}; batch result.json says: {:?} (n_blocked={}, n_succeeded={})",
        task_json.state, on_disk.tasks[0].status, on_disk.n_blocked, on_disk.n_succeeded
    );
    assert_eq!(task_json.state, TaskState::Succeeded);
    assert_eq!(
        on_disk.tasks[0].status,
        SessionStatus::Succeeded,
        "batch result.json disagrees with task.json"
    );
}

/// R3: a blocked task whose worktree directory was deleted: the answer fails ("cannot
/// create the worktree": the branch still exists) and the question is gone for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_answer_after_the_worktree_was_deleted() {
    let repo = git_repo();
    let asker = PerTask::new(&[("svc", &[Some("Which DB?"), None])]);
    let engine = fake_engine().with_agent_server(asker);
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("svc", &[])],
            opts(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let wt = b.tasks[0].worktree.clone().unwrap();
    std::fs::remove_dir_all(&wt).unwrap();
    let store = engine.store(repo.path(), None);
    let (tx, _ev) = collect_events();
    let r = engine
        .answer(&store, "svc", "Postgres", tx, CancellationToken::new())
        .await
        .unwrap();
    eprintln!("answer -> {:?} {:?}: {:?}", r.status, r.error_kind, r.error);
    eprintln!("blocked now: {}", engine.blocked(&store).len());
    assert!(
        r.success,
        "answer after the worktree was deleted: {:?}",
        r.error
    );
}

/// R4: an answer cancelled before its run starts (Ctrl-C right away) changes nothing: the
/// task stays blocked with its question and no answer; answering again resumes the
/// session with that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_a_cancelled_answer_keeps_the_question() {
    let repo = git_repo();
    let argv = repo.path().join("argv.log");
    let asker = PerTask::new(&[("svc", &[Some("Which DB?"), None, None])]);
    let engine = fake_engine().with_agent_server(asker);
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("svc", &["--record-argv", argv.to_str().unwrap()])],
            opts(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let store = engine.store(repo.path(), None);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (tx, _ev) = collect_events();
    let r = engine
        .answer(&store, "svc", "MySQL", tx, cancel)
        .await
        .unwrap();
    assert_eq!(r.status, SessionStatus::Blocked, "{r:?}");
    let rec = store.open_batch(&b.batch_id).unwrap().task("svc").unwrap();
    assert_eq!(rec.state, TaskState::Blocked);
    assert!(rec.answers.is_empty(), "{:?}", rec.answers);
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(engine.blocked(&store).len(), 1);
    let (tx, _ev) = collect_events();
    let r = engine
        .answer(&store, "svc", "Postgres", tx, CancellationToken::new())
        .await
        .unwrap();
    assert!(r.success, "{r:?}");
    let lines: Vec<Vec<String>> = std::fs::read_to_string(&argv)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "the cancelled answer never started the CLI");
    let last = lines.last().unwrap();
    assert!(last.contains(&"--session-id".to_owned()), "{last:?}");
    assert!(last.iter().any(|a| a.contains("Postgres")), "{last:?}");
    let rec = store.open_batch(&b.batch_id).unwrap().task("svc").unwrap();
    let answers: Vec<&str> = rec.answers.iter().map(|a| a.answer.as_str()).collect();
    assert_eq!(answers, ["Postgres"]);
}

/// R5: cancelling a run that floods stdout: the reader blocks on the full line channel
/// while the session waits (5 s) for it to drain, and bytes land in events.ndjson after
/// the attempt's events_end was recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r5_cancel_while_the_cli_floods_stdout() {
    let repo = git_repo();
    let engine = fake_engine();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        c2.cancel();
    });
    let (tx, _ev) = collect_events();
    let t0 = Instant::now();
    let b = engine
        .run_batch(
            vec![task("flood", &["--garbage", "3000000"])],
            opts(repo.path()),
            tx,
            cancel,
        )
        .await
        .unwrap();
    let took = t0.elapsed();
    let rec = store_task(repo.path(), &b.batch_id, "flood");
    let dir = repo
        .path()
        .join(".aicli/runs")
        .join(&b.batch_id)
        .join("tasks/flood");
    let end_recorded = rec.attempts[0].events_end.unwrap();
    let len_then = std::fs::metadata(dir.join("events.ndjson")).unwrap().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let len_later = std::fs::metadata(dir.join("events.ndjson")).unwrap().len();
    eprintln!(
        "cancel at 0.7 s, batch returned after {took:?}; events_end={end_recorded}, file len at return={len_then}, 2 s later={len_later}"
    );
    assert!(
        took < Duration::from_millis(3000),
        "cancel took {took:?} (kill_grace is 300 ms)"
    );
    assert_eq!(
        end_recorded, len_later,
        "events.ndjson grew after events_end"
    );
}

fn store_task(repo: &Path, batch: &str, id: &str) -> aicli::record::TaskRecord {
    RunStore::new(repo.join(".aicli/runs"))
        .open_batch(batch)
        .unwrap()
        .task(id)
        .unwrap()
}

/// R7: cleanup removes a worktree whose commits sit on a detached HEAD: the commits
/// become unreachable (work destroyed).
#[tokio::test]
async fn r7_commits_on_a_detached_head_keep_the_worktree() {
    let dir = git_repo();
    let repo = Repo::open(dir.path()).await.unwrap();
    let wt = repo
        .add_worktree(
            "aicli/b/t",
            &dir.path().join(".aicli/worktrees/b/t"),
            "HEAD",
        )
        .await
        .unwrap();
    git(&wt.path, &["checkout", "-q", "--detach"]);
    std::fs::write(wt.path.join("work.txt"), "the agent's work\n").unwrap();
    git(&wt.path, &["add", "work.txt"]);
    git(&wt.path, &["commit", "-q", "-m", "agent work"]);
    let sha = git(&wt.path, &["rev-parse", "HEAD"]);
    let c = repo.cleanup(&wt).await.unwrap();
    let reachable = git(
        dir.path(),
        &["for-each-ref", "--contains", &sha, "--format=%(refname)"],
    );
    eprintln!("cleanup -> {c:?}; refs containing {sha}: {reachable:?}");
    assert_ne!(
        c,
        Cleanup::Removed,
        "a worktree holding commit {sha} was removed"
    );
}

/// R8: `aicli worktrees prune` (Repo::prune) while a batch runs removes the worktree
/// of a running task from under its CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r8_prune_leaves_a_running_tasks_worktree() {
    let repo = git_repo();
    let engine = fake_engine();
    let e2 = engine.clone();
    let root = repo.path().to_path_buf();
    let live = tokio::spawn(async move {
        let (tx, _ev) = collect_events();
        e2.run_batch(
            vec![task(
                "t",
                &["--start-delay-ms", "2000", "--require-file", "README.md"],
            )],
            opts(&root),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap()
    });
    wait_state(repo.path(), "t", "running").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pruned = Repo::open(repo.path())
        .await
        .unwrap()
        .prune()
        .await
        .unwrap();
    for (i, c) in &pruned {
        eprintln!("prune: {} -> {c:?}", i.branch);
    }
    let b = live.await.unwrap();
    eprintln!(
        "the running task: {:?} {:?} {:?}",
        b.tasks[0].status, b.tasks[0].error_kind, b.tasks[0].error
    );
    assert!(
        pruned.iter().all(|(_, c)| *c != Cleanup::Removed),
        "prune removed a running task's worktree"
    );
}

/// R9: a batch cancelled with Ctrl-C, then `resume`: the task that was running when the
/// batch was cancelled is not run again (it is `failed: cancelled`), although
/// `resume_batch` says it finishes batches that were cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_resume_after_ctrl_c_reruns_the_cancelled_task() {
    let repo = git_repo();
    let engine = fake_engine();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        c2.cancel();
    });
    let (tx, _ev) = collect_events();
    let mut o = opts(repo.path());
    o.max_parallel = Some(1);
    let b = engine
        .run_batch(
            vec![
                task("running", &["--line-delay-ms", "1000"]),
                task("queued", &[]),
            ],
            o,
            tx,
            cancel,
        )
        .await
        .unwrap();
    let store = engine.store(repo.path(), None);
    let (tx, _ev) = collect_events();
    let r = engine
        .resume_batch(&store, &b.batch_id, tx, CancellationToken::new())
        .await
        .unwrap();
    for t in &r.tasks {
        eprintln!("{}: {:?} {:?}", t.task_id, t.status, t.error_kind);
    }
    assert_eq!(r.n_succeeded, 2, "resume left a task unfinished");
}

/// R10: two `answer`s of the same blocked task at the same moment (two `aicli answer`
/// processes): nothing serializes them, both can be accepted and both resume the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r10_of_two_concurrent_answers_one_is_refused() {
    let mut both = 0;
    let tries = 10;
    for _ in 0..tries {
        let repo = git_repo();
        let asker = PerTask::new(&[("svc", &[Some("Which DB?"), None, None])]);
        let engine = fake_engine().with_agent_server(asker);
        let (tx, _ev) = collect_events();
        let b = engine
            .run_batch(
                vec![task("svc", &["--line-delay-ms", "200"])],
                opts(repo.path()),
                tx,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        let store = engine.store(repo.path(), None);
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let mut hs = Vec::new();
        for a in ["Postgres", "MySQL"] {
            let (e, s, bar) = (engine.clone(), store.clone(), barrier.clone());
            hs.push(tokio::spawn(async move {
                bar.wait().await;
                let (tx, _ev) = collect_events();
                e.answer(&s, "svc", a, tx, CancellationToken::new()).await
            }));
        }
        let mut ok = 0;
        for h in hs {
            if h.await.unwrap().is_ok() {
                ok += 1;
            }
        }
        if ok == 2 {
            both += 1;
            let rec = store.open_batch(&b.batch_id).unwrap().task("svc").unwrap();
            eprintln!(
                "both accepted: answers={:?} attempts={:?}",
                rec.answers.iter().map(|a| &a.answer).collect::<Vec<_>>(),
                rec.attempts
                    .iter()
                    .map(|a| (a.attempt, a.kind, a.events_start, a.events_end))
                    .collect::<Vec<_>>()
            );
        }
    }
    eprintln!("both answers accepted in {both} of {tries} tries");
    assert_eq!(both, 0);
}

/// R11: aicli killed between `git worktree add` and the task.json write that records the
/// worktree (simulated: a task that never started whose worktree and branch exist, as that moment
/// leaves them). `resume` then fails the task for good: "a branch named ... already exists".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_resume_after_a_kill_right_after_worktree_add() {
    let repo = git_repo();
    let engine = fake_engine();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(vec![task("t", &[])], opts(repo.path()), tx, cancel)
        .await
        .unwrap();
    let store = engine.store(repo.path(), None);
    assert_eq!(
        store
            .open_batch(&b.batch_id)
            .unwrap()
            .task("t")
            .unwrap()
            .state,
        // Cancelled before it started: interrupted, with no attempt (resume runs it).
        TaskState::Interrupted
    );
    // What `Repo::add_worktree` had done when aicli died.
    let path = repo
        .path()
        .join(".aicli/worktrees")
        .join(&b.batch_id)
        .join("t");
    git(
        repo.path(),
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            &format!("aicli/{}/t", b.batch_id),
            path.to_str().unwrap(),
            "HEAD",
        ],
    );
    let (tx, _ev) = collect_events();
    let r = engine
        .resume_batch(&store, &b.batch_id, tx, CancellationToken::new())
        .await
        .unwrap();
    eprintln!("resume -> {:?}: {:?}", r.tasks[0].status, r.tasks[0].error);
    assert!(r.tasks[0].success, "{:?}", r.tasks[0].error);
}

/// R12: the batch budget is not checked before a run starts: an answer (or a resume)
/// of a batch whose budget is already spent starts the CLI anyway. (Now: the budget
/// stops the run mid-stream, its question is kept, and no answer runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_no_answer_runs_once_the_budget_is_spent() {
    let repo = git_repo();
    let argv = repo.path().join("argv.log");
    let asker = PerTask::new(&[("svc", &[Some("Which DB?"), None])]);
    let engine = fake_engine().with_agent_server(asker);
    let mut o = opts(repo.path());
    o.budget_usd = Some(0.0001); // one run costs 0.0003692
    let (tx, _ev) = collect_events();
    // Its lines come slowly: the budget stops the run at its first usage (0.0002492
    // streamed), before its result line, whatever the machine's load. The question was
    // asked before that.
    let b = engine
        .run_batch(
            vec![task(
                "svc",
                &[
                    "--record-argv",
                    argv.to_str().unwrap(),
                    "--line-delay-ms",
                    "50",
                ],
            )],
            o,
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    eprintln!(
        "after the batch: spent {} of budget {:?}, remaining {:?}",
        b.total_cost_usd, b.budget_usd, b.budget_remaining_usd
    );
    let r = &b.tasks[0];
    // Stopped with its question asked: it waits for the answer, charged its streamed
    // estimate.
    assert_eq!(r.status, SessionStatus::Blocked, "{r:?}");
    assert_eq!(r.cost_source, CostSource::Estimated, "{r:?}");
    assert_eq!(b.budget_charged_usd, r.cost_usd);
    let store = engine.store(repo.path(), None);
    let (tx, _ev) = collect_events();
    let err = engine
        .answer(&store, "svc", "Postgres", tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "batch {} has spent $0.0002 of its $0.0001 budget: the answer would start a new run",
            b.batch_id
        )
    );
    let runs = std::fs::read_to_string(&argv).unwrap().lines().count();
    let rec = store.open_batch(&b.batch_id).unwrap().task("svc").unwrap();
    assert_eq!(runs, 1, "the CLI ran again with the budget already spent");
    assert_eq!(rec.state, TaskState::Blocked, "the question is kept");
}

/// R13: a CLI that exits (crashes) while a grandchild still holds its stdout: the session
/// does not notice the exit and waits for the idle watchdog; the result says `timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_cli_exit_with_a_grandchild_holding_stdout() {
    let repo = git_repo();
    let script = repo.path().join("cli.sh");
    std::fs::write(&script, "#!/bin/sh\necho '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s1\"}'\nsleep 300 &\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = replay_provider("fake", "claude", None)
        .with_config(|c| c.binary_path = Some(script.clone()));
    let engine = engine_with(test_config(), vec![shared(p)]);
    let mut o = opts(repo.path());
    o.idle_timeout = Some(Duration::from_secs(120));
    let (tx, _ev) = collect_events();
    let t0 = Instant::now();
    let b = engine
        .run_batch(vec![task("t", &[])], o, tx, CancellationToken::new())
        .await
        .unwrap();
    let r = &b.tasks[0];
    eprintln!(
        "took {:?}: {:?} {:?} exit={:?}",
        t0.elapsed(),
        r.error_kind,
        r.error,
        r.exit_code
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "the run waited for the idle watchdog"
    );
}

/// R14: `answer TASK` with default task ids: the newest batch holding a task of that id
/// is picked even when it is not blocked, so the blocked one cannot be answered by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_answer_by_task_id_finds_the_blocked_one() {
    let repo = git_repo();
    let asker = PerTask::new(&[("task-1", &[Some("Which DB?"), None, None])]);
    let engine = fake_engine().with_agent_server(asker);
    for _ in 0..2 {
        let (tx, _ev) = collect_events();
        engine
            .run_batch(
                vec![TaskSpec::new("do it")],
                opts(repo.path()),
                tx,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await; // distinct batch ids by time
    }
    let store = engine.store(repo.path(), None);
    let blocked = engine.blocked(&store);
    eprintln!(
        "blocked: {:?}",
        blocked
            .iter()
            .map(|b| format!("{}/{}", b.batch_id, b.task_id))
            .collect::<Vec<_>>()
    );
    let (tx, _ev) = collect_events();
    let r = engine
        .answer(&store, "task-1", "Postgres", tx, CancellationToken::new())
        .await;
    eprintln!(
        "answer task-1 -> {:?}",
        r.as_ref().map(|r| r.status).map_err(|e| e.to_string())
    );
    assert!(r.is_ok());
}

/// Run records hold what the agents saw (a tool can return a credential): the batch
/// directory is the owner's only and the streams are 0600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r15_run_records_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let dir = repo.path().join(".aicli/runs").join(&b.batch_id);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("journal.ndjson")), 0o600);
    let mut names = Vec::new();
    for f in std::fs::read_dir(dir.join("tasks/t")).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        assert_eq!(mode(&f.path()), 0o600, "{name}");
        names.push(name);
    }
    for f in ["events.ndjson", "task.json"] {
        assert!(names.iter().any(|n| n == f), "{f} in {names:?}");
    }
}

/// The `aicli` command: records are found from a subdirectory of the repository, and
/// what the user can fix exits 2 with a message naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_cli_from_a_subdirectory_and_usage_exit_codes() {
    let repo = git_repo();
    let sub = repo.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture("claude", "text");
    let cfg = dir.path().join("aicli.json");
    std::fs::write(
        &cfg,
        serde_json::json!({
            "default_provider": "fake",
            "providers": {"fake": {"adapter": "claude", "binary_path": fake_cli(),
                "extra_args": ["--replay", fx.with_extension("ndjson")]}}
        })
        .to_string(),
    )
    .unwrap();
    let aicli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_aicli"))
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .current_dir(&sub)
            .output()
            .unwrap()
    };
    let out = aicli(&["run", "say hello", "--no-mcp"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = aicli(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    let tasks = dir.path().join("tasks.json");
    std::fs::write(&tasks, r#"[{"prompt": "x", "id": "a/b"}]"#).unwrap();
    let out = aicli(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at tasks[0].id: 'a/b' contains '/'"));
    let out = aicli(&["answer", "nope", "x", "--no-mcp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no task 'nope' in any batch under"));
    let out = aicli(&["run", "x", "--provider", "nosuch", "--no-mcp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown provider 'nosuch'"));
}

/// Issue 21, F5: aicli was killed after a task's success was recorded but before its
/// worktree was settled. `resume` settles it (a clean worktree is removed with its
/// branch) and does not run the task again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r18_resume_settles_the_worktree_a_finished_task_left() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("done", &[])],
            opts(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(b.tasks[0].success, "{:?}", b.tasks[0]);
    let store = engine.store(repo.path(), None);
    let record = store.open_batch(&b.batch_id).unwrap();
    let mut rec = record.task("done").unwrap();
    assert_eq!(
        rec.worktree, None,
        "a clean worktree is removed as the task settles"
    );
    // What was left when aicli died between the task's record and its worktree's
    // settling: the worktree, its branch, and the record naming them.
    let path = repo
        .path()
        .join(".aicli/worktrees")
        .join(&b.batch_id)
        .join("done");
    let branch = format!("aicli/{}/done", b.batch_id);
    git(
        repo.path(),
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            &branch,
            path.to_str().unwrap(),
            rec.base_commit.as_deref().unwrap(),
        ],
    );
    rec.worktree = Some(path.clone());
    rec.branch = Some(branch.clone());
    record
        .write_task(&rec, aicli::record::Write::Settled)
        .unwrap();
    let (tx, _ev) = collect_events();
    let r = engine
        .resume_batch(&store, &b.batch_id, tx, CancellationToken::new())
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
    assert!(
        !path.exists(),
        "resume left the worktree of a finished task"
    );
    assert_eq!(git(repo.path(), &["branch", "--list", &branch]).trim(), "");
    let after = store_task(repo.path(), &b.batch_id, "done");
    assert_eq!(after.attempts.len(), 1, "the finished task ran again");
    assert_eq!(after.state, TaskState::Succeeded);
}

/// Issue 21, F6: two interruptions in a row. Attempt 1 was interrupted with its
/// session recorded; attempt 2 (a recovery resuming that session) was killed before
/// the CLI printed anything. Attempt 3 resumes the same session: an attempt that
/// produced nothing hands its session on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r19_an_attempt_that_printed_nothing_hands_its_session_on() {
    let repo = git_repo();
    let engine = fake_engine();
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("t", &[])],
            opts(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let sid = b.tasks[0].session_id.clone().expect("a session");
    // The record as two kill -9s leave it.
    let store = engine.store(repo.path(), None);
    let record = store.open_batch(&b.batch_id).unwrap();
    let mut rec = record.task("t").unwrap();
    let first = rec.attempts[0].result.as_mut().unwrap();
    first.status = SessionStatus::Interrupted;
    first.success = false;
    let mut second = rec.attempts[0].clone();
    second.attempt = 2;
    second.kind = aicli::record::AttemptKind::Recover;
    second.resumed_session = Some(sid.clone());
    second.events_start = record.events_len("t");
    second.events_end = None;
    second.finished_at = None;
    second.result = None;
    rec.attempts.push(second);
    rec.state = TaskState::Running;
    record
        .write_task(&rec, aicli::record::Write::Settled)
        .unwrap();
    let (tx, _ev) = collect_events();
    let r = engine
        .resume_batch(&store, &b.batch_id, tx, CancellationToken::new())
        .await
        .unwrap();
    assert!(r.tasks[0].success, "{:?}", r.tasks[0]);
    let after = record.task("t").unwrap();
    assert_eq!(after.attempts.len(), 3, "{:#?}", after.attempts);
    let third = &after.attempts[2];
    assert_eq!(third.resumed_session.as_deref(), Some(sid.as_str()));
    let i = third
        .argv
        .iter()
        .position(|a| a == "--session-id")
        .unwrap_or_else(|| panic!("attempt 3 did not resume: {:?}", third.argv));
    assert_eq!(third.argv[i + 1], sid);
}
