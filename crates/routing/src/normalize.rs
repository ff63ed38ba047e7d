//! Request paths as sluice routes and forwards them: dot-segments resolved once (RFC 3986 §5.2.4), nothing else changed.
//!
//! The rule: a segment that is `.` or `..`, literally or percent-encoded (`%2e`, `%2E`, in any
//! mix), is resolved; every other byte stays as received. Nothing is decoded, so `%2F` never
//! splits a segment and `%41` is not `A`; empty segments (`//`) are kept. Routing and
//! forwarding both use the result, so a backend can never resolve a path to somewhere the
//! route did not allow. A path that cannot be normalised is refused: a `..` that would climb
//! above the root, a NUL (`%00`), or a `%` not followed by two hex digits.

use std::borrow::Cow;

/// Why a request path cannot be normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// The path does not start with `/` (origin form).
    NotAbsolute,
    /// A `..` segment would climb above the root.
    AboveRoot,
    /// The path holds a NUL byte, raw or as `%00`.
    Nul,
    /// A `%` is not followed by two hex digits.
    BadEscape,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotAbsolute => "the path does not start with /",
            Self::AboveRoot => "a .. segment climbs above the root",
            Self::Nul => "the path holds a NUL",
            Self::BadEscape => "a % is not followed by two hex digits",
        })
    }
}

impl std::error::Error for PathError {}

/// A `.` or `..` segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dot {
    Current,
    Parent,
}

/// The path with its dot-segments resolved; borrowed when it had none (the common case, which
/// costs one pass over the bytes and no allocation).
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    check_escapes(path.as_bytes())?;
    let has_dots = path[1..]
        .split('/')
        .any(|segment| dot_segment(segment).is_some());
    if !has_dots {
        return Ok(Cow::Borrowed(path));
    }
    resolve(path).map(Cow::Owned)
}

/// Every `%` starts a two-hex-digit escape, and neither a raw NUL nor `%00` appears.
fn check_escapes(bytes: &[u8]) -> Result<(), PathError> {
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            0 => return Err(PathError::Nul),
            b'%' => {
                let high = bytes.get(index + 1).copied().and_then(hex_value);
                let low = bytes.get(index + 2).copied().and_then(hex_value);
                match (high, low) {
                    (Some(0), Some(0)) => return Err(PathError::Nul),
                    (Some(_), Some(_)) => index += 3,
                    _ => return Err(PathError::BadEscape),
                }
            }
            _ => index += 1,
        }
    }
    Ok(())
}

fn hex_value(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|digit| digit as u8)
}

/// Whether a segment decodes to `.` or `..`: each dot may be written `.`, `%2e` or `%2E`.
fn dot_segment(segment: &str) -> Option<Dot> {
    let mut rest = segment.as_bytes();
    let mut dots = 0;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return None,
        };
        dots += 1;
    }
    match dots {
        1 => Some(Dot::Current),
        2 => Some(Dot::Parent),
        _ => None,
    }
}

/// RFC 3986 §5.2.4 on segments: `.` goes, `..` takes the segment before it, and a path that
/// ends in a dot-segment ends in `/`.
fn resolve(path: &str) -> Result<String, PathError> {
    let mut kept: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in path[1..].split('/') {
        trailing_slash = false;
        match dot_segment(segment) {
            Some(Dot::Current) => trailing_slash = true,
            Some(Dot::Parent) => {
                kept.pop().ok_or(PathError::AboveRoot)?;
                trailing_slash = true;
            }
            None => kept.push(segment),
        }
    }
    let mut resolved = String::with_capacity(path.len());
    for segment in &kept {
        resolved.push('/');
        resolved.push_str(segment);
    }
    if trailing_slash || resolved.is_empty() {
        resolved.push('/');
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn normalized(path: &str) -> Result<String, PathError> {
        normalize_path(path).map(Cow::into_owned)
    }

    #[test]
    fn paths_without_dot_segments_are_borrowed_unchanged() {
        for path in [
            "/",
            "/a/b",
            "/a//b/",
            "/a%2Fb",
            "/%41",
            "/a/.b/..c/...",
            "/a;p=1/b",
        ] {
            assert!(
                matches!(normalize_path(path), Ok(Cow::Borrowed(p)) if p == path),
                "{path}"
            );
        }
    }

    #[test]
    fn dot_segments_resolve_as_rfc_3986_says() {
        let cases = [
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/public/../admin", "/admin"),
            ("/public/%2e%2e/admin", "/admin"),
            ("/public/%2E%2e/admin", "/admin"),
            ("/public/.%2e/admin", "/admin"),
            ("/public/%2e./admin", "/admin"),
            ("/public/%2e/admin", "/public/admin"),
            ("/a//../b", "/a/b"),
            ("/a/b/../../", "/"),
            ("/..%2f", "/..%2f"),
            ("/a/..", "/"),
        ];
        for (path, expected) in cases {
            assert_eq!(normalized(path).as_deref(), Ok(expected), "{path}");
        }
    }

    #[test]
    fn encoded_slashes_and_other_escapes_stay_as_they_are() {
        assert_eq!(
            normalized("/public/..%2Fadmin").as_deref(),
            Ok("/public/..%2Fadmin")
        );
        assert_eq!(
            normalized("/public/%252e%252e/admin").as_deref(),
            Ok("/public/%252e%252e/admin"),
            "a double-encoded dot is not a dot"
        );
        assert_eq!(normalized("/x/../%7euser").as_deref(), Ok("/%7euser"));
    }

    #[test]
    fn paths_that_cannot_be_normalised_are_refused() {
        let cases = [
            ("/..", PathError::AboveRoot),
            ("/a/../..", PathError::AboveRoot),
            ("/%2e%2e/etc/passwd", PathError::AboveRoot),
            ("/a%00b", PathError::Nul),
            ("/a\0b", PathError::Nul),
            ("/a%zz", PathError::BadEscape),
            ("/a%4", PathError::BadEscape),
            ("/a%", PathError::BadEscape),
            ("a/b", PathError::NotAbsolute),
            ("*", PathError::NotAbsolute),
        ];
        for (path, error) in cases {
            assert_eq!(normalized(path), Err(error), "{path:?}");
        }
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("%2e".to_owned()),
            Just("%2E%2e".to_owned()),
            Just(String::new()),
            "[a-z%;.]{1,4}",
        ]
    }

    proptest! {
        #[test]
        fn normalising_is_idempotent_and_leaves_no_dot_segment(
            segments in proptest::collection::vec(segment(), 0..8)
        ) {
            let path = format!("/{}", segments.join("/"));
            if let Ok(once) = normalized(&path) {
                prop_assert!(once.starts_with('/'));
                prop_assert!(once[1..].split('/').all(|s| dot_segment(s).is_none()), "{once}");
                prop_assert_eq!(normalized(&once), Ok(once.clone()));
            }
        }

        #[test]
        fn any_text_normalises_or_is_refused_without_panicking(path in "/\\PC{0,40}") {
            let _ = normalize_path(&path);
        }
    }
}
