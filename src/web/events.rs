//! A task's live transcript as Server-Sent Events, read from its run record: every
//! normalized event of every attempt, decoded from `events.ndjson` with the task's
//! provider, as the lines are appended. An event's id is `END.K`: the byte offset in
//! `events.ndjson` just past the line it came from, and its place among that line's
//! events. A client that reconnects with `Last-Event-ID` gets exactly the events after
//! it, so a reload or a dropped connection loses nothing and shows nothing twice.
//!
//! The record is the buffer: a reader that falls behind only makes this stream's own
//! producer wait (its queue is bounded), never the run, which writes the record anyway.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use aicli_providers::{AgentEvent, Decoder, Line, ParseContext, ProviderRegistry};
use axum::response::sse::Event;
use tokio::sync::mpsc;

use crate::record::{BatchRecord, TaskRecord, files};

/// How often the record is looked at for new lines.
const POLL: Duration = Duration::from_millis(100);
/// Read at most this much of the record at once.
const CHUNK: usize = 1 << 20;
/// Events queued for a client at most.
const QUEUE: usize = 256;

/// A position in the stream: past line end `end`, event `k` of that line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Position {
    end: u64,
    k: usize,
}

impl Position {
    /// Parses a `Last-Event-ID` (`END.K`).
    pub(crate) fn parse(s: &str) -> Option<Position> {
        let (e, k) = s.trim().split_once('.')?;
        Some(Position {
            end: e.parse().ok()?,
            k: k.parse().ok()?,
        })
    }

    fn id(self) -> String {
        format!("{}.{}", self.end, self.k)
    }
}

/// Starts the stream of task `task` of `batch`, after `after` when given.
pub(crate) fn stream(
    batch: BatchRecord,
    task: String,
    registry: ProviderRegistry,
    line_cap: usize,
    after: Option<Position>,
) -> mpsc::Receiver<Result<Event, Infallible>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let mut p = Producer {
            batch,
            task,
            registry,
            line_cap,
            after,
            decoder: None,
            attempt: 0,
            offset: 0,
            evs: Vec::new(),
        };
        p.run(tx).await;
    });
    rx
}

struct Producer {
    batch: BatchRecord,
    task: String,
    registry: ProviderRegistry,
    line_cap: usize,
    after: Option<Position>,
    decoder: Option<Box<dyn Decoder>>,
    /// The attempt the decoder is for (1-based; 0: none yet).
    attempt: u32,
    offset: u64,
    evs: Vec<AgentEvent>,
}

impl Producer {
    async fn run(&mut self, tx: mpsc::Sender<Result<Event, Infallible>>) {
        let path = self.batch.task_dir(&self.task).join(files::EVENTS);
        loop {
            let cap = CHUNK.max(self.line_cap + 2);
            let chunk = read_from(&path, self.offset, cap);
            if chunk.len() == cap && !chunk.contains(&b'\n') {
                // A line longer than the record's cap: said once, as the decoder would.
                self.overlong(&path, &chunk, cap, &tx).await;
                continue;
            }
            let progressed = !chunk.is_empty();
            let mut start = 0;
            while let Some(nl) = chunk[start..].iter().position(|&b| b == b'\n') {
                let line = &chunk[start..start + nl];
                let line_start = self.offset + start as u64;
                let end = line_start + nl as u64 + 1;
                start += nl + 1;
                self.decoder_for(line_start);
                let Some(d) = self.decoder.as_mut() else {
                    continue;
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
                for (k, ev) in self.evs.drain(..).enumerate() {
                    let pos = Position { end, k };
                    if self.after.is_some_and(|a| pos <= a) {
                        continue;
                    }
                    let e = Event::default()
                        .id(pos.id())
                        .event("agent")
                        .json_data(&ev)
                        .unwrap_or_else(|_| Event::default().comment("unserializable event"));
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
            }
            self.offset += start as u64;
            if !progressed || start == 0 {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(POLL) => {}
                }
            }
        }
    }

    /// Decodes the over-long line that starts at the offset (its first `chunk`) as an
    /// over-long line, and moves past its end once it has one.
    async fn overlong(
        &mut self,
        path: &std::path::Path,
        chunk: &[u8],
        cap: usize,
        tx: &mpsc::Sender<Result<Event, Infallible>>,
    ) {
        let mut end = self.offset + chunk.len() as u64;
        loop {
            let more = read_from(path, end, cap);
            if let Some(nl) = more.iter().position(|&b| b == b'\n') {
                end += nl as u64 + 1;
                break;
            }
            if more.is_empty() {
                tokio::time::sleep(POLL).await;
                if tx.is_closed() {
                    return;
                }
            }
            end += more.len() as u64;
        }
        self.decoder_for(self.offset);
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
            for (k, ev) in self.evs.drain(..).enumerate() {
                let pos = Position { end, k };
                if self.after.is_some_and(|a| pos <= a) {
                    continue;
                }
                if let Ok(e) = Event::default().id(pos.id()).event("agent").json_data(&ev)
                    && tx.send(Ok(e)).await.is_err()
                {
                    return;
                }
            }
        }
        self.offset = end;
    }

    /// The decoder of the attempt whose stdout holds the line at `line_start`: a new one
    /// (with that attempt's context) when the line starts a later attempt.
    fn decoder_for(&mut self, line_start: u64) {
        let Ok(rec) = self.batch.task(&self.task) else {
            return;
        };
        let Some(a) = rec
            .attempts
            .iter()
            .rev()
            .find(|a| a.events_start <= line_start)
        else {
            return;
        };
        if a.attempt == self.attempt && self.decoder.is_some() {
            return;
        }
        self.attempt = a.attempt;
        self.decoder = provider_decoder(&self.registry, &rec, a);
    }
}

fn provider_decoder(
    registry: &ProviderRegistry,
    rec: &TaskRecord,
    a: &crate::record::AttemptRecord,
) -> Option<Box<dyn Decoder>> {
    let provider = registry.get(&rec.provider).ok()?;
    let ctx = ParseContext {
        model: a.model.clone(),
        prior: a.prior,
        answered: None,
    };
    Some(provider.decoder(&ctx))
}

/// The bytes of `path` from `offset` (at most `cap`); none when there are none yet.
fn read_from(path: &std::path::Path, offset: u64, cap: usize) -> Vec<u8> {
    let Ok(mut f) = std::fs::File::open(path) else {
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
