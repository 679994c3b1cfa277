//! A started container as a [`RunHandle`]: its attached stdout and stderr read live into
//! the same line reader and stderr tail as a local process's pipes, its exit code from
//! one background `wait`, and shutdown by signals through the Engine API.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{KillContainerOptions, WaitContainerOptions};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::proc::lines::{LINE_QUEUE_BYTES, LineReceiver, StderrTail, line_channel};
use crate::proc::spawn::OutputOptions;
use crate::runner::RunHandle;

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
}

/// One stream of the attach, as an `AsyncRead` for the line reader.
fn reader(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> impl tokio::io::AsyncRead + Unpin {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    tokio_util::io::StreamReader::new(Box::pin(stream))
}

impl ContainerHandle {
    /// Attaches to the created container `container`, starts it, writes `stdin` (then
    /// closes it), and reads its output into `out`'s reader and tail.
    pub async fn start(
        container: Arc<Container>,
        stdin: Option<String>,
        out: OutputOptions,
        stop_allowance: Duration,
    ) -> Result<ContainerHandle, String> {
        let docker = &container.docker;
        let id = container.id.clone();
        let attach = docker
            .attach_container(
                &id,
                Some(bollard::query_parameters::AttachContainerOptions {
                    stream: true,
                    stdin: stdin.is_some(),
                    stdout: true,
                    stderr: true,
                    logs: false,
                    detach_keys: None,
                }),
            )
            .await
            .map_err(|e| format!("cannot attach to container {id}: {e}"))?;
        docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| format!("cannot start container {id}: {e}"))?;
        // The exit code, from one wait request (a `wait` per call would cost a request
        // each time the session's select loop polls it). Asked after the start, so
        // "not running" can only mean "exited".
        let (exit_tx, exit_rx) = watch::channel(None);
        let wait_docker = docker.clone();
        let wait_id = id.clone();
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
        let peer = docker
            .inspect_container(
                &id,
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
            });
        let mut readers = vec![waiter];
        if let Some(text) = stdin {
            let mut input = attach.input;
            readers.push(tokio::spawn(async move {
                // A CLI that exits without reading its stdin is not an error here.
                let _ = input.write_all(text.as_bytes()).await;
                let _ = input.shutdown().await;
            }));
        }
        let (out_tx, out_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
        let (err_tx, err_rx) = mpsc::channel::<std::io::Result<Bytes>>(64);
        let mut output = attach.output;
        readers.push(tokio::spawn(async move {
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
        }));
        let (tx, lines) = line_channel(LINE_QUEUE_BYTES);
        readers.push(tokio::spawn(crate::proc::lines::read_lines(
            reader(out_rx),
            out.line_cap,
            out.stdout_tee,
            tx,
        )));
        let stderr = StderrTail::new(out.stderr_tail);
        readers.push(tokio::spawn(crate::proc::lines::drain_stderr(
            reader(err_rx),
            stderr.clone(),
            out.stderr_tee,
            out.stderr_file_cap,
        )));
        tracing::debug!(container = %id, host = %container.host, ?peer, "container started");
        Ok(ContainerHandle {
            container,
            lines,
            stderr,
            readers,
            exit: exit_rx,
            signalled: false,
            stop_allowance,
            peer,
        })
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
}
