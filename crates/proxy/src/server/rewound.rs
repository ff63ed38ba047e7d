//! A socket read through a short replay buffer: bytes already read (past a PROXY header) come first, and the start of a TLS stream can be recorded so a passed-through connection forwards its ClientHello unchanged.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a ClientHello may take before passthrough gives up on it (rustls's own limit on
/// a handshake message is 64 KiB, and real ClientHellos are under 2 KiB).
const MAX_RECORDED: usize = 64 * 1024;

pub(crate) struct Rewound<T> {
    inner: T,
    prefix: Bytes,
    /// Every byte read while recording (a TLS listener with passthrough hosts, until the
    /// ClientHello has been read).
    recorded: Option<Vec<u8>>,
}

impl<T> Rewound<T> {
    pub(crate) fn new(inner: T, prefix: Bytes) -> Self {
        Self {
            inner,
            prefix,
            recorded: None,
        }
    }

    /// Starts keeping a copy of what is read.
    pub(crate) fn record(&mut self) {
        self.recorded = Some(Vec::new());
    }

    /// Stops recording and forgets the copy.
    pub(crate) fn stop_recording(&mut self) {
        self.recorded = None;
    }

    /// The socket, the bytes read so far (when recording), and what was never read of the
    /// prefix.
    pub(crate) fn into_parts(self) -> (T, Vec<u8>, Bytes) {
        (self.inner, self.recorded.unwrap_or_default(), self.prefix)
    }
}

impl Rewound<tokio::net::TcpStream> {
    /// Resolves once the socket has bytes to read (or the prefix has).
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.prefix.has_remaining() {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_read_ready(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewound<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        if this.prefix.has_remaining() {
            let take = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..take]);
            this.prefix.advance(take);
        } else {
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        }
        if let Some(recorded) = &mut this.recorded {
            let read = &buf.filled()[before..];
            if recorded.len() + read.len() > MAX_RECORDED {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "TLS ClientHello too large",
                )));
            }
            recorded.extend_from_slice(read);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewound<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
