//! A request head from the bytes an HTTP/1.1 client sent: httparse reads it in place, the framing rules judge what it lets through, and the header values share the connection's read buffer.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Buf, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};

use crate::headers::has_token;
use crate::server::framing::{ends_in_chunked, parse_length, HeadProblem};

/// Header fields parsed into stack memory; a larger `--max-headers` parses into the heap.
const STACK_HEADERS: usize = 100;
/// Room left in a request's header map for the fields a proxy adds (Host and the six
/// forwarding headers, see `request/upstream_head.rs`): growing the map later moves it whole.
const ROOM_TO_ADD: usize = 7;
/// The longest request target, as hyper allows (414 beyond).
const MAX_URI_LENGTH: usize = u16::MAX as usize - 1;

/// How a request's body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A request head, ready for the handler.
#[derive(Debug)]
pub(super) struct RequestHead {
    pub(super) parts: Parts,
    pub(super) body: BodyFraming,
    /// The client lets the connection carry another request after this one.
    pub(super) keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request with a body.
    pub(super) expect_continue: bool,
    /// The request may switch protocols (an HTTP/1.1 `Upgrade`, or `CONNECT`).
    pub(super) wants_upgrade: bool,
}

/// What the bytes at the start of the read buffer are. Not boxed: a head is parsed once per
/// request and moved on at once, and a box would be an allocation per request.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Parsed {
    Complete(RequestHead),
    /// A head that has not ended yet.
    Partial,
    Refused(HeadProblem),
}

/// The limits a head is held to.
#[derive(Clone, Copy, Debug)]
pub(super) struct HeadLimits {
    /// `--max-header-bytes`: the request line and headers together.
    pub(super) max_bytes: usize,
    /// `--max-headers`.
    pub(super) max_headers: usize,
}

/// One header field while the head is borrowed: its name, and where its value lies.
type Field = (HeaderName, Range<usize>);

/// Skips the empty lines a client may send between requests; `true` when a head has begun.
pub(super) fn skip_empty_lines(read: &mut BytesMut) -> bool {
    let start = read
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(read.len());
    read.advance(start);
    !read.is_empty()
}

/// Parses the head at the start of `read` (which starts with a head, see
/// [`skip_empty_lines`]); a complete head is split off `read`, and its header values share
/// that memory. `fields` is scratch space kept between requests.
pub(super) fn parse(read: &mut BytesMut, limits: HeadLimits, fields: &mut Vec<Field>) -> Parsed {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= STACK_HEADERS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize(limits.max_headers, MaybeUninit::uninit());
        &mut heap
    };
    let mut request = httparse::Request::new(&mut []);
    let length = match request.parse_with_uninit_headers(read, slots) {
        Ok(httparse::Status::Complete(length)) if length > limits.max_bytes => {
            return Parsed::Refused(HeadProblem::TooLarge)
        }
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if read.len() > limits.max_bytes => {
            return Parsed::Refused(HeadProblem::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(error) => return Parsed::Refused(HeadProblem::of_parse_error(error, read)),
    };
    let base = read.as_ptr() as usize;
    let within = |part: &[u8]| {
        let start = part.as_ptr() as usize - base;
        start..start + part.len()
    };
    if has_bare_line_feed(&read[..length]) {
        return Parsed::Refused(HeadProblem::BareLineBreak);
    }
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Parsed::Refused(HeadProblem::MalformedRequestLine);
    };
    if target.len() > MAX_URI_LENGTH {
        return Parsed::Refused(HeadProblem::UriTooLong);
    }
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Refused(HeadProblem::MalformedRequestLine);
    };
    let version = match minor {
        0 => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let target = within(target.as_bytes());
    let mut rules = Rules::new(&method, version);
    fields.clear();
    for header in request.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(header.name.as_bytes()) else {
            return Parsed::Refused(HeadProblem::MalformedHeader);
        };
        if let Err(problem) = rules.add(&name, header.value) {
            return Parsed::Refused(problem);
        }
        fields.push((name, within(header.value)));
    }
    let body = match rules.body() {
        Ok(body) => body,
        Err(problem) => return Parsed::Refused(problem),
    };
    let head = read.split_to(length).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(target)) else {
        return Parsed::Refused(HeadProblem::MalformedRequestLine);
    };
    let mut headers = HeaderMap::with_capacity(fields.len() + ROOM_TO_ADD);
    for (name, value) in fields.drain(..) {
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(value)) else {
            return Parsed::Refused(HeadProblem::MalformedHeader);
        };
        headers.append(name, value);
    }
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Parsed::Complete(RequestHead {
        parts,
        body,
        keep_alive: rules.keep_alive,
        expect_continue: rules.expect_continue && body != BodyFraming::None,
        wants_upgrade: rules.wants_upgrade,
    })
}

/// Whether a head httparse parsed has a line that ends in LF alone. httparse lets a bare LF
/// end a line but refuses a CR that no LF follows, so every CR of a parsed head has its LF,
/// and some LF lacks its CR exactly when there are more LFs than CRs. Both are counted in one
/// pass, eight bytes at a time; finding each line break with memchr cost about 480
/// instructions a head, and two `filter().count()` passes about 700 (bench/instructions).
fn has_bare_line_feed(head: &[u8]) -> bool {
    let mut words = head.chunks_exact(8);
    let mut feeds = 0;
    let mut returns = 0;
    for word in &mut words {
        let word = u64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ]);
        feeds += zero_bytes(word ^ (ONES * u64::from(b'\n')));
        returns += zero_bytes(word ^ (ONES * u64::from(b'\r')));
    }
    for &byte in words.remainder() {
        feeds += u32::from(byte == b'\n');
        returns += u32::from(byte == b'\r');
    }
    feeds != returns
}

const ONES: u64 = 0x0101_0101_0101_0101;
const LOW_SEVEN: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// How many bytes of `word` are zero: adding 0x7f to a byte's low seven bits sets its top
/// bit unless all of them were zero, and the byte's own top bit rules out the rest.
fn zero_bytes(word: u64) -> u32 {
    let carried = (word & LOW_SEVEN).wrapping_add(LOW_SEVEN);
    (!(carried | word | LOW_SEVEN)).count_ones()
}

/// What the framing and connection headers of one head say, as they are read.
struct Rules {
    http11: bool,
    length: Option<u64>,
    /// Whether the last Transfer-Encoding line ends in `chunked`; `None` without one.
    chunked: Option<bool>,
    keep_alive: bool,
    said_close: bool,
    expect_continue: bool,
    wants_upgrade: bool,
}

impl Rules {
    fn new(method: &Method, version: Version) -> Self {
        let http11 = version == Version::HTTP_11;
        Self {
            http11,
            length: None,
            chunked: None,
            // HTTP/1.1 keeps connections open unless told otherwise; HTTP/1.0 only when asked.
            keep_alive: http11,
            said_close: false,
            expect_continue: false,
            wants_upgrade: *method == Method::CONNECT,
        }
    }

    fn add(&mut self, name: &HeaderName, value: &[u8]) -> Result<(), HeadProblem> {
        if *name == CONTENT_LENGTH {
            let length = parse_length(value).ok_or(HeadProblem::BadContentLength)?;
            if self.length.is_some_and(|known| known != length) {
                return Err(HeadProblem::BadContentLength);
            }
            self.length = Some(length);
        } else if *name == TRANSFER_ENCODING {
            if !self.http11 {
                return Err(HeadProblem::BadTransferEncoding);
            }
            self.chunked = Some(ends_in_chunked(value));
        } else if *name == CONNECTION {
            if self.said_close || has_token(value, b"close") {
                self.said_close = true;
                self.keep_alive = false;
            } else if !self.keep_alive {
                self.keep_alive = has_token(value, b"keep-alive");
            }
        } else if *name == EXPECT {
            self.expect_continue = self.http11 && value.eq_ignore_ascii_case(b"100-continue");
        } else if *name == UPGRADE {
            self.wants_upgrade = self.http11;
        }
        Ok(())
    }

    /// What follows the head.
    fn body(&self) -> Result<BodyFraming, HeadProblem> {
        match (self.length, self.chunked) {
            (Some(_), Some(_)) => Err(HeadProblem::LengthAndTransferEncoding),
            (None, Some(true)) => Ok(BodyFraming::Chunked),
            (None, Some(false)) => Err(HeadProblem::BadTransferEncoding),
            (Some(0) | None, None) => Ok(BodyFraming::None),
            (Some(length), None) => Ok(BodyFraming::Length(length)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_bytes: 64 * 1024,
        max_headers: 100,
    };

    fn parse_text(text: &str) -> (Parsed, BytesMut) {
        let mut read = BytesMut::from(text.as_bytes());
        skip_empty_lines(&mut read);
        let parsed = parse(&mut read, LIMITS, &mut Vec::new());
        (parsed, read)
    }

    fn refusal(text: &str) -> Option<HeadProblem> {
        match parse_text(text).0 {
            Parsed::Refused(problem) => Some(problem),
            _ => None,
        }
    }

    #[test]
    fn a_head_becomes_parts_and_the_bytes_after_it_stay() {
        let (parsed, rest) = parse_text(
            "\r\n\r\nPOST /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-Two: 1\r\nx-two: 2\r\n\
             Content-Length: 5\r\n\r\nhelloGET",
        );
        let Parsed::Complete(head) = parsed else {
            panic!("{parsed:?}");
        };
        assert_eq!(head.parts.method, Method::POST);
        assert_eq!(head.parts.uri, "/a?b=c");
        assert_eq!(head.parts.version, Version::HTTP_11);
        assert_eq!(head.parts.headers["host"], "example.com");
        let twos: Vec<_> = head.parts.headers.get_all("x-two").iter().collect();
        assert_eq!(twos, ["1", "2"]);
        assert_eq!(head.body, BodyFraming::Length(5));
        assert!(head.keep_alive);
        assert_eq!(&rest[..], b"helloGET");
    }

    #[test]
    fn a_head_in_pieces_is_partial_until_its_blank_line() {
        let mut read = BytesMut::new();
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for (index, byte) in head.iter().enumerate() {
            read.extend_from_slice(&[*byte]);
            let parsed = parse(&mut read, LIMITS, &mut Vec::new());
            match (index + 1 == head.len(), parsed) {
                (false, Parsed::Partial) | (true, Parsed::Complete(_)) => {}
                (_, other) => panic!("after {} bytes: {other:?}", index + 1),
            }
        }
        assert!(read.is_empty());
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let keep_alive = |text: &str| match parse_text(text).0 {
            Parsed::Complete(head) => head.keep_alive,
            other => panic!("{other:?}"),
        };
        assert!(keep_alive("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!keep_alive(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        ));
        assert!(!keep_alive("GET / HTTP/1.0\r\nHost: a\r\n\r\n"));
        assert!(keep_alive(
            "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
        ));
        assert!(!keep_alive(
            "GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"
        ));
    }

    #[test]
    fn expect_and_upgrade_are_noted_for_http11_only() {
        let head = |text: &str| match parse_text(text).0 {
            Parsed::Complete(head) => head,
            other => panic!("{other:?}"),
        };
        let expecting = head("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n");
        assert!(expecting.expect_continue);
        assert!(!head("PUT / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n").expect_continue);
        assert!(
            !head("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
                .expect_continue
        );
        assert!(head("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").wants_upgrade);
        assert!(!head("GET / HTTP/1.0\r\nUpgrade: websocket\r\n\r\n").wants_upgrade);
        assert_eq!(
            head("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").body,
            BodyFraming::Chunked
        );
    }

    #[test]
    fn heads_httparse_would_accept_but_a_proxy_must_refuse() {
        let cases = [
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadProblem::LengthAndTransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                HeadProblem::LengthAndTransferEncoding,
            ),
            ("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\nX-B: 2\r\n\r\n", HeadProblem::BareLineBreak),
            ("GET / HTTP/1.1\nHost: a\n\n", HeadProblem::BareLineBreak),
        ];
        for (head, problem) in cases {
            assert_eq!(refusal(head), Some(problem), "{head:?}");
        }
    }

    #[test]
    fn heads_httparse_refuses_are_refused_with_their_reason() {
        let cases = [
            (
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n",
                HeadProblem::ObsFold,
            ),
            (
                "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
                HeadProblem::MalformedHeader,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
                HeadProblem::BareLineBreak,
            ),
            ("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", HeadProblem::Nul),
            ("GET /\0 HTTP/1.1\r\n\r\n", HeadProblem::Nul),
            ("GET / HTTP/2.0\r\n\r\n", HeadProblem::MalformedRequestLine),
            ("G{T / HTTP/1.1\r\n\r\n", HeadProblem::MalformedRequestLine),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                HeadProblem::BadContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                HeadProblem::BadContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n",
                HeadProblem::BadContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                HeadProblem::BadTransferEncoding,
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadProblem::BadTransferEncoding,
            ),
        ];
        for (head, problem) in cases {
            assert_eq!(refusal(head), Some(problem), "{head:?}");
        }
    }

    #[test]
    fn zero_bytes_are_counted_whatever_their_neighbours() {
        for value in 0..=u8::MAX {
            for position in 0..8 {
                for filler in [0x01u8, 0x41, 0x7f, 0x80, 0xff] {
                    let mut bytes = [filler; 8];
                    bytes[position] = value;
                    let expected = bytes.iter().filter(|&&b| b == 0).count() as u32;
                    assert_eq!(zero_bytes(u64::from_le_bytes(bytes)), expected, "{bytes:?}");
                }
            }
        }
    }

    proptest::proptest! {
        /// Counting line breaks finds a bare LF in every head httparse parses, as walking
        /// them does.
        #[test]
        fn counting_finds_what_walking_finds(
            lines in proptest::collection::vec("[a-zA-Z0-9: -]{0,12}", 0..6),
            breaks in proptest::collection::vec(proptest::sample::select(vec!["\r\n", "\n", "\r", "\r\r\n"]), 6),
        ) {
            let mut head = String::from("GET / HTTP/1.1\r\n");
            for (line, end) in lines.iter().zip(&breaks) {
                head.push_str(line);
                head.push_str(end);
            }
            head.push_str("\r\n");
            let mut slots = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut slots);
            if let Ok(httparse::Status::Complete(length)) = request.parse(head.as_bytes()) {
                let parsed = &head.as_bytes()[..length];
                proptest::prop_assert_eq!(
                    has_bare_line_feed(parsed),
                    crate::server::framing::has_bare_line_break(parsed)
                );
            }
        }
    }

    #[test]
    fn equal_content_lengths_on_separate_lines_are_one_length() {
        let (parsed, _) =
            parse_text("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok");
        assert!(matches!(
            parsed,
            Parsed::Complete(RequestHead {
                body: BodyFraming::Length(2),
                ..
            })
        ));
    }

    #[test]
    fn limits_on_bytes_and_fields_are_431_even_before_the_head_ends() {
        let limits = HeadLimits {
            max_bytes: 32,
            max_headers: 2,
        };
        let mut long =
            BytesMut::from(format!("GET / HTTP/1.1\r\nX-Long: {}", "a".repeat(40)).as_str());
        assert!(matches!(
            parse(&mut long, limits, &mut Vec::new()),
            Parsed::Refused(HeadProblem::TooLarge)
        ));
        let mut many = BytesMut::from("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n");
        let limits = HeadLimits {
            max_bytes: 1024,
            max_headers: 2,
        };
        assert!(matches!(
            parse(&mut many, limits, &mut Vec::new()),
            Parsed::Refused(HeadProblem::TooManyHeaders)
        ));
        let mut over_stack = String::from("GET / HTTP/1.1\r\n");
        for index in 0..150 {
            over_stack.push_str(&format!("X-{index}: v\r\n"));
        }
        over_stack.push_str("\r\n");
        let limits = HeadLimits {
            max_bytes: 64 * 1024,
            max_headers: 200,
        };
        let mut read = BytesMut::from(over_stack.as_str());
        match parse(&mut read, limits, &mut Vec::new()) {
            Parsed::Complete(head) => assert_eq!(head.parts.headers.len(), 150),
            other => panic!("{other:?}"),
        }
    }
}
