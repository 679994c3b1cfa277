//! The engine's side of a two-way run (an ACP agent; see
//! [`aicli_providers::CommandSpec::stdin_open`]): after every line, and after the
//! decoder is connected, what the decoder made for the CLI's stdin is recorded and
//! written, in order; the decoder's deadlines become timers; a cancel asks the CLI to
//! stop before its process group is killed; stdin is closed once the decoder is
//! finished. One-way runs have no conversation.

use std::time::Duration;

use aicli_providers::{AgentEvent, Decoder};
use tokio::time::Instant;

use crate::proc::stdin::StdinWriter;

/// A two-way run's stdin and timers.
#[derive(Debug)]
pub struct Conversation {
    writer: StdinWriter,
    /// The decoder's current wait (its id) and when it is overdue.
    wait: Option<(u64, Instant)>,
    /// When a cancel (or the budget) asked the CLI to stop: how long it has to end its
    /// turn.
    stopping: Option<Instant>,
}

impl Conversation {
    /// A conversation over `writer`.
    pub fn new(writer: StdinWriter) -> Conversation {
        Conversation {
            writer,
            wait: None,
            stopping: None,
        }
    }

    /// Writes what `decoder` made since the last call, re-arms its deadline when it
    /// waits for something new, and closes stdin once it is finished.
    pub fn pump(&mut self, decoder: &mut dyn Decoder) {
        for m in decoder.take_stdin() {
            self.writer.send(&m);
        }
        self.wait = match (decoder.awaiting(), self.wait) {
            (None, _) => None,
            (Some((id, _)), Some((armed, at))) if id == armed => Some((armed, at)),
            (Some((id, within)), _) => Some((id, Instant::now() + within)),
        };
        if decoder.finished() && !self.writer.is_closed() {
            self.writer.close();
        }
    }

    /// When the decoder's current wait is overdue.
    pub fn deadline(&self) -> Option<Instant> {
        self.wait.map(|(_, at)| at)
    }

    /// The wait passed its deadline: the decoder's events about it (then pumped).
    pub fn overdue(&mut self, decoder: &mut dyn Decoder) -> Vec<AgentEvent> {
        let Some((id, _)) = self.wait.take() else {
            return Vec::new();
        };
        let events = decoder.overdue(id);
        self.pump(decoder);
        // A decoder that keeps waiting on the same id is not asked again.
        if self.wait.map(|(w, _)| w) == Some(id) {
            self.wait = None;
        }
        events
    }

    /// A cancel (or a budget stop): `true` when the decoder asked the CLI to stop and it has `grace` to
    /// end its turn ([`Conversation::stop_deadline`]); `false`: stop at once.
    pub fn stop(&mut self, decoder: &mut dyn Decoder, grace: Duration) -> bool {
        if self.stopping.is_some() {
            return true;
        }
        if !decoder.stop() {
            return false;
        }
        self.pump(decoder);
        self.stopping = Some(Instant::now() + grace);
        true
    }

    /// Until when the CLI may take to end its turn after a cancel or a budget stop.
    pub fn stop_deadline(&self) -> Option<Instant> {
        self.stopping
    }

    /// Closes the CLI's stdin (the run is over).
    pub fn close(&mut self) {
        self.writer.close();
    }
}

/// Sleeps until `at`, or forever when there is none.
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
