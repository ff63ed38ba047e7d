//! The proxy's own answers and its failures as responses: a local answer as it was made (a refusal as a trailers-only answer to a gRPC caller), a failure as its status and short text, or as `grpc-status` to a gRPC caller.

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE};
use http::{HeaderValue, Response};
use http_body_util::{Either, Full};

use super::{grpc, Stop};
use crate::error::ProxyError;
use crate::filters::contract::LocalAnswer;
use crate::upstream::response_body::ProxyBody;

/// The response for a request that stopped: answered by the proxy, or failed. `grpc_call`:
/// the client is a gRPC caller.
pub(crate) fn stopped(stop: Stop, grpc_call: bool) -> Response<ProxyBody> {
    match stop {
        Stop::Answer(answer) => local(*answer, grpc_call),
        Stop::Fail(error) => failure(&error, grpc_call),
    }
}

fn empty() -> ProxyBody {
    Either::Right(Full::new(Bytes::new()))
}

/// A local answer; a refusal is a gRPC caller's trailers-only answer with its gRPC status.
fn local(answer: LocalAnswer, grpc_call: bool) -> Response<ProxyBody> {
    if let (true, Some((status, message))) = (grpc_call, answer.grpc) {
        return grpc::refusal(status, message, empty());
    }
    let mut response = Response::new(Either::Right(Full::new(answer.body)));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    response
}

/// A failure: its status and short text, or for a gRPC caller its `grpc-status`.
fn failure(error: &ProxyError, grpc_call: bool) -> Response<ProxyBody> {
    if grpc_call {
        return grpc::error_response(error, empty());
    }
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        error.body().as_bytes(),
    ))));
    *response.status_mut() = error.status();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if error.closes_connection() {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
