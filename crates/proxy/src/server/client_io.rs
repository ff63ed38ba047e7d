//! An HTTP/2 client connection's byte stream as hyper reads it: bytes read while detecting the protocol (or past a PROXY header) come first, and stalled writes are noted for the write-stall timeout.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::ConnectionActivity;
use super::rewound::Rewound;

/// The stream hyper serves, wrapping the accepted socket.
pub(crate) struct ClientIo<T> {
    inner: T,
    /// Bytes already read that belong to the HTTP stream.
    prefix: Bytes,
    activity: Arc<ConnectionActivity>,
    write_stalled: bool,
}

impl<T> ClientIo<T> {
    pub(crate) fn new(inner: T, prefix: Bytes, activity: Arc<ConnectionActivity>) -> Self {
        Self {
            inner,
            prefix,
            activity,
            write_stalled: false,
        }
    }

    fn note_write<R>(&mut self, poll: &Poll<io::Result<R>>) {
        let stalled = poll.is_pending();
        if stalled != self.write_stalled {
            self.write_stalled = stalled;
            self.activity.write_stalled(stalled);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ClientIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let take = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..take]);
            this.prefix.advance(take);
            if this.prefix.is_empty() {
                // Let go of the buffer the prefix shares.
                this.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ClientIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note_write(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note_write(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.note_write(&poll);
        poll
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What the HTTP/1.1 codec needs of a client stream besides reading and writing: its
/// readiness, which a parked connection waits on, and how it says goodbye.
pub(crate) trait ReadReady {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Whether closing needs a goodbye written first (TLS's close_notify). A plain socket
    /// needs none: closing it sends the FIN that shutting its write side would, so the
    /// shutdown call is saved.
    fn says_goodbye(&self) -> bool {
        true
    }
}

impl ReadReady for tokio::net::TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::net::TcpStream::poll_read_ready(self, cx)
    }

    fn says_goodbye(&self) -> bool {
        false
    }
}

impl ReadReady for Box<tokio_rustls::server::TlsStream<Rewound<tokio::net::TcpStream>>> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (socket, session) = self.get_ref();
        if !session.wants_read() {
            // Decrypted bytes wait to be read, or the client said goodbye.
            return Poll::Ready(Ok(()));
        }
        socket.poll_read_ready(cx)
    }
}
