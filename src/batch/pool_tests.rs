//! The pool's scheduling, with tasks that only sleep: FIFO, back-offs and parks per
//! account, parallelism per account.

use super::*;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aicli_providers::ErrorKind;

/// A task: its index, its account, and how its attempts end (by attempt and park count).
#[derive(Debug, Clone)]
struct Task {
    i: usize,
    account: &'static str,
    /// How many of its runs meet a usage limit before one succeeds.
    limited_runs: u32,
    runs: u32,
}

struct Recorder {
    /// Tasks withdrawn while queued (by index).
    withdrawn: Arc<Mutex<Vec<usize>>>,
    ended: Vec<(usize, Option<ErrorKind>)>,
    retried: Vec<usize>,
    parks: Vec<(usize, u32)>,
    park_for: Duration,
    parallelism: Vec<(String, usize)>,
    /// The task whose end stops the pool starting anything (a spent budget).
    stop_after: Option<usize>,
    never_started: Vec<usize>,
}

impl Recorder {
    fn new(park_for: Duration) -> Recorder {
        Recorder {
            withdrawn: Arc::default(),
            ended: Vec::new(),
            retried: Vec::new(),
            parks: Vec::new(),
            park_for,
            parallelism: Vec::new(),
            stop_after: None,
            never_started: Vec::new(),
        }
    }
}

#[async_trait::async_trait]
impl PoolOwner<Task> for Recorder {
    fn on_retry(&mut self, task: &mut Task, _: &RunOutcome, _: &Backoff) {
        self.retried.push(task.i);
    }
    async fn on_done(&mut self, task: Task, o: RunOutcome) -> Control {
        self.ended.push((task.i, o.result.error_kind));
        if self.stop_after == Some(task.i) {
            return Control::StopStarting;
        }
        Control::Continue
    }
    fn on_never_started(&mut self, task: Task, _: Control) {
        self.never_started.push(task.i);
    }
    fn account(&self, task: &Task) -> String {
        task.account.to_owned()
    }
    fn parked_until(&self, _: &Task) -> Option<SystemTime> {
        None
    }
    async fn on_park(&mut self, task: &mut Task, _: &mut RunOutcome, parks: u32) -> Option<SystemTime> {
        self.parks.push((task.i, parks));
        Some(SystemTime::now() + self.park_for)
    }
    fn on_parallelism(&mut self, account: &str, limit: usize, _: usize) {
        self.parallelism.push((account.to_owned(), limit));
    }
    fn withdrawn(&self, task: &Task) -> bool {
        self.withdrawn.lock().unwrap().contains(&task.i)
    }
}

fn outcome(kind: Option<ErrorKind>) -> RunOutcome {
    let mut r = SessionResult::default();
    match kind {
        Some(k) => r.fail(k, "x"),
        None => r.succeed(),
    }
    RunOutcome {
        result: r,
        reset_at: None,
        argv: Vec::new(),
        place: None,
        started: true,
        budget: None,
        setup: Vec::new(),
        egress_denied: Vec::new(),
        scaffold: Vec::new(),
    }
}

fn retry(max_attempts: u32, max_parks: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        base_delay_ms: 1,
        max_delay_ms: 2,
        max_parks,
        ..RetryConfig::default()
    }
}

fn task(i: usize, account: &'static str) -> Task {
    Task {
        i,
        account,
        limited_runs: 0,
        runs: 0,
    }
}

/// Runs `tasks` at `parallel`; each run sleeps `run`, then ends as `end(task, attempt)`
/// says. Returns each start as (task, attempt, ms since the pool began).
async fn run_pool(
    tasks: Vec<Task>,
    parallel: usize,
    retry: &RetryConfig,
    owner: &mut Recorder,
    run: Duration,
    end: fn(&Task, u32) -> Option<ErrorKind>,
) -> Vec<(usize, u32, u128)> {
    let started = Arc::new(Mutex::new(Vec::new()));
    let s2 = started.clone();
    let t0 = std::time::Instant::now();
    super::run(
        tasks,
        parallel,
        retry,
        move |mut t: Task, a, _cancel| {
            s2.lock().unwrap().push((t.i, a, t0.elapsed().as_millis()));
            async move {
                tokio::time::sleep(run).await;
                let kind = if t.runs < t.limited_runs {
                    Some(ErrorKind::UsageLimit)
                } else {
                    end(&t, a)
                };
                t.runs += 1;
                (t, outcome(kind))
            }
        },
        owner,
        CancellationToken::new(),
    )
    .await;
    started.lock().unwrap().clone()
}

#[tokio::test]
async fn tasks_start_in_fifo_order_and_only_backoff_kinds_are_retried() {
    let mut owner = Recorder::new(Duration::ZERO);
    let started = run_pool(
        (0..5).map(|i| task(i, "a")).collect(),
        2,
        &retry(3, 0),
        &mut owner,
        Duration::from_millis(5),
        |t, a| match (t.i, a) {
            (1, 1) => Some(ErrorKind::RateLimit),
            (3, _) => Some(ErrorKind::Auth),
            _ => None,
        },
    )
    .await;
    let firsts: Vec<usize> = started.iter().filter(|s| s.1 == 1).map(|s| s.0).collect();
    assert_eq!(firsts, [0, 1, 2, 3, 4]);
    assert!(started.iter().any(|s| (s.0, s.1) == (1, 2)), "rate-limited task retried: {started:?}");
    assert!(!started.iter().any(|s| (s.0, s.1) == (3, 2)), "auth failure not retried: {started:?}");
    assert_eq!(owner.retried, [1]);
    assert_eq!(owner.ended.len(), 5);
    // The back-off halved account a's parallelism.
    assert_eq!(owner.parallelism.first(), Some(&("a".to_owned(), 1)));
}

#[tokio::test]
async fn a_back_off_holds_its_account_only() {
    let mut owner = Recorder::new(Duration::ZERO);
    let mut cfg = retry(2, 0);
    cfg.base_delay_ms = 400;
    cfg.max_delay_ms = 400;
    let tasks = vec![
        task(0, "a"),
        task(1, "a"),
        task(2, "b"),
        task(3, "b"),
        task(4, "b"),
        task(5, "a"),
    ];
    let started = run_pool(tasks, 2, &cfg, &mut owner, Duration::from_millis(20), |t, a| {
        (t.i == 0 && a == 1).then_some(ErrorKind::Overloaded)
    })
    .await;
    let at = |i: usize, a: u32| started.iter().find(|s| (s.0, s.1) == (i, a)).map(|s| s.2);
    let retried = at(0, 2).unwrap_or(0);
    // Account b's tasks went on during a's back-off (~300-500 ms); a's next task waited
    // with the retry, which went first.
    for i in [2, 3, 4] {
        assert!(at(i, 1).unwrap_or(u128::MAX) < 200, "b's task {i} waited: {started:?}");
    }
    assert!(retried >= 250, "the retry waited for its back-off: {started:?}");
    assert!(at(5, 1).unwrap_or(0) >= retried, "a's queued task waited: {started:?}");
    assert_eq!(owner.ended.len(), 6);
}

#[tokio::test]
async fn a_usage_limit_parks_the_task_and_its_account_then_the_session_goes_on_first() {
    let mut owner = Recorder::new(Duration::from_millis(300));
    let mut limited = task(0, "a");
    limited.limited_runs = 1;
    let tasks = vec![limited, task(1, "a"), task(2, "b"), task(3, "a")];
    let started = run_pool(tasks, 1, &retry(1, 3), &mut owner, Duration::from_millis(10), |_, _| None).await;
    let order: Vec<(usize, u32)> = started.iter().map(|s| (s.0, s.1)).collect();
    // Task 0 parks; b's task 2 runs meanwhile; at the reset task 0 goes on first (still
    // its first attempt: a park is not an attempt), then a's other tasks.
    assert_eq!(order, [(0, 1), (2, 1), (0, 1), (1, 1), (3, 1)], "{started:?}");
    assert!(started[2].2 >= 280, "the park lasted until the reset: {started:?}");
    assert_eq!(owner.parks, [(0, 1)]);
    assert!(owner.ended.iter().all(|(_, k)| k.is_none()), "{:?}", owner.ended);
}

#[tokio::test]
async fn a_parked_task_withdrawn_starts_at_once_not_at_the_reset() {
    let mut owner = Recorder::new(Duration::from_secs(600));
    let withdrawn = owner.withdrawn.clone();
    let mut limited = task(0, "a");
    limited.limited_runs = 1;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        withdrawn.lock().unwrap().push(0);
    });
    let began = std::time::Instant::now();
    let started = run_pool(vec![limited], 1, &retry(1, 3), &mut owner, Duration::from_millis(5), |_, _| None).await;
    // Its next attempt started within a poll of the withdrawal (its owner's attempt then
    // ends it as cancelled), not ten minutes later.
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(began.elapsed() < Duration::from_secs(3), "{:?}", began.elapsed());
    assert_eq!(owner.parks, [(0, 1)]);
}

#[tokio::test]
async fn a_parked_task_is_handed_back_at_once_when_the_pool_stops_starting() {
    // Task 1 (another account) spends the budget: the pool starts nothing more, and the
    // task parked for ten minutes comes back now, never started.
    let mut owner = Recorder::new(Duration::from_secs(600));
    owner.stop_after = Some(1);
    let mut limited = task(0, "a");
    limited.limited_runs = 1;
    let began = std::time::Instant::now();
    let started = run_pool(
        vec![limited, task(1, "b")],
        2,
        &retry(1, 3),
        &mut owner,
        Duration::from_millis(50),
        |_, _| None,
    )
    .await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(owner.never_started, [0]);
    assert!(began.elapsed() < Duration::from_secs(3), "{:?}", began.elapsed());
}

#[tokio::test]
async fn a_task_parks_at_most_max_parks_times() {
    let mut owner = Recorder::new(Duration::from_millis(10));
    let mut limited = task(0, "a");
    limited.limited_runs = 10;
    let started = run_pool(vec![limited], 1, &retry(3, 2), &mut owner, Duration::from_millis(1), |_, _| None).await;
    assert_eq!(started.len(), 3, "the first run and two parks: {started:?}");
    assert_eq!(owner.parks, [(0, 1), (0, 2)]);
    assert_eq!(owner.ended, [(0, Some(ErrorKind::UsageLimit))]);
    assert!(owner.retried.is_empty(), "a usage limit is not retried as a back-off");
}

#[test]
fn backoff_grows_caps_and_honours_reset_times() {
    let cfg = RetryConfig {
        max_attempts: 5,
        base_delay_ms: 1000,
        max_delay_ms: 5000,
        ..RetryConfig::default()
    };
    for (attempt, base) in [(1, 1000u64), (2, 2000), (3, 4000), (4, 5000), (9, 5000)] {
        let d = backoff_delay(&cfg, attempt, None, 0).as_millis() as u64;
        assert!(d >= base * 3 / 4 && d <= base * 5 / 4, "attempt {attempt}: {d}");
    }
    let d = backoff_delay(&cfg, 1, Some(1_000_060), 1_000_000);
    assert!(d >= Duration::from_secs(60), "{d:?}");
    // A reset time in the past does not delay.
    let d = backoff_delay(&cfg, 1, Some(10), 1_000_000);
    assert!(d <= Duration::from_millis(1250), "{d:?}");
}
