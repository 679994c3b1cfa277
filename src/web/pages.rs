//! The pages, rendered on the server with maud (which escapes every value: what an agent
//! or a CLI printed is shown as text, never run). No inline script or style: the CSP
//! allows only this server's own files.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::Shared;
use super::icons::icon;
use super::views::{TaskRow, cost, task_status, tokens};

/// The stylesheet: readable at a phone's width (390 px) and on a desktop (the icons'
/// rules are added to it, [`super::icons::css`]).
const CSS: &str = include_str!("static/app.css");

pub(super) async fn css() -> Response {
    static ALL: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{CSS}{}", super::icons::css()));
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], ALL.as_str()).into_response()
}

/// The page's one script, embedded in the binary.
const JS: &str = include_str!("static/app.js");

pub(super) async fn js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], JS).into_response()
}

/// The page `aicli web --open` hands the browser as a file (mode 0600): its form posts
/// the one-time token to `origin/login` by itself, so the token is never in a process's
/// arguments. A file of the user's own, outside the server: its one inline script is
/// under no CSP of ours.
pub(super) fn login_file(origin: &str, token: &str) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "aicli web: logging in" } }
            body {
                form method="post" action={ (origin) "/login" } {
                    input type="hidden" name="token" value=(token);
                    button type="submit" { "Log in to aicli web" }
                }
                script { (maud::PreEscaped("document.forms[0].submit();")) }
            }
        }
    }
    .into_string()
}

/// What a posted login answers: the cookie is set, and the page moves to `/` itself (a
/// navigation of this origin's, on which a SameSite=Strict cookie is sent).
pub(super) fn logged_in() -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0; url=/";
                title { "aicli web" }
            }
            body { p { "Logged in. " a href="/" { "Go to the runs" } } }
        }
    }
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

/// The batches, newest first, with the blocked tasks on top, and the forms that start
/// a task or a batch.
pub(super) async fn index(State(w): State<Shared>) -> Markup {
    let blocked = w.engine.blocked(&w.store);
    let batches: Vec<_> = w.store.list().iter().filter_map(|b| b.summary().ok()).collect();
    let acts = w.actions.launcher().is_some();
    page(
        "aicli",
        html! {
            h1 { "aicli — " (w.store.root().display()) }
            div id="action" role="status" aria-live="polite" {}
            section id="blocked" data-src="/api/blocked" {
                @if !blocked.is_empty() {
                    h2 { (icon("pause")) "Waiting for an answer (" (blocked.len()) ")" }
                }
                @for b in &blocked {
                    div.blocked {
                        div {
                            a href={ "/batches/" (b.batch_id) "/tasks/" (b.task_id) } {
                                strong { (b.batch_id) "/" (b.task_id) }
                            }
                            " (" (b.provider) ") asks:"
                        }
                        (answer_form(&b.batch_id, &b.task_id, &b.question, acts))
                    }
                }
            }
            h2 { "Batches (" (batches.len()) ")" }
            @if batches.is_empty() {
                p { "No batches in this repository yet." }
            } @else {
                table id="batches" data-src="/api/batches" {
                    thead { tr {
                        th { "Batch" } th.wide { "Created" } th { "Provider" }
                        th { "Status" } th.num { "Spent" }
                    } }
                    tbody {
                        @for s in &batches {
                            tr data-batch=(s.batch_id) {
                                td.batch {
                                    a href={ "/batches/" (s.batch_id) } { code { (s.batch_id) } }
                                    (task_gists(s))
                                }
                                td.wide { (s.created_at) }
                                td { (s.provider) }
                                td.status { (status_words(s)) }
                                td.num.spent { "$" (format!("{:.4}", s.cost_usd)) }
                            }
                        }
                    }
                }
            }
            @if acts {
                (start_forms(&w))
            }
        },
    )
}

/// A blocked task's question with its options as buttons and a text answer; read-only,
/// the question with its options and the command that answers it, and no form at all.
fn answer_form(batch: &str, task: &str, q: &aicli_providers::PendingQuestion, acts: bool) -> Markup {
    html! {
        @if acts {
            form.answer data-batch=(batch) data-task=(task) {
                div.q { (q.question) }
                @if !q.options.is_empty() {
                    div {
                        @for o in &q.options {
                            button.option type="button" data-answer=(o) { (o) }
                        }
                    }
                }
                label {
                    "Or write the answer"
                    textarea name="text" maxlength="65536" {}
                }
                div { button.send type="submit" { "Send the answer" } }
            }
        } @else {
            div.question data-batch=(batch) data-task=(task) {
                div.q { (q.question) }
                @if !q.options.is_empty() {
                    div { "Options: " (q.options.join(" · ")) }
                }
                div {
                    "This view is read-only. Answer with "
                    code { "aicli answer " (batch) "/" (task) " -" }
                    " (the answer on stdin)"
                }
            }
        }
    }
}

/// The forms that start a task or a batch in the repository.
fn start_forms(w: &super::Web) -> Markup {
    let providers = w.engine.registry().names();
    let default = &w.engine.config().default_provider;
    html! {
        h2 { "Start a task" }
        form.start id="start-task" {
            label { "Prompt" textarea name="prompt" required maxlength="65536" {} }
            div {
                label { "Provider " select name="provider" {
                    @for p in &providers {
                        option value=(p) selected[p == default] { (p) }
                    }
                } }
                " "
                label { "Runner " select name="runner" {
                    option value="" { "default" }
                    option value="local" { "local" }
                    option value="docker" { "docker" }
                } }
                " "
                label { "Model " input name="model" type="text" size="16" placeholder="default"; }
            }
            div { button type="submit" { "Start" } }
        }
        h2 { "Start a batch" }
        form.start id="start-batch" {
            label {
                "A tasks file (JSON, as for " code { "aicli batch" } ")"
                textarea name="tasks" maxlength="65536" placeholder=r#"{"tasks": [{"id": "a", "prompt": "…"}]}"# {}
            }
            div { button type="submit" { "Start the batch" } }
        }
    }
}

/// What a batch is about: its first tasks, each its id and the start of its prompt, and
/// how many more.
fn task_gists(s: &crate::record::BatchSummary) -> Markup {
    let more = s.n_tasks.saturating_sub(s.tasks.len());
    html! {
        ul.gist {
            @for t in &s.tasks {
                li { code { (t.id) } ": " (t.prompt) }
            }
            @if more > 0 { li { "and " (more) " more" } }
        }
    }
}

/// A batch's tasks by state, each count with its state's icon and word (never colour
/// alone); the queued and running ones as "unfinished".
fn status_words(s: &crate::record::BatchSummary) -> Markup {
    use super::icons::of_state;
    use crate::record::TaskState::{Blocked, Failed, Interrupted, Parked, Queued, Succeeded};
    let parts: Vec<(usize, &str, &str)> = [
        (s.n_succeeded, of_state(Succeeded), "succeeded"),
        (s.n_failed, of_state(Failed), "failed"),
        (s.n_blocked, of_state(Blocked), "blocked"),
        (s.n_interrupted, of_state(Interrupted), "interrupted"),
        (s.n_parked, of_state(Parked), "parked"),
        (s.n_unfinished - s.n_interrupted - s.n_parked, of_state(Queued), "unfinished"),
    ]
    .into_iter()
    .filter(|(n, _, _)| *n > 0)
    .collect();
    html! {
        @if parts.is_empty() {
            (s.n_tasks) " tasks"
        }
        @for (i, (n, i_name, word)) in parts.iter().enumerate() {
            @if i > 0 { ", " }
            span.count { (icon(i_name)) (n) " " (word) }
        }
    }
}

/// A batch: one row per task with its provider, state, tokens, cost and last line,
/// kept live by the page's script.
pub(super) async fn batch(
    State(w): State<Shared>,
    axum::extract::Path(b): axum::extract::Path<String>,
) -> Result<Response, super::BadId> {
    let rec = match w.store.open_batch(super::checked_id(&b)?) {
        Ok(r) => r,
        Err(m) => return Ok(super::not_found(m)),
    };
    let view = super::api::batch_view(&w, &rec);
    let open: Vec<&str> = view
        .tasks
        .iter()
        .filter(|t| !t.state.is_final())
        .map(|t| t.task.id.as_str())
        .collect();
    let held = open
        .iter()
        .any(|t| rec.task_held_elsewhere(t));
    let acts = !w.read_only;
    // The batch's end is recorded when no task runs or waits and its result holds every
    // task's latest result (a resume rewrites it as it ends).
    let ended = rec.result().is_some_and(|r| {
        view.tasks.iter().all(|t| {
            use crate::record::TaskState::{Queued, Running};
            !matches!(t.state, Queued | Running)
                && t.latest_result()
                    .is_none_or(|l| r.tasks.iter().any(|x| x.task_id == t.task.id && x == l))
        })
    });
    let body = html! {
        p { a href="/" { "← batches" } }
        h1 { "Batch " code { (b) } }
        div id="action" role="status" aria-live="polite" {}
        div id="controls" {
            @if acts && held {
                button id="cancel-batch" type="button" data-url={ "/api/batches/" (b) "/cancel" } { (icon("stop")) "Cancel the batch" }
            }
            @if acts && !held && !open.is_empty() && w.actions.launcher().is_some() {
                button id="resume-batch" type="button" data-url={ "/api/batches/" (b) "/resume" } { (icon("play")) "Resume the batch" }
            }
            @if acts && !held && w.actions.launcher().is_some() && view.tasks.iter().any(|t| t.state == crate::record::TaskState::Succeeded && t.branch.is_some()) {
                button id="land-batch" type="button" data-what="land the batch" data-url={ "/api/batches/" (b) "/land" } { (icon("land")) "Land the succeeded tasks" }
            }
        }
        // `data-ended`: the page's script stops fetching its buttons and overlaps.
        table id="tasks" data-src={ "/api/batches/" (b) "/rows" } data-ended=(ended) {
            thead { tr {
                th { "Task" } th { "Provider" } th { "Runner" } th { "Status" }
                th.num.wide { "Tokens in / out / cache" } th.num { "Cost" } th { "Last" }
            } }
            tbody {
                @for t in &view.tasks {
                    @let row = TaskRow::of(t, view.last_lines.get(&t.task.id).cloned().unwrap_or_default(), &w.engine);
                    tr data-task=(row.id) {
                        td { a href={ "/batches/" (b) "/tasks/" (row.id) } { (row.id) } }
                        td { (t.provider) }
                        td.runner { (row.runner) }
                        td.status.st data-state=(row.state.as_str()) { (row.status) }
                        td.num.wide.tokens { (row.tokens) }
                        td.num.cost { (row.cost) }
                        td.last { (row.last) }
                    }
                }
            }
        }
        div id="ends" {
            @if let Some(result) = rec.result().filter(|r| !r.overlaps.is_empty()) {
                section id="overlaps" {
                    h2 { "Overlaps (" (result.overlaps.len()) ")" }
                    ul {
                        @for o in &result.overlaps {
                            li data-conflict=(!o.conflicts.is_empty()) {
                                @if o.conflicts.is_empty() { (icon("overlap")) } @else { (icon("warn")) }
                                (o.describe())
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page(&format!("aicli batch {b}"), body).into_response())
}

/// What the task page offers to do with a task's work, when it has some and the page
/// acts: land it (into the branch checked out in the repository, named) or discard it
/// (saying what that loses).
async fn delivery(
    w: &super::Web,
    batch: &crate::record::BatchRecord,
    rec: &crate::record::TaskRecord,
) -> Option<(String, String)> {
    use crate::record::TaskState::{Queued, Running};
    if w.actions.launcher().is_none() || rec.branch.is_none() || matches!(rec.state, Running | Queued) {
        return None;
    }
    let repo = batch.spec().ok()?.repo;
    let into = crate::deliver::land::current_branch(&repo)
        .await
        .unwrap_or_else(|| "the checked-out branch".to_owned());
    let lost = crate::deliver::discard::lost(&repo, rec).await.ok()?;
    Some((into, lost.describe()))
}

/// A task: its state, its question (answered from here), attempts, final response, diff,
/// MCP calls and record files, and its transcript live.
pub(super) async fn task(
    State(w): State<Shared>,
    axum::extract::Path((b, t)): axum::extract::Path<(String, String)>,
) -> Response {
    let (batch, rec) = match super::api::open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let last = rec.latest_result();
    let diff = super::api::task_diff(&batch, &rec).await;
    let calls = crate::mcp::read_calls(&batch, &t);
    let files = super::views::record_files(&batch, &t);
    let acts = w.actions.launcher().is_some();
    let question = last
        .and_then(|r| r.question.as_ref())
        .filter(|_| rec.state == crate::record::TaskState::Blocked);
    let held = !rec.state.is_final() && batch.task_held_elsewhere(&t);
    let delivery = delivery(&w, &batch, &rec).await;
    let body = html! {
        p { a href={ "/batches/" (b) } { "← batch " (b) } }
        h1 { "Task " code { (t) } " — " span.st id="state" data-state=(rec.state.as_str()) data-src={ "/api/batches/" (b) "/tasks/" (t) "/row" } { (task_status(&rec)) } }
        p id="summary" { (rec.provider) @if let Some(br) = &rec.branch { " · branch " code { (br) } } " · " (cost(last)) " · " (tokens(last)) " tokens" }
        div id="action" role="status" aria-live="polite" {}
        div id="controls" {
            @if let Some(q) = question {
                div.blocked { (icon("pause")) "The agent asks:" (answer_form(&b, &t, q, acts)) }
            }
            @if held && !w.read_only {
                button id="cancel-task" type="button" data-url={ "/api/batches/" (b) "/tasks/" (t) "/cancel" } { (icon("stop")) "Cancel the task" }
            }
            @if let Some((into, lost)) = &delivery {
                button id="land-task" type="button" data-what="land" data-url={ "/api/batches/" (b) "/tasks/" (t) "/land" } { (icon("land")) "Land into " (into) }
                button id="discard-task" type="button" data-what="discard" data-url={ "/api/batches/" (b) "/tasks/" (t) "/discard" }
                    data-confirm={ "Discard " (b) "/" (t) "? Its worktree and branch are removed, and with them " (lost) "." } { (icon("discard")) "Discard" }
            }
        }
        div id="details" {
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
            @if !rec.answers.is_empty() {
                h2 { "Answers" }
                ul { @for a in &rec.answers { li.answer { (a.answer) } } }
            }
            @if let Some(r) = last {
                @if !r.response.is_empty() { h2 { "Response" } pre id="response" { (r.response) } }
                @if let Some(e) = &r.error { h2 { "Error" } pre { (e) } }
            }
            section id="diff" {
                h2 { "Diff against the base" }
                @if let Some(n) = &diff.note { p.note { (n) } }
                @if diff.diff.is_empty() {
                    p { "No changes." }
                } @else {
                    (diff_markup(&diff.diff))
                }
            }
            section id="mcp-calls" {
                h2 { "MCP tool calls (" (calls.len()) ")" }
                @if !calls.is_empty() {
                    table {
                        thead { tr { th { "Tool" } th { "Result" } th.num { "ms" } th.wide { "At" } } }
                        tbody {
                            @for c in &calls {
                                tr.mcp-call {
                                    td { code { (c.tool) } }
                                    td { @if c.ok { (icon("check")) } @else { (icon("cross")) } span.q { (c.result) } }
                                    td.num { (c.duration_ms) }
                                    td.wide { (c.at) }
                                }
                            }
                        }
                    }
                }
            }
            section id="files" {
                h2 { "Record files" }
                ul {
                    @for f in &files {
                        li { a.file href={ "/batches/" (b) "/tasks/" (t) "/files/" (f.name) } download { (f.name) } " (" (f.bytes) " bytes)" }
                    }
                }
            }
        }
        h2 { "Transcript " small id="live" { "" } }
        ul id="events" data-src={ "/api/batches/" (b) "/tasks/" (t) "/events" } {}
        noscript { p { "The transcript needs JavaScript; the JSON API has it at " code { "/api/batches/" (b) "/tasks/" (t) "/events" } "." } }
    };
    page(&format!("aicli {b}/{t}"), body).into_response()
}

/// A unified diff, each line a span classed by its kind (escaped by maud).
fn diff_markup(diff: &str) -> Markup {
    html! {
        pre.diff {
            @for l in diff.lines() {
                @if let Some(path) = l.strip_prefix("+++ ") {
                    span.file { (path.strip_prefix("b/").unwrap_or(path)) }
                } @else if l.starts_with("--- ") || l.starts_with("diff ") || l.starts_with("index ") || l.starts_with("new file") {
                    span.meta { (l) }
                } @else if l.starts_with('+') {
                    span.add { (l) }
                } @else if l.starts_with('-') {
                    span.del { (l) }
                } @else if l.starts_with("@@") {
                    span.hunk { (l) }
                } @else {
                    span { (l) }
                }
            }
        }
    }
}

