//! Header rewriting at the proxy boundary: hop-by-hop stripping and the X-Forwarded-* set.

use std::net::IpAddr;

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION,
    TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one hop, never the message (RFC 9110 §7.6.1, plus the common legacy ones).
const HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Removes hop-by-hop headers and every header the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Appends the client to X-Forwarded-For and sets X-Forwarded-Proto and X-Forwarded-Host.
pub(crate) fn set_forwarded(headers: &mut HeaderMap, client: IpAddr, host: Option<HeaderValue>) {
    let forwarded_for = match joined(headers, &X_FORWARDED_FOR) {
        Some(previous) => format!("{previous}, {client}"),
        None => client.to_string(),
    };
    if let Ok(value) = HeaderValue::try_from(forwarded_for) {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    match host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST, host);
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
}

/// All values of a header joined with ", ", as a list header's fields combine.
fn joined(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut values = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let first = values.next()?;
    Some(values.fold(first.to_owned(), |mut all, next| {
        all.push_str(", ");
        all.push_str(next);
        all
    }))
}

/// Ensures the upstream sees a Host header: HTTP/2 and absolute-form requests carry the host
/// in the URI authority instead.
pub(crate) fn ensure_host(headers: &mut HeaderMap, authority: Option<&http::uri::Authority>) {
    if let Some(authority) = authority {
        if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
            headers.insert(HOST, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = headers(&[
            ("connection", "close, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn appends_to_every_x_forwarded_for_value() {
        let mut h = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
        ]);
        set_forwarded(
            &mut h,
            "127.0.0.9".parse().unwrap(),
            Some(HeaderValue::from_static("shop.test")),
        );
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 127.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "shop.test");
    }

    #[test]
    fn sets_x_forwarded_for_when_absent() {
        let mut h = HeaderMap::new();
        set_forwarded(&mut h, "::1".parse().unwrap(), None);
        assert_eq!(h["x-forwarded-for"], "::1");
        assert!(!h.contains_key("x-forwarded-host"));
    }
}
