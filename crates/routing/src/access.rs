//! Who may use a route beyond source ranges: ingress-nginx's basic and digest auth, external auth (`auth-url`), and `satisfy`.

use std::time::Duration;

use serde::Serialize;

use crate::variable::Variable;

/// A route's authentication, as ingress-nginx's access phase runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AccessControl {
    /// `satisfy: any`: a client the source ranges admit skips authentication, and one they
    /// refuse may still authenticate (nginx's `satisfy any`).
    pub satisfy_any: bool,
    pub basic: Option<BasicAuth>,
    pub external: Option<ExternalAuth>,
    /// An auth annotation could not be honoured (a Secret missing, an `auth-url` unreadable):
    /// the route answers 503 rather than let anyone in.
    pub unavailable: bool,
}

impl AccessControl {
    pub fn is_set(&self) -> bool {
        self.unavailable || self.basic.is_some() || self.external.is_some()
    }
}

/// `auth-type: basic|digest` with the users of `auth-secret`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BasicAuth {
    /// `auth-realm`, shown by browsers.
    pub realm: String,
    /// `auth-type: digest` (RFC 7616 with MD5, as nginx's digest module): `users` hold the
    /// htdigest `HA1` of `user:realm:password`.
    pub digest: bool,
    /// User name and its hash as htpasswd wrote it (bcrypt `$2y$`, `{SHA}`, `$apr1$`), or
    /// the htdigest `HA1`.
    #[serde(skip)]
    pub users: Vec<(String, String)>,
}

/// `auth-url` and its companions: nginx's `auth_request` to an external service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExternalAuth {
    /// The auth service's URL; may use nginx variables, filled in per request.
    pub url: Vec<Variable>,
    /// `auth-method`: the subrequest's method (GET unless set).
    pub method: Option<String>,
    /// `auth-signin`: where a 401 from the auth service sends the client (302).
    pub signin: Option<Vec<Variable>>,
    /// `auth-signin-redirect-param` (default `rd`): the query parameter carrying the URL the
    /// client asked for, added to the sign-in URL unless it has it already.
    pub signin_redirect_param: String,
    /// `auth-response-headers`: headers of a 2xx auth answer copied onto the request to the pod.
    pub response_headers: Vec<String>,
    /// `auth-request-redirect`: the `X-Auth-Request-Redirect` the auth service gets (default
    /// the request URI).
    pub request_redirect: Option<Vec<Variable>>,
    /// `auth-cache-key` and `auth-cache-duration`: answers kept per key.
    pub cache: Option<AuthCache>,
    /// `auth-always-set-cookie`: the auth service's `Set-Cookie` goes on every response, not
    /// only on successful ones.
    pub always_set_cookie: bool,
}

/// How long answers of the auth service are kept, by status, under a per-request key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthCache {
    pub key: Vec<Variable>,
    /// Status codes cached and for how long (ingress-nginx's default: 200 202 401 for 5m).
    pub statuses: Vec<u16>,
    pub duration: Duration,
}
