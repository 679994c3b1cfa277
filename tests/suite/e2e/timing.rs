//! Start-up and run times of each real CLI through the engine: a plain answer, three runs
//! per CLI, from `BatchEvent::TaskStarted` to the first `Agent` event (the CLI's first
//! line: its init event, printed before the model call), to the CLI's final event, and
//! to `TaskFinished` (the CLI has exited, its process tree is gone, its worktree removed
//! and its record written).
//!
//! `native_vs_acp` runs the same task (a shell tool call, then an answer quoting it) through
//! each native adapter and its ACP entry in one run, alternating, and prints time to the
//! agent's first line and first text, to the final event and to `TaskFinished`, and what
//! each path reports of the usage the fake served (tokens and cost, with its source).
//!
//! `cargo test --test all e2e::timing -- --ignored --nocapture` prints the tables. They are
//! ignored by default: they measure, they do not check (the machine's load decides).

use std::time::{Duration, Instant};

use aicli::BatchEvent;
use aicli::providers::EventKind;
use aicli_testkit::Script;

use super::acp::Agent;
use super::{Cli, E2e, Setup};

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

/// One run's times: first agent line, first text, final event, `TaskFinished`.
type Sample = (Duration, Duration, Duration, Duration);

/// One path's row: its runs and what the last one reported.
struct Row {
    label: &'static str,
    samples: Vec<Sample>,
    usage: String,
    cost: String,
}

/// Time from `TaskStarted` to the first event of the agent's own (not a record line of
/// aicli's messages) and to its first text.
fn agent_times(events: &[(Instant, BatchEvent)]) -> (Duration, Duration) {
    let started = events
        .iter()
        .find(|(_, e)| matches!(e, BatchEvent::TaskStarted { .. }))
        .map(|(t, _)| *t)
        .expect("started");
    let own = |e: &BatchEvent| {
        matches!(e, BatchEvent::Agent { event, .. }
            if !event.raw.is_empty() && !event.raw.starts_with("{\"aicli_stdin\""))
    };
    let first = events
        .iter()
        .find(|(_, e)| own(e))
        .map(|(t, _)| *t)
        .expect("an agent line");
    let text = events
        .iter()
        .find(|(_, e)| {
            matches!(e, BatchEvent::Agent { event, .. } if matches!(event.kind, EventKind::AssistantText { .. }))
        })
        .map(|(t, _)| *t)
        .expect("text");
    (first - started, text - started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures native vs ACP; run with --ignored --nocapture"]
async fn native_vs_acp() {
    const RUNS: usize = 3;
    let mut table = vec![
        "| agent | path | first line (ms) | first text (ms) | final event (ms) | finished (ms) | tokens in / out / cache r / cache w / reasoning | cost (source) | served (canonical) |".to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for agent in [Agent::Claude, Agent::Codex, Agent::Gemini] {
        let cli = agent.cli();
        let script = || Script::shell("touch timed.txt").then_quote_tool_result();
        let native = E2e::start(cli, script()).await;
        let acp = E2e::start_agent(agent, script(), Setup::default(), |_| {}).await;
        let mut rows: Vec<Row> = Vec::new();
        for (label, t) in [("native", &native), ("ACP", &acp)] {
            let mut times_all = Vec::new();
            let mut usage = String::new();
            let mut cost = String::new();
            for run in 1..=RUNS {
                t.set_script(script());
                let mut task = if label == "native" {
                    t.shell_task(&format!("n{run}"), "Touch it")
                } else {
                    let mut task = t.task(&format!("a{run}"), "Touch it");
                    task.permission_mode = Some(aicli::providers::PermissionMode::Bypass);
                    task
                };
                task.prompt = "Touch it".to_owned();
                let ran = t.run_one(task).await;
                let r = ran.only();
                assert!(
                    r.success,
                    "{} {label}: {}",
                    agent.provider(),
                    super::describe(r)
                );
                let x = times(&ran.events);
                let (first, text) = agent_times(&ran.events);
                times_all.push((first, text, x.final_event, x.finished));
                let u = r.canonical_usage;
                usage = format!(
                    "{} / {} / {} / {} / {}",
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read,
                    u.cache_write,
                    u.reasoning_tokens
                );
                cost = format!(
                    "{} ({:?})",
                    r.cost_usd.map_or("-".to_owned(), |c| format!("${c:.6}")),
                    r.cost_source
                );
            }
            rows.push(Row {
                label,
                samples: times_all,
                usage,
                cost,
            });
        }
        let served = cli.expected_usage(2);
        for Row {
            label,
            samples,
            usage,
            cost,
        } in rows
        {
            let mean = |f: fn(&Sample) -> Duration| {
                samples.iter().map(f).sum::<Duration>() / samples.len() as u32
            };
            table.push(format!(
                "| {} | {label} | {} | {} | {} | {} | {usage} | {cost} | {} / {} / {} / {} / {} |",
                if label == "native" {
                    cli.provider()
                } else {
                    agent.provider()
                },
                ms(mean(|x| x.0)),
                ms(mean(|x| x.1)),
                ms(mean(|x| x.2)),
                ms(mean(|x| x.3)),
                served.input_tokens,
                served.output_tokens,
                served.cache_read,
                served.cache_write,
                served.reasoning_tokens
            ));
        }
        native.finish().await;
        acp.finish().await;
    }
    println!("{}", table.join("\n"));
}
