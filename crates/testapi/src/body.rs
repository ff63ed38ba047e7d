//! The response body: a whole JSON document, or a watch stream fed event by event from a channel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, oneshot};

use crate::error::TestApiError;

/// A response body the server sends.
#[derive(Debug)]
pub(crate) struct ResponseBody(Inner);

#[derive(Debug)]
enum Inner {
    Full(Option<Bytes>),
    Stream {
        lines: mpsc::Receiver<Bytes>,
        /// Fires to abort the connection mid-stream (the `drop watches` fault).
        abort: Option<oneshot::Receiver<()>>,
    },
}

impl ResponseBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self(Inner::Full(Some(bytes.into())))
    }

    pub(crate) fn stream(lines: mpsc::Receiver<Bytes>, abort: oneshot::Receiver<()>) -> Self {
        Self(Inner::Stream {
            lines,
            abort: Some(abort),
        })
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = TestApiError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TestApiError>>> {
        match &mut self.get_mut().0 {
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Stream { lines, abort } => {
                if let Some(receiver) = abort {
                    match Pin::new(receiver).poll(cx) {
                        Poll::Ready(Ok(())) => {
                            *abort = None;
                            return Poll::Ready(Some(Err(TestApiError::WatchDropped)));
                        }
                        Poll::Ready(Err(_)) => *abort = None,
                        Poll::Pending => {}
                    }
                }
                lines
                    .poll_recv(cx)
                    .map(|line| line.map(|b| Ok(Frame::data(b))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.0, Inner::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Inner::Full(None) => SizeHint::with_exact(0),
            Inner::Stream { .. } => SizeHint::default(),
        }
    }
}
