//! HSTS: `Strict-Transport-Security` on responses sent over TLS, never over plain HTTP, which RFC 6797 §7.2 forbids.

use http::{response, HeaderValue};
use sluice_routing::RoutePolicy;

use super::contract::{Filter, RequestContext};
use super::services::{boxed, RouteFilter, Services};

pub(crate) struct Hsts(HeaderValue);

impl Hsts {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let value = policy.tls.hsts.as_deref()?;
        boxed(Self(HeaderValue::from_str(value).ok()?))
    }
}

impl Filter<Services> for Hsts {
    fn on_response(
        &self,
        context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        _: &Services,
    ) {
        if context.connection.over_tls {
            response
                .headers
                .insert(http::header::STRICT_TRANSPORT_SECURITY, self.0.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{response_head, Scene};

    #[test]
    fn only_answers_over_tls_carry_hsts() {
        let mut policy = RoutePolicy::default();
        policy.tls.hsts = Some("max-age=31536000".into());
        let mut scene = Scene::new(policy);
        let mut head = response_head(200);
        scene.on_response(&mut head);
        assert!(head.headers.get("strict-transport-security").is_none());
        scene.over_tls();
        scene.on_response(&mut head);
        assert_eq!(
            head.headers["strict-transport-security"],
            "max-age=31536000"
        );
    }
}
