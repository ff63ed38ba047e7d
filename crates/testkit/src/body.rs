//! Bodies for tests: any length generated chunk by chunk so nothing large is held in memory, or one that pauses half-way.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::future::Future;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The chunk a [`PatternBody`] repeats: 64 KiB of a recognisable byte pattern.
pub const PATTERN_CHUNK: usize = 64 * 1024;

/// Streams `len` bytes of a fixed pattern in 64 KiB frames.
pub struct PatternBody {
    chunk: Bytes,
    remaining: u64,
}

impl PatternBody {
    pub fn new(len: u64) -> Self {
        let chunk: Vec<u8> = (0..PATTERN_CHUNK).map(|i| (i % 251) as u8).collect();
        Self {
            chunk: Bytes::from(chunk),
            remaining: len,
        }
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let take = self.remaining.min(self.chunk.len() as u64);
        self.remaining -= take;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..take as usize)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// The pattern's first `len` bytes, as a [`PatternBody`] of that length sends them.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i % PATTERN_CHUNK) % 251) as u8)
        .collect()
}

/// `len` bytes of the pattern in two halves with a pause between them: the first half at
/// once, the second after `pause`. Its length is declared unless `chunked`.
pub struct PausingBody {
    first: Option<Bytes>,
    second: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
    chunked: bool,
}

impl PausingBody {
    pub fn new(len: usize, pause: Duration, chunked: bool) -> Self {
        let mut whole = Bytes::from(pattern(len));
        let second = whole.split_off(len / 2);
        Self {
            first: Some(whole),
            second: Some(second),
            pause: Box::pin(tokio::time::sleep(pause)),
            chunked,
        }
    }

    fn remaining(&self) -> u64 {
        let first = self.first.as_ref().map_or(0, Bytes::len);
        let second = self.second.as_ref().map_or(0, Bytes::len);
        (first + second) as u64
    }
}

impl Body for PausingBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if self.second.is_none() {
            return Poll::Ready(None);
        }
        if self.pause.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(self.second.take().map(|second| Ok(Frame::data(second))))
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.second.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.chunked {
            true => SizeHint::default(),
            false => SizeHint::with_exact(self.remaining()),
        }
    }
}
