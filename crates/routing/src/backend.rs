//! Backends and their endpoint sets, each set behind its own atomically swapped cell.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use hashbrown::HashMap;
use http::uri::Authority;
use serde::{Serialize, Serializer};

use crate::attached::Attached;

/// Position of a backend in the table's backends (`RoutingTable::backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendIndex(pub(crate) usize);

/// Stable identity of a backend across compiles: `namespace/service:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct BackendId(Arc<str>);

/// The id of [`BackendId::redirect_only`]; no Service can have it (`0` is no port).
const REDIRECT_ONLY: &str = "sluice/redirect-only:0";

impl BackendId {
    /// `port` is the Service port as the Ingress names it: a number or a port name.
    pub fn new(namespace: &str, service: &str, port: &str) -> Self {
        Self(format!("{namespace}/{service}:{port}").into())
    }

    /// The empty backend a Gateway rule that only redirects stands on: the redirect answers
    /// before any endpoint is chosen, so it is no Service and reports leave it out.
    pub fn redirect_only() -> Self {
        Self(REDIRECT_ONLY.into())
    }

    pub fn is_redirect_only(&self) -> bool {
        *self.0 == *REDIRECT_ONLY
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Namespace, Service and port, as given to [`Self::new`] (without a mode suffix such as
    /// `/service-upstream`); all empty for the redirect-only placeholder, which has none (so
    /// its requests' metrics carry `service=""`, as for a request no Service answered).
    pub fn parts(&self) -> (&str, &str, &str) {
        if self.is_redirect_only() {
            return ("", "", "");
        }
        let (namespace, rest) = self.0.split_once('/').unwrap_or(("", &self.0));
        let (service, port) = rest.rsplit_once(':').unwrap_or((rest, ""));
        let port = port.split_once('/').map_or(port, |(port, _mode)| port);
        (namespace, service, port)
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
/// It carries a stable hash of the address, computed once, for consistent hashing.
#[derive(Clone, Debug)]
pub struct Endpoint {
    authority: Authority,
    hash: u64,
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.authority == other.authority
    }
}

impl Eq for Endpoint {}

impl std::hash::Hash for Endpoint {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Ord for Endpoint {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.authority.as_str().cmp(other.authority.as_str())
    }
}

impl PartialOrd for Endpoint {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Endpoint {
    pub fn new(authority: Authority) -> Self {
        let hash = stable_hash(authority.as_str().as_bytes());
        Self { authority, hash }
    }

    /// The authority the upstream request is sent to; cloning it is a reference-count bump.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// A hash of the address that is the same on every replica and build (FNV-1a), for
    /// consistent hashing.
    pub fn stable_hash(&self) -> u64 {
        self.hash
    }
}

/// 64-bit FNV-1a: stable across builds and replicas, so every replica maps a key alike.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.authority.as_str())
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.authority.as_str())
    }
}

/// The endpoints a backend balances over: the ready ones, and those still serving while they
/// terminate. Both lists are sorted and free of duplicates.
#[derive(Debug, Default, Serialize)]
pub struct EndpointSet {
    ready: Vec<Endpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    terminating: Vec<Endpoint>,
    /// Sticky-session tokens → endpoint, built on first use (see [`Self::find_by_token`]).
    #[serde(skip)]
    tokens: OnceLock<HashMap<u64, Endpoint>>,
    /// The data plane's state for each endpoint, in [`Self::iter`] order.
    #[serde(skip)]
    runtime: Attached,
}

/// Where an endpoint stands in its set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Ready: takes new traffic.
    Ready,
    /// Terminating but still serving: keeps its sticky sessions, and takes all traffic only
    /// when no endpoint is ready.
    Terminating,
}

impl EndpointSet {
    /// A set of ready endpoints.
    pub fn new(ready: Vec<Endpoint>) -> Self {
        Self::with_terminating(ready, Vec::new())
    }

    /// A set with ready endpoints and endpoints that are terminating but still serving. An
    /// endpoint listed in both counts as ready.
    pub fn with_terminating(mut ready: Vec<Endpoint>, mut terminating: Vec<Endpoint>) -> Self {
        ready.sort();
        ready.dedup();
        terminating.sort();
        terminating.dedup();
        terminating.retain(|endpoint| ready.binary_search(endpoint).is_err());
        Self {
            ready,
            terminating,
            tokens: OnceLock::new(),
            runtime: Attached::default(),
        }
    }

    pub fn ready(&self) -> &[Endpoint] {
        &self.ready
    }

    pub fn terminating(&self) -> &[Endpoint] {
        &self.terminating
    }

    /// The endpoints new requests go to: the ready ones, or, when none is ready, the
    /// terminating ones that still serve (kube-proxy's rule).
    pub fn eligible(&self) -> &[Endpoint] {
        if self.ready.is_empty() {
            &self.terminating
        } else {
            &self.ready
        }
    }

    /// Whether the endpoint is in the set, and how.
    pub fn condition(&self, endpoint: &Endpoint) -> Option<Condition> {
        if self.ready.binary_search(endpoint).is_ok() {
            Some(Condition::Ready)
        } else if self.terminating.binary_search(endpoint).is_ok() {
            Some(Condition::Terminating)
        } else {
            None
        }
    }

    /// Where the endpoint stands in [`Self::iter`] order. An endpoint of [`Self::eligible`]
    /// has the same position in both, since the eligible endpoints always come first.
    pub fn position(&self, endpoint: &Endpoint) -> Option<usize> {
        match self.ready.binary_search(endpoint) {
            Ok(index) => Some(index),
            Err(_) => self
                .terminating
                .binary_search(endpoint)
                .ok()
                .map(|index| self.ready.len() + index),
        }
    }

    /// The data plane's runtime state for this set, attached once.
    pub fn runtime(&self) -> &Attached {
        &self.runtime
    }

    /// Every endpoint, ready ones first.
    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> {
        self.ready.iter().chain(&self.terminating)
    }

    pub fn len(&self) -> usize {
        self.ready.len() + self.terminating.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.terminating.is_empty()
    }

    /// The endpoint whose token is `token`, ready or terminating. `token_of` must be the same
    /// function on every call: the index it builds on first use is kept for the set's lifetime.
    pub fn find_by_token(
        &self,
        token: u64,
        token_of: impl Fn(&Endpoint) -> u64,
    ) -> Option<&Endpoint> {
        self.tokens
            .get_or_init(|| self.iter().map(|e| (token_of(e), e.clone())).collect())
            .get(&token)
    }
}

impl Clone for EndpointSet {
    fn clone(&self) -> Self {
        Self::with_terminating(self.ready.clone(), self.terminating.clone())
    }
}

/// Sets are equal when they hold the same endpoints in the same conditions.
impl PartialEq for EndpointSet {
    fn eq(&self, other: &Self) -> bool {
        self.ready == other.ready && self.terminating == other.terminating
    }
}

impl Eq for EndpointSet {}

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

    /// Publishes a new endpoint set and returns the one it replaces.
    pub fn swap(&self, set: impl Into<Arc<EndpointSet>>) -> Arc<EndpointSet> {
        self.0.swap(set.into())
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
    /// The data plane's runtime state for this backend (its retry budget), attached once.
    runtime: Attached,
}

impl Backend {
    pub fn new(id: BackendId, mode: BackendMode, endpoints: impl Into<Arc<EndpointSet>>) -> Self {
        Self {
            id,
            mode,
            endpoints: EndpointCell::new(endpoints),
            cursor: AtomicUsize::new(0),
            runtime: Attached::default(),
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

    pub fn runtime(&self) -> &Attached {
        &self.runtime
    }

    /// The next turn of the backend's round-robin cursor; balancers take it modulo their
    /// candidate count.
    pub fn next_turn(&self) -> usize {
        self.cursor.fetch_add(1, Ordering::Relaxed)
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

    fn texts(endpoints: &[Endpoint]) -> Vec<String> {
        endpoints.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn endpoint_sets_sort_and_deduplicate() {
        let set = EndpointSet::new(vec![
            endpoint("10.0.0.2:80"),
            endpoint("10.0.0.1:80"),
            endpoint("10.0.0.2:80"),
        ]);
        assert_eq!(texts(set.ready()), ["10.0.0.1:80", "10.0.0.2:80"]);
    }

    #[test]
    fn ready_endpoints_take_new_traffic_while_any_is_ready() {
        let set = EndpointSet::with_terminating(
            vec![endpoint("10.0.0.1:80")],
            vec![endpoint("10.0.0.2:80")],
        );
        assert_eq!(texts(set.eligible()), ["10.0.0.1:80"]);
        assert_eq!(
            set.condition(&endpoint("10.0.0.2:80")),
            Some(Condition::Terminating)
        );
        assert_eq!(set.condition(&endpoint("10.0.0.3:80")), None);
    }

    #[test]
    fn terminating_endpoints_take_traffic_when_none_is_ready() {
        let set = EndpointSet::with_terminating(
            Vec::new(),
            vec![endpoint("10.0.0.2:80"), endpoint("10.0.0.1:80")],
        );
        assert_eq!(texts(set.eligible()), ["10.0.0.1:80", "10.0.0.2:80"]);
    }

    #[test]
    fn an_endpoint_listed_twice_counts_as_ready() {
        let set = EndpointSet::with_terminating(
            vec![endpoint("10.0.0.1:80")],
            vec![endpoint("10.0.0.1:80")],
        );
        assert!(set.terminating().is_empty());
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn tokens_find_ready_and_terminating_endpoints() {
        let set = EndpointSet::with_terminating(
            vec![endpoint("10.0.0.1:80")],
            vec![endpoint("10.0.0.2:80")],
        );
        let token_of = |e: &Endpoint| {
            e.to_string()
                .bytes()
                .fold(7u64, |hash, byte| hash.wrapping_mul(31) + u64::from(byte))
        };
        let wanted = endpoint("10.0.0.2:80");
        let found = set.find_by_token(token_of(&wanted), token_of);
        assert_eq!(found, Some(&wanted));
        assert_eq!(set.find_by_token(7, token_of), None);
    }

    #[test]
    fn round_robin_turns_advance() {
        let backend = Backend::new(
            BackendId::new("ns", "svc", "80"),
            BackendMode::Endpoints,
            EndpointSet::default(),
        );
        let turns: Vec<usize> = (0..3).map(|_| backend.next_turn()).collect();
        assert_eq!(turns, [0, 1, 2]);
    }

    #[test]
    fn swapping_a_cell_changes_what_it_holds() {
        let backend = Backend::new(
            BackendId::new("ns", "svc", "80"),
            BackendMode::Endpoints,
            EndpointSet::default(),
        );
        backend
            .endpoints()
            .store(EndpointSet::new(vec![endpoint("10.0.0.9:80")]));
        assert_eq!(texts(backend.endpoints().load().ready()), ["10.0.0.9:80"]);
    }
}
