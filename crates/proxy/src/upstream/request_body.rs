//! The body sent upstream: a client's request body under its size limit and idle timeout, buffered for replay when small, or streamed with its upload's progress watched.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client_body::{BodyReadError, ClientBody};
use crate::error::{ProxyError, UpstreamError};
use crate::upstream::idle::{poll_watched, IdleTimer, Watched};

/// Request bodies up to this size are buffered so an attempt can be replayed on another endpoint.
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// The body sent upstream: buffered (and so replayable, and sent at once with the head) or
/// streamed from the client (its upload's progress watched).
pub(crate) enum UpstreamBody {
    /// The whole body (`None` once it has been taken, or when it is empty).
    Buffered(Option<Bytes>),
    Streamed {
        body: LimitedBody,
        progress: Arc<UploadProgress>,
    },
}

/// The client's request body as the attempts see it.
pub(crate) enum RequestBody {
    /// Buffered whole: every attempt sends a copy.
    Replayable(Bytes),
    /// Streamed from the client: only the attempt that takes it can send it, and it is given
    /// back when that attempt never reached the endpoint.
    Streaming(Option<LimitedBody>),
}

/// What limits a request body.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimits {
    /// The most bytes the body may have (`None`: unlimited).
    pub(crate) max_size: Option<u64>,
    /// The longest pause between two chunks.
    pub(crate) idle: Duration,
}

impl RequestBody {
    /// Refuses a body whose declared length is over the limit before anything is sent; then
    /// buffers the body when it is empty, or when `may_replay` and its declared length is at
    /// most `replay_limit`, and streams it otherwise.
    pub(crate) async fn prepare(
        parts: &Parts,
        body: ClientBody,
        limits: BodyLimits,
        may_replay: bool,
        replay_limit: usize,
    ) -> Result<Self, ProxyError> {
        if body.is_end_stream() {
            return Ok(Self::Replayable(Bytes::new()));
        }
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
        if let (Some(length), Some(max)) = (declared, limits.max_size) {
            if length > max {
                return Err(ProxyError::BodyTooLarge);
            }
        }
        let body = LimitedBody::new(body, limits);
        match declared {
            Some(length) if may_replay && length <= replay_limit as u64 => {
                let collected =
                    Limited::new(body, replay_limit)
                        .collect()
                        .await
                        .map_err(|error| match error.downcast::<ClientBodyError>() {
                            Ok(error) => error.to_proxy_error(),
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
            Self::Replayable(bytes) => Some(UpstreamBody::Buffered(
                Some(bytes.clone()).filter(|bytes| !bytes.is_empty()),
            )),
            Self::Streaming(body) => Some(UpstreamBody::Streamed {
                body: body.take()?,
                progress: Arc::new(UploadProgress::new()),
            }),
        }
    }

    /// Takes back the body of an attempt that never reached its endpoint.
    pub(crate) fn restore(&mut self, body: UpstreamBody) {
        if let (Self::Streaming(slot), UpstreamBody::Streamed { body, .. }) = (self, body) {
            *slot = Some(body);
        }
    }
}

impl UpstreamBody {
    /// How the upload of a streamed body is going; `None` for a buffered body, which goes out
    /// with the head.
    pub(crate) fn progress(&self) -> Option<Arc<UploadProgress>> {
        match self {
            Self::Buffered(_) => None,
            Self::Streamed { progress, .. } => Some(progress.clone()),
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let (body, progress) = match self.get_mut() {
            Self::Buffered(bytes) => {
                return Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes))))
            }
            Self::Streamed { body, progress } => (body, progress),
        };
        let poll = Pin::new(body).poll_frame(cx);
        match &poll {
            Poll::Ready(Some(Ok(_))) => progress.advanced(),
            Poll::Ready(None) => progress.finished(),
            Poll::Ready(Some(Err(_))) => {}
            Poll::Pending => progress.waiting_for_client(),
        }
        poll.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Buffered(bytes) => bytes.is_none(),
            Self::Streamed { body, progress } => {
                let end = body.is_end_stream();
                if end {
                    progress.finished();
                }
                end
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Buffered(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Self::Streamed { body, .. } => body.size_hint(),
        }
    }
}

/// How far one attempt's upload has got, shared by the body (as hyper sends it) and the
/// attempt (which starts the response-header timeout only once the body is sent, and notices
/// an endpoint that stops reading).
pub(crate) struct UploadProgress {
    origin: Instant,
    /// Milliseconds from `origin` to the last chunk taken.
    last_chunk: AtomicU64,
    /// Whether the body is waiting for the client, not for the endpoint to take more.
    client_owes: AtomicBool,
    sent: AtomicBool,
    done: Notify,
}

impl UploadProgress {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_chunk: AtomicU64::new(0),
            client_owes: AtomicBool::new(false),
            sent: AtomicBool::new(false),
            done: Notify::new(),
        }
    }

    fn advanced(&self) {
        let millis = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_chunk.store(millis, Ordering::Release);
        self.client_owes.store(false, Ordering::Release);
    }

    fn waiting_for_client(&self) {
        self.client_owes.store(true, Ordering::Release);
    }

    fn finished(&self) {
        if !self.sent.swap(true, Ordering::AcqRel) {
            self.done.notify_one();
        }
    }

    /// Whether the body last waited for the client rather than for the endpoint.
    pub(crate) fn client_owes(&self) -> bool {
        self.client_owes.load(Ordering::Acquire)
    }

    pub(crate) fn is_sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
    }

    /// Resolves once the whole body has been handed to the connection.
    pub(crate) async fn sent(&self) {
        while !self.is_sent() {
            self.done.notified().await;
        }
    }

    /// When the endpoint will have kept the upload waiting for `idle` since the last chunk.
    pub(crate) fn stall_deadline(&self, idle: Duration) -> Instant {
        self.origin + Duration::from_millis(self.last_chunk.load(Ordering::Acquire)) + idle
    }

    /// Whether the endpoint, not the client, has kept the upload from moving for `idle`.
    pub(crate) fn endpoint_stalled(&self, idle: Duration) -> bool {
        !self.client_owes.load(Ordering::Acquire) && Instant::now() >= self.stall_deadline(idle)
    }
}

/// Why a request body stream ended in an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientBodyError {
    #[error("request body larger than allowed")]
    TooLarge,
    #[error("the client paused the request body for longer than the idle timeout")]
    Stalled,
    #[error("reading the request body failed")]
    Read(#[source] BodyReadError),
}

impl ClientBodyError {
    /// What the client is told.
    pub(crate) fn to_proxy_error(&self) -> ProxyError {
        match self {
            Self::TooLarge => ProxyError::BodyTooLarge,
            Self::Stalled => ProxyError::ClientBodyTimeout,
            Self::Read(_) => ProxyError::BadRequest("the request body could not be read"),
        }
    }

    /// The body error behind a failed upstream exchange, if the request body caused it.
    pub(crate) fn find(error: &UpstreamError) -> Option<&Self> {
        if let UpstreamError::RequestBody(cause) = error {
            return cause.downcast_ref::<Self>();
        }
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            if let Some(found) = cause.downcast_ref::<Self>() {
                return Some(found);
            }
            source = cause.source();
        }
        None
    }
}

/// A request body streamed from the client, within its size limit and idle timeout.
pub(crate) struct LimitedBody {
    inner: ClientBody,
    max_size: Option<u64>,
    received: u64,
    idle: IdleTimer,
}

impl LimitedBody {
    fn new(inner: ClientBody, limits: BodyLimits) -> Self {
        Self {
            inner,
            max_size: limits.max_size,
            received: 0,
            idle: IdleTimer::new(limits.idle),
        }
    }
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let frame = match ready!(poll_watched(&mut this.inner, &mut this.idle, cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(Watched::Stalled)) => return Poll::Ready(Some(Err(ClientBodyError::Stalled))),
            Some(Err(Watched::Failed(error))) => {
                return Poll::Ready(Some(Err(ClientBodyError::Read(error))))
            }
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            this.received += data.len() as u64;
            if this.max_size.is_some_and(|max| this.received > max) {
                return Poll::Ready(Some(Err(ClientBodyError::TooLarge)));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_upload_is_stalled_by_the_endpoint_only_when_the_client_owes_nothing() {
        let progress = UploadProgress::new();
        let idle = Duration::from_secs(60);
        progress.waiting_for_client();
        tokio::time::advance(idle).await;
        assert!(
            !progress.endpoint_stalled(idle),
            "the client is the slow one"
        );
        progress.advanced();
        assert!(!progress.endpoint_stalled(idle));
        tokio::time::advance(idle).await;
        assert!(
            progress.endpoint_stalled(idle),
            "the endpoint took nothing for a minute"
        );
        progress.finished();
        progress.sent().await;
        assert!(progress.is_sent());
    }
}
