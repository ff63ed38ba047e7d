//! The access phase: basic and digest auth against a Secret's users, external auth (`auth-url`), and `satisfy any` with source ranges.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, StatusCode};
use sluice_routing::{AccessControl, BasicAuth, RoutePolicy, SourceRanges, SourceVerdict};

use super::contract::{Filter, Flow, LocalAnswer, RequestContext, Step};
use super::external_auth::ExternalCheck;
use super::fail_closed::route_denied;
use super::grant::{auth_denied, Grant};
use super::passwords::{equal, md5_hex, verify};
use super::services::{boxed, RouteFilter, Services};

/// A route's access phase, built once per policy.
pub(crate) struct Access {
    control: AccessControl,
    /// The source ranges, checked here (not in the request filters) under `satisfy any`.
    ranges: Option<SourceRanges>,
    external: Option<ExternalCheck>,
    /// Signs digest nonces, so a nonce is only accepted from this process and while fresh;
    /// `None` when the system's random source failed (digest routes then answer 503).
    nonce_key: Option<ring::hmac::Key>,
}

/// How long a digest nonce stays valid.
const NONCE_LIFETIME_SECS: u64 = 300;

impl Access {
    /// The access phase of `policy`, or `None` when it authenticates no one.
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        boxed(Self::new(policy)?)
    }

    fn new(policy: &RoutePolicy) -> Option<Self> {
        let control = policy.access.clone();
        if !control.is_set() {
            return None;
        }
        let ranges = (control.satisfy_any && policy.source_ranges.is_set())
            .then(|| policy.source_ranges.clone());
        let nonce_key =
            ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
                .ok();
        Some(Self {
            external: control
                .external
                .clone()
                .map(|auth| ExternalCheck::new(auth, policy)),
            control,
            ranges,
            nonce_key,
        })
    }

    /// Lets the request through, or answers it: 401 with a challenge, the auth service's 401
    /// or 403, a redirect to the sign-in page, 500 when the auth service fails, 503 when the
    /// route's auth could not be read. On a route with basic or digest auth the pod never sees
    /// the client's `Authorization`, however the request was admitted, as nginx.tmpl's
    /// `proxy_set_header Authorization ""` next to `auth_basic` and `auth_digest` does (an auth
    /// service's own `Authorization` answer header is still passed on).
    async fn check(
        &self,
        context: &RequestContext<'_>,
        request: &Parts,
        services: &Services,
    ) -> Result<Grant, Box<LocalAnswer>> {
        let mut grant = self.admit(context, request, services).await?;
        if self.control.basic.is_some() {
            grant.upstream_headers.insert(0, (AUTHORIZATION, None));
        }
        Ok(grant)
    }

    async fn admit(
        &self,
        context: &RequestContext<'_>,
        request: &Parts,
        services: &Services,
    ) -> Result<Grant, Box<LocalAnswer>> {
        if self.control.unavailable {
            return Err(route_denied());
        }
        if let Some(ranges) = &self.ranges {
            match ranges.verdict(context.real_client) {
                SourceVerdict::Admitted => return Ok(Grant::default()),
                SourceVerdict::Unavailable => return Err(route_denied()),
                SourceVerdict::Forbidden => {}
            }
        }
        if let Some(basic) = &self.control.basic {
            self.check_user(basic, request)?;
        }
        match &self.external {
            Some(external) => external.check(context, request, services).await,
            None => Ok(Grant::default()),
        }
    }

    fn check_user(&self, auth: &BasicAuth, request: &Parts) -> Result<(), Box<LocalAnswer>> {
        let credentials = request
            .headers
            .get(AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        let admitted = match (auth.digest, &self.nonce_key) {
            (true, Some(key)) => digest_admits(key, auth, credentials, request),
            (true, None) => return Err(route_denied()),
            (false, _) => basic_admits(auth, credentials),
        };
        if admitted {
            return Ok(());
        }
        let challenge = match &self.nonce_key {
            Some(key) if auth.digest => format!(
                "Digest realm=\"{}\", qop=\"auth\", algorithm=MD5, nonce=\"{}\"",
                quoted(&auth.realm),
                nonce(key, now_secs())
            ),
            _ => format!("Basic realm=\"{}\"", quoted(&auth.realm)),
        };
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::try_from(challenge) {
            headers.insert(WWW_AUTHENTICATE, value);
        }
        Err(auth_denied(StatusCode::UNAUTHORIZED, &headers))
    }
}

impl Filter<Services> for Access {
    fn on_access<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        request: &'a Parts,
        services: &'a Services,
    ) -> Step<'a, Flow> {
        Step::Wait(Box::pin(async move {
            let grant = self.check(context, request, services).await?;
            context.slots.insert(grant);
            Ok(())
        }))
    }

    /// The grant's headers go on the request to the pod; its cookies stay for the response.
    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        _: &'a Services,
    ) -> Step<'a, Flow> {
        if let Some(grant) = context.slots.get_mut::<Grant>() {
            grant.apply(&mut upstream.headers);
            grant.upstream_headers.clear();
        }
        Step::Done(Ok(()))
    }

    /// The auth service's `Set-Cookie` on the answer: on successful and redirect answers only
    /// (nginx's `add_header`), or on all with `auth-always-set-cookie`.
    fn on_log(&self, context: &mut RequestContext<'_>, response: &mut response::Parts) {
        let Some(grant) = context.slots.get::<Grant>() else {
            return;
        };
        let added = matches!(
            response.status.as_u16(),
            200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
        );
        if added || grant.cookies_always {
            for cookie in &grant.cookies {
                response
                    .headers
                    .append(http::header::SET_COOKIE, cookie.clone());
            }
        }
    }
}

/// A digest nonce: the time it was issued and an HMAC of it.
fn nonce(key: &ring::hmac::Key, issued: u64) -> String {
    let tag = ring::hmac::sign(key, &issued.to_be_bytes());
    let tag: String = tag.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{issued:x}.{tag}")
}

fn fresh_nonce(key: &ring::hmac::Key, nonce_text: &str) -> bool {
    let Some(issued) = nonce_text
        .split_once('.')
        .and_then(|(time, _)| u64::from_str_radix(time, 16).ok())
    else {
        return false;
    };
    let fresh = now_secs().saturating_sub(issued) <= NONCE_LIFETIME_SECS;
    fresh && equal(nonce(key, issued).as_bytes(), nonce_text.as_bytes())
}

/// RFC 7616 with MD5, `qop=auth` or none, against the htdigest `HA1` of the user.
fn digest_admits(
    key: &ring::hmac::Key,
    auth: &BasicAuth,
    credentials: &[u8],
    request: &Parts,
) -> bool {
    let Some(fields) = std::str::from_utf8(credentials)
        .ok()
        .and_then(|text| text.strip_prefix("Digest "))
        .map(digest_fields)
    else {
        return false;
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let (Some(user), Some(nonce), Some(uri), Some(response)) = (
        field("username"),
        field("nonce"),
        field("uri"),
        field("response"),
    ) else {
        return false;
    };
    let request_target = request.uri.path_and_query().map_or("/", |t| t.as_str());
    if field("realm") != Some(auth.realm.as_str())
        || uri != request_target
        || !fresh_nonce(key, nonce)
    {
        return false;
    }
    let Some((_, ha1)) = auth.users.iter().find(|(name, _)| name == user) else {
        return false;
    };
    let ha2 = md5_hex(&[request.method.as_str().as_bytes(), uri.as_bytes()]);
    let expected = match (field("qop"), field("nc"), field("cnonce")) {
        (Some(qop), Some(nc), Some(cnonce)) => md5_hex(&[
            ha1.as_bytes(),
            nonce.as_bytes(),
            nc.as_bytes(),
            cnonce.as_bytes(),
            qop.as_bytes(),
            ha2.as_bytes(),
        ]),
        (None, _, _) => md5_hex(&[ha1.as_bytes(), nonce.as_bytes(), ha2.as_bytes()]),
        _ => return false,
    };
    equal(
        expected.as_bytes(),
        response.to_ascii_lowercase().as_bytes(),
    )
}

/// `Authorization: Basic base64(user:password)` against the user's htpasswd hash. An unknown
/// user is checked against nothing, and fails.
fn basic_admits(auth: &BasicAuth, credentials: &[u8]) -> bool {
    let Some(encoded) = credentials
        .strip_prefix(b"Basic ")
        .or_else(|| credentials.strip_prefix(b"basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim_ascii()) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return false;
    };
    let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
    auth.users
        .iter()
        .find(|(name, _)| name.as_bytes() == user)
        .is_some_and(|(_, hash)| verify(password, hash))
}

/// The `name=value` and `name="value"` pairs of a Digest `Authorization`.
fn digest_fields(text: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut rest = text.trim();
    while let Some((name, after)) = rest.split_once('=') {
        let name = name.trim().trim_start_matches(',').trim().to_owned();
        let after = after.trim_start();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (
                    quoted[..end].to_owned(),
                    quoted.get(end + 1..).unwrap_or_default(),
                )
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            }
        };
        fields.push((name, value));
        rest = remaining.trim_start().trim_start_matches(',');
    }
    fields
}

/// A realm inside a quoted string: quotes and backslashes dropped.
fn quoted(text: &str) -> String {
    text.chars().filter(|c| *c != '"' && *c != '\\').collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_fields_read_quoted_and_bare_values() {
        let fields = digest_fields(
            r#"username="ana", realm="R, x", nonce="1.ab", uri="/a?b=1", qop=auth, nc=00000001, cnonce="c", response="ff""#,
        );
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("realm"), Some("R, x"));
        assert_eq!(get("qop"), Some("auth"));
        assert_eq!(get("nc"), Some("00000001"));
        assert_eq!(get("response"), Some("ff"));
    }

    #[test]
    fn basic_auth_refuses_with_a_challenge_and_hides_the_credentials_from_the_pod() {
        use crate::filters::testing::{request, response_head, Scene};
        let policy = RoutePolicy {
            access: AccessControl {
                basic: Some(BasicAuth {
                    realm: "Shop".into(),
                    digest: false,
                    users: vec![("ana".into(), "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=".into())],
                }),
                ..AccessControl::default()
            },
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        let refused = scene.on_access(&request("GET", "/")).expect_err("refused");
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.headers[WWW_AUTHENTICATE], "Basic realm=\"Shop\"");
        let mut signed = request("GET", "/");
        let credentials = base64::engine::general_purpose::STANDARD.encode("ana:password");
        let value = HeaderValue::try_from(format!("Basic {credentials}")).unwrap();
        signed.headers.insert(AUTHORIZATION, value);
        assert!(scene.on_access(&signed).is_ok());
        let mut upstream = signed.clone();
        assert!(scene.on_upstream_request(&mut upstream).is_ok());
        assert!(upstream.headers.get(AUTHORIZATION).is_none());
        let mut head = response_head(200);
        scene.on_log(&mut head);
        assert!(head.headers.get(http::header::SET_COOKIE).is_none());
    }

    #[test]
    fn basic_credentials_are_checked_against_the_users_hash() {
        let auth = BasicAuth {
            realm: "R".into(),
            digest: false,
            users: vec![("ana".into(), "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=".into())],
        };
        let header = |user_pass: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(user_pass)
            )
        };
        assert!(basic_admits(&auth, header("ana:password").as_bytes()));
        assert!(!basic_admits(&auth, header("ana:wrong").as_bytes()));
        assert!(!basic_admits(&auth, header("bob:password").as_bytes()));
        assert!(!basic_admits(&auth, b"Bearer x"));
    }
}
