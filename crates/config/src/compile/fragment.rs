//! What one Ingress compiles into: its routes, backends, endpoint sources, TLS entries and the inputs it read, before the merge decides what of it the table takes.

use std::cell::RefCell;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use sluice_routing::{
    BackendId, BackendMode, CanaryRule, EndpointSet, HostMatch, PathMatch, RoutePolicy,
};

use super::backend::{BackendField, EndpointResolver, EndpointSource};
use super::version::Version;
use crate::annotations::SiteAnnotations;
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::ObjectKey;

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
    pub(super) namespace: String,
    pub(super) service: String,
    pub(super) port_name: Option<String>,
    pub(super) set: Arc<EndpointSet>,
}

/// One `spec.tls` entry of an Ingress as compiled into its fragment.
pub(super) struct TlsEntry {
    /// `spec.tls[i]`.
    pub(super) field: String,
    /// The hosts it names; empty for an entry that names none, whose certificate then serves
    /// every rule host of the Ingress it covers (as ingress-nginx does).
    pub(super) hosts: Vec<HostMatch>,
    pub(super) secret: Option<String>,
}

/// The `spec.tls` entries of an Ingress. An entry with neither hosts nor a Secret is a
/// warning and ignored.
pub(super) fn tls_entries(
    key: &ObjectKey,
    ingress: &Ingress,
    diagnostics: &mut Diagnostics,
) -> Vec<TlsEntry> {
    let entries = ingress.spec.as_ref().and_then(|spec| spec.tls.as_deref());
    let mut compiled = Vec::new();
    for (index, entry) in entries.unwrap_or_default().iter().enumerate() {
        let field = format!("spec.tls[{index}]");
        let hosts: Vec<HostMatch> = entry
            .hosts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|host| HostMatch::from_rule_host(Some(host)))
            .filter(|host| *host != HostMatch::Any)
            .collect();
        let secret = entry.secret_name.clone().filter(|name| !name.is_empty());
        if hosts.is_empty() && secret.is_none() {
            diagnostics.warning(
                &ObjectRef::ingress(key),
                format!("{field}.hosts"),
                "neither hosts nor a secretName: the entry is ignored",
            );
            continue;
        }
        compiled.push(TlsEntry {
            field,
            hosts,
            secret,
        });
    }
    compiled
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
