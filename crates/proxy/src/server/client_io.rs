//! A client connection's byte stream as hyper reads it: bytes left over from the PROXY header come first, every byte read is scanned for HTTP/1 framing, and stalled writes are noted.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::ConnectionActivity;
use super::framing::{BrokenAt, Event, MessageScanner};

/// The stream hyper serves, wrapping the accepted socket.
pub(crate) struct ClientIo<T> {
    inner: T,
    /// Bytes read with the PROXY header that belong to the HTTP stream.
    prefix: Bytes,
    scanner: MessageScanner,
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
    ) -> Self {
        Self {
            inner,
            prefix,
            scanner: MessageScanner::new(max_head),
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
        let before = buf.filled().len();
        if this.prefix.has_remaining() {
            let take = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..take]);
            this.prefix.advance(take);
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
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
