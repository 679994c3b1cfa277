//! Runs a batch's tasks with at most `max_parallel` attempts at once, FIFO, cancellable,
//! and backs off under rate limits. The tasks are the owner's: each goes into its
//! attempt and comes back out with the outcome.
//!
//! Everything that slows down holds for an account (a provider, [`PoolOwner::account`]),
//! so that one vendor's limits do not stop another's tasks:
//! - When an attempt ends with an error kind that means "slow down" (`rate_limit`,
//!   `overloaded`), the pool (1) starts nothing new on the account for a while —
//!   exponential with jitter, or until the reset time the CLI gave, whichever is later
//!   —, (2) halves the account's parallelism, and (3) puts the task back at the head of
//!   the queue, up to `max_attempts` attempts in all. The parallelism grows back by one
//!   after each run of successes as long as the current limit.
//! - When an attempt meets a usage limit (`usage_limit`), the owner parks the task
//!   ([`PoolOwner::on_park`]): it goes back to the head of the queue and nothing starts
//!   on its account until the reset; then its continuation (the same session) runs
//!   first. Parks do not count as attempts; `max_parks` of them at most.
//!
//! Other errors are not retried.

use std::collections::{HashMap, VecDeque};
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
    /// The account `task` runs on: back-offs, parallelism and usage limits hold for an
    /// account (a provider), not for the whole pool.
    fn account(&self, task: &T) -> String;
    /// When a task handed to the pool is still parked at its account's usage limit (a
    /// batch resumed while it waited): nothing starts on the account before then.
    fn parked_until(&self, task: &T) -> Option<std::time::SystemTime>;
    /// An attempt of `task` met its account's usage limit, for the `parks`-th time: the
    /// owner prepares the task's continuation and says until when it waits (its account
    /// waits with it), or `None` when it cannot wait (it may then change the outcome,
    /// which [`PoolOwner::on_done`] gets next).
    async fn on_park(
        &mut self,
        task: &mut T,
        outcome: &mut RunOutcome,
        parks: u32,
    ) -> Option<std::time::SystemTime>;
    /// An account's parallelism changed (lowered by a back-off, or grown back).
    fn on_parallelism(&mut self, account: &str, limit: usize, max: usize);
    /// `task` waits near the head of the queue (among the next `max_parallel`): the
    /// owner may prepare what its attempt needs first (its worktree), so that it starts
    /// at once when its turn comes. Called again on later rounds; default: nothing.
    fn upcoming(&mut self, task: &T) {
        let _ = task;
    }
    /// Whether a queued task was withdrawn (cancelled on its own): it starts now, whatever
    /// holds its account, so that its attempt ends it at once instead of at a usage
    /// limit's reset hours later. Default: never.
    fn withdrawn(&self, task: &T) -> bool {
        let _ = task;
        false
    }
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

/// How often a loop with held tasks looks for withdrawn ones.
const WITHDRAWN_POLL: Duration = Duration::from_millis(500);

fn wants_backoff(r: &SessionResult) -> bool {
    r.error_kind.is_some_and(|k| k.is_backoff())
}

fn met_usage_limit(r: &SessionResult) -> bool {
    r.error_kind == Some(aicli_providers::ErrorKind::UsageLimit)
}

/// A task in the queue.
struct Queued<T> {
    task: T,
    /// The attempt it starts as (parks do not count).
    attempt: u32,
    /// How often it parked in this pool.
    parks: u32,
    /// Its account ([`PoolOwner::account`]).
    account: String,
}

/// One account's state: its parallelism (halved on a back-off, grown back by one after
/// as many successes), what runs on it, and until when nothing starts on it (a back-off
/// or a usage limit).
struct Account {
    limit: usize,
    running: usize,
    successes: usize,
    hold: Option<tokio::time::Instant>,
}

/// The pool's loop state.
struct Pool<T> {
    max_parallel: usize,
    queue: VecDeque<Queued<T>>,
    accounts: HashMap<String, Account>,
    stop: Option<Control>,
}

impl<T: Send + 'static> Pool<T> {
    fn account(&mut self, name: &str) -> &mut Account {
        let max = self.max_parallel;
        self.accounts.entry(name.to_owned()).or_insert(Account {
            limit: max,
            running: 0,
            successes: 0,
            hold: None,
        })
    }

    /// Holds `account` until `until` (the later of this and any hold it has).
    fn hold(&mut self, account: &str, until: tokio::time::Instant) {
        let a = self.account(account);
        a.hold = Some(a.hold.map_or(until, |h| h.max(until)));
    }

    /// The first queued task that may start now: its account neither held nor at its
    /// parallelism (FIFO among the others), or a task of a held account `withdrawn`.
    fn next_startable(
        &mut self,
        now: tokio::time::Instant,
        withdrawn: &dyn Fn(&T) -> bool,
    ) -> Option<Queued<T>> {
        for a in self.accounts.values_mut() {
            if a.hold.is_some_and(|h| now >= h) {
                a.hold = None;
            }
        }
        let accounts = &self.accounts;
        let i = self.queue.iter().position(|q| match accounts.get(&q.account) {
            None => true,
            Some(a) if a.hold.is_none() => a.running < a.limit,
            // Held (a back-off, a usage limit): only a withdrawn task goes now.
            Some(_) => withdrawn(&q.task),
        })?;
        self.queue.remove(i)
    }

    /// When the earliest hold of a queued task's account ends.
    fn next_release(&self) -> Option<tokio::time::Instant> {
        self.queue
            .iter()
            .filter_map(|q| self.accounts.get(&q.account)?.hold)
            .min()
    }

    /// Decides what follows an attempt's end: a park until its usage limit resets, a
    /// retry after a back-off, or the task's end; adjusts the account's parallelism.
    async fn ended(
        &mut self,
        ended: Queued<T>,
        mut outcome: RunOutcome,
        retry: &RetryConfig,
        owner: &mut dyn PoolOwner<T>,
        cancelled: bool,
    ) -> Control {
        let Queued {
            mut task,
            attempt,
            parks,
            account,
        } = ended;
        self.account(&account).running -= 1;
        let going_on = self.stop.is_none() && !cancelled;
        if going_on && met_usage_limit(&outcome.result) && parks < retry.max_parks {
            if let Some(until) = owner.on_park(&mut task, &mut outcome, parks + 1).await {
                let wait = until
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default();
                self.hold(&account, tokio::time::Instant::now() + wait);
                self.queue.push_front(Queued {
                    task,
                    attempt,
                    parks: parks + 1,
                    account,
                });
                return Control::Continue;
            }
            return owner.on_done(task, outcome).await;
        }
        let retry_it = going_on && wants_backoff(&outcome.result) && attempt < retry.max_attempts;
        if !retry_it {
            if outcome.result.success {
                let max = self.max_parallel;
                let a = self.account(&account);
                a.successes += 1;
                if a.successes >= a.limit && a.limit < max {
                    a.limit += 1;
                    a.successes = 0;
                    let limit = a.limit;
                    owner.on_parallelism(&account, limit, max);
                }
            }
            return owner.on_done(task, outcome).await;
        }
        let a = self.account(&account);
        a.limit = (a.limit / 2).max(1);
        a.successes = 0;
        let limit = a.limit;
        let max = self.max_parallel;
        owner.on_parallelism(&account, limit, max);
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let delay = backoff_delay(retry, attempt, outcome.reset_at, now_unix);
        self.hold(&account, tokio::time::Instant::now() + delay);
        let backoff = Backoff {
            attempt,
            delay,
            parallelism: limit,
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
        self.queue.push_front(Queued {
            task,
            attempt: attempt + 1,
            parks,
            account,
        });
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
        queue: VecDeque::new(),
        accounts: HashMap::new(),
        stop: None,
    };
    for task in tasks {
        let account = owner.account(&task);
        // A task parked before (a resumed batch) waits for its reset first.
        if let Some(until) = owner.parked_until(&task) {
            let wait = until
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            pool.hold(&account, tokio::time::Instant::now() + wait);
        }
        pool.queue.push_back(Queued {
            task,
            attempt: 1,
            parks: 0,
            account,
        });
    }
    let mut running: JoinSet<(Queued<()>, T, RunOutcome)> = JoinSet::new();
    let run_cancel = cancel.child_token();
    loop {
        if cancel.is_cancelled() && pool.stop.is_none() {
            pool.stop = Some(Control::CancelRunning);
        }
        while pool.stop.is_none() && running.len() < pool.max_parallel {
            let Some(q) = pool.next_startable(tokio::time::Instant::now(), &|t| owner.withdrawn(t))
            else {
                break;
            };
            pool.account(&q.account).running += 1;
            let fut = start(q.task, q.attempt, run_cancel.child_token());
            let slot = Queued {
                task: (),
                attempt: q.attempt,
                parks: q.parks,
                account: q.account,
            };
            running.spawn(async move {
                let (task, outcome) = fut.await;
                (slot, task, outcome)
            });
        }
        if let Some(why) = pool.stop {
            for q in pool.queue.drain(..) {
                owner.on_never_started(q.task, why);
            }
        }
        for q in pool.queue.iter().take(pool.max_parallel) {
            owner.upcoming(&q.task);
        }
        if running.is_empty() && (pool.queue.is_empty() || pool.stop.is_some()) {
            break;
        }
        // While a task waits for a hold, a look for withdrawn ones twice a second.
        let release = pool
            .next_release()
            .map(|h| h.min(tokio::time::Instant::now() + WITHDRAWN_POLL));
        let hold_sleep = async {
            match release {
                Some(h) => tokio::time::sleep_until(h).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                let (slot, task, outcome) = match joined {
                    Ok(v) => v,
                    Err(e) => {
                        // The attempt catches its run's panics: this is the attempt's own
                        // bookkeeping failing, a bug. Its task is lost to this batch.
                        tracing::error!(error = %e, "an attempt panicked outside its run");
                        continue;
                    }
                };
                let ended = Queued {
                    task,
                    attempt: slot.attempt,
                    parks: slot.parks,
                    account: slot.account,
                };
                let control = pool
                    .ended(ended, outcome, retry, owner, cancel.is_cancelled())
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
            _ = hold_sleep => {}
            _ = cancel.cancelled(), if pool.stop.is_none() => {
                pool.stop = Some(Control::CancelRunning);
            }
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
