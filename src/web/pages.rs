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
.q { white-space: pre-wrap; overflow-wrap: anywhere; }
code { overflow-wrap: anywhere; }
@media (max-width: 40rem) { .wide { display: none; } th, td { padding: 0.3rem 0.25rem; } }
"#;

pub(super) async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
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
                        div { strong { (b.batch_id) "/" (b.task_id) } " (" (b.provider) ") asks:" }
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
                                td { code { (s.batch_id) } }
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
