//! A scan of the HTTP/1.1 bytes a client sends, beside hyper's parser: it finds where each message ends and refuses the heads hyper would let through.
//!
//! hyper (with httparse) already refuses obs-fold, whitespace before a colon, a CR or NUL in a
//! header value, differing Content-Lengths, a Transfer-Encoding that does not end in
//! `chunked`, and every chunked framing error. It accepts two things a proxy must not: a bare
//! LF as a line end (so `X-A: 1\nX-B: 2` becomes two headers here and one at a backend that
//! reads lines differently), and a message with both Content-Length and Transfer-Encoding
//! (RFC 9112 §6.1 lets a server refuse it; a proxy that forwards it invites request
//! smuggling). The scanner sees the same bytes first, judges each head, and tracks body
//! framing to find the next head. It checks the rest too, so the rules do not depend on
//! hyper's version.

use memchr::{memchr, memchr2_iter, memchr_iter};

/// Why a request head is refused with 400.
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
    /// Both Content-Length and Transfer-Encoding.
    LengthAndTransferEncoding,
    /// Content-Length values that are not one non-negative number.
    BadContentLength,
    /// A Transfer-Encoding whose last coding is not `chunked`, or one on an HTTP/1.0 request.
    BadTransferEncoding,
    /// The head is longer than the limit (`--max-header-bytes`): 431, not 400.
    TooLarge,
}

impl HeadProblem {
    /// A short reason for the log.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::BareLineBreak => "bare CR or LF in the request head",
            Self::Nul => "NUL in the request head",
            Self::ObsFold => "obsolete line folding",
            Self::MalformedHeader => "malformed header line",
            Self::LengthAndTransferEncoding => "both Content-Length and Transfer-Encoding",
            Self::BadContentLength => "invalid or differing Content-Length",
            Self::BadTransferEncoding => "Transfer-Encoding does not end in chunked",
            Self::TooLarge => "request head too large",
        }
    }

    /// The status the refusal answers with.
    pub(crate) fn status(self) -> http::StatusCode {
        match self {
            Self::TooLarge => http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}

/// What a scan found, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The first byte of a request head arrived.
    HeadStarted,
    /// A request head ended; `Err` when it must be refused.
    HeadComplete(Result<(), HeadProblem>),
}

/// A framing error inside a chunked body: the connection's read fails there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkError;

/// Where in the scanned bytes a chunked body broke: the bytes before it are good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BrokenAt(pub(crate) usize);

const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0";
/// Hex digits a chunk size may have (sizes up to 2^64 - 1).
const MAX_SIZE_DIGITS: u8 = 16;

/// Where in the byte stream the scanner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between messages: empty lines are skipped, anything else starts a head.
    BetweenMessages,
    /// Inside a head, collecting its bytes.
    Head,
    /// Inside a body of known length: this many bytes are left.
    Body(u64),
    Chunked(Chunk),
    /// No more HTTP/1 framing to follow: an HTTP/2 connection, or a refused head (the
    /// connection closes after the answer).
    Passthrough,
}

/// Chunked framing (RFC 9112 §7.1), one state per place a byte can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
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
    Data(u64),
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
}

/// Scans one connection's bytes.
#[derive(Debug)]
pub(crate) struct MessageScanner {
    state: State,
    head: Vec<u8>,
    /// Where the current line of the head starts.
    line_start: usize,
    max_head: usize,
}

impl MessageScanner {
    /// A scanner that refuses heads over `max_head` bytes.
    pub(crate) fn new(max_head: usize) -> Self {
        Self {
            state: State::BetweenMessages,
            head: Vec::new(),
            line_start: 0,
            max_head,
        }
    }

    /// Whether the scanner waits for the next message's head, with none of it seen.
    pub(crate) fn is_between_messages(&self) -> bool {
        self.state == State::BetweenMessages
    }

    /// Frees the memory kept for heads that arrive in pieces (a parked connection).
    pub(crate) fn release(&mut self) {
        self.head = Vec::new();
    }

    /// Scans bytes just read, reporting head events to `on_event`. A chunked-body framing
    /// error says at which byte it is.
    pub(crate) fn scan(
        &mut self,
        bytes: &[u8],
        on_event: &mut impl FnMut(Event),
    ) -> Result<(), BrokenAt> {
        let mut offset = 0;
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            let used = match self.state {
                State::Passthrough => rest.len(),
                State::BetweenMessages => self.between_messages(rest, on_event),
                State::Head => self.head_bytes(rest, on_event),
                State::Body(left) => {
                    let used = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    let left = left - used as u64;
                    self.state = if left == 0 {
                        State::BetweenMessages
                    } else {
                        State::Body(left)
                    };
                    used
                }
                State::Chunked(chunk) => self
                    .chunked(chunk, rest)
                    .map_err(|ChunkError| BrokenAt(offset))?,
            };
            offset += used;
        }
        Ok(())
    }

    fn between_messages(&mut self, bytes: &[u8], on_event: &mut impl FnMut(Event)) -> usize {
        match bytes.iter().position(|&b| b != b'\r' && b != b'\n') {
            Some(start) => {
                self.state = State::Head;
                self.head.clear();
                self.line_start = 0;
                on_event(Event::HeadStarted);
                start
            }
            None => bytes.len(),
        }
    }

    /// Collects head bytes up to the blank line; returns how many bytes belonged to the head.
    fn head_bytes(&mut self, bytes: &[u8], on_event: &mut impl FnMut(Event)) -> usize {
        let end = self.end_of_head(bytes);
        let used = end.unwrap_or(bytes.len());
        if self.head.len() + used > self.max_head {
            self.state = State::Passthrough;
            self.head = Vec::new();
            on_event(Event::HeadComplete(Err(HeadProblem::TooLarge)));
            return used;
        }
        if end.is_none() {
            self.head.extend_from_slice(bytes);
            return used;
        }
        // A head that arrived in one read is judged where it lies, without a copy.
        let judged = if self.head.is_empty() {
            judge_head(&bytes[..used])
        } else {
            self.head.extend_from_slice(&bytes[..used]);
            judge_head(&self.head)
        };
        self.head.clear();
        match judged {
            Judged::Request(next) => {
                self.state = next;
                on_event(Event::HeadComplete(Ok(())));
            }
            Judged::Http2 => self.state = State::Passthrough,
            Judged::Refused(problem) => {
                self.state = State::Passthrough;
                on_event(Event::HeadComplete(Err(problem)));
            }
        }
        used
    }

    /// How many of `bytes` complete the head, when they hold the line break that ends it: an
    /// empty line, `\r\n` or (refused later) a bare `\n`.
    fn end_of_head(&mut self, bytes: &[u8]) -> Option<usize> {
        let collected = self.head.len();
        for index in memchr_iter(b'\n', bytes) {
            let position = collected + index;
            let line = position - self.line_start;
            let before = match index {
                0 => self.head.last().copied(),
                _ => Some(bytes[index - 1]),
            };
            if line == 0 || (line == 1 && before == Some(b'\r')) {
                self.line_start = 0;
                return Some(index + 1);
            }
            self.line_start = position + 1;
        }
        None
    }

    /// One step of chunked framing; returns how many bytes it used.
    fn chunked(&mut self, chunk: Chunk, bytes: &[u8]) -> Result<usize, ChunkError> {
        if let Chunk::Data(left) = chunk {
            let used = usize::try_from(left).map_or(bytes.len(), |l| l.min(bytes.len()));
            let left = left - used as u64;
            self.state = State::Chunked(if left == 0 {
                Chunk::DataCr
            } else {
                Chunk::Data(left)
            });
            return Ok(used);
        }
        self.state = match next_chunk_state(chunk, bytes[0])? {
            Some(next) => State::Chunked(next),
            None => State::BetweenMessages,
        };
        Ok(1)
    }
}

/// What a complete head means for the connection.
enum Judged {
    /// A request to answer, followed by this framing state.
    Request(State),
    /// The HTTP/2 connection preface: nothing more to scan.
    Http2,
    Refused(HeadProblem),
}

/// Judges a complete head and says what follows it.
fn judge_head(head: &[u8]) -> Judged {
    if head.contains(&0) {
        return Judged::Refused(HeadProblem::Nul);
    }
    if has_bare_line_break(head) {
        return Judged::Refused(HeadProblem::BareLineBreak);
    }
    let mut lines = lines(head).map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let request_line = lines.next().unwrap_or_default();
    if request_line == H2_PREFACE_LINE {
        return Judged::Http2;
    }
    let http10 = request_line.ends_with(b"HTTP/1.0");
    let mut framing = Framing::default();
    let judged = lines
        .take_while(|line| !line.is_empty())
        .try_for_each(|line| framing.add(header_line(line)?))
        .and_then(|()| framing.body(http10));
    match judged {
        Ok(next) => Judged::Request(next),
        Err(problem) => Judged::Refused(problem),
    }
}

/// The head split at each LF, as `split` would: memchr finds the line ends, where a
/// closure per byte cost about 4 instructions a byte (bench/instructions).
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let text = rest?;
        match memchr(b'\n', text) {
            Some(end) => {
                rest = Some(&text[end + 1..]);
                Some(&text[..end])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

/// Whether some LF lacks its CR, or some CR lacks its LF.
fn has_bare_line_break(head: &[u8]) -> bool {
    memchr2_iter(b'\r', b'\n', head).any(|index| match head[index] {
        b'\n' => index == 0 || head[index - 1] != b'\r',
        _ => head.get(index + 1) != Some(&b'\n'),
    })
}

/// A header line's name and value, or why it is refused.
fn header_line(line: &[u8]) -> Result<(&[u8], &[u8]), HeadProblem> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(HeadProblem::ObsFold);
    }
    let colon = memchr(b':', line).ok_or(HeadProblem::MalformedHeader)?;
    let name = &line[..colon];
    let well_formed = !name.is_empty() && name.iter().all(|&b| is_token_byte(b));
    if !well_formed {
        return Err(HeadProblem::MalformedHeader);
    }
    Ok((name, line[colon + 1..].trim_ascii()))
}

/// RFC 9110 `tchar`, by table.
fn is_token_byte(byte: u8) -> bool {
    TOKEN_BYTES[usize::from(byte)]
}

const TOKEN_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut index = 0;
    while index < 256 {
        let byte = index as u8;
        table[index] = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        index += 1;
    }
    table
};

/// The framing headers of one head.
#[derive(Debug, Default)]
struct Framing {
    length: Option<u64>,
    /// The last coding of the last Transfer-Encoding line.
    last_coding: Option<Vec<u8>>,
}

impl Framing {
    fn add(&mut self, (name, value): (&[u8], &[u8])) -> Result<(), HeadProblem> {
        if name.eq_ignore_ascii_case(b"content-length") {
            for part in value.split(|&b| b == b',') {
                let length =
                    parse_length(part.trim_ascii()).ok_or(HeadProblem::BadContentLength)?;
                if self.length.is_some_and(|known| known != length) {
                    return Err(HeadProblem::BadContentLength);
                }
                self.length = Some(length);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            self.last_coding = Some(last.trim_ascii().to_ascii_lowercase());
        }
        Ok(())
    }

    /// What follows the head: a body of known length, a chunked body, or the next message.
    fn body(self, http10: bool) -> Result<State, HeadProblem> {
        match (self.length, self.last_coding) {
            (Some(_), Some(_)) => Err(HeadProblem::LengthAndTransferEncoding),
            (None, Some(_)) if http10 => Err(HeadProblem::BadTransferEncoding),
            (None, Some(coding)) if coding == b"chunked" => Ok(State::Chunked(Chunk::Size {
                value: 0,
                digits: 0,
            })),
            (None, Some(_)) => Err(HeadProblem::BadTransferEncoding),
            (Some(length), None) if length > 0 => Ok(State::Body(length)),
            _ => Ok(State::BetweenMessages),
        }
    }
}

fn parse_length(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The state after `byte` in chunked framing; `None` when the message ended.
fn next_chunk_state(chunk: Chunk, byte: u8) -> Result<Option<Chunk>, ChunkError> {
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
        (Chunk::DataLf, b'\n') => Chunk::Size {
            value: 0,
            digits: 0,
        },
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

    /// Scans `input` in pieces of `step` bytes; returns the events, or where a chunked body
    /// broke (counted from the start of `input`).
    fn scan_in_steps(input: &[u8], step: usize) -> Result<Vec<Event>, usize> {
        let mut scanner = MessageScanner::new(64 * 1024);
        let mut events = Vec::new();
        for (index, piece) in input.chunks(step).enumerate() {
            scanner
                .scan(piece, &mut |event| events.push(event))
                .map_err(|BrokenAt(at)| index * step + at)?;
        }
        Ok(events)
    }

    fn verdicts(input: &str) -> Vec<Result<(), HeadProblem>> {
        let mut all = None;
        for step in [1, 2, 7, input.len().max(1)] {
            let events = scan_in_steps(input.as_bytes(), step).expect("no chunk error");
            let found: Vec<_> = events
                .into_iter()
                .filter_map(|event| match event {
                    Event::HeadComplete(verdict) => Some(verdict),
                    Event::HeadStarted => None,
                })
                .collect();
            if let Some(previous) = &all {
                assert_eq!(previous, &found, "step {step} differs for {input:?}");
            }
            all = Some(found);
        }
        all.unwrap_or_default()
    }

    /// The memchr line splitter and the token table say what `split` and the RFC's list say.
    #[test]
    fn lines_split_as_split_does_and_the_token_table_is_tchar() {
        for head in [
            &b""[..],
            b"\n",
            b"GET / HTTP/1.1",
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"a\n\nb\n",
            b"\n\n\n",
        ] {
            let expected: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
            assert_eq!(lines(head).collect::<Vec<_>>(), expected, "{head:?}");
        }
        for byte in 0..=u8::MAX {
            let tchar = byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte);
            assert_eq!(is_token_byte(byte), tchar, "byte {byte}");
        }
    }

    #[test]
    fn pipelined_messages_are_found_through_their_bodies() {
        let input = "GET / HTTP/1.1\r\nHost: a\r\n\r\n\
                     POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello\
                     POST /y HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
                     5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n\
                     \r\nGET /z HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(verdicts(input), vec![Ok(()); 4]);
    }

    #[test]
    fn a_body_that_looks_like_a_head_is_not_judged() {
        let body = "GET /smuggled HTTP/1.1\nHost: b\n\n";
        let input = format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(verdicts(&input), vec![Ok(())]);
    }

    #[test]
    fn heads_hyper_would_accept_but_a_proxy_must_refuse() {
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
            assert_eq!(verdicts(head), vec![Err(problem)], "{head:?}");
        }
    }

    #[test]
    fn heads_hyper_refuses_are_refused_here_too() {
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
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                HeadProblem::BadContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
                HeadProblem::BadContentLength,
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                HeadProblem::BadTransferEncoding,
            ),
            (
                "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadProblem::BadTransferEncoding,
            ),
        ];
        for (head, problem) in cases {
            assert_eq!(verdicts(head), vec![Err(problem)], "{head:?}");
        }
    }

    #[test]
    fn equal_content_lengths_are_one_length() {
        let input = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(verdicts(input), vec![Ok(()), Ok(())]);
    }

    #[test]
    fn chunked_framing_errors_are_found_at_the_byte_that_breaks_them() {
        let head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        // Each body with the offset of the byte that breaks it.
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
            let input = format!("{head}{body}");
            for step in [1, 3, input.len()] {
                assert_eq!(
                    scan_in_steps(input.as_bytes(), step),
                    Err(head.len() + broken),
                    "{body:?} in steps of {step}"
                );
            }
        }
    }

    #[test]
    fn an_http2_connection_is_left_alone() {
        let preface =
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00\n\nGET";
        let events = scan_in_steps(preface, 5).expect("no chunk error");
        assert_eq!(events, vec![Event::HeadStarted]);
    }

    #[test]
    fn a_head_over_the_limit_is_refused_before_it_ends() {
        let mut scanner = MessageScanner::new(32);
        let mut events = Vec::new();
        let long = format!("GET / HTTP/1.1\r\nX-Long: {}", "a".repeat(40));
        scanner
            .scan(long.as_bytes(), &mut |event| events.push(event))
            .expect("no chunk error");
        assert_eq!(
            events,
            vec![
                Event::HeadStarted,
                Event::HeadComplete(Err(HeadProblem::TooLarge))
            ]
        );
    }

    #[test]
    fn a_head_starts_at_its_first_byte() {
        let mut scanner = MessageScanner::new(1024);
        let mut events = Vec::new();
        scanner
            .scan(b"\r\n", &mut |event| events.push(event))
            .expect("no chunk error");
        assert!(
            events.is_empty(),
            "empty lines between messages start nothing"
        );
        scanner
            .scan(b"G", &mut |event| events.push(event))
            .expect("no chunk error");
        assert_eq!(events, vec![Event::HeadStarted]);
    }
}
