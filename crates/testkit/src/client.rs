//! HTTP clients for tests: pooled HTTP/1.1 or h2c (prior knowledge), and a one-call GET.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::body::PatternBody;

/// A request body for test clients: small and whole, or generated and streamed.
pub type TestBody = Either<Full<Bytes>, PatternBody>;

/// Pooled keep-alive HTTP/1.1 client.
pub fn http_client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// HTTP/2 over cleartext with prior knowledge.
pub fn h2c_client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new())
}

/// Sends one request over a new HTTP/2 connection (prior knowledge) to `addr`, whatever host
/// the request's URI names: the URI becomes `:authority` and `:path` as written.
pub async fn h2_send(
    addr: std::net::SocketAddr,
    request: Request<TestBody>,
) -> Result<http::Response<hyper::body::Incoming>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await?;
    tokio::spawn(connection);
    Ok(sender.send_request(request).await?)
}

/// A whole response, read into memory (for small bodies).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

/// Sends `method url` with the given Host header, extra headers and body, and reads the whole
/// answer.
pub async fn send(
    client: &Client<HttpConnector, TestBody>,
    method: http::Method,
    url: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Either::Left(Full::new(body)))?)
        .await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// GETs `url` with the given Host header and reads the whole answer.
pub async fn get(
    client: &Client<HttpConnector, TestBody>,
    url: &str,
    host: &str,
) -> Result<Reply, Box<dyn std::error::Error + Send + Sync>> {
    send(client, http::Method::GET, url, host, &[], Bytes::new()).await
}
