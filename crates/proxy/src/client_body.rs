//! A request body as a listener received it: read from the connection by sluice's own HTTP/1.1 codec, or handed over by hyper's HTTP/2 server.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// Why reading a request body failed.
pub type BodyReadError = Box<dyn std::error::Error + Send + Sync>;

/// A client's request body.
pub struct ClientBody {
    kind: Kind,
}

enum Kind {
    /// No body, or one that has ended.
    Empty,
    Http1(Http1Body),
    /// From hyper's server (HTTP/2).
    Hyper(Incoming),
}

/// Where an HTTP/1.1 request body comes from: its connection, which decodes the body of one
/// request at a time. `request` names the request whose body is asked for, so that a body
/// kept past its request's end never reads the next request's bytes.
pub(crate) trait BodySource: Send + Sync {
    /// The next frame of request `request`'s body (data, then maybe trailers), `None` once
    /// it has ended.
    fn poll_frame(
        &self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>>;

    /// The handler let go of request `request`'s body before its end.
    fn abandon(&self, request: u64);
}

/// One HTTP/1.1 request's body, read from its connection as it is polled.
pub(crate) struct Http1Body {
    source: Arc<dyn BodySource>,
    request: u64,
    /// Bytes still to come when the request declared its length.
    remaining: Option<u64>,
    ended: bool,
}

impl ClientBody {
    /// A request without a body.
    pub fn empty() -> Self {
        Self { kind: Kind::Empty }
    }

    /// Request `request`'s body on an HTTP/1.1 connection; `length` is its Content-Length,
    /// `None` for a chunked body.
    pub(crate) fn http1(source: Arc<dyn BodySource>, request: u64, length: Option<u64>) -> Self {
        Self {
            kind: Kind::Http1(Http1Body {
                source,
                request,
                remaining: length,
                ended: false,
            }),
        }
    }

    /// A body hyper's server received (an HTTP/2 stream's).
    pub(crate) fn from_hyper(body: Incoming) -> Self {
        Self {
            kind: Kind::Hyper(body),
        }
    }
}

impl std::fmt::Debug for ClientBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Empty => "empty",
            Kind::Http1(_) => "http1",
            Kind::Hyper(_) => "hyper",
        };
        f.debug_struct("ClientBody").field("kind", &kind).finish()
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BodyReadError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Http1(body) => body.poll_frame(cx),
            Kind::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Http1(body) => body.ended || body.remaining == Some(0),
            Kind::Hyper(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Http1(body) => match (body.ended, body.remaining) {
                (true, _) => SizeHint::with_exact(0),
                (false, Some(length)) => SizeHint::with_exact(length),
                (false, None) => SizeHint::default(),
            },
            Kind::Hyper(body) => body.size_hint(),
        }
    }
}

impl Http1Body {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let polled = self.source.poll_frame(self.request, cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(remaining)) = (frame.data_ref(), &mut self.remaining) {
                    *remaining = remaining.saturating_sub(data.len() as u64);
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.ended = true,
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Http1Body {
    fn drop(&mut self) {
        if !self.ended {
            self.source.abandon(self.request);
        }
    }
}
