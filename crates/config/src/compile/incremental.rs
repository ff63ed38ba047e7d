//! Incremental compile: each Ingress compiles into a fragment cached with the inputs it read, and a merge combines the fragments into the table, so a change to one Ingress recompiles only that Ingress.
//!
//! A fragment holds an Ingress's routes, default backend, backends, endpoint sources and
//! diagnostics, exactly as they come out of compiling that Ingress alone. What crosses
//! Ingresses (which of two claims to the same host and path wins, whose defaultBackend serves)
//! is decided by the merge, in age order, every time. A cached fragment is reused while its
//! inputs are unchanged: the Ingress itself, every Service it referenced (present or missing),
//! every endpoint set it read, and the IngressClasses. Objects from the API server are compared
//! by `resourceVersion`; objects without one (manifest files) by content.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sluice_routing::{
    Backend, BackendId, BackendMode, CanaryRule, EndpointSet, HostMatch, PathKind, PathMatch,
    RoutePolicy, TableBuilder,
};

use super::backend::{
    BackendField, EndpointResolver, EndpointSource, EndpointSources, ServiceIndex,
};
use super::class::ClassFilter;
use super::gateway::{compile_gateways, GatewayInputs, GatewaySinks};
use super::tls::{IngressTls, SecretCache, TlsEntry, TlsMerge};
use super::{compile_ingress, oldest_first, path_field, CompileOptions, Compiled, Inputs};
use crate::annotations::{ingress_annotations, IngressAnnotations, SiteAnnotations};
use crate::diagnostic::{Diagnostic, Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// A compiler that keeps each Ingress's fragment between compiles. Its result always equals a
/// fresh [`super::compile_with`] of the same snapshot (a property test holds it to that).
#[derive(Default)]
pub struct IncrementalCompiler {
    options: CompileOptions,
    /// The IngressClasses the cached fragments were compiled with; any change drops them all.
    classes: BTreeMap<String, IngressClass>,
    cache: HashMap<ObjectKey, CachedIngress>,
    /// Certificates and CAs by Secret, reparsed only when a Secret changes.
    secrets: SecretCache,
    /// Regex paths by pattern, compiled once and kept while some route uses them.
    regexes: RegexCache,
}

/// Each pattern's compiled path, or why it does not compile.
type RegexCache = HashMap<Arc<str>, Result<PathMatch, String>>;

/// One Ingress as last compiled.
struct CachedIngress {
    version: Version<Ingress>,
    /// Class and annotation findings, and everything else about this Ingress alone.
    diagnostics: Vec<Diagnostic>,
    /// `None` when this sluice does not serve the Ingress's class.
    fragment: Option<Fragment>,
}

/// What one served Ingress contributes to the table, and the inputs it was compiled from.
#[derive(Default)]
pub(super) struct Fragment {
    /// The backends its references resolved to: id, mode and endpoint set (a table's
    /// `Backend` also carries a cell and a cursor, which only the published table needs).
    pub(super) backends: Vec<(BackendId, BackendMode, Arc<EndpointSet>)>,
    /// Which of those backends each Service's EndpointSlices feed.
    pub(super) endpoint_sources: Vec<(ObjectKey, EndpointSource)>,
    pub(super) routes: Vec<FragmentRoute>,
    pub(super) default_backend: Option<(BackendId, Arc<RoutePolicy>)>,
    /// Every Service it referenced, with the version it saw (`None`: missing).
    pub(super) services: Vec<(ObjectKey, Option<Version<Service>>)>,
    /// The Secrets the Ingress's compile read (a `proxy-ssl-secret`), or found missing.
    pub(super) secrets: Vec<(ObjectKey, Option<Version<Secret>>)>,
    /// The ConfigMaps it read (`custom-headers`), or found missing.
    pub(super) config_maps: Vec<(ObjectKey, Option<Version<ConfigMap>>)>,
    /// Every Traefik Middleware of the snapshot, when the Ingress (or a Service of it) names
    /// middlewares: any change to the set may change what a reference resolves to.
    pub(super) middlewares: Option<Vec<(ObjectKey, Version<crate::traefik::Middleware>)>>,
    /// Every endpoint set it read.
    pub(super) endpoint_sets: Vec<UsedEndpoints>,
    /// `namespace/name` of the Ingress.
    pub(super) source: Arc<str>,
    /// Its `spec.tls` entries.
    pub(super) tls: Vec<TlsEntry>,
    /// Its passthrough and client-certificate annotations.
    pub(super) site: SiteAnnotations,
    /// The field of its `use-regex` or `rewrite-target`: every path of its hosts is a regex.
    pub(super) regex_paths: Option<String>,
    /// Its `server-alias` field and names.
    pub(super) aliases: Option<(String, Vec<String>)>,
    /// The field of its `from-to-www-redirect`, when on.
    pub(super) www_redirect: Option<String>,
    /// Its canary rule: its routes take requests from the main Ingress's instead of claiming.
    pub(super) canary: Option<Arc<CanaryRule>>,
}

/// A route of a fragment, before the merge decides whether it wins its host and path.
pub(super) struct FragmentRoute {
    pub(super) host: HostMatch,
    pub(super) path: PathMatch,
    /// The path as the Ingress wrote it: the pattern, when the host's paths are regexes.
    pub(super) written: Arc<str>,
    pub(super) field: BackendField,
    pub(super) backend: BackendId,
    pub(super) source: Arc<str>,
    pub(super) policy: Arc<RoutePolicy>,
}

/// An endpoint set a fragment read, and where from.
pub(super) struct UsedEndpoints {
    namespace: String,
    service: String,
    port_name: Option<String>,
    set: Arc<EndpointSet>,
}

/// Which version of an object a fragment saw.
pub(super) enum Version<T> {
    /// From the API server: its `resourceVersion` changes with every write.
    Resource(String),
    /// From a manifest file, which carries no `resourceVersion`: the object itself.
    Content(Box<T>),
}

impl<T> Version<T>
where
    T: k8s_openapi::Metadata<Ty = ObjectMeta> + Clone + PartialEq,
{
    pub(super) fn of(object: &T) -> Self {
        match &object.metadata().resource_version {
            Some(version) => Self::Resource(version.clone()),
            None => Self::Content(Box::new(object.clone())),
        }
    }

    /// Whether an object read as `seen` (`None`: found missing) is as it was: `now` is what
    /// the snapshot holds.
    pub(super) fn unchanged(seen: &Option<Self>, now: Option<&T>) -> bool {
        match (seen, now) {
            (Some(seen), Some(now)) => seen.matches(now),
            (None, None) => true,
            _ => false,
        }
    }

    pub(super) fn matches(&self, object: &T) -> bool {
        match self {
            Self::Resource(version) => {
                object.metadata().resource_version.as_deref() == Some(version.as_str())
            }
            Self::Content(seen) => **seen == *object,
        }
    }
}

/// An endpoint resolver that remembers every set it handed out.
pub(super) struct RecordingResolver<'r> {
    inner: &'r dyn EndpointResolver,
    used: RefCell<Vec<UsedEndpoints>>,
}

impl<'r> RecordingResolver<'r> {
    pub(super) fn new(inner: &'r dyn EndpointResolver) -> Self {
        Self {
            inner,
            used: RefCell::default(),
        }
    }

    pub(super) fn into_used(self) -> Vec<UsedEndpoints> {
        self.used.into_inner()
    }
}

impl EndpointResolver for RecordingResolver<'_> {
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet> {
        let set = self.inner.ready_endpoints(namespace, service, port_name);
        self.used.borrow_mut().push(UsedEndpoints {
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            port_name: port_name.map(str::to_owned),
            set: set.clone(),
        });
        set
    }
}

impl IncrementalCompiler {
    pub fn new(options: CompileOptions) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }

    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// Compiles `snapshot`, recompiling only the Ingresses whose inputs changed since the last
    /// compile, then merges every fragment into the table.
    pub fn compile(&mut self, snapshot: &Snapshot, endpoints: &dyn EndpointResolver) -> Compiled {
        if self.classes != snapshot.ingress_classes {
            self.cache.clear();
            self.classes = snapshot.ingress_classes.clone();
        }
        let mut class_diagnostics = Diagnostics::default();
        let classes = ClassFilter::new(
            snapshot,
            &self.options.ingress_class,
            self.options.watch_without_class,
            &mut class_diagnostics,
        );
        let services = ServiceIndex::new(snapshot);
        let options = self.options.clone();
        let inputs = Inputs {
            services: &services,
            endpoints,
            secrets: &snapshot.secrets,
            config_maps: &snapshot.config_maps,
            middlewares: &snapshot.middlewares,
            options: &options,
        };
        let order = oldest_first(snapshot);
        for &(key, ingress) in &order {
            let current = self
                .cache
                .get(key)
                .is_some_and(|cached| cached.still_valid(ingress, &inputs));
            if !current {
                let cached = compile_cached(key, ingress, &classes, &inputs);
                self.cache.insert(key.clone(), cached);
            }
        }
        if self.cache.len() > order.len() {
            self.cache
                .retain(|key, _| snapshot.ingresses.contains_key(key));
        }
        self.secrets.refresh(snapshot);
        let controller = self.options.gateway_controller.clone();
        let gateways = GatewayInputs {
            snapshot,
            controller: &controller,
            default_address: self.options.gateway_address,
            services: &services,
            endpoints,
        };
        self.merge(snapshot, &order, class_diagnostics, &gateways)
    }

    /// Combines the fragments in age order: the oldest claim to a host and path wins, and the
    /// oldest served Ingress with a defaultBackend provides the table's.
    /// TLS hosts are claimed the same way, after each Ingress's routes.
    fn merge(
        &mut self,
        snapshot: &Snapshot,
        order: &[(&ObjectKey, &Ingress)],
        diagnostics: Diagnostics,
        gateways: &GatewayInputs<'_>,
    ) -> Compiled {
        let mut tls = TlsMerge::new(&mut self.secrets, snapshot);
        let mut merge = Merge {
            builder: TableBuilder::new(),
            diagnostics,
            claimed: HashMap::with_capacity(order.len()),
            default_owner: None,
            endpoint_sources: EndpointSources::default(),
            regex_hosts: HashMap::new(),
            regexes: std::mem::take(&mut self.regexes),
            regexes_used: RegexCache::new(),
        };
        for &(key, _) in order {
            if let Some(fragment) = self.cache.get(key).and_then(|c| c.fragment.as_ref()) {
                merge.note_regex_hosts(key, fragment);
            }
        }
        let mut served = Vec::new();
        let mut fragments = Vec::with_capacity(order.len());
        for &(key, _) in order {
            let Some(cached) = self.cache.get(key) else {
                continue;
            };
            merge.diagnostics.extend_from(&cached.diagnostics);
            if let Some(fragment) = &cached.fragment {
                merge.add(key, fragment);
                fragments.push((key, fragment));
                let ingress_tls = IngressTls {
                    key,
                    source: &fragment.source,
                    entries: &fragment.tls,
                    site: &fragment.site,
                    routes: &fragment.routes,
                };
                tls.add(&ingress_tls, &mut merge.builder, &mut merge.diagnostics);
                served.push(key.clone());
            }
        }
        if let Some(secret) = &self.options.default_certificate {
            tls.default_certificate(secret, &mut merge.builder, &mut merge.diagnostics);
        }
        merge.add_other_names(&fragments);
        merge.add_canaries(&fragments);
        self.regexes = merge.regexes_used;
        let sinks = GatewaySinks {
            builder: &mut merge.builder,
            endpoint_sources: &mut merge.endpoint_sources,
            diagnostics: &mut merge.diagnostics,
            tls: &mut tls,
        };
        let gateways = compile_gateways(gateways, sinks);
        Compiled {
            table: merge.builder.build(),
            diagnostics: merge.diagnostics.into_sorted(),
            endpoint_sources: merge.endpoint_sources,
            served,
            gateways,
        }
    }
}

impl CachedIngress {
    /// Whether the Ingress and everything its fragment read are as they were.
    fn still_valid(&self, ingress: &Ingress, inputs: &Inputs<'_>) -> bool {
        let Inputs {
            services,
            endpoints,
            secrets,
            config_maps,
            middlewares,
            ..
        } = *inputs;
        if !self.version.matches(ingress) {
            return false;
        }
        let Some(fragment) = &self.fragment else {
            return true;
        };
        let services_same = fragment
            .services
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, services.get(&key.namespace, &key.name)));
        let secrets_same = fragment
            .secrets
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, secrets.get(key)));
        let config_maps_same = fragment
            .config_maps
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, config_maps.get(key)));
        let middlewares_same = fragment.middlewares.as_ref().is_none_or(|seen| {
            seen.len() == middlewares.len()
                && seen
                    .iter()
                    .zip(middlewares)
                    .all(|((seen_key, version), (key, now))| {
                        seen_key == key && version.matches(now)
                    })
        });
        services_same
            && secrets_same
            && config_maps_same
            && middlewares_same
            && fragment.endpoint_sets.iter().all(|used| {
                let now = endpoints.ready_endpoints(
                    &used.namespace,
                    &used.service,
                    used.port_name.as_deref(),
                );
                Arc::ptr_eq(&now, &used.set) || now == used.set
            })
    }
}

/// Compiles one Ingress: whether this sluice serves it, and if so its fragment.
fn compile_cached(
    key: &ObjectKey,
    ingress: &Ingress,
    classes: &ClassFilter<'_>,
    inputs: &Inputs<'_>,
) -> CachedIngress {
    // Annotation findings only matter for Ingresses this sluice serves: an nginx Ingress left
    // in place during a migration should not flood the report.
    let mut annotation_diagnostics = Diagnostics::default();
    let annotations = match ingress.metadata.annotations.as_ref() {
        Some(annotations) => ingress_annotations(
            Some(annotations),
            &key.namespace,
            &ObjectRef::ingress(key),
            &mut annotation_diagnostics,
        ),
        None => IngressAnnotations::default(),
    };
    let mut diagnostics = Diagnostics::default();
    let fragment = classes
        .serves(ingress, &annotations, key, &mut diagnostics)
        .then(|| {
            let (fragment, found) =
                compile_ingress(key, ingress, &annotations, inputs, annotation_diagnostics);
            diagnostics.append(found);
            fragment
        });
    CachedIngress {
        version: Version::of(ingress),
        diagnostics: diagnostics.into_vec(),
        fragment,
    }
}

/// The exact hosts an Ingress's rules name, each once, in rule order.
fn fragment_hosts(fragment: &Fragment) -> Vec<&str> {
    let mut hosts: Vec<&str> = Vec::new();
    for route in &fragment.routes {
        if let HostMatch::Exact(name) = &route.host {
            if !hosts.contains(&&**name) {
                hosts.push(name);
            }
        }
    }
    hosts
}

/// Why `name` cannot be an alias or a redirect: a rule names it, or an older Ingress took it.
fn name_taken(
    name: &str,
    ruled: &hashbrown::HashSet<&str>,
    taken: &HashMap<String, &ObjectKey>,
    key: &ObjectKey,
) -> Option<String> {
    if ruled.contains(name) {
        return Some("is a host of its own (an Ingress rule names it)".to_owned());
    }
    match taken.get(name) {
        Some(owner) if *owner == key => None,
        Some(owner) => Some(format!(
            "is already an alias or redirect of {}, which is older",
            ObjectRef::ingress(owner)
        )),
        None => None,
    }
}

/// The table being merged from fragments.
struct Merge<'f> {
    builder: TableBuilder,
    diagnostics: Diagnostics,
    /// Which Ingress holds each host + path.
    claimed: HashMap<(HostMatch, PathMatch), &'f ObjectKey>,
    /// The hosts whose paths are all regexes, with the oldest Ingress that made them so.
    regex_hosts: HashMap<&'f HostMatch, &'f ObjectKey>,
    /// The regexes compiled by earlier merges, and those this merge used.
    regexes: RegexCache,
    regexes_used: RegexCache,
    /// The Ingress whose defaultBackend serves.
    default_owner: Option<&'f ObjectKey>,
    endpoint_sources: EndpointSources,
}

impl<'f> Merge<'f> {
    fn add(&mut self, key: &'f ObjectKey, fragment: &'f Fragment) {
        for (id, mode, endpoints) in &fragment.backends {
            if !self.builder.has_backend(id) {
                let backend = Backend::new(id.clone(), *mode, endpoints.clone());
                self.builder.add_backend(backend);
            }
        }
        for (service, source) in &fragment.endpoint_sources {
            self.endpoint_sources.add(service.clone(), source.clone());
        }
        if fragment.canary.is_some() {
            return;
        }
        if let Some((backend, policy)) = &fragment.default_backend {
            self.set_default_backend(key, backend, policy);
        }
        self.report_regex_hosts(key, fragment);
        for route in &fragment.routes {
            if let Some(path) = self.effective_path(key, route) {
                self.claim(key, route, path);
            }
        }
    }

    /// `server-alias` and `from-to-www-redirect`, once every Ingress's hosts are known: a name
    /// that some rule names, or that an older Ingress took, is a warning.
    fn add_other_names(&mut self, fragments: &[(&ObjectKey, &Fragment)]) {
        let ruled: hashbrown::HashSet<&str> = self
            .claimed
            .keys()
            .filter_map(|(host, _)| match host {
                HostMatch::Exact(name) => Some(&**name),
                _ => None,
            })
            .collect();
        let mut taken: HashMap<String, &ObjectKey> = HashMap::new();
        for &(key, fragment) in fragments {
            for host in fragment_hosts(fragment) {
                let (alias_field, aliases) = match &fragment.aliases {
                    Some((field, aliases)) => (field.as_str(), aliases.as_slice()),
                    None => ("", &[][..]),
                };
                for alias in aliases {
                    if let Some(why) = name_taken(alias, &ruled, &taken, key) {
                        let message = format!("server-alias {alias} {why}; the alias is ignored");
                        self.diagnostics
                            .warning(&ObjectRef::ingress(key), alias_field, message);
                        continue;
                    }
                    self.builder.add_alias(alias, host);
                    taken.insert(alias.clone(), key);
                }
                if let Some(www_field) = &fragment.www_redirect {
                    let other = match host.strip_prefix("www.") {
                        Some(bare) => bare.to_owned(),
                        None => format!("www.{host}"),
                    };
                    if let Some(why) = name_taken(&other, &ruled, &taken, key) {
                        let message = format!("{other} {why}, so it is not redirected to {host}");
                        self.diagnostics.warning(
                            &ObjectRef::ingress(key),
                            www_field.as_str(),
                            message,
                        );
                        continue;
                    }
                    self.builder.add_host_redirect(&other, host);
                    taken.insert(other, key);
                }
            }
        }
    }

    /// Gives each canary Ingress's routes to the main routes of the same host and path, once
    /// every main Ingress has claimed its own; a canary with no main route, or one whose main
    /// route already has an older canary, is a warning.
    fn add_canaries(&mut self, fragments: &[(&'f ObjectKey, &'f Fragment)]) {
        let mut taken: HashMap<(HostMatch, PathMatch), &ObjectKey> = HashMap::new();
        for &(key, fragment) in fragments {
            let Some(rule) = &fragment.canary else {
                continue;
            };
            for route in &fragment.routes {
                // A canary whose protection sluice cannot honour takes no requests (its error
                // is reported); the main route keeps them, as ingress-nginx serves none of it.
                if route.policy.refused.is_some() {
                    continue;
                }
                let Some(path) = self.effective_path(key, route) else {
                    continue;
                };
                let claim = (route.host.clone(), path);
                let problem = match (self.claimed.get(&claim), taken.get(&claim)) {
                    (None, _) => Some("no main Ingress serves this host and path".to_owned()),
                    (Some(_), Some(older)) => Some(format!(
                        "{} is an older canary of the same host and path",
                        ObjectRef::ingress(older)
                    )),
                    (Some(_), None) => None,
                };
                if let Some(problem) = problem {
                    let message = format!(
                        "canary for host {} path {}: {problem}; this canary route is ignored",
                        route.host, route.written
                    );
                    self.diagnostics.warning(
                        &ObjectRef::ingress(key),
                        path_field(route.field, ""),
                        message,
                    );
                    continue;
                }
                taken.insert(claim.clone(), key);
                self.builder.add_canary(
                    claim,
                    route.backend.clone(),
                    route.source.clone(),
                    rule.clone(),
                );
            }
        }
    }

    /// Records the hosts an Ingress with `use-regex` or `rewrite-target` makes regex hosts.
    fn note_regex_hosts(&mut self, key: &'f ObjectKey, fragment: &'f Fragment) {
        if fragment.regex_paths.is_some() {
            for route in &fragment.routes {
                self.regex_hosts.entry(&route.host).or_insert(key);
            }
        }
    }

    /// Tells an Ingress without `use-regex` that another Ingress made its paths regexes, once
    /// per host, as ingress-nginx's documentation warns.
    fn report_regex_hosts(&mut self, key: &ObjectKey, fragment: &Fragment) {
        if fragment.regex_paths.is_some() {
            return;
        }
        let mut told: Vec<&HostMatch> = Vec::new();
        for route in &fragment.routes {
            let Some(owner) = self.regex_hosts.get(&route.host) else {
                continue;
            };
            if told.contains(&&route.host) || route.path.kind() == PathKind::Exact {
                continue;
            }
            told.push(&route.host);
            let message = format!(
                "{} sets use-regex or rewrite-target for host {}: as in ingress-nginx, every path of that host, this Ingress's included, is matched as a case-insensitive regular expression anchored at the start",
                ObjectRef::ingress(owner),
                route.host
            );
            self.diagnostics.warning(
                &ObjectRef::ingress(key),
                path_field(route.field, ".path"),
                message,
            );
        }
    }

    /// The path a route is matched by: its own, or on a regex host (for any pathType but
    /// Exact) the regex its text spells; a pattern that does not compile drops the route.
    fn effective_path(&mut self, key: &ObjectKey, route: &FragmentRoute) -> Option<PathMatch> {
        if route.path.kind() == PathKind::Exact || !self.regex_hosts.contains_key(&route.host) {
            return Some(route.path.clone());
        }
        let compiled = match self.regexes.remove(&route.written) {
            Some(compiled) => compiled,
            None => PathMatch::regex(&route.written).map_err(|error| error.to_string()),
        };
        self.regexes_used
            .insert(route.written.clone(), compiled.clone());
        match compiled {
            Ok(path) => Some(path),
            Err(error) => {
                let message = format!(
                    "{:?} is not a regular expression sluice can match (the host's paths are regexes): {error}; path dropped",
                    route.written
                );
                self.diagnostics.error(
                    &ObjectRef::ingress(key),
                    path_field(route.field, ".path"),
                    message,
                );
                None
            }
        }
    }

    fn set_default_backend(
        &mut self,
        key: &'f ObjectKey,
        backend: &BackendId,
        policy: &Arc<RoutePolicy>,
    ) {
        match self.default_owner {
            Some(winner) => {
                let message = format!(
                    "ignored: Ingress {}/{} is older and its defaultBackend wins",
                    winner.namespace, winner.name
                );
                self.diagnostics
                    .warning(&ObjectRef::ingress(key), "spec.defaultBackend", message);
            }
            None => {
                self.builder
                    .set_default_backend(backend.clone(), policy.clone());
                self.default_owner = Some(key);
            }
        }
    }

    /// Routes host + path to this Ingress unless an older claim holds it; a later (younger)
    /// claim loses with a diagnostic.
    fn claim(&mut self, key: &'f ObjectKey, route: &'f FragmentRoute, path: PathMatch) {
        let holder = match self.claimed.entry((route.host.clone(), path.clone())) {
            Entry::Vacant(vacant) => {
                vacant.insert(key);
                self.builder.add_route(
                    route.host.clone(),
                    path,
                    route.backend.clone(),
                    route.source.clone(),
                    route.policy.clone(),
                );
                return;
            }
            Entry::Occupied(occupied) => *occupied.get(),
        };
        let holder = if holder == key {
            "an earlier rule of this Ingress".to_owned()
        } else {
            format!("{}, which is older", ObjectRef::ingress(holder))
        };
        let message = format!(
            "duplicate of host {} path {} ({:?}) already served by {holder}; ignored",
            route.host,
            path.path(),
            path.kind()
        );
        self.diagnostics.warning(
            &ObjectRef::ingress(key),
            path_field(route.field, ""),
            message,
        );
    }
}
