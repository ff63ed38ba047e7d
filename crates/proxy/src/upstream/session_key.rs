//! Sticky-session cookies: an opaque keyed hash names the endpoint, never its address.

use std::time::{Duration, SystemTime};

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};
use ring::hmac;
use sluice_routing::{Condition, Endpoint, EndpointSet, SameSite, StickyCookie};

/// The key session tokens are computed with. Every replica must use the same key so a session
/// set by one is understood by the others.
pub struct SessionKey(hmac::Key);

impl SessionKey {
    /// Used when no secret is configured: replicas agree, but anyone who knows this value can
    /// compute the token of a guessed pod address.
    const DEFAULT_SECRET: &'static [u8] = b"sluice session affinity v1";

    pub fn new(secret: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The token of an endpoint: the first 64 bits of HMAC-SHA256 over its address.
    pub fn token(&self, endpoint: &Endpoint) -> u64 {
        let tag = hmac::sign(&self.0, endpoint.authority().as_str().as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_be_bytes(first)
    }

    /// The endpoint a cookie value pins, if it names one that still serves: ready, or
    /// terminating (which keeps its sessions while it drains).
    pub(crate) fn pinned<'s>(&self, set: &'s EndpointSet, value: &str) -> Option<&'s Endpoint> {
        if value.len() != 16 {
            return None;
        }
        let token = u64::from_str_radix(value, 16).ok()?;
        let endpoint = set.find_by_token(token, |e| self.token(e))?;
        matches!(
            set.condition(endpoint),
            Some(Condition::Ready | Condition::Terminating)
        )
        .then_some(endpoint)
    }

    /// The cookie value naming `endpoint`.
    pub(crate) fn value(&self, endpoint: &Endpoint) -> String {
        format!("{:016x}", self.token(endpoint))
    }
}

impl Default for SessionKey {
    fn default() -> Self {
        Self::new(Self::DEFAULT_SECRET)
    }
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

/// The `Set-Cookie` header pinning a session to the endpoint whose cookie value is `value`.
pub(crate) fn set_cookie(cookie: &StickyCookie, value: &str) -> Option<HeaderValue> {
    let mut text = format!("{}={value}; Path={}", cookie.name, cookie.path);
    if let Some(domain) = &cookie.domain {
        text.push_str(&format!("; Domain={domain}"));
    }
    if let Some(max_age) = cookie.max_age {
        text.push_str(&format!("; Max-Age={max_age}"));
    }
    if let Some(expires) = cookie.expires {
        let at = SystemTime::now() + Duration::from_secs(expires);
        text.push_str(&format!("; Expires={}", httpdate::fmt_http_date(at)));
    }
    if cookie.secure {
        text.push_str("; Secure");
    }
    if cookie.http_only {
        text.push_str("; HttpOnly");
    }
    if let Some(same_site) = cookie.same_site {
        let name = match same_site {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        };
        text.push_str(&format!("; SameSite={name}"));
    }
    HeaderValue::try_from(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::Authority;

    fn endpoint(text: &str) -> Endpoint {
        Endpoint::new(Authority::try_from(text).expect("valid authority"))
    }

    #[test]
    fn the_cookie_value_never_shows_the_address_and_finds_the_endpoint() {
        let key = SessionKey::default();
        let pod = endpoint("10.1.2.3:8080");
        let set = EndpointSet::new(vec![pod.clone(), endpoint("10.1.2.4:8080")]);
        let value = key.value(&pod);
        assert_eq!(value.len(), 16);
        assert!(value.chars().all(|c| c.is_ascii_hexdigit()), "{value}");
        assert_eq!(key.pinned(&set, &value), Some(&pod));
    }

    #[test]
    fn tampered_and_foreign_values_pin_nothing() {
        let key = SessionKey::default();
        let pod = endpoint("10.1.2.3:8080");
        let set = EndpointSet::new(vec![pod.clone()]);
        let mut value = key.value(&pod);
        let last = if value.ends_with('0') { "1" } else { "0" };
        value.replace_range(15.., last);
        assert_eq!(key.pinned(&set, &value), None);
        assert_eq!(key.pinned(&set, "10.1.2.3:8080"), None);
        // A set's token index belongs to one key (one per process), so use a fresh set.
        let other_key = SessionKey::new(b"another secret");
        let fresh = EndpointSet::new(vec![pod.clone()]);
        assert_eq!(other_key.pinned(&fresh, &key.value(&pod)), None);
    }

    #[test]
    fn a_terminating_endpoint_keeps_its_sessions() {
        let key = SessionKey::default();
        let draining = endpoint("10.1.2.3:8080");
        let set =
            EndpointSet::with_terminating(vec![endpoint("10.1.2.9:8080")], vec![draining.clone()]);
        assert_eq!(key.pinned(&set, &key.value(&draining)), Some(&draining));
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

    #[test]
    fn set_cookie_carries_every_attribute() {
        let cookie = StickyCookie {
            domain: Some("example.com".into()),
            max_age: Some(60),
            expires: Some(60),
            secure: true,
            same_site: Some(SameSite::Lax),
            ..StickyCookie::named("route")
        };
        let header = set_cookie(&cookie, "00ff").expect("valid header");
        let text = header.to_str().expect("ascii");
        for part in [
            "route=00ff",
            "Path=/",
            "Domain=example.com",
            "Max-Age=60",
            "Expires=",
            "Secure",
            "HttpOnly",
            "SameSite=Lax",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
    }
}
