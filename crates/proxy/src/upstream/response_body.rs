//! An endpoint's response body on its way to the client: it counts the endpoint's load, times out when it stalls, may be held whole for a retry, and records the request's log phase when it ends.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::error::{ResponseBodyError, UpstreamError};
use crate::telemetry::completion::Completion;
use crate::upstream::health::InFlight;
use crate::upstream::http1::{Http1Body, Http1Connection, Reusable};
use crate::upstream::idle::{poll_watched, IdleTimer, Watched};
use crate::upstream::pool::Checkin;
use crate::upstream::retry_buffer::HeldBytes;

/// An endpoint's response body as the attempts hand it on: still streaming from the endpoint,
/// or held whole (see [`crate::upstream::retry_buffer`]). Both are boxed: the response is
/// moved a few dozen times between the attempt and hyper's dispatch, and with the body inline
/// it was 464 bytes each time rather than 224 (bench/instructions: about 1,000 instructions a
/// request, against one allocation).
pub(crate) enum EndpointBody {
    Streaming(Box<StreamingBody>),
    Held(Box<HeldBody>),
}

/// A response body still coming from its endpoint: the endpoint counts the request in flight
/// until the body ends or the client goes away, and the body fails when the endpoint stalls
/// between chunks.
pub(crate) struct StreamingBody {
    inner: EndpointStream,
    idle: IdleTimer,
    in_flight: Option<InFlight>,
    /// The upstream connection, returned to its pool once the body has ended.
    checkin: Option<Checkin>,
    ended: bool,
}

impl StreamingBody {
    pub(crate) fn new(
        inner: EndpointStream,
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

    /// The endpoint's load and its connection, for a connection that switched protocols: it
    /// never goes back to the pool.
    pub(crate) fn into_tunnel(mut self) -> Option<(InFlight, Http1Connection)> {
        self.checkin = None;
        let connection = match std::mem::replace(&mut self.inner, EndpointStream::Taken) {
            EndpointStream::Http1(body) => body.into_upgraded()?,
            _ => return None,
        };
        Some((self.in_flight.take()?, connection))
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
/// connection with it (a connection whose response was not read to its end is closed).
impl Drop for StreamingBody {
    fn drop(&mut self) {
        if self.ended || self.inner.is_end_stream() {
            if let Some(checkin) = self.checkin.take() {
                let inner = std::mem::replace(&mut self.inner, EndpointStream::Taken);
                checkin.response_ended(inner.into_reusable());
            }
        }
    }
}

/// An endpoint's response body as its connection delivers it: read by sluice's own HTTP/1.1
/// client, or by hyper's HTTP/2 client.
pub(crate) enum EndpointStream {
    Http1(Http1Body),
    Http2(Incoming),
    /// Its connection was handed on (to the pool or a tunnel).
    Taken,
}

impl EndpointStream {
    /// The HTTP/1.1 connection, when the body has ended and the connection may carry another
    /// request.
    fn into_reusable(self) -> Option<Reusable> {
        match self {
            Self::Http1(body) => body.into_reusable(),
            _ => None,
        }
    }
}

impl Body for EndpointStream {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        match self.get_mut() {
            Self::Http1(body) => Pin::new(body).poll_frame(cx),
            Self::Http2(body) => Pin::new(body).poll_frame(cx).map_err(UpstreamError::Http2),
            Self::Taken => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Http1(body) => body.is_end_stream(),
            Self::Http2(body) => body.is_end_stream(),
            Self::Taken => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Http1(body) => body.size_hint(),
            Self::Http2(body) => body.size_hint(),
            Self::Taken => SizeHint::with_exact(0),
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

/// A content coding applied to a response body as it streams (compression): each chunk is
/// coded and flushed, so the client can decode everything sent so far.
pub(crate) trait BodyCoding: Send {
    /// The coded form of `chunk`, flushed.
    fn code(&mut self, chunk: &[u8]) -> std::io::Result<Bytes>;
    /// The coding's last bytes, once the body has ended.
    fn finish(&mut self) -> std::io::Result<Bytes>;
}

/// A body being coded: the coding, and where it stands.
struct Coded {
    coding: Box<dyn BodyCoding>,
    /// The coding's end has been sent.
    finished: bool,
    /// The endpoint's trailers, sent after the coding's last bytes.
    trailers: Option<http::HeaderMap>,
}

/// A response body on its way to the client: the endpoint's, streaming or held, perhaps
/// coded, with the request's log phase recorded when it ends.
pub struct TrackedBody {
    body: EndpointBody,
    /// Body bytes passed on so far (coded bytes, when coded).
    sent: u64,
    /// The request's metrics and access-log line, recorded when the body ends or drops.
    completion: Option<Completion>,
    /// The content coding the response filters chose, if any.
    coded: Option<Box<Coded>>,
}

impl TrackedBody {
    pub(crate) fn new(body: EndpointBody) -> Self {
        Self {
            body,
            sent: 0,
            completion: None,
            coded: None,
        }
    }

    /// The body coded with `coding` on its way out, when there is one.
    pub(crate) fn coded(mut self, coding: Option<Box<dyn BodyCoding>>) -> Self {
        self.coded = coding.map(|coding| {
            Box::new(Coded {
                coding,
                finished: false,
                trailers: None,
            })
        });
        self
    }

    /// The endpoint's next frame, as it comes.
    fn poll_endpoint(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        match &mut self.body {
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
        }
    }

    /// The next frame of a coded body: each data frame coded, then the coding's end, then
    /// the endpoint's trailers.
    fn poll_coded(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        loop {
            if let Some(coded) = self.coded.as_mut().filter(|coded| coded.finished) {
                return Poll::Ready(coded.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            let polled = std::task::ready!(self.poll_endpoint(cx));
            let Some(coded) = self.coded.as_mut() else {
                return Poll::Ready(None);
            };
            let output = match polled {
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => coded.coding.code(&data),
                    Err(frame) => {
                        coded.trailers = frame.into_trailers().ok();
                        coded.finished = true;
                        coded.coding.finish()
                    }
                },
                None => {
                    coded.finished = true;
                    coded.coding.finish()
                }
            };
            match output {
                Ok(bytes) if bytes.is_empty() => continue,
                Ok(bytes) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Err(_) => return Poll::Ready(Some(Err(ResponseBodyError::Coding))),
            }
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
        let polled = match this.coded {
            None => this.poll_endpoint(cx),
            Some(_) => this.poll_coded(cx),
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.sent += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        if let Some(coded) = &self.coded {
            return coded.finished && coded.trailers.is_none();
        }
        match &self.body {
            EndpointBody::Streaming(body) => body.inner.is_end_stream(),
            EndpointBody::Held(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.coded.is_some() {
            return SizeHint::default();
        }
        match &self.body {
            EndpointBody::Streaming(body) => body.inner.size_hint(),
            EndpointBody::Held(body) => body.size_hint(),
        }
    }
}

/// A response body: the upstream's, streamed through, or the proxy's own short text.
pub type ProxyBody = http_body_util::Either<TrackedBody, Full<Bytes>>;
