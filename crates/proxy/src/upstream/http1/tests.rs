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

#[tokio::test]
async fn a_get_goes_out_as_its_head_and_a_sized_answer_leaves_the_connection_reusable() {
    let (connection, mut server) = pair().await;
    let head = parts("GET", "/a?b=1", &[("host", "example.com"), ("x-two", "1")]);
    let expected = "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\nx-two: 1\r\n\r\n";
    let endpoint = async {
        let got = received(&mut server, expected.len()).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        got
    };
    let (sent, response) = tokio::join!(
        endpoint,
        connection.send(&head, UpstreamBody::Buffered(None))
    );
    assert_eq!(sent, expected);
    let response = response.unwrap_or_else(|_| panic!("the exchange failed"));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "5");
    let (data, trailers, body) = collect(response.into_body()).await;
    assert_eq!(&data[..], b"hello");
    assert!(trailers.is_none());
    let mut again = body
        .into_reusable()
        .unwrap_or_else(|| panic!("not reusable"));
    assert!(again.is_open(), "the endpoint still holds the connection");
    drop(server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!again.is_open(), "the endpoint closed it");
}

#[tokio::test]
async fn a_buffered_body_without_a_length_gets_one_and_goes_in_the_heads_write() {
    let (connection, mut server) = pair().await;
    let head = parts("POST", "/submit", &[("host", "h")]);
    let expected = "POST /submit HTTP/1.1\r\nhost: h\r\ncontent-length: 4\r\n\r\nping";
    let endpoint = async {
        let got = received(&mut server, expected.len()).await;
        server
            .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        got
    };
    let body = UpstreamBody::Buffered(Some(Bytes::from_static(b"ping")));
    let (sent, response) = tokio::join!(endpoint, connection.send(&head, body));
    assert_eq!(sent, expected);
    let response = response.unwrap_or_else(|_| panic!("the exchange failed"));
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(response.body().is_end_stream());
    assert!(response.into_body().into_reusable().is_some());
}

#[tokio::test]
async fn a_transfer_coding_not_ending_in_chunked_gets_chunked_and_loses_its_length() {
    let (connection, mut server) = pair().await;
    let head = parts(
        "PUT",
        "/x",
        &[("transfer-encoding", "gzip"), ("content-length", "3")],
    );
    let expected =
        "PUT /x HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let endpoint = async {
        let got = received(&mut server, expected.len()).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        got
    };
    let body = UpstreamBody::Buffered(Some(Bytes::from_static(b"abc")));
    let (sent, response) = tokio::join!(endpoint, connection.send(&head, body));
    assert_eq!(sent, expected);
    assert!(response.is_ok());
}

#[tokio::test]
async fn a_chunked_answer_split_anywhere_decodes_with_its_trailers_after_skipped_1xx() {
    let answer: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 Fine Thanks\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-checksum: 42\r\n\r\n";
    for split in [1usize, 2, 7, 31, 64, answer.len()] {
        let (connection, mut server) = pair().await;
        let head = parts("GET", "/", &[]);
        let endpoint = async {
            let _ = received(&mut server, "GET / HTTP/1.1\r\n\r\n".len()).await;
            for piece in answer.chunks(split) {
                server
                    .write_all(piece)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                server.flush().await.unwrap_or_else(|e| panic!("{e}"));
                tokio::task::yield_now().await;
            }
        };
        let client = async {
            let response = connection
                .send(&head, UpstreamBody::Buffered(None))
                .await
                .unwrap_or_else(|_| panic!("the exchange failed"));
            assert_eq!(response.status(), StatusCode::OK);
            let reason = response.extensions().get::<hyper::ext::ReasonPhrase>();
            assert_eq!(reason.map(|r| r.as_bytes()), Some(&b"Fine Thanks"[..]));
            collect(response.into_body()).await
        };
        let ((data, trailers, body), ()) = tokio::join!(client, endpoint);
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
    let (connection, mut server) = pair().await;
    let head = parts("GET", "/", &[]);
    let endpoint = async {
        let _ = received(&mut server, "GET / HTTP/1.1\r\n\r\n".len()).await;
        server
            .write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(server);
    };
    let (response, ()) = tokio::join!(
        connection.send(&head, UpstreamBody::Buffered(None)),
        endpoint
    );
    let response = response.unwrap_or_else(|_| panic!("the exchange failed"));
    let (data, _, body) = collect(response.into_body()).await;
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
        let (connection, mut server) = pair().await;
        let head = parts("GET", "/", &[]);
        let endpoint = async {
            let _ = received(&mut server, "GET / HTTP/1.1\r\n\r\n".len()).await;
            server
                .write_all(answer)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            drop(server);
        };
        let (response, ()) = tokio::join!(
            connection.send(&head, UpstreamBody::Buffered(None)),
            endpoint
        );
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
