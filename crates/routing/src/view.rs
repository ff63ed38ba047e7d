//! A serialisable, human-readable view of a routing table for the admin API and `sluice check`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::backend::{BackendId, BackendMode, EndpointSet};
use crate::path::PathKind;
use crate::policy::{Balancer, RetryPolicy, RoutePolicy};
use crate::table::RoutingTable;
use crate::tls::VerifyClient;

/// The whole table as plain data.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableView {
    /// Host as written in the Ingress (`*` for rules with no host) → its routes in precedence order.
    pub hosts: BTreeMap<String, Vec<RouteView>>,
    pub default_backend: Option<BackendId>,
    pub backends: BTreeMap<BackendId, BackendView>,
    /// TLS hosts (SNI) → what a handshake for them gets.
    pub tls: BTreeMap<String, TlsView>,
    /// Hosts whose TLS connections are spliced to a backend unterminated.
    pub passthrough: BTreeMap<String, PassthroughView>,
    /// The Secret served to handshakes without a TLS host; `None`: the generated one.
    pub default_certificate: Option<String>,
    /// Gateway API listeners and the HTTPRoute and GRPCRoute rules they serve.
    pub gateways: Vec<GatewayListenerView>,
}

/// One Gateway listener as served.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayListenerView {
    /// The bound address and port.
    pub socket: std::net::SocketAddr,
    /// TLS ends here (HTTPS); a TLS socket's listeners say so by `protocol`.
    pub tls: bool,
    /// `HTTP`, `HTTPS`, `TLS` or `TCP`.
    pub protocol: &'static str,
    /// The listener's hostname (`*` for none).
    pub hostname: String,
    pub rules: Vec<GatewayRuleView>,
}

/// One match of a route rule, under one host, in precedence order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRuleView {
    pub host: String,
    /// The path match, as `PathPrefix /login`, `Exact /`, `RegularExpression ^/v[0-9]`.
    #[serde(rename = "match")]
    pub path: String,
    pub method: Option<String>,
    /// Header and query conditions, as `header x-env=canary`, `query debug=1`.
    pub conditions: Vec<String>,
    /// The route, as `namespace/name`.
    pub route: String,
    /// Each backendRef by weight; `invalid` for one that does not resolve (500).
    pub backends: Vec<(String, u32)>,
}

/// A canary Ingress's claim on a route: what decides, and where it sends.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryView {
    /// What decides, in ingress-nginx's order: `header`, `header value`, `header pattern`,
    /// `cookie`, `weight`.
    pub kinds: Vec<&'static str>,
    pub header: Option<String>,
    pub header_value: Option<String>,
    pub header_pattern: Option<String>,
    pub cookie: Option<String>,
    pub weight: u32,
    pub weight_total: u32,
    pub backend: BackendId,
    pub ingress: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsView {
    pub ingress: String,
    /// `namespace/name` of the Secret, or `default` when the host falls back to the default
    /// certificate (a diagnostic says why).
    pub certificate: String,
    /// The CA Secret client certificates must chain to, and whether one is required.
    pub client_auth: Option<ClientAuthView>,
}

#[derive(Debug, Serialize)]
pub struct ClientAuthView {
    pub secret: String,
    pub verify: VerifyClient,
}

#[derive(Debug, Serialize)]
pub struct PassthroughView {
    pub ingress: String,
    pub backend: BackendId,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteView {
    pub path: String,
    pub path_type: PathKind,
    pub backend: BackendId,
    pub ingress: String,
    /// Balancer, sticky cookie, retries and fallback, as compiled from annotations.
    pub policy: Arc<RoutePolicy>,
    /// The canary that takes some of the route's requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryView>,
}

#[derive(Debug, Serialize)]
pub struct BackendView {
    pub mode: BackendMode,
    pub endpoints: EndpointSet,
}

impl TableView {
    pub fn of(table: &RoutingTable) -> Self {
        let backend_id = |index| table.backend(index).map(|b| b.id().clone());
        let hosts = table
            .hosts()
            .into_iter()
            .map(|(host, routes)| {
                let routes = routes
                    .iter()
                    .filter_map(|route| {
                        Some(RouteView {
                            path: route.path.path().to_owned(),
                            path_type: route.path.kind(),
                            backend: backend_id(route.backend)?,
                            ingress: route.ingress.to_string(),
                            policy: route.policy.clone(),
                            canary: route.canary.as_deref().and_then(|canary| {
                                canary_view(canary, backend_id(canary.backend)?)
                            }),
                        })
                    })
                    .collect();
                (host.to_string(), routes)
            })
            .collect();
        let backends = table
            .service_backends()
            .map(|backend| {
                let view = BackendView {
                    mode: backend.mode(),
                    endpoints: (*backend.endpoints().load()).clone(),
                };
                (backend.id().clone(), view)
            })
            .collect();
        let tls = table
            .tls()
            .sites()
            .into_iter()
            .map(|(host, site)| {
                let view = TlsView {
                    ingress: site.ingress.to_string(),
                    certificate: site
                        .certificate
                        .as_ref()
                        .map_or_else(|| "default".to_owned(), |c| c.source.to_string()),
                    client_auth: site.client_auth.as_ref().map(|auth| ClientAuthView {
                        secret: auth.secret.to_string(),
                        verify: auth.verify,
                    }),
                };
                (host.to_string(), view)
            })
            .collect();
        let passthrough = table
            .tls()
            .passthrough_hosts()
            .into_iter()
            .filter_map(|(host, (index, ingress))| {
                let view = PassthroughView {
                    ingress: ingress.to_string(),
                    backend: backend_id(*index)?,
                };
                Some((host.to_string(), view))
            })
            .collect();
        Self {
            hosts,
            default_backend: table.default_backend().map(|b| b.id().clone()),
            backends,
            tls,
            passthrough,
            default_certificate: table
                .tls()
                .default_certificate()
                .map(|certificate| certificate.source.to_string()),
            gateways: gateway_views(table),
        }
    }
}

fn canary_view(canary: &crate::table::CanaryRoute, backend: BackendId) -> Option<CanaryView> {
    let rule = &canary.rule;
    let mut kinds = Vec::new();
    if rule.header.is_some() {
        kinds.push(match (&rule.header_value, &rule.header_pattern) {
            (Some(value), _) if !value.is_empty() => "header value",
            (_, Some(_)) => "header pattern",
            _ => "header",
        });
    }
    if rule.cookie.is_some() {
        kinds.push("cookie");
    }
    if rule.weight > 0 {
        kinds.push("weight");
    }
    Some(CanaryView {
        kinds,
        header: rule.header.clone(),
        header_value: rule.header_value.clone().filter(|v| !v.is_empty()),
        header_pattern: rule.header_pattern.as_ref().map(|p| p.as_str().to_owned()),
        cookie: rule.cookie.clone(),
        weight: rule.weight,
        weight_total: rule.weight_total,
        backend,
        ingress: canary.ingress.to_string(),
    })
}

fn gateway_views(table: &RoutingTable) -> Vec<GatewayListenerView> {
    table
        .gateways()
        .served()
        .into_iter()
        .map(|listener| GatewayListenerView {
            socket: listener.socket,
            tls: listener.protocol == crate::gateway::SocketProtocol::Https,
            protocol: listener.protocol.as_str(),
            hostname: listener.hostname.to_string(),
            rules: listener
                .rules
                .iter()
                .flat_map(|(host, rules)| {
                    rules
                        .iter()
                        .map(move |rule| gateway_rule_view(table, host, rule))
                })
                .collect(),
        })
        .collect()
}

fn gateway_rule_view(
    table: &RoutingTable,
    host: &str,
    rule: &crate::gateway::GatewayRule,
) -> GatewayRuleView {
    let matched = &rule.request_match;
    let path = match matched.path.kind() {
        PathKind::Exact => format!("Exact {}", matched.path.path()),
        PathKind::Prefix => format!("PathPrefix {}", matched.path.path()),
        PathKind::Regex => format!("RegularExpression {}", matched.path.path()),
    };
    let condition = |what: &str, name: &str, value: &crate::gateway::ValueCondition| match value {
        crate::gateway::ValueCondition::Exact(text) => format!("{what} {name}={text}"),
        crate::gateway::ValueCondition::Regex(regex) => format!("{what} {name}~{}", regex.as_str()),
    };
    let conditions = matched
        .headers
        .iter()
        .map(|(name, value)| condition("header", name.as_str(), value))
        .chain(
            matched
                .query
                .iter()
                .map(|(name, value)| condition("query", name, value)),
        )
        .collect();
    let backends = rule
        .action
        .choices
        .iter()
        .map(|choice| {
            let id = choice
                .backend
                .and_then(|index| table.backend(index))
                .filter(|backend| !backend.id().is_redirect_only())
                .map_or_else(
                    || match choice.backend {
                        Some(_) => "(answered by the rule's filters)".to_owned(),
                        None => "invalid".to_owned(),
                    },
                    |backend| backend.id().to_string(),
                );
            (id, choice.weight)
        })
        .collect();
    GatewayRuleView {
        host: host.to_owned(),
        path,
        method: matched.method.as_ref().map(ToString::to_string),
        conditions,
        route: rule.route.to_string(),
        backends,
    }
}

impl fmt::Display for TableView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Ingress routes:")?;
        if self.hosts.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (host, routes) in &self.hosts {
            writeln!(f, "  {host}")?;
            for route in routes {
                let kind = format!("{:?}", route.path_type);
                writeln!(
                    f,
                    "    {:<24} {:<7} -> {}  (from {}){}",
                    route.path,
                    kind,
                    route.backend,
                    route.ingress,
                    policy_summary(&route.policy)
                )?;
                if let Some(canary) = &route.canary {
                    writeln!(
                        f,
                        "    {:<32} -> {}  (canary from {}: {})",
                        "",
                        canary.backend,
                        canary.ingress,
                        canary_summary(canary)
                    )?;
                }
            }
        }
        if let Some(default) = &self.default_backend {
            writeln!(f, "  default backend -> {default}")?;
        }
        writeln!(f, "Backends:")?;
        if self.backends.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (id, backend) in &self.backends {
            let ready = backend.endpoints.ready().iter().map(ToString::to_string);
            let terminating = backend
                .endpoints
                .terminating()
                .iter()
                .map(|endpoint| format!("{endpoint} (terminating)"));
            let endpoints: Vec<String> = ready.chain(terminating).collect();
            let endpoints = if endpoints.is_empty() {
                "no endpoints".to_owned()
            } else {
                endpoints.join(", ")
            };
            writeln!(f, "  {id} [{}] {endpoints}", backend.mode)?;
        }
        self.fmt_tls(f)?;
        self.fmt_gateways(f)
    }
}

/// `header X-Canary = always`, `cookie canary`, `weight 20/100`.
fn canary_summary(canary: &CanaryView) -> String {
    let mut parts = Vec::new();
    if let Some(header) = &canary.header {
        parts.push(match (&canary.header_value, &canary.header_pattern) {
            (Some(value), _) => format!("header {header} = {value}"),
            (_, Some(pattern)) => format!("header {header} ~ {pattern}"),
            _ => format!("header {header} always/never"),
        });
    }
    if let Some(cookie) = &canary.cookie {
        parts.push(format!("cookie {cookie} always/never"));
    }
    if canary.weight > 0 {
        parts.push(format!("weight {}/{}", canary.weight, canary.weight_total));
    }
    parts.join(", then ")
}

impl TableView {
    fn fmt_gateways(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.gateways.is_empty() {
            return Ok(());
        }
        writeln!(f, "Gateway API routes:")?;
        for listener in &self.gateways {
            let protocol = listener.protocol;
            writeln!(
                f,
                "  {} {protocol} listener {}",
                listener.socket, listener.hostname
            )?;
            if listener.rules.is_empty() {
                writeln!(f, "    (no route attached)")?;
            }
            let http = matches!(listener.protocol, "HTTP" | "HTTPS");
            for rule in &listener.rules {
                // A stream's rule matches every connection its host takes.
                let mut matched = if http {
                    rule.path.clone()
                } else {
                    "(every connection)".to_owned()
                };
                if let Some(method) = &rule.method {
                    matched.push_str(&format!(" {method}"));
                }
                for condition in &rule.conditions {
                    matched.push_str(&format!(", {condition}"));
                }
                let backends: Vec<String> = rule
                    .backends
                    .iter()
                    .map(|(backend, weight)| match rule.backends.len() {
                        1 => backend.clone(),
                        _ => format!("{backend} ({weight})"),
                    })
                    .collect();
                writeln!(
                    f,
                    "    {} {matched} -> {}  (from {})",
                    rule.host,
                    backends.join(", "),
                    rule.route
                )?;
            }
        }
        Ok(())
    }

    fn fmt_tls(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tls.is_empty() && self.passthrough.is_empty() {
            return Ok(());
        }
        writeln!(f, "TLS:")?;
        for (host, site) in &self.tls {
            let client = site.client_auth.as_ref().map_or(String::new(), |auth| {
                format!(
                    ", client certificates {:?} from {}",
                    auth.verify, auth.secret
                )
            });
            writeln!(
                f,
                "  {host:<30} certificate {}{client}  (from {})",
                site.certificate, site.ingress
            )?;
        }
        for (host, passthrough) in &self.passthrough {
            writeln!(
                f,
                "  {host:<30} passthrough -> {}  (from {})",
                passthrough.backend, passthrough.ingress
            )?;
        }
        Ok(())
    }
}

/// The ways a policy differs from the default, e.g. ` [least_request, sticky cookie route]`;
/// empty for the default policy.
fn policy_summary(policy: &RoutePolicy) -> String {
    let mut parts = Vec::new();
    match &policy.balancer {
        Balancer::RoundRobin => {}
        Balancer::LeastRequest => parts.push("least_request".to_owned()),
        Balancer::Ewma => parts.push("ewma".to_owned()),
        Balancer::Hash(key) => parts.push(format!("hash {key}")),
    }
    match &policy.session {
        Some(crate::SessionAffinity::Cookie(cookie)) => {
            parts.push(format!("sticky cookie {}", cookie.name));
        }
        Some(crate::SessionAffinity::Header(name)) => parts.push(format!("session header {name}")),
        None => {}
    }
    if policy.retry != RetryPolicy::default() {
        let retry = &policy.retry;
        if retry.on.off {
            parts.push("no retries".to_owned());
        } else {
            parts.push(format!("tries {}", retry.tries));
        }
    }
    if let Some(fallback) = &policy.fallback {
        parts.push(format!("fallback {fallback}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("  [{}]", parts.join(", "))
    }
}
