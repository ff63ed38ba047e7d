//! A request or response body of any length, generated chunk by chunk so nothing large is held in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

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
