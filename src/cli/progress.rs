//! The live progress display of `aicli batch`: one line per running task (provider,
//! elapsed time, tokens, cost, last tool) and a bar for the batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aicli::BatchEvent;
use aicli::providers::EventKind;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::broadcast;

struct Line {
    bar: ProgressBar,
    provider: Arc<str>,
    tokens: u64,
    cost: Option<f64>,
    last_tool: String,
}

impl Line {
    fn render(&self) {
        self.bar.set_message(format!(
            "{} · {} tok · {} · {}",
            self.provider,
            self.tokens,
            self.cost
                .map(|c| format!("${c:.4}"))
                .unwrap_or_else(|| "$?".to_owned()),
            if self.last_tool.is_empty() {
                "-"
            } else {
                &self.last_tool
            }
        ));
    }
}

/// Draws the display until the channel closes. Hidden when stderr is not a terminal.
pub async fn run(mut rx: broadcast::Receiver<BatchEvent>, n_tasks: usize) {
    let mp = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(8));
    let main = mp.add(ProgressBar::new(n_tasks as u64));
    main.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} tasks · {elapsed} · {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let task_style = ProgressStyle::with_template("  {spinner} {prefix:<20} {elapsed:>5} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut lines: HashMap<Arc<str>, Line> = HashMap::new();
    let mut spent = 0.0;
    loop {
        let ev = match rx.recv().await {
            Ok(e) => e,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        match ev {
            BatchEvent::TaskStarted {
                task_id,
                provider,
                attempt,
            } => {
                let bar = mp.insert_before(&main, ProgressBar::new_spinner());
                bar.set_style(task_style.clone());
                bar.set_prefix(if attempt > 1 {
                    format!("{task_id} #{attempt}")
                } else {
                    task_id.to_string()
                });
                bar.enable_steady_tick(Duration::from_millis(200));
                let line = Line {
                    bar,
                    provider,
                    tokens: 0,
                    cost: None,
                    last_tool: String::new(),
                };
                line.render();
                lines.insert(task_id, line);
            }
            BatchEvent::Agent { task_id, event } => {
                let Some(line) = lines.get_mut(&task_id) else {
                    continue;
                };
                match &event.kind {
                    EventKind::ToolCall { name, .. } => line.last_tool = name.clone(),
                    // Usage events are increments of the run's usage.
                    EventKind::Usage { usage, .. } => {
                        line.tokens += usage.total_input() + usage.output_tokens
                    }
                    EventKind::Final { cost_usd, .. } => {
                        if cost_usd.is_some() {
                            line.cost = *cost_usd;
                        }
                    }
                    EventKind::Question { question, .. } => {
                        line.last_tool = format!("? {question}");
                    }
                    _other => {}
                }
                line.render();
            }
            BatchEvent::Backoff {
                task_id,
                delay_ms,
                parallelism,
                reason,
                ..
            } => {
                if let Some(l) = lines.remove(&task_id) {
                    l.bar.finish_and_clear();
                }
                main.set_message(format!(
                    "backing off {:.1}s (parallelism {parallelism}): {reason}",
                    delay_ms as f64 / 1000.0
                ));
            }
            BatchEvent::TaskBlocked { task_id, question } => {
                let _ = mp.println(format!("⏸ {task_id} asks: {}", question.question));
            }
            BatchEvent::TaskFinished { task_id, result } => {
                if let Some(l) = lines.remove(&task_id) {
                    l.bar.finish_and_clear();
                }
                spent += result.cost_usd.unwrap_or(0.0);
                main.inc(1);
                main.set_message(format!("${spent:.4}"));
            }
            BatchEvent::BudgetSpent {
                spent_usd,
                budget_usd,
            } => {
                let _ = mp.println(format!(
                    "budget spent: ${spent_usd:.4} of ${budget_usd:.4}; stopping"
                ));
            }
        }
    }
    for (_, l) in lines {
        l.bar.finish_and_clear();
    }
    main.finish_and_clear();
}
