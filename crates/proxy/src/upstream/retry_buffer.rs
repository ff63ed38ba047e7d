//! The response retry buffer: a small response that declares its length is read whole before the client sees a byte, so an endpoint that dies mid-body costs a retry instead of a truncated answer.
//!
//! Which responses are held: those of a request the retry rules could still send to another
//! endpoint, whose `Content-Length` is between 1 and the route's buffer size, and that are none
//! of the streams that must flow as they come: `text/event-stream`, gRPC, a switch of protocols,
//! and answers without a body (`HEAD`, 1xx, 204, 304). All held bytes together stay under the
//! proxy-wide cap; a response that finds the cap reached streams as any other, and
//! `sluice_response_retry_buffer_full_total` counts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING, UPGRADE};
use http::request::Parts;
use http::{HeaderMap, Method, Response, StatusCode};

/// `--response-retry-buffer`: the largest response held whole.
pub const DEFAULT_RESPONSE_RETRY_BUFFER: u64 = 64 * 1024;
/// `--response-retry-buffer-total`: the most bytes held at once, across all requests.
pub const DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL: u64 = 64 << 20;

/// The proxy-wide buffer settings and the bytes held now.
#[derive(Debug)]
pub(crate) struct RetryBuffer {
    /// The size a route without `sluice.dev/response-retry-buffer` holds up to (0: none).
    per_response: u64,
    total: u64,
    held: Arc<AtomicU64>,
}

impl RetryBuffer {
    pub(crate) fn new(per_response: u64, total: u64) -> Self {
        Self {
            per_response,
            total,
            held: Arc::default(),
        }
    }

    /// The largest response a route holds: its own setting, else the proxy's.
    pub(crate) fn limit(&self, route: Option<u64>) -> u64 {
        route.unwrap_or(self.per_response)
    }

    /// Claims `bytes` under the total cap; `None` when they do not fit.
    pub(crate) fn reserve(&self, bytes: u64) -> Option<HeldBytes> {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let after = held
                .checked_add(bytes)
                .filter(|after| *after <= self.total)?;
            match self
                .held
                .compare_exchange_weak(held, after, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(HeldBytes {
                        held: self.held.clone(),
                        bytes,
                    })
                }
                Err(now) => held = now,
            }
        }
    }

    /// Bytes held right now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Default for RetryBuffer {
    fn default() -> Self {
        Self::new(
            DEFAULT_RESPONSE_RETRY_BUFFER,
            DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL,
        )
    }
}

/// A held response's claim on the total; given back when dropped.
#[derive(Debug)]
pub(crate) struct HeldBytes {
    held: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The body length to hold `response` for, when it is a response to hold under `limit`; the
/// request side (may it be retried?) is the caller's to decide. A response that also names a
/// transfer coding is framed by it, not by its length, so it is never held.
pub(crate) fn holdable_length<B>(
    request: &Parts,
    response: &Response<B>,
    limit: u64,
) -> Option<u64> {
    if limit == 0 || request.method == Method::HEAD || request.headers.contains_key(UPGRADE) {
        return None;
    }
    let status = response.status();
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return None;
    }
    let headers = response.headers();
    if is_stream(request.headers.get(CONTENT_TYPE))
        || is_stream(headers.get(CONTENT_TYPE))
        || headers.contains_key(TRANSFER_ENCODING)
    {
        return None;
    }
    declared_length(headers).filter(|length| (1..=limit).contains(length))
}

/// `text/event-stream` and gRPC (`application/grpc`, `application/grpc+proto`, ...): streams
/// whose messages must reach the other side as they come.
pub(crate) fn is_stream(content_type: Option<&http::HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("text/event-stream")
        || essence
            .get(..16)
            .is_some_and(|start| start.eq_ignore_ascii_case("application/grpc"))
}

/// The single `Content-Length` a response declares; `None` for none, several, or one that is
/// not a number.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(CONTENT_LENGTH).iter();
    let length = values.next()?.to_str().ok()?.trim().parse().ok()?;
    values.next().is_none().then_some(length)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http::Request;

    fn request(method: Method, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder().method(method).uri("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn response(status: u16, headers: &[(&str, &str)]) -> Response<()> {
        let mut builder = Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn a_small_response_of_declared_length_is_held() {
        let get = request(Method::GET, &[]);
        let ok = response(200, &[("content-length", "100")]);
        assert_eq!(holdable_length(&get, &ok, 64 * 1024), Some(100));
        assert_eq!(holdable_length(&get, &ok, 100), Some(100));
        let error = response(503, &[("content-length", "20")]);
        assert_eq!(holdable_length(&get, &error, 100), Some(20));
    }

    #[test]
    fn streams_bodiless_answers_and_oversize_bodies_are_not_held() {
        let get = request(Method::GET, &[]);
        let cases = [
            response(200, &[]),
            response(200, &[("content-length", "0")]),
            response(200, &[("content-length", "101")]),
            response(200, &[("content-length", "10"), ("content-length", "10")]),
            response(200, &[("content-length", "ten")]),
            response(
                200,
                &[("content-length", "10"), ("transfer-encoding", "chunked")],
            ),
            response(204, &[("content-length", "10")]),
            response(304, &[("content-length", "10")]),
            response(101, &[("content-length", "10")]),
            response(
                200,
                &[
                    ("content-length", "10"),
                    ("content-type", "text/event-stream"),
                ],
            ),
            response(
                200,
                &[
                    ("content-length", "10"),
                    ("content-type", "Text/Event-Stream; charset=utf-8"),
                ],
            ),
            response(
                200,
                &[
                    ("content-length", "10"),
                    ("content-type", "application/grpc+proto"),
                ],
            ),
        ];
        for case in &cases {
            assert_eq!(holdable_length(&get, case, 100), None, "{case:?}");
        }
        let ok = response(200, &[("content-length", "10")]);
        assert_eq!(
            holdable_length(&get, &ok, 0),
            None,
            "a buffer of 0 holds nothing"
        );
        for request in [
            request(Method::HEAD, &[]),
            request(Method::GET, &[("upgrade", "websocket")]),
            request(Method::POST, &[("content-type", "application/grpc")]),
        ] {
            assert_eq!(holdable_length(&request, &ok, 100), None, "{request:?}");
        }
    }

    #[test]
    fn the_total_cap_is_shared_and_given_back() {
        let buffer = RetryBuffer::new(100, 150);
        let first = buffer.reserve(100).unwrap();
        assert!(buffer.reserve(60).is_none(), "over the total");
        let second = buffer.reserve(50).unwrap();
        assert_eq!(buffer.held(), 150);
        drop(first);
        assert_eq!(buffer.held(), 50);
        assert!(buffer.reserve(u64::MAX).is_none());
        drop(second);
        assert_eq!(buffer.held(), 0);
        assert_eq!(buffer.limit(None), 100);
        assert_eq!(buffer.limit(Some(0)), 0);
    }
}
