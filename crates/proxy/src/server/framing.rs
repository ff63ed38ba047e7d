//! The framing rules a client's HTTP/1.1 bytes are held to: why a head is refused, and chunked framing byte by byte.
//!
//! httparse reads a head and refuses obs-fold, whitespace before a colon, a CR or NUL in a
//! header value and a malformed request line. It accepts two things a proxy must not: a bare
//! LF as a line end (so `X-A: 1\nX-B: 2` is two headers here and one at a backend that reads
//! lines differently), and a message with both Content-Length and Transfer-Encoding (RFC 9112
//! §6.1 lets a server refuse it; a proxy that forwards it invites request smuggling). The
//! head parser (`http1/head.rs`) adds those rules and the Content-Length and
//! Transfer-Encoding ones below; the body decoder (`http1/body.rs`) follows chunked framing
//! with [`next_chunk_state`], which refuses every deviation from RFC 9112 §7.1.

use memchr::memchr2_iter;

/// Why a request head is refused (400, or 431 and 414 where said).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadProblem {
    /// A line ends in LF without CR, or a CR is not followed by LF.
    BareLineBreak,
    /// A NUL byte in the head.
    Nul,
    /// A header line that continues the previous one (starts with a space or tab).
    ObsFold,
    /// A header line without a name, without a colon, or with whitespace before the colon.
    MalformedHeader,
    /// The request line is not `method SP target SP HTTP/1.x`, or its target is not a URI.
    MalformedRequestLine,
    /// Both Content-Length and Transfer-Encoding.
    LengthAndTransferEncoding,
    /// Content-Length values that are not one non-negative number.
    BadContentLength,
    /// A Transfer-Encoding whose last coding is not `chunked`, or one on an HTTP/1.0 request.
    BadTransferEncoding,
    /// The head is longer than the limit (`--max-header-bytes`): 431.
    TooLarge,
    /// More header fields than the limit (`--max-headers`): 431.
    TooManyHeaders,
    /// A request target longer than a URI may be: 414.
    UriTooLong,
}

impl HeadProblem {
    /// A short reason for the log.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::BareLineBreak => "bare CR or LF in the request head",
            Self::Nul => "NUL in the request head",
            Self::ObsFold => "obsolete line folding",
            Self::MalformedHeader => "malformed header line",
            Self::MalformedRequestLine => "malformed request line",
            Self::LengthAndTransferEncoding => "both Content-Length and Transfer-Encoding",
            Self::BadContentLength => "invalid or differing Content-Length",
            Self::BadTransferEncoding => "Transfer-Encoding does not end in chunked",
            Self::TooLarge => "request head too large",
            Self::TooManyHeaders => "too many header fields",
            Self::UriTooLong => "request target too long",
        }
    }

    /// The status the refusal answers with.
    pub(crate) fn status(self) -> http::StatusCode {
        match self {
            Self::TooLarge | Self::TooManyHeaders => {
                http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            Self::UriTooLong => http::StatusCode::URI_TOO_LONG,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }

    /// Why httparse refused `head` (the bytes it was given), in this module's words: the
    /// error alone does not tell a NUL or a folded line from other bad bytes.
    pub(crate) fn of_parse_error(error: httparse::Error, head: &[u8]) -> Self {
        if head.contains(&0) {
            return Self::Nul;
        }
        if head
            .windows(2)
            .any(|pair| pair[0] == b'\n' && (pair[1] == b' ' || pair[1] == b'\t'))
        {
            return Self::ObsFold;
        }
        match error {
            httparse::Error::TooManyHeaders => Self::TooManyHeaders,
            _ if has_bare_line_break(head.strip_suffix(b"\r").unwrap_or(head)) => {
                Self::BareLineBreak
            }
            httparse::Error::HeaderName | httparse::Error::HeaderValue => Self::MalformedHeader,
            _ => Self::MalformedRequestLine,
        }
    }
}

/// Whether some LF lacks its CR, or some CR lacks its LF.
pub(crate) fn has_bare_line_break(head: &[u8]) -> bool {
    memchr2_iter(b'\r', b'\n', head).any(|index| match head[index] {
        b'\n' => index == 0 || head[index - 1] != b'\r',
        _ => head.get(index + 1) != Some(&b'\n'),
    })
}

/// A Content-Length value: digits only, as one number.
pub(crate) fn parse_length(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Whether the last coding of a Transfer-Encoding value is `chunked`.
pub(crate) fn ends_in_chunked(value: &[u8]) -> bool {
    let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
    last.trim_ascii().eq_ignore_ascii_case(b"chunked")
}

/// Hex digits a chunk size may have (sizes up to 2^64 - 1).
const MAX_SIZE_DIGITS: u8 = 16;

/// Where chunked framing (RFC 9112 §7.1) is, one state per place a byte can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    Size {
        value: u64,
        digits: u8,
    },
    /// Whitespace after the size, before `;` or CR.
    SizeSpace {
        value: u64,
    },
    Extension {
        value: u64,
    },
    SizeLf {
        value: u64,
    },
    /// Inside a chunk's data: this many bytes are left.
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
}

impl Chunk {
    /// Where a chunked body starts.
    pub(crate) const START: Self = Self::Size {
        value: 0,
        digits: 0,
    };
}

/// A framing error inside a chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkError;

/// The state after `byte` in chunked framing; `None` when the message ended. Not for
/// [`Chunk::Data`], whose bytes are taken in bulk.
pub(crate) fn next_chunk_state(chunk: Chunk, byte: u8) -> Result<Option<Chunk>, ChunkError> {
    let next = match (chunk, byte) {
        (Chunk::Size { value, digits }, _) if byte.is_ascii_hexdigit() => {
            if digits == MAX_SIZE_DIGITS {
                return Err(ChunkError);
            }
            let digit = u64::from((byte as char).to_digit(16).unwrap_or(0) as u8);
            Chunk::Size {
                value: value << 4 | digit,
                digits: digits + 1,
            }
        }
        (Chunk::Size { value, digits }, _) if digits > 0 => after_size(value, byte)?,
        (Chunk::SizeSpace { value }, b' ' | b'\t') => Chunk::SizeSpace { value },
        (Chunk::SizeSpace { value }, _) => after_size(value, byte)?,
        (Chunk::Extension { value }, b'\r') => Chunk::SizeLf { value },
        (Chunk::Extension { .. }, b'\n') => return Err(ChunkError),
        (Chunk::Extension { value }, _) => Chunk::Extension { value },
        (Chunk::SizeLf { value: 0 }, b'\n') => Chunk::TrailerStart,
        (Chunk::SizeLf { value }, b'\n') => Chunk::Data(value),
        (Chunk::DataCr, b'\r') => Chunk::DataLf,
        (Chunk::DataLf, b'\n') => Chunk::START,
        (Chunk::TrailerStart, b'\r') => Chunk::EndLf,
        (Chunk::TrailerStart | Chunk::TrailerLine, b'\n') => return Err(ChunkError),
        (Chunk::TrailerLine, b'\r') => Chunk::TrailerLf,
        (Chunk::TrailerStart | Chunk::TrailerLine, _) => Chunk::TrailerLine,
        (Chunk::TrailerLf, b'\n') => Chunk::TrailerStart,
        (Chunk::EndLf, b'\n') => return Ok(None),
        _ => return Err(ChunkError),
    };
    Ok(Some(next))
}

/// After a chunk size: whitespace, an extension, or the CR ending the line.
fn after_size(value: u64, byte: u8) -> Result<Chunk, ChunkError> {
    match byte {
        b' ' | b'\t' => Ok(Chunk::SizeSpace { value }),
        b';' => Ok(Chunk::Extension { value }),
        b'\r' => Ok(Chunk::SizeLf { value }),
        _ => Err(ChunkError),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` through the chunk states (data in bulk); `Ok(())` when the body ends
    /// exactly at its last byte, else the offset of the byte that breaks it.
    fn walk(body: &[u8]) -> Result<(), usize> {
        let mut state = Chunk::START;
        let mut at = 0;
        while at < body.len() {
            if let Chunk::Data(left) = state {
                let take =
                    usize::try_from(left).map_or(body.len() - at, |l| l.min(body.len() - at));
                at += take;
                let left = left - take as u64;
                state = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                continue;
            }
            match next_chunk_state(state, body[at]) {
                Ok(Some(next)) => state = next,
                Ok(None) => {
                    return if at + 1 == body.len() {
                        Ok(())
                    } else {
                        Err(at + 1)
                    }
                }
                Err(ChunkError) => return Err(at),
            }
            at += 1;
        }
        Err(body.len())
    }

    #[test]
    fn well_formed_chunked_bodies_end_at_their_last_byte() {
        for body in [
            &b"0\r\n\r\n"[..],
            b"5\r\nhello\r\n0\r\n\r\n",
            b"5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n",
            b"5 \t;a=b\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n",
        ] {
            assert_eq!(walk(body), Ok(()), "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn chunked_framing_errors_are_found_at_the_byte_that_breaks_them() {
        for (body, broken) in [
            ("zz\r\nhello\r\n0\r\n\r\n", 0),
            ("5\nhello\r\n0\r\n\r\n", 1),
            ("5\r\nhello\n0\r\n\r\n", 8),
            ("5\r\nhelloXX0\r\n\r\n", 8),
            ("5;a\nb\r\nhello\r\n0\r\n\r\n", 3),
            ("\r\n", 0),
            ("11111111111111111\r\n", 16),
            ("0\r\nTrailer: x\n\r\n", 13),
        ] {
            assert_eq!(walk(body.as_bytes()), Err(broken), "{body:?}");
        }
    }

    #[test]
    fn bare_line_breaks_are_found_and_crlf_is_not_one() {
        assert!(!has_bare_line_break(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(has_bare_line_break(b"GET / HTTP/1.1\nHost: a\r\n\r\n"));
        assert!(has_bare_line_break(b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"));
        assert!(has_bare_line_break(b"\n"));
    }

    #[test]
    fn lengths_are_digits_and_codings_end_in_chunked() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"1234"), Some(1234));
        assert_eq!(parse_length(b"-1"), None);
        assert_eq!(parse_length(b"2, 2"), None);
        assert_eq!(parse_length(b"99999999999999999999999"), None);
        assert!(ends_in_chunked(b"chunked"));
        assert!(ends_in_chunked(b"gzip, Chunked "));
        assert!(!ends_in_chunked(b"chunked, gzip"));
    }

    #[test]
    fn parse_errors_are_named_by_what_is_in_the_head() {
        let named = |head: &[u8], error| HeadProblem::of_parse_error(error, head);
        assert_eq!(
            named(
                b"GET / HTTP/1.1\r\nA: 1\0\r\n\r\n",
                httparse::Error::HeaderValue
            ),
            HeadProblem::Nul
        );
        assert_eq!(
            named(
                b"GET / HTTP/1.1\r\nA: 1\r\n b\r\n\r\n",
                httparse::Error::HeaderName
            ),
            HeadProblem::ObsFold
        );
        assert_eq!(
            named(
                b"GET / HTTP/1.1\r\nA : 1\r\n\r\n",
                httparse::Error::HeaderName
            ),
            HeadProblem::MalformedHeader
        );
        assert_eq!(
            named(b"GET / HTTP/1.1\r\n", httparse::Error::TooManyHeaders),
            HeadProblem::TooManyHeaders
        );
        assert_eq!(
            named(b"GET  / HTTP/1.1\r\n", httparse::Error::Token),
            HeadProblem::MalformedRequestLine
        );
    }
}
