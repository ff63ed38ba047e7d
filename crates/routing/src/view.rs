//! A serialisable, human-readable view of a routing table for the admin API and `sluice check`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::backend::{BackendId, BackendMode, EndpointSet};
use crate::path::PathKind;
use crate::table::RoutingTable;

/// The whole table as plain data.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableView {
    /// Host as written in the Ingress (`*` for rules with no host) → its routes in precedence order.
    pub hosts: BTreeMap<String, Vec<RouteView>>,
    pub default_backend: Option<BackendId>,
    pub backends: BTreeMap<BackendId, BackendView>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteView {
    pub path: String,
    pub path_type: PathKind,
    pub backend: BackendId,
    pub ingress: String,
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
                        })
                    })
                    .collect();
                (host.to_string(), routes)
            })
            .collect();
        let backends = table
            .backends()
            .iter()
            .map(|backend| {
                let view = BackendView {
                    mode: backend.mode(),
                    endpoints: (*backend.endpoints().load()).clone(),
                };
                (backend.id().clone(), view)
            })
            .collect();
        Self {
            hosts,
            default_backend: table.default_backend().map(|b| b.id().clone()),
            backends,
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
                    "    {:<24} {:<7} -> {}  (from {})",
                    route.path, kind, route.backend, route.ingress
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
        Ok(())
    }
}
