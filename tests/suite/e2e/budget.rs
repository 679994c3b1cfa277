//! Parallel tasks of the real CLIs against a batch budget (issue 10, item 5), each run an
//! agent that never stops on its own: the fake model API answers every request with a
//! shell tool call.
//!
//! - Claude stops at its cap (`--max-budget-usd`, checked after each model call). Each
//!   run gets its reservation as its cap, and the reservations of the runs in flight
//!   together fit in the budget, so: **total ≤ budget + one request per run in flight**.
//! - Codex has no cap and reports usage only when its turn ends (`turn.completed`):
//!   nothing can stop a turn for its spend. What holds is that runs start only while
//!   their reservations fit and nothing starts once the budget is spent: **total ≤
//!   budget + each run in flight's overshoot of its reservation, up to one whole turn**.

use aicli::providers::{ErrorKind, SessionStatus};
use aicli_testkit::Script;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_parallel_runs_spend_at_most_the_budget_plus_one_request_each() {
    let cli = Cli::Claude;
    // Every answer is another `Bash` call: the agent goes on until something stops it.
    let t = E2e::start(cli, Script::shell("true")).await;
    let c = cli.expected_cost(&cli.expected_usage(1));
    let budget = 6.0 * c;
    let parallel = 3;
    let tasks = ["a", "b", "c"]
        .iter()
        .map(|id| t.shell_task(id, "Run `true` until you are told to stop"))
        .collect();
    let ran = t
        .run_options(tasks, |o| {
            o.budget_usd = Some(budget);
            o.max_parallel = Some(parallel);
        })
        .await;
    let b = &ran.batch;
    let bound = budget + parallel as f64 * c;
    assert!(
        b.total_cost_usd <= bound + 1e-9,
        "spent ${:.6} against a ${budget:.6} budget: more than the bound ${bound:.6} (one request ${c:.6}); {}",
        b.total_cost_usd,
        t.log()
    );
    for r in &b.tasks {
        assert_eq!(r.error_kind, Some(ErrorKind::Budget), "{}", describe(r));
        assert!(
            r.cost_usd.unwrap_or_default() >= c - 1e-12,
            "{}",
            describe(r)
        );
        // Each was capped at its share: the command line says so.
        let rec = t.record(&b.batch_id, &r.task_id);
        let a = &rec.attempts[0];
        let share = a.budget.expect("a budget share").reserved_usd;
        assert!((share - budget / 3.0).abs() < 1e-9, "{share}");
        let cap = a
            .argv
            .iter()
            .skip_while(|x| *x != "--max-budget-usd")
            .nth(1)
            .unwrap_or_else(|| panic!("no --max-budget-usd in {:?}", a.argv));
        assert!((cap.parse::<f64>().unwrap() - share).abs() < 1e-9, "{cap}");
    }
    // The model requests the fake served account for all of it.
    let served = t.fake.model_requests().len();
    assert!(
        (b.total_cost_usd - served as f64 * c).abs() < 1e-6 * b.total_cost_usd.max(1e-12),
        "{served} requests of ${c:.6} vs ${:.6} spent",
        b.total_cost_usd
    );
    assert!(b.budget_reserved_usd.unwrap() <= budget + 1e-9);
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_start_only_while_their_shares_fit_and_not_once_the_budget_is_spent() {
    let cli = Cli::Codex;
    let t = E2e::start(cli, Script::text("Done.")).await;
    let c = cli.expected_cost(&cli.expected_usage(1));
    let b = starts_only_while_shares_fit(&t, c).await;
    assert!(
        (b.estimated_cost_usd - b.total_cost_usd).abs() < 1e-12,
        "Codex reports no cost: all of it is estimated"
    );
    t.finish().await;
}

/// Four one-turn tasks at parallel 2 under a budget of 1.5 turns (one turn costs `c`):
/// each of the first two runs (a share of 0.75 c each) overshoots its share by its
/// whole turn, and a turn that reports its usage only at its end cannot be stopped
/// inside: the bound is the budget plus one turn per run in flight. Nothing else
/// starts: after the first run ends, what is free does not cover a share; after the
/// second, the budget is spent. Also for agents in containers (`suite::docker::acp`).
pub async fn starts_only_while_shares_fit(t: &E2e, c: f64) -> aicli::BatchResult {
    let budget = 1.5 * c;
    let parallel = 2;
    let tasks = ["a", "b", "c", "d"]
        .iter()
        .map(|id| t.task(id, "Say done"))
        .collect();
    let ran = t
        .run_options(tasks, |o| {
            o.budget_usd = Some(budget);
            o.max_parallel = Some(parallel);
        })
        .await;
    let b = ran.batch;
    let bound = budget + parallel as f64 * c;
    assert!(b.total_cost_usd <= bound + 1e-9, "{}", b.total_cost_usd);
    let ran_ok: Vec<&str> = b
        .tasks
        .iter()
        .filter(|r| r.status == SessionStatus::Succeeded)
        .map(|r| r.task_id.as_str())
        .collect();
    assert_eq!(
        ran_ok.len(),
        2,
        "{:?}",
        b.tasks.iter().map(describe).collect::<Vec<_>>()
    );
    assert_cost(Some(b.total_cost_usd), 2.0 * c, "two turns");
    for r in b.tasks.iter().filter(|r| !r.success) {
        assert_eq!(r.error_kind, Some(ErrorKind::Budget), "{}", describe(r));
        assert_eq!(
            r.error.as_deref(),
            Some("the batch budget was spent before this task started"),
            "{}",
            describe(r)
        );
    }
    assert_eq!(t.fake.model_requests().len(), 2, "{}", t.log());
    b
}
