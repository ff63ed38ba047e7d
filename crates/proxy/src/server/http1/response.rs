//! An answer on an HTTP/1.1 connection: its head written by the rules hyper's server followed (so clients see the same bytes as before sluice had its own codec), and its body framed by length, in chunks, or by closing the connection.
//!
//! The rules: header names go out as the map holds them (lower case), in its order, one line
//! per value, but `Connection`, `Transfer-Encoding` and `Trailer` values joined on one line. An
//! HTTP/1.0 client gets an HTTP/1.0 answer, `connection: keep-alive` when its connection stays
//! open, and never a chunked body (the connection closes instead); an HTTP/1.1 connection that
//! closes after the answer says `connection: close`. The body's framing comes from the
//! answer's `Content-Length` or `Transfer-Encoding`, else from what the body knows of its
//! length: `content-length: N`, or `transfer-encoding: chunked` when it does not know. HEAD,
//! 1xx, 204, 304 and a 2xx to CONNECT have no body. `date` is added when missing. Trailers go
//! out only on a chunked body, to a client that sent `TE: trailers`, for fields the `Trailer`
//! header named.

use bytes::Bytes;
use http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, DATE, HOST, MAX_FORWARDS, SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING,
};
use http::response::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

use super::date::write_date_line;
use crate::headers::has_token;
use crate::server::framing::{ends_in_chunked, parse_length};

/// What the request says about how its answer goes out.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asked<'a> {
    pub(super) method: &'a Method,
    pub(super) version: Version,
    /// The connection may carry another request after this answer.
    pub(super) keep_alive: bool,
    /// The client accepts trailers (`TE: trailers`).
    pub(super) trailers: bool,
}

/// What the answer's body knows of its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyLength {
    /// No body at all (it has already ended).
    Empty,
    Known(u64),
    Unknown,
}

/// An answer whose head cannot be written as its headers say (differing lengths, a length
/// that is not a number, or a length beside `Transfer-Encoding`).
#[derive(Debug, thiserror::Error)]
#[error("the answer's framing headers contradict each other")]
pub(super) struct BadFraming;

/// How the answer's body goes out, and whether the connection closes after it.
#[derive(Debug)]
pub(super) struct Encoder {
    kind: Kind,
    closes: bool,
    trailers: Option<Vec<HeaderName>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// This many bytes are still owed.
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0 without a length).
    CloseDelimited,
}

/// Bytes to write in order: framing bytes, then a piece of the body, then a fixed suffix.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    pub(super) head: Vec<u8>,
    pub(super) head_written: usize,
    pub(super) data: Bytes,
    pub(super) tail: &'static [u8],
}

impl Outgoing {
    pub(super) fn is_empty(&self) -> bool {
        self.head_written == self.head.len() && self.data.is_empty() && self.tail.is_empty()
    }

    /// Forgets what has been written, keeping the head buffer's memory.
    pub(super) fn clear(&mut self) {
        self.head.clear();
        self.head_written = 0;
        self.data = Bytes::new();
        self.tail = b"";
    }
}

/// Writes the head of `response` to `out` and says how its body goes out.
pub(super) fn encode_head(
    out: &mut Vec<u8>,
    response: &mut Parts,
    asked: Asked<'_>,
    body: BodyLength,
) -> Result<Encoder, BadFraming> {
    let mut keep_alive = asked.keep_alive;
    fit_to_version(response, asked.version, &mut keep_alive);
    let status = response.status;
    let connect_success = *asked.method == Method::CONNECT && status.is_success();
    let mut closes = !keep_alive || status == StatusCode::SWITCHING_PROTOCOLS || connect_success;
    if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
        // A handler never answers with another 1xx; should it, the client gets a 500.
        response.status = StatusCode::INTERNAL_SERVER_ERROR;
        response.headers.clear();
        closes = true;
    }
    write_status_line(out, response);
    let rules = BodyRules::of(asked.method, response.status, response.version);
    let mut writer = HeaderWriter {
        out,
        body,
        rules,
        head_request: *asked.method == Method::HEAD,
        wrote_length: connect_success,
        kind: Kind::Length(0),
        open: None,
        add_chunked: false,
        length: None,
        wrote_date: false,
        closes,
        trailers: None,
    };
    let mut current = None;
    for (name, value) in response.headers.drain() {
        if let Some(name) = name {
            writer.close_line();
            current = Some(name);
        }
        if let Some(name) = &current {
            writer.field(name, &value)?;
        }
    }
    writer.close_line();
    writer.finish()
}

/// An HTTP/1.0 client gets an HTTP/1.0 answer that keeps the connection only when it says
/// `keep-alive`; an HTTP/1.1 connection that will close says so.
fn fit_to_version(response: &mut Parts, request_version: Version, keep_alive: &mut bool) {
    let connection_has = |headers: &HeaderMap, token: &[u8]| {
        headers
            .get_all(CONNECTION)
            .iter()
            .any(|value| has_token(value.as_bytes(), token))
    };
    if request_version == Version::HTTP_10 {
        if !connection_has(&response.headers, b"keep-alive") {
            match response.version {
                Version::HTTP_10 => *keep_alive = false,
                Version::HTTP_11 if *keep_alive => {
                    response
                        .headers
                        .append(CONNECTION, HeaderValue::from_static("keep-alive"));
                }
                _ => {}
            }
        }
        response.version = Version::HTTP_10;
    } else if !*keep_alive && !connection_has(&response.headers, b"close") {
        response
            .headers
            .append(CONNECTION, HeaderValue::from_static("close"));
    }
}

fn write_status_line(out: &mut Vec<u8>, response: &Parts) {
    let reason = response.extensions.get::<hyper::ext::ReasonPhrase>();
    if response.version == Version::HTTP_11 && response.status == StatusCode::OK && reason.is_none()
    {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(match response.version {
        Version::HTTP_10 => b"HTTP/1.0 ",
        _ => b"HTTP/1.1 ",
    });
    out.extend_from_slice(response.status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(reason) => out.extend_from_slice(reason.as_bytes()),
        None => out.extend_from_slice(
            response
                .status
                .canonical_reason()
                .unwrap_or("<none>")
                .as_bytes(),
        ),
    }
    out.extend_from_slice(b"\r\n");
}

/// What the answer to this request may carry.
#[derive(Clone, Copy, Debug)]
struct BodyRules {
    /// A body (and so chunked framing) at all: not for HEAD, 1xx, 204, 304 or a CONNECT 2xx.
    body: bool,
    /// A Content-Length header: not for 1xx, 204, 304 or a CONNECT 2xx (HEAD keeps it).
    length: bool,
    /// Chunked framing: a body, and an HTTP/1.1 answer.
    chunked: bool,
}

impl BodyRules {
    fn of(method: &Method, status: StatusCode, version: Version) -> Self {
        let no_content = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
        let connect_success = *method == Method::CONNECT && status.is_success();
        let length = !status.is_informational() && !connect_success && !no_content;
        let body = length && *method != Method::HEAD;
        Self {
            body,
            length,
            chunked: body && version != Version::HTTP_10,
        }
    }
}

/// A header line that further values of its name join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    ContentLength,
    TransferEncoding,
    Connection,
    Trailer,
}

/// Writes header lines and works out the body's framing as it goes.
struct HeaderWriter<'a> {
    out: &'a mut Vec<u8>,
    body: BodyLength,
    rules: BodyRules,
    head_request: bool,
    wrote_length: bool,
    kind: Kind,
    open: Option<Open>,
    /// The Transfer-Encoding line does not end in `chunked`: it gets `, chunked`.
    add_chunked: bool,
    /// The length a Content-Length header gave, for a body that did not know its own.
    length: Option<u64>,
    wrote_date: bool,
    closes: bool,
    trailers: Option<Vec<HeaderName>>,
}

impl HeaderWriter<'_> {
    fn close_line(&mut self) {
        if let Some(open) = self.open.take() {
            if open == Open::TransferEncoding && self.add_chunked {
                self.out.extend_from_slice(b", chunked\r\n");
            } else {
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Starts a joined line, or continues it with another value.
    fn join(&mut self, open: Open, name: &str, value: &HeaderValue) {
        if self.open == Some(open) {
            self.out.extend_from_slice(b", ");
        } else {
            self.out.extend_from_slice(name.as_bytes());
            self.out.extend_from_slice(b": ");
            self.open = Some(open);
        }
        self.out.extend_from_slice(value.as_bytes());
    }

    fn plain(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.out.extend_from_slice(name.as_str().as_bytes());
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    fn field(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), BadFraming> {
        if *name == CONTENT_LENGTH {
            return self.content_length(name, value);
        }
        if *name == TRANSFER_ENCODING {
            if self.wrote_length && self.open != Some(Open::TransferEncoding) {
                return Err(BadFraming);
            }
            if !self.rules.chunked {
                return Ok(());
            }
            self.wrote_length = true;
            self.add_chunked = !ends_in_chunked(value.as_bytes());
            self.kind = Kind::Chunked;
            self.join(Open::TransferEncoding, "transfer-encoding", value);
        } else if *name == CONNECTION {
            self.closes |= has_token(value.as_bytes(), b"close");
            self.join(Open::Connection, "connection", value);
        } else if *name == TRAILER {
            if !self.rules.chunked {
                return Ok(());
            }
            self.join(Open::Trailer, "trailer", value);
            let names = value
                .as_bytes()
                .split(|&b| b == b',')
                .filter_map(|part| HeaderName::from_bytes(part.trim_ascii()).ok());
            self.trailers.get_or_insert_with(Vec::new).extend(names);
        } else {
            self.wrote_date |= *name == DATE;
            self.plain(name, value);
        }
        Ok(())
    }

    fn content_length(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), BadFraming> {
        let continuing = self.open == Some(Open::ContentLength);
        if self.wrote_length && !continuing {
            return Err(BadFraming);
        }
        match self.body {
            BodyLength::Known(known) => {
                if !continuing {
                    self.kind = Kind::Length(known);
                    self.start_length_line(value);
                }
            }
            BodyLength::Unknown => {
                let length = parse_length(value.as_bytes()).ok_or(BadFraming)?;
                match self.length {
                    Some(previous) if previous != length => return Err(BadFraming),
                    Some(_) => {}
                    None => {
                        self.kind = Kind::Length(length);
                        self.length = Some(length);
                        self.start_length_line(value);
                    }
                }
            }
            // A HEAD answer says how long the body would be; any other empty answer gets the
            // zero length written below instead.
            BodyLength::Empty if self.head_request => {
                self.wrote_length = true;
                self.plain(name, value);
            }
            BodyLength::Empty => {}
        }
        Ok(())
    }

    fn start_length_line(&mut self, value: &HeaderValue) {
        self.out.extend_from_slice(b"content-length: ");
        self.out.extend_from_slice(value.as_bytes());
        self.wrote_length = true;
        self.open = Some(Open::ContentLength);
    }

    /// Adds the framing header the answer lacks, the date and the blank line.
    fn finish(mut self) -> Result<Encoder, BadFraming> {
        if !self.wrote_length {
            self.kind = match self.body {
                BodyLength::Unknown if !self.rules.chunked => Kind::CloseDelimited,
                BodyLength::Unknown => {
                    self.out
                        .extend_from_slice(b"transfer-encoding: chunked\r\n");
                    Kind::Chunked
                }
                BodyLength::Empty | BodyLength::Known(0) => {
                    if self.rules.length && !self.head_request {
                        self.out.extend_from_slice(b"content-length: 0\r\n");
                    }
                    Kind::Length(0)
                }
                BodyLength::Known(length) if self.rules.length => {
                    self.out.extend_from_slice(b"content-length: ");
                    self.out
                        .extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
                    self.out.extend_from_slice(b"\r\n");
                    Kind::Length(length)
                }
                BodyLength::Known(_) => Kind::Length(0),
            };
        }
        if !self.rules.body {
            self.kind = Kind::Length(0);
        }
        if !self.wrote_date {
            write_date_line(self.out);
        }
        self.out.extend_from_slice(b"\r\n");
        let closes = self.closes || self.kind == Kind::CloseDelimited;
        Ok(Encoder {
            kind: self.kind,
            closes,
            trailers: self.trailers.filter(|_| self.kind == Kind::Chunked),
        })
    }
}

/// The last chunk, alone or after a chunk's data.
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
const DATA_THEN_LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

impl Encoder {
    /// The body has gone out in full (a length counted down to zero).
    pub(super) fn is_done(&self) -> bool {
        self.kind == Kind::Length(0)
    }

    /// The connection closes after this answer.
    pub(super) fn closes(&self) -> bool {
        self.closes
    }

    /// Frames `data` (not empty) into `out`, whose data slot is free; `last` when the body
    /// ends with it.
    pub(super) fn data(&mut self, mut data: Bytes, last: bool, out: &mut Outgoing) {
        match &mut self.kind {
            Kind::Chunked => {
                write_chunk_size(&mut out.head, data.len());
                out.data = data;
                out.tail = if last {
                    self.kind = Kind::Length(0);
                    DATA_THEN_LAST_CHUNK
                } else {
                    b"\r\n"
                };
            }
            Kind::Length(left) => {
                // A body longer than its length is cut at the length.
                let take = usize::try_from(*left).map_or(data.len(), |l| l.min(data.len()));
                data.truncate(take);
                *left -= take as u64;
                out.data = data;
            }
            Kind::CloseDelimited => out.data = data,
        }
    }

    /// Ends the body. A length not reached is an error: the client must not take a short body
    /// for a whole one, so the connection closes instead.
    pub(super) fn end(&mut self, out: &mut Outgoing) -> Result<(), ShortBody> {
        match self.kind {
            Kind::Length(0) | Kind::CloseDelimited => Ok(()),
            Kind::Length(left) => Err(ShortBody(left)),
            Kind::Chunked => {
                out.head.extend_from_slice(LAST_CHUNK);
                self.kind = Kind::Length(0);
                Ok(())
            }
        }
    }

    /// Ends a chunked body with `trailers`, those of them the `Trailer` header named and the
    /// client accepts; other bodies just end.
    pub(super) fn trailers(
        &mut self,
        trailers: HeaderMap,
        accepted: bool,
        out: &mut Outgoing,
    ) -> Result<(), ShortBody> {
        let named = match (&self.trailers, self.kind, accepted) {
            (Some(named), Kind::Chunked, true) => named,
            _ => return self.end(out),
        };
        let start = out.head.len();
        out.head.extend_from_slice(b"0\r\n");
        let mut any = false;
        for (name, value) in &trailers {
            if named.contains(name) && may_trail(name) {
                out.head.extend_from_slice(name.as_str().as_bytes());
                out.head.extend_from_slice(b": ");
                out.head.extend_from_slice(value.as_bytes());
                out.head.extend_from_slice(b"\r\n");
                any = true;
            }
        }
        if !any {
            out.head.truncate(start);
            return self.end(out);
        }
        out.head.extend_from_slice(b"\r\n");
        self.kind = Kind::Length(0);
        Ok(())
    }
}

/// The body ended this many bytes before its length.
#[derive(Debug, thiserror::Error)]
#[error("the answer's body ended {0} bytes before its length")]
pub(super) struct ShortBody(pub(super) u64);

/// Fields that may not be sent as trailers (RFC 9110 §6.5.1).
fn may_trail(name: &HeaderName) -> bool {
    !matches!(
        *name,
        AUTHORIZATION
            | CACHE_CONTROL
            | CONTENT_ENCODING
            | CONTENT_LENGTH
            | CONTENT_RANGE
            | CONTENT_TYPE
            | HOST
            | MAX_FORWARDS
            | SET_COOKIE
            | TRAILER
            | TRANSFER_ENCODING
            | TE
    )
}

/// `len` in upper-case hex and CRLF, as a chunk-size line.
fn write_chunk_size(out: &mut Vec<u8>, len: usize) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut text = [0u8; 16];
    let mut at = text.len();
    let mut rest = len;
    loop {
        at -= 1;
        text[at] = DIGITS[rest & 0xf];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&text[at..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(response: Response<()>, asked: Asked<'_>, body: BodyLength) -> (String, Encoder) {
        let (mut parts, ()) = response.into_parts();
        let mut out = Vec::new();
        let encoder =
            encode_head(&mut out, &mut parts, asked, body).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(out).unwrap_or_default();
        let text = text
            .split("\r\n")
            .filter(|line| !line.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("|");
        (text, encoder)
    }

    use http::Response;

    const GET_11: Asked<'static> = Asked {
        method: &Method::GET,
        version: Version::HTTP_11,
        keep_alive: true,
        trailers: true,
    };

    #[test]
    fn chunk_sizes_are_upper_case_hex() {
        for (len, text) in [
            (1, "1"),
            (10, "A"),
            (255, "FF"),
            (4096, "1000"),
            (0x1_0000_0000, "100000000"),
        ] {
            let mut out = Vec::new();
            write_chunk_size(&mut out, len);
            assert_eq!(out, format!("{text}\r\n").into_bytes());
        }
    }

    #[test]
    fn a_body_of_unknown_length_goes_chunked_and_ends_with_the_last_chunk() {
        let (head, mut encoder) = head_of(Response::new(()), GET_11, BodyLength::Unknown);
        assert_eq!(head, "HTTP/1.1 200 OK|transfer-encoding: chunked||");
        let mut out = Outgoing::default();
        encoder.data(Bytes::from_static(b"hello"), false, &mut out);
        assert_eq!(
            (&out.head[..], &out.data[..], out.tail),
            (&b"5\r\n"[..], &b"hello"[..], &b"\r\n"[..])
        );
        let mut out = Outgoing::default();
        encoder.data(Bytes::from_static(b"bye"), true, &mut out);
        assert_eq!(out.tail, DATA_THEN_LAST_CHUNK);
        assert!(encoder.is_done() && !encoder.closes());
    }

    #[test]
    fn a_known_length_is_cut_at_the_length_and_a_short_body_is_an_error() {
        let (head, mut encoder) = head_of(Response::new(()), GET_11, BodyLength::Known(4));
        assert_eq!(head, "HTTP/1.1 200 OK|content-length: 4||");
        let mut out = Outgoing::default();
        encoder.data(Bytes::from_static(b"abcdef"), false, &mut out);
        assert_eq!(&out.data[..], b"abcd");
        assert!(encoder.is_done());
        let (_, mut short) = head_of(Response::new(()), GET_11, BodyLength::Known(4));
        short.data(Bytes::from_static(b"ab"), false, &mut Outgoing::default());
        assert!(short.end(&mut Outgoing::default()).is_err());
    }

    #[test]
    fn only_named_allowed_trailers_go_out_to_a_client_that_accepts_them() {
        let response = Response::builder()
            .header("trailer", "x-sum, set-cookie")
            .body(())
            .unwrap_or_else(|e| panic!("{e}"));
        let (head, mut encoder) = head_of(response, GET_11, BodyLength::Unknown);
        assert_eq!(
            head,
            "HTTP/1.1 200 OK|trailer: x-sum, set-cookie|transfer-encoding: chunked||"
        );
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", HeaderValue::from_static("1"));
        trailers.insert("set-cookie", HeaderValue::from_static("a=b"));
        trailers.insert("x-other", HeaderValue::from_static("2"));
        let mut out = Outgoing::default();
        encoder
            .trailers(trailers.clone(), true, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.head, b"0\r\nx-sum: 1\r\n\r\n");
        let (_, mut refused) = head_of(
            Response::builder()
                .header("trailer", "x-sum")
                .body(())
                .unwrap_or_default(),
            GET_11,
            BodyLength::Unknown,
        );
        let mut out = Outgoing::default();
        refused
            .trailers(trailers, false, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.head, LAST_CHUNK);
    }

    #[test]
    fn contradicting_framing_headers_are_refused() {
        let both = Response::builder()
            .header("content-length", "3")
            .header("transfer-encoding", "chunked")
            .body(())
            .unwrap_or_default();
        let (mut parts, ()) = both.into_parts();
        assert!(encode_head(&mut Vec::new(), &mut parts, GET_11, BodyLength::Unknown).is_err());
        let differing = Response::builder()
            .header("content-length", "3")
            .header("content-length", "4")
            .body(())
            .unwrap_or_default();
        let (mut parts, ()) = differing.into_parts();
        assert!(encode_head(&mut Vec::new(), &mut parts, GET_11, BodyLength::Unknown).is_err());
    }
}
