//! CORS under ingress-nginx's or Gateway API's rules ([`CorsRules`]): an allowed origin's preflight is answered by the proxy with 204 and never reaches a pod, and the route's other responses to an allowed origin carry the `Access-Control-*` headers; any other origin gets none, and under Gateway API's rules its preflight is answered too.

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN,
};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, Method, StatusCode};
use sluice_routing::{Cors, CorsRules, RoutePolicy};

use super::contract::{Filter, Flow, LocalAnswer, RequestContext};
use super::services::{boxed, RouteFilter, Services};

/// A route's CORS settings with their header values built once.
pub(crate) struct CorsFilter {
    cors: Cors,
    /// Every `Access-Control-*` header but the origin, the same for every request.
    fixed: HeaderMap,
}

/// The `Access-Control-Allow-Origin` a response to an allowed origin gets (the CORS filter's
/// per-request slot).
struct AllowedOrigin(HeaderValue);

impl CorsFilter {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        boxed(Self::new(policy.cors.as_ref()?))
    }

    fn new(cors: &Cors) -> Self {
        let mut fixed = HeaderMap::new();
        let mut put = |name, text: &str| {
            if let Ok(value) = HeaderValue::from_str(text) {
                fixed.insert(name, value);
            }
        };
        if cors.allow_credentials {
            put(ACCESS_CONTROL_ALLOW_CREDENTIALS, "true");
        }
        put(ACCESS_CONTROL_ALLOW_METHODS, &cors.allow_methods);
        put(ACCESS_CONTROL_ALLOW_HEADERS, &cors.allow_headers);
        if let Some(expose) = &cors.expose_headers {
            put(ACCESS_CONTROL_EXPOSE_HEADERS, expose);
        }
        put(ACCESS_CONTROL_MAX_AGE, &cors.max_age.to_string());
        Self {
            cors: cors.clone(),
            fixed,
        }
    }

    /// The `Access-Control-Allow-Origin` for a request from `origin`, when it is allowed.
    fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        match &self.cors.origins {
            None if self.gateway_api() && self.cors.allow_credentials => Some(origin.clone()),
            None => Some(HeaderValue::from_static("*")),
            Some(patterns) => {
                let text = origin.to_str().ok()?;
                patterns
                    .iter()
                    .any(|pattern| pattern.matches(text, self.cors.rules))
                    .then(|| origin.clone())
            }
        }
    }

    /// A `*` allowed method or header list answers a preflight with the method and headers
    /// the preflight asked for.
    fn echo_requested(&self, request: &HeaderMap, headers: &mut HeaderMap) {
        let echoes = [
            (
                &self.cors.allow_methods,
                ACCESS_CONTROL_REQUEST_METHOD,
                ACCESS_CONTROL_ALLOW_METHODS,
            ),
            (
                &self.cors.allow_headers,
                ACCESS_CONTROL_REQUEST_HEADERS,
                ACCESS_CONTROL_ALLOW_HEADERS,
            ),
        ];
        for (allowed, asked, answer) in echoes {
            if allowed.split(',').any(|item| item.trim() == "*") {
                if let Some(value) = request.get(&asked) {
                    headers.insert(answer, value.clone());
                }
            }
        }
    }

    fn gateway_api(&self) -> bool {
        self.cors.rules == CorsRules::GatewayApi
    }

    /// Whether the proxy answers this request itself: under ingress-nginx's rules any
    /// `OPTIONS` from an allowed origin; under Gateway API's a preflight (`OPTIONS` with
    /// `Origin` and `Access-Control-Request-Method`), whatever its origin.
    fn answers(&self, request: &Parts, allowed: bool) -> bool {
        if request.method != Method::OPTIONS {
            return false;
        }
        match self.cors.rules {
            CorsRules::IngressNginx => allowed,
            CorsRules::GatewayApi => {
                request.headers.contains_key(ORIGIN)
                    && request.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
            }
        }
    }

    fn headers_for(&self, allow_origin: HeaderValue) -> HeaderMap {
        let mut headers = self.fixed.clone();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        headers
    }
}

/// The 204 the proxy answers a preflight with.
fn preflight(headers: HeaderMap) -> Box<LocalAnswer> {
    LocalAnswer::text(StatusCode::NO_CONTENT, "").with_headers(&headers)
}

impl Filter<Services> for CorsFilter {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        let allow_origin = request
            .headers
            .get(ORIGIN)
            .and_then(|origin| self.allow_origin(origin));
        if self.answers(request, allow_origin.is_some()) {
            let Some(allow_origin) = allow_origin else {
                // An origin not allowed: answered, with nothing that would let it in.
                return Err(preflight(HeaderMap::new()));
            };
            let mut headers = self.headers_for(allow_origin);
            if self.gateway_api() {
                self.echo_requested(&request.headers, &mut headers);
            }
            return Err(preflight(headers));
        }
        if let Some(origin) = allow_origin {
            context.slots.insert(AllowedOrigin(origin));
        }
        Ok(())
    }

    fn on_response(
        &self,
        context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        _: &Services,
    ) {
        if let Some(AllowedOrigin(allow_origin)) = context.slots.get() {
            for (name, value) in &self.headers_for(allow_origin.clone()) {
                response.headers.insert(name.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, response_head, Scene};
    use sluice_routing::OriginPattern;

    fn cors(origins: &[&str], rules: CorsRules) -> RoutePolicy {
        RoutePolicy {
            cors: Some(Cors {
                origins: Some(
                    origins
                        .iter()
                        .map(|o| OriginPattern::parse(o).expect("origin"))
                        .collect(),
                ),
                allow_methods: "GET, POST".into(),
                allow_headers: "*".into(),
                expose_headers: None,
                allow_credentials: false,
                max_age: 60,
                rules,
            }),
            ..RoutePolicy::default()
        }
    }

    fn preflight_from(origin: &str) -> Parts {
        let mut parts = request("OPTIONS", "/");
        parts
            .headers
            .insert("origin", origin.parse().expect("origin"));
        parts.headers.insert(
            "access-control-request-method",
            "POST".parse().expect("method"),
        );
        parts.headers.insert(
            "access-control-request-headers",
            "x-custom".parse().expect("headers"),
        );
        parts
    }

    #[test]
    fn an_allowed_origins_preflight_is_answered_and_its_later_answers_carry_the_origin() {
        let mut scene = Scene::new(cors(&["https://app.example.com"], CorsRules::IngressNginx));
        let answer = scene
            .on_request(&preflight_from("https://app.example.com"))
            .expect_err("answered");
        assert_eq!(answer.status, StatusCode::NO_CONTENT);
        assert_eq!(
            answer.headers["access-control-allow-origin"],
            "https://app.example.com"
        );
        let mut get = request("GET", "/");
        get.headers
            .insert("origin", "https://app.example.com".parse().expect("origin"));
        let mut scene = Scene::new(scene.policy.clone());
        assert!(scene.on_request(&get).is_ok());
        let mut head = response_head(200);
        scene.on_response(&mut head);
        assert_eq!(
            head.headers["access-control-allow-origin"],
            "https://app.example.com"
        );
    }

    #[test]
    fn a_disallowed_preflight_reaches_the_pod_under_nginx_rules_and_is_answered_under_gateway_rules(
    ) {
        let mut nginx = Scene::new(cors(&["https://*.bar.com"], CorsRules::IngressNginx));
        let deep = preflight_from("https://xpto.www.bar.com");
        assert!(
            nginx.on_request(&deep).is_ok(),
            "a one-label wildcard under nginx rules"
        );
        let mut gateway = Scene::new(cors(&["https://*.bar.com"], CorsRules::GatewayApi));
        let answer = gateway.on_request(&deep).expect_err("answered");
        assert_eq!(
            answer.headers["access-control-allow-origin"],
            "https://xpto.www.bar.com"
        );
        assert_eq!(answer.headers["access-control-allow-headers"], "x-custom");
        let other = gateway
            .on_request(&preflight_from("https://evil.example"))
            .expect_err("answered");
        assert_eq!(other.status, StatusCode::NO_CONTENT);
        assert!(other.headers.get("access-control-allow-origin").is_none());
    }
}
