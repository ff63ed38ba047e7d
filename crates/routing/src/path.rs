//! Path matching for the Ingress `pathType`s: `Exact`, and `Prefix` element by element on `/`.

use std::cmp::Ordering;

use std::sync::Arc;

use serde::Serialize;

/// How a route's path compares with a request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum PathKind {
    /// The whole request path equals the route path, byte for byte.
    Exact,
    /// The route path is a prefix of the request path, compared element by element on `/`.
    Prefix,
}

/// A route's path: its kind and its (normalised) path.
///
/// `Ord` is route precedence: the longest path first and, at equal length, `Exact` before
/// `Prefix`; ties beyond that fall back to the path text so sorting is deterministic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PathMatch {
    kind: PathKind,
    path: Arc<str>,
}

impl PathMatch {
    /// An `Exact` match on `path`, kept as written.
    pub fn exact(path: &str) -> Self {
        Self {
            kind: PathKind::Exact,
            path: path.into(),
        }
    }

    /// A `Prefix` match on `path`; trailing slashes are ignored (`/foo/` is `/foo`).
    pub fn prefix(path: &str) -> Self {
        let trimmed = path.trim_end_matches('/');
        let path = if trimmed.is_empty() { "/" } else { trimmed };
        Self {
            kind: PathKind::Prefix,
            path: path.into(),
        }
    }

    pub fn kind(&self) -> PathKind {
        self.kind
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether a request path (without its query string) matches this route path.
    pub fn matches(&self, request_path: &str) -> bool {
        match self.kind {
            PathKind::Exact => request_path == &*self.path,
            PathKind::Prefix => prefix_matches(&self.path, request_path),
        }
    }
}

/// Element-wise prefix match: `/foo` matches `/foo`, `/foo/` and `/foo/bar`, never `/foobar`.
fn prefix_matches(prefix: &str, request_path: &str) -> bool {
    if prefix == "/" {
        return request_path.starts_with('/');
    }
    match request_path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

impl Ord for PathMatch {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .path
            .len()
            .cmp(&self.path.len())
            .then(self.kind.cmp(&other.kind))
            .then_with(|| self.path.cmp(&other.path))
    }
}

impl PartialOrd for PathMatch {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_matches_only_the_whole_path() {
        let exact = PathMatch::exact("/foo");
        assert!(exact.matches("/foo"));
        assert!(!exact.matches("/foo/"));
        assert!(!exact.matches("/foo/bar"));
        assert!(!exact.matches("/fo"));
    }

    #[test]
    fn prefix_matches_element_by_element() {
        let prefix = PathMatch::prefix("/foo");
        assert!(prefix.matches("/foo"));
        assert!(prefix.matches("/foo/"));
        assert!(prefix.matches("/foo/bar"));
        assert!(!prefix.matches("/foobar"));
        assert!(!PathMatch::prefix("/aaa/bb").matches("/aaa/bbb"));
        assert!(PathMatch::prefix("/aaa/bbb").matches("/aaa/bbb/"));
    }

    #[test]
    fn prefix_ignores_a_trailing_slash() {
        assert_eq!(PathMatch::prefix("/foo/"), PathMatch::prefix("/foo"));
        assert!(PathMatch::prefix("/foo/").matches("/foo"));
    }

    #[test]
    fn root_prefix_matches_every_path() {
        let root = PathMatch::prefix("/");
        assert!(root.matches("/"));
        assert!(root.matches("/anything/at/all"));
        assert!(!root.matches("*"));
    }

    #[test]
    fn longer_path_comes_first() {
        let mut paths = [PathMatch::prefix("/a"), PathMatch::prefix("/a/b")];
        paths.sort();
        assert_eq!(paths[0].path(), "/a/b");
    }

    #[test]
    fn exact_beats_prefix_at_equal_length() {
        let mut paths = [PathMatch::prefix("/foo"), PathMatch::exact("/foo")];
        paths.sort();
        assert_eq!(paths[0].kind(), PathKind::Exact);
    }

    fn segment() -> impl Strategy<Value = String> {
        "[a-z]{1,4}"
    }

    fn path_of(segments: &[String]) -> String {
        format!("/{}", segments.join("/"))
    }

    proptest! {
        #[test]
        fn prefix_never_matches_a_mere_string_prefix(
            segments in proptest::collection::vec(segment(), 1..4),
            extra in "[a-z]{1,3}",
        ) {
            let route = path_of(&segments);
            let request = format!("{route}{extra}");
            prop_assert!(!PathMatch::prefix(&route).matches(&request));
        }

        #[test]
        fn prefix_matches_every_descendant(
            segments in proptest::collection::vec(segment(), 1..4),
            rest in proptest::collection::vec(segment(), 0..3),
            trailing_slash in any::<bool>(),
        ) {
            let route = path_of(&segments);
            let mut request = route.clone();
            for part in &rest {
                request.push('/');
                request.push_str(part);
            }
            if trailing_slash {
                request.push('/');
            }
            prop_assert!(PathMatch::prefix(&route).matches(&request));
            let with_slash = format!("{route}/");
            prop_assert!(PathMatch::prefix(&with_slash).matches(&request));
        }

        #[test]
        fn exact_matches_iff_equal(a in "/[a-z/]{0,8}", b in "/[a-z/]{0,8}") {
            prop_assert_eq!(PathMatch::exact(&a).matches(&b), a == b);
        }

        #[test]
        fn precedence_is_a_total_order_consistent_with_length(
            a in "/[a-z/]{0,8}", b in "/[a-z/]{0,8}", exact_a in any::<bool>(), exact_b in any::<bool>(),
        ) {
            let make = |p: &str, exact: bool| if exact { PathMatch::exact(p) } else { PathMatch::prefix(p) };
            let (pa, pb) = (make(&a, exact_a), make(&b, exact_b));
            if pa.path().len() > pb.path().len() {
                prop_assert_eq!(pa.cmp(&pb), Ordering::Less);
            }
            prop_assert_eq!(pa.cmp(&pb), pb.cmp(&pa).reverse());
        }
    }
}
