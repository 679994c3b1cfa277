//! Human-readable rendering of events and results.

use std::time::Duration;

use crate::providers::{AgentEvent, CostSource, EventKind, SessionResult, SessionStatus};
use crate::record::BatchResult;

/// One line (or more) for an event in `aicli run`'s progress, or `None` to skip it.
pub fn event_line(ev: &AgentEvent) -> Option<String> {
    Some(match &ev.kind {
        EventKind::SessionStarted {
            session_id, model, ..
        } => format!(
            "● session {session_id}{}",
            model
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        EventKind::AssistantText { text, .. } => text.clone(),
        EventKind::Thinking { text } => format!("… {}", first_line(text, 200)),
        EventKind::ToolCall {
            name,
            input,
            mcp_server,
            ..
        } => {
            let server = mcp_server
                .as_ref()
                .map(|s| format!("{s}:"))
                .unwrap_or_default();
            format!("→ {server}{name} {}", first_line(&input.to_string(), 160))
        }
        EventKind::ToolResult {
            is_error: true,
            output,
            ..
        } => format!("✗ tool failed: {}", first_line(output, 200)),
        EventKind::ToolResult { .. } => return None,
        EventKind::Retry { .. }
        | EventKind::RateLimit { .. }
        | EventKind::PermissionDenied { .. }
        | EventKind::Error { .. }
        | EventKind::Protocol { .. }
        | EventKind::Log { .. } => notice_line(&ev.kind)?,
        EventKind::Question { .. } | EventKind::Plan { .. } | EventKind::Subtask { .. } => {
            progress_line(&ev.kind)?
        }
        EventKind::UserMessage { .. }
        | EventKind::Usage { .. }
        | EventKind::Status { .. }
        | EventKind::Hook { .. }
        | EventKind::Final { .. }
        | EventKind::Unknown { .. } => return None,
    })
}

/// A retry, a rate limit, a refusal, an error, a protocol problem or a log line.
fn notice_line(kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::Retry {
            attempt,
            max_retries,
            message,
            ..
        } => format!(
            "! retrying{}: {}",
            match (attempt, max_retries) {
                (Some(a), Some(m)) => format!(" {a}/{m}"),
                (Some(a), None) => format!(" {a}"),
                _ => String::new(),
            },
            first_line(message, 200)
        ),
        EventKind::RateLimit {
            status, resets_at, ..
        } => format!(
            "! rate limit: {status}{}",
            resets_at
                .map(|r| format!(" (resets at {r})"))
                .unwrap_or_default()
        ),
        EventKind::PermissionDenied { tool, message, .. } => {
            format!(
                "✗ permission denied for {tool}: {}",
                first_line(message, 200)
            )
        }
        EventKind::Error {
            error_kind,
            message,
            fatal,
            ..
        } => format!(
            "{} {error_kind}: {}",
            if *fatal { "✗" } else { "!" },
            first_line(message, 300)
        ),
        EventKind::Log {
            level,
            message,
            source,
        } => format!(
            "[{}{}] {}",
            serde_json::to_value(level)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            if source.is_empty() {
                String::new()
            } else {
                format!(" {source}")
            },
            message
        ),
        EventKind::Protocol { message, .. } => format!("! protocol: {message}"),
        _ => return None,
    })
}

/// A question, a plan, a subtask.
fn progress_line(kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::Question { question, options } => format!(
            "? {question}{}",
            if options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", options.join(" / "))
            }
        ),
        EventKind::Plan { items } => format!(
            "plan: {}",
            items
                .iter()
                .map(|i| format!("[{}] {}", if i.completed { "x" } else { " " }, i.text))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        EventKind::Subtask {
            task_id,
            status,
            description,
            ..
        } => format!(
            "task {task_id}: {status}{}",
            description
                .as_deref()
                .map(|d| format!(" ({})", first_line(d, 120)))
                .unwrap_or_default()
        ),
        _ => return None,
    })
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    crate::providers::shared::text::truncate_chars(line, max)
}

/// `$0.0004`, `~$0.0004` (estimated), `unknown`.
pub fn cost(r: &SessionResult) -> String {
    match (r.cost_usd, r.cost_source) {
        (Some(c), CostSource::Reported) => format!("${c:.4}"),
        (Some(c), CostSource::Estimated) => format!("~${c:.4}"),
        (Some(c), CostSource::Unknown) => format!("${c:.4}?"),
        (None, _) => "unknown".to_owned(),
    }
}

/// `reported`, `estimated`, `unknown`.
pub fn cost_source(r: &SessionResult) -> &'static str {
    match (r.cost_usd, r.cost_source) {
        (None, _) | (Some(_), CostSource::Unknown) => "unknown",
        (Some(_), CostSource::Reported) => "reported",
        (Some(_), CostSource::Estimated) => "estimated",
    }
}

/// `in 12 · out 7 · cache r56/w34`: input not read from cache, output, and cache
/// reads/writes apart (the one convention of `run`, `answer`, the batch table and the
/// live display).
pub fn tokens(r: &SessionResult) -> String {
    let u = &r.canonical_usage;
    format!(
        "in {} · out {} · cache r{}/w{}",
        u.input_tokens, u.output_tokens, u.cache_read, u.cache_write
    )
}

/// The same convention, short, for the live display: `in 12 · out 7 · cache 90`.
pub fn usage_short(u: &crate::providers::CanonicalUsage) -> String {
    format!(
        "in {} · out {} · cache {}",
        u.input_tokens,
        u.output_tokens,
        u.cache_read + u.cache_write
    )
}

/// `BATCH/TASK`, what `aicli answer` takes to name one task alone.
pub fn task_ref(batch_id: Option<&str>, task_id: &str) -> String {
    let task = if task_id.is_empty() { "TASK" } else { task_id };
    match batch_id {
        Some(b) => format!("{b}/{task}"),
        None => task.to_owned(),
    }
}

/// The headline of a result: `✔ succeeded`, `⏸ blocked on a question`, `⏹ interrupted`,
/// `✘ failed (kind): message`.
fn headline(r: &SessionResult) -> String {
    let head = match r.status {
        SessionStatus::Succeeded => "✔ succeeded".to_owned(),
        SessionStatus::Blocked => "⏸ blocked on a question".to_owned(),
        SessionStatus::Interrupted => "⏹ interrupted".to_owned(),
        SessionStatus::Failed => format!(
            "✘ failed ({}): {}",
            r.error_kind.map(|k| k.as_str()).unwrap_or("unknown"),
            r.error.clone().unwrap_or_default()
        ),
    };
    match r.tool_trouble() {
        Some(t) => format!("{head} · ⚠ {t}"),
        None => head,
    }
}

/// The summary printed after `aicli run` / `aicli answer` (`batch_id` names the batch
/// in the hints). The time is `elapsed`, the command's own (what the user waited),
/// with the CLI's run time beside it when that is a second or more shorter; without
/// `elapsed`, the run's.
pub fn summary(r: &SessionResult, batch_id: Option<&str>, elapsed: Option<Duration>) -> String {
    let mut s = format!(
        "{}\n  {} · {} · cost {} ({}) · {}",
        headline(r),
        r.provider,
        time_taken(r, elapsed),
        cost(r),
        cost_source(r),
        tokens(r)
    );
    if let Some(sid) = &r.session_id {
        s.push_str(&format!("\n  session {sid}"));
    }
    if r.tool_calls_refused > 0 {
        s.push_str(
            "\n  the CLI refused what its permission mode does not allow, and the task did \
             less than asked: --permission-mode sandbox runs commands confined to the \
             worktree, bypass runs them unconfined (docs/permissions.md)",
        );
    }
    if let Some(line) = work_line(r) {
        s.push_str(&format!("\n  {line}"));
        if r.work.as_ref().is_some_and(|w| w.head.is_some()) {
            let t = task_ref(batch_id, &r.task_id);
            s.push_str(&format!(
                "\n  review it with: aicli diff {t} · take it home with: aicli land {t}"
            ));
        }
    }
    if let Some(note) = r.work.as_ref().and_then(|w| w.note()) {
        s.push_str(&format!("\n  {note}"));
    }
    if let Some(q) = &r.question {
        s.push_str(&format!("\n  question: {}", q.question));
        if !q.options.is_empty() {
            s.push_str(&format!("\n  options: {}", q.options.join(" / ")));
        }
        s.push_str(&format!(
            "\n  answer with: aicli answer {} \"<your answer>\"",
            task_ref(batch_id, &r.task_id)
        ));
    }
    if r.status == SessionStatus::Interrupted
        && let Some(b) = batch_id
    {
        s.push_str(&format!("\n  finish it with: aicli resume {b}"));
    }
    s
}

/// Where a run's work is: committed on its branch (with what the branch holds), kept on
/// it, or uncommitted in its worktree (`engine.commit: off`); nothing when the worktree
/// was removed.
pub fn work_line(r: &SessionResult) -> Option<String> {
    let (b, w) = (r.branch.as_ref()?, r.worktree.as_ref()?);
    let w = w.display();
    let Some(work) = &r.work else {
        return Some(format!(
            "work left uncommitted in {w} (branch {b} has none of it)"
        ));
    };
    let holds = work.total.map(|t| {
        format!(
            ": {} over {}",
            t.short(),
            crate::util::count(u64::from(t.commits), "commit", "commits")
        )
    });
    Some(match &work.commit {
        Some(c) => format!(
            "work committed on branch {b} ({}){}; worktree {w}",
            &c[..c.len().min(10)],
            holds.unwrap_or_default()
        ),
        None => format!(
            "work kept on branch {b}{}; worktree {w}",
            holds.unwrap_or_default()
        ),
    })
}

/// The batch's overlaps, a line each (`⚠` where a merge would conflict), under a
/// heading; nothing when there are none.
pub fn overlaps(list: &[crate::record::Overlap]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let conflicts = list.iter().filter(|o| !o.conflicts.is_empty()).count();
    let mut out = format!(
        "\noverlaps: {} ({} would conflict; found by trial merges)",
        list.len(),
        conflicts
    );
    for o in list {
        let mark = if o.conflicts.is_empty() { "↔" } else { "⚠" };
        out.push_str(&format!("\n  {mark} {}", o.describe()));
    }
    out
}

/// `45.3s (the CLI ran 3.2s)`, or `3.2s` when the command took about as long as the run.
fn time_taken(r: &SessionResult, elapsed: Option<Duration>) -> String {
    let run = Duration::from_millis(r.duration_ms);
    match elapsed {
        Some(total) if total >= run + Duration::from_secs(1) => format!(
            "{:.1}s (the CLI ran {:.1}s)",
            total.as_secs_f64(),
            run.as_secs_f64()
        ),
        Some(total) => format!("{:.1}s", total.max(run).as_secs_f64()),
        None => format!("{:.1}s", run.as_secs_f64()),
    }
}

/// The batch's totals line: the tasks by outcome, the cost of all its runs, the time,
/// what is left of a budget.
fn totals(b: &BatchResult) -> String {
    let (failed, interrupted) = (b.n_failed, b.n_interrupted);
    let mut out = format!(
        "\n{} tasks: {} succeeded, {failed} failed, {} blocked{} · cost ${:.4}{}{} · {:.1}s",
        b.n_tasks,
        b.n_succeeded,
        b.n_blocked,
        if interrupted > 0 {
            format!(", {interrupted} interrupted")
        } else {
            String::new()
        },
        b.total_cost_usd,
        if b.estimated_cost_usd > 0.0 {
            format!(" (~${:.4} of it estimated)", b.estimated_cost_usd)
        } else {
            String::new()
        },
        if b.n_cost_unknown > 0 {
            format!(" + unknown ({} tasks)", b.n_cost_unknown)
        } else {
            String::new()
        },
        b.wall_clock_ms as f64 / 1000.0
    );
    if let Some(budget) = b.budget_usd {
        // What the budget counted: costs, and a whole share for a run of unknown cost.
        let left = budget - b.budget_charged_usd.unwrap_or(b.total_cost_usd);
        if left >= 0.0 {
            out.push_str(&format!(" · budget ${budget:.4}, ${left:.4} left"));
        } else {
            out.push_str(&format!(
                " · budget ${budget:.4}, over budget by ${:.4}",
                -left
            ));
        }
    }
    out
}

/// A task's cost over all its runs in the table (`latest` is its last run's result), and
/// where it comes from: `$0.0012` (reported), `~$0.0004` (estimated, all or part),
/// `$0.0007 + ?` (a run of unknown cost), `$0.0000` when no run spent anything it said
/// (one that never started, say).
fn task_cost(c: &crate::record::TaskCost, latest: &SessionResult) -> (String, &'static str) {
    let tilde = if c.estimated_usd > 0.0 { "~" } else { "" };
    let figure = format!("{tilde}${:.4}", c.cost_usd);
    match (c.unknown, c.estimated_usd > 0.0) {
        (false, false) if c.cost_usd == 0.0 && latest.cost_usd.is_none() => {
            (figure, "nothing spent")
        }
        (true, _) if c.cost_usd == 0.0 => ("unknown".to_owned(), "unknown"),
        (true, _) => (format!("{figure} + ?"), "partly unknown"),
        (false, false) => (figure, "reported"),
        (false, true) if (c.cost_usd - c.estimated_usd).abs() < 1e-12 => (figure, "estimated"),
        (false, true) => (figure, "partly estimated"),
    }
}

/// The status word of a task in the table.
fn status_word(r: &SessionResult) -> String {
    let word = match r.status {
        SessionStatus::Succeeded => "ok".to_owned(),
        SessionStatus::Blocked => "blocked".to_owned(),
        SessionStatus::Interrupted => "interrupted".to_owned(),
        SessionStatus::Failed => r
            .error_kind
            .map(|k| k.as_str().to_owned())
            .unwrap_or_else(|| "failed".to_owned()),
    };
    let mut marks = Vec::new();
    if r.tool_calls_refused > 0 {
        marks.push(format!("{} refused", r.tool_calls_refused));
    }
    if r.tool_calls_failed > 0 {
        marks.push(format!("{} failed", r.tool_calls_failed));
    }
    if marks.is_empty() {
        word
    } else {
        format!("{word} ⚠ {}", marks.join(", "))
    }
}

/// `rows` as a table: each column as wide as its widest cell (in characters), two
/// spaces apart, `right[i]` aligning column `i` to the right; one line per row, each
/// ending in a newline, without trailing blanks.
pub fn columns<const N: usize>(rows: &[[String; N]], right: &[bool; N]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if right[i] {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The table printed after a batch: per task its provider, status, tokens (input not
/// from cache, output, cache reads + writes), cost and where the cost comes from.
pub fn batch_table(b: &BatchResult) -> String {
    const COLS: usize = 10;
    let mut rows: Vec<[String; COLS]> = vec![
        [
            "task", "provider", "status", "in", "out", "cache", "cost", "source", "time", "detail",
        ]
        .map(str::to_owned),
    ];
    for r in &b.tasks {
        let detail = match (&r.question, &r.branch, &r.error) {
            (Some(q), _, _) => format!("? {}", first_line(&q.question, 60)),
            (None, Some(b), _) => match r.work.as_ref().and_then(|w| w.total) {
                Some(t) => t.short(),
                None => format!("branch {b}"),
            },
            // A failure's words whole enough to say why (the cause is often at the end).
            (None, None, Some(e)) => first_line(e, 240),
            (None, None, None) => String::new(),
        };
        let u = &r.canonical_usage;
        let task_cost = match b.task_costs.iter().find(|c| c.task_id == r.task_id) {
            Some(c) => task_cost(c, r),
            None => (cost(r), cost_source(r)),
        };
        rows.push([
            r.task_id.clone(),
            r.provider.clone(),
            status_word(r),
            u.input_tokens.to_string(),
            u.output_tokens.to_string(),
            (u.cache_read + u.cache_write).to_string(),
            task_cost.0,
            task_cost.1.to_owned(),
            format!("{:.1}s", r.duration_ms as f64 / 1000.0),
            detail,
        ]);
    }
    let mut out = columns(&rows, &[false; COLS]);
    let interrupted = b.n_interrupted;
    out.push_str(&totals(b));
    for r in &b.tasks {
        if let Some(note) = r.work.as_ref().and_then(|w| w.note()) {
            out.push_str(&format!("\n{}: {note}", r.task_id));
        }
    }
    out.push_str(&overlaps(&b.overlaps));
    out.push_str(&format!("\nrecords: {}", b.runs_dir.display()));
    for r in b
        .tasks
        .iter()
        .filter(|t| t.status == SessionStatus::Blocked)
    {
        out.push_str(&format!(
            "\nanswer {} with: aicli answer {} \"<your answer>\"",
            r.task_id,
            task_ref(Some(&b.batch_id), &r.task_id)
        ));
    }
    if interrupted > 0 {
        out.push_str(&format!(
            "\ninterrupted: {} (cut off, or never started); finish them with `aicli resume {}`",
            crate::util::count(interrupted as u64, "task", "tasks"),
            b.batch_id
        ));
    }
    out
}
