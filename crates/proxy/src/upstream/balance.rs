//! Balancers: each yields an ordered list of candidate endpoints, so a retry takes the next one.

use std::net::IpAddr;

use std::sync::Arc;

use http::header::HOST;
use http::request::Parts;
use sluice_routing::{stable_hash, Backend, Balancer, Endpoint, HashKey};

use crate::headers::request_cookie;
use crate::upstream::runtime::{EndpointRuntime, SetRuntime};

/// The order in which a request tries a backend's eligible endpoints.
pub(crate) struct Candidates {
    order: Order,
    /// How many endpoints the order has produced so far.
    produced: usize,
}

enum Order {
    /// Each endpoint in turn from `start`.
    Rotation { start: usize },
    /// The winner of two random choices, the loser, then the rest in turn.
    Choices {
        first: usize,
        second: usize,
        start: usize,
    },
    /// Clockwise on the consistent-hash ring from the key: `cursor` is the next point to look
    /// at, `visited` how many points were looked at.
    Ring { cursor: usize, visited: usize },
}

/// What a balancer may look at in a request.
pub(crate) struct RequestKey<'r> {
    pub(crate) parts: &'r Parts,
    pub(crate) client: IpAddr,
}

impl Candidates {
    /// The order for one request over `eligible`, the endpoints taking new requests, whose
    /// runtime state `state` holds in the same order.
    pub(crate) fn new(
        balancer: &Balancer,
        backend: &Backend,
        eligible: &[Endpoint],
        state: &SetRuntime,
        request: &RequestKey<'_>,
    ) -> Self {
        let count = eligible.len().max(1);
        let rotation = || Order::Rotation {
            start: backend.next_turn() % count,
        };
        let order = match balancer {
            Balancer::RoundRobin => rotation(),
            Balancer::LeastRequest | Balancer::Ewma if eligible.len() >= 2 => {
                two_choices(balancer, eligible.len(), state.endpoints())
            }
            Balancer::LeastRequest | Balancer::Ewma => rotation(),
            Balancer::Hash(key) => match hash_key(key, request) {
                Some(key) => Order::Ring {
                    cursor: state.ring(eligible).start(key),
                    visited: 0,
                },
                None => rotation(),
            },
        };
        Self { order, produced: 0 }
    }

    /// The position in `eligible` of the next candidate not in `skip`, or `None` when every
    /// endpoint was produced. `state` is the one the order was made with.
    pub(crate) fn next(
        &mut self,
        eligible: &[Endpoint],
        skip: &[Endpoint],
        state: &SetRuntime,
    ) -> Option<usize> {
        while self.produced < eligible.len() {
            let index = self.index(eligible, skip, state)?;
            self.produced += 1;
            if !skip.contains(&eligible[index]) {
                return Some(index);
            }
        }
        None
    }

    fn index(
        &mut self,
        eligible: &[Endpoint],
        skip: &[Endpoint],
        state: &SetRuntime,
    ) -> Option<usize> {
        let count = eligible.len();
        let step = self.produced;
        match self.order {
            Order::Rotation { start } => Some((start + step) % count),
            Order::Choices { first, .. } if step == 0 => Some(first),
            Order::Choices { second, .. } if step == 1 => Some(second),
            Order::Choices {
                first,
                second,
                start,
            } => {
                // Positions 2.. walk the rotation without the two choices.
                let rest: Vec<usize> = (0..count)
                    .map(|k| (start + k) % count)
                    .filter(|&i| i != first && i != second)
                    .collect();
                rest.get(step - 2).copied()
            }
            Order::Ring {
                ref mut cursor,
                ref mut visited,
            } => state
                .ring(eligible)
                .next_owner(cursor, visited, |i| !skip.contains(&eligible[i])),
        }
    }
}

/// Power of two choices: two distinct random endpoints of `count`, the less loaded first.
fn two_choices(balancer: &Balancer, count: usize, runtimes: &[Arc<EndpointRuntime>]) -> Order {
    let a = fastrand::usize(..count);
    let mut b = fastrand::usize(..count - 1);
    if b >= a {
        b += 1;
    }
    let load = |index: usize| {
        let Some(runtime) = runtimes.get(index) else {
            return 0.0;
        };
        match balancer {
            Balancer::Ewma => runtime.stats.ewma_score(),
            _ => f64::from(runtime.stats.in_flight()),
        }
    };
    let (first, second) = if load(b) < load(a) { (b, a) } else { (a, b) };
    Order::Choices {
        first,
        second,
        start: fastrand::usize(..count),
    }
}

/// The hash of the request's key, or `None` when the request does not carry it.
fn hash_key(key: &HashKey, request: &RequestKey<'_>) -> Option<u64> {
    let parts = request.parts;
    let hash = match key {
        HashKey::ClientAddress => match request.client {
            IpAddr::V4(address) => stable_hash(&address.octets()),
            IpAddr::V6(address) => stable_hash(&address.octets()),
        },
        HashKey::Header(name) => stable_hash(parts.headers.get(name)?.as_bytes()),
        HashKey::Cookie(name) => stable_hash(request_cookie(&parts.headers, name)?.as_bytes()),
        HashKey::RequestUri => stable_hash(parts.uri.path_and_query()?.as_str().as_bytes()),
        HashKey::Path => stable_hash(parts.uri.path().as_bytes()),
        HashKey::Host => match parts.uri.authority() {
            Some(authority) => stable_hash(authority.host().as_bytes()),
            None => stable_hash(parts.headers.get(HOST)?.as_bytes()),
        },
    };
    Some(hash)
}

#[cfg(test)]
mod tests;
