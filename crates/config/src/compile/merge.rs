//! The merge: the fragments of every served Ingress combined, oldest first, into one table: which claim to a host and path wins, whose defaultBackend serves, which aliases and redirects stand, and the TLS sites.

use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;
use sluice_routing::{
    Backend, BackendId, HostMatch, PathKind, PathMatch, RoutePolicy, TableBuilder,
};

use super::backend::EndpointSources;
use super::fragment::{Fragment, FragmentRoute};
use super::ingress::path_field;
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::ObjectKey;

/// Each pattern's compiled path, or why it does not compile.
pub(super) type RegexCache = HashMap<Arc<str>, Result<PathMatch, String>>;

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
pub(super) struct Merge<'f> {
    pub(super) builder: TableBuilder,
    pub(super) diagnostics: Diagnostics,
    /// Which Ingress holds each host + path.
    pub(super) claimed: HashMap<(HostMatch, PathMatch), &'f ObjectKey>,
    /// The hosts whose paths are all regexes, with the oldest Ingress that made them so.
    pub(super) regex_hosts: HashMap<&'f HostMatch, &'f ObjectKey>,
    /// The regexes compiled by earlier merges, and those this merge used.
    pub(super) regexes: RegexCache,
    pub(super) regexes_used: RegexCache,
    /// The Ingress whose defaultBackend serves.
    pub(super) default_owner: Option<&'f ObjectKey>,
    pub(super) endpoint_sources: EndpointSources,
}

impl<'f> Merge<'f> {
    pub(super) fn add(&mut self, key: &'f ObjectKey, fragment: &'f Fragment) {
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
    pub(super) fn add_other_names(&mut self, fragments: &[(&ObjectKey, &Fragment)]) {
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
    pub(super) fn add_canaries(&mut self, fragments: &[(&'f ObjectKey, &'f Fragment)]) {
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
    pub(super) fn note_regex_hosts(&mut self, key: &'f ObjectKey, fragment: &'f Fragment) {
        if fragment.regex_paths.is_some() {
            for route in &fragment.routes {
                self.regex_hosts.entry(&route.host).or_insert(key);
            }
        }
    }

    /// Tells an Ingress without `use-regex` that another Ingress made its paths regexes, once
    /// per host, as ingress-nginx's documentation warns.
    pub(super) fn report_regex_hosts(&mut self, key: &ObjectKey, fragment: &Fragment) {
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
    pub(super) fn effective_path(
        &mut self,
        key: &ObjectKey,
        route: &FragmentRoute,
    ) -> Option<PathMatch> {
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

    pub(super) fn set_default_backend(
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
    pub(super) fn claim(&mut self, key: &'f ObjectKey, route: &'f FragmentRoute, path: PathMatch) {
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
