//! Serving HTTP/1.1 with a limit on every connection: how many may be open, how long a
//! request's head may take, how long a connection may sit with no byte moving.
//!
//! - **Connections**: at most `max_connections` at once; one more is closed as soon as
//!   it is accepted (its file descriptor is never kept).
//! - **Header read timeout** (hyper's `header_read_timeout`): the head of a request must
//!   have arrived `header_read_timeout` after the connection became ready for it — on a
//!   new connection, and on a kept-alive one after its last response, so a slow or
//!   partial header and an idle kept-alive connection are both closed then.
//! - **Idle timeout**: a connection on which no byte has moved either way for
//!   `idle_timeout` is closed, whatever it is doing (a body that stalls, a response no
//!   one reads). rmcp's event streams send a keep-alive every 15 s.
//! - Every accepted socket gets TCP_NODELAY (rmcp writes small SSE frames).
//!
//! On shutdown, accepting stops, every connection is told to finish its request and
//! close; dropping the serve task drops (closes) whatever is left.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The connection limits (from [`aicli_providers::McpLimits`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// See the module docs.
    pub header_read_timeout: Duration,
    /// See the module docs.
    pub idle_timeout: Duration,
}

/// Counts of what the listener holds, for tests and measurements.
#[derive(Debug, Default)]
pub(crate) struct ConnStats {
    /// Connections open now.
    pub open: AtomicUsize,
    /// Connections closed at accept because the limit was reached.
    pub refused: AtomicU64,
    /// Connections closed by the idle timeout.
    pub idled_out: AtomicU64,
}

/// Serves `app` on `listener` until `stop` fires; over TLS with `tls` (its handshake
/// within the header read timeout).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
    stop: CancellationToken,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = listener.accept() => a,
            // Finished connection tasks are collected as they end.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off a little, go on.
                tracing::warn!(error = %e, "MCP server: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                limit = limits.max_connections,
                "MCP server: connection limit reached (mcp.limits.max_connections); closed a new connection"
            );
            drop(tcp);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY on an MCP connection");
        }
        let app = app.clone();
        let stats = stats.clone();
        let stop = stop.clone();
        let tls = tls.clone();
        conns.spawn(async move {
            stats.open.fetch_add(1, Ordering::Relaxed);
            match tls {
                None => serve_connection(tcp, peer, app, limits, &stats, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(tcp))
                        .await
                    {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, peer, app, limits, &stats, stop).await
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
            stats.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    // Shutting down: connections finish what they are doing (each saw `stop`).
    while conns.join_next().await.is_some() {}
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    tcp: S,
    peer: std::net::SocketAddr,
    app: Router,
    limits: ConnLimits,
    stats: &ConnStats,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = Tracked {
        inner: tcp,
        activity: activity.clone(),
    };
    // The peer's address goes into every request (a container's token is valid only
    // from its own address).
    let service =
        TowerToHyperService::new(app.layer(axum::Extension(axum::extract::ConnectInfo(peer))));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "MCP connection ended");
                }
                return;
            }
            () = activity.idle_for(limits.idle_timeout) => {
                stats.idled_out.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(secs = limits.idle_timeout.as_secs(), "MCP connection idle; closed (mcp.limits.idle_timeout_secs)");
                return;
            }
            () = stop.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a connection last moved a byte (ms since it was made).
pub(crate) struct Activity {
    born: tokio::time::Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            born: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.born.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once no byte has moved for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.born + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A socket that notes every byte read or written.
pub(crate) struct Tracked<T> {
    pub(crate) inner: T,
    pub(crate) activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
