//! Traefik's `errors` middleware: an answer whose status it catches is replaced by a page from another Service, asked with `GET` on the client's Host, under the caught (or rewritten) status.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version};
use sluice_routing::middleware::ErrorPage;
use sluice_routing::{RoutePolicy, RoutingTable};

use super::ChainRequest;
use crate::upstream::attempt::{Answer, AttemptSettings, Exchange};
use crate::upstream::connect::Wire;
use crate::upstream::request_body::RequestBody;

/// One `errors` middleware.
pub(crate) struct ErrorPages(pub(super) Arc<ErrorPage>);

/// The request as the `errors` middleware saw it: what its page request is made of.
pub(crate) struct ErrorPageCapture {
    host: HeaderValue,
    headers: HeaderMap,
    /// `scheme://host/path?query`, for `{url}`.
    url: String,
    version: Version,
}

impl ErrorPages {
    pub(super) fn capture(&self, request: &ChainRequest<'_, '_>) -> ErrorPageCapture {
        let mut headers = match &self.0.request_headers {
            None => request.upstream.headers.clone(),
            Some(names) => {
                let mut kept = HeaderMap::new();
                for name in names {
                    let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                        continue;
                    };
                    for value in request.upstream.headers.get_all(&name) {
                        kept.append(name.clone(), value.clone());
                    }
                }
                kept
            }
        };
        headers.remove(CONTENT_LENGTH);
        headers.remove(TRANSFER_ENCODING);
        let scheme = if request.context.connection.over_tls {
            "https"
        } else {
            "http"
        };
        ErrorPageCapture {
            host: request.context.host.clone(),
            headers,
            url: format!("{scheme}://{}{}", request.host(), request.request_uri()),
            version: request.upstream.version,
        }
    }

    /// Whether an answer of `status` gets this middleware's page.
    pub(crate) fn catches(&self, status: StatusCode) -> bool {
        self.0.catches(status.as_u16())
    }

    /// The page for an answer of `status`: the error Service's headers and body under the
    /// caught (or rewritten) status. `None` when the Service does not answer: the answer
    /// stands.
    pub(crate) async fn ask(
        &self,
        capture: &ErrorPageCapture,
        status: StatusCode,
        (table, policy): (&RoutingTable, &RoutePolicy),
        settings: AttemptSettings<'_>,
        client: std::net::IpAddr,
    ) -> Option<Answer> {
        let page = &self.0;
        let backend = table.backend_by_id(&page.backend)?;
        let code = page.status_for(status.as_u16());
        let query = page
            .query
            .replace("{status}", &code.to_string())
            .replace("{originalStatus}", &status.as_u16().to_string())
            .replace("{url}", &query_escape(&capture.url));
        let uri = Uri::try_from(query).ok()?;
        let mut request = Request::new(());
        *request.method_mut() = Method::GET;
        *request.uri_mut() = uri;
        *request.version_mut() = capture.version;
        *request.headers_mut() = capture.headers.clone();
        request.headers_mut().insert(HOST, capture.host.clone());
        let (parts, ()) = request.into_parts();
        let body = RequestBody::Replayable(Bytes::new());
        let attempted = Exchange::new(settings, backend, policy, parts, body, client, None)
            .over(Wire::Http1)
            .run()
            .await;
        let mut answer = attempted.result.ok()?;
        *answer.response.status_mut() = StatusCode::from_u16(code).unwrap_or(status);
        Some(answer)
    }
}

/// Go's `url.QueryEscape`: everything but letters, digits and `-_.~` percent-encoded, and a
/// space as `+`.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_query_escaped_as_go_does() {
        assert_eq!(
            query_escape("http://a.test/x y?q=1"),
            "http%3A%2F%2Fa.test%2Fx+y%3Fq%3D1"
        );
    }
}
