//! `auth-url` and its companions (external auth), `auth-type` with `auth-secret` and `auth-realm` (basic and digest), `satisfy`, and `mirror-target`, which shares external auth's URL templates.

use std::time::Duration;

use sluice_routing::{AccessControl, AuthCache, ExternalAuth, Mirror};

use super::keys::{PolicyKeys, Setting};
use super::template::{absolute_url, parse_template, template, unknown_variable};
use super::values::{parse_bool, Found, Report};

/// The Secret `auth-secret` names, read by the compile: `namespace/name` (or a name in the
/// Ingress's namespace), and how its users are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSecret {
    pub namespace: String,
    pub name: String,
    /// `auth-secret-type: auth-map`: one key per user, the hash as its value; otherwise an
    /// htpasswd (or htdigest) file under the key `auth`.
    pub map: bool,
    /// `auth-type: digest`.
    pub digest: bool,
    pub realm: String,
    /// The diagnostic field naming `auth-secret`.
    pub field: String,
}

/// ingress-nginx's default for `auth-realm`.
const DEFAULT_REALM: &str = "Authentication Required";

/// Reads the access annotations: the external auth (in the result), and the Secret of basic
/// or digest auth, which the compile reads. An auth annotation that cannot be honoured makes
/// the route refuse every request (`unavailable`) rather than let anyone in.
pub(crate) fn access_control(
    keys: &PolicyKeys<'_>,
    namespace: &str,
    report: &mut Report<'_>,
) -> (AccessControl, Option<AuthSecret>) {
    let mut access = AccessControl {
        satisfy_any: report
            .parse(
                keys.get(Setting::Satisfy),
                "any or all",
                "all is used",
                |value| match value {
                    "any" => Some(true),
                    "all" => Some(false),
                    _ => None,
                },
            )
            .unwrap_or(false),
        ..AccessControl::default()
    };
    if let Some(found) = keys.get(Setting::AuthUrl) {
        match external_auth(found, keys, report) {
            Some(external) => access.external = Some(external),
            None => access.unavailable = true,
        }
    }
    let secret = basic_secret(keys, namespace, report, &mut access);
    (access, secret)
}

fn basic_secret(
    keys: &PolicyKeys<'_>,
    namespace: &str,
    report: &mut Report<'_>,
    access: &mut AccessControl,
) -> Option<AuthSecret> {
    let auth_type = keys.get(Setting::AuthType)?;
    let digest = match auth_type.value.trim() {
        "basic" => false,
        "digest" => true,
        other => {
            let message = format!("invalid value {other:?}: expected basic or digest; every request to the Ingress is refused (503) until it is fixed");
            report.error(auth_type, message);
            access.unavailable = true;
            return None;
        }
    };
    let Some(found) = keys.get(Setting::AuthSecret) else {
        report.error(auth_type, "auth-type is set but auth-secret names no Secret; every request to the Ingress is refused (503) until it is fixed");
        access.unavailable = true;
        return None;
    };
    let (secret_namespace, name) = match found.value.trim().split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (namespace.to_owned(), found.value.trim().to_owned()),
    };
    let map = keys
        .get(Setting::AuthSecretType)
        .is_some_and(|found| found.value.trim() == "auth-map");
    let realm = keys
        .get(Setting::AuthRealm)
        .map_or(DEFAULT_REALM, |found| found.value.trim())
        .to_owned();
    Some(AuthSecret {
        namespace: secret_namespace,
        name,
        map,
        digest,
        realm,
        field: found.field(),
    })
}

fn external_auth(
    url: Found<'_>,
    keys: &PolicyKeys<'_>,
    report: &mut Report<'_>,
) -> Option<ExternalAuth> {
    let refuse = "every request to the Ingress is refused (503) until it is fixed";
    let parsed_url = match parse_template(url.value.trim()) {
        Ok(parts) => parts,
        Err(name) => {
            report.error(url, unknown_variable(&name, refuse));
            return None;
        }
    };
    if !absolute_url(&parsed_url) {
        let message = format!("invalid value {:?}: expected an http:// or https:// URL, which may use nginx variables such as $host; {refuse}", url.value);
        report.error(url, message);
        return None;
    }
    let optional = |setting, report: &mut Report<'_>| {
        let found = keys.get(setting)?;
        template(found, report, "it is ignored")
    };
    let signin = optional(Setting::AuthSignin, report);
    let request_redirect = optional(Setting::AuthRequestRedirect, report);
    Some(ExternalAuth {
        url: parsed_url,
        method: report.parse(
            keys.get(Setting::AuthMethod),
            "an HTTP method such as GET or POST",
            "GET is used",
            |value| {
                http::Method::from_bytes(value.as_bytes())
                    .ok()
                    .map(|m| m.to_string())
            },
        ),
        signin,
        signin_redirect_param: report
            .parse(
                keys.get(Setting::AuthSigninRedirectParam),
                "a query parameter name",
                "rd is used",
                |value| {
                    let token = value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                    (token && !value.is_empty()).then(|| value.to_owned())
                },
            )
            .unwrap_or_else(|| "rd".to_owned()),
        response_headers: header_names(keys.get(Setting::AuthResponseHeaders), report),
        request_redirect,
        cache: cache(keys, report),
        always_set_cookie: report
            .parse(
                keys.get(Setting::AuthAlwaysSetCookie),
                "true or false",
                "the auth service's cookie is set on successful responses only",
                parse_bool,
            )
            .unwrap_or(false),
    })
}

/// `mirror-target` with `mirror-host` and `mirror-request-body`; a target that is not an
/// http(s) URL (with nginx variables filled in) is a warning and nothing is mirrored.
pub(crate) fn mirror(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<Mirror> {
    let found = keys.get(Setting::MirrorTarget)?;
    let target = template(found, report, "nothing is mirrored")?;
    if !absolute_url(&target) {
        let message = format!("invalid value {:?}: expected an http:// or https:// URL such as https://mirror.example/$request_uri; nothing is mirrored", found.value);
        report.warning(found, message);
        return None;
    }
    let body = report
        .parse(
            keys.get(Setting::MirrorRequestBody),
            "on or off",
            "on is used",
            |value| matches!(value, "on" | "off").then(|| value == "on"),
        )
        .unwrap_or(true);
    let host = report.parse(
        keys.get(Setting::MirrorHost),
        "a host name, optionally with a port",
        "the target's host is sent",
        |value| {
            http::uri::Authority::try_from(value)
                .ok()
                .map(|_| value.to_owned())
        },
    );
    Some(Mirror::Url { target, host, body })
}

/// `auth-response-headers`: comma-separated header names; an invalid one is dropped with a
/// warning.
fn header_names(found: Option<Found<'_>>, report: &mut Report<'_>) -> Vec<String> {
    let Some(found) = found else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for name in found
        .value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        match http::HeaderName::from_bytes(name.as_bytes()) {
            Ok(header) => names.push(header.as_str().to_owned()),
            Err(_) => report.warning(
                found,
                format!("{name:?} is not a header name; it is ignored, the others are copied"),
            ),
        }
    }
    names
}

/// `auth-cache-key` with `auth-cache-duration` (nginx's `proxy_cache_valid`: status codes,
/// then a time; default `200 202 401 5m`).
fn cache(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<AuthCache> {
    let duration_found = keys.get(Setting::AuthCacheDuration);
    let Some(key_found) = keys.get(Setting::AuthCacheKey) else {
        if let Some(found) = duration_found {
            report.warning(
                found,
                "ignored: auth-cache-key is not set, so nothing is cached",
            );
        }
        return None;
    };
    let key = template(key_found, report, "nothing is cached")?;
    let (statuses, duration) = report
        .parse(
            duration_found,
            "status codes then a time, such as 200 202 401 5m",
            "200 202 401 for 5m is used",
            cache_validity,
        )
        .unwrap_or_else(|| (vec![200, 202, 401], Duration::from_secs(300)));
    Some(AuthCache {
        key,
        statuses,
        duration,
    })
}

fn cache_validity(value: &str) -> Option<(Vec<u16>, Duration)> {
    let mut words: Vec<&str> = value.split_whitespace().collect();
    let time = words.pop()?;
    let duration = if time.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(time.parse().ok()?)
    } else {
        humantime::parse_duration(time).ok()?
    };
    let statuses = if words.is_empty() {
        vec![200, 301, 302]
    } else {
        words
            .iter()
            .map(|code| code.parse::<u16>().ok().filter(|c| (100..600).contains(c)))
            .collect::<Option<Vec<u16>>>()?
    };
    Some((statuses, duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_validity_reads_codes_then_a_time() {
        assert_eq!(
            cache_validity("200 202 401 5m"),
            Some((vec![200, 202, 401], Duration::from_secs(300)))
        );
        assert_eq!(
            cache_validity("30s"),
            Some((vec![200, 301, 302], Duration::from_secs(30)))
        );
        assert_eq!(cache_validity("200 abc 5m"), None);
        assert_eq!(cache_validity(""), None);
    }
}
