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
        }
    }
}

impl fmt::Display for TableView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Routes:")?;
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
        self.fmt_tls(f)
    }
}

impl TableView {
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
    if let Some(cookie) = &policy.sticky {
        parts.push(format!("sticky cookie {}", cookie.name));
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
