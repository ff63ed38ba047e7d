//! ingress-nginx cookie affinity: `affinity: cookie` and the `session-cookie-*` attributes.

use sluice_routing::{SameSite, StickyCookie};

use super::keys::{PolicyKeys, Setting};
use super::values::{
    parse_bool, parse_cookie_domain, parse_cookie_name, parse_cookie_path, parse_positive_seconds,
    parse_same_site, Report,
};

const BOOLEAN: &str = "\"true\" or \"false\"";
const SECONDS: &str = "a whole number of seconds above 0";

/// The sticky cookie `affinity: cookie` asks for, or `None`. Without it, every session-cookie
/// attribute is reported as ignored.
pub(crate) fn sticky_cookie(
    keys: &PolicyKeys<'_>,
    report: &mut Report<'_>,
) -> Option<StickyCookie> {
    let cookie = report.parse(
        keys.get(Setting::Affinity),
        "\"cookie\"",
        "no session affinity",
        |value| value.eq_ignore_ascii_case("cookie").then_some(()),
    );
    if cookie.is_none() {
        for found in Setting::COOKIE_ATTRIBUTES
            .into_iter()
            .filter_map(|n| keys.get(n))
        {
            report.warning(found, "ignored: only used with affinity: cookie");
        }
        return None;
    }
    Some(cookie_attributes(keys, report))
}

fn cookie_attributes(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> StickyCookie {
    let name = report.parse(
        keys.get(Setting::SessionCookieName),
        "a cookie name (visible ASCII without separators)",
        "INGRESSCOOKIE is used",
        parse_cookie_name,
    );
    let mut cookie =
        StickyCookie::named(name.unwrap_or_else(|| StickyCookie::DEFAULT_NAME.to_owned()));
    let path = keys.get(Setting::SessionCookiePath);
    if let Some(path) = report.parse(
        path,
        "a path starting with /",
        "/ is used",
        parse_cookie_path,
    ) {
        cookie.path = path;
    }
    let domain = keys.get(Setting::SessionCookieDomain);
    cookie.domain = report.parse(domain, "a DNS name", "no Domain", parse_cookie_domain);
    let max_age = keys.get(Setting::SessionCookieMaxAge);
    cookie.max_age = report.parse(max_age, SECONDS, "no Max-Age", parse_positive_seconds);
    let expires = keys.get(Setting::SessionCookieExpires);
    cookie.expires = report.parse(expires, SECONDS, "no Expires", parse_positive_seconds);
    let secure = keys.get(Setting::SessionCookieSecure);
    cookie.secure = report
        .parse(secure, BOOLEAN, "not Secure", parse_bool)
        .unwrap_or(false);
    let same_site = keys.get(Setting::SessionCookieSameSite);
    cookie.same_site = report.parse(
        same_site,
        "None, Lax or Strict",
        "no SameSite",
        parse_same_site,
    );
    if let (Some(SameSite::None), false, Some(found)) = (cookie.same_site, cookie.secure, same_site)
    {
        report.warning(
            found,
            "SameSite=None without session-cookie-secure: \"true\"; browsers reject such a cookie",
        );
    }
    accepted_as_known(keys, report);
    cookie
}

/// `affinity-mode` and `session-cookie-change-on-failure` need no setting: sluice always
/// rebalances a session whose endpoint is gone and rewrites the cookie after a failure. Only an
/// invalid value is reported.
fn accepted_as_known(keys: &PolicyKeys<'_>, report: &mut Report<'_>) {
    report.parse(
        keys.get(Setting::AffinityMode),
        "balanced or persistent",
        "ignored",
        |value| matches!(value, "balanced" | "persistent").then_some(()),
    );
    let change = keys.get(Setting::SessionCookieChangeOnFailure);
    report.parse(change, BOOLEAN, "ignored", parse_bool);
}
