//! The batch budget: reserved before a run starts, counted live from its stream, and
//! enforced while runs are in flight, not only when they end.
//!
//! - **Reserve.** Before a run starts it reserves its share of the budget (see
//!   [`BudgetPool::reserve`]); the reservations of the runs in flight together never
//!   exceed what is left (budget minus what settled runs were charged). A CLI with a
//!   per-run cap (Claude's `--max-budget-usd`) gets its reservation as that cap. A run
//!   that wants more than is free waits, first come first served, until runs in flight
//!   end and give back what they did not use; when nothing is in flight, it starts with
//!   whatever is left.
//! - **Count live.** While a run streams, the session tells its [`Reservation`] what the
//!   run has spent so far (its usage increments priced at the config's prices,
//!   [`aicli_providers::LiveSpend`]).
//! - **Stop.** A run may spend what no other run holds: `budget - charged - the others'
//!   max(reserved, streamed)`. When its streamed spend reaches that, it is told to stop
//!   ([`Reservation::stopped`]). When the spend of everything (settled and streamed)
//!   reaches the budget, that holds for every run in flight: all stop.
//! - **Settle.** When a run ends, its reservation is replaced by its charge (its
//!   cost; see [`Reservation::settle`]) and what it did not use goes back to the pool.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::record::AttemptBudget;

/// Below this, amounts of USD are equal (float sums of prices).
const EPSILON: f64 = 1e-12;

/// A batch budget shared by the runs of one invocation (a batch, a resume, an answer).
#[derive(Debug)]
pub struct BudgetPool {
    budget: f64,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// What settled runs were charged (this invocation's and, for a resume or an
    /// answer, those in the records).
    charged: f64,
    /// Runs in flight.
    runs: BTreeMap<u64, Run>,
    next_run: u64,
    /// Runs waiting for a reservation, in arrival order.
    waiting: VecDeque<u64>,
    next_ticket: u64,
    /// The most reserved for runs in flight at one time.
    peak_reserved: f64,
    /// Runs were stopped because the whole budget was reached (counting what runs in
    /// flight streamed): nothing starts after that, even if their settled charges come
    /// in a little under what they streamed.
    reached: bool,
}

#[derive(Debug)]
struct Run {
    reserved: f64,
    /// The run's own limit (a task's `max_budget_usd`), over whatever the pool has free.
    limit: Option<f64>,
    streamed: f64,
    stop: CancellationToken,
    why: Option<String>,
}

impl State {
    /// What runs in flight hold: each its reservation, or its streamed spend when that
    /// is more.
    fn held(&self, except: Option<u64>) -> f64 {
        self.runs
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(_, r)| r.reserved.max(r.streamed))
            .sum()
    }

    fn reserved(&self) -> f64 {
        self.runs.values().map(|r| r.reserved).sum()
    }
}

/// Why a run got no reservation.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The budget is spent: settled runs were charged all of it.
    Spent {
        /// What was charged.
        charged: f64,
        /// The budget.
        budget: f64,
    },
    /// The wait was cancelled (Ctrl-C).
    Cancelled,
}

/// The figures of a pool, for the batch result.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BudgetFigures {
    /// What settled runs were charged.
    pub charged: f64,
    /// The most reserved for runs in flight at one time.
    pub peak_reserved: f64,
}

impl BudgetPool {
    /// A pool of `budget` USD of which `charged` is already spent.
    pub fn new(budget: f64, charged: f64) -> Arc<BudgetPool> {
        Arc::new(BudgetPool {
            budget,
            state: Mutex::new(State {
                charged,
                ..State::default()
            }),
            changed: Notify::new(),
        })
    }

    /// The budget.
    pub fn budget(&self) -> f64 {
        self.budget
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the figures half-updated (each
        // update is one assignment); go on with them.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool's figures now.
    pub fn figures(&self) -> BudgetFigures {
        let s = self.lock();
        BudgetFigures {
            charged: s.charged,
            peak_reserved: s.peak_reserved,
        }
    }

    /// Whether settled runs were charged the whole budget (nothing can start again).
    pub fn is_spent(&self) -> bool {
        self.lock().charged >= self.budget - EPSILON
    }

    /// Reserves up to `want` USD for a run: as soon as it is this run's turn (first
    /// come, first served) and `want` is free, or, when no run is in flight, whatever is
    /// left. Refused when settled runs were charged the whole budget, or when `cancel`
    /// fires while waiting.
    pub async fn reserve(
        self: &Arc<Self>,
        want: f64,
        cancel: &CancellationToken,
    ) -> Result<Reservation, Refusal> {
        let want = want.max(0.0);
        let ticket = {
            let mut s = self.lock();
            let t = s.next_ticket;
            s.next_ticket += 1;
            s.waiting.push_back(t);
            t
        };
        // Leaves the queue however the wait ends (also when this future is dropped).
        let mut place = Place {
            pool: self,
            ticket,
            queued: true,
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut s = self.lock();
                if s.reached || s.charged >= self.budget - EPSILON {
                    return Err(Refusal::Spent {
                        charged: s.charged,
                        budget: self.budget,
                    });
                }
                let free = self.budget - s.charged - s.held(None);
                let first = s.waiting.front() == Some(&ticket);
                if first && free > EPSILON && (free >= want - EPSILON || s.runs.is_empty()) {
                    let amount = want.min(free);
                    let id = s.next_run;
                    s.next_run += 1;
                    let stop = CancellationToken::new();
                    s.runs.insert(
                        id,
                        Run {
                            reserved: amount,
                            limit: None,
                            streamed: 0.0,
                            stop: stop.clone(),
                            why: None,
                        },
                    );
                    s.peak_reserved = s.peak_reserved.max(s.reserved());
                    s.waiting.pop_front();
                    place.queued = false;
                    drop(s);
                    // The next in line may fit in what is still free.
                    self.changed.notify_waiters();
                    tracing::debug!(run = id, reserved = amount, free, "budget reserved");
                    return Ok(Reservation {
                        pool: self.clone(),
                        id,
                        amount,
                        stop,
                        settled: std::sync::atomic::AtomicBool::new(false),
                    });
                }
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = cancel.cancelled() => return Err(Refusal::Cancelled),
            }
        }
    }

    /// Tells every run whose streamed spend reached what it may spend to stop.
    fn enforce(&self, s: &mut State) {
        let total = s.charged + s.runs.values().map(|r| r.streamed).sum::<f64>();
        let reached = total >= self.budget - EPSILON;
        let ids: Vec<u64> = s.runs.keys().copied().collect();
        for id in ids {
            let allowed = self.budget - s.charged - s.held(Some(id));
            let Some(run) = s.runs.get_mut(&id) else {
                continue;
            };
            let over_limit = run.limit.filter(|l| run.streamed >= l - EPSILON);
            if run.why.is_some() || (run.streamed < allowed - EPSILON && over_limit.is_none()) {
                continue;
            }
            let why = if let Some(limit) = over_limit {
                format!(
                    "this run streamed ${:.4} of spend, its limit of ${limit:.4} (max_budget_usd of the task or its provider)",
                    run.streamed
                )
            } else if reached {
                s.reached = true;
                format!(
                    "the batch budget of ${:.4} was reached while this task ran (${total:.4} spent, counting what the runs in flight streamed)",
                    self.budget
                )
            } else {
                format!(
                    "this run streamed ${:.4} of spend, all it may spend: the ${:.4} budget less ${:.4} charged and ${:.4} held by the other runs in flight (its reservation was ${:.4})",
                    run.streamed,
                    self.budget,
                    s.charged,
                    self.budget - s.charged - allowed,
                    run.reserved
                )
            };
            tracing::info!(
                run = id,
                streamed = run.streamed,
                allowed,
                "budget: stopping a run"
            );
            run.why = Some(why);
            run.stop.cancel();
        }
    }
}

/// A place in the queue of runs waiting for a reservation.
struct Place<'a> {
    pool: &'a BudgetPool,
    ticket: u64,
    queued: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.queued {
            let mut s = self.pool.lock();
            s.waiting.retain(|t| *t != self.ticket);
            drop(s);
            self.pool.changed.notify_waiters();
        }
    }
}

/// What a run without a limit of its own reserves of a batch's `budget` (none: no
/// limit): an equal share of what is left after `charged`, so that the runs in flight
/// together (at most `max_parallel` of `to_run`) fit in it.
pub fn share(budget: Option<f64>, charged: f64, max_parallel: usize, to_run: usize) -> f64 {
    budget.map_or(f64::INFINITY, |b| {
        let at_once = max_parallel.clamp(1, to_run.max(1));
        (b - charged).max(0.0) / at_once as f64
    })
}

/// One run's share of the budget, from its start to its end.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<BudgetPool>,
    id: u64,
    amount: f64,
    stop: CancellationToken,
    settled: std::sync::atomic::AtomicBool,
}

impl Reservation {
    /// USD reserved for the run (the cap a CLI with a per-run cap gets).
    pub fn amount(&self) -> f64 {
        self.amount
    }

    /// What the run has spent so far by its stream, USD; stops runs that reached what
    /// they may spend (this one or, when the budget is reached, all).
    pub fn streamed(&self, usd: f64) {
        let mut s = self.pool.lock();
        if let Some(r) = s.runs.get_mut(&self.id) {
            r.streamed = r.streamed.max(usd);
        }
        self.pool.enforce(&mut s);
    }

    /// Stops the run once it streamed `limit` USD (its own limit, a task's
    /// `max_budget_usd`), whatever else the pool has free: the limit holds even when
    /// the CLI ignores the cap it was given.
    pub fn limit_to(&self, limit: f64) {
        let mut s = self.pool.lock();
        if let Some(r) = s.runs.get_mut(&self.id) {
            r.limit = Some(limit);
        }
        self.pool.enforce(&mut s);
    }

    /// Resolves when the run must stop (see the module docs).
    pub async fn stopped(&self) {
        self.stop.cancelled().await
    }

    /// Why the run must stop, once it must.
    pub fn stop_reason(&self) -> Option<String> {
        self.pool
            .lock()
            .runs
            .get(&self.id)
            .and_then(|r| r.why.clone())
    }

    /// What the run streamed so far, USD.
    pub fn streamed_usd(&self) -> f64 {
        self.pool
            .lock()
            .runs
            .get(&self.id)
            .map_or(0.0, |r| r.streamed)
    }

    /// The run ended: it is charged its cost (for a run cut off, at least its streamed
    /// estimate — the caller's `cost_usd` has it), or, when its cost is unknown, its
    /// whole reservation (or what it streamed, if more); the rest goes back to the pool.
    /// Returns the attempt's figures for its record.
    pub fn settle_run(&self, cost_usd: Option<f64>, streamed_usd: f64) -> AttemptBudget {
        let charge = cost_usd.unwrap_or_else(|| self.amount.max(streamed_usd));
        self.settle(charge);
        AttemptBudget {
            reserved_usd: self.amount,
            charged_usd: Some(charge),
        }
    }

    /// The run ended and cost `charge` USD: the reservation is replaced by it, what it
    /// did not use returns to the pool, and runs still in flight are checked against
    /// what is left now. Only the first call counts.
    pub fn settle(&self, charge: f64) {
        if self.settled.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut s = self.pool.lock();
        s.runs.remove(&self.id);
        if charge.is_finite() && charge > 0.0 {
            s.charged += charge;
        }
        self.pool.enforce(&mut s);
        drop(s);
        self.pool.changed.notify_waiters();
    }
}

impl Drop for Reservation {
    /// A reservation dropped without [`Reservation::settle`] is charged what its run
    /// streamed.
    fn drop(&mut self) {
        let streamed = self.streamed_usd();
        self.settle(streamed);
    }
}

#[cfg(test)]
mod tests;
