//! Request bodies kept for replay when small enough, and response bodies that count their endpoint's load until they end.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::error::ProxyError;
use crate::health::InFlight;
use crate::pool::UpstreamBody;

/// Request bodies up to this size are buffered so an attempt can be replayed on another endpoint.
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// The client's request body as the attempts see it.
pub(crate) enum RequestBody {
    /// Buffered whole: every attempt sends a copy.
    Replayable(Bytes),
    /// Streamed from the client: only the attempt that takes it can send it, and it is given
    /// back when that attempt never reached the endpoint.
    Streaming(Option<Incoming>),
}

impl RequestBody {
    /// Buffers the body when it is empty, or when `may_replay` and its declared length is at
    /// most `limit`; streams it otherwise.
    pub(crate) async fn prepare(
        parts: &Parts,
        body: Incoming,
        may_replay: bool,
        limit: usize,
    ) -> Result<Self, ProxyError> {
        if body.is_end_stream() {
            return Ok(Self::Replayable(Bytes::new()));
        }
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
        match declared {
            Some(length) if may_replay && length <= limit => {
                let collected =
                    Limited::new(body, limit)
                        .collect()
                        .await
                        .map_err(|error| match error.downcast::<hyper::Error>() {
                            Ok(error) => ProxyError::RequestBody(*error),
                            Err(_) => ProxyError::BadRequest("request body longer than declared"),
                        })?;
                Ok(Self::Replayable(collected.to_bytes()))
            }
            _ => Ok(Self::Streaming(Some(body))),
        }
    }

    /// Whether a failed attempt that already sent the body can be sent again.
    pub(crate) fn is_replayable(&self) -> bool {
        matches!(self, Self::Replayable(_))
    }

    /// The body for the next attempt, or `None` when a streamed body was already sent.
    pub(crate) fn take(&mut self) -> Option<UpstreamBody> {
        match self {
            Self::Replayable(bytes) => Some(Either::Left(Full::new(bytes.clone()))),
            Self::Streaming(body) => body.take().map(Either::Right),
        }
    }

    /// Takes back the body of an attempt that never reached its endpoint.
    pub(crate) fn restore(&mut self, body: UpstreamBody) {
        if let (Self::Streaming(slot), Either::Right(body)) = (self, body) {
            *slot = Some(body);
        }
    }
}

/// An upstream response body that keeps its endpoint's request counted in flight until the
/// body ends or the client goes away.
pub struct TrackedBody {
    inner: Incoming,
    _in_flight: InFlight,
}

impl TrackedBody {
    pub(crate) fn new(inner: Incoming, in_flight: InFlight) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
