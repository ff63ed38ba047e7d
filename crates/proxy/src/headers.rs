//! Hop-by-hop headers at the proxy boundary: what `Connection` may remove, and what a proxy must keep or rebuild for the next hop.

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, COOKIE, HOST,
    PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

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

/// Where `name` is in [`HOP_BY_HOP`], by its text: one match on a string, where comparing
/// `HeaderName`s one by one cost about 70 instructions a header (bench/instructions).
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    let index = match name.as_str() {
        "connection" => 0,
        "keep-alive" => 1,
        "proxy-connection" => 2,
        "proxy-authenticate" => 3,
        "proxy-authorization" => 4,
        "te" => 5,
        "trailer" => 6,
        "transfer-encoding" => 7,
        "upgrade" => 8,
        _ => return None,
    };
    Some(index)
}

/// Whether a `Connection` value names nothing but hop-by-hop headers (`keep-alive`, what
/// most endpoints send): such a field nominates nothing else for removal, so a reader may
/// drop it as it reads it, where inserting it only for [`strip_hop_by_hop`] to find and
/// remove it cost about 900 instructions a response (bench/instructions).
pub(crate) fn names_only_hop_by_hop(value: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
        .all(names_hop_by_hop)
}

/// Whether a comma-separated header value (`Connection`, `TE`) lists `token`, in any case.
pub(crate) fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token))
}

/// Whether a `Connection` token names one of [`HOP_BY_HOP`], in any case.
fn names_hop_by_hop(token: &[u8]) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|name| name.as_str().as_bytes().eq_ignore_ascii_case(token))
}

/// Headers that naming them in `Connection` must not remove: the message's host and framing.
/// (The headers sluice sets itself are set after stripping, so nothing can remove them.)
const NEVER_NOMINATED: [HeaderName; 3] = [HOST, CONTENT_LENGTH, TRANSFER_ENCODING];

/// The name part of a Host header: `[::1]` of `[::1]:8080`, `a.test` of `a.test:8080`.
pub(crate) fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The client's headers for a bodiless copy of its request sent elsewhere (an auth
/// subrequest, a mirror): this hop's headers and the body's framing and `Expect` removed.
pub(crate) fn headers_for_copy(headers: &HeaderMap) -> HeaderMap {
    let mut copy = headers.clone();
    strip_hop_by_hop(&mut copy);
    for name in [
        http::header::CONTENT_LENGTH,
        http::header::TRANSFER_ENCODING,
        http::header::EXPECT,
    ] {
        copy.remove(name);
    }
    copy
}

/// Removes hop-by-hop headers and the headers `Connection` names, except Host and the
/// framing headers. A request's `TE: trailers` (which gRPC needs) is kept; any other TE value
/// belongs to this hop only.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names: most messages carry none of these, and then nothing is hashed.
    // Which ones are there is a bit per name of HOP_BY_HOP, not a list: collecting them
    // allocated for every message that had one (bench/instructions).
    let present = headers
        .keys()
        .filter_map(hop_by_hop_index)
        .fold(0u16, |present, index| present | 1 << index);
    if present == 0 {
        return;
    }
    let has =
        |name: &HeaderName| hop_by_hop_index(name).is_some_and(|index| present & 1 << index != 0);
    let wants_trailers = has(&TE)
        && headers
            .get_all(TE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|coding| {
                let name = coding.split(';').next().unwrap_or_default();
                name.trim().eq_ignore_ascii_case("trailers")
            });
    // A nominated hop-by-hop name (`Connection: keep-alive`, the usual case) goes with
    // `present` when it is there and is nothing to remove when it is not, so it is neither
    // parsed nor looked up again: that was about 450 of a response's 1,850 instructions here.
    // `close` is a connection option, and `Close` a reserved field name (RFC 9110 §18.4),
    // so it nominates nothing either.
    let nominated: Vec<HeaderName> = match has(&CONNECTION) {
        false => Vec::new(),
        true => headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|token| {
                !names_hop_by_hop(token.as_bytes()) && !token.eq_ignore_ascii_case("close")
            })
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .filter(|name| !NEVER_NOMINATED.contains(name))
            .collect(),
    };
    for name in nominated {
        headers.remove(name);
    }
    for (index, name) in HOP_BY_HOP.iter().enumerate() {
        if present & 1 << index != 0 {
            headers.remove(name);
        }
    }
    if wants_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

/// Joins an HTTP/2 request's separate `cookie` fields into one, as RFC 9113 §8.2.3 requires
/// before the request goes to an HTTP/1.1 server.
pub(crate) fn join_cookies(headers: &mut HeaderMap) {
    let mut values = headers.get_all(COOKIE).iter();
    let (Some(first), Some(_)) = (values.next(), values.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for value in headers.get_all(COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(value.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, value);
    }
}

/// The hops of every `X-Forwarded-For` field, in order.
pub(crate) fn forwarded_for(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(http::HeaderName::from_static("x-forwarded-for"))
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|hop| hop.trim().to_owned())
        .filter(|hop| !hop.is_empty())
        .collect()
}

/// The value of the cookie `name` in the request's `Cookie` headers.
pub(crate) fn request_cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"'))
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
            ("te", "gzip"),
            ("upgrade", "websocket"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn a_connection_field_of_hop_by_hop_names_nominates_nothing_else() {
        for only in [
            "keep-alive",
            "Keep-Alive",
            " keep-alive , upgrade",
            "TE",
            "",
        ] {
            assert!(names_only_hop_by_hop(only.as_bytes()), "{only:?}");
        }
        for other in ["close", "keep-alive, X-Secret", "x-secret"] {
            assert!(!names_only_hop_by_hop(other.as_bytes()), "{other:?}");
        }
    }

    #[test]
    fn the_hop_by_hop_match_is_the_list() {
        for (index, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(index), "{name}");
        }
        for name in [
            "host",
            "content-length",
            "x-te",
            "connections",
            "upgrade-insecure-requests",
        ] {
            let name = HeaderName::from_static(name);
            assert_eq!(hop_by_hop_index(&name), None, "{name}");
        }
    }

    /// Nominated names that are hop-by-hop already are removed with the rest, in any case,
    /// whether or not the message carries them.
    #[test]
    fn nominated_hop_by_hop_names_go_whatever_their_case() {
        let mut h = headers(&[
            ("connection", "Keep-Alive, UPGRADE, X-Secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn connection_cannot_remove_host_or_framing() {
        let mut h = headers(&[
            (
                "connection",
                "host, content-length, transfer-encoding, x-other",
            ),
            ("host", "shop.test"),
            ("content-length", "5"),
            ("x-other", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h["host"], "shop.test");
        assert_eq!(h["content-length"], "5");
        assert!(!h.contains_key("x-other"));
    }

    #[test]
    fn te_trailers_is_kept_even_when_connection_names_te() {
        let mut h = headers(&[("connection", "te"), ("te", "trailers, deflate;q=0.5")]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.get_all("te").iter().collect::<Vec<_>>(), ["trailers"]);
    }

    #[test]
    fn http2_cookie_fields_join_with_a_semicolon() {
        let mut h = headers(&[("cookie", "a=1"), ("cookie", "b=2"), ("cookie", "c=3")]);
        join_cookies(&mut h);
        assert_eq!(
            h.get_all("cookie").iter().collect::<Vec<_>>(),
            ["a=1; b=2; c=3"]
        );
        let mut single = headers(&[("cookie", "a=1; b=2")]);
        join_cookies(&mut single);
        assert_eq!(single["cookie"], "a=1; b=2");
    }

    #[test]
    fn reads_a_cookie_among_several() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("a=1; INGRESSCOOKIE=abc"));
        headers.append(COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(request_cookie(&headers, "INGRESSCOOKIE"), Some("abc"));
        assert_eq!(request_cookie(&headers, "b"), Some("2"));
        assert_eq!(request_cookie(&headers, "missing"), None);
    }
}
