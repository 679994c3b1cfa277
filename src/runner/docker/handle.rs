//! A started container as a [`RunHandle`]: its attached stdout and stderr read live into
//! the same line reader and stderr tail as a local process's pipes, its exit code from
//! one background `wait`, and shutdown by signals through the Engine API.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::query_parameters::{
    KillContainerOptions, RemoveContainerOptions, WaitContainerOptions,
};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::proc::lines::{
    LINE_QUEUE_BYTES, LineReceiver, StderrTail, drain_stderr, line_channel, read_lines,
};
use crate::proc::spawn::OutputOptions;
use crate::proc::stdin::{StdinWriter, StdoutRecord};
use super::DockerError;
use crate::runner::{RunHandle, Steps};

/// A container aicli created.
#[derive(Debug, Clone)]
pub struct Container {
    /// The engine's client.
    pub docker: Docker,
    /// The container's id.
    pub id: String,
    /// The engine's name in the config.
    pub host: String,
}

/// The live side of a started container.
#[derive(Debug)]
pub struct ContainerHandle {
    container: Arc<Container>,
    lines: LineReceiver,
    stderr: StderrTail,
    readers: Vec<JoinHandle<()>>,
    exit: watch::Receiver<Option<i64>>,
    /// Set once aicli signalled the container: its exit code then says "killed".
    signalled: bool,
    /// Extra time after SIGTERM before SIGKILL (a remote run packs its work first).
    stop_allowance: Duration,
    peer: Option<IpAddr>,
    /// A two-way run's attached stdin, until taken.
    stdin_writer: Option<StdinWriter>,
}

/// What goes into a container's stdin.
#[derive(Debug, Clone, Default)]
pub struct ContainerStdin {
    /// Text written first (a command's `stdin`: the prompt).
    pub text: Option<String>,
    /// Stdin stays open for the whole run, for a two-way CLI's messages
    /// ([`aicli_providers::CommandSpec::stdin_open`]): the handle gives out its
    /// [`StdinWriter`].
    pub open: bool,
}

impl ContainerStdin {
    /// Whether the container's stdin is attached at all.
    pub fn attached(&self) -> bool {
        self.open || self.text.is_some()
    }
}

/// The attach's output: stdout and stderr frames, multiplexed.
type AttachOutput = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

/// A run's stdout or stderr as byte chunks (the attach's, demultiplexed by [`demux`];
/// a swarm job's, as its runner posts them).
pub type ByteStream = mpsc::Receiver<std::io::Result<Bytes>>;

/// One stream as an `AsyncRead` for the line reader.
fn reader(rx: ByteStream) -> impl tokio::io::AsyncRead + Unpin {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    tokio_util::io::StreamReader::new(Box::pin(stream))
}

/// What reads a run's output: its stdout lines (recorded into `record`), its stderr
/// tail (and `out`'s stderr file), and the two tasks that read them. `out`'s stdout tee
/// is `record`'s already.
pub fn read_output(
    out_rx: ByteStream,
    err_rx: ByteStream,
    record: StdoutRecord,
    out: OutputOptions,
) -> (LineReceiver, StderrTail, [JoinHandle<()>; 2]) {
    let (tx, lines) = line_channel(LINE_QUEUE_BYTES);
    let read = tokio::spawn(read_lines(reader(out_rx), out.line_cap, record, tx));
    let stderr = StderrTail::new(out.stderr_tail);
    let drain = tokio::spawn(drain_stderr(
        reader(err_rx),
        stderr.clone(),
        out.stderr_tee,
        out.stderr_file_cap,
    ));
    (lines, stderr, [read, drain])
}

/// A created container, attached (nothing it prints is missed) and started: its first
/// process waits for what [`ContainerHandle::go`] sends (a local run's go line, see
/// [`super::placement`]), or is the CLI itself (a remote run).
#[derive(Debug)]
pub struct Warm {
    container: Arc<Container>,
    attach: AttachContainerResults,
    waiter: JoinHandle<()>,
    exit: watch::Receiver<Option<i64>>,
    peer: Option<IpAddr>,
}

impl Warm {
    /// Attaches to `container` (its stdin too, with `stdin`) and starts it. `peer`: the
    /// address its MCP requests come from, when the placement knows it (else the
    /// container's own, asked of the engine).
    pub async fn start(
        container: Arc<Container>,
        stdin: bool,
        peer: Option<IpAddr>,
        steps: &mut Steps,
    ) -> Result<Warm, String> {
        let docker = &container.docker;
        let id = container.id.clone();
        let attach = steps.time("attach", attach(docker, &id, stdin)).await?;
        steps
            .time(
                "start",
                docker.start_container(
                    &id,
                    None::<bollard::query_parameters::StartContainerOptions>,
                ),
            )
            .await
            .map_err(|e| format!("cannot start container {id}: {e}"))?;
        // Asked after the start, so "not running" can only mean "exited".
        let (waiter, exit) = wait_for_exit(docker, &id);
        let peer = match peer {
            Some(p) => Some(p),
            None => {
                steps
                    .time("inspect (peer address)", peer_address(docker, &id))
                    .await
            }
        };
        Ok(Warm {
            container,
            attach,
            waiter,
            exit,
            peer,
        })
    }

    /// Whether it has exited (before its go: it cannot run the CLI any more).
    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

impl ContainerHandle {
    /// The run of the started container `warm`: writes `go` (the line its first process
    /// waits for), then `stdin`'s text (then closes it, unless it stays open for a
    /// two-way run), and reads its output into `out`'s reader and tail.
    pub async fn go(
        warm: Warm,
        go: Option<&str>,
        stdin: ContainerStdin,
        mut out: OutputOptions,
        stop_allowance: Duration,
    ) -> ContainerHandle {
        let Warm {
            container,
            attach,
            waiter,
            exit,
            peer,
        } = warm;
        let id = container.id.clone();
        let mut input = attach.input;
        if let Some(go) = go {
            // A container that already exited is seen by its exit code.
            let _ = input.write_all(go.as_bytes()).await;
            let _ = input.flush().await;
        }
        let mut readers = vec![waiter];
        // The stdout record is shared with a two-way run's stdin writer, which puts its
        // messages between the CLI's lines, as for a local process.
        let record = StdoutRecord::from(out.stdout_tee.take());
        let mut stdin_writer = None;
        match stdin {
            ContainerStdin { open: true, text } => {
                stdin_writer = Some(StdinWriter::spawn(input, record.clone(), text));
            }
            // Not attached (a remote run with no prompt on stdin): nothing to close.
            ContainerStdin {
                open: false,
                text: None,
            } if go.is_none() => {}
            ContainerStdin { open: false, text } => {
                readers.push(tokio::spawn(async move {
                    // A CLI that exits without reading its stdin is not an error here.
                    if let Some(text) = text {
                        let _ = input.write_all(text.as_bytes()).await;
                    }
                    let _ = input.shutdown().await;
                }));
            }
        }
        let (demuxer, out_rx, err_rx) = demux(attach.output);
        readers.push(demuxer);
        let (lines, stderr, read) = read_output(out_rx, err_rx, record, out);
        readers.extend(read);
        tracing::debug!(container = %id, host = %container.host, ?peer, "container running its CLI");
        ContainerHandle {
            container,
            lines,
            stderr,
            readers,
            exit,
            signalled: false,
            stop_allowance,
            peer,
            stdin_writer,
        }
    }

    fn code(&self, raw: i64) -> Option<i32> {
        // A container ended by aicli's signal (docker-init passes on 128 + signal) was
        // killed, as a local process ended by a signal is.
        if self.signalled && (raw == 137 || raw == 143 || raw < 0) {
            return None;
        }
        i32::try_from(raw).ok().filter(|c| *c >= 0)
    }

    async fn exited(&mut self) -> i64 {
        loop {
            if let Some(code) = *self.exit.borrow() {
                return code;
            }
            if self.exit.changed().await.is_err() {
                return (*self.exit.borrow()).unwrap_or(-1);
            }
        }
    }

    async fn signal(&mut self, signal: &str) {
        self.signalled = true;
        let r = self
            .container
            .docker
            .kill_container(
                &self.container.id,
                Some(KillContainerOptions {
                    signal: signal.to_owned(),
                }),
            )
            .await;
        if let Err(e) = r {
            tracing::debug!(container = %self.container.id, signal, error = %e, "signalling the container");
        }
    }
}

/// Attaches to container `id`'s stdout and stderr (and its stdin, with `stdin`), before
/// it starts: nothing it prints is missed.
async fn attach(docker: &Docker, id: &str, stdin: bool) -> Result<AttachContainerResults, String> {
    docker
        .attach_container(
            id,
            Some(bollard::query_parameters::AttachContainerOptions {
                stream: true,
                stdin,
                stdout: true,
                stderr: true,
                logs: false,
                detach_keys: None,
            }),
        )
        .await
        .map_err(|e| format!("cannot attach to container {id}: {e}"))
}

/// The exit code, from one wait request (a `wait` per call would cost a request each
/// time the session's select loop polls it): the task, and where the code appears.
fn wait_for_exit(docker: &Docker, id: &str) -> (JoinHandle<()>, watch::Receiver<Option<i64>>) {
    let (exit_tx, exit_rx) = watch::channel(None);
    let wait_docker = docker.clone();
    let wait_id = id.to_owned();
    let waiter = tokio::spawn(async move {
        let mut s = wait_docker.wait_container(
            &wait_id,
            Some(WaitContainerOptions {
                condition: "not-running".to_owned(),
            }),
        );
        let code = match s.next().await {
            Some(Ok(r)) => r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => {
                tracing::warn!(container = %wait_id, error = %e, "waiting for the container failed");
                -1
            }
            None => -1,
        };
        let _ = exit_tx.send(Some(code));
    });
    (waiter, exit_rx)
}

/// The container's first IP address on its networks, if the engine says one.
async fn peer_address(docker: &Docker, id: &str) -> Option<IpAddr> {
    docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|i| i.network_settings)
        .and_then(|n| n.networks)
        .and_then(|nets| {
            nets.values()
                .filter_map(|e| e.ip_address.as_deref())
                .find_map(|ip| ip.parse::<IpAddr>().ok())
        })
}

/// The attach's multiplexed output, split into stdout and stderr byte streams (the
/// task, then the two streams).
fn demux(mut output: AttachOutput) -> (JoinHandle<()>, ByteStream, ByteStream) {
    let (out_tx, out_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
    let (err_tx, err_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
    let task = tokio::spawn(async move {
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    if out_tx.send(Ok(message)).await.is_err() {
                        break;
                    }
                }
                Ok(LogOutput::StdErr { message }) => {
                    let _ = err_tx.send(Ok(message)).await;
                }
                Ok(LogOutput::StdIn { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "container output stream ended");
                    break;
                }
            }
        }
    });
    (task, out_rx, err_rx)
}

#[async_trait]
impl RunHandle for ContainerHandle {
    fn take_lines(&mut self) -> LineReceiver {
        std::mem::replace(&mut self.lines, LineReceiver::closed())
    }

    fn stderr(&self) -> StderrTail {
        self.stderr.clone()
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    async fn wait(&mut self) -> Option<i32> {
        let raw = self.exited().await;
        self.code(raw)
    }

    async fn shutdown(&mut self, grace: Duration) -> Option<i32> {
        if let Some(raw) = *self.exit.borrow() {
            return self.code(raw);
        }
        self.signal("SIGTERM").await;
        let allowance = grace + self.stop_allowance;
        if let Ok(raw) = tokio::time::timeout(allowance, self.exited()).await {
            return self.code(raw);
        }
        self.signal("SIGKILL").await;
        match tokio::time::timeout(Duration::from_secs(10), self.exited()).await {
            Ok(raw) => self.code(raw),
            Err(_) => {
                tracing::warn!(container = %self.container.id, "container still running after SIGKILL");
                None
            }
        }
    }

    async fn drain(&mut self) {
        for h in self.readers.drain(..) {
            let _ = h.await;
        }
    }

    fn take_stdin(&mut self) -> Option<StdinWriter> {
        self.stdin_writer.take()
    }
}

/// Removes a container (and its anonymous volumes), whatever its state.
pub async fn remove_container(c: &Container) -> Result<(), DockerError> {
    match c
        .docker
        .remove_container(
            &c.id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                link: false,
            }),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(DockerError::Api {
            what: format!("removing container {} on {}", c.id, c.host),
            message: e.to_string(),
        }),
    }
}
