//! An ACP agent that breaks the protocol, through the whole engine: `aicli-fake-cli
//! --acp MODE`, a real process speaking JSON-RPC on stdio, run from a config entry
//! alone (`"adapter": "acp"`). Each misbehaviour gets a clear error kind, and every
//! event that did parse is kept: the answer's text, the session id, the usage.

use std::time::{Duration, Instant};

use aicli::providers::{AiCliConfig, ErrorKind, EventKind, SessionResult, SessionStatus, TaskSpec};
use aicli::{BatchEvent, BatchOptions, Engine};
use tokio_util::sync::CancellationToken;

use super::support::{collect_events, fake_cli, git_repo};

/// The setup timeout of the entry (seconds): short, so that `silent` ends quickly.
const SETUP_TIMEOUT: u64 = 2;

/// An engine whose only extra provider is `fake-acp`: the fake agent in `mode`, with
/// `marker` in its argv (to find its processes).
fn engine(mode: &str, marker: &str) -> Engine {
    let user = serde_json::json!({"providers": {"fake-acp": {
        "adapter": "acp",
        "package": "",
        "binary_name": "aicli-fake-cli",
        "binary_path": fake_cli(),
        "extra_args": ["--acp", mode, "--marker", marker],
        "acp": {"setup_timeout_secs": SETUP_TIMEOUT},
    }}, "engine": {"kill_grace_ms": 300}});
    let config = AiCliConfig::from_user_json(&user.to_string(), "test.json").expect("config");
    let registry = aicli::providers::ProviderRegistry::from_config(&config).expect("registry");
    let env = std::env::vars().collect();
    Engine::new(config, registry).with_env(env)
}

/// One run of the fake agent in `mode`: its result and live events.
async fn run(mode: &str) -> (SessionResult, Vec<BatchEvent>, Duration) {
    let repo = git_repo();
    let marker = format!("acp-bad-input-{}", uuid::Uuid::new_v4());
    let engine = engine(mode, &marker);
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake-acp".to_owned());
    opts.timeout = Some(Duration::from_secs(30));
    opts.idle_timeout = Some(Duration::from_secs(20));
    let task = TaskSpec {
        id: "t".into(),
        prompt: "Say hi".into(),
        ..TaskSpec::default()
    };
    let (tx, collector) = collect_events();
    let started = Instant::now();
    let batch = engine
        .run_batch(vec![task], opts, tx, CancellationToken::new())
        .await
        .expect("batch");
    let took = started.elapsed();
    let events = collector.await.expect("events");
    assert_no_process_with(&marker).await;
    (batch.tasks[0].clone(), events, took)
}

/// No process of this run is left: none has `marker` in its argv.
pub(crate) async fn assert_no_process_with(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(marker))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn protocol_messages(events: &[BatchEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            BatchEvent::Agent { event, .. } => match &event.kind {
                EventKind::Protocol { message, .. } => {
                    Some((message.clone(), event.raw.to_string()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// What every broken run keeps: the text of the turn, the session, the usage.
fn assert_kept(r: &SessionResult) {
    assert_eq!(r.response, "Hello over ACP.", "{r:?}");
    assert_eq!(r.session_id.as_deref(), Some("fake-acp-session"));
    assert_eq!(r.canonical_usage.input_tokens, 10);
    assert_eq!(r.canonical_usage.output_tokens, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_well_behaved_fake_agent_succeeds() {
    // The control: the same agent without a fault passes, so each test below fails on
    // its fault alone.
    let (r, events, _) = run("ok").await;
    assert_eq!(r.status, SessionStatus::Succeeded, "{r:?}");
    assert_kept(&r);
    assert!(protocol_messages(&events).is_empty());
    assert_eq!(r.protocol_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_json_rpc_line_is_a_protocol_error_that_keeps_the_rest() {
    let (r, events, _) = run("garbage").await;
    assert_eq!(r.status, SessionStatus::Failed, "{r:?}");
    assert_eq!(r.error_kind, Some(ErrorKind::Protocol), "{r:?}");
    assert_kept(&r);
    assert_eq!(r.protocol_errors, 1);
    let msgs = protocol_messages(&events);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].0.contains("not a JSON-RPC message"), "{msgs:?}");
    assert_eq!(msgs[0].1, "this line is not JSON-RPC", "the line is kept");
    let err = r.error.clone().unwrap_or_default();
    assert!(err.contains("broke the protocol"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_to_an_unknown_id_is_a_protocol_error_that_keeps_the_rest() {
    let (r, events, _) = run("unknown-id").await;
    assert_eq!(r.error_kind, Some(ErrorKind::Protocol), "{r:?}");
    assert_kept(&r);
    let msgs = protocol_messages(&events);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].0.contains("request id 999"), "{msgs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_before_initialize_is_a_protocol_error_that_keeps_the_rest() {
    let (r, events, _) = run("early-notification").await;
    assert_eq!(r.error_kind, Some(ErrorKind::Protocol), "{r:?}");
    assert_kept(&r);
    let msgs = protocol_messages(&events);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(
        msgs[0]
            .0
            .contains("session/update notification before the agent answered initialize"),
        "{msgs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_answers_initialize_times_out_and_is_killed() {
    let (r, _, took) = run("silent").await;
    assert_eq!(r.status, SessionStatus::Failed, "{r:?}");
    assert_eq!(r.error_kind, Some(ErrorKind::Timeout), "{r:?}");
    let err = r.error.clone().unwrap_or_default();
    assert!(
        err.contains("did not answer initialize within 2s") && err.contains("--acp"),
        "{err}"
    );
    assert!(
        err.contains("providers.fake-acp.acp.setup_timeout_secs"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(SETUP_TIMEOUT + 8),
        "the setup timeout took {took:?}"
    );
}
