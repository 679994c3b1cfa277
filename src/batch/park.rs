//! A task parked at its provider's usage limit: it waits for the reset (the pool holds
//! its account meanwhile), then the same CLI session goes on with a prompt that says
//! why. The task's timeout counts while it waits; a batch budget spent meanwhile keeps
//! it from starting again; a batch stopped meanwhile leaves it `parked` in its record,
//! with its reset, for `aicli resume`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aicli_providers::{AgentEvent, ErrorKind, EventKind};

use super::continuation::{Next, Why};
use super::{Batch, TaskRun};
use crate::live::BatchEvent;
use crate::record::{Write, local_clock};
use crate::run::RunOutcome;

impl Batch {
    /// The run of `task` that ended with `outcome` met its provider's usage limit (the
    /// `parks`-th time in this invocation): until when the task waits, its continuation
    /// ready; `None` when it cannot wait for the reset within its timeout (the outcome
    /// then says so, as a timeout).
    pub(super) async fn park(
        &self,
        task: &mut TaskRun,
        outcome: &mut RunOutcome,
        parks: u32,
    ) -> Option<SystemTime> {
        let mut park = task.rec.parked.clone()?;
        let provider = self.engine.registry.get(&task.rec.provider).ok()?;
        let deadline = match task.deadline {
            Some(d) => d,
            None => {
                let timeout = self.engine.limits(&self.opts, &task.rec.task).timeout;
                run_start(task).unwrap_or_else(SystemTime::now) + timeout
            }
        };
        if park.until() >= deadline {
            let message = format!(
                "the {} usage limit resets at {}, after the task's timeout ends ({}): {}",
                task.rec.provider,
                local_clock(park.until_unix),
                local_clock(unix(deadline)),
                park.message
            );
            outcome.result.fail(ErrorKind::Timeout, message);
            return None;
        }
        task.deadline = Some(deadline);
        park.deadline_unix = Some(unix(deadline));
        let until = park.until();
        let status = park.describe(&task.rec.provider);
        task.rec.parked = Some(park);
        task.persist(&self.record, Write::Progress).await;
        task.next = Next::continuing(&task.rec, Some(&outcome.result), &provider, Why::UsageLimit);
        tracing::info!(task = %task.id(), parks, "{status}");
        // On the task's own stream too, in the words a wait before a session goes on has
        // (`aicli run` counts it down; `--json` and the web view show it).
        let secs = until
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .as_secs();
        self.live.send(BatchEvent::Agent {
            task_id: Arc::from(task.id()),
            event: AgentEvent::synthetic(EventKind::Status {
                status: format!("waiting {secs}s before continuing the session: {status}"),
            }),
        });
        self.live.send(BatchEvent::Parked {
            task_id: Arc::from(task.id()),
            provider: Arc::from(task.rec.provider.as_str()),
            until_unix: unix(until),
            status,
        });
        Some(until)
    }
}

/// When the task's latest run started.
fn run_start(task: &TaskRun) -> Option<SystemTime> {
    let started = &task.rec.attempts.last()?.started_at;
    humantime::parse_rfc3339_weak(started).ok()
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}
