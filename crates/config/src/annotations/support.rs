//! How fully sluice honours each ingress-nginx and Traefik annotation it knows of, the table the migration report grades with and the annotation reader consults for unknown names.

/// How sluice honours an annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Full,
    /// Honoured, with this difference.
    Partly(&'static str),
    /// Not honoured, for this reason.
    Not(&'static str),
}

impl Support {
    pub fn word(&self) -> &'static str {
        match self {
            Self::Full => "fully",
            Self::Partly(_) => "partly",
            Self::Not(_) => "not",
        }
    }

    pub fn note(&self) -> &'static str {
        match self {
            Self::Full => "",
            Self::Partly(note) | Self::Not(note) => note,
        }
    }
}

const SNIPPET: Support = Support::Not(
    "fails closed: the Ingress answers 503 (error), as ingress-nginx with allow-snippet-annotations: false; sluice.dev/ignore-snippets: \"true\" serves it without the snippet",
);
const WAF: Support = Support::Not(
    "fails closed when it turns a WAF on: the Ingress answers 503 (error); no WAF module, so put one in front of sluice or in the pod",
);
const WAF_SETTING: Support =
    Support::Not("no WAF module (a warning); put a WAF in front of sluice or in the pod");
const REMOVED: Support = Support::Not("removed from ingress-nginx itself");
const NO_NGINX_BUFFERS: Support = Support::Not("sluice streams and has no nginx buffers to size");

/// ingress-nginx's annotations (names under `nginx.ingress.kubernetes.io/`, also read under
/// `ingress.kubernetes.io/`), with sluice's support.
pub const INGRESS_NGINX: &[(&str, Support)] = &[
    ("rewrite-target", Support::Full),
    ("app-root", Support::Full),
    ("use-regex", Support::Full),
    ("x-forwarded-prefix", Support::Full),
    ("ssl-redirect", Support::Full),
    ("force-ssl-redirect", Support::Full),
    ("preserve-trailing-slash", Support::Not("the HTTPS redirect always keeps the path as sent")),
    ("from-to-www-redirect", Support::Partly("308 to the rule host; the port the client named is kept (ingress-nginx names its HTTPS port)")),
    ("permanent-redirect", Support::Full),
    ("permanent-redirect-code", Support::Full),
    ("temporal-redirect", Support::Full),
    ("temporal-redirect-code", Support::Full),
    ("use-port-in-redirects", Support::Not("redirects keep the Host the client sent")),
    ("server-alias", Support::Partly("an alias gets the host's routes; its TLS certificate comes from spec.tls like any host")),
    ("server-snippet", SNIPPET),
    ("configuration-snippet", SNIPPET),
    ("stream-snippet", SNIPPET),
    ("backend-protocol", Support::Full),
    ("service-upstream", Support::Full),
    ("upstream-vhost", Support::Full),
    ("load-balance", Support::Full),
    ("upstream-hash-by", Support::Full),
    ("upstream-hash-by-subset", Support::Not("subset hashing is not built")),
    ("upstream-hash-by-subset-size", Support::Not("subset hashing is not built")),
    ("default-backend", Support::Partly("the Service's first port")),
    ("custom-http-errors", Support::Partly("the pods' answers are replaced; sluice's own 502, 503 and 504 are not")),
    ("disable-proxy-intercept-errors", Support::Not("not built")),
    ("fastcgi-index", Support::Not("sluice does not speak FastCGI (backend-protocol FCGI fails closed)")),
    ("fastcgi-params-configmap", Support::Not("sluice does not speak FastCGI (backend-protocol FCGI fails closed)")),
    ("canary", Support::Full),
    ("canary-by-header", Support::Full),
    ("canary-by-header-value", Support::Full),
    ("canary-by-header-pattern", Support::Partly("the regex crate's syntax (linear time) rather than PCRE")),
    ("canary-by-cookie", Support::Full),
    ("canary-weight", Support::Full),
    ("canary-weight-total", Support::Full),
    ("affinity", Support::Full),
    ("affinity-mode", Support::Partly("accepted; a session stays on its pod while that pod serves, as persistent")),
    ("affinity-canary-behavior", Support::Not("affinity does not cross between main and canary")),
    ("session-cookie-name", Support::Full),
    ("session-cookie-path", Support::Full),
    ("session-cookie-domain", Support::Full),
    ("session-cookie-expires", Support::Full),
    ("session-cookie-max-age", Support::Full),
    ("session-cookie-secure", Support::Full),
    ("session-cookie-samesite", Support::Full),
    ("session-cookie-conditional-samesite-none", Support::Not("no user-agent sniffing")),
    ("session-cookie-partitioned", Support::Not("not built")),
    ("session-cookie-change-on-failure", Support::Full),
    ("auth-type", Support::Full),
    ("auth-secret", Support::Full),
    ("auth-secret-type", Support::Full),
    ("auth-realm", Support::Full),
    ("auth-url", Support::Full),
    ("auth-method", Support::Full),
    ("auth-signin", Support::Full),
    ("auth-signin-redirect-param", Support::Full),
    ("auth-response-headers", Support::Full),
    ("auth-request-redirect", Support::Full),
    ("auth-proxy-set-headers", Support::Not("not built")),
    ("auth-cache-key", Support::Full),
    ("auth-cache-duration", Support::Full),
    ("auth-always-set-cookie", Support::Full),
    ("auth-keepalive", Support::Not("connections to the auth service are always kept alive (30 s idle)")),
    ("auth-keepalive-requests", Support::Not("connections to the auth service are always kept alive (30 s idle)")),
    ("auth-keepalive-timeout", Support::Not("connections to the auth service are always kept alive (30 s idle)")),
    ("auth-keepalive-share-vars", Support::Not("no nginx variables to share")),
    ("auth-snippet", SNIPPET),
    ("enable-global-auth", Support::Not("sluice has no global auth")),
    ("auth-tls-secret", Support::Full),
    ("auth-tls-verify-client", Support::Full),
    ("auth-tls-verify-depth", Support::Not("chains are verified to any depth")),
    ("auth-tls-error-page", Support::Not("a refused certificate gets 400")),
    ("auth-tls-pass-certificate-to-upstream", Support::Full),
    ("auth-tls-match-cn", Support::Not("not built")),
    ("proxy-ssl-secret", Support::Partly("its ca.crt verifies the pods; a client certificate in it is not presented")),
    ("proxy-ssl-verify", Support::Full),
    ("proxy-ssl-verify-depth", Support::Not("chains are verified to any depth")),
    ("proxy-ssl-ciphers", Support::Not("rustls's safe defaults")),
    ("proxy-ssl-protocols", Support::Not("TLS 1.2 and 1.3")),
    ("proxy-ssl-name", Support::Full),
    ("proxy-ssl-server-name", Support::Not("SNI is always sent")),
    ("ssl-passthrough", Support::Full),
    ("ssl-ciphers", Support::Not("rustls's safe defaults")),
    ("ssl-prefer-server-ciphers", Support::Not("rustls's safe defaults")),
    ("proxy-body-size", Support::Full),
    ("client-body-buffer-size", NO_NGINX_BUFFERS),
    ("proxy-connect-timeout", Support::Full),
    ("proxy-send-timeout", Support::Full),
    ("proxy-read-timeout", Support::Full),
    ("proxy-next-upstream", Support::Full),
    ("proxy-next-upstream-timeout", Support::Full),
    ("proxy-next-upstream-tries", Support::Full),
    ("proxy-request-buffering", Support::Partly("bodies always stream; up to 64 KiB is kept for retries")),
    ("proxy-buffering", Support::Partly("responses always stream (off)")),
    ("proxy-buffers-number", NO_NGINX_BUFFERS),
    ("proxy-buffer-size", NO_NGINX_BUFFERS),
    ("proxy-max-temp-file-size", NO_NGINX_BUFFERS),
    ("proxy-http-version", Support::Partly("1.1 (or HTTP/2 where the protocol says); 1.0 is not offered")),
    ("proxy-cookie-domain", Support::Not("not built")),
    ("proxy-cookie-path", Support::Not("not built")),
    ("proxy-redirect-from", Support::Not("not built")),
    ("proxy-redirect-to", Support::Not("not built")),
    ("connection-proxy-header", Support::Not("sluice manages upstream connections itself")),
    ("custom-headers", Support::Partly("any header name is allowed (sluice has no global-allowed-response-headers list)")),
    ("http2-push-preload", Support::Not("browsers dropped HTTP/2 push")),
    ("enable-cors", Support::Full),
    ("cors-allow-origin", Support::Full),
    ("cors-allow-methods", Support::Full),
    ("cors-allow-headers", Support::Full),
    ("cors-expose-headers", Support::Full),
    ("cors-allow-credentials", Support::Full),
    ("cors-max-age", Support::Full),
    ("allowlist-source-range", Support::Full),
    ("whitelist-source-range", Support::Full),
    ("denylist-source-range", Support::Full),
    ("satisfy", Support::Full),
    ("limit-connections", Support::Full),
    ("limit-rps", Support::Full),
    ("limit-rpm", Support::Full),
    ("limit-burst-multiplier", Support::Full),
    ("limit-rate", Support::Not("no bandwidth limits")),
    ("limit-rate-after", Support::Not("no bandwidth limits")),
    ("limit-allowlist", Support::Full),
    ("limit-whitelist", Support::Full),
    ("mirror-target", Support::Partly("a request whose body streams (over 64 KiB, or chunked) is not mirrored")),
    ("mirror-host", Support::Full),
    ("mirror-request-body", Support::Full),
    ("enable-access-log", Support::Full),
    ("enable-rewrite-log", Support::Not("no nginx rewrite log")),
    ("enable-opentelemetry", Support::Full),
    ("opentelemetry-trust-incoming-span", Support::Full),
    ("opentelemetry-operation-name", Support::Not("spans are named {METHOD} {route} as OpenTelemetry's HTTP conventions say")),
    ("enable-modsecurity", WAF),
    ("enable-owasp-core-rules", WAF),
    ("modsecurity-transaction-id", WAF_SETTING),
    ("modsecurity-snippet", SNIPPET),
    ("enable-opentracing", REMOVED),
    ("opentracing-trust-incoming-span", REMOVED),
    ("enable-influxdb", REMOVED),
    ("influxdb-measurement", REMOVED),
    ("influxdb-port", REMOVED),
    ("influxdb-host", REMOVED),
    ("influxdb-server-name", REMOVED),
    ("global-rate-limit", REMOVED),
    ("global-rate-limit-window", REMOVED),
    ("global-rate-limit-key", REMOVED),
    ("global-rate-limit-ignored-cidrs", REMOVED),
    ("secure-verify-ca-secret", REMOVED),
    ("secure-backends", REMOVED),
    ("grpc-backend", REMOVED),
    ("add-base-url", REMOVED),
    ("base-url-scheme", REMOVED),
    ("session-cookie-hash", REMOVED),
    ("mirror-uri", REMOVED),
    ("lua-resty-waf", WAF),
    ("lua-resty-waf-debug", WAF_SETTING),
    ("lua-resty-waf-ignore-rulesets", WAF_SETTING),
    ("lua-resty-waf-extra-rules", WAF_SETTING),
    ("lua-resty-waf-score-threshold", WAF_SETTING),
    ("lua-resty-waf-allow-unknown-content-types", WAF_SETTING),
    ("lua-resty-waf-process-multipart-body", WAF_SETTING),
    ("upstream-max-fails", REMOVED),
    ("upstream-fail-timeout", REMOVED),
    ("secure-client-ca-secret", REMOVED),
];

/// Traefik's Kubernetes Ingress provider annotations (under `traefik.ingress.kubernetes.io/`),
/// `router.*` on Ingresses and `service.*` on Services.
pub const TRAEFIK: &[(&str, Support)] = &[
    ("router.entrypoints", Support::Full),
    ("router.middlewares", Support::Full),
    (
        "router.priority",
        Support::Not("precedence is ingress-nginx's: longest path first"),
    ),
    (
        "router.pathmatcher",
        Support::Not("paths match as their pathType says"),
    ),
    ("router.rulesyntax", Support::Not("no Traefik rules")),
    ("router.tls", Support::Full),
    (
        "router.tls.certresolver",
        Support::Not("no ACME; certificates come from Secrets"),
    ),
    (
        "router.tls.domains.n.main",
        Support::Not("no ACME; certificates come from Secrets"),
    ),
    (
        "router.tls.domains.n.sans",
        Support::Not("no ACME; certificates come from Secrets"),
    ),
    ("router.tls.options", Support::Not("rustls's safe defaults")),
    (
        "router.observability.accesslogs",
        Support::Not("use nginx.ingress.kubernetes.io/enable-access-log"),
    ),
    (
        "router.observability.metrics",
        Support::Not("metrics are always on"),
    ),
    (
        "router.observability.tracing",
        Support::Not("use nginx.ingress.kubernetes.io/enable-opentelemetry"),
    ),
    (
        "router.observability.traceverbosity",
        Support::Not("one span per request and one per upstream attempt"),
    ),
    (
        "service.serversscheme",
        Support::Partly("http, https and h2c"),
    ),
    (
        "service.serverstransport",
        Support::Not("ServersTransport is a CRD sluice does not read"),
    ),
    (
        "service.passhostheader",
        Support::Not("the client's Host is always passed (upstream-vhost changes it)"),
    ),
    ("service.nativelb", Support::Full),
    (
        "service.nodeportlb",
        Support::Not("sluice sends to pods or the ClusterIP"),
    ),
    ("service.middlewares", Support::Full),
    ("service.sticky.cookie", Support::Full),
    ("service.sticky.cookie.name", Support::Full),
    ("service.sticky.cookie.secure", Support::Full),
    ("service.sticky.cookie.httponly", Support::Full),
    ("service.sticky.cookie.samesite", Support::Full),
    ("service.sticky.cookie.maxage", Support::Full),
    ("service.sticky.cookie.path", Support::Full),
    ("service.sticky.cookie.domain", Support::Not("not built")),
];

/// Whether ingress-nginx has an annotation of this name (without its prefix).
pub(crate) fn is_ingress_nginx_name(name: &str) -> bool {
    lookup(INGRESS_NGINX, name).is_some()
}

pub(crate) fn lookup(table: &[(&str, Support)], name: &str) -> Option<Support> {
    table
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, support)| *support)
}
