//! Bodies in both directions: a client's request body under its size limit and idle timeout (buffered for replay when small), and an endpoint's response body that counts the endpoint's load, times out when it stalls, and may be held whole.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::error::{ProxyError, ResponseBodyError};
use crate::telemetry::completion::Completion;
use crate::upstream::health::InFlight;
use crate::upstream::pool::Checkin;
use crate::upstream::retry_buffer::HeldBytes;

/// Request bodies up to this size are buffered so an attempt can be replayed on another endpoint.
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// The body sent upstream: buffered (and so replayable, and sent at once with the head) or
/// streamed from the client (its upload's progress watched).
pub(crate) enum UpstreamBody {
    Buffered(Full<Bytes>),
    Streamed {
        body: ClientBody,
        progress: Arc<UploadProgress>,
    },
}

/// The client's request body as the attempts see it.
pub(crate) enum RequestBody {
    /// Buffered whole: every attempt sends a copy.
    Replayable(Bytes),
    /// Streamed from the client: only the attempt that takes it can send it, and it is given
    /// back when that attempt never reached the endpoint.
    Streaming(Option<ClientBody>),
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
        body: Incoming,
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
        let body = ClientBody::new(body, limits);
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
            Self::Replayable(bytes) => Some(UpstreamBody::Buffered(Full::new(bytes.clone()))),
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
            Self::Buffered(full) => return Pin::new(full).poll_frame(cx).map_err(Into::into),
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
            Self::Buffered(full) => full.is_end_stream(),
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
            Self::Buffered(full) => full.size_hint(),
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
    Read(#[source] hyper::Error),
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
    pub(crate) fn find(error: &hyper::Error) -> Option<&Self> {
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
pub(crate) struct ClientBody {
    inner: Incoming,
    max_size: Option<u64>,
    received: u64,
    idle: IdleTimer,
}

impl ClientBody {
    fn new(inner: Incoming, limits: BodyLimits) -> Self {
        Self {
            inner,
            max_size: limits.max_size,
            received: 0,
            idle: IdleTimer::new(limits.idle),
        }
    }
}

impl Body for ClientBody {
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

/// An endpoint's response body as the attempts hand it on: still streaming from the endpoint,
/// or held whole (see [`crate::upstream::retry_buffer`]).
pub(crate) enum EndpointBody {
    Streaming(StreamingBody),
    Held(HeldBody),
}

/// A response body still coming from its endpoint: the endpoint counts the request in flight
/// until the body ends or the client goes away, and the body fails when the endpoint stalls
/// between chunks.
pub(crate) struct StreamingBody {
    inner: Incoming,
    idle: IdleTimer,
    in_flight: Option<InFlight>,
    /// The upstream connection, returned to its pool once the body has ended.
    checkin: Option<Checkin>,
    ended: bool,
}

impl StreamingBody {
    pub(crate) fn new(
        inner: Incoming,
        in_flight: InFlight,
        idle: Duration,
        checkin: Checkin,
    ) -> Self {
        Self {
            inner,
            idle: IdleTimer::new(idle),
            in_flight: Some(in_flight),
            checkin: Some(checkin),
            ended: false,
        }
    }

    /// The endpoint's load, for a connection that became a tunnel: it never goes back to
    /// the pool.
    pub(crate) fn into_tunnel(mut self) -> Option<InFlight> {
        self.checkin = None;
        self.in_flight.take()
    }

    /// Reads the rest of the body within the idle timeout, holding it under `reservation`.
    /// The connection goes back to its pool at once; a body cut off takes it along.
    pub(crate) async fn read_whole(
        mut self,
        length: u64,
        reservation: HeldBytes,
    ) -> Result<HeldBody, ResponseBodyError> {
        let mut chunks = VecDeque::new();
        let mut received = 0u64;
        let mut trailers = None;
        while let Some(frame) = std::future::poll_fn(|cx| self.poll_watched(cx)).await {
            match frame?.into_data() {
                Ok(chunk) => {
                    received += chunk.len() as u64;
                    chunks.push_back(chunk);
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
            if received > length {
                return Err(ResponseBodyError::LongerThanDeclared);
            }
        }
        self.completed();
        Ok(HeldBody {
            chunks,
            remaining: received,
            trailers,
            _reservation: reservation,
        })
    }

    fn poll_watched(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        poll_watched(&mut self.inner, &mut self.idle, cx).map_err(|error| match error {
            Watched::Stalled => ResponseBodyError::Stalled,
            Watched::Failed(error) => ResponseBodyError::Read(error),
        })
    }

    /// The body arrived whole: the endpoint's run of cut-off responses, if any, is over.
    fn completed(&mut self) {
        self.ended = true;
        if let Some(in_flight) = &self.in_flight {
            in_flight.stats().record_response_complete();
        }
    }

    /// The endpoint cut a streamed body off or stalled: it counts against the endpoint's health
    /// (the attempt that reached it already counted as answered).
    fn cut_off(&self) {
        if let Some(in_flight) = &self.in_flight {
            in_flight.stats().record_streamed_cut();
        }
    }
}

/// A body read to its end gives its connection back; one dropped half-way takes its
/// connection with it (hyper closes a connection whose response was not read).
impl Drop for StreamingBody {
    fn drop(&mut self) {
        if self.ended || self.inner.is_end_stream() {
            if let Some(checkin) = self.checkin.take() {
                checkin.response_ended();
            }
        }
    }
}

/// A response body read whole from its endpoint before the client saw any of it, in the
/// chunks it came in.
pub(crate) struct HeldBody {
    chunks: VecDeque<Bytes>,
    /// Bytes not yet handed on.
    remaining: u64,
    trailers: Option<http::HeaderMap>,
    /// Its share of the proxy-wide cap, given back when the body is gone.
    _reservation: HeldBytes,
}

impl HeldBody {
    fn poll_frame(&mut self) -> Option<Frame<Bytes>> {
        if let Some(chunk) = self.chunks.pop_front() {
            self.remaining -= chunk.len() as u64;
            return Some(Frame::data(chunk));
        }
        self.trailers.take().map(Frame::trailers)
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A response body on its way to the client: the endpoint's, streaming or held, with the
/// request's log phase recorded when it ends.
pub struct TrackedBody {
    body: EndpointBody,
    /// Body bytes passed on so far.
    sent: u64,
    /// The request's metrics and access-log line, recorded when the body ends or drops.
    completion: Option<Completion>,
}

impl TrackedBody {
    pub(crate) fn new(body: EndpointBody) -> Self {
        Self {
            body,
            sent: 0,
            completion: None,
        }
    }

    /// Records `completion` once the body has ended (or the client left).
    pub(crate) fn on_end(&mut self, completion: Completion) {
        self.completion = Some(completion);
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        if let Some(completion) = self.completion.take() {
            completion.finish(self.sent);
        }
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = ResponseBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = match &mut this.body {
            EndpointBody::Streaming(body) => {
                let polled = body.poll_watched(cx);
                match &polled {
                    Poll::Ready(Some(Err(_))) => body.cut_off(),
                    Poll::Ready(None) => body.completed(),
                    _ => {}
                }
                polled
            }
            EndpointBody::Held(body) => Poll::Ready(body.poll_frame().map(Ok)),
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.sent += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            EndpointBody::Streaming(body) => body.inner.is_end_stream(),
            EndpointBody::Held(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            EndpointBody::Streaming(body) => body.inner.size_hint(),
            EndpointBody::Held(body) => body.size_hint(),
        }
    }
}

/// How a body read under an idle timer failed.
enum Watched<E> {
    /// No chunk came within the idle timeout.
    Stalled,
    Failed(E),
}

/// What [`poll_watched`] yields: the next frame, the end, or why there is none.
type WatchedFrame<B> = Option<Result<Frame<<B as Body>::Data>, Watched<<B as Body>::Error>>>;

/// The next frame of `inner`, with the idle clock running while it waits.
fn poll_watched<B: Body + Unpin>(
    inner: &mut B,
    idle: &mut IdleTimer,
    cx: &mut Context<'_>,
) -> Poll<WatchedFrame<B>> {
    match Pin::new(inner).poll_frame(cx) {
        Poll::Ready(Some(Ok(frame))) => {
            idle.progressed();
            Poll::Ready(Some(Ok(frame)))
        }
        Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(Watched::Failed(error)))),
        Poll::Ready(None) => Poll::Ready(None),
        Poll::Pending if idle.expired(cx) => Poll::Ready(Some(Err(Watched::Stalled))),
        Poll::Pending => Poll::Pending,
    }
}

/// The clock between two chunks of a body. It starts when the body has to wait and stops
/// when a chunk arrives; the timer is allocated once, the first time the body waits.
struct IdleTimer {
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    running: bool,
}

impl IdleTimer {
    fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            sleep: None,
            running: false,
        }
    }

    /// The body is waiting: starts the clock if it is not running, and says whether it ran out.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = Instant::now() + self.timeout;
        let sleep = match (&mut self.sleep, self.running) {
            (Some(sleep), true) => sleep,
            (Some(sleep), false) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            (slot @ None, _) => slot.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.running = true;
        sleep.as_mut().poll(cx).is_ready()
    }

    fn progressed(&mut self) {
        self.running = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_runs_only_while_the_body_waits() {
        let mut timer = IdleTimer::new(Duration::from_secs(60));
        let waker = futures_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!timer.expired(&mut cx));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!timer.expired(&mut cx));
        timer.progressed();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!timer.expired(&mut cx), "a chunk restarted the clock");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(poll_fn(|cx| Poll::Ready(timer.expired(cx))).await);
    }

    fn futures_waker() -> std::task::Waker {
        std::task::Waker::noop().clone()
    }

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
