//! A request body decoded from the connection's read buffer: a length counted down, or chunked framing followed byte by byte (data in bulk), with its trailers.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::head::BodyFraming;
use crate::server::framing::{next_chunk_state, Chunk, ChunkError};

/// The most bytes of chunk extensions a body may carry, and of its trailer section, as hyper
/// allowed.
const EXTENSIONS_LIMIT: u64 = 16 * 1024;
const TRAILERS_LIMIT: usize = 16 * 1024;

/// Why a request body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("invalid chunked framing in the request body")]
    Framing,
    #[error("chunk extensions longer than {EXTENSIONS_LIMIT} bytes")]
    ExtensionsTooLong,
    #[error("request trailers too large or too many")]
    TrailersTooLarge,
    #[error("malformed request trailers")]
    BadTrailers,
    #[error("the client closed the connection before the request body ended")]
    Incomplete,
    #[error("reading the request body failed")]
    Io(#[source] std::io::Error),
}

/// What the next piece of the body is.
#[derive(Debug)]
pub(super) enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body has ended: every byte after it belongs to the next request.
    End,
    /// More bytes must be read first.
    NeedMore,
}

/// Where one request body's decoding is.
#[derive(Debug)]
pub(super) enum Decoder {
    /// This many bytes are left.
    Length(u64),
    Chunked(Chunked),
    /// The body has ended.
    Ended,
}

/// Chunked decoding: the framing state and what the trailer section collected so far.
#[derive(Debug)]
pub(super) struct Chunked {
    state: Chunk,
    extension_bytes: u64,
    trailers: Vec<u8>,
    max_trailers: usize,
}

impl Decoder {
    /// The decoder for a body framed as `framing`; `max_trailers` bounds its trailer fields.
    pub(super) fn new(framing: BodyFraming, max_trailers: usize) -> Self {
        match framing {
            BodyFraming::None => Self::Ended,
            BodyFraming::Length(length) => Self::Length(length),
            BodyFraming::Chunked => Self::Chunked(Chunked {
                state: Chunk::START,
                extension_bytes: 0,
                trailers: Vec::new(),
                max_trailers,
            }),
        }
    }

    pub(super) fn is_ended(&self) -> bool {
        matches!(self, Self::Ended)
    }

    /// Takes the next piece of the body from the front of `read`.
    pub(super) fn decode(&mut self, read: &mut BytesMut) -> Result<Decoded, BodyError> {
        match self {
            Self::Ended => Ok(Decoded::End),
            Self::Length(0) => {
                *self = Self::Ended;
                Ok(Decoded::End)
            }
            Self::Length(left) => {
                if read.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let take = usize::try_from(*left).map_or(read.len(), |left| left.min(read.len()));
                *left -= take as u64;
                Ok(Decoded::Data(read.split_to(take).freeze()))
            }
            Self::Chunked(chunked) => match chunked.decode(read)? {
                Decoded::End => {
                    *self = Self::Ended;
                    Ok(Decoded::End)
                }
                Decoded::Trailers(trailers) => {
                    *self = Self::Ended;
                    Ok(Decoded::Trailers(trailers))
                }
                other => Ok(other),
            },
        }
    }

    /// How many bytes a read for this body should ask for at most.
    pub(super) fn wants(&self) -> usize {
        const MAX_READ: usize = 64 * 1024;
        match self {
            Self::Length(left) => usize::try_from(*left).map_or(MAX_READ, |l| l.min(MAX_READ)),
            Self::Chunked(chunked) => match chunked.state {
                Chunk::Data(left) => usize::try_from(left).map_or(MAX_READ, |l| l.min(MAX_READ)),
                _ => 0,
            },
            Self::Ended => 0,
        }
    }
}

impl Chunked {
    fn decode(&mut self, read: &mut BytesMut) -> Result<Decoded, BodyError> {
        loop {
            if let Chunk::Data(left) = self.state {
                if read.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let take = usize::try_from(left).map_or(read.len(), |left| left.min(read.len()));
                let left = left - take as u64;
                self.state = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                return Ok(Decoded::Data(read.split_to(take).freeze()));
            }
            if read.is_empty() {
                return Ok(Decoded::NeedMore);
            }
            let (used, ended) = self.framing_bytes(read)?;
            read.advance(used);
            if ended {
                return self.finish();
            }
        }
    }

    /// Walks the framing bytes at the front of `read` up to the next chunk's data or the
    /// end of the body; returns how many it used and whether the body ended.
    fn framing_bytes(&mut self, read: &[u8]) -> Result<(usize, bool), BodyError> {
        for (index, &byte) in read.iter().enumerate() {
            if matches!(self.state, Chunk::Data(_)) {
                return Ok((index, false));
            }
            match self.state {
                Chunk::Extension { .. } => {
                    self.extension_bytes += 1;
                    if self.extension_bytes > EXTENSIONS_LIMIT {
                        return Err(BodyError::ExtensionsTooLong);
                    }
                }
                Chunk::TrailerStart | Chunk::TrailerLine | Chunk::TrailerLf | Chunk::EndLf => {
                    if self.trailers.len() >= TRAILERS_LIMIT {
                        return Err(BodyError::TrailersTooLarge);
                    }
                    self.trailers.push(byte);
                }
                _ => {}
            }
            match next_chunk_state(self.state, byte) {
                Ok(Some(next)) => self.state = next,
                Ok(None) => return Ok((index + 1, true)),
                Err(ChunkError) => return Err(BodyError::Framing),
            }
        }
        Ok((read.len(), false))
    }

    /// The body ended: its trailers, when it had any.
    fn finish(&mut self) -> Result<Decoded, BodyError> {
        // What was collected ends with the final empty line: alone, there were no trailers.
        let section = std::mem::take(&mut self.trailers);
        if section == b"\r\n" {
            return Ok(Decoded::End);
        }
        parse_trailers(&section, self.max_trailers).map(Decoded::Trailers)
    }
}

/// The trailer fields of `section` (`name: value` lines and the empty line ending them).
fn parse_trailers(section: &[u8], max_fields: usize) -> Result<HeaderMap, BodyError> {
    let mut slots = vec![httparse::EMPTY_HEADER; max_fields];
    let fields = match httparse::parse_headers(section, &mut slots) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        Err(httparse::Error::TooManyHeaders) => return Err(BodyError::TrailersTooLarge),
        Ok(httparse::Status::Partial) | Err(_) => return Err(BodyError::BadTrailers),
    };
    let mut trailers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let name =
            HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BodyError::BadTrailers)?;
        let value = HeaderValue::from_bytes(field.value).map_err(|_| BodyError::BadTrailers)?;
        trailers.append(name, value);
    }
    Ok(trailers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoded body: its data, its trailers, and the bytes left after it.
    type Decoding = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

    /// Decodes `input` fed in pieces of `step` bytes.
    fn decode_in_steps(
        framing: BodyFraming,
        input: &[u8],
        step: usize,
    ) -> Result<Decoding, BodyError> {
        let mut decoder = Decoder::new(framing, 100);
        let mut read = BytesMut::new();
        let mut pieces = input.chunks(step);
        let mut data = Vec::new();
        let mut trailers = None;
        loop {
            match decoder.decode(&mut read)? {
                Decoded::Data(bytes) => data.extend_from_slice(&bytes),
                Decoded::Trailers(fields) => trailers = Some(fields),
                Decoded::End => break,
                Decoded::NeedMore => match pieces.next() {
                    Some(piece) => read.extend_from_slice(piece),
                    None => return Err(BodyError::Incomplete),
                },
            }
        }
        for piece in pieces {
            read.extend_from_slice(piece);
        }
        Ok((data, trailers, read.to_vec()))
    }

    #[test]
    fn a_length_body_ends_at_its_length_in_any_pieces() {
        for step in [1, 2, 7, 100] {
            let decoded = decode_in_steps(BodyFraming::Length(5), b"helloGET /", step);
            let (data, trailers, rest) = decoded.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(data, b"hello");
            assert!(trailers.is_none());
            assert_eq!(rest, b"GET /", "step {step}");
        }
    }

    #[test]
    fn a_chunked_body_yields_its_data_and_trailers_and_stops_at_its_end() {
        let input = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\nX-Two: 2\r\n\r\nGET";
        for step in [1, 3, 7, input.len()] {
            let decoded = decode_in_steps(BodyFraming::Chunked, input, step);
            let (data, trailers, rest) = decoded.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(data, b"hello world", "step {step}");
            let trailers = trailers.unwrap_or_default();
            assert_eq!(trailers["x-sum"], "1");
            assert_eq!(trailers["x-two"], "2");
            assert_eq!(rest, b"GET", "step {step}");
        }
        let (data, trailers, rest) = decode_in_steps(BodyFraming::Chunked, b"0\r\n\r\n", 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(data.is_empty() && trailers.is_none() && rest.is_empty());
    }

    #[test]
    fn broken_chunked_framing_is_an_error_wherever_the_pieces_fall() {
        for body in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"\r\n",
            b"11111111111111111\r\n",
            b"0\r\nTrailer: x\n\r\n",
        ] {
            for step in [1, 3, body.len()] {
                let decoded = decode_in_steps(BodyFraming::Chunked, body, step);
                assert!(
                    matches!(decoded, Err(BodyError::Framing)),
                    "{:?} in steps of {step}: {decoded:?}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn a_body_cut_short_is_incomplete() {
        assert!(matches!(
            decode_in_steps(BodyFraming::Length(10), b"hello", 2),
            Err(BodyError::Incomplete)
        ));
        assert!(matches!(
            decode_in_steps(BodyFraming::Chunked, b"5\r\nhel", 2),
            Err(BodyError::Incomplete)
        ));
    }

    #[test]
    fn extensions_and_trailers_are_bounded() {
        let long_extension = format!("1;{}\r\na\r\n0\r\n\r\n", "e".repeat(17 * 1024));
        assert!(matches!(
            decode_in_steps(BodyFraming::Chunked, long_extension.as_bytes(), 4096),
            Err(BodyError::ExtensionsTooLong)
        ));
        let mut many = String::from("0\r\n");
        for index in 0..101 {
            many.push_str(&format!("X-{index}: v\r\n"));
        }
        many.push_str("\r\n");
        assert!(matches!(
            decode_in_steps(BodyFraming::Chunked, many.as_bytes(), 512),
            Err(BodyError::TrailersTooLarge)
        ));
    }
}
