//! A stdio upstream: a supervised process ([`LocalProcess`]) with only its own
//! environment, spoken to over its pipes, each line held to `max_message_bytes`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};

use super::instance::{Client, Instance};
use crate::mcp::command::process_spec;
use crate::proc::spawn::{LocalProcess, OutputOptions};

/// Bytes of a stdio upstream's stderr kept (quoted when it fails).
const UPSTREAM_STDERR_TAIL: usize = 16 * 1024;

impl Instance {
    /// Starts its process and shakes hands over its pipes within `startup`; a stdout
    /// line over the cap sets `oversized` and ends the connection.
    pub(super) async fn start_stdio(
        &self,
        handler: Client,
        startup: Duration,
        oversized: &Arc<AtomicBool>,
    ) -> Result<(RunningService<RoleClient, Client>, LocalProcess), String> {
        let c = &self.config;
        let env = self
            .env
            .for_process(&c.env_passthrough, &c.env, &BTreeMap::new());
        let cwd = c.cwd.clone().unwrap_or_else(|| self.env.repo.clone());
        let cmd = process_spec(&c.command, env, cwd)?;
        let out = OutputOptions {
            stderr_tail: UPSTREAM_STDERR_TAIL,
            raw_pipes: true,
            pids: self.pid_file.clone().map(crate::proc::leftovers::PidRecord::File),
            ..OutputOptions::default()
        };
        let mut p =
            LocalProcess::spawn_in(&cmd, out, self.env.cgroups).map_err(|e| e.to_string())?;
        let (Some(r), Some(w)) = (p.take_stdout(), p.take_stdin()) else {
            p.shutdown(self.env.kill_grace).await;
            return Err("its pipes are missing".into());
        };
        let r = LineCap::new(r, c.max_message_bytes, oversized.clone());
        match tokio::time::timeout(startup, handler.serve((r, w))).await {
            Ok(Ok(s)) => Ok((s, p)),
            Ok(Err(e)) => {
                p.shutdown(self.env.kill_grace).await;
                p.drain().await;
                Err(format!("{e}; its stderr: {}", p.stderr.text().trim()))
            }
            Err(_) => {
                p.shutdown(self.env.kill_grace).await;
                p.drain().await;
                Err(format!(
                    "no MCP handshake within {} s; its stderr: {}",
                    startup.as_secs(),
                    p.stderr.text().trim()
                ))
            }
        }
    }
}

/// A stdio upstream's stdout, read no further than `cap` bytes into one line (one
/// JSON-RPC message): past it, reading fails, so rmcp ends the connection, and `tripped`
/// is set. rmcp's framing holds at most one line, so this bounds its memory.
pub(super) struct LineCap<R> {
    inner: R,
    cap: usize,
    /// Bytes of the current line read so far.
    line: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> LineCap<R> {
    /// `inner` capped at `cap` bytes a line; `tripped` is set when a line is longer.
    pub(super) fn new(inner: R, cap: usize, tripped: Arc<AtomicBool>) -> LineCap<R> {
        LineCap {
            inner,
            cap,
            line: 0,
            tripped,
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let over = |cap: usize| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line of over {cap} bytes"),
            )
        };
        if this.tripped.load(Ordering::SeqCst) {
            return std::task::Poll::Ready(Err(over(this.cap)));
        }
        let start = buf.filled().len();
        std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let new = &buf.filled()[start..];
        let mut from = 0;
        let newlines = new.iter().enumerate().filter(|(_, b)| **b == b'\n');
        for (nl, _) in newlines {
            if this.line + (nl - from) > this.cap {
                break;
            }
            this.line = 0;
            from = nl + 1;
        }
        this.line += new.len() - from;
        if this.line > this.cap {
            this.tripped.store(true, Ordering::SeqCst);
            buf.set_filled(start);
            return std::task::Poll::Ready(Err(over(this.cap)));
        }
        std::task::Poll::Ready(Ok(()))
    }
}
