//! Backends and their endpoint sets, each set behind its own atomically swapped cell.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::uri::Authority;
use serde::{Serialize, Serializer};

/// Stable identity of a backend across compiles: `namespace/service:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct BackendId(Arc<str>);

impl BackendId {
    /// `port` is the Service port as the Ingress names it: a number or a port name.
    pub fn new(namespace: &str, service: &str, port: &str) -> Self {
        Self(format!("{namespace}/{service}:{port}").into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a backend reaches its Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendMode {
    /// Straight to the ready pod addresses from the Service's EndpointSlices.
    Endpoints,
    /// One address, the Service's ClusterIP and port; kube-proxy picks the pod.
    ServiceUpstream,
    /// An ExternalName Service: its DNS name, resolved at connect time, and the Service port.
    ExternalName,
}

impl fmt::Display for BackendMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Endpoints => "endpoints",
            Self::ServiceUpstream => "service-upstream",
            Self::ExternalName => "external-name",
        })
    }
}

/// One upstream address: `ip:port` for pods and ClusterIPs, `name:port` for ExternalName.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint(Authority);

impl Ord for Endpoint {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.as_str().cmp(other.0.as_str())
    }
}

impl PartialOrd for Endpoint {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Endpoint {
    pub fn new(authority: Authority) -> Self {
        Self(authority)
    }

    /// The authority the upstream request is sent to; cloning it is a reference-count bump.
    pub fn authority(&self) -> &Authority {
        &self.0
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

/// The endpoints a backend balances over, sorted and free of duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct EndpointSet(Vec<Endpoint>);

impl EndpointSet {
    pub fn new(mut endpoints: Vec<Endpoint>) -> Self {
        endpoints.sort();
        endpoints.dedup();
        Self(endpoints)
    }

    pub fn as_slice(&self) -> &[Endpoint] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A backend's endpoint set behind its own atomic cell, so an endpoint change swaps one cell
/// instead of the whole table.
#[derive(Clone, Default)]
pub struct EndpointCell(Arc<ArcSwap<EndpointSet>>);

impl EndpointCell {
    /// A cell holding `set`; an `Arc<EndpointSet>` is shared, not copied.
    pub fn new(set: impl Into<Arc<EndpointSet>>) -> Self {
        Self(Arc::new(ArcSwap::new(set.into())))
    }

    pub fn load(&self) -> Arc<EndpointSet> {
        self.0.load_full()
    }

    /// Publishes a new endpoint set; requests that already picked an endpoint keep it.
    pub fn store(&self, set: impl Into<Arc<EndpointSet>>) {
        self.0.store(set.into());
    }
}

impl PartialEq for EndpointCell {
    fn eq(&self, other: &Self) -> bool {
        *self.0.load() == *other.0.load()
    }
}

impl fmt::Debug for EndpointCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.0.load(), f)
    }
}

/// A Service port the table routes to, with its endpoints and round-robin cursor.
#[derive(Debug)]
pub struct Backend {
    id: BackendId,
    mode: BackendMode,
    endpoints: EndpointCell,
    cursor: AtomicUsize,
}

impl Backend {
    pub fn new(id: BackendId, mode: BackendMode, endpoints: impl Into<Arc<EndpointSet>>) -> Self {
        Self {
            id,
            mode,
            endpoints: EndpointCell::new(endpoints),
            cursor: AtomicUsize::new(0),
        }
    }

    pub fn id(&self) -> &BackendId {
        &self.id
    }

    pub fn mode(&self) -> BackendMode {
        self.mode
    }

    pub fn endpoints(&self) -> &EndpointCell {
        &self.endpoints
    }

    /// The next endpoint in round-robin order, or `None` when the backend has none.
    pub fn next_endpoint(&self) -> Option<Endpoint> {
        let set = self.endpoints.0.load();
        let endpoints = set.as_slice();
        if endpoints.is_empty() {
            return None;
        }
        let turn = self.cursor.fetch_add(1, Ordering::Relaxed);
        Some(endpoints[turn % endpoints.len()].clone())
    }
}

/// Backends are equal when their identity, mode and current endpoints are; the cursor is
/// runtime state and plays no part.
impl PartialEq for Backend {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.mode == other.mode && self.endpoints == other.endpoints
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(text: &str) -> Endpoint {
        Endpoint::new(
            Authority::from_maybe_shared(text.to_owned().into_bytes()).expect("valid authority"),
        )
    }

    #[test]
    fn endpoint_sets_sort_and_deduplicate() {
        let set = EndpointSet::new(vec![
            endpoint("10.0.0.2:80"),
            endpoint("10.0.0.1:80"),
            endpoint("10.0.0.2:80"),
        ]);
        let texts: Vec<String> = set.as_slice().iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["10.0.0.1:80", "10.0.0.2:80"]);
    }

    #[test]
    fn round_robin_visits_every_endpoint_in_turn() {
        let set = EndpointSet::new(vec![
            endpoint("10.0.0.1:80"),
            endpoint("10.0.0.2:80"),
            endpoint("10.0.0.3:80"),
        ]);
        let backend = Backend::new(
            BackendId::new("ns", "svc", "80"),
            BackendMode::Endpoints,
            set,
        );
        let picks: Vec<String> = (0..6)
            .filter_map(|_| backend.next_endpoint())
            .map(|e| e.to_string())
            .collect();
        assert_eq!(picks[..3], picks[3..]);
        let mut first_round = picks[..3].to_vec();
        first_round.sort();
        assert_eq!(first_round, ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
    }

    #[test]
    fn empty_backend_has_no_endpoint() {
        let backend = Backend::new(
            BackendId::new("ns", "svc", "http"),
            BackendMode::Endpoints,
            EndpointSet::default(),
        );
        assert!(backend.next_endpoint().is_none());
    }

    #[test]
    fn swapping_a_cell_changes_the_next_pick() {
        let backend = Backend::new(
            BackendId::new("ns", "svc", "80"),
            BackendMode::Endpoints,
            EndpointSet::default(),
        );
        backend
            .endpoints()
            .store(EndpointSet::new(vec![endpoint("10.0.0.9:80")]));
        assert_eq!(
            backend.next_endpoint().map(|e| e.to_string()).as_deref(),
            Some("10.0.0.9:80")
        );
    }
}
