//! The routing table and its builder: host → ordered path routes → backend, plus a default backend.

use std::collections::BTreeMap;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;
use std::sync::Arc;

use crate::attached::Attached;
use crate::backend::{Backend, BackendId, BackendIndex};
use crate::canary::CanaryRule;
use crate::gateway::{GatewayOutcome, GatewaySockets, GatewaySocketsBuilder, RequestFacts};
use crate::host::{wildcard_suffix, HostMatch};
use crate::path::PathMatch;
use crate::policy::RoutePolicy;
use crate::tls::{Certificate, TlsHosts, TlsSite};

/// One path rule under a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub path: PathMatch,
    pub backend: BackendIndex,
    /// The Ingress the rule came from, as `namespace/name` (shared by all its routes).
    pub ingress: Arc<str>,
    /// How requests use the backend (shared by the routes of one Ingress and Service).
    pub policy: Arc<RoutePolicy>,
    /// The data plane's handles for this route's metrics, resolved on first use.
    pub telemetry: Attached,
    /// A canary Ingress's claim on some of this route's requests.
    pub canary: Option<Box<CanaryRoute>>,
}

/// The canary side of a route: its backend, its Ingress and which requests it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanaryRoute {
    pub backend: BackendIndex,
    pub ingress: Arc<str>,
    pub rule: Arc<CanaryRule>,
    pub telemetry: Attached,
}

/// A route's canary as a lookup finds it.
#[derive(Clone, Copy, Debug)]
pub struct Canary<'t> {
    pub backend: &'t Backend,
    pub ingress: &'t str,
    pub rule: &'t CanaryRule,
    pub telemetry: &'t Attached,
}

/// What a lookup finds: the backend and the policy of the route that led to it, with the
/// route's Ingress and its slot for metric handles.
#[derive(Clone, Copy, Debug)]
pub struct Target<'t> {
    pub backend: &'t Backend,
    pub policy: &'t RoutePolicy,
    /// `namespace/name` of the Ingress, empty for the default backend of none.
    pub ingress: &'t str,
    pub telemetry: &'t Attached,
    /// The route's path; `None` for the default backend.
    pub path: Option<&'t PathMatch>,
    /// The canary that may take the request instead.
    pub canary: Option<Canary<'t>>,
}

impl<'t> Target<'t> {
    /// The same route served by its canary's backend, under the canary's Ingress (the main
    /// route's policy applies, as in ingress-nginx).
    pub fn to_canary(self) -> Self {
        match self.canary {
            Some(canary) => Self {
                backend: canary.backend,
                ingress: canary.ingress,
                telemetry: canary.telemetry,
                canary: None,
                ..self
            },
            None => self,
        }
    }
}

/// The default backend: where it is, its policy and its metric handles' slot.
#[derive(Debug, PartialEq)]
struct DefaultBackend {
    index: BackendIndex,
    policy: Arc<RoutePolicy>,
    telemetry: Attached,
}

/// Routes for one host, kept in precedence order (see [`PathMatch`]'s `Ord`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PathRoutes(Vec<Route>);

impl PathRoutes {
    fn find(&self, path: &str) -> Option<&Route> {
        self.0.iter().find(|route| route.path.matches(path))
    }

    pub(crate) fn routes(&self) -> &[Route] {
        &self.0
    }
}

/// The immutable table the data plane reads: built by [`TableBuilder`], published whole.
///
/// Lookup order: the exact host's routes, then the one-label wildcard's, then the rules with no
/// host, then the default backend. Within each, the first route in precedence order that matches
/// the path wins, so a more specific host always beats a less specific one for the same path.
#[derive(Debug, Default, PartialEq)]
pub struct RoutingTable {
    exact_hosts: HashMap<Arc<str>, PathRoutes>,
    wildcard_hosts: HashMap<Arc<str>, PathRoutes>,
    any_host: PathRoutes,
    default_backend: Option<DefaultBackend>,
    /// Backends in the order the compiler added them (deterministic for a given snapshot).
    backends: Vec<Backend>,
    /// Where each backend id sits in `backends`.
    positions: HashMap<BackendId, BackendIndex>,
    /// Certificates by SNI host, client-certificate rules and passthrough hosts.
    tls: TlsHosts,
    /// `server-alias`: alias → the exact host whose routes it shares.
    aliases: HashMap<Arc<str>, Arc<str>>,
    /// `from-to-www-redirect`: a host no rule names → the rule host it redirects to.
    host_redirects: HashMap<Arc<str>, Arc<str>>,
    /// The listeners of served Gateways, by the socket they are bound on.
    gateways: GatewaySockets,
}

/// Why a request on a Gateway listener has no target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayMiss {
    /// No listener hostname or no rule matched: 404.
    NoRoute,
    /// The rule matched, but the backendRef drawn is invalid, or it has none: 500.
    NoBackend,
}

impl RoutingTable {
    /// The host a request for `host` is redirected to (`from-to-www-redirect`); never a host
    /// with routes of its own.
    pub fn host_redirect(&self, host: &str) -> Option<&str> {
        if self.host_redirects.is_empty() {
            return None;
        }
        self.host_redirects.get(host).map(|to| &**to)
    }

    /// The TLS part: certificates by host, client-certificate rules, passthrough hosts.
    pub fn tls(&self) -> &TlsHosts {
        &self.tls
    }

    /// The backend a passed-through TLS host is spliced to, with its Ingress.
    pub fn passthrough(&self, host: &str) -> Option<(&Backend, &Arc<str>)> {
        let (index, ingress) = self.tls.passthrough(host)?;
        Some((self.backends.get(index.0)?, ingress))
    }

    /// The backend for a normalised host (see [`crate::normalize_request_host`]) and a request
    /// path without its query string, or `None` when nothing, not even a default, matches.
    pub fn lookup(&self, host: &str, path: &str) -> Option<Target<'_>> {
        let exact = self.exact_hosts.get(host).or_else(|| {
            let aliased = self.aliases.get(host)?;
            self.exact_hosts.get(aliased)
        });
        let route = exact
            .and_then(|routes| routes.find(path))
            .or_else(|| {
                let suffix = wildcard_suffix(host)?;
                self.wildcard_hosts.get(suffix)?.find(path)
            })
            .or_else(|| self.any_host.find(path));
        match route {
            Some(route) => Some(Target {
                backend: self.backends.get(route.backend.0)?,
                policy: &route.policy,
                ingress: &route.ingress,
                telemetry: &route.telemetry,
                path: Some(&route.path),
                canary: route.canary.as_deref().and_then(|canary| {
                    Some(Canary {
                        backend: self.backends.get(canary.backend.0)?,
                        ingress: &canary.ingress,
                        rule: &canary.rule,
                        telemetry: &canary.telemetry,
                    })
                }),
            }),
            None => {
                let default = self.default_backend.as_ref()?;
                Some(Target {
                    backend: self.backends.get(default.index.0)?,
                    policy: &default.policy,
                    ingress: "",
                    telemetry: &default.telemetry,
                    path: None,
                    canary: None,
                })
            }
        }
    }

    /// The Gateway listeners: which sockets to bind and what each serves.
    pub fn gateways(&self) -> &GatewaySockets {
        &self.gateways
    }

    /// The target of a request that arrived on the Gateway socket `socket`, for a normalised
    /// `host`; `draw(total)` picks a weighted backendRef with a number in `1..=total`.
    pub fn gateway_lookup(
        &self,
        socket: std::net::SocketAddr,
        host: &str,
        request: &RequestFacts<'_>,
        draw: impl FnOnce(u32) -> u32,
    ) -> Result<Target<'_>, GatewayMiss> {
        let GatewayOutcome::Matched { rule, choice } =
            self.gateways.lookup(socket, host, request, draw)
        else {
            return Err(GatewayMiss::NoRoute);
        };
        let choice = choice.ok_or(GatewayMiss::NoBackend)?;
        let backend = choice
            .backend
            .and_then(|index| self.backend(index))
            .ok_or(GatewayMiss::NoBackend)?;
        Ok(Target {
            backend,
            policy: &choice.policy,
            ingress: &rule.route,
            telemetry: &choice.telemetry,
            path: Some(&rule.request_match.path),
            canary: None,
        })
    }

    /// Every backend, in the order the compiler added them.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// The backends that stand for Services: every one but the redirect-only placeholder.
    /// What reports (the API, metrics, the table view) list.
    pub fn service_backends(&self) -> impl Iterator<Item = &Backend> {
        self.backends.iter().filter(|b| !b.id().is_redirect_only())
    }

    pub fn backend(&self, index: BackendIndex) -> Option<&Backend> {
        self.backends.get(index.0)
    }

    /// The backend with this id, if any route uses it.
    pub fn backend_by_id(&self, id: &BackendId) -> Option<&Backend> {
        let position = self.positions.get(id)?;
        self.backends.get(position.0)
    }

    pub fn default_backend(&self) -> Option<&Backend> {
        self.default_backend
            .as_ref()
            .and_then(|default| self.backend(default.index))
    }

    /// Every host with its routes in precedence order, sorted by host for stable output.
    pub fn hosts(&self) -> BTreeMap<HostMatch, &[Route]> {
        let exact = self
            .exact_hosts
            .iter()
            .map(|(host, routes)| (HostMatch::Exact(host.clone()), routes.routes()));
        let wildcard = self
            .wildcard_hosts
            .iter()
            .map(|(suffix, routes)| (HostMatch::Wildcard(suffix.clone()), routes.routes()));
        let mut hosts: BTreeMap<HostMatch, &[Route]> = exact.chain(wildcard).collect();
        if !self.any_host.0.is_empty() {
            hosts.insert(HostMatch::Any, self.any_host.routes());
        }
        hosts
    }
}

/// A route as added: host, path, backend id, Ingress and policy.
type PendingRoute = (HostMatch, PathMatch, BackendId, Arc<str>, Arc<RoutePolicy>);

/// Collects backends and routes, then sorts everything into a [`RoutingTable`].
#[derive(Debug, Default)]
pub struct TableBuilder {
    backends: Vec<Backend>,
    positions: HashMap<BackendId, BackendIndex>,
    routes: Vec<PendingRoute>,
    default_backend: Option<(BackendId, Arc<RoutePolicy>)>,
    tls: TlsHosts,
    passthrough: Vec<(HostMatch, BackendId, Arc<str>)>,
    aliases: HashMap<Arc<str>, Arc<str>>,
    host_redirects: HashMap<Arc<str>, Arc<str>>,
    canaries: Vec<PendingCanary>,
    gateways: GatewaySocketsBuilder,
}

/// A canary as added: the main route's host and path, the canary's backend, Ingress and rule.
type PendingCanary = (HostMatch, PathMatch, BackendId, Arc<str>, Arc<CanaryRule>);

impl TableBuilder {
    /// Lets a canary Ingress take some requests of the route at `host` and `path` (added with
    /// [`Self::add_route`]); a canary for a route that is not there is dropped at build.
    pub fn add_canary(
        &mut self,
        (host, path): (HostMatch, PathMatch),
        backend: BackendId,
        ingress: Arc<str>,
        rule: Arc<CanaryRule>,
    ) {
        self.canaries.push((host, path, backend, ingress, rule));
    }

    /// Serves `alias` with the routes of the exact host `host` (the first alias of a name
    /// wins; the compiler never aliases a host that has routes of its own).
    pub fn add_alias(&mut self, alias: &str, host: &str) {
        self.aliases
            .entry(alias.into())
            .or_insert_with(|| host.into());
    }

    /// Answers requests for `from` with a redirect to `to` (the first redirect of a name wins).
    pub fn add_host_redirect(&mut self, from: &str, to: &str) {
        self.host_redirects
            .entry(from.into())
            .or_insert_with(|| to.into());
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a backend; a second backend with the same id is ignored (the compiler builds one
    /// per id).
    pub fn add_backend(&mut self, backend: Backend) {
        if let Entry::Vacant(vacant) = self.positions.entry(backend.id().clone()) {
            vacant.insert(BackendIndex(self.backends.len()));
            self.backends.push(backend);
        }
    }

    /// The backends added, in order, without building a table (the routes are dropped).
    pub fn into_backends(self) -> Vec<Backend> {
        self.backends
    }

    pub fn has_backend(&self, id: &BackendId) -> bool {
        self.positions.contains_key(id)
    }

    /// Where a backend added with [`Self::add_backend`] sits in the table.
    pub fn backend_index(&self, id: &BackendId) -> Option<BackendIndex> {
        self.positions.get(id).copied()
    }

    /// The Gateway listeners and their rules, built with the table.
    pub fn gateways(&mut self) -> &mut GatewaySocketsBuilder {
        &mut self.gateways
    }

    /// Adds a route to a backend added with [`Self::add_backend`]; routes to unknown backends
    /// are dropped at [`Self::build`].
    pub fn add_route(
        &mut self,
        host: HostMatch,
        path: PathMatch,
        backend: BackendId,
        ingress: Arc<str>,
        policy: Arc<RoutePolicy>,
    ) {
        self.routes.push((host, path, backend, ingress, policy));
    }

    pub fn set_default_backend(&mut self, backend: BackendId, policy: Arc<RoutePolicy>) {
        self.default_backend = Some((backend, policy));
    }

    /// Serves `site` for `host` unless another site already has it; says whether it did.
    pub fn add_tls_site(&mut self, host: HostMatch, site: Arc<TlsSite>) -> bool {
        self.tls.sites.insert_new(host, site)
    }

    /// The certificate for handshakes that name no TLS host (`--default-certificate`).
    pub fn set_default_certificate(&mut self, certificate: Arc<Certificate>) {
        self.tls.default_certificate = Some(certificate);
    }

    /// Splices TLS connections for `host` to a backend added with [`Self::add_backend`]; a
    /// host passed through already keeps its first backend.
    pub fn add_passthrough(&mut self, host: HostMatch, backend: BackendId, ingress: Arc<str>) {
        self.passthrough.push((host, backend, ingress));
    }

    pub fn build(self) -> RoutingTable {
        let index_of = &self.positions;
        let mut tls = self.tls;
        for (host, backend, ingress) in self.passthrough {
            if let Some(&index) = index_of.get(&backend) {
                tls.passthrough.insert_new(host, (index, ingress));
            }
        }
        let mut table = RoutingTable {
            aliases: self.aliases,
            host_redirects: self.host_redirects,
            default_backend: self.default_backend.and_then(|(id, policy)| {
                Some(DefaultBackend {
                    index: *index_of.get(&id)?,
                    policy,
                    telemetry: Attached::default(),
                })
            }),
            tls,
            gateways: self.gateways.build(),
            ..RoutingTable::default()
        };
        for (host, path, backend, ingress, policy) in self.routes {
            let Some(&backend) = index_of.get(&backend) else {
                continue;
            };
            let routes = match host {
                HostMatch::Any => &mut table.any_host,
                HostMatch::Exact(name) => table.exact_hosts.entry(name).or_default(),
                HostMatch::Wildcard(suffix) => table.wildcard_hosts.entry(suffix).or_default(),
            };
            routes.0.push(Route {
                path,
                backend,
                ingress,
                policy,
                telemetry: Attached::default(),
                canary: None,
            });
        }
        for (host, path, backend, ingress, rule) in self.canaries {
            let Some(&backend) = index_of.get(&backend) else {
                continue;
            };
            let routes = match &host {
                HostMatch::Any => Some(&mut table.any_host),
                HostMatch::Exact(name) => table.exact_hosts.get_mut(name),
                HostMatch::Wildcard(suffix) => table.wildcard_hosts.get_mut(suffix),
            };
            let route = routes.and_then(|routes| routes.0.iter_mut().find(|r| r.path == path));
            if let Some(route) = route {
                route.canary = Some(Box::new(CanaryRoute {
                    backend,
                    ingress,
                    rule,
                    telemetry: Attached::default(),
                }));
            }
        }
        let all_routes = table
            .exact_hosts
            .values_mut()
            .chain(table.wildcard_hosts.values_mut())
            .chain(std::iter::once(&mut table.any_host));
        for routes in all_routes {
            routes
                .0
                .sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.ingress.cmp(&b.ingress)));
        }
        table.backends = self.backends;
        table.positions = self.positions;
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendMode, EndpointSet};

    fn table(routes: &[(&str, PathMatch, &str)], default: Option<&str>) -> RoutingTable {
        let mut builder = TableBuilder::new();
        for (host, path, service) in routes {
            let id = BackendId::new("ns", service, "80");
            builder.add_backend(Backend::new(
                id.clone(),
                BackendMode::Endpoints,
                EndpointSet::default(),
            ));
            builder.add_route(
                HostMatch::from_rule_host(Some(host)),
                path.clone(),
                id,
                "ns/ing".into(),
                Arc::default(),
            );
        }
        if let Some(service) = default {
            let id = BackendId::new("ns", service, "80");
            builder.add_backend(Backend::new(
                id.clone(),
                BackendMode::Endpoints,
                EndpointSet::default(),
            ));
            builder.set_default_backend(id, Arc::default());
        }
        builder.build()
    }

    fn service_for(table: &RoutingTable, host: &str, path: &str) -> Option<String> {
        table.lookup(host, path).map(|target| {
            target
                .backend
                .id()
                .as_str()
                .trim_start_matches("ns/")
                .trim_end_matches(":80")
                .to_owned()
        })
    }

    #[test]
    fn longest_path_wins() {
        let t = table(
            &[
                ("", PathMatch::prefix("/"), "root"),
                ("", PathMatch::prefix("/api"), "api"),
            ],
            None,
        );
        assert_eq!(service_for(&t, "x", "/api/v1").as_deref(), Some("api"));
        assert_eq!(service_for(&t, "x", "/apix").as_deref(), Some("root"));
    }

    #[test]
    fn exact_beats_prefix_of_equal_length() {
        let t = table(
            &[
                ("", PathMatch::prefix("/foo"), "prefix"),
                ("", PathMatch::exact("/foo"), "exact"),
            ],
            None,
        );
        assert_eq!(service_for(&t, "x", "/foo").as_deref(), Some("exact"));
        assert_eq!(service_for(&t, "x", "/foo/bar").as_deref(), Some("prefix"));
    }

    #[test]
    fn exact_host_beats_wildcard() {
        let t = table(
            &[
                ("*.example.com", PathMatch::prefix("/"), "wild"),
                ("a.example.com", PathMatch::prefix("/"), "exact"),
            ],
            None,
        );
        assert_eq!(
            service_for(&t, "a.example.com", "/").as_deref(),
            Some("exact")
        );
        assert_eq!(
            service_for(&t, "b.example.com", "/").as_deref(),
            Some("wild")
        );
    }

    #[test]
    fn wildcard_beats_any_host() {
        let t = table(
            &[
                ("", PathMatch::prefix("/"), "any"),
                ("*.example.com", PathMatch::prefix("/"), "wild"),
            ],
            None,
        );
        assert_eq!(
            service_for(&t, "b.example.com", "/").as_deref(),
            Some("wild")
        );
        assert_eq!(service_for(&t, "b.other.com", "/").as_deref(), Some("any"));
    }

    #[test]
    fn host_specificity_beats_path_length() {
        let t = table(
            &[
                ("", PathMatch::prefix("/a/b/c"), "any"),
                ("h.test", PathMatch::prefix("/"), "host"),
            ],
            None,
        );
        assert_eq!(service_for(&t, "h.test", "/a/b/c").as_deref(), Some("host"));
    }

    #[test]
    fn unmatched_path_on_a_known_host_falls_through_to_less_specific_hosts() {
        let t = table(
            &[
                ("h.test", PathMatch::prefix("/api"), "api"),
                ("", PathMatch::prefix("/"), "any"),
            ],
            None,
        );
        assert_eq!(service_for(&t, "h.test", "/other").as_deref(), Some("any"));
    }

    #[test]
    fn default_backend_takes_what_nothing_else_matches() {
        let t = table(
            &[("h.test", PathMatch::exact("/only"), "only")],
            Some("fallback"),
        );
        assert_eq!(
            service_for(&t, "h.test", "/else").as_deref(),
            Some("fallback")
        );
        assert_eq!(
            service_for(&t, "other.test", "/only").as_deref(),
            Some("fallback")
        );
    }

    #[test]
    fn no_match_and_no_default_is_none() {
        let t = table(&[("h.test", PathMatch::exact("/only"), "only")], None);
        assert!(t.lookup("h.test", "/else").is_none());
    }

    proptest::proptest! {
        #[test]
        fn lookup_never_panics_on_any_host_or_path(host in ".{0,40}", path in ".{0,40}") {
            let t = table(
                &[("*.example.com", PathMatch::prefix("/a"), "w"), ("a.example.com", PathMatch::exact("/"), "e"), ("", PathMatch::prefix("/"), "any")],
                Some("d"),
            );
            let normalized = crate::normalize_request_host(&host);
            proptest::prop_assert!(t.lookup(&normalized, &path).is_some(), "a default backend always answers");
        }
    }

    #[test]
    fn same_input_builds_equal_tables() {
        let routes = [
            ("a.test", PathMatch::prefix("/"), "a"),
            ("", PathMatch::exact("/x"), "b"),
        ];
        assert_eq!(table(&routes, Some("c")), table(&routes, Some("c")));
        assert_ne!(table(&routes, Some("c")), table(&routes, None));
    }
}
