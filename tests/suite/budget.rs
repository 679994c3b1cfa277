//! The batch budget through the whole engine (issue 10, item 5): reservations that
//! together fit in what is left, spend counted live from the stream, runs stopped when
//! the budget is reached (also a CLI that ignores its own cap), a cut-off run's spend
//! counted, and a budget stop always said as `budget`.
//!
//! The CLI here is `aicli-fake-cli` (a real process) replaying Claude transcripts made
//! for each test: it never looks at `--max-budget-usd`, so it is the CLI that ignores
//! its own cap. The real CLIs against a budget are in `e2e/budget.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aicli::providers::{
    AiCliConfig, CanonicalUsage, CostSource, ErrorKind, SessionStatus, TaskSpec,
};
use aicli::record::RunStore;
use aicli::{BatchEvent, BatchOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::support::*;

/// The usage of every model response in the made-up transcripts.
pub(crate) fn per_message() -> CanonicalUsage {
    CanonicalUsage {
        input_tokens: 10_000,
        cache_read: 2_000,
        cache_write: 1_000,
        output_tokens: 1,
        request_count: 1,
        ..CanonicalUsage::default()
    }
}

/// What one model response of [`per_message`] costs at the config's Claude price.
pub(crate) fn message_cost() -> f64 {
    let config = AiCliConfig::builtin().unwrap();
    config.providers["claude"]
        .prices
        .get("claude-opus-5-5")
        .expect("a price for claude-opus-5-5")
        .cost(&per_message())
}

/// A Claude `stream-json` transcript of `messages` model responses (each reporting
/// [`per_message`] as its `message_start` usage, as the real CLI does), then the
/// result line with the cost of all of them. Written to `dir/<name>.ndjson` (+ empty
/// stderr, exit 0); returns the path without extension.
pub(crate) fn transcript(dir: &Path, name: &str, messages: usize) -> PathBuf {
    let sid = "7f1d3c1e-5b5a-4c61-9d1e-000000000001";
    let u = per_message();
    let mut out = String::new();
    out.push_str(
        &json!({"type":"system","subtype":"init","session_id":sid,"model":"claude-opus-5-5",
            "tools":["Bash"],"mcp_servers":[],"permissionMode":"default"})
        .to_string(),
    );
    out.push('\n');
    for i in 0..messages {
        out.push_str(&json!({"type":"assistant","session_id":sid,"message":{
            "id": format!("msg_{i:04}"),"type":"message","role":"assistant","model":"claude-opus-5-5",
            "content":[{"type":"text","text":format!("step {i}")}],"stop_reason":null,
            "usage":{"input_tokens":u.input_tokens,"cache_read_input_tokens":u.cache_read,
                "cache_creation_input_tokens":u.cache_write,"output_tokens":1}}}).to_string());
        out.push('\n');
    }
    let n = messages as u64;
    out.push_str(
        &json!({"type":"result","subtype":"success","is_error":false,"session_id":sid,
        "result":"done","num_turns":n,"total_cost_usd": message_cost() * messages as f64,
        "usage":{"input_tokens":u.input_tokens*n,"cache_read_input_tokens":u.cache_read*n,
            "cache_creation_input_tokens":u.cache_write*n,"output_tokens":n}})
        .to_string(),
    );
    out.push('\n');
    let stem = dir.join(name);
    std::fs::write(stem.with_extension("ndjson"), out).unwrap();
    std::fs::write(stem.with_extension("stderr"), "").unwrap();
    std::fs::write(stem.with_extension("exit"), "0").unwrap();
    stem
}

fn task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.to_owned(),
        prompt: format!("prompt of {id}"),
        extra_args: args.iter().map(|s| s.to_string()).collect(),
        ..TaskSpec::default()
    }
}

fn options(repo: &Path, parallel: usize, budget: f64) -> BatchOptions {
    let mut o = BatchOptions::new(repo);
    o.provider = Some("fake".to_owned());
    o.max_parallel = Some(parallel);
    o.budget_usd = Some(budget);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_runs_of_a_cli_that_ignores_its_cap_are_stopped_at_the_budget() {
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    // Each run would make 40 model calls (40 × c); the budget is 10 × c. The fake CLI
    // never looks at its cap: only the engine can stop it.
    let c = message_cost();
    let stem = transcript(tmp.path(), "long", 40);
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    );
    let budget = 10.0 * c;
    let parallel = 3;
    let tasks: Vec<TaskSpec> = ["a", "b", "c", "late"]
        .iter()
        .map(|id| task(id, &["--line-delay-ms", "40"]))
        .collect();
    let (tx, events) = collect_events();
    let r = engine
        .run_batch(
            tasks,
            options(repo.path(), parallel, budget),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let events = events.await.unwrap();
    // The bound for a CLI that does not stop at its cap but reports usage per model
    // call: the budget plus one call per run in flight.
    let bound = budget + parallel as f64 * c;
    assert!(
        r.total_cost_usd <= bound + 1e-9,
        "spent ${:.4} against a ${budget:.4} budget (bound ${bound:.4}): {:#?}",
        r.total_cost_usd,
        r.tasks
    );
    assert!(r.total_cost_usd >= budget - 1e-9, "{}", r.total_cost_usd);
    for t in &r.tasks[..3] {
        assert_eq!(t.error_kind, Some(ErrorKind::Budget), "{t:?}");
        let msg = t.error.as_deref().unwrap_or_default();
        assert!(msg.contains("stopped by the budget: "), "{msg}");
        // Its spend is what its stream showed, estimated: never zero.
        assert_eq!(t.cost_source, CostSource::Estimated, "{t:?}");
        let cost = t.cost_usd.unwrap();
        assert!(cost >= c - 1e-12 && cost < 40.0 * c, "{cost}");
        assert!(
            t.canonical_usage.input_tokens >= per_message().input_tokens,
            "{t:?}"
        );
    }
    // The fourth never fit: the budget was spent before it could start.
    assert_eq!(r.tasks[3].error_kind, Some(ErrorKind::Budget));
    assert_eq!(
        r.tasks[3].error.as_deref(),
        Some("the batch budget was spent before this task started")
    );
    // The batch result says what was spent, counted, reserved and estimated.
    assert!((r.budget_charged_usd.unwrap() - r.total_cost_usd).abs() < 1e-9);
    assert!((r.estimated_cost_usd - r.total_cost_usd).abs() < 1e-9);
    let reserved = r.budget_reserved_usd.unwrap();
    assert!(reserved <= budget + 1e-9 && reserved > 0.0, "{reserved}");
    assert!(r.budget_remaining_usd.unwrap() < 1e-9, "{r:?}");
    // Each run was told its share (a CLI with a cap gets it as its cap).
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .unwrap();
    for id in ["a", "b", "c"] {
        let a = &rec.task(id).unwrap().attempts[0];
        let b = a.budget.expect("the attempt's budget is recorded");
        assert!((b.reserved_usd - budget / 3.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.charged_usd, a.result.as_ref().unwrap().cost_usd);
    }
    // The live stream carried each run's spend as it grew, and the budget's end.
    let spends = events
        .iter()
        .filter(|e| matches!(e, BatchEvent::TaskSpend { task_id, .. } if &**task_id == "a"))
        .count();
    assert!(spends >= 2, "{spends} spend updates for a");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, BatchEvent::BudgetSpent { .. }))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_needs_more_than_is_free_waits_and_gets_its_cap_from_the_reservation() {
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    let c = message_cost();
    let stem = transcript(tmp.path(), "short", 1);
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    );
    let budget = 10.0 * c;
    let line = |id: &str| tmp.path().join(format!("{id}.timeline"));
    let cap = |id: &str| tmp.path().join(format!("{id}.cap"));
    let args = |id: &str, delay: &str| {
        vec![
            "--start-delay-ms".to_owned(),
            delay.to_owned(),
            "--timeline".to_owned(),
            line(id).display().to_string(),
            "--record-env".to_owned(),
            "AICLI_FAKE_BUDGET_USD".to_owned(),
            cap(id).display().to_string(),
        ]
    };
    // "first" wants 5c, "big" 8c: together more than the budget of 10c. Whichever
    // reserves first runs; the other waits for it to end and give back what it did not
    // use, then gets what it asked for (9c are left).
    let mut first = task("first", &[]);
    first.extra_args = args("first", "600");
    first.max_budget_usd = Some(5.0 * c);
    let mut big = task("big", &[]);
    big.extra_args = args("big", "0");
    big.max_budget_usd = Some(8.0 * c);
    let (tx, _events) = collect_events();
    let r = engine
        .run_batch(
            vec![first, big],
            options(repo.path(), 2, budget),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.tasks.iter().all(|t| t.success), "{:#?}", r.tasks);
    let ns = |id: &str, what: &str| -> u128 {
        let text = std::fs::read_to_string(line(id)).unwrap();
        text.lines()
            .find_map(|l| l.strip_suffix(&format!(" {what}"))?.parse().ok())
            .unwrap_or_else(|| panic!("no {what} in {text}"))
    };
    assert!(
        ns("big", "start") > ns("first", "end") || ns("first", "start") > ns("big", "end"),
        "the two runs overlapped"
    );
    let read_cap = |id: &str| -> f64 {
        let text = std::fs::read_to_string(cap(id)).unwrap();
        text.trim()
            .strip_prefix("AICLI_FAKE_BUDGET_USD=")
            .unwrap_or_else(|| panic!("{text}"))
            .parse()
            .unwrap()
    };
    assert!(
        (read_cap("first") - 5.0 * c).abs() < 1e-9,
        "{}",
        read_cap("first")
    );
    assert!(
        (read_cap("big") - 8.0 * c).abs() < 1e-9,
        "{}",
        read_cap("big")
    );
    assert!((r.total_cost_usd - 2.0 * c).abs() < 1e-9);
    // At most what was left was reserved at once.
    assert!(r.budget_reserved_usd.unwrap() <= budget + 1e-9);
}

/// Issue 21, F7: a task's own `max_budget_usd` is held by aicli when the CLI ignores
/// the cap it is given, with no batch budget at all and under a batch budget with room
/// to spare; a task without a limit beside it runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_own_limit_stops_a_cli_that_ignores_it_with_or_without_a_batch_budget() {
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    let c = message_cost();
    let stem = transcript(tmp.path(), "long", 30);
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    );
    for batch_budget in [None, Some(1000.0 * c)] {
        let mut capped = task("capped", &["--line-delay-ms", "20"]);
        capped.max_budget_usd = Some(5.0 * c);
        let free = task("free", &[]);
        let mut o = options(repo.path(), 2, 1.0);
        o.budget_usd = batch_budget;
        let (tx, _events) = collect_events();
        let r = engine
            .run_batch(vec![capped, free], o, tx, CancellationToken::new())
            .await
            .unwrap();
        let t = &r.tasks[0];
        assert_eq!(
            t.error_kind,
            Some(ErrorKind::Budget),
            "{batch_budget:?}: {t:?}"
        );
        let msg = t.error.as_deref().unwrap_or_default();
        assert!(msg.contains("its limit of $"), "{batch_budget:?}: {msg}");
        // Stopped within one model call of its limit (the stream reports per call).
        let cost = t.cost_usd.unwrap();
        assert!(
            cost >= 5.0 * c - 1e-12 && cost <= 6.0 * c + 1e-12,
            "{cost} vs {}",
            5.0 * c
        );
        assert!(r.tasks[1].success, "{:?}", r.tasks[1]);
        assert!((r.tasks[1].cost_usd.unwrap() - 30.0 * c).abs() < 1e-9);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_budget_of_zero_is_refused_before_anything_is_written() {
    let repo = git_repo();
    // The real Claude adapter would pass `--max-budget-usd 0`, which the CLI may read as
    // "no limit": a limit of 0 is refused at the engine's entry, naming the field.
    let mut config = test_config();
    config.providers.get_mut("claude").unwrap().binary_path = Some(fake_cli());
    let engine = engine_with(config, Vec::new());
    let mut t = task("zero", &[]);
    t.max_budget_usd = Some(0.0);
    let mut o = options(repo.path(), 1, 1.0);
    o.provider = Some("claude".to_owned());
    let (tx, _events) = collect_events();
    let err = engine
        .run_batch(vec![t], o, tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, aicli::EngineError::InvalidTask { id, message, .. }
            if id == "zero" && message.starts_with("max_budget_usd: 0 would let nothing run")),
        "{err:?}"
    );
    assert!(
        !repo.path().join(".aicli/runs").exists(),
        "a refused batch wrote a record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_is_charged_its_streamed_estimate_never_zero() {
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    let c = message_cost();
    let stem = transcript(tmp.path(), "long", 40);
    let engine = engine_with(
        test_config(),
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    );
    let cancel = CancellationToken::new();
    let (tx, mut rx) = aicli::live::channel(256 << 20);
    let batch = {
        let cancel = cancel.clone();
        let repo = repo.path().to_path_buf();
        tokio::spawn(async move {
            engine
                .run_batch(
                    vec![task("t", &["--line-delay-ms", "50"])],
                    options(&repo, 1, 100.0 * c),
                    tx,
                    cancel,
                )
                .await
        })
    };
    // Cancelled once the stream has shown some spend (however loaded the machine is).
    loop {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Ok(BatchEvent::TaskSpend {
                cost_usd: Some(c), ..
            })) if c > 0.0 => break,
            Ok(Ok(_) | Err(aicli::live::RecvError::Lagged(_))) => {}
            Ok(Err(aicli::live::RecvError::Closed)) | Err(_) => panic!("no spend was streamed"),
        }
    }
    cancel.cancel();
    let r = batch.await.unwrap().unwrap();
    let t = &r.tasks[0];
    assert_eq!(t.status, SessionStatus::Interrupted, "{t:?}");
    assert_eq!(t.cost_source, CostSource::Estimated, "{t:?}");
    let cost = t.cost_usd.unwrap();
    assert!(cost >= c - 1e-12 && cost < 40.0 * c, "{cost}");
    // The budget counted it.
    assert!((r.budget_charged_usd.unwrap() - cost).abs() < 1e-12);
    assert!((r.budget_remaining_usd.unwrap() - (100.0 * c - cost)).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_in_flight_when_the_budget_is_spent_is_asked_to_stop_and_says_budget() {
    // Two runs in flight, each holding half of a budget of 10c: an ACP agent whose turn
    // never ends on its own, and a CLI whose one model call costs 30c (a request that
    // overshoots everything). Its usage spends the budget: every run in flight stops.
    // The ACP agent is asked to end its turn first (`session/cancel`), as for a cancel,
    // and its run says `budget`, not `cancelled`.
    let repo = git_repo();
    let tmp = tempfile::tempdir().unwrap();
    let prompted = tmp.path().join("prompted");
    let marker = format!("acp-budget-{}", uuid::Uuid::new_v4());
    let big = CanonicalUsage {
        input_tokens: 300_000,
        cache_read: 60_000,
        cache_write: 30_000,
        output_tokens: 1,
        request_count: 1,
        ..CanonicalUsage::default()
    };
    let config = AiCliConfig::builtin().unwrap();
    let big_cost = config.providers["claude"]
        .prices
        .get("claude-opus-5-5")
        .expect("a price for claude-opus-5-5")
        .cost(&big);
    let c = message_cost();
    assert!(big_cost > 20.0 * c, "{big_cost} vs {c}");
    let sid = "7f1d3c1e-5b5a-4c61-9d1e-000000000002";
    let stem = tmp.path().join("big");
    let lines = [
        json!({"type":"system","subtype":"init","session_id":sid,"model":"claude-opus-5-5",
            "tools":[],"mcp_servers":[],"permissionMode":"default"}),
        json!({"type":"assistant","session_id":sid,"message":{"id":"msg_big","type":"message",
            "role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"big"}],
            "stop_reason":null,"usage":{"input_tokens":big.input_tokens,
            "cache_read_input_tokens":big.cache_read,"cache_creation_input_tokens":big.cache_write,
            "output_tokens":1}}}),
        json!({"type":"result","subtype":"success","is_error":false,"session_id":sid,
            "result":"done","num_turns":1,"total_cost_usd":big_cost,"usage":{}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(stem.with_extension("ndjson"), text).unwrap();
    std::fs::write(stem.with_extension("stderr"), "").unwrap();
    std::fs::write(stem.with_extension("exit"), "0").unwrap();
    let mut config = test_config();
    let acp: aicli::providers::ProviderConfig = serde_json::from_value(json!({
        "adapter": "acp", "package": "", "binary_name": "aicli-fake-cli",
        "binary_path": fake_cli(),
        "extra_args": ["--acp", "hang", "--prompted", prompted, "--marker", marker],
    }))
    .unwrap();
    config.providers.insert("fake-acp".into(), acp);
    config.engine.kill_grace_ms = 2000;
    let engine = engine_with(
        config,
        vec![shared(replay_provider("fake", "claude", Some(&stem)))],
    );
    let mut agent = task("agent", &[]);
    agent.provider = Some("fake-acp".into());
    // The expensive call comes once the agent's turn is under way; then the CLI hangs.
    let spender = task(
        "spender",
        &[
            "--wait-for-file",
            prompted.to_str().unwrap(),
            "--hang-after",
            "2",
        ],
    );
    let budget = 10.0 * c;
    let (tx, _events) = collect_events();
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        engine.run_batch(
            vec![agent, spender],
            options(repo.path(), 2, budget),
            tx,
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the budget ends the batch")
    .unwrap();
    let took = started.elapsed();
    let agent = &r.tasks[0];
    assert_eq!(agent.error_kind, Some(ErrorKind::Budget), "{agent:#?}");
    assert!(
        agent
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("stopped by the budget: "),
        "{agent:#?}"
    );
    // It ended its turn when asked (well within the kill grace), as the record shows.
    let record = std::fs::read_to_string(r.runs_dir.join("tasks/agent/events.ndjson")).unwrap();
    assert!(record.contains("session/cancel"), "{record}");
    assert!(record.contains(r#""stopReason":"cancelled""#), "{record}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let spender = &r.tasks[1];
    assert_eq!(spender.error_kind, Some(ErrorKind::Budget), "{spender:#?}");
    assert_eq!(spender.cost_source, CostSource::Estimated);
    assert!(
        (spender.cost_usd.unwrap() - big_cost).abs() < 1e-9,
        "{spender:#?}"
    );
    super::acp_bad_input::assert_no_process_with(&marker).await;
}
