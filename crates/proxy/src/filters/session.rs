//! Session affinity: a request whose session token (in a cookie, ingress-nginx's `affinity: cookie`, or in a header, an HTTPRoute rule's `sessionPersistence` of type `Header`) names an endpoint still serving goes there first; an answer from any other endpoint hands the client a token for it.

use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{response, HeaderName, HeaderValue};
use sluice_routing::{RoutePolicy, SameSite, SessionAffinity, StickyCookie};

use super::contract::{Filter, Flow, RequestContext};
use super::services::{boxed, RouteFilter, Services};
use crate::headers::request_cookie;

/// One primitive, two carriers of the token.
pub(crate) enum Session {
    Cookie(StickyCookie),
    Header(HeaderName),
}

impl Session {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        match policy.session.as_ref()? {
            SessionAffinity::Cookie(cookie) => boxed(Self::Cookie(cookie.clone())),
            SessionAffinity::Header(name) => {
                boxed(Self::Header(HeaderName::from_bytes(name.as_bytes()).ok()?))
            }
        }
    }
}

impl Filter<Services> for Session {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &Services,
    ) -> Flow {
        let token = match self {
            Self::Cookie(cookie) => request_cookie(&request.headers, &cookie.name),
            Self::Header(name) => request.headers.get(name).and_then(|v| v.to_str().ok()),
        };
        let (Some(target), Some(token)) = (&context.target, token) else {
            return Ok(());
        };
        let set = target.backend.endpoints().load();
        context.pinned = proxy.session_key.pinned(&set, token).cloned();
        Ok(())
    }

    fn on_response(
        &self,
        context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        proxy: &Services,
    ) {
        let Some(endpoint) = context.endpoint.as_ref() else {
            return;
        };
        if context.pinned.as_ref() == Some(endpoint) {
            return;
        }
        let token = proxy.session_key.value(endpoint);
        match self {
            Self::Cookie(cookie) => {
                if let Some(header) = set_cookie(cookie, &token) {
                    response.headers.append(http::header::SET_COOKIE, header);
                }
            }
            Self::Header(name) => {
                if let Ok(value) = HeaderValue::try_from(token) {
                    response.headers.insert(name.clone(), value);
                }
            }
        }
    }
}

/// The `Set-Cookie` header pinning a session to the endpoint whose cookie value is `value`.
pub(crate) fn set_cookie(cookie: &StickyCookie, value: &str) -> Option<HeaderValue> {
    let mut text = format!("{}={value}; Path={}", cookie.name, cookie.path);
    if let Some(domain) = &cookie.domain {
        text.push_str(&format!("; Domain={domain}"));
    }
    if let Some(max_age) = cookie.max_age {
        text.push_str(&format!("; Max-Age={max_age}"));
    }
    if let Some(expires) = cookie.expires {
        let at = SystemTime::now() + Duration::from_secs(expires);
        text.push_str(&format!("; Expires={}", httpdate::fmt_http_date(at)));
    }
    if cookie.secure {
        text.push_str("; Secure");
    }
    if cookie.http_only {
        text.push_str("; HttpOnly");
    }
    if let Some(same_site) = cookie.same_site {
        let name = match same_site {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        };
        text.push_str(&format!("; SameSite={name}"));
    }
    HeaderValue::try_from(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, response_head, Scene};

    #[test]
    fn set_cookie_carries_every_attribute() {
        let cookie = StickyCookie {
            domain: Some("example.com".into()),
            max_age: Some(60),
            expires: Some(60),
            secure: true,
            same_site: Some(SameSite::Lax),
            ..StickyCookie::named("route")
        };
        let header = set_cookie(&cookie, "00ff").expect("valid header");
        let text = header.to_str().expect("ascii");
        for part in [
            "route=00ff",
            "Path=/",
            "Domain=example.com",
            "Max-Age=60",
            "Expires=",
            "Secure",
            "HttpOnly",
            "SameSite=Lax",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
    }

    #[test]
    fn a_header_session_pins_the_next_request_to_the_endpoint_that_answered() {
        let policy = RoutePolicy {
            session: Some(SessionAffinity::Header("session-a".into())),
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        let pod = scene.endpoint(1);
        scene.answered_by(&pod);
        let mut head = response_head(200);
        scene.on_response(&mut head);
        let token = head.headers["session-a"]
            .to_str()
            .expect("ascii")
            .to_owned();
        let mut next = Scene::new(scene.policy.clone());
        let mut again = request("GET", "/");
        again
            .headers
            .insert("session-a", token.parse().expect("value"));
        assert!(next.on_request(&again).is_ok());
        assert_eq!(next.pinned(), Some(pod));
    }
}
