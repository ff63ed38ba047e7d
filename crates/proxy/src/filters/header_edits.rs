//! Changes to the heads on their way: the path, Host and headers the pod gets (ingress-nginx's `rewrite-target`, `upstream-vhost`, `x-forwarded-prefix`, `sluice.dev/request-headers`; an HTTPRoute's `URLRewrite` and `RequestHeaderModifier`) and the headers the client gets (`sluice.dev/response-headers`, `ResponseHeaderModifier`).
//!
//! One primitive each way, [`HeaderEdit`]: set (replacing), add (appending), remove. The
//! annotations only set; Gateway API filters do all three.

use http::header::HOST;
use http::request::Parts;
use http::{response, HeaderMap, HeaderName, HeaderValue};
use sluice_routing::{HeaderChanges, PathRewrite, RoutePolicy};

use super::contract::{Filter, Flow, RequestContext, Step};
use super::services::{boxed, RouteFilter, Services};
use super::template::matched_prefix;

const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// Header changes in the form a header map takes them (names and values checked by the
/// compiler; any that do not parse are skipped).
#[derive(Default)]
pub(crate) struct HeaderEdit {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl HeaderEdit {
    /// The changes in header-map form.
    fn of(changes: &HeaderChanges) -> Self {
        Self {
            set: named(&changes.set),
            add: named(&changes.add),
            remove: changes
                .remove
                .iter()
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
                .collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// Set replaces every value, add appends one, remove drops every value.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
        for name in &self.remove {
            headers.remove(name);
        }
    }
}

/// The head the pod gets: its path (the query kept), its headers, then its Host.
pub(crate) struct UpstreamEdits {
    path: Option<PathRewrite>,
    headers: HeaderEdit,
    host: Option<HeaderValue>,
}

impl UpstreamEdits {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let edits = &policy.edits;
        let mut headers = HeaderEdit::of(&edits.request_headers);
        if let Some(prefix) = edits.forwarded_prefix.as_deref().and_then(value) {
            headers.set.push((X_FORWARDED_PREFIX, prefix));
        }
        let host = edits.upstream_host.as_deref().and_then(value);
        let path = edits.rewrite.clone();
        if path.is_none() && host.is_none() && headers.is_empty() {
            return None;
        }
        boxed(Self {
            path,
            headers,
            host,
        })
    }

    fn rewrite_path(&self, context: &RequestContext<'_>, upstream: &mut Parts) {
        let Some(rewrite) = &self.path else {
            return;
        };
        let path = upstream.uri.path();
        let mut rewritten = match rewrite {
            PathRewrite::Target(target) => {
                let captures = context
                    .target
                    .and_then(|target| target.path)
                    .and_then(|route| route.captures(path));
                expand(target, captures.as_ref())
            }
            PathRewrite::Replace(change) => change.apply(path, matched_prefix(context)),
        };
        if let Some(query) = upstream.uri.query() {
            rewritten.push('?');
            rewritten.push_str(query);
        }
        if let Ok(uri) = http::Uri::try_from(rewritten) {
            upstream.uri = uri;
        }
    }
}

impl Filter<Services> for UpstreamEdits {
    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        _: &'a Services,
    ) -> Step<'a, Flow> {
        self.rewrite_path(context, upstream);
        self.headers.apply(&mut upstream.headers);
        if let Some(host) = &self.host {
            upstream.headers.insert(HOST, host.clone());
        }
        Step::Done(Ok(()))
    }
}

/// The target with each `$N` replaced by group N (empty when the group did not take part or
/// the path is not a regex).
fn expand(target: &str, captures: Option<&regex::Captures<'_>>) -> String {
    let mut out = String::with_capacity(target.len() + 16);
    let mut rest = target;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        match after.as_bytes().first() {
            Some(digit @ b'0'..=b'9') => {
                let group = usize::from(digit - b'0');
                let text = captures.and_then(|c| c.get(group)).map(|m| m.as_str());
                out.push_str(text.unwrap_or_default());
                rest = &after[1..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The headers the client gets: the annotation's set (as nginx's `more_set_headers`, replacing
/// the pod's), then a `ResponseHeaderModifier`'s.
pub(crate) struct ResponseEdits(HeaderEdit);

impl ResponseEdits {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let edit = HeaderEdit::of(&policy.edits.response_headers);
        (!edit.is_empty()).then(|| boxed(Self(edit))).flatten()
    }
}

impl Filter<Services> for ResponseEdits {
    fn on_response(
        &self,
        _context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        _: &Services,
    ) {
        self.0.apply(&mut response.headers);
    }
}

/// Headers as the compiler checked them (any that no longer parse are skipped).
fn named(headers: &[(String, String)]) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter_map(|(name, text)| {
            Some((HeaderName::from_bytes(name.as_bytes()).ok()?, value(text)?))
        })
        .collect()
}

fn value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, response_head, Scene};
    use sluice_routing::{PathChange, PathMatch};

    #[test]
    fn groups_fill_the_target_and_a_missing_group_is_empty() {
        let path = PathMatch::regex("/api(/|$)(.*)").expect("regex");
        let captures = path.captures("/api/users/7");
        assert_eq!(expand("/$2", captures.as_ref()), "/users/7");
        assert_eq!(expand("/v2$1$2", captures.as_ref()), "/v2/users/7");
        assert_eq!(expand("/x/$3/$", captures.as_ref()), "/x//$");
        assert_eq!(expand("/new", None), "/new");
    }

    #[test]
    fn set_add_remove_apply_in_that_order() {
        let edit = HeaderEdit::of(&HeaderChanges {
            set: vec![("x-set".into(), "new".into())],
            add: vec![("x-add".into(), "two".into())],
            remove: vec!["x-gone".into()],
        });
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-set", "a"),
            ("x-set", "b"),
            ("x-add", "one"),
            ("x-gone", "z"),
        ] {
            headers.append(name, value.parse().expect("value"));
        }
        edit.apply(&mut headers);
        let all = |name| {
            headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("x-set"), ["new"]);
        assert_eq!(all("x-add"), ["one", "two"]);
        assert!(all("x-gone").is_empty());
    }

    #[test]
    fn the_annotations_set_the_pods_host_prefix_and_headers_and_the_clients_headers() {
        let mut policy = RoutePolicy::default();
        policy.edits.upstream_host = Some("internal.svc".into());
        policy.edits.forwarded_prefix = Some("/shop".into());
        policy.edits.request_headers.set = vec![("x-team".into(), "blue".into())];
        policy.edits.response_headers.set = vec![("x-served-by".into(), "sluice".into())];
        let mut scene = Scene::new(policy);
        let mut upstream = request("GET", "/cart?id=3");
        upstream
            .headers
            .insert("x-team", "red".parse().expect("value"));
        assert!(scene.on_upstream_request(&mut upstream).is_ok());
        assert_eq!(upstream.headers["host"], "internal.svc");
        assert_eq!(upstream.headers["x-forwarded-prefix"], "/shop");
        assert_eq!(upstream.headers["x-team"], "blue");
        assert_eq!(upstream.uri, "/cart?id=3");
        let mut head = response_head(200);
        head.headers
            .insert("x-served-by", "pod".parse().expect("value"));
        scene.on_response(&mut head);
        assert_eq!(head.headers["x-served-by"], "sluice");
    }

    #[test]
    fn a_gateway_prefix_rewrite_keeps_the_query() {
        let mut policy = RoutePolicy::default();
        policy.edits.rewrite = Some(PathRewrite::Replace(PathChange::Prefix("/v2".into())));
        let mut scene = Scene::new(policy);
        scene.route_path(PathMatch::prefix("/v1"));
        let mut upstream = request("GET", "/v1/items?page=2");
        assert!(scene.on_upstream_request(&mut upstream).is_ok());
        assert_eq!(upstream.uri, "/v2/items?page=2");
    }
}
