//! Redirects the proxy answers itself: `app-root`, a route's redirect (ingress-nginx's `temporal-redirect`/`permanent-redirect`, or an HTTPRoute `RequestRedirect`), and the HTTPS redirect (`ssl-redirect`, `force-ssl-redirect`).

use http::request::Parts;
use http::{HeaderValue, StatusCode};
use sluice_routing::{PathChange, Redirect, RedirectTo, RoutePolicy};

use super::contract::{Filter, Flow, LocalAnswer, RequestContext};
use super::services::{boxed, RouteFilter, Services};
use super::template::{fill, http_host, matched_prefix, scheme};
use crate::headers::host_without_port;

/// Answers with a redirect to `location`; a location a header cannot carry (a variable
/// filled in with bytes a header refuses) serves the route instead.
pub(crate) fn redirect(code: u16, location: String) -> Flow {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::FOUND);
    match HeaderValue::try_from(location) {
        Ok(location) => Err(LocalAnswer::redirect(status, location)),
        Err(_) => Ok(()),
    }
}

/// `app-root`: a request for exactly `/` gets 302 to the application's root, on the scheme
/// and Host the client used (nginx's `$scheme://$http_host`).
pub(crate) struct AppRoot(String);

impl AppRoot {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        boxed(Self(policy.edits.app_root.clone()?))
    }
}

impl Filter<Services> for AppRoot {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        if request.uri.path() != "/" {
            return Ok(());
        }
        let location = format!("{}://{}{}", scheme(context), http_host(context), self.0);
        redirect(StatusCode::FOUND.as_u16(), location)
    }
}

/// A route whose every request is answered with a redirect (`temporal-redirect`,
/// `permanent-redirect`, an HTTPRoute `RequestRedirect`): one primitive, its location written
/// as an nginx template or as the parts of the request's URL it changes.
pub(crate) struct RouteRedirect(Redirect);

impl RouteRedirect {
    /// A redirect written as a template (the location's `return`, before the HTTPS
    /// redirect).
    pub(crate) fn of_annotations(policy: &RoutePolicy) -> Option<RouteFilter> {
        let redirect = policy.edits.redirect.as_ref()?;
        matches!(redirect.to, RedirectTo::Template(_))
            .then(|| boxed(Self(redirect.clone())))
            .flatten()
    }

    /// A redirect written as parts (an HTTPRoute rule's, after its CORS filter).
    pub(crate) fn of_route_rule(policy: &RoutePolicy) -> Option<RouteFilter> {
        let redirect = policy.edits.redirect.as_ref()?;
        matches!(redirect.to, RedirectTo::Parts { .. })
            .then(|| boxed(Self(redirect.clone())))
            .flatten()
    }
}

impl Filter<Services> for RouteRedirect {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        let location = match &self.0.to {
            RedirectTo::Template(template) => fill(template, context, request),
            RedirectTo::Parts {
                scheme,
                hostname,
                port,
                path,
            } => {
                let parts = UrlParts {
                    scheme: scheme.as_deref(),
                    hostname: hostname.as_deref(),
                    port: *port,
                    path: path.as_ref(),
                };
                parts_location(&parts, context, request)
            }
        };
        redirect(self.0.code, location)
    }
}

/// The parts of the request's URL a `RequestRedirect` changes.
struct UrlParts<'a> {
    scheme: Option<&'a str>,
    hostname: Option<&'a str>,
    port: Option<u16>,
    path: Option<&'a PathChange>,
}

/// The `Location` of an HTTPRoute redirect: scheme, host and port as the filter sets them,
/// else the request's scheme and host and the listener's port. A filter that sets the scheme
/// and no port gets the scheme's well-known port, and a port that is its scheme's default is
/// left out, as the spec says.
fn parts_location(
    redirect: &UrlParts<'_>,
    context: &RequestContext<'_>,
    request: &Parts,
) -> String {
    let scheme = redirect.scheme.unwrap_or(scheme(context));
    let written_host = http_host(context);
    let host = redirect
        .hostname
        .unwrap_or_else(|| host_without_port(written_host));
    let port = match (redirect.port, redirect.scheme) {
        (Some(port), _) => Some(port),
        (None, Some(_)) => None,
        (None, None) => Some(context.connection.server.port()),
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let path = match redirect.path {
        Some(change) => change.apply(request.uri.path(), matched_prefix(context)),
        None => request.uri.path().to_owned(),
    };
    let query = request
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    match port.filter(|&port| port != default_port) {
        Some(port) => format!("{scheme}://{host}:{port}{path}{query}"),
        None => format!("{scheme}://{host}{path}{query}"),
    }
}

/// A plain-HTTP request for a host with a TLS entry (or any host, forced) gets a 308 to
/// `https://`, as ingress-nginx's `ssl-redirect` and `force-ssl-redirect` do. ACME HTTP-01
/// challenges are exempt, and so is a request a trusted proxy says arrived over HTTPS.
pub(crate) struct HttpsRedirect {
    force: bool,
}

const ACME_CHALLENGE: &str = "/.well-known/acme-challenge/";

impl HttpsRedirect {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let tls = &policy.tls;
        (tls.ssl_redirect || tls.force_ssl_redirect)
            .then(|| {
                boxed(Self {
                    force: tls.force_ssl_redirect,
                })
            })
            .flatten()
    }
}

impl Filter<Services> for HttpsRedirect {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &Services,
    ) -> Flow {
        if context.connection.over_tls || context.forwarded_https {
            return Ok(());
        }
        let port = match (self.force, proxy.https_redirect_port) {
            (_, Some(port)) if self.force || context.host_has_tls => port,
            (true, None) => 443,
            _ => return Ok(()),
        };
        if request.uri.path().starts_with(ACME_CHALLENGE) {
            return Ok(());
        }
        let host = host_without_port(context.host.to_str().unwrap_or_default());
        let target = request
            .uri
            .path_and_query()
            .map_or("/", |target| target.as_str());
        let location = if port == 443 {
            format!("https://{host}{target}")
        } else {
            format!("https://{host}:{port}{target}")
        };
        redirect(StatusCode::PERMANENT_REDIRECT.as_u16(), location)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, Scene};

    #[test]
    fn app_root_redirects_only_the_root() {
        let mut policy = RoutePolicy::default();
        policy.edits.app_root = Some("/app".into());
        let mut scene = Scene::new(policy);
        scene.host("shop.example.com:8080");
        assert!(scene.on_request(&request("GET", "/other")).is_ok());
        let answer = scene
            .on_request(&request("GET", "/"))
            .expect_err("redirected");
        assert_eq!(answer.status, StatusCode::FOUND);
        assert_eq!(
            answer.headers["location"],
            "http://shop.example.com:8080/app"
        );
    }

    #[test]
    fn https_redirect_keeps_the_target_and_spares_acme_challenges() {
        let mut policy = RoutePolicy::default();
        policy.tls.force_ssl_redirect = true;
        let mut scene = Scene::new(policy);
        scene.host("shop.example.com");
        let answer = scene
            .on_request(&request("GET", "/cart?id=1"))
            .expect_err("redirected");
        assert_eq!(answer.status, StatusCode::PERMANENT_REDIRECT);
        assert_eq!(
            answer.headers["location"],
            "https://shop.example.com/cart?id=1"
        );
        let challenge = request("GET", "/.well-known/acme-challenge/token");
        assert!(scene.on_request(&challenge).is_ok());
        scene.over_tls();
        assert!(scene.on_request(&request("GET", "/cart")).is_ok());
    }

    #[test]
    fn a_gateway_redirect_changes_only_what_it_names() {
        let mut policy = RoutePolicy::default();
        policy.edits.redirect = Some(Redirect {
            code: 301,
            to: RedirectTo::Parts {
                scheme: Some("https".into()),
                hostname: None,
                port: None,
                path: None,
            },
        });
        let mut scene = Scene::new(policy);
        scene.host("example.org:8080");
        let answer = scene
            .on_request(&request("GET", "/a?b=c"))
            .expect_err("redirected");
        assert_eq!(answer.status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(answer.headers["location"], "https://example.org/a?b=c");
    }
}
