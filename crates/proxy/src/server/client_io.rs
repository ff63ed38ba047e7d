//! A client connection's byte stream as hyper reads it: bytes left over from the PROXY header come first, every byte read is scanned for HTTP/1 framing, stalled writes are noted, and an idle HTTP/1.1 connection is parked.
//!
//! Parking: when hyper asks for the next request's bytes on a connection with nothing in
//! flight and none of them has arrived, the stream tells hyper the client is done. hyper
//! then ends the connection without closing the socket (`poll_shutdown` does nothing while
//! parked), the listener takes the socket back with `into_parts`, frees hyper's buffers and
//! state, and waits on the socket's readiness alone until the client sends again.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::ConnectionActivity;
use super::framing::{BrokenAt, Event, MessageScanner};
use super::rewound::Rewound;

/// The stream hyper serves, wrapping the accepted socket.
pub(crate) struct ClientIo<T> {
    inner: T,
    /// Bytes read with the PROXY header (or to detect the protocol) that belong to the HTTP
    /// stream; they are scanned like bytes read from the socket.
    prefix: Bytes,
    /// Bytes hyper had read but not used when the connection parked: already scanned.
    replay: Bytes,
    scanner: MessageScanner,
    /// How long an HTTP/1.1 connection must have been idle to park; `None`: never (HTTP/2).
    park_after: Option<Duration>,
    activity: Arc<ConnectionActivity>,
    write_stalled: bool,
    /// A chunked body broke in bytes already read: the next read fails.
    broken: bool,
}

impl<T> ClientIo<T> {
    pub(crate) fn new(
        inner: T,
        prefix: Bytes,
        max_head: usize,
        activity: Arc<ConnectionActivity>,
        park_after: Option<Duration>,
    ) -> Self {
        Self {
            inner,
            prefix,
            replay: Bytes::new(),
            scanner: MessageScanner::new(max_head),
            park_after,
            activity,
            write_stalled: false,
            broken: false,
        }
    }

    /// Scans bytes on their way to hyper; returns how many of them may go on. Bytes from a
    /// chunked-body framing error on never reach hyper, and the next read fails, so the
    /// request body ends in an error and the upstream request is aborted.
    fn scan(&mut self, bytes: &[u8]) -> usize {
        let activity = &self.activity;
        if activity.is_upgraded() {
            // The connection switched protocols (WebSocket): these bytes are not HTTP.
            return bytes.len();
        }
        let scanned = self.scanner.scan(bytes, &mut |event| match event {
            Event::HeadStarted => activity.head_started(),
            Event::HeadComplete(verdict) => activity.head_judged(verdict),
        });
        match scanned {
            Ok(()) => bytes.len(),
            Err(BrokenAt(at)) => {
                self.broken = true;
                at
            }
        }
    }

    /// The connection serves again after parking; `replay` is what hyper had read past the
    /// last request.
    pub(crate) fn resume(&mut self, replay: Bytes) {
        // hyper's leftover shares its whole read buffer: keep a copy of the bytes alone.
        self.replay = match replay.is_empty() {
            true => Bytes::new(),
            false => Bytes::copy_from_slice(&replay),
        };
        self.activity.set_parked(false);
    }

    /// Whether hyper's next read should end the connection so that it parks.
    fn should_park(&self) -> bool {
        self.park_after.is_some_and(|idle| {
            !self.replay.has_remaining()
                && !self.prefix.has_remaining()
                && !self.write_stalled
                && self.scanner.is_between_messages()
                && self.activity.may_park(idle)
        })
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
        if this.broken {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "invalid chunked framing",
            )));
        }
        if this.replay.has_remaining() {
            take_from(&mut this.replay, buf);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        if this.prefix.has_remaining() {
            take_from(&mut this.prefix, buf);
        } else if this.should_park() {
            if Pin::new(&mut this.inner).poll_read(cx, buf)?.is_pending() {
                // Nothing to read: the end of the stream as far as hyper knows. The socket
                // stays registered for readiness, which the parked connection waits on.
                this.activity.set_parked(true);
                this.scanner.release();
                return Poll::Ready(Ok(()));
            }
        } else {
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        }
        let read = buf.filled().len() - before;
        let good = this.scan(&buf.filled()[before..]);
        if good < read {
            buf.set_filled(before + good);
            if good == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "invalid chunked framing",
                )));
            }
        }
        Poll::Ready(Ok(()))
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
        let this = self.get_mut();
        if this.activity.is_parked() {
            // hyper ends a parking connection as if the client had left: keep it open.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: ReadReady> ClientIo<T> {
    /// Resolves once the client may have sent something (or left).
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.replay.has_remaining() || self.prefix.has_remaining() {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_read_ready(cx)
    }
}

/// Moves what fits of `bytes` into `buf`; once all of it is read, lets go of the buffer
/// `bytes` shares.
fn take_from(bytes: &mut Bytes, buf: &mut ReadBuf<'_>) {
    let take = bytes.len().min(buf.remaining());
    buf.put_slice(&bytes[..take]);
    bytes.advance(take);
    if bytes.is_empty() {
        *bytes = Bytes::new();
    }
}

/// A client stream whose readiness a parked connection waits on.
pub(crate) trait ReadReady {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for tokio::net::TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        tokio::net::TcpStream::poll_read_ready(self, cx)
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
