//! External auth (`auth-url`): nginx's `auth_request` subrequest to an auth service such as oauth2-proxy, its answer's headers, the sign-in redirect, and the answer cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{SET_COOKIE, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::Full;
use sluice_routing::{ExternalAuth, RoutePolicy, Variable};

use super::contract::{LocalAnswer, RequestContext};
use super::grant::{auth_denied, auth_failed, Grant};
use super::services::Services;
use super::template::{escape, fill, http_host, pass_access_scheme, request_uri, scheme};
use crate::headers::headers_for_copy;

/// How long the auth service may take when the route sets no `proxy-read-timeout` (nginx's
/// default `proxy_read_timeout`).
const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(60);
/// The most answers one route keeps; when full, expired answers go, then all.
const MAX_CACHED_ANSWERS: usize = 10_000;

/// The auth service's answer, kept to what the decision and the grant use.
#[derive(Clone, Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
}

/// A route's external auth: the settings, the timeout, and the answer cache.
pub(crate) struct ExternalCheck {
    auth: ExternalAuth,
    timeout: Duration,
    copied: Vec<HeaderName>,
    /// The answer cache, the runtime's for this route and these settings (found once).
    cache: OnceLock<Arc<AnswerCache>>,
}

/// Answers kept by their cache key, with when each expires.
type AnswerCache = Mutex<HashMap<String, (Instant, Answer)>>;

impl ExternalCheck {
    pub(crate) fn new(auth: ExternalAuth, policy: &RoutePolicy) -> Self {
        let copied = auth
            .response_headers
            .iter()
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
            .collect();
        Self {
            auth,
            timeout: policy.timeouts.read.unwrap_or(DEFAULT_AUTH_TIMEOUT),
            copied,
            cache: OnceLock::new(),
        }
    }

    /// Asks the auth service (or the cache) about the request, and decides as nginx's
    /// `auth_request` does.
    pub(crate) async fn check(
        &self,
        context: &RequestContext<'_>,
        request: &Parts,
        services: &Services,
    ) -> Result<Grant, Box<LocalAnswer>> {
        let key = self
            .auth
            .cache
            .as_ref()
            .map(|cache| fill(&cache.key, context, request));
        let cache = self.cache.get_or_init(|| {
            let route = context
                .target
                .map(|target| target.ingress)
                .unwrap_or_default();
            services.state(&format!("{route} {:?}", self.auth), AnswerCache::default)
        });
        let cached = key.as_deref().and_then(|key| Self::cached(cache, key));
        let answer = match cached {
            Some(answer) => answer,
            None => {
                let answer = self.ask(context, request, services).await?;
                if let Some(key) = key {
                    self.remember(cache, key, &answer);
                }
                answer
            }
        };
        self.decide(answer, context, request)
    }

    fn decide(
        &self,
        answer: Answer,
        context: &RequestContext<'_>,
        request: &Parts,
    ) -> Result<Grant, Box<LocalAnswer>> {
        let cookies: Vec<HeaderValue> =
            answer.headers.get_all(SET_COOKIE).iter().cloned().collect();
        if answer.status.is_success() {
            let upstream_headers = self
                .copied
                .iter()
                .map(|name| (name.clone(), answer.headers.get(name).cloned()))
                .collect();
            return Ok(Grant {
                upstream_headers,
                cookies,
                cookies_always: self.auth.always_set_cookie,
            });
        }
        if answer.status == StatusCode::UNAUTHORIZED {
            if let Some(signin) = &self.auth.signin {
                let location = self.signin_location(signin, context, request);
                if let Ok(location) = HeaderValue::try_from(location) {
                    return Err(LocalAnswer::redirect(StatusCode::FOUND, location));
                }
            }
        }
        if answer.status == StatusCode::UNAUTHORIZED || answer.status == StatusCode::FORBIDDEN {
            let mut headers = HeaderMap::new();
            if let Some(challenge) = answer.headers.get(WWW_AUTHENTICATE) {
                headers.insert(WWW_AUTHENTICATE, challenge.clone());
            }
            if self.auth.always_set_cookie {
                for cookie in cookies {
                    headers.append(SET_COOKIE, cookie);
                }
            }
            return Err(auth_denied(answer.status, &headers));
        }
        tracing::warn!(status = %answer.status, "the auth service answered neither 2xx, 401 nor 403: 500");
        Err(auth_failed())
    }

    /// `auth-signin`, with the URL the client asked for under the redirect parameter unless
    /// the sign-in URL sets that parameter itself (ingress-nginx's `buildAuthSignURL`).
    fn signin_location(
        &self,
        signin: &[Variable],
        context: &RequestContext<'_>,
        request: &Parts,
    ) -> String {
        let mut location = fill(signin, context, request);
        let param = &self.auth.signin_redirect_param;
        let query = location.split_once('?').map(|(_, query)| query);
        let has_param = query.is_some_and(|query| {
            query.split('&').any(|pair| {
                pair.split_once('=')
                    .is_some_and(|(name, value)| name == param && !value.is_empty())
            })
        });
        if !has_param {
            let separator = if query.is_some() { '&' } else { '?' };
            let original = format!(
                "{}://{}{}",
                pass_access_scheme(context),
                http_host(context),
                escape(request_uri(request))
            );
            location.push(separator);
            location.push_str(param);
            location.push('=');
            location.push_str(&original);
        }
        location
    }

    fn cached(cache: &AnswerCache, key: &str) -> Option<Answer> {
        let cache = cache.lock().ok()?;
        let (expires, answer) = cache.get(key)?;
        (*expires > Instant::now()).then(|| answer.clone())
    }

    fn remember(&self, cache: &AnswerCache, key: String, answer: &Answer) {
        let Some(settings) = &self.auth.cache else {
            return;
        };
        if !settings.statuses.contains(&answer.status.as_u16()) {
            return;
        }
        let Ok(mut cache) = cache.lock() else {
            return;
        };
        let now = Instant::now();
        if cache.len() >= MAX_CACHED_ANSWERS {
            cache.retain(|_, (expires, _)| *expires > now);
            if cache.len() >= MAX_CACHED_ANSWERS {
                cache.clear();
            }
        }
        cache.insert(key, (now + settings.duration, answer.clone()));
    }

    /// The subrequest: the request's headers without its body, the original method and URL
    /// in `X-Original-*`, within the timeout. No answer, or a broken one, is a 500.
    async fn ask(
        &self,
        context: &RequestContext<'_>,
        request: &Parts,
        services: &Services,
    ) -> Result<Answer, Box<LocalAnswer>> {
        let client = services.outbound.get().map_err(|error| {
            tracing::warn!(%error, "no client for the auth service");
            auth_failed()
        })?;
        let url = fill(&self.auth.url, context, request);
        let uri = Uri::try_from(url.as_str()).map_err(|_| auth_failed())?;
        let method = self
            .auth
            .method
            .as_deref()
            .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
            .unwrap_or(Method::GET);
        let mut subrequest = Request::new(Full::new(Bytes::new()));
        *subrequest.method_mut() = method;
        *subrequest.headers_mut() = self.subrequest_headers(&uri, context, request);
        *subrequest.uri_mut() = uri;
        let sent = tokio::time::timeout(self.timeout, client.request(subrequest)).await;
        match sent {
            Ok(Ok(response)) => Ok(Answer {
                status: response.status(),
                headers: response.headers().clone(),
            }),
            Ok(Err(error)) => {
                tracing::warn!(%error, url, "the auth service could not be reached: 500");
                Err(auth_failed())
            }
            Err(_) => {
                tracing::warn!(url, timeout = ?self.timeout, "the auth service did not answer in time: 500");
                Err(auth_failed())
            }
        }
    }

    fn subrequest_headers(
        &self,
        uri: &Uri,
        context: &RequestContext<'_>,
        request: &Parts,
    ) -> HeaderMap {
        let mut headers = headers_for_copy(&request.headers);
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        let original_url = format!(
            "{}://{}{}",
            scheme(context),
            http_host(context),
            request_uri(request)
        );
        let redirect = match &self.auth.request_redirect {
            Some(template) => fill(template, context, request),
            None => request_uri(request).to_owned(),
        };
        set("x-original-url", original_url);
        set("x-original-method", request.method.to_string());
        set("x-auth-request-redirect", redirect);
        set("x-sent-from", "sluice".to_owned());
        set("x-real-ip", context.real_client.to_string());
        set("x-forwarded-for", context.real_client.to_string());
        set("x-forwarded-host", http_host(context).to_owned());
        set(
            "x-request-id",
            context.request_id.to_str().unwrap_or_default().to_owned(),
        );
        if let Some(authority) = uri.authority() {
            set("host", authority.as_str().to_owned());
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use std::net::{IpAddr, Ipv4Addr};

    use http::header::COOKIE;
    use sluice_routing::{AccessControl, AuthCache};
    use sluice_testkit::start_auth_service;

    use super::*;
    use crate::filters::testing::{request, response_head, Scene};

    fn policy(url: &str, cached: bool) -> RoutePolicy {
        RoutePolicy {
            access: AccessControl {
                external: Some(ExternalAuth {
                    url: vec![Variable::Text(url.to_owned())],
                    method: None,
                    signin: None,
                    signin_redirect_param: "rd".into(),
                    response_headers: vec!["x-auth-request-user".into()],
                    request_redirect: None,
                    cache: cached.then(|| AuthCache {
                        key: vec![Variable::Cookie("_oauth2_proxy".into())],
                        statuses: vec![202, 401],
                        duration: Duration::from_secs(300),
                    }),
                    always_set_cookie: false,
                }),
                ..AccessControl::default()
            },
            ..RoutePolicy::default()
        }
    }

    fn signed_in(user: &str) -> Parts {
        let mut parts = request("GET", "/orders?page=2");
        let cookie = format!("_oauth2_proxy={user}");
        parts
            .headers
            .insert(COOKIE, cookie.parse().expect("a cookie"));
        parts
    }

    #[test]
    fn the_auth_services_answer_admits_refuses_and_hands_on_its_headers_and_cookies() {
        let servers = tokio::runtime::Runtime::new().expect("a runtime");
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 9, 20));
        let service = servers
            .block_on(start_auth_service(ip))
            .expect("the auth service");
        let url = format!("http://{}/oauth2/auth", service.addr());
        let mut scene = Scene::new(policy(&url, false));
        let refused = scene
            .on_access(&request("GET", "/"))
            .expect_err("no session");
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.headers[WWW_AUTHENTICATE], "Bearer realm=\"oauth2\"");
        let banned = scene.on_access(&signed_in("banned")).expect_err("banned");
        assert_eq!(banned.status, StatusCode::FORBIDDEN);
        let ana = signed_in("ana");
        assert!(scene.on_access(&ana).is_ok());
        let mut upstream = ana.clone();
        assert!(scene.on_upstream_request(&mut upstream).is_ok());
        assert_eq!(upstream.headers["x-auth-request-user"], "ana");
        let mut head = response_head(200);
        scene.on_log(&mut head);
        let cookie = head.headers[SET_COOKIE].to_str().expect("ascii");
        assert!(cookie.starts_with("_oauth2_proxy=ana"), "{cookie}");
        let asked = service.requests();
        assert_eq!(asked.len(), 3);
        let head = asked[2].head.to_ascii_lowercase();
        assert!(
            head.contains("\r\nx-original-url: http://example.com/orders?page=2\r\n"),
            "{head}"
        );
    }

    #[test]
    fn a_cached_answer_outlives_a_recompile_and_spares_the_auth_service() {
        let servers = tokio::runtime::Runtime::new().expect("a runtime");
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 9, 21));
        let service = servers
            .block_on(start_auth_service(ip))
            .expect("the auth service");
        let url = format!("http://{}/oauth2/auth", service.addr());
        let mut scene = Scene::new(policy(&url, true));
        assert!(scene.on_access(&signed_in("ana")).is_ok());
        let mut recompiled = policy(&url, true);
        recompiled.max_body_size = Some(1);
        let mut next = Scene::new(recompiled);
        next.services.runtime = scene.services.runtime.clone();
        assert!(next.on_access(&signed_in("ana")).is_ok());
        assert_eq!(
            service.requests().len(),
            1,
            "the second answer came from the cache"
        );
    }
}
