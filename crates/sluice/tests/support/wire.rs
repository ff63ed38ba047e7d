//! Raw bytes on a socket: write a request exactly as given and read exactly what comes back, for tests of malformed and hostile input.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What came back on a connection.
#[derive(Debug)]
pub struct Reply {
    /// Every byte read, as text (lossy).
    pub text: String,
    /// Whether the server closed the connection (rather than the read timing out).
    pub closed: bool,
}

impl Reply {
    /// The status code of the first response, if one came.
    pub fn status(&self) -> Option<u16> {
        let line = self.text.lines().next()?;
        line.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }

    /// The body of the first response (after the blank line).
    pub fn body(&self) -> &str {
        self.text
            .split_once("\r\n\r\n")
            .map_or("", |(_, body)| body)
    }

    /// The value of a response header of the first response (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        let head = self.text.split("\r\n\r\n").next()?;
        head.lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim())
    }
}

/// Connects, writes `request` byte for byte, and reads until the server closes the connection
/// or `wait` passes without it.
pub async fn exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect to sluice");
    stream.write_all(request).await.expect("write the request");
    read_until_closed(&mut stream, wait).await
}

/// Reads until the peer closes or `wait` passes.
pub async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> Reply {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut buffer = [0u8; 16 * 1024];
    let closed = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
            Err(_) => break false,
        }
    };
    Reply {
        text: String::from_utf8_lossy(&received).into_owned(),
        closed,
    }
}

/// Reads exactly one response with a Content-Length body from a keep-alive connection.
pub async fn read_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if let Some(length) = complete_length(&received) {
            if received.len() >= length {
                return String::from_utf8_lossy(&received[..length]).into_owned();
            }
        }
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("a response within 10 s")
            .expect("read the response");
        assert!(read > 0, "closed before a whole response: {received:?}");
        received.extend_from_slice(&buffer[..read]);
    }
}

/// The length of the response at the start of `bytes` once its head is complete.
fn complete_length(bytes: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(bytes);
    let (head, _) = text.split_once("\r\n\r\n")?;
    let body = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    Some(head.len() + 4 + body)
}
