//! What a run tells the world while it runs: each normalized event to the live stream,
//! its spend (usage increments priced at the config's prices) to the live stream and
//! its budget reservation, the rate limits and questions it announced, and the events
//! aicli's MCP server made for it (logs, questions), which go to the record's
//! `aicli-events.ndjson` too.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use aicli_providers::{
    AgentEvent, EventKind, LiveSpend, PendingQuestion, PriceTable, SessionResult,
};

use crate::budget::Reservation;
use crate::live::{BatchEvent, LiveSender};

/// The question an event asks a human, if it asks one.
pub(crate) fn question_of(kind: &EventKind) -> Option<PendingQuestion> {
    match kind {
        EventKind::Question { question, options } => Some(PendingQuestion {
            question: question.clone(),
            options: options.clone(),
            asked_at: crate::util::now_rfc3339(),
        }),
        _ => None,
    }
}

/// A run's publisher, and the facts it gathered on the way.
#[derive(Debug)]
pub(super) struct Publisher<'a> {
    live: &'a LiveSender,
    task_id: Arc<str>,
    prices: &'a PriceTable,
    budget: Option<Arc<Reservation>>,
    /// What the stream says the run spent.
    pub spend: LiveSpend,
    /// The model the run says it uses (its session start), else the one it asked for.
    run_model: Option<String>,
    /// The CLI said its last word.
    pub saw_final: bool,
    /// The latest reset time (Unix seconds) a rate-limit event announced.
    pub reset_at: Option<i64>,
    /// Questions asked, oldest first: by the decoder itself (an ACP permission request)
    /// and through aicli's MCP server.
    questions: Vec<PendingQuestion>,
    /// Questions the decoder asked (they count after the server's).
    asked: Vec<PendingQuestion>,
    log: AicliLog,
}

impl<'a> Publisher<'a> {
    pub(super) fn new(
        live: &'a LiveSender,
        task_id: Arc<str>,
        prices: &'a PriceTable,
        model: Option<String>,
        budget: Option<Arc<Reservation>>,
        record_dir: Option<&std::path::Path>,
    ) -> Publisher<'a> {
        Publisher {
            live,
            task_id,
            prices,
            budget,
            spend: LiveSpend::default(),
            run_model: model,
            saw_final: false,
            reset_at: None,
            questions: Vec::new(),
            asked: Vec::new(),
            log: AicliLog {
                path: record_dir.map(|d| d.join(crate::record::files::AICLI_EVENTS)),
                file: None,
            },
        }
    }

    /// Publishes the events of one line (draining `evs`): facts noted, events sent, the
    /// spend sent once for the line when it changed.
    pub(super) fn line(&mut self, evs: &mut Vec<AgentEvent>) {
        let mut spent = false;
        for ev in evs.drain(..) {
            spent |= self.note(&ev.kind);
            self.live.send(BatchEvent::Agent {
                task_id: self.task_id.clone(),
                event: ev,
            });
        }
        if spent {
            if let Some(b) = &self.budget {
                b.streamed(self.spend.priced_usd());
            }
            let cost = self.spend.cost();
            self.live.send(BatchEvent::TaskSpend {
                task_id: self.task_id.clone(),
                usage: self.spend.usage(),
                cost_usd: cost.cost_usd,
                cost_source: cost.cost_source,
            });
        }
    }

    /// Notes what an event of the CLI says; `true` when it spent.
    fn note(&mut self, kind: &EventKind) -> bool {
        match kind {
            EventKind::Final { .. } => self.saw_final = true,
            EventKind::SessionStarted { model: Some(m), .. } => self.run_model = Some(m.clone()),
            EventKind::Usage { usage, model } => {
                self.spend.add(
                    self.prices,
                    model.as_deref(),
                    self.run_model.as_deref(),
                    usage,
                );
                return true;
            }
            EventKind::RateLimit {
                resets_at: Some(t), ..
            } => self.reset_at = Some(self.reset_at.map_or(*t, |r| r.max(*t))),
            EventKind::Question { .. } => self.asked.extend(question_of(kind)),
            _ => {}
        }
        false
    }

    /// An event aicli's MCP server made for this run: recorded, a question noted,
    /// published.
    pub(super) fn injected(&mut self, ev: AgentEvent) {
        self.log.append(&ev);
        self.questions.extend(question_of(&ev.kind));
        self.live.send(BatchEvent::Agent {
            task_id: self.task_id.clone(),
            event: ev,
        });
    }

    /// The question the run ends blocked on, if it asked one: the last asked (the
    /// server's first, then the decoder's).
    pub(super) fn last_question(&mut self) -> Option<PendingQuestion> {
        self.questions.append(&mut self.asked);
        self.questions.pop()
    }

    /// Flushes aicli's event log to disk (off the async workers).
    pub(super) async fn sync_log(&mut self) {
        crate::proc::lines::sync_off_thread(self.log.file.take()).await;
    }

    /// A run cut off before its last line (cancelled, timed out, stopped by the budget,
    /// crashed) costs at least what its stream showed: when the result has no figure
    /// the CLI reported and its own is lower (or none), it gets the streamed estimate.
    /// Never zero for a run whose stream reported usage.
    pub(super) fn cost_at_least_streamed(&self, result: &mut SessionResult) {
        use aicli_providers::{Cost, CostSource};
        if self.saw_final || self.spend.usage().is_zero() || self.spend.has_unpriced() {
            return;
        }
        let streamed = self.spend.priced_usd();
        let lower = match (result.cost_source, result.cost_usd) {
            (CostSource::Reported, Some(_)) => false,
            (CostSource::Estimated | CostSource::Unknown, Some(c)) => c < streamed,
            (CostSource::Reported | CostSource::Estimated | CostSource::Unknown, None) => true,
        };
        if lower {
            result.set_cost(Cost::estimated(Some(streamed)));
        }
    }
}

/// `aicli-events.ndjson` of a run, opened (created) with the first event aicli makes.
#[derive(Debug)]
struct AicliLog {
    path: Option<PathBuf>,
    file: Option<File>,
}

impl AicliLog {
    fn append(&mut self, ev: &AgentEvent) {
        if self.file.is_none()
            && let Some(p) = &self.path
        {
            self.file = crate::util::open_private_append(p)
                .map_err(|e| tracing::warn!(file = %p.display(), error = %e, "cannot open the aicli event log"))
                .ok();
        }
        if let Some(f) = self.file.as_mut()
            && let Ok(mut line) = serde_json::to_vec(ev)
        {
            line.push(b'\n');
            let _ = f.write_all(&line);
        }
    }
}
