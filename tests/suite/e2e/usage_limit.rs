//! A subscription's usage limit with each real CLI: the fake answers the first requests
//! as the real service does at a usage limit (`Step::UsageLimit`), for a few seconds;
//! the tasks park until the reset, then their sessions go on, each paid for once.

use std::time::{Duration, Instant};

use aicli::live::BatchEvent;
use aicli::providers::{ContinuationMode, ErrorKind, ResetSource};
use aicli::record::{AttemptKind, TaskState};
use aicli_testkit::{RequestKind, Script};

use super::*;

/// How long the fake's account stays over its limit from the first request.
const RESET: Duration = Duration::from_secs(6);

/// Three tasks at once meet the limit at their first request, park, and finish on their
/// own after the reset: the first run's session resumed (gemini saves no session whose
/// only request failed: there, a new run carries the task), nothing paid twice.
async fn three_tasks_park_at_the_limit_and_finish_after_the_reset(cli: Cli) {
    // Codex names the reset to the minute ("try again at 8:24 PM"), so aicli waits to
    // the end of that minute: up to 60 s past the fake's reset. A run that met the limit
    // in the last seconds of a minute would not fit in the default 60 s timeout, and
    // would (rightly) end as a timeout instead of parking.
    let setup = Setup {
        timeout: RESET + Duration::from_secs(150),
        ..Setup::default()
    };
    let t = E2e::start_in(
        setup,
        cli,
        Script::usage_limit(RESET).then_text("Done after the reset."),
    )
    .await;
    let tasks = (1..=3)
        .map(|i| t.task(&format!("t{i}"), &format!("Say done {i}.")))
        .collect();
    let began = Instant::now();
    let ran = t.run_options(tasks, |o| o.max_parallel = Some(3)).await;
    let took = began.elapsed();
    assert!(
        took >= RESET,
        "the tasks waited for the reset: {took:?}; their ends: {:?}; {}",
        ran.batch
            .tasks
            .iter()
            .map(|r| (r.error_kind, r.error.as_deref()))
            .collect::<Vec<_>>(),
        t.log()
    );

    let batch_id = ran.batch.batch_id.clone();
    let parked: Vec<String> = ran
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            BatchEvent::Parked {
                task_id, status, ..
            } => Some(format!("{task_id}: {status}")),
            _ => None,
        })
        .collect();
    assert_eq!(parked.len(), 3, "one park per task: {parked:?}");
    // Each task's own stream says it waits, in the words a countdown reads.
    let waits = ran
        .events
        .iter()
        .filter(|(_, e)| {
            matches!(e, BatchEvent::Agent { event, .. } if matches!(&event.kind,
                aicli::providers::EventKind::Status { status }
                    if status.starts_with("waiting ") && status.contains("parked until")))
        })
        .count();
    assert_eq!(waits, 3, "a status per park");
    assert!(
        parked
            .iter()
            .all(|p| p.contains("parked until") && p.contains(cli.provider())),
        "{parked:?}"
    );
    for r in &ran.batch.tasks {
        assert!(
            r.success,
            "{} did not finish: {r:#?}\n{}",
            r.task_id,
            t.log()
        );
        assert_eq!(r.response.trim(), "Done after the reset.", "{r:#?}");
        // Paid once: the run after the reset is the only one that got an answer.
        assert_eq!(r.canonical_usage, cli.expected_usage(1), "{}", r.task_id);
        let rec = t.record(&batch_id, &r.task_id);
        assert_eq!(rec.state, TaskState::Succeeded);
        assert!(rec.parked.is_none(), "the park is over: {:?}", rec.parked);
        assert_eq!(rec.attempts.len(), 2, "{:#?}", rec.attempts);
        let (first, second) = (&rec.attempts[0], &rec.attempts[1]);
        let limited = first.result.as_ref().expect("the first run's result");
        assert_eq!(
            limited.error_kind,
            Some(ErrorKind::UsageLimit),
            "{limited:#?}"
        );
        let limit = limited.usage_limit.as_ref().expect("the limit's reset");
        assert_ne!(limit.source, ResetSource::Unknown, "{limit:?}");
        let reset = limit.resets_at.expect("a reset time");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        assert!(
            reset <= now && reset + 120 >= now,
            "reset {reset}, now {now}"
        );
        if cli == Cli::Claude {
            assert_eq!(limit.window.as_deref(), Some("five_hour"));
            assert_eq!(limit.source, ResetSource::Field);
        }
        assert_eq!(
            limited.canonical_usage.output_tokens, 0,
            "the limited run got nothing"
        );
        assert_eq!(second.kind, AttemptKind::Unpark);
        let cont = r.continuation.as_ref().expect("a continuation");
        match cli {
            Cli::Claude | Cli::Codex => {
                assert_eq!(cont.mode, ContinuationMode::Resume, "{cont:?}");
                assert_eq!(r.session_id, limited.session_id, "the same session");
                assert_eq!(second.resumed_session, limited.session_id);
            }
            Cli::Gemini => {
                assert_eq!(cont.mode, ContinuationMode::NewRun, "{cont:?}");
                assert!(cont.reason.contains("saved no turn"), "{cont:?}");
            }
        }
    }
    let requests = t.fake.requests();
    let with_status = |status: u16| {
        requests
            .iter()
            .filter(|r| r.kind == RequestKind::Model && r.status == status)
            .count()
    };
    let (answered, refused) = (with_status(200), with_status(429));
    assert_eq!(answered, 3, "one answer per task: {}", t.log());
    assert_eq!(
        refused,
        3,
        "one refused request per task, none burnt: {}",
        t.log()
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_tasks_park_at_the_usage_limit_and_resume_their_sessions() {
    three_tasks_park_at_the_limit_and_finish_after_the_reset(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_tasks_park_at_the_usage_limit_and_resume_their_threads() {
    three_tasks_park_at_the_limit_and_finish_after_the_reset(Cli::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_tasks_park_at_the_usage_limit_and_finish_after_the_reset() {
    three_tasks_park_at_the_limit_and_finish_after_the_reset(Cli::Gemini).await;
}
