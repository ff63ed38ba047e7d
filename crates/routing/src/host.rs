//! Host matching: exact names, `*.` wildcards of exactly one label, and request-host normalisation.

use std::borrow::Cow;

use std::sync::Arc;

use serde::Serialize;

/// Which request hosts a rule applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum HostMatch {
    /// A rule with no host: every request host.
    Any,
    /// One host name, lowercase.
    Exact(Arc<str>),
    /// `*.example.com`, stored as its lowercase suffix `example.com`: exactly one extra label.
    Wildcard(Arc<str>),
}

impl HostMatch {
    /// Reads an Ingress rule's `host`: empty means any host, `*.x` a wildcard.
    pub fn from_rule_host(host: Option<&str>) -> Self {
        match host.map(str::trim) {
            None | Some("") => Self::Any,
            Some(host) => match host.strip_prefix("*.") {
                Some(suffix) => Self::Wildcard(lowercase(suffix)),
                None => Self::Exact(lowercase(host)),
            },
        }
    }

    /// Whether a normalised request host (see [`normalize_request_host`]) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(name) => **name == *host,
            Self::Wildcard(suffix) => wildcard_suffix(host) == Some(&**suffix),
        }
    }
}

impl std::fmt::Display for HostMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Exact(name) => f.write_str(name),
            Self::Wildcard(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// A shared lowercase copy, made in one allocation when the name is already lowercase.
fn lowercase(name: &str) -> Arc<str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        name.to_ascii_lowercase().into()
    } else {
        name.into()
    }
}

/// The part of a host a one-label wildcard is keyed on: `a.example.com` → `example.com`.
pub(crate) fn wildcard_suffix(host: &str) -> Option<&str> {
    match host.split_once('.') {
        Some((label, suffix)) if !label.is_empty() && !suffix.is_empty() => Some(suffix),
        _ => None,
    }
}

/// Lowercases a request's Host and drops its port and any trailing dot.
///
/// Allocates only when the host has uppercase letters.
pub fn normalize_request_host(host: &str) -> Cow<'_, str> {
    let host = strip_port(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_host_ignores_case_and_port() {
        let rule = HostMatch::from_rule_host(Some("Foo.Example.com"));
        assert!(rule.matches(&normalize_request_host("foo.example.COM:8080")));
        assert!(!rule.matches(&normalize_request_host("bar.example.com")));
    }

    #[test]
    fn wildcard_matches_exactly_one_label() {
        let rule = HostMatch::from_rule_host(Some("*.example.com"));
        assert!(rule.matches("a.example.com"));
        assert!(!rule.matches("a.b.example.com"));
        assert!(!rule.matches("example.com"));
        assert!(!rule.matches(".example.com"));
    }

    #[test]
    fn empty_host_matches_everything() {
        assert_eq!(HostMatch::from_rule_host(Some("")), HostMatch::Any);
        assert!(HostMatch::Any.matches("whatever.test"));
    }

    #[test]
    fn request_host_normalisation() {
        assert_eq!(normalize_request_host("EXAMPLE.com:80"), "example.com");
        assert_eq!(normalize_request_host("example.com."), "example.com");
        assert_eq!(normalize_request_host("[::1]:8080"), "[::1]");
        assert_eq!(normalize_request_host("[::1]"), "[::1]");
        assert!(matches!(
            normalize_request_host("plain.test"),
            Cow::Borrowed(_)
        ));
    }
}
