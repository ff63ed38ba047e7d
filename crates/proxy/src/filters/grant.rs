//! What the access phase decides: a grant (headers for the pod, cookies for the client), or a refusal (401 or 403 with the challenge, 500 when the auth service failed).

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::contract::{grpc_status, LocalAnswer};

/// Authentication refused: 401 with a challenge, or an auth service's 401 or 403, with
/// `headers` added.
pub(crate) fn auth_denied(status: StatusCode, headers: &HeaderMap) -> Box<LocalAnswer> {
    let body = if status == StatusCode::FORBIDDEN {
        "403 forbidden\n"
    } else {
        "401 authorization required\n"
    };
    LocalAnswer::text(status, body).with_headers(headers)
}

/// The 500 of an auth service that failed or did not answer in time.
pub(crate) fn auth_failed() -> Box<LocalAnswer> {
    LocalAnswer::refusal(
        StatusCode::INTERNAL_SERVER_ERROR,
        "500 internal server error\n",
        grpc_status::INTERNAL,
        "the auth service failed or did not answer in time",
    )
}

/// What a request that passed the access phase takes with it: headers for the pod (set, or
/// removed when `None`) and cookies for the client.
#[derive(Debug, Default)]
pub(crate) struct Grant {
    pub(crate) upstream_headers: Vec<(HeaderName, Option<HeaderValue>)>,
    pub(crate) cookies: Vec<HeaderValue>,
    /// The cookies go on every response, not only on successful ones.
    pub(crate) cookies_always: bool,
}

impl Grant {
    /// Puts the auth service's headers on the request to the pod.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.upstream_headers {
            match value {
                Some(value) => {
                    headers.insert(name.clone(), value.clone());
                }
                None => {
                    headers.remove(name);
                }
            }
        }
    }
}
