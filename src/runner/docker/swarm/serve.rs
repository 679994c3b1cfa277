//! The HTTP side of the swarm protocol: what a job's runner fetches and posts, per
//! attempt, behind that attempt's token (`Authorization: Bearer`, compared in constant
//! time).
//!
//! | request | what |
//! |---|---|
//! | `GET /swarm/{key}/start` | the start commit (and the uncommitted carry) as a git bundle ([`super::up`]) |
//! | `GET /swarm/{key}/files` | the rest of the run's files, a tar unpacked at `/` |
//! | `POST /swarm/{key}/out`, `/err` | the CLI's stdout and stderr, streamed as they come |
//! | `POST /swarm/{key}/work` | the git bundle of the work (at most [`MAX_DOWNLOAD`] bytes) |
//! | `POST /swarm/{key}/home` | a tar of the task's home as the run left it (same limit) |
//! | `GET /swarm/{key}/signal` | answers `TERM` once aicli wants the CLI stopped (a cancel, a timeout): the runner asks again whenever the request ends otherwise |
//! | `POST /swarm/{key}/exit` | `{"code":…,"signal":…}`, last |

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use bytes::Bytes;
use futures_util::StreamExt;
use subtle::ConstantTimeEq;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::super::remote::MAX_DOWNLOAD;
use crate::util::lock;

/// How an attempt's job ended, as aicli learnt it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The runner posted the CLI's exit: its code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// The job ended without a word from the runner (it could not start, it was
    /// killed): why.
    Lost(String),
    /// The node the job ran on went down mid-run, and its runner said nothing more: why.
    /// Not the task's doing: the run ends interrupted, for `aicli resume`.
    NodeLost(String),
}

/// One attempt's side of the protocol.
#[derive(Debug)]
pub struct Slot {
    token: String,
    /// The start bundle.
    bundle: PathBuf,
    /// The rest of the run's files.
    files: PathBuf,
    /// Where what the runner posts lands (`work.bundle`, `home.tar`).
    pub dir: PathBuf,
    out: Mutex<Option<mpsc::Sender<std::io::Result<Bytes>>>>,
    err: Mutex<Option<mpsc::Sender<std::io::Result<Bytes>>>>,
    /// Set once, when the run ended.
    pub ended: watch::Sender<Option<Ended>>,
    /// Set when aicli wants the CLI stopped.
    stop: watch::Sender<bool>,
    /// Whether the runner fetched the start ([`START_FETCHED`]), or aicli turned it away
    /// before it did ([`START_REFUSED`]).
    start: std::sync::atomic::AtomicU8,
    /// The node the swarm placed the job on, once it did ([`super::nodes::describe`]).
    pub node: Mutex<Option<String>>,
    /// What the run's watch says while the job waits for a node or lands on one (for
    /// the task's live stream).
    notices: mpsc::UnboundedSender<String>,
    notices_rx: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
}

impl Slot {
    /// A slot whose runner authenticates with `token`, fetches what `staged` names and
    /// posts into `dir`; its stdout and stderr go to `out` and `err`.
    pub fn new(
        token: String,
        staged: &super::up::Staged,
        dir: PathBuf,
        out: mpsc::Sender<std::io::Result<Bytes>>,
        err: mpsc::Sender<std::io::Result<Bytes>>,
    ) -> Slot {
        let notices = mpsc::unbounded_channel();
        Slot {
            token,
            bundle: staged.bundle.clone(),
            files: staged.files.clone(),
            dir,
            out: Mutex::new(Some(out)),
            err: Mutex::new(Some(err)),
            ended: watch::channel(None).0,
            stop: watch::channel(false).0,
            start: std::sync::atomic::AtomicU8::new(START_WAITING),
            node: Mutex::new(None),
            notices: notices.0,
            notices_rx: Mutex::new(Some(notices.1)),
        }
    }

    /// Turns the runner away if it has not fetched the start yet: `true` when so (no CLI
    /// was started, nor will be, by this attempt's job).
    pub fn refuse_start(&self) -> bool {
        use std::sync::atomic::Ordering;
        match self
            .start
            .compare_exchange(START_WAITING, START_REFUSED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == START_REFUSED,
        }
    }

    /// Whether the runner fetched the start (so it ran, or runs, the CLI).
    pub fn start_fetched(&self) -> bool {
        self.start.load(std::sync::atomic::Ordering::Acquire) == START_FETCHED
    }

    /// Says `what` on the task's live stream (once someone took the notices).
    pub fn notice(&self, what: String) {
        tracing::info!("{what}");
        let _ = self.notices.send(what);
    }

    /// The notices, for the run's live stream (once).
    pub fn take_notices(&self) -> Option<mpsc::UnboundedReceiver<String>> {
        lock(&self.notices_rx).take()
    }

    /// Asks the runner to stop the CLI (SIGTERM: the wrapper packs the work first).
    pub fn request_stop(&self) {
        self.stop.send_replace(true);
    }

    /// Ends the run as `how` unless it already ended; closes its output streams when
    /// nothing streams them (a runner that never started).
    pub fn end(&self, how: Ended) {
        self.ended.send_if_modified(|e| {
            if e.is_some() {
                return false;
            }
            *e = Some(how);
            true
        });
        lock(&self.out).take();
        lock(&self.err).take();
    }
}

const START_WAITING: u8 = 0;
const START_FETCHED: u8 = 1;
const START_REFUSED: u8 = 2;

/// The attempts being served, by key.
pub type Slots = Arc<Mutex<HashMap<String, Arc<Slot>>>>;

/// The routes (see the module docs).
pub fn router(slots: Slots) -> Router {
    Router::new()
        .route("/swarm/{key}/{part}", get(fetch).post(receive))
        .with_state(slots)
}

/// The slot of `key` when `headers` carry its token.
fn authorized(slots: &Slots, key: &str, headers: &HeaderMap) -> Result<Arc<Slot>, StatusCode> {
    let slot = lock(slots).get(key).cloned().ok_or(StatusCode::NOT_FOUND)?;
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(slot.token.as_bytes())) {
        Ok(slot)
    } else {
        tracing::warn!(attempt = %key, "swarm runner request with a wrong token refused");
        Err(StatusCode::UNAUTHORIZED)
    }
}

/// `GET`: the start bundle, the files, the stop signal.
async fn fetch(
    State(slots): State<Slots>,
    Path((key, part)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Body, StatusCode> {
    let slot = authorized(&slots, &key, &headers)?;
    match part.as_str() {
        "start" => {
            use std::sync::atomic::Ordering;
            let was = slot
                .start
                .compare_exchange(START_WAITING, START_FETCHED, Ordering::AcqRel, Ordering::Acquire)
                .unwrap_or_else(|now| now);
            if was == START_REFUSED {
                return Err(StatusCode::GONE);
            }
            serve_file(&key, &slot.bundle).await
        }
        "files" => serve_file(&key, &slot.files).await,
        // Held open until the run is to stop.
        "signal" => {
            let mut stop = slot.stop.subscribe();
            let _ = stop.wait_for(|s| *s).await;
            Ok(Body::from("TERM"))
        }
        _ => Err(StatusCode::NOT_FOUND),
    }
}

/// `POST`: the CLI's output, the work, the home, the exit.
async fn receive(
    State(slots): State<Slots>,
    Path((key, part)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> StatusCode {
    let slot = match authorized(&slots, &key, &headers) {
        Ok(s) => s,
        Err(s) => return s,
    };
    match part.as_str() {
        "out" => {
            let tx = lock(&slot.out).take();
            stream_into(tx, body).await
        }
        "err" => {
            let tx = lock(&slot.err).take();
            stream_into(tx, body).await
        }
        "work" => save(&slot, "work.bundle", body).await,
        "home" => save(&slot, "home.tar", body).await,
        "exit" => exit(&slot, body).await,
        _ => StatusCode::NOT_FOUND,
    }
}

async fn serve_file(key: &str, path: &std::path::Path) -> Result<Body, StatusCode> {
    let file = tokio::fs::File::open(path).await.map_err(|e| {
        tracing::warn!(attempt = %key, error = %e, "the run's files are gone");
        StatusCode::GONE
    })?;
    Ok(Body::from_stream(tokio_util::io::ReaderStream::new(file)))
}

/// Streams a request body into the run's stdout or stderr (taken once: a second stream
/// is refused).
async fn stream_into(
    sender: Option<mpsc::Sender<std::io::Result<Bytes>>>,
    body: Body,
) -> StatusCode {
    let Some(tx) = sender else {
        return StatusCode::CONFLICT;
    };
    let mut s = body.into_data_stream();
    while let Some(chunk) = s.next().await {
        let item = chunk.map_err(std::io::Error::other);
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break;
        }
    }
    StatusCode::NO_CONTENT
}

/// Writes a posted body to `name` in the slot's directory, refusing more than
/// [`MAX_DOWNLOAD`] bytes (the partial file is removed).
async fn save(slot: &Slot, name: &str, body: Body) -> StatusCode {
    let path = slot.dir.join(name);
    let part = slot.dir.join(format!("{name}.part"));
    let written = async {
        let mut f = tokio::fs::File::create(&part).await?;
        let mut n: u64 = 0;
        let mut s = body.into_data_stream();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            n += chunk.len() as u64;
            if n > MAX_DOWNLOAD {
                return Err(std::io::Error::other(format!(
                    "larger than {MAX_DOWNLOAD} bytes"
                )));
            }
            f.write_all(&chunk).await?;
        }
        f.flush().await?;
        tokio::fs::rename(&part, &path).await
    }
    .await;
    match written {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            tracing::warn!(file = %path.display(), error = %e, "what a swarm runner posted is not kept");
            StatusCode::PAYLOAD_TOO_LARGE
        }
    }
}

/// What `/exit` carries.
#[derive(serde::Deserialize)]
struct ExitBody {
    code: Option<i32>,
    #[serde(default)]
    error: Option<String>,
}

async fn exit(slot: &Slot, body: Body) -> StatusCode {
    let Ok(body) = axum::body::to_bytes(body, 4096).await else {
        return StatusCode::PAYLOAD_TOO_LARGE;
    };
    let Ok(b) = serde_json::from_slice::<ExitBody>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    slot.end(match b.error {
        Some(e) => Ended::Lost(format!("the swarm runner failed: {e}")),
        None => Ended::Exited(b.code),
    });
    StatusCode::NO_CONTENT
}
