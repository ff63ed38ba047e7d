//! Session tokens: an opaque keyed hash names a session's endpoint, never its address.

use ring::hmac;
use sluice_routing::{Condition, Endpoint, EndpointSet};

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
}
