//! The budget pool's rules, without processes.

use super::*;
use std::time::Duration;

fn never() -> CancellationToken {
    CancellationToken::new()
}

#[tokio::test]
async fn reservations_together_fit_in_what_is_left_and_a_bigger_one_waits() {
    let pool = BudgetPool::new(1.0, 0.25);
    let a = pool.reserve(0.5, &never()).await.unwrap();
    assert_eq!(a.amount(), 0.5);
    // 0.25 is free: a run that wants 0.5 waits while `a` is in flight.
    let p2 = pool.clone();
    let b = tokio::spawn(async move { p2.reserve(0.5, &never()).await.map(|r| r.amount()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!b.is_finished(), "started with only 0.25 free");
    // `a` used 0.1: 0.4 returns, 0.65 is free.
    a.settle(0.1);
    assert_eq!(b.await.unwrap(), Ok(0.5));
    let f = pool.figures();
    assert!((f.charged - 0.35).abs() < 1e-12, "{f:?}");
    assert!((f.peak_reserved - 0.5).abs() < 1e-12, "{f:?}");
}

#[tokio::test]
async fn with_nothing_in_flight_a_run_takes_what_is_left_then_the_budget_is_spent() {
    let pool = BudgetPool::new(1.0, 0.8);
    let r = pool.reserve(0.5, &never()).await.unwrap();
    assert!((r.amount() - 0.2).abs() < 1e-12);
    r.settle(0.3);
    assert!(pool.is_spent());
    assert_eq!(
        pool.reserve(0.5, &never()).await.unwrap_err(),
        Refusal::Spent {
            charged: 1.1,
            budget: 1.0
        }
    );
}

#[tokio::test]
async fn waiting_is_first_come_first_served_and_cancellable() {
    let pool = BudgetPool::new(1.0, 0.0);
    let a = pool.reserve(0.9, &never()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (p, o) = (pool.clone(), order.clone());
    // The first in line wants more than the second: the second does not overtake.
    let first = tokio::spawn(async move {
        let r = p.reserve(0.6, &never()).await.unwrap();
        o.lock().unwrap().push("first");
        r
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (p, o) = (pool.clone(), order.clone());
    let second = tokio::spawn(async move {
        let r = p.reserve(0.05, &never()).await.unwrap();
        o.lock().unwrap().push("second");
        r
    });
    let cancel = CancellationToken::new();
    let (p, c) = (pool.clone(), cancel.clone());
    let third = tokio::spawn(async move { p.reserve(0.05, &c).await.map(|r| r.amount()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "someone overtook the first"
    );
    cancel.cancel();
    assert_eq!(third.await.unwrap(), Err(Refusal::Cancelled));
    a.settle(0.2);
    let (f, s) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(*order.lock().unwrap(), ["first", "second"]);
    assert!((f.amount() - 0.6).abs() < 1e-12 && (s.amount() - 0.05).abs() < 1e-12);
}

#[tokio::test]
async fn a_run_s_own_limit_holds_over_free_room_and_without_a_batch_budget() {
    for budget in [2.0, f64::INFINITY] {
        let pool = BudgetPool::new(budget, 0.0);
        let a = pool.reserve(1.0, &never()).await.unwrap();
        a.limit_to(1.0);
        a.streamed(0.99);
        assert!(a.stop_reason().is_none(), "{budget}: below its limit");
        a.streamed(1.02);
        let why = a.stop_reason().expect("stopped at its limit");
        assert!(
            why.contains("streamed $1.0200 of spend, its limit of $1.0000"),
            "{budget}: {why}"
        );
    }
}

#[tokio::test]
async fn a_run_stopped_below_its_reservation_says_what_it_was_allowed() {
    // `c` is charged more than it reserved: what `a` may spend shrinks below what
    // `a` reserved, and `a`'s stop names the figures that stopped it.
    let pool = BudgetPool::new(1.0, 0.0);
    let a = pool.reserve(0.4, &never()).await.unwrap();
    let _b = pool.reserve(0.3, &never()).await.unwrap();
    let c = pool.reserve(0.3, &never()).await.unwrap();
    c.settle(0.5);
    a.streamed(0.25);
    let why = a.stop_reason().unwrap();
    assert!(!why.contains("past its reservation"), "{why}");
    assert!(
        why.contains("streamed $0.2500 of spend, all it may spend: the $1.0000 budget less $0.5000 charged and $0.3000 held by the other runs in flight (its reservation was $0.4000)"),
        "{why}"
    );
}

#[tokio::test]
async fn a_run_streaming_past_what_it_may_spend_is_stopped_and_others_go_on() {
    let pool = BudgetPool::new(1.0, 0.0);
    let a = pool.reserve(0.4, &never()).await.unwrap();
    let b = pool.reserve(0.4, &never()).await.unwrap();
    // 0.2 is free: `a` may spend 0.6 before it takes what `b` holds.
    a.streamed(0.55);
    assert!(a.stop_reason().is_none());
    a.streamed(0.6);
    let why = a.stop_reason().unwrap();
    assert!(
        why.contains("streamed $0.6000 of spend, all it may spend: the $1.0000 budget less $0.0000 charged and $0.4000 held")
            && why.contains("(its reservation was $0.4000)"),
        "{why}"
    );
    tokio::time::timeout(Duration::from_secs(1), a.stopped())
        .await
        .unwrap();
    assert!(b.stop_reason().is_none(), "b is within its reservation");
    a.settle(0.6);
    b.streamed(0.39);
    assert!(b.stop_reason().is_none());
    // Everything spent or streamed reaches the budget: b stops too.
    b.streamed(0.4);
    assert!(
        b.stop_reason()
            .unwrap()
            .contains("budget of $1.0000 was reached")
    );
}

#[tokio::test]
async fn a_run_settling_over_its_reservation_stops_runs_left_without_cover() {
    let pool = BudgetPool::new(1.0, 0.0);
    let a = pool.reserve(0.5, &never()).await.unwrap();
    let b = pool.reserve(0.5, &never()).await.unwrap();
    b.streamed(0.25);
    // `a` reports its cost only at its end, and it is over its share: what is left
    // (0.2) is less than what `b` streamed already.
    a.settle(0.8);
    assert!(b.stop_reason().is_some());
    // A dropped reservation is charged what it streamed.
    drop(b);
    assert!((pool.figures().charged - 1.05).abs() < 1e-12);
}

#[tokio::test]
async fn once_the_budget_is_reached_nothing_starts_even_if_charges_come_in_under_it() {
    let pool = BudgetPool::new(1.0, 0.0);
    let a = pool.reserve(0.5, &never()).await.unwrap();
    let b = pool.reserve(0.5, &never()).await.unwrap();
    // Together they stream the whole budget: both are told to stop.
    a.streamed(0.5);
    b.streamed(0.5);
    assert!(a.stop_reason().is_some());
    assert!(b.stop_reason().is_some_and(|w| w.contains("was reached")), "{:?}", b.stop_reason());
    // Their final costs come in under what they streamed: 0.2 looks free, but the
    // budget was reached, so a third run does not start.
    a.settle(0.4);
    b.settle(0.4);
    assert!(matches!(
        pool.reserve(0.1, &never()).await,
        Err(Refusal::Spent { .. })
    ));
}
