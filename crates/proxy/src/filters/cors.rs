//! CORS under ingress-nginx's or Gateway API's rules ([`CorsRules`]): an allowed origin's preflight is answered by the proxy with 204 and never reaches a pod, and the route's other responses to an allowed origin carry the `Access-Control-*` headers; any other origin gets none, and under Gateway API's rules its preflight is answered too.

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN,
};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, Method};
use sluice_routing::{Cors, CorsRules};

use crate::error::ProxyError;
use crate::filters::{Filter, ProxyScope, RequestContext};

/// A route's CORS settings with their header values built once.
pub(crate) struct CorsFilter {
    cors: Cors,
    /// Every `Access-Control-*` header but the origin, the same for every request.
    fixed: HeaderMap,
}

impl CorsFilter {
    pub(crate) fn new(cors: &Cors) -> Self {
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

impl Filter for CorsFilter {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        let allow_origin = request
            .headers
            .get(ORIGIN)
            .and_then(|origin| self.allow_origin(origin));
        if self.answers(request, allow_origin.is_some()) {
            let Some(allow_origin) = allow_origin else {
                // An origin not allowed: answered, with nothing that would let it in.
                return Err(ProxyError::Preflight(Box::default()));
            };
            let mut headers = self.headers_for(allow_origin);
            if self.gateway_api() {
                self.echo_requested(&request.headers, &mut headers);
            }
            return Err(ProxyError::Preflight(Box::new(headers)));
        }
        context.cors_origin = allow_origin;
        Ok(())
    }

    fn on_response(
        &self,
        context: &RequestContext<'_>,
        response: &mut response::Parts,
        _proxy: &ProxyScope<'_>,
    ) {
        if let Some(allow_origin) = &context.cors_origin {
            for (name, value) in &self.headers_for(allow_origin.clone()) {
                response.headers.insert(name.clone(), value.clone());
            }
        }
    }
}
