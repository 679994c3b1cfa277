//! Start-up and run times of each real CLI through the engine: a plain answer, three runs
//! per CLI, from `BatchEvent::TaskStarted` to the first `Agent` event (the CLI's first
//! line: its init event, printed before the model call), to the CLI's final event, and
//! to `TaskFinished` (the CLI has exited, its process tree is gone, its worktree removed
//! and its record written).
//!
//! `cargo test --test all e2e::timing -- --ignored --nocapture` prints the table. It is
//! ignored by default: it measures, it does not check (the machine's load decides).

use std::time::{Duration, Instant};

use aicli::BatchEvent;
use aicli::providers::EventKind;
use aicli_testkit::Script;

use super::{Cli, E2e};

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Times {
    first_event: Duration,
    final_event: Duration,
    finished: Duration,
}

fn times(events: &[(Instant, BatchEvent)]) -> Times {
    let at = |pred: &dyn Fn(&BatchEvent) -> bool| {
        events
            .iter()
            .find(|(_, e)| pred(e))
            .map(|(t, _)| *t)
            .expect("event")
    };
    let started = at(&|e| matches!(e, BatchEvent::TaskStarted { .. }));
    let first = at(&|e| matches!(e, BatchEvent::Agent { .. }));
    let fin = at(
        &|e| matches!(e, BatchEvent::Agent { event, .. } if matches!(event.kind, EventKind::Final { .. })),
    );
    let finished = at(&|e| matches!(e, BatchEvent::TaskFinished { .. }));
    Times {
        first_event: first - started,
        final_event: fin - started,
        finished: finished - started,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures start-up times; run with --ignored --nocapture"]
async fn start_to_first_event_and_exit_per_cli() {
    let mut table = vec![
        "| CLI | run | start → first event (ms) | start → final event (ms) | start → TaskFinished (ms) |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    for cli in [Cli::Claude, Cli::Codex, Cli::Gemini] {
        let t = E2e::start(cli, Script::text("Timed.")).await;
        let mut all = Vec::new();
        for run in 1..=3 {
            let ran = t
                .run_one(t.task(&format!("timed-{run}"), "Say hello"))
                .await;
            assert!(ran.only().success, "{}", super::describe(ran.only()));
            let x = times(&ran.events);
            table.push(format!(
                "| {} | {run} | {} | {} | {} |",
                cli.provider(),
                ms(x.first_event),
                ms(x.final_event),
                ms(x.finished)
            ));
            all.push(x);
        }
        let mean =
            |f: fn(&Times) -> Duration| all.iter().map(f).sum::<Duration>() / all.len() as u32;
        table.push(format!(
            "| {} | mean | {} | {} | {} |",
            cli.provider(),
            ms(mean(|x| x.first_event)),
            ms(mean(|x| x.final_event)),
            ms(mean(|x| x.finished))
        ));
        t.finish().await;
    }
    println!("{}", table.join("\n"));
}
