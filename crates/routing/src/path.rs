//! Path matching: the Ingress `pathType`s `Exact` and `Prefix` (element by element on `/`), and ingress-nginx's `use-regex` paths.

use std::cmp::{Ordering, Reverse};
use std::hash::{Hash, Hasher};

use std::sync::Arc;

use serde::Serialize;

/// How a route's path compares with a request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum PathKind {
    /// The whole request path equals the route path, byte for byte.
    Exact,
    /// The route path is a prefix of the request path, compared element by element on `/`.
    Prefix,
    /// A regular expression, case-insensitive and anchored at the start only, as ingress-nginx
    /// matches a path under `use-regex` (nginx's `location ~* "^path"`).
    Regex,
}

/// A route's path: its kind and its (normalised) path.
///
/// `Ord` is route precedence: `Exact` paths first (nginx checks `location =` before any
/// other), then the longest path first, then the kind; ties beyond that fall back to the path
/// text so sorting is deterministic. Equality and hashing look at the kind and text only.
#[derive(Clone, Debug, Serialize)]
pub struct PathMatch {
    kind: PathKind,
    path: Arc<str>,
    /// The compiled pattern of a `Regex` path.
    #[serde(skip)]
    regex: Option<Arc<regex::Regex>>,
    /// A `Prefix` path written with a trailing slash (`/foo/`) answers `/foo` with a 301 to
    /// `/foo/`, as nginx does for such a location.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    slash_redirect: bool,
}

impl PathMatch {
    /// An `Exact` match on `path`, kept as written.
    pub fn exact(path: &str) -> Self {
        Self::new(PathKind::Exact, path.into())
    }

    /// A `Prefix` match on `path`; trailing slashes are ignored (`/foo/` is `/foo`).
    pub fn prefix(path: &str) -> Self {
        let trimmed = path.trim_end_matches('/');
        let path = if trimmed.is_empty() { "/" } else { trimmed };
        Self::new(PathKind::Prefix, path.into())
    }

    /// A `Regex` match on `pattern`, compiled as ingress-nginx's `~* "^pattern"`: without case,
    /// anchored at the start only. The `regex` crate runs in linear time.
    pub fn regex(pattern: &str) -> Result<Self, regex::Error> {
        let compiled = regex::RegexBuilder::new(&format!("^{pattern}"))
            .case_insensitive(true)
            .size_limit(1 << 20)
            .build()?;
        Ok(Self {
            regex: Some(Arc::new(compiled)),
            ..Self::new(PathKind::Regex, pattern.into())
        })
    }

    /// A Gateway API `RegularExpression` path: case-sensitive, matching the whole path.
    pub fn whole_regex(pattern: &str) -> Result<Self, regex::Error> {
        let compiled = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(1 << 20)
            .build()?;
        Ok(Self {
            regex: Some(Arc::new(compiled)),
            ..Self::new(PathKind::Regex, pattern.into())
        })
    }

    fn new(kind: PathKind, path: Arc<str>) -> Self {
        Self {
            kind,
            path,
            regex: None,
            slash_redirect: false,
        }
    }

    /// This `Prefix` path answers a request for itself without the trailing slash with a 301
    /// (for a path written as `/foo/`; the root and other kinds are unchanged).
    pub fn with_slash_redirect(mut self) -> Self {
        self.slash_redirect = self.kind == PathKind::Prefix && &*self.path != "/";
        self
    }

    pub fn kind(&self) -> PathKind {
        self.kind
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether a request path (without its query string) matches this route path.
    pub fn matches(&self, request_path: &str) -> bool {
        match (self.kind, &self.regex) {
            (PathKind::Exact, _) => request_path == &*self.path,
            (PathKind::Prefix, _) => prefix_matches(&self.path, request_path),
            (PathKind::Regex, Some(regex)) => regex.is_match(request_path),
            (PathKind::Regex, None) => false,
        }
    }

    /// For a request this path matched: the location to redirect it to with a 301 when it
    /// named the directory without its trailing slash (`/foo` for a route written `/foo/`).
    pub fn slash_redirect(&self, request_path: &str) -> Option<String> {
        (self.slash_redirect && request_path == &*self.path).then(|| format!("{request_path}/"))
    }

    /// The groups a `Regex` path captured from a request path (group 0 is the whole match).
    pub fn captures<'p>(&self, request_path: &'p str) -> Option<regex::Captures<'p>> {
        self.regex.as_ref()?.captures(request_path)
    }

    fn precedence(&self) -> (bool, Reverse<usize>, PathKind, &str) {
        let exact = self.kind == PathKind::Exact;
        (!exact, Reverse(self.path.len()), self.kind, &self.path)
    }
}

impl PartialEq for PathMatch {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.path == other.path
    }
}

impl Eq for PathMatch {}

impl Hash for PathMatch {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
        self.path.hash(state);
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
        self.precedence().cmp(&other.precedence())
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

    #[test]
    fn regex_is_case_insensitive_and_anchored_at_the_start_only() {
        let regex = PathMatch::regex("/api(/|$)(.*)").unwrap();
        assert!(regex.matches("/api"));
        assert!(regex.matches("/API/users"));
        assert!(!regex.matches("/v1/api/users"));
        let captures = regex.captures("/api/users/7").unwrap();
        assert_eq!(&captures[2], "users/7");
        assert!(PathMatch::regex("/foo").unwrap().matches("/foobar/baz"));
    }

    #[test]
    fn an_invalid_pattern_is_an_error() {
        assert!(PathMatch::regex("/api(").is_err());
    }

    #[test]
    fn exact_comes_before_a_longer_regex() {
        let mut paths = [
            PathMatch::regex("/.*").unwrap(),
            PathMatch::exact("/a"),
            PathMatch::regex("/a/b+").unwrap(),
        ];
        paths.sort();
        assert_eq!(paths[0].kind(), PathKind::Exact);
        assert_eq!(paths[1].path(), "/a/b+");
    }

    #[test]
    fn a_trailing_slash_prefix_redirects_only_the_bare_directory() {
        let path = PathMatch::prefix("/foo/").with_slash_redirect();
        assert_eq!(path.slash_redirect("/foo").as_deref(), Some("/foo/"));
        assert_eq!(path.slash_redirect("/foo/"), None);
        assert_eq!(path.slash_redirect("/foo/bar"), None);
        assert_eq!(PathMatch::prefix("/foo/").slash_redirect("/foo"), None);
        assert_eq!(
            PathMatch::prefix("/")
                .with_slash_redirect()
                .slash_redirect("/"),
            None
        );
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
            if exact_a == exact_b && pa.path().len() > pb.path().len() {
                prop_assert_eq!(pa.cmp(&pb), Ordering::Less);
            }
            if exact_a && !exact_b {
                prop_assert_eq!(pa.cmp(&pb), Ordering::Less);
            }
            prop_assert_eq!(pa.cmp(&pb), pb.cmp(&pa).reverse());
        }
    }
}
