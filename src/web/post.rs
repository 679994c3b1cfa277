//! The JSON API's actions: cancel (a request into the record, as `aicli cancel`), and
//! answer, resume and start, each run as its `aicli` command ([`super::actions`]).
//! Every one is refused under `--read-only`; a browser's needs its CSRF token.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::actions::{
    self, ActionKind, ActionStarted, AnswerRequest, DiscardRequest, LandRequest, Refused,
    StartTaskRequest,
};
use super::api::{CancelView, open_task};
use super::{Shared, Web, checked_id, not_found};
use crate::record::TaskState;

fn read_only() -> Response {
    (
        StatusCode::FORBIDDEN,
        "this web view is --read-only: it answers, resumes, starts and cancels nothing",
    )
        .into_response()
}

fn refused(status: StatusCode, m: impl Into<String>) -> Response {
    (status, m.into()).into_response()
}

pub(super) async fn cancel_batch(State(w): State<Shared>, Path(b): Path<String>) -> Response {
    match checked_id(&b) {
        Ok(b) => cancel(&w, b.to_owned()),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn cancel_task(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Response {
    match open_task(&w, &b, &t) {
        Ok(_) => cancel(&w, format!("{b}/{t}")),
        Err(r) => *r,
    }
}

fn cancel(w: &Web, target: String) -> Response {
    if w.read_only {
        return read_only();
    }
    match w.engine.request_cancel(&w.store, &target, "web") {
        Ok(t) => (
            StatusCode::ACCEPTED,
            Json(CancelView {
                batch_id: t.batch.batch_id(),
                task: t.task,
                cancelling: t.held,
            }),
        )
            .into_response(),
        Err(crate::engine::EngineError::NotFound(m)) => not_found(m),
        Err(e) => refused(StatusCode::CONFLICT, e.to_string()),
    }
}

pub(super) async fn answer(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
    Json(req): Json<AnswerRequest>,
) -> Response {
    let (_, rec) = match open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if req.text.trim().is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            format!("the answer to {b}/{t} is empty: give the text the agent should continue with"),
        );
    }
    if rec.state != TaskState::Blocked {
        return refused(
            StatusCode::CONFLICT,
            format!("{b}/{t} is {}, not blocked: there is no question to answer", rec.state.as_str()),
        );
    }
    if let Some(a) = w.actions.list().into_iter().find(|a| {
        a.state == actions::ActionState::Running
            && a.batch_id == b
            && (a.task_id.as_deref() == Some(t.as_str()) || a.kind == ActionKind::Resume)
    }) {
        return refused(
            StatusCode::CONFLICT,
            format!("{b}/{t} is being answered or resumed already (action {})", a.id),
        );
    }
    start(&w, actions::answer(&b, &t, &req.text))
}

pub(super) async fn resume(State(w): State<Shared>, Path(b): Path<String>) -> Response {
    let b = match checked_id(&b) {
        Ok(b) => b.to_owned(),
        Err(e) => return e.into_response(),
    };
    if let Err(m) = w.store.open_batch(&b) {
        return not_found(m);
    }
    start_for_batch(&w, &b, actions::resume(&b))
}

/// `POST /api/batches/B/tasks/T/land`: `aicli land B/T`.
pub(super) async fn land_task(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
    body: String,
) -> Response {
    let (_, rec) = match open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if matches!(rec.state, TaskState::Running | TaskState::Queued) {
        return refused(
            StatusCode::CONFLICT,
            format!("{b}/{t} is {}: land it once it has ended", rec.state.as_str()),
        );
    }
    match land_request(&body) {
        Ok(req) => start_for_batch(&w, &b, actions::land(&b, Some(&t), &req)),
        Err(m) => refused(StatusCode::BAD_REQUEST, m),
    }
}

/// `POST /api/batches/B/land`: `aicli land B` (its succeeded tasks, in order).
pub(super) async fn land_batch(State(w): State<Shared>, Path(b): Path<String>, body: String) -> Response {
    let b = match checked_id(&b) {
        Ok(b) => b.to_owned(),
        Err(e) => return e.into_response(),
    };
    if let Err(m) = w.store.open_batch(&b) {
        return not_found(m);
    }
    match land_request(&body) {
        Ok(req) => start_for_batch(&w, &b, actions::land(&b, None, &req)),
        Err(m) => refused(StatusCode::BAD_REQUEST, m),
    }
}

/// A land's body: empty (a merge into the checked-out branch), or a [`LandRequest`]
/// whose branch is a plain name; else why not (a 400's text).
fn land_request(body: &str) -> Result<LandRequest, String> {
    if body.trim().is_empty() {
        return Ok(LandRequest::default());
    }
    let req: LandRequest =
        serde_json::from_str(body).map_err(|e| format!("the land request: {e}"))?;
    if let Some(into) = &req.into {
        let ok = !into.is_empty()
            && !into.starts_with(['-', '/', '.'])
            && !into.contains("..")
            && into.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c));
        if !ok {
            return Err(format!("into: not a branch name: {into:?}"));
        }
    }
    Ok(req)
}

/// `POST /api/batches/B/tasks/T/discard` with `{"confirm": true}`: `aicli discard B/T
/// --yes`. Without the confirmation, 400 saying what would be lost.
pub(super) async fn discard(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
    body: String,
) -> Response {
    let (batch, rec) = match open_task(&w, &b, &t) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if matches!(rec.state, TaskState::Running | TaskState::Queued) {
        return refused(
            StatusCode::CONFLICT,
            format!("{b}/{t} is {}: cancel it first", rec.state.as_str()),
        );
    }
    let confirmed = serde_json::from_str::<DiscardRequest>(&body).is_ok_and(|r| r.confirm);
    if !confirmed {
        let repo = batch.spec().map(|s| s.repo).unwrap_or_default();
        let lost = crate::deliver::discard::lost(&repo, &rec)
            .await
            .map(|l| l.describe())
            .unwrap_or_else(|e| format!("(cannot tell: {e})"));
        return refused(
            StatusCode::BAD_REQUEST,
            format!("discarding {b}/{t} loses {lost}: send {{\"confirm\": true}} to discard it"),
        );
    }
    start_for_batch(&w, &b, actions::discard(&b, &t))
}

/// Starts `cmd` on batch `b` unless an action runs on it already (409).
fn start_for_batch(w: &Web, b: &str, cmd: actions::Command) -> Response {
    if let Some(a) = w
        .actions
        .list()
        .into_iter()
        .find(|a| a.state == actions::ActionState::Running && a.batch_id == b)
    {
        return refused(
            StatusCode::CONFLICT,
            format!("batch {b} has an action running already (action {})", a.id),
        );
    }
    start(w, cmd)
}

pub(super) async fn start_task(State(w): State<Shared>, Json(req): Json<StartTaskRequest>) -> Response {
    if let Some(p) = req.provider.as_deref().filter(|p| !p.trim().is_empty())
        && w.engine.registry().get(p).is_err()
    {
        return refused(
            StatusCode::BAD_REQUEST,
            format!("provider: no provider {p:?} (there are {})", w.engine.registry().names().join(", ")),
        );
    }
    let task = match req.task() {
        Ok(t) => t,
        Err(m) => return refused(StatusCode::BAD_REQUEST, m),
    };
    new_batch(&w, ActionKind::StartTask, &serde_json::json!({ "tasks": [task] }))
}

pub(super) async fn start_batch(State(w): State<Shared>, body: String) -> Response {
    let file = match crate::cli::tasks_file::TasksFile::parse(&body, "the tasks file") {
        Ok(f) => f,
        Err(m) => return refused(StatusCode::BAD_REQUEST, m),
    };
    if file.repo.is_some() {
        return refused(
            StatusCode::BAD_REQUEST,
            format!(
                "the tasks file: at repo: the web view starts batches in its own repository ({}); leave repo out",
                w.store.root().display()
            ),
        );
    }
    match serde_json::to_value(&file) {
        Ok(v) => new_batch(&w, ActionKind::StartBatch, &v),
        Err(e) => refused(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

fn new_batch(w: &Web, kind: ActionKind, tasks: &serde_json::Value) -> Response {
    let Some(l) = w.actions.launcher() else {
        return read_only();
    };
    let dir = w.store.root();
    if let Err(e) = crate::util::ensure_private_dir(dir) {
        return refused(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot make {}: {e}", dir.display()));
    }
    match actions::new_batch(kind, l, dir, tasks) {
        Ok(cmd) => start(w, cmd),
        Err(e) => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the tasks file in {}: {e}", dir.display()),
        ),
    }
}

fn start(w: &Web, cmd: actions::Command) -> Response {
    if w.read_only {
        return read_only();
    }
    match w.actions.start(cmd) {
        Ok(action) => (
            StatusCode::ACCEPTED,
            Json(ActionStarted {
                batch_url: format!("/batches/{}", action.batch_id),
                action,
            }),
        )
            .into_response(),
        Err(Refused::Disabled) => read_only(),
        Err(Refused::Busy) => refused(
            StatusCode::TOO_MANY_REQUESTS,
            "8 actions run already: wait for one to end",
        ),
        Err(Refused::Spawn(m)) => refused(StatusCode::INTERNAL_SERVER_ERROR, m),
    }
}
