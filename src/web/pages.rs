//! The pages, rendered on the server with maud (which escapes every value: what an agent
//! or a CLI printed is shown as text, never run). No inline script or style: the CSP
//! allows only this server's own files.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::Shared;

/// The stylesheet: readable at a phone's width (390 px) and on a desktop.
const CSS: &str = r#"
body { font: 15px/1.4 system-ui, sans-serif; margin: 0 auto; max-width: 72rem; padding: 0.75rem; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.35rem 0.5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.blocked { border-left: 4px solid #b36b00; padding: 0.4rem 0.6rem; margin: 0.5rem 0; background: #fff8ec; }
.q, .text, pre { white-space: pre-wrap; overflow-wrap: anywhere; }
#events { list-style: none; padding: 0; } #events li { border-bottom: 1px solid #eee; padding: 0.25rem 0; }
.kind { display: inline-block; min-width: 6rem; font-weight: 600; margin-right: 0.5rem; }
code { overflow-wrap: anywhere; }
@media (max-width: 40rem) { .wide { display: none; } th, td { padding: 0.3rem 0.25rem; } }
"#;

pub(super) async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

/// The page's one script, embedded in the binary.
const JS: &str = include_str!("static/app.js");

pub(super) async fn js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], JS).into_response()
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/static/app.css";
                script src="/static/app.js" defer {}
            }
            body { (body) }
        }
    }
}

/// The batches, newest first, with the blocked tasks on top.
pub(super) async fn index(State(w): State<Shared>) -> Markup {
    let blocked = w.engine.blocked(&w.store);
    let batches: Vec<_> = w.store.list().iter().filter_map(|b| b.summary().ok()).collect();
    page(
        "aicli",
        html! {
            h1 { "aicli — " (w.store.root().display()) }
            @if !blocked.is_empty() {
                h2 { "⏸ Waiting for an answer (" (blocked.len()) ")" }
                @for b in &blocked {
                    div.blocked {
                        div {
                            a href={ "/batches/" (b.batch_id) "/tasks/" (b.task_id) } {
                                strong { (b.batch_id) "/" (b.task_id) }
                            }
                            " (" (b.provider) ") asks:"
                        }
                        div.q { (b.question.question) }
                        @if !b.question.options.is_empty() {
                            div { "Options: " (b.question.options.join(" · ")) }
                        }
                        div { "Answer with " code { "aicli answer " (b.batch_id) "/" (b.task_id) " \"…\"" } }
                    }
                }
            }
            h2 { "Batches (" (batches.len()) ")" }
            @if batches.is_empty() {
                p { "No batches in this repository yet." }
            } @else {
                table {
                    thead { tr {
                        th { "Batch" } th.wide { "Created" } th { "Provider" }
                        th { "Status" } th.num { "Spent" }
                    } }
                    tbody {
                        @for s in &batches {
                            tr {
                                td { a href={ "/batches/" (s.batch_id) } { code { (s.batch_id) } } }
                                td.wide { (s.created_at) }
                                td { (s.provider) }
                                td { (status_words(s)) }
                                td.num { "$" (format!("{:.4}", s.cost_usd)) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A batch's status in words and icons (never colour alone).
fn status_words(s: &crate::record::BatchSummary) -> String {
    let mut parts = Vec::new();
    for (n, icon, word) in [
        (s.n_succeeded, "✔", "succeeded"),
        (s.n_failed, "✖", "failed"),
        (s.n_blocked, "⏸", "blocked"),
        (s.n_unfinished, "…", "unfinished"),
    ] {
        if n > 0 {
            parts.push(format!("{icon} {n} {word}"));
        }
    }
    if parts.is_empty() {
        format!("{} tasks", s.n_tasks)
    } else {
        parts.join(", ")
    }
}

/// A batch: one row per task with its provider, state, tokens and cost.
pub(super) async fn batch(
    State(w): State<Shared>,
    axum::extract::Path(b): axum::extract::Path<String>,
) -> Result<Response, super::BadId> {
    let rec = match w.store.open_batch(super::checked_id(&b)?) {
        Ok(r) => r,
        Err(m) => return Ok(super::not_found(m)),
    };
    let tasks = rec.tasks().unwrap_or_default();
    let body = html! {
        p { a href="/" { "← batches" } }
        h1 { "Batch " code { (b) } }
        table {
            thead { tr {
                th { "Task" } th { "Provider" } th { "Status" }
                th.num.wide { "Tokens in / out / cache" } th.num { "Cost" }
            } }
            tbody {
                @for t in &tasks {
                    @let last = t.attempts.last().and_then(|a| a.result.as_ref());
                    tr {
                        td { a href={ "/batches/" (b) "/tasks/" (t.task.id) } { (t.task.id) } }
                        td { (t.provider) }
                        td { (state_words(t.state)) @if let Some(k) = last.and_then(|r| r.error_kind) { " (" (k.as_str()) ")" } }
                        td.num.wide {
                            @if let Some(r) = last {
                                (r.canonical_usage.input_tokens) " / " (r.canonical_usage.output_tokens)
                                " / " (r.canonical_usage.cache_read + r.canonical_usage.cache_write)
                            }
                        }
                        td.num { (cost(last)) }
                    }
                }
            }
        }
    };
    Ok(page(&format!("aicli batch {b}"), body).into_response())
}

/// A task: its state, attempts, final response, and its transcript live.
pub(super) async fn task(
    State(w): State<Shared>,
    axum::extract::Path((b, t)): axum::extract::Path<(String, String)>,
) -> Result<Response, super::BadId> {
    let (b, t) = (super::checked_id(&b)?, super::checked_id(&t)?);
    let rec = match w.store.open_batch(b).and_then(|r| r.task(t)) {
        Ok(r) => r,
        Err(m) => return Ok(super::not_found(m)),
    };
    let last = rec.attempts.last().and_then(|a| a.result.as_ref());
    let body = html! {
        p { a href={ "/batches/" (b) } { "← batch " (b) } }
        h1 { "Task " code { (t) } " — " (state_words(rec.state)) }
        p { (rec.provider) @if let Some(br) = &rec.branch { " · branch " code { (br) } } " · " (cost(last)) }
        h2 { "Attempts" }
        table {
            thead { tr { th { "#" } th { "Kind" } th.wide { "Started" } th { "Ended" } } }
            tbody {
                @for a in &rec.attempts {
                    tr {
                        td { (a.attempt) }
                        td { (format!("{:?}", a.kind).to_lowercase()) }
                        td.wide { (a.started_at) }
                        td { (a.finished_at.as_deref().unwrap_or("running")) }
                    }
                }
            }
        }
        @if let Some(r) = last {
            @if !r.response.is_empty() { h2 { "Response" } pre { (r.response) } }
            @if let Some(e) = &r.error { h2 { "Error" } pre { (e) } }
        }
        h2 { "Transcript " small id="live" { "" } }
        ul id="events" data-src={ "/api/batches/" (b) "/tasks/" (t) "/events" } {}
        noscript { p { "The transcript needs JavaScript; the JSON API has it at " code { "/api/batches/" (b) "/tasks/" (t) "/events" } "." } }
    };
    Ok(page(&format!("aicli {b}/{t}"), body).into_response())
}

/// A task's state as a word with an icon (never colour alone).
fn state_words(s: crate::record::TaskState) -> &'static str {
    use crate::record::TaskState::*;
    match s {
        Queued => "… queued",
        Running => "▶ running",
        Succeeded => "✔ succeeded",
        Failed => "✖ failed",
        Blocked => "⏸ blocked",
        Interrupted => "⏹ interrupted",
    }
}

/// A result's cost: `~` marks an estimate.
fn cost(r: Option<&aicli_providers::SessionResult>) -> String {
    match r.and_then(|r| r.cost_usd.map(|c| (c, r.cost_source))) {
        Some((c, aicli_providers::CostSource::Reported)) => format!("${c:.4}"),
        Some((c, _)) => format!("~${c:.4}"),
        None => "cost unknown".to_owned(),
    }
}
