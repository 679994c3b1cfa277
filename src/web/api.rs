//! The JSON API's reads: batches, blocked tasks, a batch, a task, its live events
//! (SSE), its diff, its MCP calls, its record's files, and the page's actions. Every
//! type they answer with is in [`WebApi`], whose schema is `schemas/web_api.schema.json`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use futures_util::StreamExt;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::actions::{ActionStarted, ActionView, AnswerRequest, StartTaskRequest};
use super::views::{RecordFile, TaskDiff, TaskRow};
use super::{BadId, Shared, auth, checked_id, events, not_found};
use crate::batch::BlockedTask;
use crate::mcp::McpCallRecord;
use crate::record::{BatchRecord, BatchSummary, TaskRecord};

/// Every type of the web view's JSON API, one field per use: its schema is what scripts
/// read (`schemas/web_api.schema.json`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct WebApi {
    /// `GET /api/session`.
    pub session: SessionView,
    /// `GET /api/batches`: newest first.
    pub batches: Vec<BatchSummary>,
    /// `GET /api/blocked`.
    pub blocked: Vec<BlockedTask>,
    /// `GET /api/batches/B`.
    pub batch: BatchView,
    /// `GET /api/batches/B/rows`: each task's row as the batch page shows it (what the
    /// page polls).
    pub rows: Vec<TaskRow>,
    /// `GET /api/batches/B/tasks/T`.
    pub task: TaskRecord,
    /// `GET /api/batches/B/tasks/T/row`: the task's row alone (what its page polls).
    pub row: TaskRow,
    /// Each `data` of an `agent` event of `GET /api/batches/B/tasks/T/events` (SSE, id
    /// `END.K.AICLI.N`): the CLI's normalized events and those aicli's MCP server made
    /// (questions, log lines), in order.
    pub event: aicli_providers::AgentEvent,
    /// Each `data` of an `answer` event of the same stream: a human's answer, before
    /// the attempt it started.
    pub answer: crate::record::AnswerRecord,
    /// `GET /api/batches/B/tasks/T/diff`.
    pub diff: TaskDiff,
    /// `GET /api/batches/B/tasks/T/mcp-calls`: oldest first.
    pub mcp_calls: Vec<McpCallRecord>,
    /// `GET /api/batches/B/tasks/T/files` (each downloadable at
    /// `/api/batches/B/tasks/T/files/NAME`).
    pub files: Vec<RecordFile>,
    /// `POST /api/batches/B/cancel` and `POST /api/batches/B/tasks/T/cancel`: 202.
    pub cancelled: CancelView,
    /// The body of `POST /api/batches/B/tasks/T/answer`.
    pub answer_request: AnswerRequest,
    /// The body of `POST /api/tasks`.
    pub start_task_request: StartTaskRequest,
    /// The body of `POST /api/batches/B/land` and `POST /api/batches/B/tasks/T/land`.
    pub land_request: super::actions::LandRequest,
    /// The body of `POST /api/batches/B/tasks/T/discard`.
    pub discard_request: super::actions::DiscardRequest,
    /// The body of `POST /api/batches`: a tasks file.
    pub start_batch_request: crate::cli::tasks_file::TasksFile,
    /// 202 from an answer, a resume (`POST /api/batches/B/resume`) or a start.
    pub action_started: ActionStarted,
    /// `GET /api/actions/ID`; `GET /api/actions` gives a list of them, newest first.
    pub action: ActionView,
}

/// `GET /api/session`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionView {
    /// The token a browser session sends in `X-CSRF-Token` with each POST (`null` for
    /// the API token, which needs none).
    pub csrf: Option<String>,
    /// Whether this server answers, resumes and starts (not `--read-only`).
    pub actions: bool,
    /// The providers a task may name.
    pub providers: Vec<String>,
    /// The provider a task that names none gets.
    pub default_provider: String,
}

/// `GET /api/batches/B`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct BatchView {
    /// Its summary (as `aicli runs --json`).
    pub summary: Option<BatchSummary>,
    /// Its tasks' records.
    pub tasks: Vec<TaskRecord>,
    /// Each task's last tool call or text line, by task id.
    pub last_lines: BTreeMap<String, String>,
}

/// A cancel request written.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CancelView {
    /// The batch.
    pub batch_id: String,
    /// The task, when one was named.
    pub task: Option<String>,
    /// The tasks a process is running or has queued, which it now cancels.
    pub cancelling: Vec<String>,
}

pub(super) async fn session(State(w): State<Shared>, req: Request) -> Response {
    let csrf = match req.extensions().get::<auth::Caller>() {
        Some(auth::Caller::Browser(s)) => Some(s.csrf.clone()),
        _ => None,
    };
    axum::Json(SessionView {
        csrf,
        actions: w.actions.launcher().is_some(),
        providers: w.engine.registry().names(),
        default_provider: w.engine.config().default_provider.clone(),
    })
    .into_response()
}

pub(super) async fn batches(State(w): State<Shared>) -> Response {
    let list: Vec<_> = w.store.list().iter().filter_map(|b| b.summary().ok()).collect();
    axum::Json(list).into_response()
}

pub(super) async fn blocked(State(w): State<Shared>) -> Response {
    axum::Json(w.engine.blocked(&w.store)).into_response()
}

pub(super) async fn batch(State(w): State<Shared>, Path(b): Path<String>) -> Result<Response, BadId> {
    let rec = match w.store.open_batch(checked_id(&b)?) {
        Ok(r) => r,
        Err(m) => return Ok(not_found(m)),
    };
    Ok(axum::Json(batch_view(&w, &rec)).into_response())
}

/// Each task's row as the batch page shows it.
pub(super) async fn rows(State(w): State<Shared>, Path(b): Path<String>) -> Result<Response, BadId> {
    let rec = match w.store.open_batch(checked_id(&b)?) {
        Ok(r) => r,
        Err(m) => return Ok(not_found(m)),
    };
    let rows: Vec<TaskRow> = rec
        .tasks()
        .unwrap_or_default()
        .iter()
        .map(|t| TaskRow::of(t, w.last_lines.get(&rec, t, w.engine.registry()), &w.engine))
        .collect();
    Ok(axum::Json(rows).into_response())
}

/// One task's row.
pub(super) async fn row(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok((batch, rec)) => {
            let last = w.last_lines.get(&batch, &rec, w.engine.registry());
            axum::Json(TaskRow::of(&rec, last, &w.engine)).into_response()
        }
        Err(r) => *r,
    }
}

/// A batch's view: its summary, its tasks, and their last lines.
pub(super) fn batch_view(w: &super::Web, rec: &BatchRecord) -> BatchView {
    let tasks = rec.tasks().unwrap_or_default();
    let last_lines = tasks
        .iter()
        .map(|t| (t.task.id.clone(), w.last_lines.get(rec, t, w.engine.registry())))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    BatchView {
        summary: rec.summary().ok(),
        tasks,
        last_lines,
    }
}

/// The batch and task records named by a URL's ids: 400 for a bad id, 404 for none.
pub(super) fn open_task(
    w: &super::Web,
    b: &str,
    t: &str,
) -> Result<(BatchRecord, TaskRecord), Box<Response>> {
    let boxed = |r: Response| Box::new(r);
    let (b, t) = (
        checked_id(b).map_err(|e| boxed(e.into_response()))?,
        checked_id(t).map_err(|e| boxed(e.into_response()))?,
    );
    let batch = w.store.open_batch(b).map_err(|m| boxed(not_found(m)))?;
    let rec = batch.task(t).map_err(|m| boxed(not_found(m)))?;
    Ok((batch, rec))
}

pub(super) async fn task(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok((_, rec)) => axum::Json(rec).into_response(),
        Err(r) => *r,
    }
}

pub(super) async fn diff(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok((batch, rec)) => axum::Json(task_diff(&batch, &rec).await).into_response(),
        Err(r) => *r,
    }
}

/// The diff of `rec`'s work (its batch's repository for the branch, when its worktree
/// is gone).
pub(super) async fn task_diff(batch: &BatchRecord, rec: &TaskRecord) -> TaskDiff {
    let repo = batch.spec().map(|s| s.repo).unwrap_or_default();
    super::views::diff(rec, &repo).await
}

pub(super) async fn mcp_calls(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok((batch, rec)) => {
            axum::Json(crate::mcp::read_calls(&batch, &rec.task.id)).into_response()
        }
        Err(r) => *r,
    }
}

pub(super) async fn files(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok((batch, rec)) => axum::Json(super::views::record_files(&batch, &rec.task.id)).into_response(),
        Err(r) => *r,
    }
}

/// One file of a task's record, as a download (streamed, never through a symlink).
pub(super) async fn file(
    State(w): State<Shared>,
    Path((b, t, name)): Path<(String, String, String)>,
) -> Response {
    let (batch, rec) = match open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if let Err(e) = checked_id(&name) {
        return e.into_response();
    }
    let Some((f, len)) = super::views::open_record_file(&batch, &rec.task.id, &name) else {
        return not_found(format!("no file {name} in the record of {b}/{t}"));
    };
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(f));
    let mut res = Body::from_stream(stream).into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{b}-{t}-{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    res
}

pub(super) async fn task_events(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (batch, rec) = match open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(events::Cursor::parse);
    let rx = events::stream(
        batch,
        rec.task.id,
        w.engine.registry().clone(),
        w.engine.config().engine.line_cap_bytes,
        after,
        w.watch.clone(),
    );
    // It ends when the server stops (a stream never ends on its own: a finished task
    // may be resumed), so a stopping server is not held open by a page left open.
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (e, rx))
    })
    .take_until(w.stop.clone().cancelled_owned());
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

pub(super) async fn actions(State(w): State<Shared>) -> Response {
    axum::Json(w.actions.list()).into_response()
}

pub(super) async fn action(State(w): State<Shared>, Path(id): Path<String>) -> Response {
    match id.parse::<u64>().ok().and_then(|id| w.actions.get(id)) {
        Some(a) => axum::Json(a).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no action {id:?} on this server")).into_response(),
    }
}
