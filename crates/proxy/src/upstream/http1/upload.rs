//! A streamed request body on its way to the endpoint, as a state machine the exchange polls beside the response head and the response body polls after it, so an endpoint that answers early still gets the whole body.
//!
//! hyper's client, which sluice used before, went on sending a body after an early answer,
//! and so does this: the endpoint (nginx's `return`, an app that answers before it reads)
//! reads the rest as this request's, the client's upload is taken whole, and both connections
//! stay usable. A connection is reused only once its body has all gone.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderName;
use hyper::body::Body;
use tokio::io::AsyncWrite;

use super::{framed, write_allowed_trailers, Framed, RequestFraming};
use crate::error::UpstreamError;
use crate::upstream::request_body::UpstreamBody;

/// What is left of a streamed request body, and the framed bytes not yet written.
pub(crate) struct Upload {
    body: UpstreamBody,
    out: Framed,
    /// What a `Content-Length` still allows.
    remaining: Option<u64>,
    chunked: bool,
    trailers: Vec<HeaderName>,
    /// The body has ended; what is in `out` is the last of it.
    ended: bool,
}

impl Upload {
    pub(super) fn new(body: UpstreamBody, framing: &RequestFraming) -> Self {
        Self {
            body,
            out: framed(Bytes::new(), false, b""),
            remaining: framing.length,
            chunked: framing.chunked,
            trailers: framing.trailers.clone(),
            ended: false,
        }
    }

    /// Writes the body to `io` in the request's framing as far as the client's body and the
    /// socket allow; ready when it has all gone and been flushed, or has failed.
    pub(super) fn poll_send<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), UpstreamError>> {
        loop {
            while self.out.has_remaining() {
                let written = ready!(tokio_util::io::poll_write_buf(
                    Pin::new(&mut *io),
                    cx,
                    &mut self.out
                ))
                .map_err(UpstreamError::Io)?;
                if written == 0 {
                    return Poll::Ready(Err(UpstreamError::Io(io::ErrorKind::WriteZero.into())));
                }
            }
            if self.ended {
                return Pin::new(&mut *io).poll_flush(cx).map_err(UpstreamError::Io);
            }
            self.out = match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => self.last(BytesMut::from(&b"0\r\n"[..])),
                Some(Err(error)) => return Poll::Ready(Err(UpstreamError::RequestBody(error))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => self.data(data),
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) if self.chunked => {
                            let mut end = BytesMut::from(&b"0\r\n"[..]);
                            write_allowed_trailers(&mut end, &trailers, &self.trailers);
                            self.last(end)
                        }
                        _ => continue,
                    },
                },
            };
        }
    }

    /// One piece of body, cut to what a `Content-Length` still allows.
    fn data(&mut self, mut data: Bytes) -> Framed {
        if let Some(left) = self.remaining.as_mut() {
            data.truncate(usize::try_from(*left).unwrap_or(usize::MAX));
            *left -= data.len() as u64;
        }
        framed(data, self.chunked, b"")
    }

    /// The end of the body: for a chunked one, the last chunk (`end`) and its trailer
    /// section's closing CRLF.
    fn last(&mut self, mut end: BytesMut) -> Framed {
        self.ended = true;
        if !self.chunked {
            return framed(Bytes::new(), false, b"");
        }
        end.extend_from_slice(b"\r\n");
        framed(end.freeze(), false, b"")
    }
}
