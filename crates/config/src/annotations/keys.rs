//! ingress-nginx annotation names, accepted under the sluice.dev, nginx and ingress.kubernetes.io prefixes.

use super::values::{Found, Report};
use super::Annotations;

/// The prefixes an ingress-nginx name is read under, strongest first: when one name is set
/// under two prefixes, the earlier prefix wins.
pub(crate) const PREFIXES: [&str; 3] = [
    "sluice.dev/",
    "nginx.ingress.kubernetes.io/",
    "ingress.kubernetes.io/",
];

/// The route-policy annotation names sluice reads on an Ingress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    LoadBalance,
    UpstreamHashBy,
    Affinity,
    AffinityMode,
    SessionCookieName,
    SessionCookiePath,
    SessionCookieMaxAge,
    SessionCookieExpires,
    SessionCookieSecure,
    SessionCookieSameSite,
    SessionCookieDomain,
    SessionCookieChangeOnFailure,
    ProxyNextUpstream,
    ProxyNextUpstreamTries,
    ProxyNextUpstreamTimeout,
    /// sluice's own; read under `sluice.dev/` only.
    ResponseRetryBuffer,
    ProxyBodySize,
    /// sluice's own; read under `sluice.dev/` only.
    PerTryTimeout,
    SslRedirect,
    ForceSslRedirect,
    /// sluice's own; read under `sluice.dev/` only.
    Hsts,
    SslPassthrough,
    AuthTlsSecret,
    AuthTlsVerifyClient,
    AuthTlsPassCertificateToUpstream,
    BackendProtocol,
    ProxySslSecret,
    ProxySslName,
    ProxySslVerify,
    AllowlistSourceRange,
    /// The older name of `allowlist-source-range`.
    WhitelistSourceRange,
    DenylistSourceRange,
    PermanentRedirect,
    PermanentRedirectCode,
    TemporalRedirect,
    TemporalRedirectCode,
    AppRoot,
    XForwardedPrefix,
    UpstreamVhost,
    EnableAccessLog,
    EnableOpentelemetry,
    OpentelemetryTrustIncomingSpan,
    /// sluice's own; read under `sluice.dev/` only.
    RequestHeaders,
    /// sluice's own; read under `sluice.dev/` only.
    ResponseHeaders,
    EnableCors,
    CorsAllowOrigin,
    CorsAllowMethods,
    CorsAllowHeaders,
    CorsExposeHeaders,
    CorsAllowCredentials,
    CorsMaxAge,
    ProxyConnectTimeout,
    ProxySendTimeout,
    ProxyReadTimeout,
    UseRegex,
    RewriteTarget,
    /// sluice's own; read under `sluice.dev/` only.
    TrailingSlashRedirect,
    ServerAlias,
    FromToWwwRedirect,
    Canary,
    CanaryByHeader,
    CanaryByHeaderValue,
    CanaryByHeaderPattern,
    CanaryByCookie,
    CanaryWeight,
    CanaryWeightTotal,
    AuthUrl,
    AuthMethod,
    AuthSignin,
    AuthSigninRedirectParam,
    AuthResponseHeaders,
    AuthRequestRedirect,
    AuthCacheKey,
    AuthCacheDuration,
    AuthAlwaysSetCookie,
    Satisfy,
    AuthType,
    AuthSecret,
    AuthSecretType,
    AuthRealm,
    LimitRps,
    LimitRpm,
    LimitConnections,
    LimitBurstMultiplier,
    LimitAllowlist,
    LimitWhitelist,
    LimitStatusCode,
    ProxyBuffering,
    ProxyRequestBuffering,
    ProxyHttpVersion,
    MirrorTarget,
    MirrorHost,
    MirrorRequestBody,
    DefaultBackend,
    CustomHttpErrors,
    CustomHeaders,
    /// sluice's own; read under `sluice.dev/` only.
    IgnoreSnippets,
    /// sluice's own; read under `sluice.dev/` only.
    Compression,
}

impl Setting {
    const ALL: [Setting; 98] = [
        Self::LoadBalance,
        Self::UpstreamHashBy,
        Self::Affinity,
        Self::AffinityMode,
        Self::SessionCookieName,
        Self::SessionCookiePath,
        Self::SessionCookieMaxAge,
        Self::SessionCookieExpires,
        Self::SessionCookieSecure,
        Self::SessionCookieSameSite,
        Self::SessionCookieDomain,
        Self::SessionCookieChangeOnFailure,
        Self::ProxyNextUpstream,
        Self::ProxyNextUpstreamTries,
        Self::ProxyNextUpstreamTimeout,
        Self::ResponseRetryBuffer,
        Self::ProxyBodySize,
        Self::PerTryTimeout,
        Self::SslRedirect,
        Self::ForceSslRedirect,
        Self::Hsts,
        Self::SslPassthrough,
        Self::AuthTlsSecret,
        Self::AuthTlsVerifyClient,
        Self::AuthTlsPassCertificateToUpstream,
        Self::BackendProtocol,
        Self::ProxySslSecret,
        Self::ProxySslName,
        Self::ProxySslVerify,
        Self::AllowlistSourceRange,
        Self::WhitelistSourceRange,
        Self::DenylistSourceRange,
        Self::PermanentRedirect,
        Self::PermanentRedirectCode,
        Self::TemporalRedirect,
        Self::TemporalRedirectCode,
        Self::AppRoot,
        Self::XForwardedPrefix,
        Self::UpstreamVhost,
        Self::EnableAccessLog,
        Self::EnableOpentelemetry,
        Self::OpentelemetryTrustIncomingSpan,
        Self::RequestHeaders,
        Self::ResponseHeaders,
        Self::EnableCors,
        Self::CorsAllowOrigin,
        Self::CorsAllowMethods,
        Self::CorsAllowHeaders,
        Self::CorsExposeHeaders,
        Self::CorsAllowCredentials,
        Self::CorsMaxAge,
        Self::ProxyConnectTimeout,
        Self::ProxySendTimeout,
        Self::ProxyReadTimeout,
        Self::UseRegex,
        Self::RewriteTarget,
        Self::TrailingSlashRedirect,
        Self::ServerAlias,
        Self::FromToWwwRedirect,
        Self::Canary,
        Self::CanaryByHeader,
        Self::CanaryByHeaderValue,
        Self::CanaryByHeaderPattern,
        Self::CanaryByCookie,
        Self::CanaryWeight,
        Self::CanaryWeightTotal,
        Self::AuthUrl,
        Self::AuthMethod,
        Self::AuthSignin,
        Self::AuthSigninRedirectParam,
        Self::AuthResponseHeaders,
        Self::AuthRequestRedirect,
        Self::AuthCacheKey,
        Self::AuthCacheDuration,
        Self::AuthAlwaysSetCookie,
        Self::Satisfy,
        Self::AuthType,
        Self::AuthSecret,
        Self::AuthSecretType,
        Self::AuthRealm,
        Self::LimitRps,
        Self::LimitRpm,
        Self::LimitConnections,
        Self::LimitBurstMultiplier,
        Self::LimitAllowlist,
        Self::LimitWhitelist,
        Self::LimitStatusCode,
        Self::ProxyBuffering,
        Self::ProxyRequestBuffering,
        Self::ProxyHttpVersion,
        Self::MirrorTarget,
        Self::MirrorHost,
        Self::MirrorRequestBody,
        Self::DefaultBackend,
        Self::CustomHttpErrors,
        Self::CustomHeaders,
        Self::IgnoreSnippets,
        Self::Compression,
    ];

    /// The session-cookie attributes, which only mean something with `affinity: cookie`.
    pub(crate) const COOKIE_ATTRIBUTES: [Setting; 9] = [
        Self::AffinityMode,
        Self::SessionCookieName,
        Self::SessionCookiePath,
        Self::SessionCookieMaxAge,
        Self::SessionCookieExpires,
        Self::SessionCookieSecure,
        Self::SessionCookieSameSite,
        Self::SessionCookieDomain,
        Self::SessionCookieChangeOnFailure,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::LoadBalance => "load-balance",
            Self::UpstreamHashBy => "upstream-hash-by",
            Self::Affinity => "affinity",
            Self::AffinityMode => "affinity-mode",
            Self::SessionCookieName => "session-cookie-name",
            Self::SessionCookiePath => "session-cookie-path",
            Self::SessionCookieMaxAge => "session-cookie-max-age",
            Self::SessionCookieExpires => "session-cookie-expires",
            Self::SessionCookieSecure => "session-cookie-secure",
            Self::SessionCookieSameSite => "session-cookie-samesite",
            Self::SessionCookieDomain => "session-cookie-domain",
            Self::SessionCookieChangeOnFailure => "session-cookie-change-on-failure",
            Self::ProxyNextUpstream => "proxy-next-upstream",
            Self::ProxyNextUpstreamTries => "proxy-next-upstream-tries",
            Self::ProxyNextUpstreamTimeout => "proxy-next-upstream-timeout",
            Self::ResponseRetryBuffer => "response-retry-buffer",
            Self::ProxyBodySize => "proxy-body-size",
            Self::PerTryTimeout => "per-try-timeout",
            Self::SslRedirect => "ssl-redirect",
            Self::ForceSslRedirect => "force-ssl-redirect",
            Self::Hsts => "hsts",
            Self::SslPassthrough => "ssl-passthrough",
            Self::AuthTlsSecret => "auth-tls-secret",
            Self::AuthTlsVerifyClient => "auth-tls-verify-client",
            Self::AuthTlsPassCertificateToUpstream => "auth-tls-pass-certificate-to-upstream",
            Self::BackendProtocol => "backend-protocol",
            Self::ProxySslSecret => "proxy-ssl-secret",
            Self::ProxySslName => "proxy-ssl-name",
            Self::ProxySslVerify => "proxy-ssl-verify",
            Self::AllowlistSourceRange => "allowlist-source-range",
            Self::WhitelistSourceRange => "whitelist-source-range",
            Self::DenylistSourceRange => "denylist-source-range",
            Self::PermanentRedirect => "permanent-redirect",
            Self::PermanentRedirectCode => "permanent-redirect-code",
            Self::TemporalRedirect => "temporal-redirect",
            Self::TemporalRedirectCode => "temporal-redirect-code",
            Self::AppRoot => "app-root",
            Self::XForwardedPrefix => "x-forwarded-prefix",
            Self::UpstreamVhost => "upstream-vhost",
            Self::EnableAccessLog => "enable-access-log",
            Self::EnableOpentelemetry => "enable-opentelemetry",
            Self::OpentelemetryTrustIncomingSpan => "opentelemetry-trust-incoming-span",
            Self::RequestHeaders => "request-headers",
            Self::ResponseHeaders => "response-headers",
            Self::EnableCors => "enable-cors",
            Self::CorsAllowOrigin => "cors-allow-origin",
            Self::CorsAllowMethods => "cors-allow-methods",
            Self::CorsAllowHeaders => "cors-allow-headers",
            Self::CorsExposeHeaders => "cors-expose-headers",
            Self::CorsAllowCredentials => "cors-allow-credentials",
            Self::CorsMaxAge => "cors-max-age",
            Self::ProxyConnectTimeout => "proxy-connect-timeout",
            Self::ProxySendTimeout => "proxy-send-timeout",
            Self::ProxyReadTimeout => "proxy-read-timeout",
            Self::UseRegex => "use-regex",
            Self::RewriteTarget => "rewrite-target",
            Self::TrailingSlashRedirect => "trailing-slash-redirect",
            Self::ServerAlias => "server-alias",
            Self::FromToWwwRedirect => "from-to-www-redirect",
            Self::Canary => "canary",
            Self::CanaryByHeader => "canary-by-header",
            Self::CanaryByHeaderValue => "canary-by-header-value",
            Self::CanaryByHeaderPattern => "canary-by-header-pattern",
            Self::CanaryByCookie => "canary-by-cookie",
            Self::CanaryWeight => "canary-weight",
            Self::CanaryWeightTotal => "canary-weight-total",
            Self::AuthUrl => "auth-url",
            Self::AuthMethod => "auth-method",
            Self::AuthSignin => "auth-signin",
            Self::AuthSigninRedirectParam => "auth-signin-redirect-param",
            Self::AuthResponseHeaders => "auth-response-headers",
            Self::AuthRequestRedirect => "auth-request-redirect",
            Self::AuthCacheKey => "auth-cache-key",
            Self::AuthCacheDuration => "auth-cache-duration",
            Self::AuthAlwaysSetCookie => "auth-always-set-cookie",
            Self::Satisfy => "satisfy",
            Self::AuthType => "auth-type",
            Self::AuthSecret => "auth-secret",
            Self::AuthSecretType => "auth-secret-type",
            Self::AuthRealm => "auth-realm",
            Self::LimitRps => "limit-rps",
            Self::LimitRpm => "limit-rpm",
            Self::LimitConnections => "limit-connections",
            Self::LimitBurstMultiplier => "limit-burst-multiplier",
            Self::LimitAllowlist => "limit-allowlist",
            Self::LimitWhitelist => "limit-whitelist",
            Self::LimitStatusCode => "limit-status-code",
            Self::ProxyBuffering => "proxy-buffering",
            Self::ProxyRequestBuffering => "proxy-request-buffering",
            Self::ProxyHttpVersion => "proxy-http-version",
            Self::MirrorTarget => "mirror-target",
            Self::MirrorHost => "mirror-host",
            Self::MirrorRequestBody => "mirror-request-body",
            Self::DefaultBackend => "default-backend",
            Self::CustomHttpErrors => "custom-http-errors",
            Self::CustomHeaders => "custom-headers",
            Self::IgnoreSnippets => "ignore-snippets",
            Self::Compression => "compression",
        }
    }

    fn from_str(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.as_str() == name)
    }

    /// sluice's own names, read under `sluice.dev/` only.
    fn sluice_only(self) -> bool {
        matches!(
            self,
            Self::PerTryTimeout
                | Self::ResponseRetryBuffer
                | Self::Hsts
                | Self::RequestHeaders
                | Self::ResponseHeaders
                | Self::TrailingSlashRedirect
                | Self::LimitStatusCode
                | Self::IgnoreSnippets
                | Self::Compression
        )
    }
}

/// The ingress-nginx annotation names sluice reads (without a prefix).
#[cfg(test)]
pub(crate) fn nginx_names() -> impl Iterator<Item = &'static str> {
    Setting::ALL
        .into_iter()
        .filter(|name| !name.sluice_only())
        .map(Setting::as_str)
        .chain(["service-upstream"])
}

/// The prefix rank and name of a policy annotation key, or `None` for any other key.
pub(crate) fn classify(key: &str) -> Option<(usize, Setting)> {
    PREFIXES.iter().enumerate().find_map(|(rank, prefix)| {
        let name = Setting::from_str(key.strip_prefix(prefix)?)?;
        let allowed = rank == 0 || !name.sluice_only();
        allowed.then_some((rank, name))
    })
}

/// The policy annotations of one Ingress, each taken from the strongest prefix that sets it.
#[derive(Debug)]
pub(crate) struct PolicyKeys<'a> {
    slots: [Option<(usize, Found<'a>)>; Setting::ALL.len()],
}

impl Default for PolicyKeys<'_> {
    fn default() -> Self {
        Self {
            slots: [None; Setting::ALL.len()],
        }
    }
}

impl<'a> PolicyKeys<'a> {
    /// Finds the policy annotations; a weaker prefix whose value differs from the winner's gets
    /// a warning.
    pub(crate) fn scan(annotations: &'a Annotations, report: &mut Report<'_>) -> Self {
        let keys = Self::scan_quietly(annotations);
        let classified = annotations.keys().filter(|key| classify(key).is_some());
        let held = keys.slots.iter().filter(|slot| slot.is_some()).count();
        if classified.count() > held {
            keys.report_losers(annotations, report);
        }
        keys
    }

    /// Finds the policy annotations without reporting repeats (the route policy's scan of the
    /// same annotations reports them).
    pub(crate) fn scan_quietly(annotations: &'a Annotations) -> Self {
        let mut keys = Self::default();
        for (key, value) in annotations {
            let Some((rank, name)) = classify(key) else {
                continue;
            };
            let slot = &mut keys.slots[name as usize];
            if slot.is_none_or(|(held, _)| rank < held) {
                *slot = Some((rank, Found { key, value }));
            }
        }
        keys
    }

    fn report_losers(&self, annotations: &Annotations, report: &mut Report<'_>) {
        for (key, value) in annotations {
            let Some((_, name)) = classify(key) else {
                continue;
            };
            let Some(winner) = self.get(name) else {
                continue;
            };
            if winner.key != key && winner.value != value {
                let message = format!("ignored: {} is also set and takes precedence", winner.key);
                report.warning(Found { key, value }, message);
            }
        }
    }

    pub(crate) fn get(&self, name: Setting) -> Option<Found<'a>> {
        self.slots[name as usize].map(|(_, found)| found)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_under_every_prefix_but_per_try_timeout_only_under_sluice() {
        assert_eq!(
            classify("nginx.ingress.kubernetes.io/load-balance"),
            Some((1, Setting::LoadBalance))
        );
        assert_eq!(
            classify("ingress.kubernetes.io/affinity"),
            Some((2, Setting::Affinity))
        );
        assert_eq!(
            classify("sluice.dev/per-try-timeout"),
            Some((0, Setting::PerTryTimeout))
        );
        assert_eq!(
            classify("nginx.ingress.kubernetes.io/per-try-timeout"),
            None
        );
        assert_eq!(classify("nginx.ingress.kubernetes.io/limit-rate"), None);
    }

    #[test]
    fn every_name_round_trips() {
        for name in Setting::ALL {
            assert_eq!(Setting::from_str(name.as_str()), Some(name));
        }
    }
}
