//! Response bodies fed from a channel, so an SSE stream can be paced or cut midway.
//!
//! A task writes the frames into a channel; [`ChannelReader`] turns the channel into an
//! `AsyncRead` and `ReaderStream` into a body stream. Sending an `Err` makes the body
//! fail, and hyper then aborts the connection without the final chunk: the client sees
//! the stream break, as when a real API drops the connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::io::ReaderStream;

use crate::render::StreamEnd;

/// `AsyncRead` over a channel of byte chunks; an `Err` item becomes a read error.
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    /// The rest of the chunk being read.
    pending: Bytes,
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                let head = this.pending.split_to(n);
                buf.put_slice(&head);
                return Poll::Ready(Ok(()));
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => this.pending = chunk,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // End of body.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A body that sends `frames` (waiting `delay` before each) and then ends cleanly or
/// breaks the connection.
pub(crate) fn body(frames: Vec<String>, end: StreamEnd, delay: Duration) -> Body {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    tokio::spawn(async move {
        for f in frames {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if tx.send(Ok(Bytes::from(f))).await.is_err() {
                return;
            }
        }
        if end == StreamEnd::Drop {
            // Let hyper flush what was sent before the body fails.
            tokio::time::sleep(Duration::from_millis(50)).await;
            // The receiver may be gone already; nothing to do then.
            let _ = tx
                .send(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "fake API: stream dropped on purpose",
                )))
                .await;
        }
    });
    Body::from_stream(ReaderStream::new(ChannelReader {
        rx,
        pending: Bytes::new(),
    }))
}
