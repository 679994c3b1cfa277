//! Human-readable rendering of events and results.

use aicli::providers::{AgentEvent, CostSource, EventKind, SessionResult, SessionStatus};
use aicli::store::BatchResult;

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
        EventKind::Question { question, options } => format!(
            "? {question}{}",
            if options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", options.join(" / "))
            }
        ),
        EventKind::Protocol { message, .. } => format!("! protocol: {message}"),
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
        EventKind::UserMessage { .. }
        | EventKind::Usage { .. }
        | EventKind::Status { .. }
        | EventKind::Hook { .. }
        | EventKind::Final { .. }
        | EventKind::Unknown { .. } => return None,
    })
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    aicli::providers::shared::text::truncate_chars(line, max)
}

/// `$0.0004 (reported)`, `unknown`.
pub fn cost(r: &SessionResult) -> String {
    match (r.cost_usd, r.cost_source) {
        (Some(c), CostSource::Reported) => format!("${c:.4}"),
        (Some(c), CostSource::Estimated) => format!("~${c:.4}"),
        (Some(c), CostSource::Unknown) => format!("${c:.4}?"),
        (None, _) => "unknown".to_owned(),
    }
}

/// `in 12 · out 7 · cache r56/w34`.
pub fn tokens(r: &SessionResult) -> String {
    let u = &r.canonical_usage;
    format!(
        "in {} · out {} · cache r{}/w{}",
        u.input_tokens, u.output_tokens, u.cache_read, u.cache_write
    )
}

/// The summary printed after `aicli run`.
pub fn summary(r: &SessionResult) -> String {
    let head = match r.status {
        SessionStatus::Succeeded => "✔ succeeded".to_owned(),
        SessionStatus::Blocked => "⏸ blocked on a question".to_owned(),
        SessionStatus::Failed | SessionStatus::Interrupted => format!(
            "✘ failed ({}): {}",
            r.error_kind.map(|k| k.as_str()).unwrap_or("unknown"),
            r.error.clone().unwrap_or_default()
        ),
    };
    let mut s = format!(
        "{head}\n  {} · {:.1}s · cost {} · {}",
        r.provider,
        r.duration_ms as f64 / 1000.0,
        cost(r),
        tokens(r)
    );
    if let Some(sid) = &r.session_id {
        s.push_str(&format!("\n  session {sid}"));
    }
    if let (Some(b), Some(w)) = (&r.branch, &r.worktree) {
        s.push_str(&format!("\n  work kept on branch {b} in {}", w.display()));
    }
    if let Some(q) = &r.question {
        s.push_str(&format!("\n  question: {}", q.question));
        s.push_str(&format!(
            "\n  answer with: aicli answer {} \"...\"",
            if r.task_id.is_empty() {
                "TASK"
            } else {
                &r.task_id
            }
        ));
    }
    s
}

/// The table printed after a batch.
pub fn batch_table(b: &BatchResult) -> String {
    let mut rows = vec![[
        "task".to_owned(),
        "status".to_owned(),
        "cost".to_owned(),
        "tokens in/out".to_owned(),
        "time".to_owned(),
        "detail".to_owned(),
    ]];
    for r in &b.tasks {
        let status = match r.status {
            SessionStatus::Succeeded => "ok".to_owned(),
            SessionStatus::Blocked => "blocked".to_owned(),
            SessionStatus::Failed | SessionStatus::Interrupted => r
                .error_kind
                .map(|k| k.as_str().to_owned())
                .unwrap_or_else(|| "failed".to_owned()),
        };
        let detail = match (&r.question, &r.branch, &r.error) {
            (Some(q), _, _) => format!("? {}", first_line(&q.question, 60)),
            (None, Some(b), _) => format!("branch {b}"),
            (None, None, Some(e)) => first_line(e, 60),
            (None, None, None) => String::new(),
        };
        rows.push([
            r.task_id.clone(),
            status,
            cost(r),
            format!(
                "{}/{}",
                r.canonical_usage.total_input(),
                r.canonical_usage.output_tokens
            ),
            format!("{:.1}s", r.duration_ms as f64 / 1000.0),
            detail,
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{} tasks: {} succeeded, {} failed, {} blocked · cost ${:.4}{} · {:.1}s",
        b.n_tasks,
        b.n_succeeded,
        b.n_failed,
        b.n_blocked,
        b.total_cost_usd,
        if b.n_cost_unknown > 0 {
            format!(" + unknown ({} tasks)", b.n_cost_unknown)
        } else {
            String::new()
        },
        b.wall_clock_ms as f64 / 1000.0
    ));
    if let (Some(budget), Some(left)) = (b.budget_usd, b.budget_remaining_usd) {
        out.push_str(&format!(" · budget ${budget:.4}, ${left:.4} left"));
    }
    out.push_str(&format!("\nrecords: {}", b.runs_dir.display()));
    out
}
