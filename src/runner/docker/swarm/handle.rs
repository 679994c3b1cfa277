//! A started swarm job as a [`RunHandle`]: the stdout and stderr its runner streams back
//! read into the same line reader and stderr tail as a local process's pipes, its exit
//! as the runner posted it (or as the job's state says, when the runner could not).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::super::handle::{ByteStream as Rx, read_output};
use super::{Ended, Job, Slot};
use crate::proc::lines::{LineReceiver, StderrTail};
use crate::proc::spawn::OutputOptions;
use crate::proc::stdin::StdoutRecord;
use crate::runner::RunHandle;

/// The side of a byte stream a job's runner feeds; the other is a [`Rx`].
type Tx = mpsc::Sender<std::io::Result<Bytes>>;

/// The two byte streams (stdout, stderr) a job's runner feeds ([`Slot`]'s), and what
/// reads them.
pub fn streams() -> ((Tx, Tx), (Rx, Rx)) {
    let (out_tx, out_rx) = mpsc::channel(64);
    let (err_tx, err_rx) = mpsc::channel(64);
    ((out_tx, err_tx), (out_rx, err_rx))
}

/// The live side of a swarm job.
#[derive(Debug)]
pub struct JobHandle {
    job: Job,
    lines: LineReceiver,
    stderr: StderrTail,
    readers: Vec<JoinHandle<()>>,
    ended: watch::Receiver<Option<Ended>>,
    slot: Arc<Slot>,
    /// Extra time after aicli's stop for the runner to pack and post the work.
    stop_allowance: Duration,
}

impl JobHandle {
    /// The handle of `job`, whose runner feeds `slot` (its streams `out` and `err`).
    pub fn new(
        job: Job,
        slot: Arc<Slot>,
        (out_rx, err_rx): (Rx, Rx),
        mut out: OutputOptions,
        stop_allowance: Duration,
    ) -> JobHandle {
        let mut readers = Vec::new();
        if let Some(service) = job.service.clone() {
            readers.push(tokio::spawn(super::watch(
                job.docker.clone(),
                service,
                slot.clone(),
            )));
        }
        let record = StdoutRecord::from(out.stdout_tee.take());
        let (lines, stderr, read) = read_output(out_rx, err_rx, record, out);
        readers.extend(read);
        JobHandle {
            job,
            lines,
            stderr,
            readers,
            ended: slot.ended.subscribe(),
            slot,
            stop_allowance,
        }
    }

    async fn ended(&mut self) -> Ended {
        loop {
            if let Some(e) = self.ended.borrow().clone() {
                return e;
            }
            if self.ended.changed().await.is_err() {
                return Ended::Lost("the swarm job's watch ended".to_owned());
            }
        }
    }

    fn code(e: &Ended) -> Option<i32> {
        match e {
            Ended::Exited(code) => *code,
            Ended::Lost(why) | Ended::NodeLost(why) => {
                tracing::warn!("{why}");
                None
            }
        }
    }
}

#[async_trait]
impl RunHandle for JobHandle {
    fn take_lines(&mut self) -> LineReceiver {
        std::mem::replace(&mut self.lines, LineReceiver::closed())
    }

    fn stderr(&self) -> StderrTail {
        self.stderr.clone()
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn lost_place(&self) -> Option<String> {
        match self.ended.borrow().as_ref() {
            Some(Ended::NodeLost(why)) => Some(why.clone()),
            _ => None,
        }
    }

    fn notices(&mut self) -> Option<mpsc::UnboundedReceiver<String>> {
        self.slot.take_notices()
    }

    async fn wait(&mut self) -> Option<i32> {
        let e = self.ended().await;
        Self::code(&e)
    }

    async fn shutdown(&mut self, grace: Duration) -> Option<i32> {
        if let Some(e) = self.ended.borrow().clone() {
            return Self::code(&e);
        }
        // A job whose runner has not fetched its start has no CLI to stop: it is
        // removed at once (one waiting for a node, say), and its runner, should it come
        // now, is turned away.
        if self.slot.refuse_start() {
            if let Err(e) = self.job.stop().await {
                tracing::warn!(error = %e, "removing the swarm job");
            }
            self.slot.end(Ended::Lost(
                "the swarm job was stopped before its runner started the CLI".to_owned(),
            ));
            return None;
        }
        // The runner is told over the protocol (a removed job's container is not stopped
        // by Swarm 20.10): it sends the CLI SIGTERM, and the wrapper packs the work.
        self.slot.request_stop();
        let ended = tokio::time::timeout(grace + self.stop_allowance, self.ended()).await;
        if let Err(e) = self.job.stop().await {
            tracing::warn!(error = %e, "removing the swarm job");
        }
        match ended {
            Ok(Ended::Exited(_)) => None,
            Ok(e) => Self::code(&e),
            Err(_) => {
                self.slot.end(Ended::Lost(
                    "the swarm job did not post its exit after it was told to stop".to_owned(),
                ));
                None
            }
        }
    }

    async fn drain(&mut self) {
        for h in self.readers.drain(..) {
            let _ = h.await;
        }
    }
}
