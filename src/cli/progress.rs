//! The live progress display of `aicli batch` (and `resume`, `demo`): a bar for the
//! batch, drawn at once, and one line per running task (provider, elapsed time, tokens
//! and cost as the stream reports them, last tool). Hidden when stderr is not a
//! terminal. While it draws, aicli's own log lines go through it
//! ([`LogWriter`]), so they never tear the bars.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::BatchEvent;
use crate::providers::{CanonicalUsage, CostSource, EventKind};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;

use super::output;

/// The display being drawn, for [`LogWriter`].
static ACTIVE: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// What the display needs besides the events.
#[derive(Debug, Clone, Default)]
pub struct DisplayOptions {
    /// Tasks in the batch (the bar's length).
    pub n_tasks: usize,
    /// Who runs them, e.g. `claude ×2, gemini ×1`.
    pub providers: String,
    /// Cancelled on Ctrl-C: the display says so (a plain `eprintln!` would tear it).
    pub cancel: CancellationToken,
}

impl DisplayOptions {
    /// Options for `n_tasks` tasks with these providers (one entry per task).
    pub fn new(task_providers: &[String], cancel: CancellationToken) -> DisplayOptions {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for p in task_providers {
            match counts.iter_mut().find(|(n, _)| n == p) {
                Some((_, c)) => *c += 1,
                None => counts.push((p.clone(), 1)),
            }
        }
        DisplayOptions {
            n_tasks: task_providers.len(),
            providers: counts
                .iter()
                .map(|(p, c)| format!("{p} ×{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            cancel,
        }
    }
}

struct Line {
    bar: ProgressBar,
    provider: Arc<str>,
    spend: Spend,
    last_tool: String,
}

/// A running task's tokens and cost as its stream reports them: the engine's running
/// figure ([`BatchEvent::TaskSpend`]: the usage increments priced at the config's
/// prices), until the CLI reports its own cost on its final event.
#[derive(Debug, Clone, Default, PartialEq)]
struct Spend {
    usage: CanonicalUsage,
    /// The engine's estimate so far (`None`: a model without a price).
    estimate: Option<f64>,
    /// The CLI's own figure, once it gave one.
    reported: Option<f64>,
}

impl Spend {
    /// USD to add to the batch's running total, if known.
    fn usd(&self) -> Option<f64> {
        self.reported.or(self.estimate)
    }

    /// `in 1200 · out 40 · cache 300 · ~$0.0123 estimated`.
    fn text(&self) -> String {
        let cost = match (self.reported, self.estimate) {
            (Some(c), _) => format!("${c:.4}"),
            (None, _) if self.usage.is_zero() => "$0".to_owned(),
            (None, Some(c)) => format!("~${c:.4} estimated"),
            (None, None) => "$? (no price)".to_owned(),
        };
        format!("{} · {cost}", output::usage_short(&self.usage))
    }
}

impl Line {
    fn render(&self) {
        self.bar.set_message(format!(
            "{} · {} · {}",
            self.provider,
            self.spend.text(),
            if self.last_tool.is_empty() {
                "-"
            } else {
                &self.last_tool
            }
        ));
    }
}

/// While the display draws on a terminal, the terminal does not echo control characters
/// (`^C`): the echo lands inside the drawn region, which the display does not know, and
/// left a stale task line on screen after Ctrl-C. Restored on drop.
struct NoControlEcho(Option<nix::sys::termios::Termios>);

impl NoControlEcho {
    fn new() -> NoControlEcho {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        use std::io::IsTerminal;
        let stdin = std::io::stdin();
        if !stdin.is_terminal() || !std::io::stderr().is_terminal() {
            return NoControlEcho(None);
        }
        let Ok(saved) = tcgetattr(&stdin) else {
            return NoControlEcho(None);
        };
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHOCTL);
        match tcsetattr(&stdin, SetArg::TCSANOW, &quiet) {
            Ok(()) => NoControlEcho(Some(saved)),
            Err(_) => NoControlEcho(None),
        }
    }
}

impl Drop for NoControlEcho {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take() {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                &saved,
            );
        }
    }
}

/// Draws the display until the channel closes.
pub async fn run(mut rx: crate::LiveReceiver, opts: DisplayOptions) {
    let _echo = NoControlEcho::new();
    let mut display = Display::new(&opts);
    let mut said_interrupted = false;
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = opts.cancel.cancelled(), if !said_interrupted => {
                said_interrupted = true;
                let _ = display.mp.println("aicli: interrupted; stopping the running tasks (their records are kept)…");
                continue;
            }
        };
        match ev {
            Ok(e) => display.event(e),
            Err(crate::live::RecvError::Lagged(_)) => continue,
            Err(crate::live::RecvError::Closed) => break,
        }
    }
    display.close();
}

/// The bars being drawn: the batch's, and one per running task.
struct Display {
    mp: MultiProgress,
    main: ProgressBar,
    task_style: ProgressStyle,
    lines: HashMap<Arc<str>, Line>,
    /// What finished tasks cost.
    spent: f64,
    /// Who runs the tasks (see [`DisplayOptions::providers`]).
    providers: String,
}

impl Display {
    /// The batch's bar, drawn at once (not when the first task ends).
    fn new(opts: &DisplayOptions) -> Display {
        let mp = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8));
        if let Ok(mut a) = ACTIVE.lock() {
            *a = Some(mp.clone());
        }
        let main = mp.add(ProgressBar::new(opts.n_tasks as u64));
        main.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} tasks · {elapsed} · {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        main.enable_steady_tick(Duration::from_millis(250));
        main.tick();
        let task_style =
            ProgressStyle::with_template("  {spinner} {prefix:<20} {elapsed:>5} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let d = Display {
            mp,
            main,
            task_style,
            lines: HashMap::new(),
            spent: 0.0,
            providers: opts.providers.clone(),
        };
        d.main.set_message(d.summary());
        d
    }

    /// What finished tasks cost, and what the running ones have spent so far.
    fn summary(&self) -> String {
        let running: f64 = self.lines.values().filter_map(|l| l.spend.usd()).sum();
        if running > 0.0 {
            format!(
                "{} · ${:.4} spent · ~${running:.4} running",
                self.providers, self.spent
            )
        } else {
            format!("{} · ${:.4} spent", self.providers, self.spent)
        }
    }

    /// Removes a task's line, if it has one.
    fn drop_line(&mut self, task_id: &str) {
        if let Some(l) = self.lines.remove(task_id) {
            l.bar.finish_and_clear();
            self.mp.remove(&l.bar);
        }
    }

    fn event(&mut self, ev: BatchEvent) {
        match ev {
            BatchEvent::TaskStarted {
                task_id,
                provider,
                attempt,
            } => self.started(task_id, provider, attempt),
            BatchEvent::Agent { task_id, event } => self.agent(&task_id, &event.kind),
            BatchEvent::Backoff {
                task_id,
                delay_ms,
                parallelism,
                reason,
                ..
            } => {
                self.drop_line(&task_id);
                let _ = self.mp.println(format!(
                    "aicli: {task_id}: backing off {:.1}s (parallelism {parallelism}): {reason}",
                    delay_ms as f64 / 1000.0
                ));
            }
            BatchEvent::Parallelism {
                account,
                limit,
                max,
            } => {
                let _ = self.mp.println(format!(
                    "aicli: {account} account: parallelism {limit} of {max}"
                ));
            }
            BatchEvent::Parked {
                task_id, status, ..
            } => {
                self.drop_line(&task_id);
                let _ = self.mp.println(format!("⏸ {task_id} {status}"));
            }
            BatchEvent::TaskBlocked { task_id, question } => {
                let _ = self
                    .mp
                    .println(format!("⏸ {task_id} asks: {}", question.question));
            }
            BatchEvent::TaskFinished { task_id, result } => {
                self.drop_line(&task_id);
                self.spent += result.cost_usd.unwrap_or(0.0);
                self.main.inc(1);
                self.main.set_message(self.summary());
            }
            BatchEvent::TaskSpend {
                task_id,
                usage,
                cost_usd,
                cost_source,
            } => {
                let Some(line) = self.lines.get_mut(&task_id) else {
                    return;
                };
                line.spend.usage = usage;
                line.spend.estimate = match cost_source {
                    CostSource::Unknown => None,
                    CostSource::Estimated | CostSource::Reported => cost_usd,
                };
                line.render();
                self.main.set_message(self.summary());
            }
            BatchEvent::BudgetSpent {
                spent_usd,
                budget_usd,
            } => {
                let _ = self.mp.println(format!(
                    "aicli: budget spent: ${spent_usd:.4} of ${budget_usd:.4}; stopping"
                ));
            }
        }
    }

    /// A task (or its next attempt) started: a line of its own.
    fn started(&mut self, task_id: Arc<str>, provider: Arc<str>, attempt: u32) {
        self.drop_line(&task_id);
        let bar = self
            .mp
            .insert_before(&self.main, ProgressBar::new_spinner());
        bar.set_style(self.task_style.clone());
        bar.set_prefix(if attempt > 1 {
            format!("{task_id} #{attempt}")
        } else {
            task_id.to_string()
        });
        bar.enable_steady_tick(Duration::from_millis(200));
        let line = Line {
            bar,
            provider,
            spend: Spend::default(),
            last_tool: String::new(),
        };
        line.render();
        self.lines.insert(task_id, line);
    }

    /// What a task's line shows of its CLI's events: the last tool, a question, a wait
    /// before its session continues, the cost the CLI reported.
    fn agent(&mut self, task_id: &str, kind: &EventKind) {
        let Some(line) = self.lines.get_mut(task_id) else {
            return;
        };
        match kind {
            EventKind::ToolCall { name, .. } => line.last_tool = name.clone(),
            EventKind::Final { cost_usd, .. } => {
                if cost_usd.is_some() {
                    line.spend.reported = *cost_usd;
                }
            }
            EventKind::Question { question, .. } => {
                line.last_tool = format!("? {question}");
            }
            EventKind::Status { status } => match super::countdown::parse(status) {
                Some((secs, _)) => {
                    line.last_tool = format!("waiting {secs:.0}s before continuing the session")
                }
                None => return,
            },
            // Tokens and cost come priced from the engine (`TaskSpend`).
            EventKind::SessionStarted { .. }
            | EventKind::Usage { .. }
            | EventKind::UserMessage { .. }
            | EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolResult { .. }
            | EventKind::Retry { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. }
            | EventKind::Error { .. }
            | EventKind::Log { .. }
            | EventKind::Plan { .. }
            | EventKind::Subtask { .. }
            | EventKind::Hook { .. }
            | EventKind::Protocol { .. }
            | EventKind::Unknown { .. } => return,
        }
        line.render();
    }

    /// Clears every bar; log lines go straight to stderr again.
    fn close(mut self) {
        for (_, l) in self.lines.drain() {
            l.bar.finish_and_clear();
            self.mp.remove(&l.bar);
        }
        self.main.finish_and_clear();
        let _ = self.mp.clear();
        if let Ok(mut a) = ACTIVE.lock() {
            *a = None;
        }
    }
}

/// The writer of aicli's log lines (tracing): through the live display while one is
/// drawn (each line printed above the bars), else straight to stderr.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

/// One log line being written (see [`LogWriter`]).
#[derive(Debug, Default)]
pub struct LogLine(Vec<u8>);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let active = ACTIVE.lock().ok().and_then(|a| a.clone());
        let write = || {
            let _ = std::io::stderr().write_all(&self.0);
        };
        match active {
            Some(mp) => mp.suspend(write),
            None => write(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_task_shows_streamed_tokens_and_an_estimated_cost_until_the_cli_reports() {
        let mut s = Spend::default();
        assert_eq!(s.text(), "in 0 · out 0 · cache 0 · $0");
        s.usage = CanonicalUsage {
            input_tokens: 1200,
            output_tokens: 40,
            cache_read: 300,
            ..CanonicalUsage::default()
        };
        s.estimate = Some(0.0123);
        assert_eq!(
            s.text(),
            "in 1200 · out 40 · cache 300 · ~$0.0123 estimated"
        );
        s.estimate = None;
        assert_eq!(s.text(), "in 1200 · out 40 · cache 300 · $? (no price)");
        s.reported = Some(0.02);
        assert_eq!(s.text(), "in 1200 · out 40 · cache 300 · $0.0200");
        assert_eq!(s.usd(), Some(0.02));
    }
}
