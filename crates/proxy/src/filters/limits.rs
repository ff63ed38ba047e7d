//! Per-client limits as ingress-nginx sets them: nginx's `limit_req` leaky bucket (with `burst` and `nodelay`) for `limit-rps` and `limit-rpm`, and `limit_conn` for `limit-connections`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::StatusCode;
use sluice_routing::{RateLimits, RoutePolicy};

use super::contract::{grpc_status, Filter, Flow, LocalAnswer, RequestContext};
use super::services::{boxed, RouteFilter, Services};

/// The most clients one bucket tracks; when full, drained clients are forgotten, and if that
/// is not enough, all of them.
const MAX_CLIENTS: usize = 65_536;
/// How often drained (idle) clients are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The limits of one route policy. Their per-client state lives in the runtime, under the
/// route and the limits, so a recompile that leaves them as they were keeps the counts.
pub(crate) struct ClientLimits {
    limits: RateLimits,
    status: StatusCode,
    state: OnceLock<Arc<LimitState>>,
}

/// The per-client state of one route's limits.
struct LimitState {
    buckets: Vec<Bucket>,
    connections: Option<Arc<Connections>>,
}

impl LimitState {
    fn new(limits: &RateLimits) -> Self {
        // ingress-nginx's burst is the limit times the multiplier, for both rates.
        let burst = f64::from(limits.burst_multiplier);
        let mut buckets = Vec::new();
        if let Some(rps) = limits.per_second.map(f64::from) {
            buckets.push(Bucket::new(rps, rps * burst));
        }
        if let Some(rpm) = limits.per_minute.map(f64::from) {
            buckets.push(Bucket::new(rpm / 60.0, rpm * burst));
        }
        Self {
            buckets,
            connections: limits.connections.map(Connections::new),
        }
    }
}

impl ClientLimits {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let limits = policy.limits.as_ref()?;
        boxed(Self {
            status: StatusCode::from_u16(limits.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            limits: limits.clone(),
            state: OnceLock::new(),
        })
    }

    /// The limits' state: the runtime's for this route and these limits, found once.
    fn state(&self, context: &RequestContext<'_>, services: &Services) -> &LimitState {
        self.state.get_or_init(|| {
            let route = context
                .target
                .map(|target| target.ingress)
                .unwrap_or_default();
            let key = format!("{route} {:?}", self.limits);
            services.state(&key, || LimitState::new(&self.limits))
        })
    }

    fn limited(&self) -> Box<LocalAnswer> {
        let body = match self.status {
            StatusCode::TOO_MANY_REQUESTS => "429 too many requests\n",
            StatusCode::SERVICE_UNAVAILABLE => "503 service temporarily unavailable\n",
            _ => "request limited\n",
        };
        LocalAnswer::refusal(
            self.status,
            body,
            grpc_status::RESOURCE_EXHAUSTED,
            "client over the route's limit",
        )
    }
}

impl Filter<Services> for ClientLimits {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        _request: &Parts,
        services: &Services,
    ) -> Flow {
        let client = context.real_client;
        if self
            .limits
            .exempt
            .iter()
            .any(|range| range.contains(&client))
        {
            return Ok(());
        }
        let now = Instant::now();
        let state = self.state(context, services);
        if !state
            .buckets
            .iter()
            .all(|bucket| bucket.admits(client, now))
        {
            return Err(self.limited());
        }
        if let Some(connections) = &state.connections {
            let slot = Connections::take(connections, SlotKey::Address(client))
                .ok_or_else(|| self.limited())?;
            context.held.push(Box::new(slot));
        }
        Ok(())
    }
}

/// nginx's `limit_req` zone for one rate: each client's excess over the rate, drained as time
/// passes; a request that would take the excess over the burst is refused (`nodelay`: the
/// others pass at once).
struct Bucket {
    per_second: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

struct BucketState {
    /// Each client's excess (in requests) and when it was last admitted.
    clients: HashMap<IpAddr, (f64, Instant)>,
    swept: Instant,
}

impl Bucket {
    fn new(per_second: f64, burst: f64) -> Self {
        Self {
            per_second,
            burst,
            state: Mutex::new(BucketState {
                clients: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    fn admits(&self, client: IpAddr, now: Instant) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return true;
        };
        if let Some((excess, last)) = state.clients.get_mut(&client) {
            let drained = now.saturating_duration_since(*last).as_secs_f64() * self.per_second;
            let next = (*excess - drained + 1.0).max(0.0);
            if next > self.burst {
                return false;
            }
            *excess = next;
            *last = now;
            return true;
        }
        if state.clients.len() >= MAX_CLIENTS || now.duration_since(state.swept) > SWEEP_EVERY {
            self.forget_drained(&mut state, now);
        }
        state.clients.insert(client, (0.0, now));
        true
    }

    /// Forgets the clients whose excess has drained away (they start afresh, as nginx's
    /// expired nodes do); when that frees nothing at the cap, forgets every client.
    fn forget_drained(&self, state: &mut BucketState, now: Instant) {
        let per_second = self.per_second;
        state.clients.retain(|_, (excess, last)| {
            *excess > now.saturating_duration_since(*last).as_secs_f64() * per_second
        });
        if state.clients.len() >= MAX_CLIENTS {
            state.clients.clear();
        }
        state.swept = now;
    }
}

/// Whom requests in progress are counted for: a client address (`limit-connections`), or the
/// source a Traefik `inFlightReq` counts by (a host, a header's value).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SlotKey {
    Address(IpAddr),
    Source(Box<str>),
}

/// nginx's `limit_conn` (and Traefik's `inFlightReq`): each source's requests in progress.
#[derive(Debug)]
pub(crate) struct Connections {
    limit: u32,
    clients: Mutex<HashMap<SlotKey, u32>>,
}

impl Connections {
    pub(crate) fn new(limit: u32) -> Arc<Self> {
        Arc::new(Self::with_limit(limit))
    }

    /// The counts for `limit` places per source, not yet shared.
    pub(crate) fn with_limit(limit: u32) -> Self {
        Self {
            limit,
            clients: Mutex::default(),
        }
    }

    /// A place for one more request of `client`, unless it has `limit` in progress.
    pub(crate) fn take(this: &Arc<Self>, client: SlotKey) -> Option<ConnectionSlot> {
        let mut clients = this.clients.lock().ok()?;
        let count = clients.entry(client.clone()).or_insert(0);
        if *count >= this.limit {
            return None;
        }
        *count += 1;
        Some(ConnectionSlot {
            connections: this.clone(),
            client,
        })
    }
}

/// One request in progress of a limited client; dropped when its response has ended.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    connections: Arc<Connections>,
    client: SlotKey,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if let Ok(mut clients) = self.connections.clients.lock() {
            if let Some(count) = clients.get_mut(&self.client) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    clients.remove(&self.client);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, Scene};

    fn limited(per_second: Option<u32>, connections: Option<u32>) -> RoutePolicy {
        RoutePolicy {
            limits: Some(RateLimits {
                per_second,
                per_minute: None,
                connections,
                burst_multiplier: 1,
                exempt: Vec::new(),
                status: 429,
            }),
            ..RoutePolicy::default()
        }
    }

    #[test]
    fn the_counts_outlive_a_recompile_that_leaves_the_limits_as_they_were() {
        let mut scene = Scene::new(limited(Some(1), None));
        // The first request and the burst of one pass; the third is over the rate.
        assert!(scene.on_request(&request("GET", "/")).is_ok());
        assert!(scene.on_request(&request("GET", "/")).is_ok());
        let refused = scene.on_request(&request("GET", "/")).expect_err("limited");
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            refused.grpc.map(|(code, _)| code),
            Some(grpc_status::RESOURCE_EXHAUSTED)
        );
        // A recompile: a new policy (another field changed), its filters built afresh, the
        // same runtime.
        let mut recompiled = limited(Some(1), None);
        recompiled.max_body_size = Some(1024);
        let mut next = Scene::new(recompiled);
        next.services.runtime = scene.services.runtime.clone();
        assert!(
            next.on_request(&request("GET", "/")).is_err(),
            "the bucket is still full"
        );
        // Other limits count afresh.
        let mut changed = Scene::new(limited(Some(5), None));
        changed.services.runtime = scene.services.runtime.clone();
        assert!(changed.on_request(&request("GET", "/")).is_ok());
    }

    #[test]
    fn a_connection_limit_holds_its_place_until_the_response_ends() {
        let mut scene = Scene::new(limited(None, Some(1)));
        assert!(scene.on_request(&request("GET", "/")).is_ok());
        assert!(
            scene.on_request(&request("GET", "/")).is_err(),
            "one in progress"
        );
        scene.end_response();
        assert!(scene.on_request(&request("GET", "/")).is_ok());
    }

    #[test]
    fn a_bucket_admits_the_burst_at_once_then_the_rate() {
        let bucket = Bucket::new(2.0, 4.0);
        let client: IpAddr = [10, 0, 0, 1].into();
        let start = Instant::now();
        // The first request, then the burst of 4, all at once.
        let admitted = (0..10).filter(|_| bucket.admits(client, start)).count();
        assert_eq!(admitted, 5);
        // Half a second drains one request at 2 r/s.
        let later = start + Duration::from_millis(500);
        assert!(bucket.admits(client, later));
        assert!(!bucket.admits(client, later));
        // Another client has its own bucket.
        assert!(bucket.admits([10, 0, 0, 2].into(), later));
    }

    #[test]
    fn connection_slots_free_themselves() {
        let connections = Connections::new(1);
        let client = SlotKey::Address([10, 0, 0, 1].into());
        let slot = Connections::take(&connections, client.clone()).unwrap();
        assert!(Connections::take(&connections, client.clone()).is_none());
        drop(slot);
        assert!(Connections::take(&connections, client).is_some());
    }
}
