//! A client connection that switches protocols: the handle an HTTP/1.1 upgrade request carries, and the byte stream it resolves to once the 101 answer has gone out.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// A client stream that can be handed over after a 101.
pub(crate) trait SwitchIo: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> SwitchIo for T {}

/// The client's connection after a 101: bytes it sent past the upgrade request first, then
/// the socket.
pub(crate) struct SwitchedStream {
    io: Box<dyn SwitchIo>,
    read_first: Bytes,
}

impl SwitchedStream {
    pub(crate) fn new(io: Box<dyn SwitchIo>, read_first: Bytes) -> Self {
        Self { io, read_first }
    }
}

/// Carried in an upgrade request's extensions: resolves to the client's stream once the
/// connection has sent a 101, or fails when the answer was something else. Cloneable because
/// request extensions must be; the stream goes to whoever takes it first.
#[derive(Clone)]
pub(crate) struct PendingSwitch {
    receiver: Arc<Mutex<Option<oneshot::Receiver<SwitchedStream>>>>,
}

/// The connection's side of a [`PendingSwitch`].
pub(crate) struct SwitchSender(oneshot::Sender<SwitchedStream>);

/// A switch that did not happen: the answer was not a 101, or the handle was taken already.
#[derive(Debug, thiserror::Error)]
#[error("the connection did not switch protocols")]
pub(crate) struct NotSwitched;

/// A pending switch and the sender that completes it.
pub(crate) fn pending() -> (SwitchSender, PendingSwitch) {
    let (sender, receiver) = oneshot::channel();
    (
        SwitchSender(sender),
        PendingSwitch {
            receiver: Arc::new(Mutex::new(Some(receiver))),
        },
    )
}

impl SwitchSender {
    /// Hands the client's stream to whoever waits on the switch.
    pub(crate) fn send(self, stream: SwitchedStream) {
        let _ = self.0.send(stream);
    }
}

impl PendingSwitch {
    /// The client's stream, once the 101 has gone out.
    pub(crate) async fn switched(self) -> Result<SwitchedStream, NotSwitched> {
        let receiver = match self.receiver.lock() {
            Ok(mut slot) => slot.take(),
            Err(_) => None,
        };
        receiver.ok_or(NotSwitched)?.await.map_err(|_| NotSwitched)
    }
}

impl AsyncRead for SwitchedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read_first.has_remaining() {
            let take = this.read_first.len().min(buf.remaining());
            buf.put_slice(&this.read_first[..take]);
            this.read_first.advance(take);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for SwitchedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_stream_reads_what_came_past_the_upgrade_first() {
        let (near, mut far) = tokio::io::duplex(64);
        let (sender, pending) = pending();
        let taken = pending.clone();
        sender.send(SwitchedStream::new(
            Box::new(near),
            Bytes::from_static(b"early"),
        ));
        let mut stream = match taken.switched().await {
            Ok(stream) => stream,
            Err(error) => panic!("{error}"),
        };
        assert!(pending.switched().await.is_err(), "taken once");
        far.write_all(b" late")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut read = [0u8; 10];
        stream
            .read_exact(&mut read)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&read, b"early late");
    }

    #[tokio::test]
    async fn a_switch_that_never_happens_fails() {
        let (sender, pending) = pending();
        drop(sender);
        assert!(pending.switched().await.is_err());
    }
}
