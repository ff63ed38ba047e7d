//! One HTTP/1.1 client connection's state, shared by its serving loop and the body of the request in flight: the socket, the bytes read and not yet used, the body's decoding, and the bytes waiting to go out. Both reach it under one lock that no one holds across a wait.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Frame;
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{BodyError, Decoded, Decoder};
use super::head::{self, BodyFraming, HeadLimits, Parsed};
use super::response::Outgoing;
use crate::client_body::{BodyReadError, BodySource};
use crate::server::activity::ConnectionActivity;
use crate::server::client_io::ReadReady;
use crate::switch::{SwitchIo, SwitchedStream};

/// What a read for a head asks for at least: a typical head fits.
const HEAD_READ: usize = 4096;
/// The most of an unread request body read past to reach the next request.
const DRAIN_LIMIT: usize = 64 * 1024;
/// What the 100 Continue interim answer is.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// One client connection, shared.
pub(super) struct Connection<S> {
    state: Mutex<State<S>>,
    activity: Arc<ConnectionActivity>,
    /// The listener is stopping: no request after the one in flight.
    closing: AtomicBool,
    /// How long the connection must have been idle to park.
    pub(super) park_after: Duration,
    parked_gauge: prometheus_client::metrics::gauge::Gauge,
}

/// Whether the 100 Continue a request asked for is owed, going out, or settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Continue {
    /// Not asked for, sent, or no longer wanted (the answer has begun).
    Settled,
    Owed,
    /// This many of its bytes have gone out.
    Writing(usize),
}

pub(super) struct State<S> {
    /// `None` once the connection switched protocols and the socket went to the tunnel.
    io: Option<S>,
    read: BytesMut,
    /// The client closed its side.
    eof: bool,
    /// Bytes of the next head have arrived (its timeout runs).
    head_begun: bool,
    /// The number of the request in flight, which its body names.
    request: u64,
    body: Decoder,
    /// The handler let go of the body before its end.
    abandoned: bool,
    /// The body could not be read (bad framing, the client left): nothing after it can be
    /// trusted.
    failed: bool,
    /// The serving loop, waiting for the body's holder to read it to its end or let go.
    finish_waiter: Option<std::task::Waker>,
    continue_state: Continue,
    pub(super) out: Outgoing,
    /// Written since the last flush.
    unflushed: bool,
    write_stalled: bool,
    /// Scratch space for the head parser.
    fields: Vec<(http::HeaderName, std::ops::Range<usize>)>,
    max_headers: usize,
}

/// What [`Connection::poll_next`] found. Not boxed, as [`Parsed`] is not.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Arrival {
    Head(Parsed),
    /// The connection has been idle long enough to park.
    Idle,
    /// The connection ends here.
    End,
}

/// The client left, or its connection failed, while a request was in flight.
#[derive(Debug)]
pub(super) struct ClientGone;

impl<S> Connection<S>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    pub(super) fn new(
        io: S,
        read: BytesMut,
        activity: Arc<ConnectionActivity>,
        park_after: Duration,
        parked_gauge: prometheus_client::metrics::gauge::Gauge,
        max_headers: usize,
    ) -> Self {
        Self {
            state: Mutex::new(State {
                io: Some(io),
                read,
                eof: false,
                head_begun: false,
                request: 0,
                body: Decoder::Ended,
                abandoned: false,
                failed: false,
                finish_waiter: None,
                continue_state: Continue::Settled,
                out: Outgoing::default(),
                unflushed: false,
                write_stalled: false,
                fields: Vec::new(),
                max_headers,
            }),
            activity,
            closing: AtomicBool::new(false),
            park_after,
            parked_gauge,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// No request after the one in flight (the listener is stopping).
    pub(super) fn stop(&self) {
        self.closing.store(true, Ordering::Release);
    }

    pub(super) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// What comes next on the connection: a request head, a time to park (nothing of the
    /// next request has come for [`Connection::park_after`]), or the end (the client left, or
    /// the listener is stopping and no request has begun).
    pub(super) fn poll_next(
        &self,
        cx: &mut Context<'_>,
        limits: HeadLimits,
    ) -> Poll<io::Result<Arrival>> {
        let mut state = self.lock();
        let state = &mut *state;
        loop {
            if head::skip_empty_lines(&mut state.read) {
                if !state.head_begun {
                    state.head_begun = true;
                    self.activity.head_started();
                }
                match head::parse(&mut state.read, limits, &mut state.fields) {
                    Parsed::Partial => {}
                    parsed => {
                        state.head_begun = false;
                        return Poll::Ready(Ok(Arrival::Head(parsed)));
                    }
                }
            }
            if state.eof || (self.is_closing() && !state.head_begun) {
                return Poll::Ready(Ok(Arrival::End));
            }
            match state.poll_fill(cx, HEAD_READ) {
                Poll::Ready(Ok(0)) => state.eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending if !state.head_begun && self.activity.may_park(self.park_after) => {
                    return Poll::Ready(Ok(Arrival::Idle));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Lets go of the buffers while the connection waits for its next request.
    pub(super) fn park(&self) {
        let mut state = self.lock();
        state.read = BytesMut::new();
        state.out = Outgoing::default();
        state.fields = Vec::new();
        self.parked_gauge.inc();
    }

    /// Resolves once the client may have sent something (or left), while parked.
    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.lock().io {
            Some(io) => io.poll_read_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Serves again after parking.
    pub(super) fn unpark(&self) {
        self.parked_gauge.dec();
    }

    /// Starts the body of a new request; returns the request's number.
    pub(super) fn begin_request(&self, framing: BodyFraming, expect_continue: bool) -> u64 {
        let mut state = self.lock();
        state.request += 1;
        state.body = Decoder::new(framing, state.max_headers);
        state.abandoned = false;
        state.failed = false;
        state.continue_state = match expect_continue {
            true => Continue::Owed,
            false => Continue::Settled,
        };
        state.request
    }

    /// Resolves when the client has gone while its request is answered: it closed the
    /// connection (or it failed) after sending the whole request. Bytes it sends meanwhile
    /// (a pipelined request) are kept for later, and then it is not watched any more.
    pub(super) fn poll_client_gone(&self, cx: &mut Context<'_>) -> Poll<ClientGone> {
        let mut state = self.lock();
        if !state.body.is_ended() || state.abandoned || state.failed || !state.read.is_empty() {
            return Poll::Pending;
        }
        if state.eof {
            return Poll::Ready(ClientGone);
        }
        match state.poll_fill(cx, HEAD_READ) {
            Poll::Ready(Ok(0)) => {
                state.eof = true;
                Poll::Ready(ClientGone)
            }
            Poll::Ready(Ok(_)) | Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(ClientGone),
        }
    }

    /// After an answer: whether the request's body has been read to its end, so that the
    /// next request can follow. A body still held is waited for: whoever holds it (an upload
    /// that goes on after an early answer) reads it from the connection to its end. A body
    /// the handler let go of is read past as far as it has arrived, without waiting (and no
    /// more than [`DRAIN_LIMIT`]). `false`: the connection must close, since what follows
    /// is not the next request.
    pub(super) fn poll_finish_body(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut state = self.lock();
        let state = &mut *state;
        if state.failed {
            return Poll::Ready(false);
        }
        if state.body.is_ended() {
            return Poll::Ready(true);
        }
        if !state.abandoned {
            state.finish_waiter = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut drained = 0;
        loop {
            match state.body.decode(&mut state.read) {
                Ok(Decoded::End) => return Poll::Ready(true),
                Ok(Decoded::Data(data)) => {
                    drained += data.len();
                    if drained > DRAIN_LIMIT {
                        return Poll::Ready(false);
                    }
                    continue;
                }
                Ok(Decoded::Trailers(_)) => continue,
                Ok(Decoded::NeedMore) => {}
                Err(_) => return Poll::Ready(false),
            }
            if state.eof {
                return Poll::Ready(false);
            }
            let wants = state.body.wants().max(HEAD_READ);
            match state.poll_fill(cx, wants) {
                Poll::Ready(Ok(read)) if read > 0 => {}
                _ => return Poll::Ready(false),
            }
        }
    }

    /// Hands the socket and the bytes read past the upgrade request to the tunnel.
    pub(super) fn switch(&self) -> Option<SwitchedStream> {
        let mut state = self.lock();
        let io = state.io.take()?;
        let rest = state.read.split().freeze();
        Some(SwitchedStream::new(Box::new(io) as Box<dyn SwitchIo>, rest))
    }

    /// Writes (and flushes) everything waiting to go out.
    pub(super) fn poll_write_out(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        let poll = state.poll_write_out(cx);
        self.note_write(&mut state, &poll);
        poll
    }

    /// The connection's end as the client sees it: its write side closed (and on TLS, a
    /// close_notify sent). A plain socket about to be closed needs no shutdown (closing sends
    /// the FIN), unless `still_held`: a request body kept elsewhere keeps the socket open.
    pub(super) fn poll_shutdown(
        &self,
        cx: &mut Context<'_>,
        still_held: bool,
    ) -> Poll<io::Result<()>> {
        let mut state = self.lock();
        match &mut state.io {
            Some(io) if still_held || io.says_goodbye() => Pin::new(io).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    /// The body ended or failed: the serving loop may go on.
    fn wake_finish_waiter(&self) {
        if let Some(waiter) = self.lock().finish_waiter.take() {
            waiter.wake();
        }
    }

    fn note_write<R>(&self, state: &mut State<S>, poll: &Poll<io::Result<R>>) {
        let stalled = poll.is_pending();
        if stalled != state.write_stalled {
            state.write_stalled = stalled;
            self.activity.write_stalled(stalled);
        }
    }

    /// The body of request `request`, read from the connection.
    fn poll_body(
        &self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut state = self.lock();
        let state = &mut *state;
        if request != state.request || state.failed {
            return Poll::Ready(Some(Err(BodyError::Incomplete)));
        }
        if let Err(error) = ready!(state.poll_continue(cx)) {
            state.failed = true;
            return Poll::Ready(Some(Err(BodyError::Io(error))));
        }
        loop {
            match state.body.decode(&mut state.read) {
                Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(Decoded::Trailers(trailers)) => {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Ok(Decoded::End) => return Poll::Ready(None),
                Ok(Decoded::NeedMore) => {}
                Err(error) => {
                    state.failed = true;
                    return Poll::Ready(Some(Err(error)));
                }
            }
            if state.eof {
                state.failed = true;
                return Poll::Ready(Some(Err(BodyError::Incomplete)));
            }
            let wants = state.body.wants().max(HEAD_READ);
            match ready!(state.poll_fill(cx, wants)) {
                Ok(0) => state.eof = true,
                Ok(_) => {}
                Err(error) => {
                    state.eof = true;
                    state.failed = true;
                    return Poll::Ready(Some(Err(BodyError::Io(error))));
                }
            }
        }
    }
}

impl<S> State<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// Reads more into the read buffer, with room for at least `want` bytes.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        let Some(io) = &mut self.io else {
            return Poll::Ready(Ok(0));
        };
        // A head read tops the buffer up when under a quarter of a head's room is left; a body
        // read wants room for a good part of what it asks for.
        let least = match want <= HEAD_READ {
            true => HEAD_READ / 4,
            false => want.min(16 * 1024),
        };
        if self.read.capacity() - self.read.len() < least {
            self.read.reserve(want);
        }
        tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut self.read)
    }

    /// Sends the 100 Continue the request asked for, when its answer has not begun.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut written = match self.continue_state {
            Continue::Settled => return Poll::Ready(Ok(())),
            Continue::Owed => 0,
            Continue::Writing(written) => written,
        };
        let Some(io) = &mut self.io else {
            return Poll::Ready(Ok(()));
        };
        while written < CONTINUE.len() {
            match Pin::new(&mut *io).poll_write(cx, &CONTINUE[written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    self.continue_state = Continue::Writing(written);
                    return Poll::Pending;
                }
            }
        }
        self.continue_state = Continue::Settled;
        Pin::new(io).poll_flush(cx)
    }

    /// The answer begins: a 100 Continue not started is not sent any more. One that is
    /// partly written must finish first, or the answer's bytes would land inside it.
    pub(super) fn poll_answer_begins(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.continue_state == Continue::Owed {
            self.continue_state = Continue::Settled;
        }
        self.poll_continue(cx)
    }

    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(io) = &mut self.io else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        let out = &mut self.out;
        while !out.is_empty() {
            let slices = [
                IoSlice::new(&out.head[out.head_written..]),
                IoSlice::new(&out.data),
                IoSlice::new(out.tail),
            ];
            let written = match Pin::new(&mut *io).poll_write_vectored(cx, &slices) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => written,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            };
            self.unflushed = true;
            advance(out, written);
        }
        if self.unflushed {
            ready!(Pin::new(io).poll_flush(cx))?;
            self.unflushed = false;
        }
        out.clear();
        Poll::Ready(Ok(()))
    }
}

/// Marks `written` bytes of `out` as gone, in order.
fn advance(out: &mut Outgoing, mut written: usize) {
    let head_left = out.head.len() - out.head_written;
    let from_head = written.min(head_left);
    out.head_written += from_head;
    written -= from_head;
    let from_data = written.min(out.data.len());
    out.data.advance(from_data);
    written -= from_data;
    out.tail = &out.tail[written.min(out.tail.len())..];
}

impl<S> BodySource for Connection<S>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    fn poll_frame(
        &self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>> {
        let polled = self.poll_body(request, cx);
        if let Poll::Ready(None | Some(Err(_))) = &polled {
            self.wake_finish_waiter();
        }
        polled.map(|frame| frame.map(|frame| frame.map_err(Into::into)))
    }

    fn abandon(&self, request: u64) {
        let mut state = self.lock();
        if state.request == request && !state.body.is_ended() {
            state.abandoned = true;
            if let Some(waiter) = state.finish_waiter.take() {
                waiter.wake();
            }
        }
    }
}
