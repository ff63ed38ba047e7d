//! Annotation value parsers shared by the ingress-nginx and Traefik readers, and the warning an invalid value gets.

use std::time::Duration;

use sluice_routing::SameSite;

use crate::diagnostic::{Diagnostics, ObjectRef};

/// An annotation as found on an object: its full key and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found<'a> {
    pub(crate) key: &'a str,
    pub(crate) value: &'a str,
}

impl Found<'_> {
    /// The diagnostic field naming this annotation.
    pub(crate) fn field(&self) -> String {
        annotation_field(self.key)
    }
}

/// `metadata.annotations[key]`, the field of a diagnostic about one annotation.
pub(crate) fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

/// Reports findings about the annotations of one object.
pub(crate) struct Report<'a> {
    pub(crate) object: &'a ObjectRef,
    pub(crate) diagnostics: &'a mut Diagnostics,
}

impl Report<'_> {
    /// Parses `found` when it is set. An invalid value is a warning that says what was
    /// `expected` and what happens `otherwise`, and gives `None`.
    pub(crate) fn parse<T>(
        &mut self,
        found: Option<Found<'_>>,
        expected: &str,
        otherwise: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let found = found?;
        let parsed = parse(found.value.trim());
        if parsed.is_none() {
            let message = format!(
                "invalid value {:?}: expected {expected}; {otherwise}",
                found.value
            );
            self.warning(found, message);
        }
        parsed
    }

    pub(crate) fn warning(&mut self, found: Found<'_>, message: impl Into<String>) {
        self.diagnostics
            .warning(self.object, found.field(), message);
    }

    pub(crate) fn error(&mut self, found: Found<'_>, message: impl Into<String>) {
        self.diagnostics.error(self.object, found.field(), message);
    }

    pub(crate) fn info(&mut self, found: Found<'_>, message: impl Into<String>) {
        self.diagnostics.info(self.object, found.field(), message);
    }
}

/// Runs `read` on the annotation `key: value` of an Ingress `default/web`, and returns what it
/// gave with the diagnostics it reported (for the readers' unit tests).
#[cfg(test)]
pub(crate) fn read_one<T>(
    key: &str,
    value: &str,
    read: impl FnOnce(Found<'_>, &mut Report<'_>) -> T,
) -> (T, Vec<crate::diagnostic::Diagnostic>) {
    let object = ObjectRef::new("Ingress", Some("default"), "web");
    let mut diagnostics = Diagnostics::default();
    let mut report = Report {
        object: &object,
        diagnostics: &mut diagnostics,
    };
    let read = read(Found { key, value }, &mut report);
    (read, diagnostics.into_vec())
}

/// Booleans as ingress-nginx and Traefik accept them (Go's `strconv.ParseBool`).
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// A whole number of seconds greater than zero (a cookie lifetime).
pub(crate) fn parse_positive_seconds(value: &str) -> Option<u64> {
    value.parse::<u64>().ok().filter(|seconds| *seconds > 0)
}

/// A duration: a bare whole number counts as seconds (as ingress-nginx reads its timeouts),
/// anything else is read as humantime (`5s`, `1m30s`, `500ms`).
pub(crate) fn parse_duration(value: &str) -> Option<Duration> {
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    humantime::parse_duration(value).ok()
}

/// A size as nginx writes it (`client_max_body_size`): bytes, or a number with `k`, `m` or
/// `g` (any case) for KiB, MiB or GiB.
pub fn parse_size(value: &str) -> Option<u64> {
    let value = value.trim();
    let (digits, unit) = match value.char_indices().last()? {
        (at, suffix) if suffix.is_ascii_alphabetic() => (&value[..at], suffix),
        _ => (value, 'b'),
    };
    let shift = match unit.to_ascii_lowercase() {
        'b' => 0,
        'k' => 10,
        'm' => 20,
        'g' => 30,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `None`, `Lax` or `Strict`, in any case.
pub(crate) fn parse_same_site(value: &str) -> Option<SameSite> {
    [
        ("none", SameSite::None),
        ("lax", SameSite::Lax),
        ("strict", SameSite::Strict),
    ]
    .into_iter()
    .find(|(name, _)| value.eq_ignore_ascii_case(name))
    .map(|(_, same_site)| same_site)
}

/// A cookie name: an RFC 6265 token (visible ASCII without separators).
pub(crate) fn parse_cookie_name(value: &str) -> Option<String> {
    let valid = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
    valid.then(|| value.to_owned())
}

/// A cookie `Path`: starts with `/`, visible ASCII without `;`.
pub(crate) fn parse_cookie_path(value: &str) -> Option<String> {
    let valid = value.starts_with('/') && value.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    valid.then(|| value.to_owned())
}

/// A cookie `Domain`: a DNS name, optionally with a leading dot.
pub(crate) fn parse_cookie_domain(value: &str) -> Option<String> {
    let name = value.strip_prefix('.').unwrap_or(value);
    let valid = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    valid.then(|| value.to_owned())
}

/// 64-bit FNV-1a: a hash that stays the same across builds, platforms and replicas.
pub(crate) fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_go_parse_bool() {
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }

    #[test]
    fn bare_numbers_are_seconds_and_units_are_humantime() {
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn cookie_attributes_are_validated() {
        assert_eq!(parse_cookie_name("route_1").as_deref(), Some("route_1"));
        assert_eq!(parse_cookie_name("a b"), None);
        assert_eq!(parse_cookie_name("a=b"), None);
        assert_eq!(parse_cookie_path("/app").as_deref(), Some("/app"));
        assert_eq!(parse_cookie_path("app"), None);
        assert_eq!(parse_cookie_path("/a;b"), None);
        assert_eq!(
            parse_cookie_domain(".shop.test").as_deref(),
            Some(".shop.test")
        );
        assert_eq!(parse_cookie_domain("shop..test"), None);
        assert_eq!(parse_same_site("lAx"), Some(SameSite::Lax));
        assert_eq!(parse_same_site("relaxed"), None);
        assert_eq!(parse_positive_seconds("0"), None);
        assert_eq!(parse_positive_seconds("3600"), Some(3600));
    }

    #[test]
    fn sizes_are_read_as_nginx_reads_them() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("8k"), Some(8 * 1024));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        for invalid in [
            "",
            "m",
            "1.5m",
            "-1",
            "1mb",
            "1 m",
            "10t",
            "99999999999999999999",
        ] {
            assert_eq!(parse_size(invalid), None, "{invalid:?}");
        }
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
