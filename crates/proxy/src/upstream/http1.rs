//! HTTP/1.1 to an endpoint in the request's own task: the head written once from the request's parts, the response head parsed with httparse, and the body read by the response body itself, so an exchange needs no connection task, channel or second header map.
//!
//! The framing follows hyper's HTTP/1.1 client, which sluice used before, so the bytes a pod
//! receives are the same: header names as the map holds them (lower case), in the map's order;
//! a `Transfer-Encoding` that does not end in `chunked` gets `, chunked` added, and then any
//! `Content-Length` goes; a valid `Content-Length` frames the body; a body of unknown length
//! goes chunked (`GET`, `HEAD` and `CONNECT` send none); trailers go out only when the
//! request's `Trailer` header names them. A response is framed as RFC 9112 §6.3 says, 1xx
//! answers other than 101 are skipped, and a reason phrase that is not the canonical one is
//! kept for the client.

use std::fmt::Write as _;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::buf::Chain;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRAILER, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::error::UpstreamError;
use crate::headers::{has_token, names_only_hop_by_hop};
use crate::upstream::connect::Stream;
use crate::upstream::request_body::UpstreamBody;
use upload::Upload;

/// The most header fields a response head (or a trailer section) may have, as hyper allows.
const MAX_HEADERS: usize = 100;
/// The longest response head, as hyper's default read buffer limit allows.
const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// What one read asks for at least.
const READ_SIZE: usize = 8 * 1024;
/// What one read of a long body asks for at most.
const MAX_READ_SIZE: usize = 64 * 1024;
/// The longest chunk-size line (with its extensions), and the longest trailer section.
const CHUNK_LINE_LIMIT: usize = 16 * 1024;
const TRAILER_LIMIT: usize = 16 * 1024;
/// A buffered request body up to this size goes out in the same write as the head.
const INLINE_BODY: usize = 16 * 1024;

/// An HTTP/1.1 connection to an endpoint: its socket and the bytes read from it that no
/// response has used yet.
pub(crate) struct Http1Connection {
    io: Stream,
    read: BytesMut,
    /// Scratch space for parsing response heads, kept between responses.
    fields: HeadFields,
}

/// A response head's fields while its bytes are borrowed: each name, and where its value is.
type HeadFields = Vec<(HeaderName, std::ops::Range<usize>)>;

/// How an exchange on a connection failed.
pub(crate) enum Http1Failure {
    /// The connection took none of the request: the body is given back.
    Unsent(UpstreamBody, UpstreamError),
    /// The request (or part of it) went out, then the exchange failed.
    Failed(UpstreamError),
}

impl Http1Connection {
    pub(crate) fn new(io: Stream) -> Self {
        Self {
            io,
            read: BytesMut::new(),
            fields: Vec::new(),
        }
    }

    /// Whether an idle connection is still open and quiet: the endpoint has neither closed it
    /// nor sent anything unasked. For a plain socket this costs no system call unless the
    /// socket became readable.
    pub(crate) fn is_open(&mut self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match &mut self.io {
            Stream::Plain(stream) => match stream.poll_read_ready(&mut cx) {
                Poll::Pending => true,
                Poll::Ready(Err(_)) => false,
                Poll::Ready(Ok(())) => {
                    let mut probe = [0u8; 1];
                    matches!(stream.try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
                }
            },
            Stream::Tls(stream) => {
                let mut probe = [0u8; 1];
                let mut probe = ReadBuf::new(&mut probe);
                Pin::new(stream.as_mut())
                    .poll_read(&mut cx, &mut probe)
                    .is_pending()
            }
        }
    }

    /// Sends the request `parts` describe with `body` and reads the response head; the
    /// response's body reads the rest and owns the connection until it ends.
    pub(crate) async fn send(
        mut self,
        parts: &Parts,
        body: UpstreamBody,
    ) -> Result<Response<Http1Body>, Http1Failure> {
        let framing = RequestFraming::of(parts, &body);
        let mut head = BytesMut::with_capacity(256 + parts.headers.len() * 48);
        write_head(&mut head, parts, &framing);
        let early = match body {
            UpstreamBody::Buffered(bytes) => {
                self.send_buffered(head, bytes, &framing).await?;
                None
            }
            streamed => self.send_streamed(head, streamed, &framing).await?,
        };
        let (parsed, upload) = match early {
            Some(early) => early,
            None => {
                let parsed = self.read_head(&parts.method).await;
                (parsed.map_err(Http1Failure::Failed)?, None)
            }
        };
        Ok(parsed.into_response(self, upload))
    }

    /// Writes the head and a buffered body, the body in the same write when it is small.
    async fn send_buffered(
        &mut self,
        mut head: BytesMut,
        body: Option<Bytes>,
        framing: &RequestFraming,
    ) -> Result<(), Http1Failure> {
        let body = body
            .filter(|_| framing.sends_body())
            .map(|body| framing.within_length(body));
        let last_chunk: &[u8] = if framing.chunked { b"0\r\n\r\n" } else { b"" };
        let rest = match body {
            Some(body) if body.len() <= INLINE_BODY => {
                head.put(framed(body, framing.chunked, last_chunk));
                None
            }
            body => body,
        };
        let head = head.freeze();
        // A buffered body is the request's to copy again: nothing needs giving back.
        let written = self
            .write_first(&head)
            .await
            .map_err(|error| Http1Failure::Unsent(UpstreamBody::Buffered(None), error))?;
        let failed = |error| Http1Failure::Failed(UpstreamError::Io(error));
        self.io.write_all(&head[written..]).await.map_err(failed)?;
        if let Some(body) = rest {
            let mut out = framed(body, framing.chunked, last_chunk);
            self.io.write_all_buf(&mut out).await.map_err(failed)?;
        }
        self.io.flush().await.map_err(failed)
    }

    /// The first write of a request: a connection that takes none of it has not been used.
    async fn write_first(&mut self, head: &[u8]) -> Result<usize, UpstreamError> {
        match self.io.write(head).await {
            Ok(0) => Err(UpstreamError::ClosedBeforeResponse),
            Ok(written) => Ok(written),
            Err(error) => Err(UpstreamError::Io(error)),
        }
    }

    /// Writes the head, then streams the body while watching for a response that comes
    /// before the body has gone (an endpoint refusing an upload, or answering before it
    /// reads): that response is the answer, and the rest of the body goes on beside it.
    async fn send_streamed(
        &mut self,
        head: BytesMut,
        body: UpstreamBody,
        framing: &RequestFraming,
    ) -> Result<Option<(ParsedHead, Option<Upload>)>, Http1Failure> {
        let head = head.freeze();
        let written = match self.write_first(&head).await {
            Ok(written) => written,
            Err(error) => return Err(Http1Failure::Unsent(body, error)),
        };
        let failed = |error| Http1Failure::Failed(UpstreamError::Io(error));
        self.io.write_all(&head[written..]).await.map_err(failed)?;
        if !framing.sends_body() {
            self.io.flush().await.map_err(failed)?;
            return Ok(None);
        }
        let mut upload = Upload::new(body, framing);
        let mut received_any = !self.read.is_empty();
        let (io, read, fields) = (&mut self.io, &mut self.read, &mut self.fields);
        let outcome = std::future::poll_fn(|cx| {
            if let Poll::Ready(sent) = upload.poll_send(io, cx) {
                return Poll::Ready(Ok(sent));
            }
            poll_head(io, read, fields, &framing.method, &mut received_any, cx).map(Err)
        })
        .await;
        match outcome {
            Ok(Ok(())) => Ok(None),
            Ok(Err(error @ UpstreamError::RequestBody(_))) => Err(Http1Failure::Failed(error)),
            // The endpoint stopped taking the body: it may have answered before it did. The
            // body stops here, so the connection ends with this response.
            Ok(Err(error)) => match self.read_head(&framing.method).await {
                Ok(parsed) => Ok(Some((parsed.closing(), None))),
                Err(_) => Err(Http1Failure::Failed(error)),
            },
            Err(Ok(parsed)) => Ok(Some((parsed, Some(upload)))),
            Err(Err(error)) => Err(Http1Failure::Failed(error)),
        }
    }

    async fn read_head(&mut self, method: &Method) -> Result<ParsedHead, UpstreamError> {
        read_head_from(&mut self.io, &mut self.read, &mut self.fields, method).await
    }

    /// Reads more of the stream into the read buffer, asking for about `wanted` bytes.
    fn poll_fill(&mut self, cx: &mut Context<'_>, wanted: u64) -> Poll<io::Result<usize>> {
        poll_fill(&mut self.io, &mut self.read, cx, wanted)
    }
}

/// Reads from `io` into `buffer` until a final response head (1xx ones other than 101 are
/// skipped) has arrived whole.
async fn read_head_from<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut BytesMut,
    fields: &mut HeadFields,
    method: &Method,
) -> Result<ParsedHead, UpstreamError> {
    let mut received_any = !buffer.is_empty();
    std::future::poll_fn(|cx| poll_head(io, buffer, fields, method, &mut received_any, cx)).await
}

/// The poll behind `read_head_from`; `received_any` tells a close before any byte from one
/// that cuts a head off.
fn poll_head<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut BytesMut,
    fields: &mut HeadFields,
    method: &Method,
    received_any: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Result<ParsedHead, UpstreamError>> {
    loop {
        if !buffer.is_empty() {
            if let Some(parsed) = parse_head(buffer, method, fields)? {
                return Poll::Ready(Ok(parsed));
            }
        }
        let read =
            ready!(poll_fill(io, buffer, cx, READ_SIZE as u64)).map_err(UpstreamError::Io)?;
        if read == 0 {
            return Poll::Ready(Err(match received_any {
                true => UpstreamError::Malformed("the response head was cut off"),
                false => UpstreamError::ClosedBeforeResponse,
            }));
        }
        *received_any = true;
    }
}

fn poll_fill<R: AsyncRead + Unpin>(
    io: &mut R,
    buffer: &mut BytesMut,
    cx: &mut Context<'_>,
    wanted: u64,
) -> Poll<io::Result<usize>> {
    let size = usize::try_from(wanted)
        .unwrap_or(MAX_READ_SIZE)
        .clamp(READ_SIZE, MAX_READ_SIZE);
    if buffer.capacity() - buffer.len() < READ_SIZE {
        buffer.reserve(size);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, buffer)
}

/// How the request's body is framed, decided as hyper's client decides it.
struct RequestFraming {
    method: Method,
    /// The body's length, when a `Content-Length` frames it.
    length: Option<u64>,
    chunked: bool,
    /// Whether a `Transfer-Encoding` not ending in `chunked` gets `, chunked` added.
    add_chunked: bool,
    /// Whether a `Content-Length` header is left out (the body goes chunked).
    drop_length: bool,
    /// Whether `Transfer-Encoding: chunked` is added at the end of the head.
    insert_chunked: bool,
    /// The `Content-Length` added at the end of the head (the map had no valid one).
    insert_length: Option<u64>,
    /// The trailer fields the request's `Trailer` header allows.
    trailers: Vec<HeaderName>,
}

impl RequestFraming {
    fn of(parts: &Parts, body: &UpstreamBody) -> Self {
        let headers = &parts.headers;
        let mut framing = Self {
            method: parts.method.clone(),
            length: Some(0),
            chunked: false,
            add_chunked: false,
            drop_length: false,
            insert_chunked: false,
            insert_length: None,
            trailers: Vec::new(),
        };
        if body.is_end_stream() {
            // No body: any `Transfer-Encoding` goes (hyper keeps a `Content-Length`).
            return framing;
        }
        let declared = content_length(headers);
        if headers.contains_key(TRANSFER_ENCODING) {
            framing.chunked = true;
            framing.add_chunked = !is_chunked(headers);
            framing.drop_length = true;
        } else if let Some(length) = declared {
            framing.length = Some(length);
        } else {
            match body.size_hint().exact() {
                Some(length) => {
                    framing.length = Some(length);
                    framing.insert_length = Some(length);
                }
                None if matches!(parts.method, Method::GET | Method::HEAD | Method::CONNECT) => {}
                None => {
                    framing.chunked = true;
                    framing.insert_chunked = true;
                    framing.drop_length = true;
                }
            }
        }
        if framing.chunked {
            framing.length = None;
            framing.trailers = headers
                .get_all(TRAILER)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
                .collect();
        }
        framing
    }

    fn sends_body(&self) -> bool {
        self.chunked || self.length.is_some_and(|length| length > 0)
    }

    /// A whole body cut to the declared length (as hyper sends no more than it).
    fn within_length(&self, mut body: Bytes) -> Bytes {
        if let Some(length) = self.length {
            body.truncate(usize::try_from(length).unwrap_or(usize::MAX));
        }
        body
    }
}

/// The request line and header section, with the framing's changes.
fn write_head(head: &mut BytesMut, parts: &Parts, framing: &RequestFraming) {
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.extend_from_slice(b" ");
    match (parts.uri.scheme(), parts.uri.path_and_query()) {
        (None, Some(target)) => head.extend_from_slice(target.as_str().as_bytes()),
        _ => {
            let _ = write!(head, "{}", parts.uri);
        }
    }
    head.extend_from_slice(b" HTTP/1.1\r\n");
    let mut last_encoding = None;
    if framing.add_chunked {
        last_encoding = parts.headers.get_all(TRANSFER_ENCODING).iter().next_back();
    }
    for (name, value) in &parts.headers {
        if name == TRANSFER_ENCODING && !framing.chunked {
            // A request with no body sends no transfer coding.
            continue;
        }
        if name == CONTENT_LENGTH && framing.drop_length {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        if last_encoding.is_some_and(|last| std::ptr::eq(last, value)) {
            head.extend_from_slice(b", chunked");
        }
        head.extend_from_slice(b"\r\n");
    }
    if framing.insert_chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if let Some(length) = framing.insert_length {
        let _ = write!(head, "content-length: {length}\r\n");
    }
    head.extend_from_slice(b"\r\n");
}

/// One piece of body as it goes out, and what follows it: a chunk's size line, its data, the
/// chunk's CRLF, then `end`.
type Framed = Chain<Chain<Chain<Bytes, Bytes>, &'static [u8]>, &'static [u8]>;

/// `data` in a body's framing (its own chunk when `chunked`), then `end`.
fn framed(data: Bytes, chunked: bool, end: &'static [u8]) -> Framed {
    let (size_line, chunk_end): (Bytes, &'static [u8]) = match chunked && !data.is_empty() {
        true => (Bytes::from(format!("{:X}\r\n", data.len())), b"\r\n"),
        false => (Bytes::new(), b""),
    };
    size_line.chain(data).chain(chunk_end).chain(end)
}

/// The trailer fields `allowed` names, leaving out those no trailer may carry.
fn write_allowed_trailers(out: &mut BytesMut, trailers: &HeaderMap, allowed: &[HeaderName]) {
    for (name, value) in trailers {
        if !allowed.contains(name) || !may_trail(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

fn may_trail(name: &HeaderName) -> bool {
    use http::header::{
        AUTHORIZATION, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_RANGE, CONTENT_TYPE, HOST,
        MAX_FORWARDS, SET_COOKIE, TE,
    };
    ![
        AUTHORIZATION,
        CACHE_CONTROL,
        CONTENT_ENCODING,
        CONTENT_LENGTH,
        CONTENT_RANGE,
        CONTENT_TYPE,
        HOST,
        MAX_FORWARDS,
        SET_COOKIE,
        TRAILER,
        TRANSFER_ENCODING,
        TE,
    ]
    .contains(name)
}

/// The length every `Content-Length` value agrees on, when they all parse.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let parsed = content_length_value(value.as_bytes())?;
        if length.is_some_and(|length| length != parsed) {
            return None;
        }
        length = Some(parsed);
    }
    length
}

/// The length one `Content-Length` field gives: a number, or a list of the same number.
fn content_length_value(value: &[u8]) -> Option<u64> {
    let mut length = None;
    for part in value.split(|&byte| byte == b',') {
        let parsed = decimal(part.trim_ascii())?;
        if length.is_some_and(|length| length != parsed) {
            return None;
        }
        length = Some(parsed);
    }
    length
}

/// One or more ASCII digits as a number, `None` on anything else or on overflow. On bytes:
/// `str`'s split, trim and parse cost about 400 instructions a response (bench/instructions).
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        let digit = byte.is_ascii_digit().then(|| u64::from(byte - b'0'))?;
        value.checked_mul(10)?.checked_add(digit)
    })
}

/// Whether the last transfer coding is `chunked`.
fn is_chunked(headers: &HeaderMap) -> bool {
    let Some(last) = headers.get_all(TRANSFER_ENCODING).iter().next_back() else {
        return false;
    };
    last.to_str()
        .ok()
        .and_then(|value| value.rsplit(',').next())
        .is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
}

/// A response head read whole, and how its body is framed.
struct ParsedHead {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    reason: Option<hyper::ext::ReasonPhrase>,
    framing: ResponseFraming,
    keep_alive: bool,
}

impl ParsedHead {
    /// This head with its connection not reused after the response: the request's body did
    /// not all go out.
    fn closing(mut self) -> Self {
        self.keep_alive = false;
        self
    }

    fn into_response(
        self,
        connection: Http1Connection,
        upload: Option<Upload>,
    ) -> Response<Http1Body> {
        let reusable = self.keep_alive
            && !matches!(
                self.framing,
                ResponseFraming::CloseDelimited | ResponseFraming::Upgrade
            );
        let body = Http1Body {
            connection,
            framing: self.framing,
            reusable,
            upload: upload.map(Box::new),
        };
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.version_mut() = self.version;
        *response.headers_mut() = self.headers;
        if let Some(reason) = self.reason {
            response.extensions_mut().insert(reason);
        }
        response
    }
}

/// Parses a final response head from the front of `buffer`, skipping 1xx heads other than
/// 101; `None` when more bytes are needed. The header values share the buffer's memory.
///
/// httparse parses into uninitialised slots (zeroing a hundred of them cost more than the
/// parse), the names are made while the buffer is borrowed and kept in `fields`, which the
/// connection keeps between responses, and the framing headers are read as the fields go by
/// rather than looked up in the map afterwards.
fn parse_head(
    buffer: &mut BytesMut,
    method: &Method,
    fields: &mut HeadFields,
) -> Result<Option<ParsedHead>, UpstreamError> {
    loop {
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            &buffer[..],
            &mut slots,
        );
        let length = match parsed {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) if buffer.len() > MAX_HEAD_BYTES => {
                return Err(UpstreamError::Malformed("the response head is too large"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(error) => return Err(UpstreamError::Parse(error)),
        };
        let code = response.code.unwrap_or(0);
        let status = StatusCode::from_u16(code)
            .map_err(|_| UpstreamError::Malformed("the response status is not a status code"))?;
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            buffer.advance(length);
            continue;
        }
        let version = match response.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        };
        let reason = response
            .reason
            .filter(|reason| Some(*reason) != status.canonical_reason())
            .and_then(|reason| hyper::ext::ReasonPhrase::try_from(reason.as_bytes()).ok());
        // A switch of protocols keeps its Connection for the tunnel; any other response's
        // `Connection: keep-alive` is this hop's alone and is not kept past this point.
        let switching = status.is_informational() || *method == Method::CONNECT;
        let mut framing = FramingFields::new(version);
        let base = buffer.as_ptr() as usize;
        fields.clear();
        for field in response.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .map_err(|_| UpstreamError::Malformed("a header name is invalid"))?;
            if framing.read(&name, field.value, switching) {
                let start = field.value.as_ptr() as usize - base;
                fields.push((name, start..start + field.value.len()));
            }
        }
        let head = buffer.split_to(length).freeze();
        let mut headers = HeaderMap::with_capacity(fields.len());
        for (name, value) in fields.drain(..) {
            let value = HeaderValue::from_maybe_shared(head.slice(value))
                .map_err(|_| UpstreamError::Malformed("a header value is invalid"))?;
            headers.append(name, value);
        }
        let keep_alive = framing.keep_alive;
        let framing = ResponseFraming::of(status, &framing, method)?;
        return Ok(Some(ParsedHead {
            status,
            version,
            headers,
            reason,
            framing,
            keep_alive,
        }));
    }
}

/// What a response head's framing and connection fields say, read as they go by.
struct FramingFields {
    version: Version,
    keep_alive: bool,
    saw_close: bool,
    /// Some field named Transfer-Encoding; whether the last one ends in `chunked`.
    chunked: Option<bool>,
    /// Content-Length fields: none, one agreed length, or values that do not agree or parse.
    length: Length,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Length {
    Absent,
    Agreed(u64),
    Invalid,
}

impl FramingFields {
    fn new(version: Version) -> Self {
        Self {
            version,
            keep_alive: version == Version::HTTP_11,
            saw_close: false,
            chunked: None,
            length: Length::Absent,
        }
    }

    /// Notes one field; `false` when it is not kept (a `Connection` of hop-by-hop names).
    fn read(&mut self, name: &HeaderName, value: &[u8], switching: bool) -> bool {
        if *name == CONTENT_LENGTH {
            self.length = match (self.length, content_length_value(value)) {
                (Length::Invalid, _) | (_, None) => Length::Invalid,
                (Length::Agreed(known), Some(length)) if known != length => Length::Invalid,
                (_, Some(length)) => Length::Agreed(length),
            };
        } else if *name == TRANSFER_ENCODING {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            self.chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if *name == CONNECTION {
            if self.saw_close || has_token(value, b"close") {
                self.saw_close = true;
                self.keep_alive = false;
            } else if !self.keep_alive {
                self.keep_alive = has_token(value, b"keep-alive");
            }
            if !switching && names_only_hop_by_hop(value) {
                return false;
            }
        }
        true
    }
}

/// How a response's body is delimited.
enum ResponseFraming {
    /// No body (HEAD, 204, 304).
    Empty,
    /// The protocol switched: the connection is the tunnel's.
    Upgrade,
    Length(u64),
    Chunked(ChunkState),
    /// Read until the endpoint closes.
    CloseDelimited,
}

impl ResponseFraming {
    fn of(
        status: StatusCode,
        fields: &FramingFields,
        method: &Method,
    ) -> Result<Self, UpstreamError> {
        match status.as_u16() {
            101 => return Ok(Self::Upgrade),
            204 | 304 => return Ok(Self::Empty),
            _ => {}
        }
        if *method == Method::HEAD {
            return Ok(Self::Empty);
        }
        if *method == Method::CONNECT && status.is_success() {
            return Ok(Self::Upgrade);
        }
        if let Some(chunked) = fields.chunked {
            if fields.version == Version::HTTP_10 {
                return Err(UpstreamError::Malformed(
                    "an HTTP/1.0 response names a transfer coding",
                ));
            }
            return Ok(match chunked {
                true => Self::Chunked(ChunkState::Size),
                false => Self::CloseDelimited,
            });
        }
        match fields.length {
            Length::Agreed(length) => Ok(Self::Length(length)),
            Length::Invalid => Err(UpstreamError::Malformed(
                "the response's Content-Length is invalid",
            )),
            Length::Absent => Ok(Self::CloseDelimited),
        }
    }
}

/// Where a chunked body's decoding is.
enum ChunkState {
    /// A chunk-size line comes next.
    Size,
    /// Bytes of the current chunk are left.
    Data(u64),
    /// The CRLF after a chunk's data comes next.
    DataEnd,
    /// The trailer section (maybe empty) after the last chunk comes next.
    Trailers,
    Done,
}

/// A response body read from its endpoint's connection as the client takes it. Once it has
/// ended, the connection can carry another request, when the response allows.
pub(crate) struct Http1Body {
    connection: Http1Connection,
    framing: ResponseFraming,
    reusable: bool,
    /// The request body's rest, when the endpoint answered before it had all gone.
    upload: Option<Box<Upload>>,
}

/// A connection whose response has ended and that may carry another request: at once, or
/// once the rest of its request body has gone.
pub(crate) struct Reusable {
    connection: Http1Connection,
    upload: Option<Box<Upload>>,
}

impl Reusable {
    /// The connection, when nothing of its request is still to go; else this back.
    pub(crate) fn now(self) -> Result<Http1Connection, Self> {
        match self.upload {
            None => Ok(self.connection),
            Some(_) => Err(self),
        }
    }

    /// Sends the rest of the request body; the connection when all of it went.
    pub(crate) async fn after_upload(self) -> Option<Http1Connection> {
        let Self {
            mut connection,
            upload,
        } = self;
        if let Some(mut upload) = upload {
            let io = &mut connection.io;
            std::future::poll_fn(|cx| upload.poll_send(io, cx))
                .await
                .ok()?;
        }
        connection.read.is_empty().then_some(connection)
    }
}

impl Http1Body {
    /// The connection, when the body has ended and the connection may carry another request.
    pub(crate) fn into_reusable(self) -> Option<Reusable> {
        let ended = matches!(
            self.framing,
            ResponseFraming::Empty
                | ResponseFraming::Length(0)
                | ResponseFraming::Chunked(ChunkState::Done)
        );
        (ended && self.reusable && self.connection.read.is_empty()).then_some(Reusable {
            connection: self.connection,
            upload: self.upload,
        })
    }

    /// Moves the request body's rest on as far as it goes without waiting; a body that
    /// fails half-way leaves the connection unusable for another request.
    fn send_upload(&mut self, cx: &mut Context<'_>) {
        let Some(upload) = self.upload.as_mut() else {
            return;
        };
        if let Poll::Ready(sent) = upload.poll_send(&mut self.connection.io, cx) {
            self.upload = None;
            self.reusable &= sent.is_ok();
        }
    }

    /// The connection of a response that switched protocols, for the tunnel.
    pub(crate) fn into_upgraded(self) -> Option<Http1Connection> {
        matches!(self.framing, ResponseFraming::Upgrade).then_some(self.connection)
    }

    /// The next data, or the end, of a body of known length.
    fn poll_length(
        &mut self,
        cx: &mut Context<'_>,
        remaining: u64,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        if remaining == 0 {
            return Poll::Ready(None);
        }
        if self.connection.read.is_empty() {
            let read = ready!(self.connection.poll_fill(cx, remaining)).map_err(UpstreamError::Io);
            match read {
                Err(error) => return Poll::Ready(Some(Err(error))),
                Ok(0) => return Poll::Ready(Some(Err(UpstreamError::IncompleteBody))),
                Ok(_) => {}
            }
        }
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(self.connection.read.len());
        self.framing = ResponseFraming::Length(remaining - take as u64);
        Poll::Ready(Some(Ok(self.connection.read.split_to(take).freeze())))
    }

    fn poll_until_close(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, UpstreamError>>> {
        if self.connection.read.is_empty() {
            match ready!(self.connection.poll_fill(cx, MAX_READ_SIZE as u64)) {
                Err(error) => return Poll::Ready(Some(Err(UpstreamError::Io(error)))),
                Ok(0) => {
                    self.framing = ResponseFraming::Empty;
                    return Poll::Ready(None);
                }
                Ok(_) => {}
            }
        }
        Poll::Ready(Some(Ok(self.connection.read.split().freeze())))
    }

    /// The next frame of a chunked body.
    fn poll_chunked(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        loop {
            let ResponseFraming::Chunked(state) = &mut self.framing else {
                return Poll::Ready(None);
            };
            let buffer = &mut self.connection.read;
            let step = match state {
                ChunkState::Done => return Poll::Ready(None),
                ChunkState::Size => chunk_size(buffer).map(|size| {
                    size.map(|size| {
                        *state = match size {
                            0 => ChunkState::Trailers,
                            size => ChunkState::Data(size),
                        };
                        None
                    })
                }),
                ChunkState::Data(left) if !buffer.is_empty() => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(buffer.len());
                    *left -= take as u64;
                    if *left == 0 {
                        *state = ChunkState::DataEnd;
                    }
                    Ok(Some(Some(Frame::data(buffer.split_to(take).freeze()))))
                }
                ChunkState::Data(_) => Ok(None),
                ChunkState::DataEnd if buffer.len() >= 2 => match &buffer[..2] == b"\r\n" {
                    true => {
                        buffer.advance(2);
                        *state = ChunkState::Size;
                        Ok(Some(None))
                    }
                    false => Err(UpstreamError::Malformed("a chunk does not end in CRLF")),
                },
                ChunkState::DataEnd => Ok(None),
                ChunkState::Trailers => trailer_section(buffer).map(|section| {
                    section.map(|trailers| {
                        *state = ChunkState::Done;
                        trailers.map(Frame::trailers)
                    })
                }),
            };
            match step {
                Err(error) => return Poll::Ready(Some(Err(error))),
                Ok(Some(Some(frame))) => return Poll::Ready(Some(Ok(frame))),
                Ok(Some(None)) => continue,
                Ok(None) => {
                    let wanted = match state {
                        ChunkState::Data(left) => *left,
                        _ => READ_SIZE as u64,
                    };
                    match ready!(self.connection.poll_fill(cx, wanted)) {
                        Err(error) => return Poll::Ready(Some(Err(UpstreamError::Io(error)))),
                        Ok(0) => return Poll::Ready(Some(Err(UpstreamError::IncompleteBody))),
                        Ok(_) => {}
                    }
                }
            }
        }
    }
}

/// Parses a chunk-size line (hex digits, optional whitespace and extensions, CRLF) off the
/// front of `buffer`; `None` when the line has not arrived whole.
fn chunk_size(buffer: &mut BytesMut) -> Result<Option<u64>, UpstreamError> {
    let Some(end) = buffer.iter().position(|&byte| byte == b'\n') else {
        if buffer.len() > CHUNK_LINE_LIMIT {
            return Err(UpstreamError::Malformed("a chunk-size line is too long"));
        }
        return Ok(None);
    };
    let malformed = UpstreamError::Malformed("a chunk-size line is malformed");
    if end == 0 || buffer[end - 1] != b'\r' || end > CHUNK_LINE_LIMIT {
        return Err(malformed);
    }
    let line = &buffer[..end - 1];
    let digits = line
        .iter()
        .take_while(|byte| byte.is_ascii_hexdigit())
        .count();
    if digits == 0 || line.contains(&b'\r') {
        return Err(malformed);
    }
    let mut size = 0u64;
    for &digit in &line[..digits] {
        let value = u64::from(match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => digit - b'A' + 10,
        });
        size = size
            .checked_mul(16)
            .and_then(|size| size.checked_add(value))
            .ok_or(UpstreamError::Malformed("a chunk size overflows"))?;
    }
    let rest = &line[digits..];
    let spaces = rest
        .iter()
        .take_while(|&&byte| byte == b' ' || byte == b'\t')
        .count();
    let rest = &rest[spaces..];
    if !rest.is_empty() && rest[0] != b';' {
        return Err(malformed);
    }
    buffer.advance(end + 1);
    Ok(Some(size))
}

/// Parses the trailer section after the last chunk off the front of `buffer`: `Some(None)`
/// for an empty one, `None` when it has not arrived whole.
#[allow(clippy::option_option)]
fn trailer_section(buffer: &mut BytesMut) -> Result<Option<Option<HeaderMap>>, UpstreamError> {
    if buffer.len() >= 2 && &buffer[..2] == b"\r\n" {
        buffer.advance(2);
        return Ok(Some(None));
    }
    let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") else {
        if buffer.len() > TRAILER_LIMIT {
            return Err(UpstreamError::Malformed("the trailer section is too large"));
        }
        return Ok(None);
    };
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let parsed = match httparse::parse_headers(&buffer[..end + 4], &mut fields) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        Ok(httparse::Status::Partial) | Err(_) => {
            return Err(UpstreamError::Malformed("the trailer section is malformed"))
        }
    };
    let mut trailers = HeaderMap::with_capacity(parsed.len());
    for field in parsed {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| UpstreamError::Malformed("a trailer name is invalid"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| UpstreamError::Malformed("a trailer value is invalid"))?;
        trailers.append(name, value);
    }
    buffer.advance(end + 4);
    Ok(Some(Some(trailers)))
}

impl Body for Http1Body {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = &mut *self;
        this.send_upload(cx);
        match this.framing {
            ResponseFraming::Empty | ResponseFraming::Upgrade => Poll::Ready(None),
            ResponseFraming::Length(remaining) => this
                .poll_length(cx, remaining)
                .map(|data| data.map(|data| data.map(Frame::data))),
            ResponseFraming::CloseDelimited => this
                .poll_until_close(cx)
                .map(|data| data.map(|data| data.map(Frame::data))),
            ResponseFraming::Chunked(_) => this.poll_chunked(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(
            self.framing,
            ResponseFraming::Empty
                | ResponseFraming::Upgrade
                | ResponseFraming::Length(0)
                | ResponseFraming::Chunked(ChunkState::Done)
        )
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            ResponseFraming::Empty | ResponseFraming::Upgrade => SizeHint::with_exact(0),
            ResponseFraming::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}

/// An upgraded connection reads the bytes that came after the 101 first.
impl AsyncRead for Http1Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let take = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(take));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Http1Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
mod upload;
