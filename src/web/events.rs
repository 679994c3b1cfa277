//! A task's live transcript as Server-Sent Events, read from its run record, in the
//! order things happened:
//! - every normalized event of every attempt (event `agent`), decoded from
//!   `events.ndjson` with the task's provider as the lines are appended;
//! - the events aicli's MCP server made for it (event `agent`: its questions, log lines),
//!   from `aicli-events.ndjson`, each after the agent events of its attempt so far;
//! - each human answer (event `answer`, an [`AnswerRecord`]), from the task record,
//!   before the attempt it started.
//!
//! An event's id is `END.K.AICLI.N`: the byte offset in `events.ndjson` just past the
//! line of the last agent event sent and that event's place among its line's events, the
//! offset in `aicli-events.ndjson` just past the last line sent from there, and how many
//! answers were sent. A client that reconnects with `Last-Event-ID` gets exactly the
//! events after it, so a reload or a dropped connection loses nothing and shows nothing
//! twice.
//!
//! The record is the buffer: a reader that falls behind only makes this stream's own
//! producer wait (its queue is bounded), never the run, which writes the record anyway.
//!
//! The producer looks at the record when the kernel says the task's directory changed
//! (the server's inotify watch, [`super::watch`]: a line appended, a file replaced), and
//! every 15 s besides; where the directory cannot be watched (not made yet, no
//! inotify), every 100 ms.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, SystemTime};

use aicli_providers::{AgentEvent, Decoder, EventKind, Line, ParseContext, ProviderRegistry};
use axum::response::sse::Event;
use tokio::sync::mpsc;

use crate::record::{AnswerRecord, AttemptRecord, BatchRecord, TaskRecord, files};

/// How often the record is looked at for new lines when its directory cannot be watched.
const POLL: Duration = Duration::from_millis(100);
/// How often it is looked at anyway when it is watched: a guard against a change the
/// kernel did not report (the watch's end and a lost event queue are reported, and
/// wake the stream), rare enough that open pages on finished tasks cost next to nothing.
const WATCHED_POLL: Duration = Duration::from_secs(15);
/// Read at most this much of the record at once.
const CHUNK: usize = 1 << 20;
/// Events queued for a client at most.
const QUEUE: usize = 256;

/// A position among the agent events: past line end `end`, event `k` of that line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
struct Position {
    end: u64,
    k: usize,
}

/// Where a stream is (see the module's documentation): an event's id, and what a
/// `Last-Event-ID` resumes after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Cursor {
    agent: Position,
    aicli: u64,
    answers: usize,
}

impl Cursor {
    /// Parses a `Last-Event-ID` (`END.K.AICLI.N`).
    pub(crate) fn parse(s: &str) -> Option<Cursor> {
        let mut parts = s.trim().split('.').map(str::parse::<u64>);
        let mut next = || parts.next()?.ok();
        let c = Cursor {
            agent: Position {
                end: next()?,
                k: usize::try_from(next()?).ok()?,
            },
            aicli: next()?,
            answers: usize::try_from(next()?).ok()?,
        };
        next().is_none().then_some(c)
    }

    fn id(self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.agent.end, self.agent.k, self.aicli, self.answers
        )
    }
}

/// Starts the stream of task `task` of `batch`, after `after` when given, woken by
/// `watch`.
pub(crate) fn stream(
    batch: BatchRecord,
    task: String,
    registry: ProviderRegistry,
    line_cap: usize,
    after: Option<Cursor>,
    watch: super::watch::DirWatch,
) -> mpsc::Receiver<Result<Event, Infallible>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let mut p = Producer {
            wake: Wake {
                dir: batch.task_dir(&task),
                batch_dir: batch.dir().to_path_buf(),
                watch,
                sub: None,
                batch_sub: None,
            },
            batch,
            task,
            registry,
            line_cap,
            sent: after.unwrap_or_default(),
            decoder: None,
            attempt: 0,
            offset: 0,
            evs: Vec::new(),
            rec: None,
            tx,
        };
        p.run().await;
    });
    rx
}

struct Producer {
    batch: BatchRecord,
    task: String,
    registry: ProviderRegistry,
    line_cap: usize,
    /// What the client has (the last id sent, or the one it resumed after).
    sent: Cursor,
    decoder: Option<Box<dyn Decoder>>,
    /// The attempt the decoder is for (1-based; 0: none yet).
    attempt: u32,
    /// How far `events.ndjson` has been decoded.
    offset: u64,
    evs: Vec<AgentEvent>,
    /// The task's record as last read (once per look at the files).
    rec: Option<TaskRecord>,
    tx: mpsc::Sender<Result<Event, Infallible>>,
    wake: Wake,
}

/// What wakes a producer: the server's watch on the task's directory (its streams) and
/// on the batch's (its record's lines in the journal), else the poll.
struct Wake {
    dir: std::path::PathBuf,
    batch_dir: std::path::PathBuf,
    watch: super::watch::DirWatch,
    sub: Option<super::watch::Subscription>,
    batch_sub: Option<super::watch::Subscription>,
}

impl Wake {
    /// Until either directory changes (or the poll's time is up).
    async fn wait(&mut self) {
        let live = |s: &Option<super::watch::Subscription>| {
            s.as_ref().is_some_and(super::watch::Subscription::live)
        };
        if !live(&self.sub) {
            self.sub = self.watch.subscribe(&self.dir);
        }
        if !live(&self.batch_sub) {
            self.batch_sub = self.watch.subscribe(&self.batch_dir);
        }
        let poll = if self.sub.is_some() { WATCHED_POLL } else { POLL };
        tokio::select! {
            _ = changed(self.sub.as_ref()) => {}
            _ = changed(self.batch_sub.as_ref()) => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Until `s` reports a change; never without a subscription.
async fn changed(s: Option<&super::watch::Subscription>) {
    match s {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// The client has gone.
struct Gone;

impl Producer {
    async fn run(&mut self) {
        while self.look(files::EVENTS, files::AICLI_EVENTS).await.is_ok() {}
    }

    /// One look at the record: what is new is sent, then (when nothing was) a pause.
    async fn look(&mut self, events: &str, aicli: &str) -> Result<(), Gone> {
        let cap = CHUNK.max(self.line_cap + 2);
        let chunk = read_from(self.batch.open_task_file(&self.task, events), self.offset, cap);
        // Read after the lines: an attempt's record is written before its first line.
        if let Ok(rec) = self.batch.task(&self.task) {
            self.rec = Some(rec);
        }
        if chunk.len() == cap && !chunk.contains(&b'\n') {
            // A line longer than the record's cap: said once, as the decoder would.
            return self.overlong(events, aicli, &chunk, cap).await;
        }
        let mut start = 0;
        while let Some(nl) = chunk[start..].iter().position(|&b| b == b'\n') {
            let line = &chunk[start..start + nl];
            let line_start = self.offset + start as u64;
            let end = line_start + nl as u64 + 1;
            start += nl + 1;
            self.decoder_for(line_start, aicli).await?;
            self.decode(line, end).await?;
        }
        self.offset += start as u64;
        if chunk.len() < cap {
            // Everything the CLI printed so far is sent: so is what aicli added since.
            self.side_events(aicli, None).await?;
        }
        if start == 0 {
            tokio::select! {
                _ = self.tx.closed() => return Err(Gone),
                _ = self.wake.wait() => {}
            }
        }
        Ok(())
    }

    /// Decodes one line (its own, or an over-long one's prefix) and sends its events.
    async fn decode(&mut self, line: &[u8], end: u64) -> Result<(), Gone> {
        let Some(d) = self.decoder.as_mut() else {
            return Ok(());
        };
        self.evs.clear();
        if line.len() > self.line_cap {
            let prefix = &line[..self.line_cap];
            let len = line.len() as u64;
            let cap = self.line_cap;
            d.decode(Line::Overlong { len, prefix, cap }, &mut self.evs);
        } else {
            d.decode(Line::Bytes(line), &mut self.evs);
        }
        self.send_decoded(end).await
    }

    async fn send_decoded(&mut self, end: u64) -> Result<(), Gone> {
        let evs = std::mem::take(&mut self.evs);
        for (k, ev) in evs.iter().enumerate() {
            let pos = Position { end, k };
            if pos <= self.sent.agent {
                continue;
            }
            self.sent.agent = pos;
            self.send("agent", &ev).await?;
        }
        self.evs = evs;
        Ok(())
    }

    async fn send(&mut self, name: &str, data: &impl serde::Serialize) -> Result<(), Gone> {
        let e = Event::default()
            .id(self.sent.id())
            .event(name)
            .json_data(data)
            .unwrap_or_else(|_| Event::default().comment("unserializable event"));
        self.tx.send(Ok(e)).await.map_err(|_| Gone)
    }

    /// Sends the over-long line that starts at the offset (its first `chunk`) as an
    /// over-long line, and moves past its end once it has one.
    async fn overlong(
        &mut self,
        path: &str,
        aicli: &str,
        chunk: &[u8],
        cap: usize,
    ) -> Result<(), Gone> {
        let mut end = self.offset + chunk.len() as u64;
        loop {
            let more = read_from(self.batch.open_task_file(&self.task, path), end, cap);
            if let Some(nl) = more.iter().position(|&b| b == b'\n') {
                end += nl as u64 + 1;
                break;
            }
            if more.is_empty() {
                self.wake.wait().await;
                if self.tx.is_closed() {
                    return Err(Gone);
                }
            }
            end += more.len() as u64;
        }
        self.decoder_for(self.offset, aicli).await?;
        if let Some(d) = self.decoder.as_mut() {
            self.evs.clear();
            d.decode(
                Line::Overlong {
                    len: end - self.offset - 1,
                    prefix: &chunk[..self.line_cap.min(chunk.len())],
                    cap: self.line_cap,
                },
                &mut self.evs,
            );
            self.send_decoded(end).await?;
        }
        self.offset = end;
        Ok(())
    }

    /// The decoder of the attempt whose stdout holds the line at `line_start`: a new one
    /// (with that attempt's context) when the line starts a later attempt, after what
    /// aicli added before that attempt began (its answer, the last one's questions).
    async fn decoder_for(&mut self, line_start: u64, aicli: &str) -> Result<(), Gone> {
        let Some(rec) = &self.rec else {
            return Ok(());
        };
        let Some(a) = rec
            .attempts
            .iter()
            .rev()
            .find(|a| a.events_start <= line_start)
        else {
            return Ok(());
        };
        if a.attempt == self.attempt && self.decoder.is_some() {
            return Ok(());
        }
        let a = a.clone();
        self.attempt = a.attempt;
        self.decoder = provider_decoder(&self.registry, rec, &a);
        self.side_events(aicli, Some(&a)).await
    }

    /// Sends aicli's events and the answers not sent yet: those from before attempt
    /// `before` began, or (`None`) all there are.
    async fn side_events(
        &mut self,
        aicli: &str,
        before: Option<&AttemptRecord>,
    ) -> Result<(), Gone> {
        let limit = before.map(|a| a.aicli_events_start);
        if limit.is_none_or(|l| l > self.sent.aicli) {
            let cap = limit.map_or(CHUNK, |l| (l - self.sent.aicli) as usize);
            let bytes = read_from(
                self.batch.open_task_file(&self.task, aicli),
                self.sent.aicli,
                cap.min(CHUNK),
            );
            let mut start = 0;
            while let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n') {
                let line = &bytes[start..start + nl];
                let at = self.sent.aicli;
                self.sent.aicli += nl as u64 + 1;
                start += nl + 1;
                let ev = serde_json::from_slice::<AgentEvent>(line).unwrap_or_else(|e| {
                    AgentEvent::synthetic(EventKind::Status {
                        status: format!(
                            "an unreadable line in {} at byte {at}: {e}",
                            files::AICLI_EVENTS
                        ),
                    })
                });
                self.send("agent", &ev).await?;
            }
        }
        let not_after = before.and_then(|a| humantime::parse_rfc3339_weak(&a.started_at).ok());
        let answers: Vec<AnswerRecord> = self
            .rec
            .as_ref()
            .map(|r| r.answers.iter().skip(self.sent.answers).cloned().collect())
            .unwrap_or_default();
        for answer in answers {
            if not_after.is_some_and(|t| answered_at(&answer) > t) {
                break;
            }
            self.sent.answers += 1;
            self.send("answer", &answer).await?;
        }
        Ok(())
    }
}

fn answered_at(a: &AnswerRecord) -> SystemTime {
    humantime::parse_rfc3339_weak(&a.answered_at).unwrap_or(SystemTime::UNIX_EPOCH)
}

fn provider_decoder(
    registry: &ProviderRegistry,
    rec: &TaskRecord,
    a: &AttemptRecord,
) -> Option<Box<dyn Decoder>> {
    let provider = registry.get(&rec.provider).ok()?;
    let ctx = ParseContext {
        model: a.model.clone(),
        prior: a.prior,
        answered: None,
    };
    Some(provider.decoder(&ctx))
}

/// The bytes of a record file (opened without following a symlink) from `offset` (at
/// most `cap`); none when there are none yet.
fn read_from(file: std::io::Result<std::fs::File>, offset: u64, cap: usize) -> Vec<u8> {
    let Ok(mut f) = file else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len <= offset || f.seek(SeekFrom::Start(offset)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    let _ = f.take((len - offset).min(cap as u64)).read_to_end(&mut buf);
    buf
}
