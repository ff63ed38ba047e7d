//! HTTP/1.1 on one client connection with sluice's own codec: each request head parsed in place and judged by the framing rules, the handler's answer written in one vectored write where it can be, and an idle connection parked with no buffers at all.
//!
//! The cycle for each request: read and parse the head (`head.rs`; a refused head gets its
//! 400, 414 or 431 and the connection closes), hand the request to the handler with a body
//! that reads itself from the connection (`body.rs`, `conn.rs`; a 100 Continue goes out when
//! the handler first reads a body that asked for it), and while the handler works, watch for
//! the client leaving, which cancels the request. Then write the answer (`response.rs`),
//! head and first piece of body together, and go on with the next request when the
//! connection stays open and the request's body was read to its end. A 101 hands the socket
//! to the tunnel that waits for it.
//!
//! The client limits hold throughout: the header timeout runs from the first byte of a head,
//! the idle timeout from the end of the last answer, and a connection idle for
//! [`PARK_AFTER`] lets go of its read and write buffers and waits on socket readiness alone.

mod body;
mod conn;
mod date;
mod head;
mod response;

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_TYPE, TE};
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use super::activity::{ClientTimeouts, ConnectionActivity};
use super::client_io::ReadReady;
use super::framing::HeadProblem;
use super::supervisor::{supervise, Connection as Supervised};
use super::{Handler, Listener};
use crate::client_body::{BodySource, ClientBody};
use crate::connection::ClientInfo;
use crate::headers::has_token;
use crate::switch::{self, SwitchSender};
use crate::telemetry::OpenConnection;
use conn::{Arrival, ClientGone, Connection};
use head::{BodyFraming, HeadLimits, Parsed, RequestHead};
use response::{encode_head, Asked, BodyLength, Encoder};

/// How long an HTTP/1.1 connection must have been idle to park. Short, so that a crowd of
/// clients that go idle together never holds many buffers at once; long enough that a busy
/// connection, whose gaps between requests are far shorter, never parks.
pub(super) const PARK_AFTER: Duration = Duration::from_millis(50);
/// How often a serving connection is looked at to see whether it can park: an idle
/// connection parks 50 to 100 ms after its last answer, and a busy one costs this look
/// about twenty times a second, not once per request.
const PARK_CHECK: Duration = Duration::from_millis(50);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What an answer's head needs besides its header fields: the status line, the framing
/// fields and the date.
const HEAD_ROOM: usize = 128;

/// What one HTTP/1.1 connection is served with.
pub(super) struct Http1<'a, H: Handler> {
    pub(super) listener: &'a Listener<H>,
    pub(super) activity: Arc<ConnectionActivity>,
    pub(super) info: ClientInfo,
    pub(super) open: OpenConnection,
    pub(super) peer: SocketAddr,
}

/// How a connection's requests ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Idle long enough to park: the serving ends, the connection waits.
    Park,
    /// Cleanly: the client left between requests, or the connection does not stay open.
    Close,
    /// Something failed: the socket is dropped without a goodbye.
    Abort,
    /// The socket went to a tunnel.
    Switched,
}

impl<'a, H: Handler> Http1<'a, H> {
    /// Serves requests from `io`, whose first bytes are `read`, until the client leaves, a
    /// limit is hit, or the listener stops.
    ///
    /// The cycle: requests are served under the supervisor until the connection has been
    /// idle for [`PARK_AFTER`]; then the serving and its supervision are dropped, the buffers
    /// let go, and the connection waits on socket readiness, the idle timeout or the listener
    /// stopping. A readable socket serves again.
    ///
    /// An async block rather than an async fn: a parked connection keeps this future, and an
    /// async fn stores its parameters twice (as captured, and again as its body's locals).
    #[allow(clippy::manual_async_fn)]
    pub(super) fn serve<S>(self, io: S, read: BytesMut) -> impl Future<Output = ()> + 'a
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        async move {
            let options = &self.listener.options;
            let timeouts = options.timeouts();
            let connection = Arc::new(Connection::new(
                io,
                read,
                self.activity.clone(),
                PARK_AFTER,
                options.metrics.parked.clone(),
                options.max_headers,
            ));
            loop {
                // Boxed: what the task holds while parked is only what this block keeps.
                let ended = Box::pin(self.supervised(&connection, timeouts)).await;
                match ended {
                    Some(Ending::Park) => {
                        connection.park();
                        let serve_again = self.wait_parked(&connection, timeouts).await;
                        connection.unpark();
                        if !serve_again {
                            Box::pin(close(&connection, timeouts)).await;
                            return;
                        }
                    }
                    Some(Ending::Close) => {
                        Box::pin(close(&connection, timeouts)).await;
                        return;
                    }
                    // Aborted, switched, or ended by a client limit.
                    Some(Ending::Abort | Ending::Switched) | None => return,
                }
            }
        }
    }

    /// The connection's requests under the supervisor, until the connection ends or parks;
    /// `None` when a client limit ended it.
    async fn supervised<S>(
        &self,
        connection: &Arc<Connection<S>>,
        timeouts: ClientTimeouts,
    ) -> Option<Ending>
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        let mut serving = Serving {
            requests: Box::pin(self.requests(connection)),
            connection,
        };
        supervise(
            Pin::new(&mut serving),
            &self.activity,
            timeouts,
            self.listener.shutdown.clone().wait(),
            Some(PARK_CHECK),
            self.peer,
        )
        .await
    }

    /// Waits while parked: `true` once the client may have sent a request, `false` when the
    /// connection should close (the idle timeout, the listener stopping, a socket error).
    async fn wait_parked<S>(&self, connection: &Connection<S>, timeouts: ClientTimeouts) -> bool
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        let idle_ends = self
            .activity
            .deadline(&timeouts)
            .map(|(at, _)| at)
            .unwrap_or_else(|| tokio::time::Instant::now() + timeouts.idle);
        tokio::select! {
            ready = poll_fn(|cx| connection.poll_read_ready(cx)) => ready.is_ok(),
            () = self.listener.shutdown.clone().wait() => false,
            () = tokio::time::sleep_until(idle_ends) => false,
        }
    }

    /// The connection's requests, one after the other.
    async fn requests<S>(&self, connection: &Arc<Connection<S>>) -> Ending
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        let limits = HeadLimits {
            max_bytes: self.listener.options.max_header_bytes,
            max_headers: self.listener.options.max_headers,
        };
        loop {
            let head = match poll_fn(|cx| connection.poll_next(cx, limits)).await {
                Ok(Arrival::Head(Parsed::Complete(head))) => head,
                Ok(Arrival::Head(Parsed::Refused(problem))) => {
                    return self.refuse(connection, problem).await
                }
                Ok(Arrival::Idle) => return Ending::Park,
                Ok(Arrival::Head(Parsed::Partial) | Arrival::End) => return Ending::Close,
                Err(error) => {
                    tracing::debug!(peer = %self.peer, %error, "reading a request head failed");
                    return Ending::Abort;
                }
            };
            // Not boxed: this future lives only while the connection serves (parking drops
            // it), so the exchange's state in it costs an idle connection nothing, and a box
            // would be an allocation and a copy per request.
            match self.exchange(connection, head).await {
                Next::Request => {}
                Next::End(ending) => return ending,
            }
        }
    }

    /// One request: the handler's answer to it, written out.
    async fn exchange<S>(&self, connection: &Arc<Connection<S>>, head: RequestHead) -> Next
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        let RequestHead {
            mut parts,
            body,
            keep_alive,
            expect_continue,
            wants_upgrade,
        } = head;
        let number = connection.begin_request(body, expect_continue);
        let client_body = match body {
            BodyFraming::None => ClientBody::empty(),
            BodyFraming::Length(length) => ClientBody::http1(
                connection.clone() as Arc<dyn BodySource>,
                number,
                Some(length),
            ),
            BodyFraming::Chunked => {
                ClientBody::http1(connection.clone() as Arc<dyn BodySource>, number, None)
            }
        };
        let switch = wants_upgrade.then(|| {
            let (sender, pending) = switch::pending();
            parts.extensions.insert(pending);
            sender
        });
        let method = parts.method.clone();
        let version = parts.version;
        let trailers = parts
            .headers
            .get_all(TE)
            .iter()
            .any(|value| has_token(value.as_bytes(), b"trailers"));
        self.open.request(version);
        let mut activity = self.activity.request_started();
        let request = Request::from_parts(parts, client_body);
        // The handler's future is pinned here, not boxed, and dropped at the end of this block:
        // when the client leaves first, that cancels the request.
        let answer = {
            let answering = self.listener.handler.call(request, self.info.clone());
            let mut answering = std::pin::pin!(answering);
            poll_fn(|cx| match answering.as_mut().poll(cx) {
                Poll::Ready(response) => Poll::Ready(Some(response)),
                Poll::Pending => connection.poll_client_gone(cx).map(|ClientGone| None),
            })
            .await
        };
        let Some(response) = answer else {
            tracing::debug!(peer = %self.peer, "the client left before its answer");
            return Next::End(Ending::Abort);
        };
        let status = response.status();
        if status == StatusCode::SWITCHING_PROTOCOLS {
            activity.upgraded();
        }
        activity.answered();
        let asked = Asked {
            method: &method,
            version,
            keep_alive: keep_alive && !connection.is_closing(),
            trailers,
        };
        let written = write_answer(connection, response, asked).await;
        drop(activity);
        let encoder = match written {
            Ok(encoder) => encoder,
            Err(error) => {
                tracing::debug!(peer = %self.peer, %error, "writing an answer failed");
                return Next::End(Ending::Abort);
            }
        };
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Next::End(hand_over(connection, switch));
        }
        if encoder.closes() || !poll_fn(|cx| connection.poll_finish_body(cx)).await {
            return Next::End(Ending::Close);
        }
        Next::Request
    }

    /// Answers a head that cannot be served, and ends the connection: the bytes after a head
    /// that cannot be trusted cannot be trusted either.
    async fn refuse<S>(&self, connection: &Arc<Connection<S>>, problem: HeadProblem) -> Ending
    where
        S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    {
        tracing::debug!(client = %self.info.client, reason = problem.reason(), "refused a request head");
        let asked = Asked {
            method: &http::Method::GET,
            version: http::Version::HTTP_11,
            keep_alive: false,
            trailers: false,
        };
        match write_answer(connection, refusal(problem), asked).await {
            Ok(_) => Ending::Close,
            Err(_) => Ending::Abort,
        }
    }
}

/// After one request: the next one, or the connection's end.
enum Next {
    Request,
    End(Ending),
}

/// Hands the socket to the tunnel that waits for it, after a 101.
fn hand_over<S>(connection: &Connection<S>, switch: Option<SwitchSender>) -> Ending
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    match (switch, connection.switch()) {
        (Some(switch), Some(stream)) => {
            switch.send(stream);
            Ending::Switched
        }
        // A 101 to a request that did not ask to switch: the connection is over.
        _ => Ending::Close,
    }
}

/// Why an answer could not be written to its end.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error(transparent)]
    Framing(#[from] response::BadFraming),
    #[error(transparent)]
    ShortBody(#[from] response::ShortBody),
    #[error("the answer's body failed: {0}")]
    Body(BoxError),
    #[error("the client left while its answer was written")]
    ClientGone,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes `response` as the answer `asked` for; returns how its body was framed.
async fn write_answer<S, B>(
    connection: &Connection<S>,
    response: Response<B>,
    asked: Asked<'_>,
) -> Result<Encoder, WriteError>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let (mut head, mut body) = response.into_parts();
    let length = match body.is_end_stream() {
        true => BodyLength::Empty,
        false => body
            .size_hint()
            .exact()
            .map_or(BodyLength::Unknown, BodyLength::Known),
    };
    poll_fn(|cx| connection.lock().poll_answer_begins(cx)).await?;
    let mut encoder = {
        let mut state = connection.lock();
        // Room for the whole head at once: a new connection's buffer grew by doubling, five
        // reallocations a head (bench/instructions).
        state.out.head.reserve(HEAD_ROOM + head.headers.len() * 48);
        encode_head(&mut state.out.head, &mut head, asked, length)?
    };
    drop(head);
    let mut ended = false;
    while !encoder.is_done() && !ended {
        let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(Ok(frame.map(|frame| frame.map_err(Into::into)))),
            // While the body is slow, what is ready goes out (an event stream's head, say).
            Poll::Pending => match connection.poll_write_out(cx) {
                Poll::Ready(Err(error)) => Poll::Ready(Err(WriteError::Io(error))),
                _ => connection
                    .poll_client_gone(cx)
                    .map(|ClientGone| Err(WriteError::ClientGone)),
            },
        })
        .await?;
        {
            let mut state = connection.lock();
            let out = &mut state.out;
            match frame {
                None => {
                    ended = true;
                    encoder.end(out)?;
                }
                Some(Err(error)) => return Err(WriteError::Body(error)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        ended = body.is_end_stream();
                        if !data.is_empty() {
                            encoder.data(data, ended, out);
                        }
                        if ended {
                            encoder.end(out)?;
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            ended = true;
                            encoder.trailers(trailers, asked.trailers, out)?;
                        }
                    }
                },
            }
        }
        write_out(connection).await?;
    }
    write_out(connection).await?;
    Ok(encoder)
}

/// Writes what waits to go out, giving up when the client leaves meanwhile.
async fn write_out<S>(connection: &Connection<S>) -> Result<(), WriteError>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    poll_fn(|cx| match connection.poll_write_out(cx) {
        Poll::Ready(written) => Poll::Ready(written.map_err(WriteError::Io)),
        Poll::Pending => connection
            .poll_client_gone(cx)
            .map(|ClientGone| Err(WriteError::ClientGone)),
    })
    .await
}

/// Closes the connection as a server should: its write side first, so that the client reads
/// the end of the stream (and, on TLS, close_notify).
async fn close<S>(connection: &Arc<Connection<S>>, timeouts: ClientTimeouts)
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    let still_held = Arc::strong_count(connection) > 1;
    let shutdown = poll_fn(|cx| connection.poll_shutdown(cx, still_held));
    let _ = tokio::time::timeout(timeouts.write_stall, shutdown).await;
}

/// 400, 414 or 431 for a refused head, closing the connection.
fn refusal(problem: HeadProblem) -> Response<http_body_util::Full<Bytes>> {
    let text: &'static str = match problem.status() {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "431 request header fields too large\n",
        StatusCode::URI_TOO_LONG => "414 uri too long\n",
        _ => "400 bad request\n",
    };
    let mut response = Response::new(http_body_util::Full::new(Bytes::from_static(
        text.as_bytes(),
    )));
    *response.status_mut() = problem.status();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The connection's requests as the supervisor drives them: a future, and a way to ask it
/// to stop after the request in flight.
struct Serving<'c, F, S> {
    requests: Pin<Box<F>>,
    connection: &'c Connection<S>,
}

impl<F: Future<Output = Ending>, S> Future for Serving<'_, F, S> {
    type Output = Ending;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ending> {
        self.requests.as_mut().poll(cx)
    }
}

impl<F: Future<Output = Ending>, S> Supervised for Serving<'_, F, S>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        self.connection.stop();
    }
}

#[cfg(test)]
mod tests;
