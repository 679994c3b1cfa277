//! Issue 22: a guard owns each run's resources. However a run ends — its code panics
//! mid-stream, a cancel, a timeout, a budget stop — afterwards its MCP token is refused
//! (401), no process of it is alive, its cgroup is gone, its budget reservation is back
//! (charged what it streamed, not the reservation), its task's lock is free, its record
//! says how it ended, and the other tasks of the batch finish normally.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aicli::engine::{AgentGrant, AgentServer, TaskScope};
use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::{ErrorKind, SessionStatus, TaskSpec};
use aicli::record::{RunStore, TaskState};
use aicli::testing::Fault;
use aicli::{BatchOptions, BatchResult};
use tokio_util::sync::CancellationToken;

use super::budget::{message_cost, transcript};
use super::support::*;

/// The real MCP server, noting each task's token and URL as it grants them.
#[derive(Debug)]
struct Noting {
    server: Arc<McpServer>,
    granted: Mutex<BTreeMap<String, (String, String)>>,
}

#[async_trait::async_trait]
impl AgentServer for Noting {
    async fn grant(
        &self,
        scope: TaskScope,
        reach: Option<&aicli::runner::AgentReach>,
    ) -> Result<AgentGrant, String> {
        let task = scope.task_id.clone();
        let g = self.server.grant(scope, reach).await?;
        self.granted
            .lock()
            .unwrap()
            // The server's own address: a container's URL names a host only it knows.
            .insert(task, (g.endpoint.token.clone(), self.server.url()));
        Ok(g)
    }
    fn revoke(&self, token: &str) {
        AgentServer::revoke(self.server.as_ref(), token)
    }
    fn restrict(&self, token: &str, peer: std::net::IpAddr) {
        AgentServer::restrict(self.server.as_ref(), token, peer)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Panic,
    Cancel,
    Timeout,
    Budget,
}

/// Waits until `f` gives something, or panics after `within`.
fn wait_for<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn a_run_that_ends_by(ending: Ending) {
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    let c = message_cost();
    // The victim: 40 model calls, 150 ms apart, with two grandchildren (one a daemon).
    let stem = transcript(tmp.path(), "long", 40);
    let pids = tmp.path().join("pids");
    let cancel = CancellationToken::new();
    let server = Arc::new(
        McpServer::start(McpServerOptions::default(), cancel.child_token())
            .await
            .unwrap(),
    );
    let noting = Arc::new(Noting {
        server: server.clone(),
        granted: Mutex::default(),
    });
    let mut engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    )
    .with_agent_server(noting.clone());
    if ending == Ending::Panic {
        engine = engine.with_fault(Fault::PanicAfterLines {
            task_id: "victim".into(),
            lines: 4,
        });
    }
    let mut victim = TaskSpec::new("the victim");
    victim.id = "victim".into();
    victim.extra_args = [
        "--line-delay-ms",
        "150",
        "--spawn-grandchildren",
        "2",
        "--pid-file",
        pids.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    if ending == Ending::Timeout {
        victim.timeout_secs = Some(1);
    }
    let text = fixture("claude", "text");
    let mut other = TaskSpec::new("the other one");
    other.id = "other".into();
    other.extra_args = [
        "--replay",
        &format!("{}.ndjson", text.display()),
        "--stderr-file",
        &format!("{}.stderr", text.display()),
        "--exit-file",
        &format!("{}.exit", text.display()),
    ]
    .map(String::from)
    .to_vec();
    let mut o = BatchOptions::new(repo.path());
    o.provider = Some("fake".into());
    o.max_parallel = Some(2);
    o.budget_usd = Some(match ending {
        // Less than the victim streams: the budget stops it.
        Ending::Budget => 6.0 * c,
        Ending::Panic | Ending::Cancel | Ending::Timeout => 1000.0 * c,
    });
    let (tx, events) = collect_events();
    let run_cancel = CancellationToken::new();
    let batch = {
        let (engine, run_cancel) = (engine.clone(), run_cancel.clone());
        tokio::spawn(async move {
            engine
                .run_batch(vec![victim, other], o, tx, run_cancel)
                .await
        })
    };
    // While the victim runs: its record names its processes and cgroup.
    let record_dir = wait_for(Duration::from_secs(30), "no batch record", || {
        std::fs::read_dir(repo.path().join(".aicli/runs"))
            .ok()?
            .flatten()
            .next()
            .map(|e| e.path())
    });
    let recorded = wait_for(Duration::from_secs(30), "the victim never started", || {
        let text = recorded_pids(&record_dir, "victim")?;
        text.lines()
            .next()?
            .split_whitespace()
            .next()?
            .parse::<u32>()
            .ok()?;
        Some(text)
    });
    let cgroup: Option<PathBuf> = recorded
        .lines()
        .find_map(|l| l.strip_prefix("cgroup "))
        .map(PathBuf::from);
    let tree: Vec<u32> = wait_for(Duration::from_secs(30), "no grandchildren", || {
        let p: Vec<u32> = std::fs::read_to_string(&pids)
            .ok()?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        (p.len() == 3).then_some(p)
    });
    if ending == Ending::Cancel {
        tokio::time::sleep(Duration::from_millis(400)).await;
        run_cancel.cancel();
    }
    let b: BatchResult = tokio::time::timeout(Duration::from_secs(60), batch)
        .await
        .expect("the batch ends")
        .unwrap()
        .unwrap();
    let _ = events.await;
    let what = format!("{ending:?}");
    assert_released(&what, &noting, &tree, cgroup.as_deref()).await;
    let last = assert_recorded(&what, repo.path(), &b, ending);
    // Charged what it streamed (at least one model call), never its whole reservation.
    let budget = last.budget.unwrap();
    let charged = budget.charged_usd.unwrap();
    assert!(charged >= c - 1e-12, "{what}: charged {charged}");
    if ending != Ending::Budget {
        assert!(charged < budget.reserved_usd, "{what}: {budget:?}");
    }
    cancel.cancel();
}

/// The victim's record says how its run ended, its lock is free, the batch's remaining
/// budget is the budget less what was charged (the reservation is back), and the other
/// task finished normally when nothing stopped the batch. Returns the victim's last
/// attempt.
fn assert_recorded(
    what: &str,
    repo: &Path,
    b: &BatchResult,
    ending: Ending,
) -> aicli::record::AttemptRecord {
    let record = RunStore::new(repo.join(".aicli/runs"))
        .open_batch(&b.batch_id)
        .unwrap();
    record
        .lock_task("victim")
        .unwrap_or_else(|e| panic!("{what}: the victim's lock is held: {e}"));
    let rec = record.task("victim").unwrap();
    let last = rec.attempts.last().unwrap().clone();
    let r = last.result.as_ref().unwrap();
    let (state, kind) = match ending {
        Ending::Panic => (TaskState::Failed, ErrorKind::Crashed),
        Ending::Cancel => (TaskState::Interrupted, ErrorKind::Cancelled),
        Ending::Timeout => (TaskState::Failed, ErrorKind::Timeout),
        Ending::Budget => (TaskState::Failed, ErrorKind::Budget),
    };
    assert_eq!(rec.state, state, "{what}: {rec:?}");
    assert_eq!(r.error_kind, Some(kind), "{what}: {r:?}");
    assert!(
        last.finished_at.is_some() && last.events_end.is_some(),
        "{what}: {last:?}"
    );
    let remaining = b.budget_remaining_usd.unwrap();
    assert!(
        (remaining - (b.budget_usd.unwrap() - b.budget_charged_usd.unwrap()).max(0.0)).abs() < 1e-9,
        "{what}: {b:?}"
    );
    if matches!(ending, Ending::Panic | Ending::Timeout) {
        let other = b.tasks.iter().find(|t| t.task_id == "other").unwrap();
        assert_eq!(other.status, SessionStatus::Succeeded, "{what}: {other:?}");
    }
    last
}

/// The victim's token is refused, its processes are gone, its cgroup removed.
async fn assert_released(what: &str, noting: &Noting, tree: &[u32], cgroup: Option<&Path>) {
    let (token, url) = noting
        .granted
        .lock()
        .unwrap()
        .get("victim")
        .cloned()
        .unwrap_or_else(|| panic!("{what}: the victim never got its MCP token (it never ran)"));
    let status = reqwest::Client::new()
        .post(&url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Accept", "application/json, text/event-stream")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "guards", "version": "0"}}}),
        )
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(
        status.as_u16(),
        401,
        "{what}: the victim's token still works"
    );
    wait_for(
        Duration::from_secs(5),
        &format!("{what}: processes left: {tree:?}"),
        || tree.iter().all(|p| !alive(*p)).then_some(()),
    );
    if let Some(cg) = cgroup {
        wait_for(
            Duration::from_secs(5),
            &format!("{what}: cgroup {} left", cg.display()),
            || (!cg.exists()).then_some(()),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_panics_mid_stream_leaves_nothing_and_the_batch_goes_on() {
    a_run_that_ends_by(Ending::Panic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_leaves_nothing() {
    a_run_that_ends_by(Ending::Cancel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_times_out_leaves_nothing_and_the_batch_goes_on() {
    a_run_that_ends_by(Ending::Timeout).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_budget_stops_leaves_nothing() {
    a_run_that_ends_by(Ending::Budget).await;
}

/// The same four ends under `--runner docker` (the fake CLI in its container on the
/// local engine): the victim's token is refused, its container is removed, the
/// reservation is back (the batch's remaining budget is the budget less what was
/// charged), its lock is free, its record says how it ended, and the other task
/// finishes normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_container_every_end_of_a_run_leaves_nothing() {
    use super::docker::support;
    let Some(docker) = support::local_engine("guards_in_a_container").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    for ending in [
        Ending::Panic,
        Ending::Cancel,
        Ending::Timeout,
        Ending::Budget,
    ] {
        let what = format!("docker {ending:?}");
        let repo = git_repo();
        let config = support::docker_config(vec![support::local_host()], &image);
        let mut opts = McpServerOptions::from_config(&config, repo.path());
        opts.allowed_hosts
            .extend(aicli::runner::docker::container_hosts(
                &config.engine.docker,
            ));
        let cancel = CancellationToken::new();
        let server = Arc::new(McpServer::start(opts, cancel.child_token()).await.unwrap());
        let noting = Arc::new(Noting {
            server: server.clone(),
            granted: Mutex::default(),
        });
        let mut engine = support::engine(config, support::fake_provider("claude", "text"))
            .with_agent_server(noting.clone());
        if ending == Ending::Panic {
            engine = engine.with_fault(Fault::PanicAfterLines {
                task_id: "victim".into(),
                lines: 1,
            });
        }
        let mut victim = TaskSpec::new("the victim");
        victim.id = "victim".into();
        victim.extra_args = match ending {
            // Slow enough for a budget stop to find it running.
            Ending::Budget => vec!["--line-delay-ms".into(), "5000".into()],
            Ending::Panic | Ending::Cancel | Ending::Timeout => {
                vec!["--hang-after".into(), "1".into()]
            }
        };
        if ending == Ending::Timeout {
            // Its container's start counts: a busy engine has taken over 2 s for it (a
            // CI run on a loaded machine timed the victim out before it ran).
            victim.timeout_secs = Some(8);
        }
        let mut other = TaskSpec::new("the other one");
        other.id = "other".into();
        let mut o = BatchOptions::new(repo.path());
        o.provider = Some("fake".into());
        o.max_parallel = Some(2);
        // The other task's cost (the fixture's) spends a tiny budget while the victim
        // runs; a big one stops nothing.
        o.budget_usd = Some(if ending == Ending::Budget {
            0.0001
        } else {
            100.0
        });
        let run_cancel = CancellationToken::new();
        if ending == Ending::Cancel {
            // Once the victim runs (its MCP token granted: its container started), not
            // after a fixed time a busy engine may not have started it by.
            let c = run_cancel.clone();
            let n = noting.clone();
            tokio::spawn(async move {
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while !n.granted.lock().unwrap().contains_key("victim")
                    && std::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                c.cancel();
            });
        }
        let (tx, events) = collect_events();
        let b = tokio::time::timeout(
            Duration::from_secs(120),
            engine.run_batch(vec![victim, other], o, tx, run_cancel),
        )
        .await
        .expect("the batch ends")
        .unwrap();
        let _ = events.await;
        assert_released(&what, &noting, &[], None).await;
        // Even a run that panicked (no graceful close: its container goes in the
        // placement's `Drop`) has no container left once the batch has returned.
        support::assert_no_container(&docker, &b.batch_id).await;
        assert_recorded(&what, repo.path(), &b, ending);
        cancel.cancel();
    }
}
