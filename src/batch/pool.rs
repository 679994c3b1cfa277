//! Runs a batch's tasks with at most `max_parallel` attempts at once, FIFO, cancellable,
//! and backs off under rate limits. The tasks are the owner's: each goes into its
//! attempt and comes back out with the outcome.
//!
//! When an attempt ends with an error kind that means "slow down" (`rate_limit`,
//! `overloaded`), the pool (1) waits before starting anything new — exponential with
//! jitter, or until the reset time the CLI gave, whichever is later —, (2) halves its
//! effective parallelism, and (3) puts the task back at the head of the queue, up to
//! `max_attempts` attempts in all. Parallelism grows back by one after each run of
//! successes as long as the current limit. Other errors are not retried.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use aicli_providers::SessionResult;
use aicli_providers::config::RetryConfig;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::run::RunOutcome;

/// What the pool's owner says after an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Start nothing new; let running attempts finish.
    StopStarting,
    /// Start nothing new and cancel running attempts.
    CancelRunning,
}

/// A back-off decision, for the owner to report.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The attempt that failed.
    pub attempt: u32,
    /// The wait before anything starts again.
    pub delay: Duration,
    /// The parallelism from now on.
    pub parallelism: usize,
    /// Why.
    pub reason: String,
}

/// Callbacks of the pool's owner. The tasks (`T`) are the owner's, lent to the pool
/// while queued or running and handed back when they end.
#[async_trait::async_trait]
pub trait PoolOwner<T: Send>: Send {
    /// An attempt of `task` ended and will be retried after a back-off: the owner may
    /// update the task before it goes back to the head of the queue.
    fn on_retry(&mut self, task: &mut T, outcome: &RunOutcome, backoff: &Backoff);
    /// The task's last attempt in this pool ended with `outcome`.
    async fn on_done(&mut self, task: T, outcome: RunOutcome) -> Control;
    /// A queued task will never start (the batch was cancelled, or the budget spent).
    fn on_never_started(&mut self, task: T, why: Control);
}

/// The delay before attempt `attempt + 1`: `base * 2^(attempt-1)`, capped, with ±25%
/// jitter, and no earlier than `reset_at` (Unix seconds) when the CLI gave one.
pub fn backoff_delay(
    cfg: &RetryConfig,
    attempt: u32,
    reset_at: Option<i64>,
    now_unix: i64,
) -> Duration {
    let exp = cfg
        .base_delay_ms
        .saturating_mul(1u64 << attempt.saturating_sub(1).min(20))
        .min(cfg.max_delay_ms);
    let jitter = 0.75 + rand::random::<f64>() * 0.5;
    let mut ms = (exp as f64 * jitter) as u64;
    if let Some(reset) = reset_at {
        let until = reset.saturating_sub(now_unix).max(0) as u64 * 1000;
        ms = ms.max(until);
    }
    Duration::from_millis(ms)
}

fn wants_backoff(r: &SessionResult) -> bool {
    r.error_kind.is_some_and(|k| k.is_backoff())
}

/// The pool's loop state.
struct Pool<T> {
    max_parallel: usize,
    limit: usize,
    queue: VecDeque<(T, u32)>,
    gate: Option<tokio::time::Instant>,
    successes: usize,
    stop: Option<Control>,
}

impl<T: Send + 'static> Pool<T> {
    /// Decides what follows an attempt's end: a retry after a back-off, or the task's
    /// end; adjusts the parallelism either way.
    async fn ended(
        &mut self,
        mut task: T,
        attempt: u32,
        outcome: RunOutcome,
        retry: &RetryConfig,
        owner: &mut dyn PoolOwner<T>,
        cancelled: bool,
    ) -> Control {
        let retry_it = self.stop.is_none()
            && !cancelled
            && wants_backoff(&outcome.result)
            && attempt < retry.max_attempts;
        if !retry_it {
            if outcome.result.success {
                self.successes += 1;
                if self.successes >= self.limit && self.limit < self.max_parallel {
                    self.limit += 1;
                    self.successes = 0;
                }
            }
            return owner.on_done(task, outcome).await;
        }
        self.limit = (self.limit / 2).max(1);
        self.successes = 0;
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let delay = backoff_delay(retry, attempt, outcome.reset_at, now_unix);
        let until = tokio::time::Instant::now() + delay;
        self.gate = Some(self.gate.map_or(until, |g| g.max(until)));
        let backoff = Backoff {
            attempt,
            delay,
            parallelism: self.limit,
            reason: format!(
                "{}: {}",
                outcome
                    .result
                    .error_kind
                    .map(|k| k.as_str())
                    .unwrap_or("unknown"),
                outcome.result.error.clone().unwrap_or_default()
            ),
        };
        owner.on_retry(&mut task, &outcome, &backoff);
        self.queue.push_front((task, attempt + 1));
        Control::Continue
    }
}

/// Runs `tasks` through `start(task, attempt, cancel)`, which hands each task back with
/// its attempt's outcome.
pub async fn run<T, F, Fut>(
    tasks: Vec<T>,
    max_parallel: usize,
    retry: &RetryConfig,
    start: F,
    owner: &mut dyn PoolOwner<T>,
    cancel: CancellationToken,
) where
    T: Send + 'static,
    F: Fn(T, u32, CancellationToken) -> Fut,
    Fut: Future<Output = (T, RunOutcome)> + Send + 'static,
{
    let max_parallel = max_parallel.max(1);
    let mut pool = Pool {
        max_parallel,
        limit: max_parallel,
        queue: tasks.into_iter().map(|t| (t, 1)).collect(),
        gate: None,
        successes: 0,
        stop: None,
    };
    let mut running: JoinSet<(T, u32, RunOutcome)> = JoinSet::new();
    let run_cancel = cancel.child_token();
    loop {
        if cancel.is_cancelled() && pool.stop.is_none() {
            pool.stop = Some(Control::CancelRunning);
        }
        if pool.gate.is_some_and(|g| tokio::time::Instant::now() >= g) {
            pool.gate = None;
        }
        while pool.stop.is_none() && pool.gate.is_none() && running.len() < pool.limit {
            let Some((task, attempt)) = pool.queue.pop_front() else {
                break;
            };
            let fut = start(task, attempt, run_cancel.child_token());
            running.spawn(async move {
                let (task, outcome) = fut.await;
                (task, attempt, outcome)
            });
        }
        if let Some(why) = pool.stop {
            for (task, _) in pool.queue.drain(..) {
                owner.on_never_started(task, why);
            }
        }
        if running.is_empty() && (pool.queue.is_empty() || pool.stop.is_some()) {
            break;
        }
        let gate_sleep = async {
            match pool.gate {
                Some(g) if !pool.queue.is_empty() => tokio::time::sleep_until(g).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                let (task, attempt, outcome) = match joined {
                    Ok(v) => v,
                    Err(e) => {
                        // The attempt catches its run's panics: this is the attempt's own
                        // bookkeeping failing, a bug. Its task is lost to this batch.
                        tracing::error!(error = %e, "an attempt panicked outside its run");
                        continue;
                    }
                };
                let control = pool
                    .ended(task, attempt, outcome, retry, owner, cancel.is_cancelled())
                    .await;
                match control {
                    Control::Continue => {}
                    Control::StopStarting => {
                        pool.stop.get_or_insert(Control::StopStarting);
                    }
                    Control::CancelRunning => {
                        pool.stop = Some(Control::CancelRunning);
                        run_cancel.cancel();
                    }
                }
            }
            _ = gate_sleep => {}
            _ = cancel.cancelled(), if pool.stop.is_none() => {
                pool.stop = Some(Control::CancelRunning);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Recorder {
        ended: Vec<(usize, u32)>,
    }

    #[async_trait::async_trait]
    impl PoolOwner<(usize, u32)> for Recorder {
        fn on_retry(&mut self, task: &mut (usize, u32), _: &RunOutcome, _: &Backoff) {
            self.ended.push(*task);
            task.1 += 1;
        }
        async fn on_done(&mut self, task: (usize, u32), _: RunOutcome) -> Control {
            self.ended.push(task);
            Control::Continue
        }
        fn on_never_started(&mut self, _: (usize, u32), _: Control) {}
    }

    fn outcome(kind: Option<aicli_providers::ErrorKind>) -> RunOutcome {
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
            scaffold: Vec::new(),
        }
    }

    #[tokio::test]
    async fn tasks_start_in_fifo_order_and_only_backoff_kinds_are_retried() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let s2 = started.clone();
        let mut owner = Recorder { ended: Vec::new() };
        let retry = RetryConfig {
            max_attempts: 3,
            base_delay_ms: 1,
            max_delay_ms: 2,
        };
        run(
            (0..5).map(|i| (i, 1)).collect(),
            2,
            &retry,
            move |task: (usize, u32), a, _cancel| {
                let i = task.0;
                s2.lock().unwrap().push((i, a));
                async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let o = match (i, a) {
                        (1, 1) => outcome(Some(aicli_providers::ErrorKind::RateLimit)),
                        (3, _) => outcome(Some(aicli_providers::ErrorKind::Auth)),
                        _ => outcome(None),
                    };
                    (task, o)
                }
            },
            &mut owner,
            CancellationToken::new(),
        )
        .await;
        let started = started.lock().unwrap().clone();
        // FIFO: first attempts in index order; the retry of task 1 goes to the head.
        let firsts: Vec<usize> = started
            .iter()
            .filter(|(_, a)| *a == 1)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(firsts, [0, 1, 2, 3, 4]);
        assert!(
            started.contains(&(1, 2)),
            "rate-limited task retried: {started:?}"
        );
        assert!(
            !started.contains(&(3, 2)),
            "auth failure not retried: {started:?}"
        );
        assert_eq!(owner.ended.len(), 6);
    }

    #[test]
    fn backoff_grows_caps_and_honours_reset_times() {
        let cfg = RetryConfig {
            max_attempts: 5,
            base_delay_ms: 1000,
            max_delay_ms: 5000,
        };
        for (attempt, base) in [(1, 1000u64), (2, 2000), (3, 4000), (4, 5000), (9, 5000)] {
            let d = backoff_delay(&cfg, attempt, None, 0).as_millis() as u64;
            assert!(
                d >= base * 3 / 4 && d <= base * 5 / 4,
                "attempt {attempt}: {d}"
            );
        }
        let d = backoff_delay(&cfg, 1, Some(1_000_060), 1_000_000);
        assert!(d >= Duration::from_secs(60), "{d:?}");
        // A reset time in the past does not delay.
        let d = backoff_delay(&cfg, 1, Some(10), 1_000_000);
        assert!(d <= Duration::from_millis(1250), "{d:?}");
    }
}
