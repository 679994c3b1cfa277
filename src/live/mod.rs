//! The live channel of a batch: how [`BatchEvent`]s reach their subscribers (the
//! progress display, `run --json`, tests) without ever holding the stream up or growing
//! with it.
//!
//! Sending never waits. Each subscriber has a queue bounded in bytes: a subscriber that
//! falls behind **loses** agent events (it is told how many, as [`RecvError::Lagged`])
//! and gets every task's progress ([`BatchEvent::TaskSpend`]) **coalesced** into the
//! latest figure; lifecycle events (a task started, blocked or finished, a back-off, the
//! budget) are always delivered (there are a few per task, not per line). With no
//! subscriber, events are dropped at once: nothing is kept for a subscriber that may
//! come later.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::util::lock;

mod events;

pub use events::BatchEvent;

/// The default bound of a subscriber's queue: 1 MiB of events.
pub const DEFAULT_QUEUE_BYTES: usize = 1024 * 1024;

/// A new live channel whose subscribers queue up to `queue_bytes` each, and its first
/// subscriber.
pub fn channel(queue_bytes: usize) -> (LiveSender, LiveReceiver) {
    let tx = LiveSender::new(queue_bytes);
    let rx = tx.subscribe();
    (tx, rx)
}

/// Why [`LiveReceiver::recv`] gave no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// This many agent events were dropped since the last `recv`: the subscriber was
    /// too slow. The next `recv` goes on with the events kept.
    #[error("{0} live events were dropped (the subscriber was too slow)")]
    Lagged(u64),
    /// Every sender is gone and the queue is empty.
    #[error("the live channel is closed")]
    Closed,
}

#[derive(Debug)]
struct Channel {
    subscribers: Mutex<Vec<Weak<Subscriber>>>,
    senders: AtomicUsize,
    closed: AtomicBool,
    queue_bytes: usize,
}

#[derive(Debug)]
struct Subscriber {
    queue: Mutex<Queue>,
    ready: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<(BatchEvent, usize)>,
    bytes: usize,
    dropped: u64,
}

/// The sending side; cheap to clone. The channel closes when the last clone is dropped.
#[derive(Debug)]
pub struct LiveSender {
    channel: Arc<Channel>,
}

impl LiveSender {
    /// A channel without subscribers yet, each to queue up to `queue_bytes`.
    pub fn new(queue_bytes: usize) -> LiveSender {
        LiveSender {
            channel: Arc::new(Channel {
                subscribers: Mutex::new(Vec::new()),
                senders: AtomicUsize::new(1),
                closed: AtomicBool::new(false),
                queue_bytes,
            }),
        }
    }

    /// A new subscriber: it gets the events sent from now on.
    pub fn subscribe(&self) -> LiveReceiver {
        let sub = Arc::new(Subscriber {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        });
        let mut subs = lock(&self.channel.subscribers);
        subs.retain(|w| w.strong_count() > 0);
        subs.push(Arc::downgrade(&sub));
        LiveReceiver {
            sub,
            channel: self.channel.clone(),
        }
    }

    /// Live subscribers.
    pub fn receiver_count(&self) -> usize {
        lock(&self.channel.subscribers)
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Sends `event` to every subscriber; never waits (see the module docs).
    pub fn send(&self, event: BatchEvent) {
        let subs: Vec<Arc<Subscriber>> = lock(&self.channel.subscribers)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let Some((last, rest)) = subs.split_last() else {
            return;
        };
        let size = approx_bytes(&event);
        for s in rest {
            s.offer(event.clone(), size, self.channel.queue_bytes);
        }
        last.offer(event, size, self.channel.queue_bytes);
    }
}

impl Clone for LiveSender {
    fn clone(&self) -> LiveSender {
        self.channel.senders.fetch_add(1, Ordering::SeqCst);
        LiveSender {
            channel: self.channel.clone(),
        }
    }
}

impl Drop for LiveSender {
    fn drop(&mut self) {
        if self.channel.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.channel.closed.store(true, Ordering::SeqCst);
            for s in lock(&self.channel.subscribers)
                .iter()
                .filter_map(Weak::upgrade)
            {
                s.ready.notify_one();
            }
        }
    }
}

impl Subscriber {
    fn offer(&self, event: BatchEvent, size: usize, cap: usize) {
        let mut q = lock(&self.queue);
        match &event {
            BatchEvent::Agent { .. } => {
                // One event always fits in an empty queue, however large.
                if !q.events.is_empty() && q.bytes + size > cap {
                    q.dropped += 1;
                    return;
                }
            }
            BatchEvent::TaskSpend { task_id, .. } => {
                // The newest figure replaces one not read yet.
                let pending = q.events.iter_mut().find(
                    |(e, _)| matches!(e, BatchEvent::TaskSpend { task_id: t, .. } if t == task_id),
                );
                if let Some((slot, _)) = pending {
                    *slot = event;
                    return;
                }
            }
            BatchEvent::TaskStarted { .. }
            | BatchEvent::Backoff { .. }
            | BatchEvent::Parked { .. }
            | BatchEvent::Parallelism { .. }
            | BatchEvent::TaskBlocked { .. }
            | BatchEvent::TaskFinished { .. }
            | BatchEvent::BudgetSpent { .. } => {}
        }
        q.bytes += size;
        q.events.push_back((event, size));
        drop(q);
        self.ready.notify_one();
    }
}

/// The receiving side of one subscriber.
#[derive(Debug)]
pub struct LiveReceiver {
    sub: Arc<Subscriber>,
    channel: Arc<Channel>,
}

impl LiveReceiver {
    /// The next event; [`RecvError::Lagged`] once after events were dropped,
    /// [`RecvError::Closed`] when every sender is gone and nothing is left.
    pub async fn recv(&mut self) -> Result<BatchEvent, RecvError> {
        loop {
            {
                let mut q = lock(&self.sub.queue);
                if q.dropped > 0 {
                    return Err(RecvError::Lagged(std::mem::take(&mut q.dropped)));
                }
                if let Some((ev, size)) = q.events.pop_front() {
                    q.bytes -= size;
                    return Ok(ev);
                }
                if self.channel.closed.load(Ordering::SeqCst) {
                    return Err(RecvError::Closed);
                }
            }
            // A notification sent between the check and here is kept as a permit.
            self.sub.ready.notified().await;
        }
    }
}

/// Roughly what an event holds in memory, for the queue's bound.
fn approx_bytes(event: &BatchEvent) -> usize {
    const BASE: usize = 128;
    match event {
        // The text of most events is a copy of a part of their raw line.
        BatchEvent::Agent { event, .. } => BASE + 2 * event.raw.len() + event_text(event),
        BatchEvent::TaskFinished { result, .. } => {
            BASE + result.response.len() + result.error.as_ref().map_or(0, String::len)
        }
        BatchEvent::Backoff { reason, .. } => BASE + reason.len(),
        BatchEvent::Parked { status, .. } => BASE + status.len(),
        BatchEvent::TaskBlocked { question, .. } => {
            BASE + question.question.len() + question.options.iter().map(String::len).sum::<usize>()
        }
        BatchEvent::TaskStarted { .. }
        | BatchEvent::Parallelism { .. }
        | BatchEvent::TaskSpend { .. }
        | BatchEvent::BudgetSpent { .. } => BASE,
    }
}

/// The text an event made by aicli itself carries (it has no raw line).
fn event_text(event: &aicli_providers::AgentEvent) -> usize {
    use aicli_providers::EventKind;
    if !event.raw.is_empty() {
        return 0;
    }
    match &event.kind {
        EventKind::Log { message, .. } => message.len(),
        EventKind::Question { question, options } => {
            question.len() + options.iter().map(String::len).sum::<usize>()
        }
        EventKind::AssistantText { text, .. } | EventKind::Thinking { text, .. } => text.len(),
        EventKind::Error { message, .. } => message.len(),
        EventKind::SessionStarted { .. }
        | EventKind::UserMessage { .. }
        | EventKind::ToolCall { .. }
        | EventKind::ToolResult { .. }
        | EventKind::Usage { .. }
        | EventKind::Status { .. }
        | EventKind::Plan { .. }
        | EventKind::Subtask { .. }
        | EventKind::Hook { .. }
        | EventKind::Retry { .. }
        | EventKind::RateLimit { .. }
        | EventKind::PermissionDenied { .. }
        | EventKind::Final { .. }
        | EventKind::Protocol { .. }
        | EventKind::Unknown { .. } => 256,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aicli_providers::{AgentEvent, CanonicalUsage, CostSource, EventKind};

    fn agent(task: &str, text: &str) -> BatchEvent {
        BatchEvent::Agent {
            task_id: Arc::from(task),
            event: AgentEvent::new(
                EventKind::AssistantText {
                    text: text.to_owned(),
                    delta: false,
                },
                Arc::from(text),
            ),
        }
    }

    fn spend(task: &str, usd: f64) -> BatchEvent {
        BatchEvent::TaskSpend {
            task_id: Arc::from(task),
            usage: CanonicalUsage::default(),
            cost_usd: Some(usd),
            cost_source: CostSource::Estimated,
        }
    }

    #[tokio::test]
    async fn a_slow_subscriber_loses_agent_events_keeps_lifecycle_and_latest_spend() {
        let (tx, mut rx) = channel(4096);
        let line = "x".repeat(1000);
        tx.send(BatchEvent::TaskStarted {
            task_id: Arc::from("t"),
            provider: Arc::from("p"),
            attempt: 1,
        });
        for i in 0..1000 {
            tx.send(agent("t", &line));
            tx.send(spend("t", i as f64));
        }
        tx.send(BatchEvent::BudgetSpent {
            spent_usd: 1.0,
            budget_usd: 1.0,
        });
        drop(tx);
        let mut got = Vec::new();
        let mut lagged = 0;
        loop {
            match rx.recv().await {
                Ok(e) => got.push(e),
                Err(RecvError::Lagged(n)) => lagged += n,
                Err(RecvError::Closed) => break,
            }
        }
        let agents = got
            .iter()
            .filter(|e| matches!(e, BatchEvent::Agent { .. }))
            .count();
        assert!((1..5).contains(&agents), "{agents} agent events kept");
        assert_eq!(lagged as usize + agents, 1000);
        let spends: Vec<f64> = got
            .iter()
            .filter_map(|e| match e {
                BatchEvent::TaskSpend { cost_usd, .. } => *cost_usd,
                _ => None,
            })
            .collect();
        assert_eq!(spends, [999.0], "coalesced into the latest figure");
        assert!(matches!(got[0], BatchEvent::TaskStarted { .. }));
        assert!(matches!(got.last(), Some(BatchEvent::BudgetSpent { .. })));
    }

    #[tokio::test]
    async fn a_subscriber_that_keeps_up_gets_everything_and_none_means_nothing_is_kept() {
        let tx = LiveSender::new(4096);
        // Nobody listens: nothing is queued for later.
        tx.send(agent("t", "early"));
        let mut rx = tx.subscribe();
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while let Ok(e) = rx.recv().await {
                if let BatchEvent::Agent { event, .. } = e {
                    assert_ne!(&*event.raw, "early");
                    n += 1;
                }
            }
            n
        });
        for _ in 0..200 {
            tx.send(agent("t", "y"));
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(tx);
        assert_eq!(reader.await.unwrap(), 200);
    }
}
