//! The migration report: every ingress-nginx, Traefik and other controller's annotation found in a snapshot, how many objects use it, and how fully sluice honours the values they give it.

use std::collections::BTreeMap;
use std::fmt::Write;

use hashbrown::HashMap;
use serde::Serialize;

use crate::annotations::annotation_field;
use crate::compile::{compile, CompileOptions};
use crate::diagnostic::{Diagnostic, ObjectRef, Severity};
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
    "fails closed: the Ingress answers 503 (error), as ingress-nginx with allow-snippet-annotations: false; sluice.dev/ignore-snippets: \"true\" serves it without the snippet",
);
const WAF: Support = Support::Not(
    "fails closed when it turns a WAF on: the Ingress answers 503 (error); no WAF module, so put one in front of sluice or in the pod",
);
const WAF_SETTING: Support =
    Support::Not("no WAF module (a warning); put a WAF in front of sluice or in the pod");
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
    ("enable-opentelemetry", NO_TRACING),
    ("opentelemetry-trust-incoming-span", NO_TRACING),
    ("opentelemetry-operation-name", NO_TRACING),
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
    ("router.observability.tracing", NO_TRACING),
    ("router.observability.traceverbosity", NO_TRACING),
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

const NGINX_PREFIXES: [&str; 2] = ["nginx.ingress.kubernetes.io/", "ingress.kubernetes.io/"];
const TRAEFIK_PREFIX: &str = "traefik.ingress.kubernetes.io/";

/// How fully sluice honours one annotation as one object uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Grade {
    Fully,
    Partly,
    Not,
}

impl Grade {
    pub fn word(self) -> &'static str {
        match self {
            Self::Fully => "fully",
            Self::Partly => "partly",
            Self::Not => "not",
        }
    }
}

impl Support {
    fn grade(&self) -> Grade {
        match self {
            Self::Full => Grade::Fully,
            Self::Partly(_) => Grade::Partly,
            Self::Not(_) => Grade::Not,
        }
    }
}

/// One annotation found in the snapshot, with the grade its values got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationRow {
    /// The annotation key, with the prefix it was found under.
    pub annotation: String,
    /// How many objects (Ingresses, or Services for `service.*`) carry it with this grade.
    pub objects: usize,
    #[serde(rename = "support")]
    pub grade: Grade,
    /// What differs, or why it is not honoured (empty when fully).
    pub note: String,
}

/// Counts by grade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GradeCounts {
    pub fully: usize,
    pub partly: usize,
    pub not: usize,
}

impl GradeCounts {
    fn add(&mut self, grade: Grade, count: usize) {
        match grade {
            Grade::Fully => self.fully += count,
            Grade::Partly => self.partly += count,
            Grade::Not => self.not += count,
        }
    }
}

/// The totals: annotation uses (object and key) by grade, and objects by their worst grade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub uses: GradeCounts,
    pub objects: GradeCounts,
}

/// The migration report: every controller annotation on the snapshot's Ingresses and
/// Services, graded by the value each object gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    pub rows: Vec<MigrationRow>,
    pub totals: Totals,
}

const UNKNOWN_NGINX: Support = Support::Not("not an ingress-nginx annotation sluice knows of");
const UNKNOWN_TRAEFIK: Support = Support::Not("not a Traefik annotation sluice knows of");

/// The class the report compiles every Ingress as, whatever class it names.
const REPORT_CLASS: &str = "sluice-migration-report";

/// Every ingress-nginx, Traefik and other controller's annotation on the snapshot's Ingresses
/// and Services, served or not (a migration starts with Ingresses of another class), graded
/// by what sluice makes of the value used: a key whose value sluice ignores or refuses is
/// "not" for that object, whatever the key's table says. Rows are sorted by key.
pub fn migration_report(snapshot: &Snapshot, options: &CompileOptions) -> MigrationReport {
    let findings = findings_as_served(snapshot, options);
    let ingresses = snapshot.ingresses.iter().map(|(key, ingress)| {
        (
            ObjectRef::ingress(key),
            ingress.metadata.annotations.as_ref(),
        )
    });
    let services = snapshot.services.iter().map(|(key, service)| {
        let object = ObjectRef::new("Service", Some(&key.namespace), &key.name);
        (object, service.metadata.annotations.as_ref())
    });
    let mut rows: BTreeMap<(String, Grade, String), usize> = BTreeMap::new();
    let mut totals = Totals::default();
    for (object, annotations) in ingresses.chain(services) {
        let Some(annotations) = annotations else {
            continue;
        };
        let mut worst = None;
        for key in annotations.keys() {
            let folded = fold_key(key);
            let Some(support) = support_of(&folded) else {
                continue;
            };
            let field = annotation_field(&folded);
            let (grade, note) = graded(support, findings.get(&(object.clone(), field)));
            totals.uses.add(grade, 1);
            worst = worst.max(Some(grade));
            *rows.entry((key.clone(), grade, note)).or_default() += 1;
        }
        if let Some(worst) = worst {
            totals.objects.add(worst, 1);
        }
    }
    let rows = rows
        .into_iter()
        .map(|((annotation, grade, note), objects)| MigrationRow {
            annotation,
            objects,
            grade,
            note,
        })
        .collect();
    MigrationReport { rows, totals }
}

/// A Traefik key as its decoder reads it (the part after the prefix in any case).
fn fold_key(key: &str) -> String {
    match key.strip_prefix(TRAEFIK_PREFIX) {
        Some(rest) => format!("{TRAEFIK_PREFIX}{}", rest.to_ascii_lowercase()),
        None => key.to_owned(),
    }
}

/// What the compile says about each annotation when every Ingress is served: the real
/// parsers' findings, by object and field.
fn findings_as_served(
    snapshot: &Snapshot,
    options: &CompileOptions,
) -> HashMap<(ObjectRef, String), Vec<Diagnostic>> {
    let mut served = snapshot.clone();
    for ingress in served.ingresses.values_mut() {
        if let Some(annotations) = ingress.metadata.annotations.as_mut() {
            annotations.remove(crate::annotations::INGRESS_CLASS);
        }
        ingress
            .spec
            .get_or_insert_with(Default::default)
            .ingress_class_name = Some(REPORT_CLASS.to_owned());
    }
    let options = CompileOptions {
        ingress_class: REPORT_CLASS.to_owned(),
        ..options.clone()
    };
    let mut findings: HashMap<(ObjectRef, String), Vec<Diagnostic>> = HashMap::new();
    for diagnostic in compile(&served, &options).diagnostics {
        findings
            .entry((diagnostic.object.clone(), diagnostic.field.clone()))
            .or_default()
            .push(diagnostic);
    }
    findings
}

/// The grade and note of one use: an error, or a finding that says the value is ignored, is
/// "not"; another warning is "partly"; else the key's own support.
fn graded(support: Support, findings: Option<&Vec<Diagnostic>>) -> (Grade, String) {
    let findings = findings.map(Vec::as_slice).unwrap_or_default();
    let ignored = |message: &str| {
        let lower = message.to_ascii_lowercase();
        [
            "ignored",
            "invalid value",
            "unsupported value",
            "not honoured",
            "not supported",
            "answers 503",
            "refused",
        ]
        .iter()
        .any(|word| lower.contains(word))
    };
    if let Some(finding) = findings.iter().find(|d| d.severity == Severity::Error) {
        return (Grade::Not, short(&finding.message));
    }
    if let Some(finding) = findings.iter().find(|d| d.severity == Severity::Warning) {
        let grade = if ignored(&finding.message) {
            Grade::Not
        } else {
            Grade::Partly.max(support.grade())
        };
        return (grade, short(&finding.message));
    }
    if let Some(finding) = findings.iter().find(|d| ignored(&d.message)) {
        return (Grade::Not, short(&finding.message));
    }
    (support.grade(), support.note().to_owned())
}

/// A finding's message as a note: its first sentence, at most 160 characters.
fn short(message: &str) -> String {
    let sentence = message.split(". ").next().unwrap_or(message);
    match sentence.char_indices().nth(160) {
        Some((at, _)) => format!("{}…", &sentence[..at]),
        None => sentence.to_owned(),
    }
}

/// The support of a controller annotation key (Traefik keys already folded); `None` for
/// any other key.
fn support_of(key: &str) -> Option<Support> {
    if let Some(name) = NGINX_PREFIXES
        .iter()
        .find_map(|prefix| key.strip_prefix(prefix))
    {
        if let Some(support) = lookup(INGRESS_NGINX, name) {
            return Some(support);
        }
        if key.starts_with("nginx.ingress.kubernetes.io/") {
            return Some(UNKNOWN_NGINX);
        }
    }
    if let Some(name) = key.strip_prefix(TRAEFIK_PREFIX) {
        let numbered = numbered_domain(name);
        return Some(
            lookup(TRAEFIK, numbered.as_deref().unwrap_or(name)).unwrap_or(UNKNOWN_TRAEFIK),
        );
    }
    let controller = crate::annotations::controller_of(key, is_ingress_nginx_name)?;
    Some(Support::Not(match controller {
        "the AWS Load Balancer Controller" => {
            "other controller (the AWS Load Balancer Controller): not honoured"
        }
        "GKE Ingress" => "other controller (GKE Ingress): not honoured",
        "Contour" => "other controller (Contour): not honoured",
        "Kong" => "other controller (Kong): not honoured",
        "F5 NGINX Ingress Controller" => {
            "other controller (F5 NGINX Ingress Controller): not honoured"
        }
        "the HAProxy Kubernetes Ingress Controller" | "HAProxy Ingress" => {
            "other controller (HAProxy): not honoured"
        }
        "the Azure Application Gateway Ingress Controller" => {
            "other controller (Azure Application Gateway): not honoured"
        }
        "the AWS cloud provider's Service load balancer" => {
            "other controller (the AWS cloud provider's load balancer): not honoured"
        }
        _ => "other controller: not honoured",
    }))
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

/// The report as a text table, with the totals by grade.
pub fn render_report(report: &MigrationReport) -> String {
    let rows = &report.rows;
    if rows.is_empty() {
        return "Migration report: no ingress-nginx, Traefik or other controller annotations found.\n".to_owned();
    }
    let width = rows
        .iter()
        .map(|row| row.annotation.len())
        .max()
        .unwrap_or(10)
        .max(10);
    let mut out = format!(
        "Migration report ({} row(s)):\n  {:<width$}  {:>7}  {:<6}  {}\n",
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
            row.grade.word(),
            row.note
        );
    }
    let (uses, objects) = (report.totals.uses, report.totals.objects);
    let _ = writeln!(
        out,
        "\nAnnotation uses honoured fully: {}, partly: {}, not: {}.\nObjects by their least honoured annotation: fully {}, partly {}, not {}.",
        uses.fully, uses.partly, uses.not, objects.fully, objects.partly, objects.not
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

    fn report(yaml: &str) -> MigrationReport {
        let objects = crate::manifest::parse_manifest(yaml, crate::manifest::Format::Yaml)
            .unwrap()
            .into_iter()
            .filter_map(|document| match document {
                crate::manifest::Document::Object(object) => Some(object),
                crate::manifest::Document::Skipped { .. } => None,
            });
        migration_report(&Snapshot::from_objects(objects), &CompileOptions::default())
    }

    fn ingress(name: &str, annotations: &str) -> String {
        format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, annotations: {{{annotations}}}}}\nspec: {{ingressClassName: nginx, rules: [{{host: {name}.test, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]}}\n---\n")
    }

    fn grade_of(report: &MigrationReport, key: &str) -> Vec<(Grade, usize)> {
        report
            .rows
            .iter()
            .filter(|row| row.annotation == key)
            .map(|row| (row.grade, row.objects))
            .collect()
    }

    #[test]
    fn the_value_used_decides_the_grade() {
        let protocol = "nginx.ingress.kubernetes.io/backend-protocol";
        let hash = "nginx.ingress.kubernetes.io/upstream-hash-by";
        let text = ingress("a", &format!("{protocol}: GRPC, {hash}: $remote_addr"))
            + &ingress("b", &format!("{protocol}: FCGI, {hash}: $arg_x"))
            + &ingress("c", &format!("{protocol}: grpcs"))
            + "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n";
        let report = report(&text);
        assert_eq!(
            grade_of(&report, protocol),
            [(Grade::Fully, 2), (Grade::Not, 1)]
        );
        assert_eq!(
            grade_of(&report, hash),
            [(Grade::Fully, 1), (Grade::Not, 1)]
        );
        assert_eq!(
            report.totals.uses,
            GradeCounts {
                fully: 3,
                partly: 0,
                not: 2
            }
        );
        assert_eq!(
            report.totals.objects,
            GradeCounts {
                fully: 2,
                partly: 0,
                not: 1
            }
        );
    }

    #[test]
    fn refusals_middlewares_and_other_controllers_are_graded_by_what_sluice_does() {
        let middleware = "apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {name: strip}\nspec: {stripPrefix: {prefixes: [/a]}}\n---\n";
        let text = middleware.to_owned()
            + &ingress(
                "snippet",
                "nginx.ingress.kubernetes.io/server-snippet: 'deny all;'",
            )
            + &ingress(
                "found",
                "traefik.ingress.kubernetes.io/router.middlewares: default-strip@kubernetescrd",
            )
            + &ingress(
                "missing",
                "traefik.ingress.kubernetes.io/Router.Middlewares: default-gone@kubernetescrd",
            )
            + &ingress("alb", "alb.ingress.kubernetes.io/scheme: internet-facing");
        let report = report(&text);
        assert_eq!(
            grade_of(&report, "nginx.ingress.kubernetes.io/server-snippet"),
            [(Grade::Not, 1)]
        );
        assert_eq!(
            grade_of(&report, "traefik.ingress.kubernetes.io/router.middlewares"),
            [(Grade::Fully, 1)]
        );
        assert_eq!(
            grade_of(&report, "traefik.ingress.kubernetes.io/Router.Middlewares"),
            [(Grade::Not, 1)]
        );
        let alb = &report
            .rows
            .iter()
            .find(|r| r.annotation == "alb.ingress.kubernetes.io/scheme")
            .unwrap();
        assert_eq!(alb.grade, Grade::Not);
        assert!(
            alb.note.contains("AWS Load Balancer Controller"),
            "{}",
            alb.note
        );
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
