//! The Ingress part of a route policy: balancer, sticky cookie and retries from ingress-nginx annotations.

use sluice_routing::{
    ErrorPages, RoutePolicy, SessionAffinity, UpstreamProtocol, UpstreamTimeouts,
};

use super::keys::{classify, PolicyKeys, Setting};
use super::values::{parse_bool, parse_duration, parse_size, Report};
use super::{
    access, affinity, auth, balance, canary, controllers, cors, edits, refusals, retry, tls,
    Annotations,
};
use crate::diagnostic::{Diagnostics, ObjectRef};

/// What an Ingress's policy annotations ask of its routes, before each Service has its say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressPolicy {
    /// The policy of a route to pod endpoints that its Service does not change; `fallback` is
    /// never set here.
    pub route: RoutePolicy,
    /// Fields of the annotations set that choose the endpoint (`load-balance`,
    /// `upstream-hash-by`, `affinity`): what service-upstream mode has to ignore.
    pub endpoint_choice: Vec<String>,
    /// The field of `affinity` when it set a sticky cookie, which wins over a Service's.
    pub affinity: Option<String>,
    /// `backend-protocol`, which wins over what the Service says.
    pub backend_protocol: Option<UpstreamProtocol>,
    /// `proxy-ssl-verify: "on"` and its CA Secret, for pods spoken to over TLS.
    pub proxy_ssl_verify: Option<tls::ProxySslVerify>,
    /// The CAs read from that Secret by the compile (empty when it could not be read: every
    /// certificate is then refused).
    pub verify_roots: Option<Vec<rustls_pki_types::CertificateDer<'static>>>,
    /// The field of `use-regex: "true"` or `rewrite-target`, which make every path of the
    /// Ingress's hosts a regular expression (on every Ingress of those hosts).
    pub regex_paths: Option<String>,
    /// `sluice.dev/trailing-slash-redirect: "false"`: a Prefix path written `/foo/` serves
    /// `/foo` instead of redirecting it.
    pub no_slash_redirect: bool,
    /// `server-alias`: more host names served with the Ingress's hosts' rules, and the field
    /// that named them.
    pub server_aliases: Option<(String, Vec<String>)>,
    /// The field of `from-to-www-redirect: "true"`: `www.` is added to or taken from each rule
    /// host, and requests for that other name get a 308 to the rule host.
    pub www_redirect: Option<String>,
    /// `canary: "true"`: the Ingress takes these requests from the main Ingress of each of
    /// its hosts and paths, and serves no route of its own.
    pub canary: Option<sluice_routing::CanaryRule>,
    /// The Secret of `auth-type` basic or digest, which the compile reads into
    /// `route.access.basic`.
    pub auth_secret: Option<super::AuthSecret>,
    /// `default-backend`: the Service (of the Ingress's namespace) the compile resolves into
    /// `route.error_pages`, with the rank of the annotation prefix it was written under.
    pub default_backend: Option<(String, usize)>,
    /// `custom-headers`: the ConfigMap (namespace, name) whose keys and values the compile
    /// adds to the routes' responses, with the annotation's field.
    pub custom_headers: Option<(String, String, String)>,
    /// The backend Services an AWS load balancer action or condition claims
    /// (`alb.ingress.kubernetes.io/actions.NAME`, `conditions.NAME`), each with its field: sluice
    /// cannot run them, so the paths to them answer 503.
    pub alb_claims: Vec<(String, String)>,
    /// Traefik's `router.middlewares`: the list as written, which the compile resolves.
    pub router_middlewares: Option<String>,
}

/// `proxy-connect-timeout`, `proxy-send-timeout` and `proxy-read-timeout`: seconds as
/// ingress-nginx writes them (a duration such as `90s` is accepted too), greater than zero.
fn upstream_timeouts(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> UpstreamTimeouts {
    let mut read = |name, otherwise| {
        report.parse(
            keys.get(name),
            "whole seconds greater than 0 (such as 60), or a duration (90s)",
            otherwise,
            |value| parse_duration(value).filter(|duration| !duration.is_zero()),
        )
    };
    UpstreamTimeouts {
        connect: read(Setting::ProxyConnectTimeout, "--connect-timeout applies"),
        request: None,
        send: read(Setting::ProxySendTimeout, "--body-idle-timeout applies"),
        read: read(
            Setting::ProxyReadTimeout,
            "--response-header-timeout and --body-idle-timeout apply",
        ),
    }
}

/// The field that makes the Ingress's paths regular expressions: `use-regex: "true"`, or a
/// valid `rewrite-target`, which implies it as in ingress-nginx.
fn regex_paths(
    keys: &PolicyKeys<'_>,
    route: &RoutePolicy,
    report: &mut Report<'_>,
) -> Option<String> {
    let use_regex = report.parse(
        keys.get(Setting::UseRegex),
        "true or false",
        "paths are matched as their pathType says",
        parse_bool,
    );
    let rewrite = keys
        .get(Setting::RewriteTarget)
        .filter(|_| route.edits.rewrite.is_some());
    match (use_regex, rewrite) {
        (Some(true), _) => keys.get(Setting::UseRegex).map(|found| found.field()),
        (_, Some(found)) => Some(found.field()),
        _ => None,
    }
}

/// `custom-http-errors`: comma-separated statuses from 400 to 599; another entry is a warning
/// and only it is dropped.
fn custom_http_errors(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Vec<u16> {
    let Some(found) = keys.get(Setting::CustomHttpErrors) else {
        return Vec::new();
    };
    let mut codes = Vec::new();
    for entry in found
        .value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        match entry.parse::<u16>().ok().filter(|code| (400..600).contains(code)) {
            Some(code) => codes.push(code),
            None => report.warning(found, format!("{entry:?} is not a status from 400 to 599; it is ignored, the other codes apply")),
        }
    }
    codes
}

/// `server-alias`: comma-separated host names; a name that is not a DNS name is a warning and
/// only it is dropped.
fn server_aliases(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<(String, Vec<String>)> {
    let found = keys.get(Setting::ServerAlias)?;
    let mut aliases = Vec::new();
    for alias in found
        .value
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        if is_dns_name(alias) {
            aliases.push(alias.to_ascii_lowercase());
        } else {
            let message = format!(
                "{alias:?} is not a host name (wildcards are not aliases); it is ignored, the other aliases apply"
            );
            report.warning(found, message);
        }
    }
    Some((found.field(), aliases))
}

/// Whether `name` is a DNS name: dot-separated labels of letters, digits and hyphens.
pub(crate) fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `proxy-buffering`, `proxy-request-buffering` and `proxy-http-version`: sluice streams both
/// ways and speaks HTTP/1.1 (or HTTP/2) to pods, so these get a word on what differs.
fn buffering_notes(keys: &PolicyKeys<'_>, report: &mut Report<'_>) {
    let on_off = |value: &str| matches!(value, "on" | "off").then(|| value == "on");
    let notes = [
        (
            Setting::ProxyBuffering,
            "sluice streams responses, as with off: nginx's on reads the whole response before the client gets it, to free the pod from slow clients; sluice bounds each connection's memory by flow control instead",
            "off is sluice's normal behaviour: responses stream to the client",
        ),
        (
            Setting::ProxyRequestBuffering,
            "sluice streams request bodies to the pod rather than reading them whole first (nginx's on); a body up to 64 KiB is kept either way so a retry can resend it",
            "off is sluice's normal behaviour: request bodies stream to the pod",
        ),
    ];
    for (setting, when_on, when_off) in notes {
        let Some(found) = keys.get(setting) else {
            continue;
        };
        match report.parse(Some(found), "on or off", "the body streams", on_off) {
            Some(true) => report.info(found, when_on),
            Some(false) => report.info(found, when_off),
            None => {}
        }
    }
    if let Some(found) = keys.get(Setting::ProxyHttpVersion) {
        match found.value.trim() {
            "1.1" => {}
            "1.0" => report.warning(
                found,
                "ignored: sluice speaks HTTP/1.1 with keep-alive to pods; HTTP/1.0 is not offered",
            ),
            other => report.warning(
                found,
                format!("invalid value {other:?}: expected 1.0 or 1.1; HTTP/1.1 is used"),
            ),
        }
    }
}

/// Reads the policy annotations of a served Ingress; every invalid value is a warning and
/// leaves that setting at its default.
pub(crate) fn ingress_policy(
    annotations: &Annotations,
    namespace: &str,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> IngressPolicy {
    let annotations = &*super::fold_traefik_keys(annotations);
    let mut report = Report {
        object,
        diagnostics,
    };
    let keys = PolicyKeys::scan(annotations, &mut report);
    let router_middlewares = annotations.get(super::ROUTER_MIDDLEWARES).cloned();
    let mut refused = refusals::refused_annotations(annotations, &keys, &mut report);
    refused.extend(controllers::refused_by_other_controllers(
        annotations,
        &mut report,
    ));
    refused.extend(tls::unspoken_protocol(&keys).map(|(found, _)| found.key));
    let alb_claims = controllers::alb_claims(annotations);
    let refused = (!refused.is_empty()).then(|| refused.join(", "));
    let traefik_router = annotations.contains_key(tls::TRAEFIK_ROUTER_TLS)
        || annotations.contains_key(tls::TRAEFIK_ROUTER_ENTRYPOINTS);
    let quiet = keys.is_empty() && !traefik_router && router_middlewares.is_none();
    if quiet && refused.is_none() && alb_claims.is_empty() {
        return IngressPolicy::default();
    }
    let route = RoutePolicy {
        refused,
        balancer: balance::balancer(&keys, &mut report),
        session: affinity::sticky_cookie(&keys, &mut report).map(SessionAffinity::Cookie),
        retry: retry::retry_policy(&keys, &mut report),
        fallback: None,
        max_body_size: report.parse(
            keys.get(Setting::ProxyBodySize),
            "a size such as 1048576, 512k, 8m or 0 (no limit)",
            "the proxy-wide limit (--max-body-size) applies",
            parse_size,
        ),
        tls: tls::tls_policy(&keys, annotations, &mut report),
        source_ranges: access::source_ranges(&keys, &mut report),
        limits: access::rate_limits(&keys, &mut report),
        edits: edits::request_edits(&keys, &mut report),
        cors: cors::cors(&keys, &mut report),
        timeouts: upstream_timeouts(&keys, &mut report),
        access_log_off: report
            .parse(
                keys.get(Setting::EnableAccessLog),
                "true or false",
                "the access log keeps the Ingress's requests",
                parse_bool,
            )
            .is_some_and(|enabled| !enabled),
        tracing: sluice_routing::RouteTracing {
            off: report
                .parse(
                    keys.get(Setting::EnableOpentelemetry),
                    "true or false",
                    "the Ingress's requests are traced as the proxy's flags say",
                    parse_bool,
                )
                .is_some_and(|enabled| !enabled),
            distrust_incoming: report
                .parse(
                    keys.get(Setting::OpentelemetryTrustIncomingSpan),
                    "true or false",
                    "a client's trace is continued",
                    parse_bool,
                )
                .is_some_and(|trusted| !trusted),
        },
        compression: report
            .parse(
                keys.get(Setting::Compression),
                "off, or a comma list of gzip, br and zstd",
                "the proxy's default (--compression) applies",
                |value| sluice_routing::Codings::parse(value).ok(),
            )
            .map_or(
                sluice_routing::Compression::Default,
                sluice_routing::Compression::Codings,
            ),
        ..RoutePolicy::default()
    };
    buffering_notes(&keys, &mut report);
    let (access, auth_secret) = auth::access_control(&keys, namespace, &mut report);
    let mirror = auth::mirror(&keys, &mut report);
    let error_codes = custom_http_errors(&keys, &mut report);
    let default_backend = keys.get(Setting::DefaultBackend).and_then(|found| {
        let name = found.value.trim();
        if is_dns_name(name) && !name.contains('.') {
            let rank = classify(found.key).map_or(0, |(rank, _)| rank);
            Some((name.to_owned(), rank))
        } else {
            report.warning(found, format!("invalid value {name:?}: expected the name of a Service in the Ingress's namespace; no default backend"));
            None
        }
    });
    if let (Some(found), None, true) = (
        keys.get(Setting::CustomHttpErrors),
        &default_backend,
        error_codes.is_empty(),
    ) {
        report.warning(found, "no status code to intercept; ignored");
    }
    let error_pages = (!error_codes.is_empty()).then_some(ErrorPages {
        backend: None,
        codes: error_codes,
    });
    let route = RoutePolicy {
        access,
        mirrors: mirror.into_iter().collect(),
        error_pages,
        ..route
    };
    let backend_protocol = tls::backend_protocol(&keys, &mut report);
    let proxy_ssl_verify = tls::proxy_ssl_verify(&keys, namespace, &mut report);
    let endpoint_choice = [
        Setting::LoadBalance,
        Setting::UpstreamHashBy,
        Setting::Affinity,
    ]
    .into_iter()
    .filter_map(|name| keys.get(name))
    .map(|found| found.field())
    .collect();
    let affinity = route
        .session
        .as_ref()
        .and(keys.get(Setting::Affinity))
        .map(|found| found.field());
    let regex_paths = regex_paths(&keys, &route, &mut report);
    let no_slash_redirect = report
        .parse(
            keys.get(Setting::TrailingSlashRedirect),
            "true or false",
            "a Prefix path written /foo/ answers /foo with a 301 to /foo/",
            parse_bool,
        )
        .is_some_and(|redirect| !redirect);
    IngressPolicy {
        route,
        endpoint_choice,
        affinity,
        backend_protocol,
        proxy_ssl_verify,
        verify_roots: None,
        regex_paths,
        no_slash_redirect,
        server_aliases: server_aliases(&keys, &mut report),
        canary: canary::canary_rule(&keys, &mut report),
        auth_secret,
        default_backend,
        custom_headers: keys.get(Setting::CustomHeaders).map(|found| {
            let value = found.value.trim();
            let (config_namespace, name) = value.split_once('/').unwrap_or((namespace, value));
            (config_namespace.to_owned(), name.to_owned(), found.field())
        }),
        www_redirect: report
            .parse(
                keys.get(Setting::FromToWwwRedirect),
                "true or false",
                "no www redirect",
                parse_bool,
            )
            .filter(|on| *on)
            .and(keys.get(Setting::FromToWwwRedirect))
            .map(|found| found.field()),
        alb_claims,
        router_middlewares,
    }
}
