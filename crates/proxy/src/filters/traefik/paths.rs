//! Traefik's path middlewares: `stripPrefix`, `stripPrefixRegex`, `addPrefix`, `replacePath` and `replacePathRegex`, on the path the pod gets (the query is kept).

use http::request::Parts;
use http::{HeaderName, HeaderValue, StatusCode};
use sluice_routing::middleware::{Pattern, StripPrefix};

use super::OwnAnswer;
use crate::filters::contract::LocalAnswer;

const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");
const X_REPLACED_PATH: HeaderName = HeaderName::from_static("x-replaced-path");

/// One path middleware.
pub(super) enum PathEdit {
    StripPrefix(std::sync::Arc<StripPrefix>),
    StripPrefixRegex(Vec<Pattern>),
    AddPrefix(String),
    ReplacePath(String),
    ReplacePathRegex(Pattern, String),
}

impl PathEdit {
    /// Changes the upstream path; a result that is not a clean path (`//`, `.` or `..`
    /// segments, which Traefik's check refuses) is a 400.
    pub(super) fn apply(&self, upstream: &mut Parts) -> Result<(), Box<LocalAnswer>> {
        let path = upstream.uri.path().to_owned();
        let (new_path, header, checked) = match self {
            Self::StripPrefix(strip) => {
                let Some(prefix) = strip.prefixes.iter().find(|p| path.starts_with(p.as_str()))
                else {
                    return Ok(());
                };
                let rest = &path[prefix.len()..];
                let new_path = match strip.force_slash {
                    true => format!("/{}", rest.trim_start_matches('/')),
                    false => leading_slash(rest),
                };
                (new_path, Some((X_FORWARDED_PREFIX, prefix.clone())), true)
            }
            Self::StripPrefixRegex(patterns) => {
                let found = patterns.iter().find_map(|pattern| {
                    let matched = pattern.regex().find(&path)?;
                    (matched.start() == 0 && !matched.is_empty())
                        .then(|| matched.as_str().to_owned())
                });
                let Some(matched) = found else {
                    return Ok(());
                };
                let new_path = leading_slash(&path.replacen(&matched, "", 1));
                (new_path, Some((X_FORWARDED_PREFIX, matched)), true)
            }
            Self::AddPrefix(prefix) => (leading_slash(&format!("{prefix}{path}")), None, false),
            Self::ReplacePath(replacement) => (
                replacement.clone(),
                Some((X_REPLACED_PATH, path.clone())),
                false,
            ),
            Self::ReplacePathRegex(pattern, replacement) => {
                if !pattern.regex().is_match(&path) {
                    return Ok(());
                }
                let new_path = pattern
                    .regex()
                    .replace_all(&path, replacement.as_str())
                    .into_owned();
                (new_path, Some((X_REPLACED_PATH, path.clone())), true)
            }
        };
        if checked && !is_clean(&new_path) {
            return Err(OwnAnswer::text(StatusCode::BAD_REQUEST, "Bad Request\n"));
        }
        let path = leading_slash(&new_path);
        let path = if path.is_empty() { "/" } else { &path };
        let target = match upstream.uri.query() {
            Some(query) => format!("{path}?{query}"),
            None => path.to_owned(),
        };
        let Ok(uri) = http::Uri::try_from(target) else {
            return Err(OwnAnswer::text(StatusCode::BAD_REQUEST, "Bad Request\n"));
        };
        upstream.uri = uri;
        if let Some((name, value)) = header {
            if let Ok(value) = HeaderValue::try_from(value) {
                upstream.headers.append(name, value);
            }
        }
        Ok(())
    }
}

/// `/` added in front unless the path has one; an empty path stays empty (the pod gets `/`).
fn leading_slash(path: &str) -> String {
    if path.is_empty() || path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

/// Whether cleaning the path (collapsing `//`, resolving `.` and `..`) would leave it as it
/// is: Traefik refuses a rewritten path that it would not. A trailing `/` is kept by the
/// cleaning, so it is no fault.
fn is_clean(path: &str) -> bool {
    let Some(inner) = path.strip_prefix('/') else {
        return true;
    };
    if inner.is_empty() {
        return true;
    }
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    inner
        .split('/')
        .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(target: &str) -> Parts {
        let (parts, ()) = http::Request::builder()
            .uri(target)
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    fn strip(prefixes: &[&str]) -> PathEdit {
        PathEdit::StripPrefix(std::sync::Arc::new(StripPrefix {
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            force_slash: false,
        }))
    }

    #[test]
    fn strip_prefix_is_a_plain_string_prefix_and_keeps_the_query() {
        let mut request = parts("/stat/us?x=1");
        strip(&["/stat"]).apply(&mut request).unwrap();
        assert_eq!(request.uri, "/us?x=1");
        assert_eq!(request.headers[X_FORWARDED_PREFIX], "/stat");
        let mut request = parts("/status");
        strip(&["/stat"]).apply(&mut request).unwrap();
        assert_eq!(request.uri, "/us");
        let mut request = parts("/stat");
        strip(&["/stat"]).apply(&mut request).unwrap();
        assert_eq!(request.uri, "/");
    }

    #[test]
    fn a_stripped_path_that_is_not_clean_is_a_400() {
        let mut request = parts("/api//etc");
        let refused = strip(&["/api"]).apply(&mut request);
        assert!(matches!(refused, Err(answer) if answer.status == 400));
    }

    #[test]
    fn add_and_replace_keep_the_query_and_note_the_old_path() {
        let mut request = parts("/foo?q=1");
        PathEdit::AddPrefix("/api".into())
            .apply(&mut request)
            .unwrap();
        assert_eq!(request.uri, "/api/foo?q=1");
        PathEdit::ReplacePath("/new".into())
            .apply(&mut request)
            .unwrap();
        assert_eq!(request.uri, "/new?q=1");
        assert_eq!(request.headers[X_REPLACED_PATH], "/api/foo");
        let regex = Pattern::new("^/new(.*)").unwrap();
        PathEdit::ReplacePathRegex(regex, "/v2${1}x".into())
            .apply(&mut request)
            .unwrap();
        assert_eq!(request.uri, "/v2x?q=1");
    }
}
