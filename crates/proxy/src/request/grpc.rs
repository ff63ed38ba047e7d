//! gRPC at the edge: a call sluice fails itself gets a trailers-only answer with the right `grpc-status`, never an HTML body, and the client's `grpc-timeout` bounds the upstream call.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::error::ProxyError;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// gRPC status codes sluice answers with.
const DEADLINE_EXCEEDED: u8 = 4;
const RESOURCE_EXHAUSTED: u8 = 8;
const UNIMPLEMENTED: u8 = 12;
const UNAUTHENTICATED: u8 = 16;
const INTERNAL: u8 = 13;
const UNAVAILABLE: u8 = 14;

/// Whether a request is a gRPC call (`content-type: application/grpc`, `+proto` and the like).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The client's deadline from `grpc-timeout` (an integer of at most 8 digits and a unit:
/// `H`, `M`, `S`, `m`, `u` or `n`), if it sent a valid one.
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(amount * 3600),
        'M' => Duration::from_secs(amount * 60),
        'S' => Duration::from_secs(amount),
        'm' => Duration::from_millis(amount),
        'u' => Duration::from_micros(amount),
        'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

pin_project_lite::pin_project! {
    /// `future`, ended with [`ProxyError::ResponseTimeout`] once the client's deadline passes.
    ///
    /// One future whether or not the call has a deadline: matching on the deadline and
    /// awaiting the exchange in each branch made rustc lay the exchange out twice, so the
    /// request's future was 12,280 bytes rather than 6,592 (measured on a release build),
    /// and all of it is copied into its box as the request starts.
    pub(crate) struct Within<F> {
        #[pin]
        future: F,
        #[pin]
        deadline: Option<tokio::time::Sleep>,
    }
}

/// `future` bounded by `deadline`, when the call has one.
pub(crate) fn within<F: Future>(deadline: Option<Duration>, future: F) -> Within<F> {
    Within {
        future,
        deadline: deadline.map(tokio::time::sleep),
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Result<F::Output, ProxyError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match this.deadline.as_pin_mut() {
            Some(deadline) => {
                ready!(deadline.poll(cx));
                Poll::Ready(Err(ProxyError::ResponseTimeout))
            }
            None => Poll::Pending,
        }
    }
}

/// The gRPC status for a call the proxy failed.
fn status_of(error: &ProxyError) -> u8 {
    match error {
        ProxyError::NoRoute => UNIMPLEMENTED,
        ProxyError::ClientCertificate { .. } => UNAUTHENTICATED,
        ProxyError::InvalidBackendRef => INTERNAL,
        ProxyError::ResponseTimeout | ProxyError::UploadStalled | ProxyError::ClientBodyTimeout => {
            DEADLINE_EXCEEDED
        }
        ProxyError::BodyTooLarge => RESOURCE_EXHAUSTED,
        ProxyError::BadRequest(_) | ProxyError::BadPath(_) | ProxyError::MethodNotAllowed => {
            INTERNAL
        }
        ProxyError::NoEndpoints
        | ProxyError::ConnectFailed(_)
        | ProxyError::UpstreamFailed(_)
        | ProxyError::UpstreamUnavailable(_)
        | ProxyError::ResponseCut(_)
        | ProxyError::ConnectTimeout
        | ProxyError::Misdirected => UNAVAILABLE,
    }
}

/// A trailers-only response (HTTP 200, the status in the headers, no body) for `error`.
pub(crate) fn error_response<B>(error: &ProxyError, empty: B) -> Response<B> {
    let message = error.to_string();
    refusal(status_of(error), &message, empty)
}

/// A trailers-only response with gRPC status `status` and `message`.
pub(crate) fn refusal<B>(status: u8, message: &str, empty: B) -> Response<B> {
    let mut response = Response::new(empty);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(u16::from(status)));
    if let Ok(message) = HeaderValue::try_from(message) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            GRPC_TIMEOUT,
            HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
        );
        headers
    }

    #[test]
    fn grpc_timeouts_follow_the_wire_format() {
        assert_eq!(timeout(&headers("100m")), Some(Duration::from_millis(100)));
        assert_eq!(timeout(&headers("2S")), Some(Duration::from_secs(2)));
        assert_eq!(timeout(&headers("1H")), Some(Duration::from_secs(3600)));
        assert_eq!(timeout(&headers("5000u")), Some(Duration::from_millis(5)));
        assert_eq!(timeout(&headers("123456789m")), None, "at most 8 digits");
        assert_eq!(timeout(&headers("10x")), None);
        assert_eq!(timeout(&headers("m")), None);
        assert_eq!(timeout(&HeaderMap::new()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_ends_the_call_and_no_deadline_waits() {
        let slow = tokio::time::sleep(Duration::from_secs(5));
        let ended = within(Some(Duration::from_millis(100)), slow).await;
        assert!(
            matches!(ended, Err(ProxyError::ResponseTimeout)),
            "{ended:?}"
        );
        let quick = async { 7 };
        assert_eq!(
            within(Some(Duration::from_secs(1)), quick).await.ok(),
            Some(7)
        );
        let started = tokio::time::Instant::now();
        let unbounded = within(None, tokio::time::sleep(Duration::from_secs(30))).await;
        assert!(unbounded.is_ok());
        assert!(started.elapsed() >= Duration::from_secs(30));
    }

    #[test]
    fn failures_map_to_the_statuses_clients_retry_on() {
        assert_eq!(status_of(&ProxyError::NoEndpoints), UNAVAILABLE);
        assert_eq!(status_of(&ProxyError::ResponseTimeout), DEADLINE_EXCEEDED);
        assert_eq!(status_of(&ProxyError::NoRoute), UNIMPLEMENTED);
        let response = error_response(&ProxyError::NoEndpoints, ());
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "14");
        assert_eq!(response.headers()["content-type"], "application/grpc");
    }
}
