//! Traefik's sticky-cookie Service annotations, parsed into the sticky cookie of every route to that Service.

use sluice_routing::StickyCookie;

use super::values::{
    parse_bool, parse_cookie_name, parse_cookie_path, parse_same_site, stable_hash, Found, Report,
};
use super::Annotations;

/// Turns a sticky cookie on for every route to the Service.
pub const STICKY_COOKIE: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie";
const NAME: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.name";
const SECURE: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.secure";
const HTTP_ONLY: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.httponly";
const SAME_SITE: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.samesite";
const MAX_AGE: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.maxage";
const PATH: &str = "traefik.ingress.kubernetes.io/service.sticky.cookie.path";

/// Every sticky-cookie annotation sluice reads on a Service.
pub(crate) const STICKY_KEYS: [&str; 7] = [
    STICKY_COOKIE,
    NAME,
    SECURE,
    HTTP_ONLY,
    SAME_SITE,
    MAX_AGE,
    PATH,
];

const BOOLEAN: &str = "\"true\" or \"false\"";

/// The sticky cookie a Service's annotations ask for, or `None`. Without
/// `service.sticky.cookie: "true"`, every other sticky annotation is reported as ignored.
pub(crate) fn service_sticky(
    annotations: &Annotations,
    namespace: &str,
    service: &str,
    report: &mut Report<'_>,
) -> Option<StickyCookie> {
    let get = |key: &'static str| {
        annotations.get(key).map(|value| Found {
            key,
            value: value.as_str(),
        })
    };
    let enabled = report
        .parse(get(STICKY_COOKIE), BOOLEAN, "treated as false", parse_bool)
        .unwrap_or(false);
    if !enabled {
        for found in STICKY_KEYS[1..].iter().filter_map(|key| get(key)) {
            report.warning(found, format!("ignored: {STICKY_COOKIE} is not \"true\""));
        }
        return None;
    }
    let name = report
        .parse(
            get(NAME),
            "a cookie name (visible ASCII without separators)",
            "the default name is used",
            parse_cookie_name,
        )
        .unwrap_or_else(|| default_name(namespace, service));
    let mut cookie = StickyCookie::named(name);
    cookie.secure = report
        .parse(get(SECURE), BOOLEAN, "not Secure", parse_bool)
        .unwrap_or(false);
    cookie.http_only = report
        .parse(get(HTTP_ONLY), BOOLEAN, "not HttpOnly", parse_bool)
        .unwrap_or(false);
    cookie.same_site = report.parse(
        get(SAME_SITE),
        "none, lax or strict",
        "no SameSite",
        parse_same_site,
    );
    cookie.max_age = report
        .parse(
            get(MAX_AGE),
            "a whole number of seconds (0: none)",
            "no Max-Age",
            |value| {
                value
                    .parse::<u64>()
                    .ok()
                    .map(|seconds| Some(seconds).filter(|s| *s > 0))
            },
        )
        .flatten();
    if let Some(path) = report.parse(
        get(PATH),
        "a path starting with /",
        "/ is used",
        parse_cookie_path,
    ) {
        cookie.path = path;
    }
    Some(cookie)
}

/// `_sluice_` and 12 hex digits of a stable hash of `namespace/service`: the same on every
/// replica and every release, and different for two Services on one host.
pub fn default_name(namespace: &str, service: &str) -> String {
    let hash = stable_hash(&format!("{namespace}/{service}"));
    format!("_sluice_{:012x}", hash >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_stable_and_per_service() {
        let web = default_name("default", "web");
        assert_eq!(web, default_name("default", "web"));
        assert_ne!(web, default_name("default", "api"));
        assert_eq!(web.len(), "_sluice_".len() + 12);
    }
}
