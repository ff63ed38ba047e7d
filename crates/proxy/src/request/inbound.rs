//! What a client asked for, read once before routing: an allowed method, exactly one host, and the path as sluice both routes and forwards it.
//!
//! The host: HTTP/1.1 needs exactly one `Host` (RFC 9112 §3.2), and an absolute-form target's
//! authority must agree with it; in HTTP/2 `:authority` wins over `Host`. The path is
//! normalised once ([`normalize_path`]) and the same result is routed and forwarded, in origin
//! form, with the query byte for byte.

use std::borrow::Cow;

use http::header::HOST;
use http::request::Parts;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Method, Version};
use sluice_routing::normalize_path;

use crate::error::ProxyError;

/// A request's host and target, checked.
#[derive(Debug)]
pub(crate) struct Inbound {
    /// The Host the backend gets: the client's, as written.
    pub(crate) host: HeaderValue,
    /// The origin-form target the backend gets: the normalised path and the query.
    pub(crate) target: PathAndQuery,
}

impl Inbound {
    /// Checks the request head; every refusal is a 400, or a 405 for a tunnel request.
    pub(crate) fn read(parts: &Parts) -> Result<Self, ProxyError> {
        if parts.method == Method::CONNECT {
            return Err(ProxyError::MethodNotAllowed);
        }
        let host = request_host(parts)?;
        let target = origin_form(parts)?;
        Ok(Self { host, target })
    }

    /// The host as routing compares it (lowercase, no port, no trailing dot).
    pub(crate) fn route_host(&self) -> Cow<'_, str> {
        // A valid authority is ASCII, so this never falls back.
        let host = self.host.to_str().unwrap_or_default();
        sluice_routing::normalize_request_host(host)
    }

    /// The Host without its port, as written (a TLS server name for the endpoint).
    pub(crate) fn host_name(&self) -> &str {
        let host = self.host.to_str().unwrap_or_default();
        crate::headers::host_without_port(host)
    }

    pub(crate) fn path(&self) -> &str {
        self.target.path()
    }
}

/// The one host of the request.
fn request_host(parts: &Parts) -> Result<HeaderValue, ProxyError> {
    let mut hosts = parts.headers.get_all(HOST).iter();
    let header = hosts.next();
    let authority = parts.uri.authority();
    if parts.version == Version::HTTP_2 {
        return match (authority, header) {
            (Some(authority), _) => authority_value(authority),
            (None, Some(host)) => valid_host(host),
            (None, None) => Err(ProxyError::BadRequest("missing :authority and Host")),
        };
    }
    if hosts.next().is_some() {
        return Err(ProxyError::BadRequest("more than one Host header"));
    }
    match (authority, header) {
        (Some(authority), Some(host))
            if !authority
                .as_str()
                .eq_ignore_ascii_case(host.to_str().unwrap_or_default()) =>
        {
            Err(ProxyError::BadRequest(
                "Host disagrees with the request target",
            ))
        }
        (Some(authority), _) => authority_value(authority),
        (None, Some(host)) => valid_host(host),
        (None, None) => Err(ProxyError::BadRequest("missing Host")),
    }
}

fn authority_value(authority: &Authority) -> Result<HeaderValue, ProxyError> {
    let value = HeaderValue::from_str(authority.as_str())
        .map_err(|_| ProxyError::BadRequest("invalid authority"))?;
    valid_host(&value)
}

/// A Host value is `uri-host [":" port]` (RFC 9110 §7.2): a name or IPv4 address of
/// unreserved, percent-encoded and sub-delimiter characters, or a bracketed IP literal.
fn valid_host(value: &HeaderValue) -> Result<HeaderValue, ProxyError> {
    if is_host(value.as_bytes()) {
        Ok(value.clone())
    } else {
        Err(ProxyError::BadRequest("invalid Host"))
    }
}

fn is_host(bytes: &[u8]) -> bool {
    let (host, port) = match bytes.strip_prefix(b"[") {
        Some(literal) => match literal.iter().position(|&b| b == b']') {
            Some(end) => {
                let inside = &literal[..end];
                let ip_literal = !inside.is_empty()
                    && inside
                        .iter()
                        .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
                if !ip_literal {
                    return false;
                }
                (&b"ip"[..], &literal[end + 1..])
            }
            None => return false,
        },
        None => match bytes.iter().rposition(|&b| b == b':') {
            Some(colon) => (&bytes[..colon], &bytes[colon..]),
            None => (bytes, &b""[..]),
        },
    };
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    let name_ok = !host.is_empty()
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b));
    port_ok && name_ok
}

/// The normalised path with the query, in origin form.
fn origin_form(parts: &Parts) -> Result<PathAndQuery, ProxyError> {
    let received = parts
        .uri
        .path_and_query()
        .ok_or(ProxyError::BadRequest("no request path"))?;
    let path = received.path();
    match normalize_path(path).map_err(ProxyError::BadPath)? {
        Cow::Borrowed(_) => Ok(received.clone()),
        Cow::Owned(normalized) => {
            let target = match received.query() {
                Some(query) => format!("{normalized}?{query}"),
                None => normalized,
            };
            PathAndQuery::try_from(target).map_err(|_| ProxyError::BadRequest("invalid path"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(version: Version, target: &str, hosts: &[&str]) -> Parts {
        let mut builder = http::Request::get(target).version(version);
        for host in hosts {
            builder = builder.header(HOST, *host);
        }
        let (parts, ()) = builder
            .body(())
            .unwrap_or_else(|e| panic!("{target}: {e}"))
            .into_parts();
        parts
    }

    fn read(version: Version, target: &str, hosts: &[&str]) -> Result<(String, String), String> {
        Inbound::read(&parts(version, target, hosts))
            .map(|inbound| {
                (
                    inbound.host.to_str().unwrap_or_default().to_owned(),
                    inbound.target.as_str().to_owned(),
                )
            })
            .map_err(|error| error.to_string())
    }

    fn ok(host: &str, target: &str) -> Result<(String, String), String> {
        Ok((host.to_owned(), target.to_owned()))
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        assert_eq!(
            read(Version::HTTP_11, "/a?b=1", &["Shop.Test:80"]),
            ok("Shop.Test:80", "/a?b=1")
        );
        assert!(read(Version::HTTP_11, "/", &[]).is_err());
        assert!(read(Version::HTTP_11, "/", &["a.test", "b.test"]).is_err());
        assert!(read(Version::HTTP_11, "/", &["a.test", "a.test"]).is_err());
        assert!(read(Version::HTTP_11, "/", &["user@a.test"]).is_err());
        assert!(read(Version::HTTP_11, "/", &["a test"]).is_err());
    }

    #[test]
    fn an_absolute_target_must_agree_with_host_and_becomes_origin_form() {
        assert_eq!(
            read(Version::HTTP_11, "http://shop.test/x?y=1", &["SHOP.test"]),
            ok("shop.test", "/x?y=1")
        );
        assert_eq!(
            read(Version::HTTP_11, "http://shop.test/x", &[]),
            ok("shop.test", "/x")
        );
        assert!(read(Version::HTTP_11, "http://shop.test/x", &["other.test"]).is_err());
    }

    #[test]
    fn http2_authority_wins_over_host() {
        assert_eq!(
            read(Version::HTTP_2, "http://h2.test/x", &["other.test"]),
            ok("h2.test", "/x")
        );
        assert_eq!(
            read(Version::HTTP_2, "/x", &["only-host.test"]),
            ok("only-host.test", "/x")
        );
    }

    #[test]
    fn the_path_is_normalised_and_the_query_kept_byte_for_byte() {
        assert_eq!(
            read(
                Version::HTTP_11,
                "/public/%2e%2e/admin?q=%2e%2e/../x",
                &["a.test"]
            ),
            ok("a.test", "/admin?q=%2e%2e/../x")
        );
        assert!(read(Version::HTTP_11, "/../etc/passwd", &["a.test"]).is_err());
        assert!(read(Version::HTTP_11, "/a%zz", &["a.test"]).is_err());
    }

    #[test]
    fn host_values_are_names_addresses_or_ip_literals_with_an_optional_port() {
        for valid in [
            "a.test",
            "A.Test:8080",
            "10.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:443",
            "xn--n3h.test",
            "a.test:",
        ] {
            assert!(is_host(valid.as_bytes()), "{valid}");
        }
        for invalid in [
            "",
            ":80",
            "user@a.test",
            "a test",
            "a/b",
            "a.test:8o",
            "[::1",
            "[zz]",
            "a.test?x",
            "a:b:c",
        ] {
            assert!(!is_host(invalid.as_bytes()), "{invalid}");
        }
    }

    #[test]
    fn a_tunnel_request_is_not_allowed() {
        let (parts, ()) = http::Request::connect("shop.test:443")
            .header(HOST, "shop.test:443")
            .body(())
            .unwrap_or_else(|e| panic!("{e}"))
            .into_parts();
        assert!(matches!(
            Inbound::read(&parts),
            Err(ProxyError::MethodNotAllowed)
        ));
    }
}
