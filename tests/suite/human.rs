//! Questions to a human: a task that asks ends blocked; answering resumes the same CLI
//! session (or starts a new run for providers that cannot resume); a batch whose aicli
//! was killed with SIGKILL is finished by `aicli resume`.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli::engine::{AgentGrant, AgentServer, TaskScope};
use aicli::providers::{
    AgentEvent, ContinuationMode, EventKind, Feature, McpEndpoint, SessionStatus, TaskSpec,
};
use aicli::record::{RunStore, TaskState};
use aicli::{BatchOptions, EngineError};
use tokio_util::sync::CancellationToken;

use super::support::*;

/// Stands in for the MCP server: on each grant, the agent "asks" the next question of
/// the list (or nothing), exactly as the askUser tool would deliver it.
type Question = (String, Vec<String>);

#[derive(Debug, Default)]
struct Asker {
    questions: Mutex<VecDeque<Option<Question>>>,
    grants: Mutex<Vec<String>>,
}

impl Asker {
    fn new(qs: &[Option<&str>]) -> Arc<Asker> {
        Arc::new(Asker {
            questions: Mutex::new(
                qs.iter()
                    .map(|q| q.map(|q| (q.to_owned(), vec!["yes".to_owned(), "no".to_owned()])))
                    .collect(),
            ),
            grants: Mutex::default(),
        })
    }
}

#[async_trait::async_trait]
impl AgentServer for Asker {
    async fn grant(
        &self,
        scope: TaskScope,
        _reach: Option<&aicli::runner::AgentReach>,
    ) -> Result<AgentGrant, String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        if let Some(Some((question, options))) = self.questions.lock().unwrap().pop_front() {
            tx.send(AgentEvent::synthetic(EventKind::Question {
                question,
                options,
            }))
            .unwrap();
        }
        let token = format!("token-{}", self.grants.lock().unwrap().len());
        self.grants.lock().unwrap().push(scope.task_id);
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
    fn revoke(&self, _token: &str) {}
    fn restrict(&self, _token: &str, _peer: std::net::IpAddr) {}
}

fn argv_lines(file: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn prompt_of(argv: &[String]) -> String {
    let i = argv.iter().position(|a| a == "--prompt").unwrap();
    argv[i + 1].clone()
}

const SID: &str = "20d19ac2-06fa-4ed4-8c4f-6e8abb872002";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_answer_resume_continues_the_same_session_and_can_block_again() {
    let repo = git_repo();
    let argv = repo.path().join("argv.log");
    let asker = Asker::new(&[Some("Which database?"), Some("Which port?"), None]);
    let engine = fake_engine().with_agent_server(asker.clone());
    let mut t = TaskSpec::new("Set up the service");
    t.id = "svc".into();
    t.extra_args = vec!["--record-argv".into(), argv.display().to_string()];
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    let (tx, events) = collect_events();
    let b = engine
        .run_batch(vec![t], o, tx, CancellationToken::new())
        .await
        .unwrap();
    let r = &b.tasks[0];
    assert_eq!(r.status, SessionStatus::Blocked, "{r:?}");
    assert_eq!((b.n_blocked, b.n_failed), (1, 0));
    let q = r.question.as_ref().unwrap();
    assert_eq!(q.question, "Which database?");
    assert_eq!(q.options, ["yes", "no"]);
    assert_eq!(r.session_id.as_deref(), Some(SID));
    assert!(
        r.worktree.as_ref().unwrap().is_dir(),
        "a blocked task keeps its worktree"
    );
    assert!(
        events
            .await
            .unwrap()
            .iter()
            .any(|e| matches!(e, aicli::BatchEvent::TaskBlocked { .. }))
    );
    let store = engine.store(repo.path(), None);
    assert_eq!(engine.blocked(&store).len(), 1);

    // First answer: the same session resumes, and the agent asks again.
    let (tx, _ev) = collect_events();
    let r2 = engine
        .answer(&store, "svc", "Postgres", tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r2.status, SessionStatus::Blocked);
    assert_eq!(r2.question.as_ref().unwrap().question, "Which port?");
    assert_eq!(r2.session_id.as_deref(), Some(SID));
    let c = r2.continuation.as_ref().unwrap();
    assert_eq!(
        (c.mode, c.session_id.as_deref()),
        (ContinuationMode::Resume, Some(SID))
    );
    let lines = argv_lines(&argv);
    assert_eq!(lines.len(), 2);
    let i = lines[1].iter().position(|a| a == "--session-id").unwrap();
    assert_eq!(
        lines[1][i + 1],
        SID,
        "the CLI was asked to resume the session"
    );
    let p = prompt_of(&lines[1]);
    assert!(
        p.contains("Which database?") && p.contains("Postgres"),
        "{p}"
    );

    // Second answer, addressed as BATCH/TASK: it finishes.
    let (tx, _ev) = collect_events();
    let r3 = engine
        .answer(
            &store,
            &format!("{}/svc", b.batch_id),
            "5432",
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r3.success, "{r3:?}");
    assert_eq!(r3.session_id.as_deref(), Some(SID));
    let rec = store.open_batch(&b.batch_id).unwrap().task("svc").unwrap();
    assert_eq!(rec.state, TaskState::Succeeded);
    assert_eq!(rec.attempts.len(), 3);
    let answers: Vec<(&str, &str)> = rec
        .answers
        .iter()
        .map(|a| (a.question.as_str(), a.answer.as_str()))
        .collect();
    assert_eq!(
        answers,
        [("Which database?", "Postgres"), ("Which port?", "5432")]
    );
    // The stream of every attempt is kept, one after the other.
    let raw = std::fs::read(
        store
            .open_batch(&b.batch_id)
            .unwrap()
            .task_dir("svc")
            .join("events.ndjson"),
    )
    .unwrap();
    let one = std::fs::read(fixture("claude", "text").with_extension("ndjson")).unwrap();
    assert_eq!(raw.len(), 3 * one.len());
    assert!(engine.blocked(&store).is_empty());

    // Answering a task that is not blocked is refused, clearly.
    let (tx, _ev) = collect_events();
    let err = engine
        .answer(&store, "svc", "again", tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Refused(_)));
    assert_eq!(
        err.to_string(),
        format!(
            "task {}/svc is not blocked (it is succeeded); only a blocked task can be answered",
            b.batch_id
        )
    );
    // An unknown task says where it looked.
    let (tx, _ev) = collect_events();
    let err = engine
        .answer(&store, "nope", "x", tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no task 'nope' in any batch under {}",
            store.root().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_resume_answers_with_a_new_run_carrying_the_context() {
    let repo = git_repo();
    let argv = repo.path().join("argv.log");
    let asker = Asker::new(&[Some("Tabs or spaces?"), None]);
    let p = replay_provider("fake", "claude", Some(&fixture("claude", "text")))
        .with_config(|c| c.supports.retain(|f| *f != Feature::Resume));
    let engine = engine_with(test_config(), vec![shared(p)]).with_agent_server(asker);
    let mut t = TaskSpec::new("Format the code");
    t.id = "fmt".into();
    t.extra_args = vec!["--record-argv".into(), argv.display().to_string()];
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    let (tx, _ev) = collect_events();
    engine
        .run_batch(vec![t], o, tx, CancellationToken::new())
        .await
        .unwrap();
    let store = engine.store(repo.path(), None);
    let (tx, _ev) = collect_events();
    let r = engine
        .answer(&store, "fmt", "spaces", tx, CancellationToken::new())
        .await
        .unwrap();
    assert!(r.success);
    let c = r.continuation.unwrap();
    assert_eq!(c.mode, ContinuationMode::NewRun);
    assert!(c.reason.contains("cannot resume"), "{}", c.reason);
    let lines = argv_lines(&argv);
    assert!(!lines[1].contains(&"--session-id".to_owned()));
    let p = prompt_of(&lines[1]);
    assert!(
        p.starts_with("Format the code") && p.contains("Tabs or spaces?") && p.contains("spaces"),
        "{p}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_task_runs_the_notify_hook_with_the_question_as_json() {
    let repo = git_repo();
    let out = repo.path().join("notified.json");
    let mut config = test_config();
    config.engine.notify_hook = vec![
        "sh".into(),
        "-c".into(),
        format!("cat > '{}'", out.display()),
    ];
    let engine = engine_with(
        config,
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "text")),
        ))],
    )
    .with_agent_server(Asker::new(&[Some("Deploy now?")]));
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![TaskSpec::new("deploy")],
            o,
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["event"], "blocked");
    assert_eq!(v["question"], "Deploy now?");
    assert_eq!(v["task_id"], "task-1");
    assert_eq!(v["batch_id"], b.batch_id.as_str());
    assert_eq!(v["session_id"], SID);
}

/// What a webhook was sent: the `Authorization` header and the body of each request.
type Received = Arc<Mutex<Vec<(Option<String>, serde_json::Value)>>>;

/// A webhook on loopback that answers 503 to its first request, then 200, and keeps
/// what it was sent (the `Authorization` header and the body).
async fn flaky_webhook() -> (String, Received) {
    use axum::http::{HeaderMap, StatusCode};
    let got: Received = Arc::default();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (g, n) = (got.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, body: String| {
            let (g, n) = (g.clone(), n.clone());
            async move {
                if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                let auth = h
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_owned());
                g.lock()
                    .unwrap()
                    .push((auth, serde_json::from_str(&body).unwrap()));
                StatusCode::OK
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    (url, got)
}

/// `engine.notify`: a task that blocks, one that succeeds and one that fails, then the
/// batch's end, each reach the webhook (retried past a 503, with the bearer token from
/// the named variable) and the command, with a link to the page; a webhook that is
/// down never fails a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_reach_a_webhook_and_a_command_for_every_end() {
    let repo = git_repo();
    let out = repo.path().join("notified.ndjson");
    let (url, got) = flaky_webhook().await;
    let mut config = test_config();
    config.engine.auth_precheck = false;
    config.engine.notify.webhook = Some(url);
    config.engine.notify.webhook_token_env = Some("HOOK_TOKEN".into());
    config.engine.notify.page_url = Some("http://127.0.0.1:9999/".into());
    config.engine.notify.command = vec![
        "sh".into(),
        "-c".into(),
        format!("cat >> '{}'; echo >> '{}'", out.display(), out.display()),
    ];
    // aicli's own environment has the token; the CLIs' has none of it.
    let mut env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    env.insert("HOOK_TOKEN".into(), "s3cret".into());
    let engine = engine_with(
        config.clone(),
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "text")),
        ))],
    )
    .with_own_env(env)
    .with_agent_server(Asker::new(&[Some("Deploy now?"), None, None]));
    let failing = fixture("claude", "err401_retries1");
    let with_ext = |e: &str| failing.with_extension(e).display().to_string();
    let tasks = vec![
        TaskSpec {
            id: "asks".into(),
            ..TaskSpec::new("deploy")
        },
        TaskSpec {
            id: "works".into(),
            ..TaskSpec::new("work")
        },
        TaskSpec {
            id: "fails".into(),
            extra_args: vec![
                "--replay".into(),
                with_ext("ndjson"),
                "--stderr-file".into(),
                with_ext("stderr"),
                "--exit-file".into(),
                with_ext("exit"),
            ],
            ..TaskSpec::new("fail")
        },
    ];
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    o.max_parallel = Some(1);
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(tasks, o, tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((b.n_blocked, b.n_succeeded, b.n_failed), (1, 1, 1));

    let by_event = |list: &[serde_json::Value], event: &str, task: Option<&str>| {
        list.iter()
            .find(|v| v["event"] == event && task.is_none_or(|t| v["task_id"] == t))
            .unwrap_or_else(|| panic!("no {event} {task:?} in {list:#?}"))
            .clone()
    };
    let hooked = got.lock().unwrap().clone();
    assert_eq!(
        hooked.len(),
        4,
        "each notification once, the 503 retried: {hooked:#?}"
    );
    assert!(
        hooked
            .iter()
            .all(|(a, _)| a.as_deref() == Some("Bearer s3cret"))
    );
    let bodies: Vec<serde_json::Value> = hooked.into_iter().map(|(_, v)| v).collect();
    let commanded: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for list in [&bodies, &commanded] {
        let asked = by_event(list, "blocked", Some("asks"));
        assert_eq!(asked["question"], "Deploy now?");
        assert_eq!(asked["options"], serde_json::json!(["yes", "no"]));
        assert_eq!(
            asked["link"],
            format!("http://127.0.0.1:9999/batches/{}/tasks/asks", b.batch_id)
        );
        assert_eq!(
            by_event(list, "finished", Some("works"))["status"],
            "succeeded"
        );
        let failed = by_event(list, "failed", Some("fails"));
        assert_eq!(failed["error_kind"], "auth");
        let end = by_event(list, "batch_finished", None);
        assert_eq!(end["batch_id"], b.batch_id.as_str());
        assert_eq!(
            (
                end["n_succeeded"].as_u64(),
                end["n_failed"].as_u64(),
                end["n_blocked"].as_u64()
            ),
            (Some(1), Some(1), Some(1))
        );
        // The batch's end comes after every task's.
        assert_eq!(list.last().unwrap()["event"], "batch_finished");
    }

    // A webhook nobody listens on: logged, tried `attempts` times, and the task is fine.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    config.engine.notify = aicli::providers::NotifyConfig {
        webhook: Some(dead),
        attempts: 2,
        timeout_secs: 1,
        ..Default::default()
    };
    let engine = engine_with(
        config,
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "text")),
        ))],
    );
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(vec![TaskSpec::new("work")], o, tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(b.n_succeeded, 1, "{:?}", b.tasks[0].error);
}

/// `aicli batch` killed with SIGKILL mid-run, then `aicli resume`: every task ends with
/// exactly one final result, finished tasks are not run again, interrupted ones resume
/// their session, the records stay valid and the cost adds up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_aicli_then_resume_finishes_the_batch() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    // Two at a time: "quick" and "slow1" start; "slow2" takes quick's slot; "late" is
    // still queued when aicli is killed.
    let tasks = serde_json::json!({"max_parallel": 2, "tasks": [
        {"id": "quick", "prompt": "q"},
        {"id": "slow1", "prompt": "s1", "extra_args": ["--line-delay-ms", "4000"]},
        {"id": "slow2", "prompt": "s2", "extra_args": ["--line-delay-ms", "3000", "--spawn-grandchildren", "1"]},
        {"id": "late", "prompt": "l"}
    ]});
    let repo_arg = repo.path().to_str().unwrap();
    let mut child = spawn_batch(&cfg, &tasks, &["--no-mcp", "--repo", repo_arg]);
    let runs = repo.path().join(".aicli/runs");
    // Wait until "quick" is done and the slow ones have printed their first line.
    let batch_dir = wait_for_batch(
        &runs,
        Duration::from_secs(30),
        Duration::from_millis(100),
        "the batch never got going",
        |b| {
            // Settled: its task.json written (after its worktree's cleanup).
            let going = task_state(b, "quick").as_deref() == Some("succeeded")
                && b.join("tasks/quick/task.json").exists()
                && task_printed(b, "slow1")
                && task_printed(b, "slow2");
            if going {
                assert_eq!(task_state(b, "late").as_deref(), Some("queued"));
            }
            going
        },
    );
    let slow_pids: Vec<u32> = ["slow1", "slow2"]
        .iter()
        .filter_map(|id| recorded_pids(&batch_dir, id))
        .filter_map(|t| t.split_whitespace().next().and_then(|p| p.parse().ok()))
        .collect();
    assert_eq!(slow_pids.len(), 2);
    kill_9(&mut child);
    // The CLIs die with aicli (parent-death signal).
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while slow_pids.iter().any(|p| alive(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "a CLI outlived aicli: {slow_pids:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let batch_id = batch_id(&batch_dir);
    let before = task_record(&batch_dir, "quick").unwrap();

    let result = resume_json(&cfg, &batch_id, &["--no-mcp", "--repo", repo_arg]);
    assert_eq!((result.n_tasks, result.n_succeeded), (4, 4), "{result:#?}");

    let store = RunStore::new(&runs);
    let rec = store.open_batch(&batch_id).unwrap();
    // The finished task was not run again, and its record is untouched.
    let after = task_record(&batch_dir, "quick").unwrap();
    assert_eq!(before, after);
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(batch_dir.join("tasks/quick/task.json")).unwrap())
            .unwrap();
    assert_eq!(file["state"], "succeeded");
    let mut total = 0.0;
    for t in rec.tasks().unwrap() {
        assert_eq!(t.state, TaskState::Succeeded, "{}", t.task.id);
        let finals = t
            .attempts
            .iter()
            .filter(|a| {
                a.result
                    .as_ref()
                    .is_some_and(|r| r.status == SessionStatus::Succeeded)
            })
            .count();
        assert_eq!(finals, 1, "{}: exactly one final result", t.task.id);
        total += t
            .attempts
            .iter()
            .filter_map(|a| a.result.as_ref()?.cost_usd)
            .sum::<f64>();
        match t.task.id.as_str() {
            "quick" => assert_eq!(t.attempts.len(), 1),
            "slow1" | "slow2" => {
                assert_eq!(t.attempts.len(), 2, "{}", t.task.id);
                let first = t.attempts[0].result.as_ref().unwrap();
                assert_eq!(first.status, SessionStatus::Interrupted);
                assert_eq!(first.session_id.as_deref(), Some(SID));
                let second = t.attempts[1].result.as_ref().unwrap();
                let c = second.continuation.as_ref().unwrap();
                assert_eq!(
                    (c.mode, c.session_id.as_deref()),
                    (ContinuationMode::Resume, Some(SID))
                );
            }
            "late" => assert_eq!(t.attempts.len(), 1, "the queued task ran once"),
            other => panic!("{other}"),
        }
    }
    assert!(
        (result.total_cost_usd - total).abs() < 1e-12,
        "{} vs {total}",
        result.total_cost_usd
    );
    // Nothing of any run is left (the grandchild of slow2 was killed by the resume).
    for id in ["slow1", "slow2", "quick", "late"] {
        assert_eq!(recorded_pids(&batch_dir, id), None, "{id}");
    }
    let leftovers: Vec<u32> = aicli::proc::procfs::all_processes()
        .into_iter()
        .filter(|(pid, _)| {
            // Processes of this test only: the fake CLI, running in this repo's worktrees.
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p == fake_cli());
            let cwd =
                std::fs::read_link(format!("/proc/{pid}/cwd")).map(|c| c.starts_with(repo.path()));
            exe.unwrap_or(false) && cwd.unwrap_or(false)
        })
        .map(|(p, _)| p)
        .collect();
    assert!(
        leftovers.is_empty(),
        "fake CLI processes left: {leftovers:?}"
    );
}

/// Claude finds an IDE through `~/.claude/ide/<port>.lock` and `CLAUDE_CODE_SSE_PORT`.
/// Every run of a batch shares the MCP server's port, and the file carries one task's
/// token: so one run at a time has the file (0600, its own workspace and token) and the
/// env var; a run in parallel gets neither (never another task's token); the file goes
/// when its run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ide_lockfile_belongs_to_one_run_at_a_time() {
    use std::os::unix::fs::PermissionsExt;
    let repo = git_repo();
    let home = tempfile::tempdir().unwrap();
    let lock = home.path().join(".claude/ide/9.lock");
    let mut env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    env.insert("HOME".into(), home.path().display().to_string());
    let engine = fake_engine()
        .with_env(env)
        .with_agent_server(Asker::new(&[None, None]));
    // Two runs in parallel; each notes whether it was pointed at the lockfile.
    let notes = repo.path().join("env-notes");
    // Each run marks that it started and waits for the other's mark, so the two are
    // alive at the same time however slowly the machine starts them.
    let mark = |id: &str| repo.path().join(format!("started-{id}"));
    let task = |id: &str, other: &str| {
        let mut t = TaskSpec::new("x");
        t.id = id.into();
        t.extra_args = [
            "--record-env",
            "CLAUDE_CODE_SSE_PORT",
            notes.to_str().unwrap(),
            "--touch",
            mark(id).to_str().unwrap(),
            "--start-delay-ms",
            "300",
            "--wait-for-file",
            mark(other).to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        t
    };
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    o.max_parallel = Some(2);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let lock = lock.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(m) = std::fs::metadata(&lock)
                    && let Ok(t) = std::fs::read_to_string(&lock)
                    && let Ok(v) = serde_json::from_str::<serde_json::Value>(&t)
                {
                    seen.push((m.permissions().mode() & 0o777, v));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        })
    };
    let (tx, _ev) = collect_events();
    let b = engine
        .run_batch(
            vec![task("one", "two"), task("two", "one")],
            o,
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(b.n_succeeded, 2, "{:#?}", b.tasks);
    let seen = watcher.await.unwrap();
    assert!(!seen.is_empty(), "the lockfile appeared");
    let tokens: std::collections::BTreeSet<&str> = seen
        .iter()
        .map(|(_, v)| v["authToken"].as_str().unwrap())
        .collect();
    assert_eq!(tokens.len(), 1, "one run's token only: {tokens:?}");
    let mut notes: Vec<String> = std::fs::read_to_string(&notes)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    notes.sort();
    assert_eq!(
        notes,
        ["CLAUDE_CODE_SSE_PORT unset", "CLAUDE_CODE_SSE_PORT=9"],
        "exactly one of the parallel runs is pointed at the lockfile"
    );
    let workspaces: std::collections::BTreeSet<&str> = seen
        .iter()
        .map(|(_, v)| v["workspaceFolders"][0].as_str().unwrap())
        .collect();
    assert_eq!(workspaces.len(), 1, "{workspaces:?}");
    for (mode, v) in &seen {
        assert_eq!(*mode, 0o600);
        assert_eq!(v["ideName"], "aicli");
    }
    assert!(!lock.exists(), "removed when its run ended");
}

/// The webhook's token comes from aicli's own environment, with `--fake-api` too (which
/// gives the CLIs an environment of their own): through the binary, a real codex task,
/// the webhook gets `Authorization: Bearer <token>` for the task's end and the batch's,
/// and the token is in no record file and not on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_webhook_is_called_from_the_binary_with_fake_apis() {
    let (url, got) = flaky_webhook().await;
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let engine = serde_json::json!({"notify": {"webhook": url, "webhook_token_env": "NT_TOKEN", "attempts": 3}});
    let cfg = fake_cli_config_with(dir.path(), &[], engine);
    let tasks = dir.path().join("tasks.json");
    std::fs::write(
        &tasks,
        r#"[{"id": "t", "provider": "codex", "prompt": "say hi"}]"#,
    )
    .unwrap();
    let secret = "nt-secret-7c1e55aa90";
    let out = aicli_with(
        &cfg,
        &["batch", tasks.to_str().unwrap(), "--fake-api", "-v"],
    )
    .arg("--repo")
    .arg(repo.path())
    .env("NT_TOKEN", secret)
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("names a variable that is not set"), "{err}");
    assert!(!err.contains(secret), "the token is on stderr");
    let got = got.lock().unwrap().clone();
    let events: Vec<&str> = got
        .iter()
        .map(|(_, v)| v["event"].as_str().unwrap())
        .collect();
    assert!(events.contains(&"batch_finished"), "{events:?}");
    for (auth, v) in &got {
        assert_eq!(
            auth.as_deref(),
            Some(format!("Bearer {secret}").as_str()),
            "{v}"
        );
    }
    for f in files_under(&repo.path().join(".aicli")) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "the token is in {}",
            f.display()
        );
    }
}
