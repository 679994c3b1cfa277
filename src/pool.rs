//! Runs N sessions with at most `max_parallel` at once, FIFO, cancellable, and backs off
//! under rate limits.
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

use crate::session::SessionOutcome;

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
    /// The task's index.
    pub index: usize,
    /// The attempt that failed.
    pub attempt: u32,
    /// The wait before anything starts again.
    pub delay: Duration,
    /// The parallelism from now on.
    pub parallelism: usize,
    /// Why.
    pub reason: String,
}

/// Callbacks of the pool's owner.
#[async_trait::async_trait]
pub trait PoolOwner: Send {
    /// An attempt ended with `outcome`; `will_retry` says whether the pool retries it.
    async fn on_attempt_end(
        &mut self,
        index: usize,
        attempt: u32,
        outcome: &SessionOutcome,
        will_retry: bool,
    ) -> Control;
    /// The pool backs off.
    fn on_backoff(&mut self, backoff: &Backoff);
    /// A queued task will never start (batch cancelled or budget spent).
    fn on_never_started(&mut self, index: usize, why: Control);
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

/// The latest reset time (Unix seconds) a rate-limit event of the run announced.
pub fn reset_time(outcome: &SessionOutcome) -> Option<i64> {
    outcome.reset_at
}

fn wants_backoff(r: &SessionResult) -> bool {
    r.error_kind.is_some_and(|k| k.is_backoff())
}

/// Runs tasks `0..n` through `start(index, attempt, cancel)`.
pub async fn run<F, Fut>(
    n: usize,
    max_parallel: usize,
    retry: &RetryConfig,
    start: F,
    owner: &mut dyn PoolOwner,
    cancel: CancellationToken,
) where
    F: Fn(usize, u32, CancellationToken) -> Fut,
    Fut: Future<Output = SessionOutcome> + Send + 'static,
{
    let max_parallel = max_parallel.max(1);
    let mut queue: VecDeque<(usize, u32)> = (0..n).map(|i| (i, 1)).collect();
    let mut running: JoinSet<(usize, u32, SessionOutcome)> = JoinSet::new();
    let mut limit = max_parallel;
    let mut gate: Option<tokio::time::Instant> = None;
    let mut successes = 0usize;
    let mut stop: Option<Control> = None;
    let run_cancel = cancel.child_token();
    loop {
        if cancel.is_cancelled() && stop.is_none() {
            stop = Some(Control::CancelRunning);
        }
        let gate_open = gate.is_none_or(|g| tokio::time::Instant::now() >= g);
        if gate_open {
            gate = None;
        }
        while stop.is_none() && gate.is_none() && running.len() < limit {
            let Some((index, attempt)) = queue.pop_front() else {
                break;
            };
            let fut = start(index, attempt, run_cancel.child_token());
            running.spawn(async move { (index, attempt, fut.await) });
        }
        if let Some(why) = stop {
            for (index, _) in queue.drain(..) {
                owner.on_never_started(index, why);
            }
        }
        if running.is_empty() && (queue.is_empty() || stop.is_some()) {
            break;
        }
        let gate_sleep = async {
            match gate {
                Some(g) if !queue.is_empty() => tokio::time::sleep_until(g).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                let (index, attempt, outcome) = match joined {
                    Ok(v) => v,
                    Err(e) => {
                        // A panicking session is a bug; the task is lost, the batch goes on.
                        tracing::error!(error = %e, "a session task panicked");
                        continue;
                    }
                };
                let retry_it = stop.is_none()
                    && !cancel.is_cancelled()
                    && wants_backoff(&outcome.result)
                    && attempt < retry.max_attempts;
                let control = owner.on_attempt_end(index, attempt, &outcome, retry_it).await;
                if retry_it {
                    limit = (limit / 2).max(1);
                    successes = 0;
                    let now_unix = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs() as i64)
                        .unwrap_or(0);
                    let delay = backoff_delay(retry, attempt, reset_time(&outcome), now_unix);
                    let until = tokio::time::Instant::now() + delay;
                    gate = Some(gate.map_or(until, |g| g.max(until)));
                    queue.push_front((index, attempt + 1));
                    owner.on_backoff(&Backoff {
                        index,
                        attempt,
                        delay,
                        parallelism: limit,
                        reason: format!(
                            "{}: {}",
                            outcome.result.error_kind.map(|k| k.as_str()).unwrap_or("unknown"),
                            outcome.result.error.clone().unwrap_or_default()
                        ),
                    });
                } else if outcome.result.success {
                    successes += 1;
                    if successes >= limit && limit < max_parallel {
                        limit += 1;
                        successes = 0;
                    }
                }
                match control {
                    Control::Continue => {}
                    Control::StopStarting => {
                        stop.get_or_insert(Control::StopStarting);
                    }
                    Control::CancelRunning => {
                        stop = Some(Control::CancelRunning);
                        run_cancel.cancel();
                    }
                }
            }
            _ = gate_sleep => {}
            _ = cancel.cancelled(), if stop.is_none() => {
                stop = Some(Control::CancelRunning);
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
    impl PoolOwner for Recorder {
        async fn on_attempt_end(
            &mut self,
            i: usize,
            a: u32,
            _: &SessionOutcome,
            _: bool,
        ) -> Control {
            self.ended.push((i, a));
            Control::Continue
        }
        fn on_backoff(&mut self, _: &Backoff) {}
        fn on_never_started(&mut self, _: usize, _: Control) {}
    }

    fn outcome(kind: Option<aicli_providers::ErrorKind>) -> SessionOutcome {
        let mut r = SessionResult::default();
        match kind {
            Some(k) => r.fail(k, "x"),
            None => r.succeed(),
        }
        SessionOutcome {
            result: r,
            reset_at: None,
            argv: Vec::new(),
            streamed: aicli_providers::LiveSpend::default(),
            place: None,
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
            5,
            2,
            &retry,
            move |i, a, _cancel| {
                s2.lock().unwrap().push((i, a));
                async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    match (i, a) {
                        (1, 1) => outcome(Some(aicli_providers::ErrorKind::RateLimit)),
                        (3, _) => outcome(Some(aicli_providers::ErrorKind::Auth)),
                        _ => outcome(None),
                    }
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
