//! The live printer of `aicli run` and `aicli answer`: each normalized event as a line
//! (text deltas joined on one line, whatever the CLI: Gemini streams its answer in
//! chunks), or as NDJSON with `--json`, the result as the last line.

use std::time::Duration;

use crate::BatchEvent;
use crate::providers::{AgentEvent, EventKind, SessionResult};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::countdown::Countdown;
use super::{out, output};

/// Prints events as they come; remembers whether the last one was an unfinished delta.
#[derive(Debug, Default)]
pub struct EventPrinter {
    json: bool,
    last_delta: bool,
    /// A whole assistant text not printed yet: when the next event is the fatal error
    /// it spelled (Claude's "Not logged in · Please run /login" comes as both), neither
    /// is printed, and the summary says it once.
    held: Option<String>,
}

impl EventPrinter {
    /// A printer of text (`json` false) or NDJSON.
    pub fn new(json: bool) -> EventPrinter {
        EventPrinter {
            json,
            last_delta: false,
            held: None,
        }
    }

    /// Prints one event; `false` once stdout is closed.
    pub fn event(&mut self, event: &AgentEvent) -> bool {
        if self.json {
            return match serde_json::to_string(event) {
                Ok(line) => outln!("{line}"),
                Err(_) => true,
            };
        }
        if let Some(held) = self.held.take() {
            let spelled = matches!(
                &event.kind,
                EventKind::Error { fatal: true, message, .. } if message.trim() == held.trim()
            );
            if spelled {
                return !out::closed();
            }
            if !self.line(&held, false) {
                return false;
            }
        }
        if let EventKind::AssistantText { text, delta: false } = &event.kind {
            self.held = Some(text.clone());
            return !out::closed();
        }
        // A fatal error is the run's end: the summary says it.
        if let EventKind::Error { fatal: true, .. } = &event.kind {
            return !out::closed();
        }
        let is_delta = matches!(&event.kind, EventKind::AssistantText { delta: true, .. });
        let Some(line) = output::event_line(event) else {
            return !out::closed();
        };
        self.line(&line, is_delta)
    }

    /// Prints one line (a delta continues the current one).
    fn line(&mut self, line: &str, is_delta: bool) -> bool {
        let ok = if is_delta {
            out::write_str(line)
        } else if self.last_delta {
            outln!("\n{line}")
        } else {
            outln!("{line}")
        };
        self.last_delta = is_delta;
        ok
    }

    /// Ends an unfinished line of deltas (printing a held text first).
    pub fn finish(&mut self) {
        if let Some(held) = self.held.take() {
            self.line(&held, false);
        }
        if self.last_delta && !self.json {
            outln!();
        }
        self.last_delta = false;
    }

    /// Prints a run's result: the summary (hints name `batch_id`; `elapsed` is the
    /// command's time so far), or its JSON as the last NDJSON line (with `"type":
    /// "session_result"`).
    pub fn result(
        &mut self,
        r: &SessionResult,
        batch_id: Option<&str>,
        elapsed: Duration,
    ) -> anyhow::Result<()> {
        self.finish();
        if self.json {
            let mut v = serde_json::to_value(r)?;
            if let Some(m) = v.as_object_mut() {
                m.insert("type".into(), json!("session_result"));
            }
            outln!("{v}");
        } else {
            outln!("{}", output::summary(r, batch_id, Some(elapsed)));
        }
        Ok(())
    }
}

/// Prints the agent events of `rx` until it closes. When stdout closes (the reader went
/// away), `cancel` is cancelled: nobody can see the run any more, its records are kept.
/// A wait the engine announces ([`Countdown`]) is shown on stderr while it lasts.
///
/// It prints on a thread of its own: a slow reader of stdout blocks only that thread,
/// never the runtime that reads the CLIs' streams. Events it could not keep up with are
/// dropped by the live channel; how many is said once, at the end.
pub fn spawn(
    mut rx: crate::LiveReceiver,
    json: bool,
    cancel: CancellationToken,
) -> JoinHandle<EventPrinter> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut printer = EventPrinter::new(json);
        let mut dropped = 0u64;
        let mut waiting: Option<Countdown> = None;
        loop {
            let next = match &waiting {
                Some(w) => {
                    let redraw = w.tick();
                    runtime.block_on(async {
                        tokio::select! {
                            ev = rx.recv() => Some(ev),
                            _ = tokio::time::sleep(redraw) => None,
                        }
                    })
                }
                None => Some(runtime.block_on(rx.recv())),
            };
            let ev = match next {
                None => continue,
                Some(Ok(e)) => e,
                Some(Err(crate::live::RecvError::Lagged(n))) => {
                    dropped += n;
                    continue;
                }
                Some(Err(crate::live::RecvError::Closed)) => break,
            };
            let BatchEvent::Agent { event, .. } = ev else {
                continue;
            };
            // The session goes on: the wait is over.
            if let Some(w) = waiting.take() {
                w.finish();
            }
            if let EventKind::Status { status } = &event.kind {
                waiting = Countdown::start(status);
            }
            if !printer.event(&event) && out::closed() {
                cancel.cancel();
            }
        }
        if let Some(w) = waiting.take() {
            w.finish();
        }
        if dropped > 0 {
            eprintln!(
                "aicli: {dropped} events were not shown (the output was read too slowly); the run record has them all"
            );
        }
        printer
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_that_spells_the_fatal_error_is_not_printed_and_other_text_is() {
        let text = |t: &str| {
            AgentEvent::synthetic(EventKind::AssistantText {
                text: t.into(),
                delta: false,
            })
        };
        let fatal = |m: &str| {
            AgentEvent::synthetic(EventKind::Error {
                error_kind: crate::providers::ErrorKind::Auth,
                message: m.into(),
                fatal: true,
                http_status: None,
            })
        };
        let mut p = EventPrinter::new(false);
        assert!(p.event(&text("Not logged in")));
        assert_eq!(p.held.as_deref(), Some("Not logged in"));
        assert!(p.event(&fatal("Not logged in")));
        assert_eq!(p.held, None, "dropped with its error: the summary says it");
        assert!(p.event(&text("A real answer")));
        assert_eq!(p.held.as_deref(), Some("A real answer"));
        p.finish();
        assert_eq!(p.held, None, "printed at the end");
    }
}
