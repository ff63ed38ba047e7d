//! The HTTP/1.1 client against raw loopback sockets: the bytes it writes, and the responses it reads however the endpoint splits them.

use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A connection to a raw endpoint on loopback, and the endpoint's side of it.
async fn pair() -> (Http1Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let client = TcpStream::connect(address)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (server, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
    (Http1Connection::new(Stream::Plain(client)), server)
}

fn parts(method: &str, target: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = Request::builder().method(method).uri(target);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_parts()
        .0
}

/// Reads what the endpoint received until `expected_len` bytes have come.
async fn received(server: &mut TcpStream, expected_len: usize) -> String {
    let mut bytes = vec![0u8; expected_len];
    tokio::time::timeout(Duration::from_secs(5), server.read_exact(&mut bytes))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What a raw endpoint does with one request: reads `request_len` bytes of it, answers
/// `answer` in pieces of `split` bytes, and closes the connection when `close`.
struct Endpoint<'a> {
    request_len: usize,
    answer: &'a [u8],
    split: usize,
    close: bool,
}

/// What the endpoint received, the client's result, and the endpoint's socket when it stays
/// open.
type Exchanged = (
    String,
    Result<Response<Http1Body>, Http1Failure>,
    Option<TcpStream>,
);

/// Sends `head` with `body` to a raw endpoint that behaves as `endpoint` says.
async fn exchange(head: &Parts, body: UpstreamBody, endpoint: Endpoint<'_>) -> Exchanged {
    let (connection, mut server) = pair().await;
    let serve = async move {
        let got = received(&mut server, endpoint.request_len).await;
        for piece in endpoint.answer.chunks(endpoint.split.max(1)) {
            server
                .write_all(piece)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            server.flush().await.unwrap_or_else(|e| panic!("{e}"));
            tokio::task::yield_now().await;
        }
        // A closing endpoint hangs up here, while the client may still wait for more.
        (got, (!endpoint.close).then_some(server))
    };
    let ((got, server), response) = tokio::join!(serve, connection.send(head, body));
    (got, response, server)
}

fn answered(response: Result<Response<Http1Body>, Http1Failure>) -> Response<Http1Body> {
    response.unwrap_or_else(|_| panic!("the exchange failed"))
}

async fn collect(body: Http1Body) -> (Bytes, Option<HeaderMap>, Http1Body) {
    let mut body = body;
    let mut data = BytesMut::new();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap_or_else(|e| panic!("{e}"));
        match frame.into_data() {
            Ok(chunk) => data.extend_from_slice(&chunk),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    (data.freeze(), trailers, body)
}

const BARE_GET: &str = "GET / HTTP/1.1\r\n\r\n";

/// An endpoint that reads `request_len` bytes and answers `answer` in one piece.
fn answering(request_len: usize, answer: &[u8], close: bool) -> Endpoint<'_> {
    Endpoint {
        request_len,
        answer,
        split: answer.len(),
        close,
    }
}

#[tokio::test]
async fn a_get_goes_out_as_its_head_and_a_sized_answer_leaves_the_connection_reusable() {
    let head = parts("GET", "/a?b=1", &[("host", "example.com"), ("x-two", "1")]);
    let expected = "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\nx-two: 1\r\n\r\n";
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    let endpoint = answering(expected.len(), answer, false);
    let (sent, response, server) = exchange(&head, UpstreamBody::Buffered(None), endpoint).await;
    assert_eq!(sent, expected);
    let response = answered(response);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "5");
    let (data, trailers, body) = collect(response.into_body()).await;
    assert_eq!(&data[..], b"hello");
    assert!(trailers.is_none());
    let mut again = body
        .into_reusable()
        .and_then(|reusable| reusable.now().ok())
        .unwrap_or_else(|| panic!("not reusable"));
    assert!(again.is_open(), "the endpoint still holds the connection");
    drop(server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!again.is_open(), "the endpoint closed it");
}

#[tokio::test]
async fn a_buffered_body_without_a_length_gets_one_and_goes_in_the_heads_write() {
    let head = parts("POST", "/submit", &[("host", "h")]);
    let expected = "POST /submit HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\n\r\nping";
    let endpoint = answering(expected.len(), b"HTTP/1.1 204 No Content\r\n\r\n", false);
    let body = UpstreamBody::Buffered(Some(Bytes::from_static(b"ping")));
    let (sent, response, _server) = exchange(&head, body, endpoint).await;
    assert_eq!(sent, expected);
    let response = answered(response);
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response.body().is_end_stream());
    assert!(response.into_body().into_reusable().is_some());
}

#[tokio::test]
async fn a_transfer_coding_not_ending_in_chunked_gets_chunked_and_loses_its_length() {
    let head = parts(
        "PUT",
        "/x",
        &[("transfer-encoding", "gzip"), ("content-length", "3")],
    );
    let expected =
        "PUT /x HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    let body = UpstreamBody::Buffered(Some(Bytes::from_static(b"abc")));
    let (sent, response, _server) =
        exchange(&head, body, answering(expected.len(), answer, false)).await;
    assert_eq!(sent, expected);
    assert!(response.is_ok());
}

#[tokio::test]
async fn a_chunked_answer_split_anywhere_decodes_with_its_trailers_after_skipped_1xx() {
    let answer: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 Fine Thanks\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-checksum: 42\r\n\r\n";
    for split in [1usize, 2, 7, 31, 64, answer.len()] {
        let endpoint = Endpoint {
            request_len: BARE_GET.len(),
            answer,
            split,
            close: false,
        };
        let head = parts("GET", "/", &[]);
        let (_, response, _server) = exchange(&head, UpstreamBody::Buffered(None), endpoint).await;
        let response = answered(response);
        assert_eq!(response.status(), StatusCode::OK);
        let reason = response.extensions().get::<hyper::ext::ReasonPhrase>();
        assert_eq!(reason.map(|r| r.as_bytes()), Some(&b"Fine Thanks"[..]));
        let (data, trailers, body) = collect(response.into_body()).await;
        assert_eq!(
            &data[..],
            b"helloabcdefghijklmnopqrstuvwxyz",
            "split {split}"
        );
        let trailers = trailers.unwrap_or_else(|| panic!("no trailers at split {split}"));
        assert_eq!(trailers["x-checksum"], "42");
        assert!(body.into_reusable().is_some(), "split {split}");
    }
}

#[tokio::test]
async fn a_body_ended_by_close_is_read_to_the_end_and_the_connection_is_not_reused() {
    let head = parts("GET", "/", &[]);
    let endpoint = answering(
        BARE_GET.len(),
        b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
        true,
    );
    let (_, response, _) = exchange(&head, UpstreamBody::Buffered(None), endpoint).await;
    let (data, _, body) = collect(answered(response).into_body()).await;
    assert_eq!(&data[..], b"until the end");
    assert!(body.into_reusable().is_none());
}

#[tokio::test]
async fn malformed_answers_fail_and_a_silent_close_is_a_close_before_the_response() {
    let cases: [(&[u8], &str); 4] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "malformed",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "malformed",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort",
            "incomplete",
        ),
        (b"", "closed"),
    ];
    for (answer, expected) in cases {
        let head = parts("GET", "/", &[]);
        let endpoint = answering(BARE_GET.len(), answer, true);
        let (_, response, _) = exchange(&head, UpstreamBody::Buffered(None), endpoint).await;
        let error = match response {
            Err(Http1Failure::Failed(error)) => error,
            Err(Http1Failure::Unsent(_, error)) => error,
            Ok(response) => {
                let mut body = response.into_body();
                let mut failure = None;
                while let Some(frame) = body.frame().await {
                    if let Err(error) = frame {
                        failure = Some(error);
                        break;
                    }
                }
                failure.unwrap_or_else(|| panic!("{expected}: the body did not fail"))
            }
        };
        let kind = match error {
            UpstreamError::Malformed(_) | UpstreamError::Parse(_) => "malformed",
            UpstreamError::IncompleteBody => "incomplete",
            UpstreamError::ClosedBeforeResponse => "closed",
            other => panic!("unexpected {other}"),
        };
        assert_eq!(kind, expected);
    }
}

/// Content-Length read on bytes says what `str`'s parse said: one number, or several that
/// agree, and nothing for anything else; Connection tokens match in any case.
#[test]
fn content_lengths_agree_or_are_refused_and_tokens_match_in_any_case() {
    let lengths = |values: &[&str]| {
        let mut headers = HeaderMap::new();
        for value in values {
            let value = HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{value}: {e}"));
            headers.append(http::header::CONTENT_LENGTH, value);
        }
        content_length(&headers)
    };
    assert_eq!(lengths(&["0"]), Some(0));
    assert_eq!(lengths(&["42"]), Some(42));
    assert_eq!(lengths(&[" 7 , 7"]), Some(7));
    assert_eq!(lengths(&["7", "7"]), Some(7));
    assert_eq!(lengths(&["7", "8"]), None);
    assert_eq!(lengths(&["18446744073709551615"]), Some(u64::MAX));
    assert_eq!(lengths(&["18446744073709551616"]), None);
    for bad in ["", "-1", "+1", "1.0", "0x10", "1,", ",", "1 2", "١"] {
        assert_eq!(lengths(&[bad]), None, "{bad:?}");
    }
    assert_eq!(lengths(&[]), None);
    let token = |value: &'static str, token: &str| has_token(value.as_bytes(), token.as_bytes());
    assert!(token("keep-alive", "keep-alive"));
    assert!(token("Upgrade, Keep-Alive", "keep-alive"));
    assert!(token(" close ", "close"));
    assert!(!token("closed", "close"));
    assert!(!token("keep-alive", "close"));
}
