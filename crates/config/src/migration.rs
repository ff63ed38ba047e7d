//! The migration report: every ingress-nginx and Traefik annotation found in a snapshot, how many objects use it, and how fully sluice honours it.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::snapshot::Snapshot;

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
    "refused (error): raw nginx configuration, the door to CVE-2021-25742 and CVE-2025-1974",
);
const WAF: Support =
    Support::Not("refused (error): no WAF module; put a WAF in front of sluice or in the pod");
const REMOVED: Support = Support::Not("removed from ingress-nginx itself");
const NO_TRACING: Support = Support::Not("sluice exports no traces yet");
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
    ("backend-protocol", Support::Partly("HTTP, HTTPS, GRPC, GRPCS and H2C; AJP and FCGI are not spoken")),
    ("service-upstream", Support::Full),
    ("upstream-vhost", Support::Full),
    ("load-balance", Support::Full),
    ("upstream-hash-by", Support::Partly("one variable: the client address, a header, a cookie, the URI or the host; no combinations")),
    ("upstream-hash-by-subset", Support::Not("subset hashing is not built")),
    ("upstream-hash-by-subset-size", Support::Not("subset hashing is not built")),
    ("default-backend", Support::Partly("the Service's first port")),
    ("custom-http-errors", Support::Partly("the pods' answers are replaced; sluice's own 502, 503 and 504 are not")),
    ("disable-proxy-intercept-errors", Support::Not("not built")),
    ("fastcgi-index", Support::Not("sluice does not speak FastCGI")),
    ("fastcgi-params-configmap", Support::Not("sluice does not speak FastCGI")),
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
    ("enable-opentelemetry", NO_TRACING),
    ("opentelemetry-trust-incoming-span", NO_TRACING),
    ("opentelemetry-operation-name", NO_TRACING),
    ("enable-modsecurity", WAF),
    ("enable-owasp-core-rules", WAF),
    ("modsecurity-transaction-id", WAF),
    ("modsecurity-snippet", WAF),
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
    ("lua-resty-waf-debug", WAF),
    ("lua-resty-waf-ignore-rulesets", WAF),
    ("lua-resty-waf-extra-rules", WAF),
    ("lua-resty-waf-score-threshold", WAF),
    ("lua-resty-waf-allow-unknown-content-types", WAF),
    ("lua-resty-waf-process-multipart-body", WAF),
    ("upstream-max-fails", REMOVED),
    ("upstream-fail-timeout", REMOVED),
    ("secure-client-ca-secret", REMOVED),
];

/// Traefik's Kubernetes Ingress provider annotations (under `traefik.ingress.kubernetes.io/`),
/// `router.*` on Ingresses and `service.*` on Services.
pub const TRAEFIK: &[(&str, Support)] = &[
    ("router.entrypoints", Support::Partly("web and websecure: sluice's plain and TLS listeners")),
    ("router.middlewares", Support::Not("Traefik middlewares are CRDs sluice does not read; most have an nginx annotation sluice honours")),
    ("router.priority", Support::Not("precedence is ingress-nginx's: longest path first")),
    ("router.pathmatcher", Support::Not("paths match as their pathType says")),
    ("router.rulesyntax", Support::Not("no Traefik rules")),
    ("router.tls", Support::Full),
    ("router.tls.certresolver", Support::Not("no ACME; certificates come from Secrets")),
    ("router.tls.domains.n.main", Support::Not("no ACME; certificates come from Secrets")),
    ("router.tls.domains.n.sans", Support::Not("no ACME; certificates come from Secrets")),
    ("router.tls.options", Support::Not("rustls's safe defaults")),
    ("router.observability.accesslogs", Support::Not("use nginx.ingress.kubernetes.io/enable-access-log")),
    ("router.observability.metrics", Support::Not("metrics are always on")),
    ("router.observability.tracing", NO_TRACING),
    ("router.observability.traceverbosity", NO_TRACING),
    ("service.serversscheme", Support::Partly("http, https and h2c")),
    ("service.serverstransport", Support::Not("ServersTransport is a CRD sluice does not read")),
    ("service.passhostheader", Support::Not("the client's Host is always passed (upstream-vhost changes it)")),
    ("service.nativelb", Support::Full),
    ("service.nodeportlb", Support::Not("sluice sends to pods or the ClusterIP")),
    ("service.middlewares", Support::Not("Traefik middlewares are CRDs sluice does not read")),
    ("service.sticky.cookie", Support::Full),
    ("service.sticky.cookie.name", Support::Full),
    ("service.sticky.cookie.secure", Support::Full),
    ("service.sticky.cookie.httponly", Support::Full),
    ("service.sticky.cookie.samesite", Support::Full),
    ("service.sticky.cookie.maxage", Support::Full),
    ("service.sticky.cookie.path", Support::Full),
    ("service.sticky.cookie.domain", Support::Not("not built")),
];

const NGINX_PREFIXES: [&str; 2] = ["nginx.ingress.kubernetes.io/", "ingress.kubernetes.io/"];
const TRAEFIK_PREFIX: &str = "traefik.ingress.kubernetes.io/";

/// One annotation found in the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationRow {
    /// The annotation key, with the prefix it was found under.
    pub annotation: String,
    /// How many objects (Ingresses, or Services for `service.*`) carry it.
    pub objects: usize,
    pub support: Support,
}

const UNKNOWN_NGINX: Support = Support::Not("not an ingress-nginx annotation sluice knows of");
const UNKNOWN_TRAEFIK: Support = Support::Not("not a Traefik annotation sluice knows of");

/// Every ingress-nginx and Traefik annotation on the snapshot's Ingresses and Services, served
/// or not (a migration starts with Ingresses of another class), sorted by key.
pub fn migration_report(snapshot: &Snapshot) -> Vec<MigrationRow> {
    let ingresses = snapshot
        .ingresses
        .values()
        .map(|i| i.metadata.annotations.as_ref());
    let services = snapshot
        .services
        .values()
        .map(|s| s.metadata.annotations.as_ref());
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for annotations in ingresses.chain(services).flatten() {
        for key in annotations.keys().filter(|key| support_of(key).is_some()) {
            *counts.entry(key.clone()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter_map(|(annotation, objects)| {
            let support = support_of(&annotation)?;
            Some(MigrationRow {
                annotation,
                objects,
                support,
            })
        })
        .collect()
}

/// The support of an ingress-nginx or Traefik annotation key; `None` for any other key.
fn support_of(key: &str) -> Option<Support> {
    if let Some(name) = NGINX_PREFIXES
        .iter()
        .find_map(|prefix| key.strip_prefix(prefix))
    {
        return Some(lookup(INGRESS_NGINX, name).unwrap_or(UNKNOWN_NGINX));
    }
    let name = key.strip_prefix(TRAEFIK_PREFIX)?;
    let numbered = numbered_domain(name);
    Some(lookup(TRAEFIK, numbered.as_deref().unwrap_or(name)).unwrap_or(UNKNOWN_TRAEFIK))
}

/// `router.tls.domains.0.main` as the table writes it (`router.tls.domains.n.main`).
fn numbered_domain(name: &str) -> Option<String> {
    let rest = name.strip_prefix("router.tls.domains.")?;
    let (index, field) = rest.split_once('.')?;
    index
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| format!("router.tls.domains.n.{field}"))
}

/// Whether ingress-nginx has an annotation of this name (without its prefix).
pub(crate) fn is_ingress_nginx_name(name: &str) -> bool {
    lookup(INGRESS_NGINX, name).is_some()
}

fn lookup(table: &[(&str, Support)], name: &str) -> Option<Support> {
    table
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, support)| *support)
}

/// The report as a text table, with a count of each support level.
pub fn render_report(rows: &[MigrationRow]) -> String {
    if rows.is_empty() {
        return "Migration report: no ingress-nginx or Traefik annotations found.\n".to_owned();
    }
    let width = rows
        .iter()
        .map(|row| row.annotation.len())
        .max()
        .unwrap_or(10)
        .max(10);
    let mut out = format!(
        "Migration report ({} annotation(s)):\n  {:<width$}  {:>7}  {:<6}  {}\n",
        rows.len(),
        "ANNOTATION",
        "OBJECTS",
        "SLUICE",
        "NOTES"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "  {:<width$}  {:>7}  {:<6}  {}",
            row.annotation,
            row.objects,
            row.support.word(),
            row.support.note()
        );
    }
    let count = |word: &str| rows.iter().filter(|row| row.support.word() == word).count();
    let _ = writeln!(
        out,
        "\nHonoured fully: {}, partly: {}, not: {}.",
        count("fully"),
        count("partly"),
        count("not")
    );
    out
}

/// Both tables in Markdown, as docs/annotations.md carries them.
pub fn markdown_tables() -> String {
    let mut out = String::new();
    for (title, prefix, table) in [
        (
            "ingress-nginx",
            "nginx.ingress.kubernetes.io/",
            INGRESS_NGINX,
        ),
        ("Traefik", TRAEFIK_PREFIX, TRAEFIK),
    ] {
        let _ = writeln!(out, "| {title} annotation (`{prefix}`) | sluice | Notes |");
        out.push_str("|---|---|---|\n");
        for (name, support) in table {
            let _ = writeln!(
                out,
                "| `{name}` | {} | {} |",
                support.word(),
                support.note()
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_sluice_reads_is_in_the_table_as_honoured() {
        for name in crate::annotations::nginx_names() {
            let support = lookup(INGRESS_NGINX, name);
            assert!(
                matches!(support, Some(Support::Full | Support::Partly(_))),
                "{name}: {support:?}"
            );
        }
    }

    #[test]
    fn names_are_listed_once() {
        for table in [INGRESS_NGINX, TRAEFIK] {
            let mut names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
            names.sort_unstable();
            let before = names.len();
            names.dedup();
            assert_eq!(before, names.len());
        }
    }

    #[test]
    fn keys_map_to_their_rows() {
        assert_eq!(
            support_of("ingress.kubernetes.io/use-regex"),
            Some(Support::Full)
        );
        assert_eq!(
            support_of("nginx.ingress.kubernetes.io/made-up"),
            Some(UNKNOWN_NGINX)
        );
        assert_eq!(
            support_of("traefik.ingress.kubernetes.io/router.tls.domains.0.main").map(|s| s.word()),
            Some("not")
        );
        assert_eq!(support_of("example.com/owner"), None);
    }

    #[test]
    fn the_documentation_carries_the_tables() {
        let docs = include_str!("../../../docs/annotations.md");
        assert!(
            docs.contains(markdown_tables().trim_end()),
            "docs/annotations.md must contain migration::markdown_tables() verbatim"
        );
    }
}
