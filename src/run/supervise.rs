//! Supervising a started run: its lines are decoded once as they arrive and published;
//! the run ends at the final event (after a short grace), EOF, the CLI's exit (its
//! pipes closed, or a short grace when something of its tree holds them), the wall
//! clock, the idle watchdog, the budget or a cancel — whichever comes first. However it
//! ends, the run's whole process tree is shut down and every line still in flight is
//! read before the result is built.

use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{AgentEvent, Decoder, ExitStatus, Line};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::conversation::{Conversation, sleep_until};
use super::guards::RunGuards;
use super::launch::Launch;
use super::publish::Publisher;
use super::verdict::{self, EndReason, Ending};
use super::{Ended, NotStarted, RunIo, RunLimits, RunSpec};
use crate::budget::Reservation;
use crate::proc::lines::{LineReceiver, StdoutLine};
use crate::runner::RunHandle;

/// How long the last lines may take after the CLI exited while its stdout stays open.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Supervises the run in `guards` to its end (see the module docs).
pub(super) async fn supervise(
    spec: &RunSpec,
    io: &RunIo,
    launch: &Launch,
    guards: &mut RunGuards,
    injected: Option<UnboundedReceiver<AgentEvent>>,
) -> Result<Ended, NotStarted> {
    let provider = spec.provider.clone();
    let task_id: Arc<str> = Arc::from(spec.task.id.as_str());
    let publisher = Publisher::new(
        &io.live,
        task_id,
        &provider.config().prices,
        spec.parse_ctx.model.clone(),
        io.budget.clone(),
        spec.place.record_dir.as_deref(),
    );
    let mut w = Watch::new(spec, provider.decoder(&spec.parse_ctx), publisher, injected);
    for notice in &launch.cmd.notices {
        w.publisher
            .injected(AgentEvent::synthetic(aicli_providers::EventKind::Log {
                level: aicli_providers::LogLevel::Warning,
                message: notice.clone(),
                source: "aicli".to_owned(),
            }));
    }
    let handle = guards.process()?;
    if launch.cmd.stdin_open {
        // A two-way CLI is spoken to: its stdin stays open for what the decoder says.
        let Some(writer) = handle.take_stdin() else {
            return Err(NotStarted::new(
                aicli_providers::ErrorKind::BadRequest,
                format!(
                    "provider {} speaks to its CLI on stdin (an ACP agent), which this runner cannot keep open",
                    provider.name()
                ),
            ));
        };
        let mut c = Conversation::new(writer);
        let mut evs = w.decoder.connect(&launch.context(spec));
        w.publisher.line(&mut evs);
        c.pump(w.decoder.as_mut());
        w.conversation = Some(c);
    }
    let mut lines = handle.take_lines();
    let reason = w.watch(handle.as_mut(), &mut lines, io).await;
    let reason = w.after_eof(reason, handle.as_mut(), io).await;
    // However it ended: no process of the run may be left.
    let code = handle.shutdown(spec.limits.kill_grace).await;
    if w.exit_code.is_none() {
        w.exit_code = code;
    }
    w.drain(handle.as_mut(), lines).await;
    let stderr = handle.stderr().text();
    Ok(w.finish(reason, &stderr, io.budget.as_ref()))
}

/// A supervised run's state.
struct Watch<'a> {
    limits: &'a RunLimits,
    decoder: Box<dyn Decoder>,
    publisher: Publisher<'a>,
    conversation: Option<Conversation>,
    injected: Option<UnboundedReceiver<AgentEvent>>,
    /// The events of the line at hand (one buffer for the run).
    evs: Vec<AgentEvent>,
    wall_deadline: Instant,
    idle_deadline: Instant,
    /// After the final event, how long the CLI may take to exit.
    final_deadline: Option<Instant>,
    /// The CLI exited while something of its tree still holds its stdout open: a short
    /// grace for the last lines, then the run is over (not a wait for the watchdog).
    pipe_deadline: Option<Instant>,
    exited: bool,
    exit_code: Option<i32>,
    /// Why a two-way CLI was asked to end its turn (a cancel, the budget): the run ends
    /// for that reason once it has, or once the kill grace is over.
    stop_why: Option<EndReason>,
    #[cfg(feature = "test-helpers")]
    fault: Option<(crate::testing::Fault, usize)>,
}

impl<'a> Watch<'a> {
    fn new(
        spec: &'a RunSpec,
        decoder: Box<dyn Decoder>,
        publisher: Publisher<'a>,
        injected: Option<UnboundedReceiver<AgentEvent>>,
    ) -> Watch<'a> {
        let start = Instant::now();
        Watch {
            limits: &spec.limits,
            decoder,
            publisher,
            conversation: None,
            injected,
            evs: Vec::new(),
            wall_deadline: start + spec.limits.timeout,
            idle_deadline: start + spec.limits.idle_timeout,
            final_deadline: None,
            pipe_deadline: None,
            exited: false,
            exit_code: None,
            stop_why: None,
            #[cfg(feature = "test-helpers")]
            fault: spec
                .fault
                .clone()
                .filter(|f| f.applies_to(&spec.task.id))
                .map(|f| (f, 0)),
        }
    }

    /// The select loop: until a line, a deadline, the exit, the budget or a cancel ends
    /// the run.
    async fn watch(
        &mut self,
        handle: &mut dyn RunHandle,
        lines: &mut LineReceiver,
        io: &RunIo,
    ) -> EndReason {
        loop {
            let pipe_sleep = sleep_until(self.pipe_deadline);
            let final_sleep = sleep_until(self.final_deadline);
            let wait_sleep =
                sleep_until(self.conversation.as_ref().and_then(Conversation::deadline));
            let stop_sleep = sleep_until(
                self.conversation
                    .as_ref()
                    .and_then(Conversation::stop_deadline),
            );
            let injected = recv_injected(&mut self.injected);
            let asking = self.stop_why.is_none();
            tokio::select! {
                biased;
                _ = io.cancel.cancelled(), if asking => {
                    if let Some(r) = self.ask_to_stop(EndReason::Cancelled) { return r; }
                }
                _ = budget_stop(&io.budget), if asking => {
                    if let Some(r) = self.ask_to_stop(EndReason::Budget) { return r; }
                }
                _ = stop_sleep => return self.stop_why.unwrap_or(EndReason::Cancelled),
                line = lines.recv() => match line {
                    Some(line) => if let Some(r) = self.on_line(line) { return r; },
                    None => return EndReason::Eof,
                },
                _ = wait_sleep => self.on_overdue(),
                code = handle.wait(), if !self.exited => {
                    self.exited = true;
                    self.exit_code = code;
                    self.pipe_deadline = Some(Instant::now() + PIPE_GRACE);
                }
                _ = pipe_sleep => return EndReason::Exited,
                ev = injected => match ev {
                    Some(ev) => self.publisher.injected(ev),
                    None => self.injected = None,
                },
                _ = final_sleep => return EndReason::Final,
                _ = tokio::time::sleep_until(self.wall_deadline) => return EndReason::WallTimeout,
                _ = tokio::time::sleep_until(self.idle_deadline) => return EndReason::IdleTimeout,
            }
        }
    }

    /// A line of the CLI: decoded, published, the conversation pumped; the run's end
    /// when it says so.
    fn on_line(&mut self, line: StdoutLine) -> Option<EndReason> {
        self.idle_deadline = Instant::now() + self.limits.idle_timeout;
        self.decode(line);
        #[cfg(feature = "test-helpers")]
        if let Some((f, seen)) = self.fault.as_mut() {
            *seen += 1;
            f.after_line(*seen);
        }
        if let Some(c) = self.conversation.as_mut() {
            c.pump(self.decoder.as_mut());
        }
        if let Some(why) = self.stop_why
            && self.decoder.finished()
        {
            return Some(why);
        }
        // The CLI said its last word: a short grace to exit. It may take it back (a
        // background agent of Claude's goes on): then wait again.
        if !self.decoder.finished() {
            self.final_deadline = None;
        } else if self.final_deadline.is_none() {
            self.final_deadline = Some(Instant::now() + self.limits.final_grace);
        }
        None
    }

    fn decode(&mut self, line: StdoutLine) {
        match &line {
            StdoutLine::Line(bytes) => self.decoder.decode(Line::Bytes(bytes), &mut self.evs),
            StdoutLine::Overlong { len, prefix } => self.decoder.decode(
                Line::Overlong {
                    len: *len,
                    prefix,
                    cap: self.limits.line_cap,
                },
                &mut self.evs,
            ),
        }
        self.publisher.line(&mut self.evs);
    }

    /// The decoder's wait (a two-way run's pending answer) is overdue.
    fn on_overdue(&mut self) {
        if let Some(c) = self.conversation.as_mut() {
            let mut evs = c.overdue(self.decoder.as_mut());
            self.publisher.line(&mut evs);
        }
        if self.decoder.finished() && self.final_deadline.is_none() {
            self.final_deadline = Some(Instant::now() + self.limits.final_grace);
        }
    }

    /// A cancel or a budget stop: a two-way CLI is asked to end its turn first (ACP
    /// `session/cancel`) and has the kill grace to do so; otherwise the run ends now.
    fn ask_to_stop(&mut self, why: EndReason) -> Option<EndReason> {
        let asked = self
            .conversation
            .as_mut()
            .is_some_and(|c| c.stop(self.decoder.as_mut(), self.limits.kill_grace));
        if asked {
            self.stop_why = Some(why);
            None
        } else {
            Some(why)
        }
    }

    /// After EOF the CLI normally exits at once: give it until the deadlines (after a
    /// final event, the final grace).
    async fn after_eof(
        &mut self,
        reason: EndReason,
        handle: &mut dyn RunHandle,
        io: &RunIo,
    ) -> EndReason {
        if reason != EndReason::Eof || self.exited {
            return reason;
        }
        let after_final = sleep_until(self.final_deadline);
        tokio::select! {
            biased;
            _ = io.cancel.cancelled() => EndReason::Cancelled,
            _ = budget_stop(&io.budget) => EndReason::Budget,
            code = handle.wait() => {
                self.exit_code = code;
                reason
            }
            _ = after_final => EndReason::Final,
            _ = tokio::time::sleep_until(self.wall_deadline) => EndReason::WallTimeout,
            _ = tokio::time::sleep_until(self.idle_deadline) => EndReason::IdleTimeout,
        }
    }

    /// Lines still in flight are taken until the reader is done (it may be waiting for
    /// room in the channel), so the record is complete when the attempt's end offsets
    /// are taken; then the events aicli's server made last.
    async fn drain(&mut self, handle: &mut dyn RunHandle, mut lines: LineReceiver) {
        if let Some(c) = self.conversation.as_mut() {
            c.close();
        }
        self.conversation = None;
        let rest = async {
            while let Some(line) = lines.recv().await {
                self.decode(line);
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), rest)
            .await
            .is_err()
        {
            tracing::warn!("output pipes still open after shutdown; giving up on them");
        }
        drop(lines);
        let _ = tokio::time::timeout(Duration::from_secs(2), handle.drain()).await;
        if let Some(rx) = self.injected.as_mut() {
            while let Ok(ev) = rx.try_recv() {
                self.publisher.injected(ev);
            }
        }
        self.publisher.sync_log().await;
    }

    /// The run's result: the decoder's fold, how the run ended, the question it asked.
    fn finish(
        mut self,
        reason: EndReason,
        stderr: &str,
        budget: Option<&Arc<Reservation>>,
    ) -> Ended {
        let mut result = self
            .decoder
            .finish(stderr, ExitStatus::of_wait(self.exit_code));
        let budget_reason = budget.and_then(|b| b.stop_reason());
        verdict::apply(
            &mut result,
            Ending {
                reason,
                saw_final: self.publisher.saw_final,
                asked_to_stop_for_budget: self.stop_why == Some(EndReason::Budget),
                exit_code: self.exit_code,
                limits: self.limits,
                budget_reason: budget_reason.as_deref(),
            },
        );
        if let Some(q) = self.publisher.last_question()
            && reason != EndReason::Cancelled
        {
            result.block(q);
        }
        self.publisher.cost_at_least_streamed(&mut result);
        Ended {
            result,
            reset_at: self.publisher.reset_at,
            streamed: self.publisher.spend,
        }
    }
}

/// The next event aicli's server made for the run; never, when there is no server.
async fn recv_injected(rx: &mut Option<UnboundedReceiver<AgentEvent>>) -> Option<AgentEvent> {
    match rx.as_mut() {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the run's reservation says stop; never without a budget.
async fn budget_stop(budget: &Option<Arc<Reservation>>) {
    match budget {
        Some(b) => b.stopped().await,
        None => std::future::pending().await,
    }
}
