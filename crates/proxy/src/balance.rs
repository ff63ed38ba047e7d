//! Balancers: each yields an ordered list of candidate endpoints, so a retry takes the next one.

use std::net::IpAddr;

use http::header::HOST;
use http::request::Parts;
use sluice_routing::{Backend, Balancer, Endpoint, HashKey};

use crate::runtime::Runtime;
use crate::sticky::request_cookie;

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
    /// Highest rendezvous score first.
    Rendezvous { key: u64 },
}

/// What a balancer may look at in a request.
pub(crate) struct RequestKey<'r> {
    pub(crate) parts: &'r Parts,
    pub(crate) client: IpAddr,
}

impl Candidates {
    /// The order for one request over `eligible`, the endpoints taking new requests.
    pub(crate) fn new(
        balancer: &Balancer,
        backend: &Backend,
        eligible: &[Endpoint],
        request: &RequestKey<'_>,
        runtime: &Runtime,
    ) -> Self {
        let count = eligible.len().max(1);
        let rotation = || Order::Rotation {
            start: backend.next_turn() % count,
        };
        let order = match balancer {
            Balancer::RoundRobin => rotation(),
            Balancer::LeastRequest | Balancer::Ewma if eligible.len() >= 2 => {
                two_choices(balancer, eligible, runtime)
            }
            Balancer::LeastRequest | Balancer::Ewma => rotation(),
            Balancer::Hash(key) => match hash_key(key, request) {
                Some(key) => Order::Rendezvous { key },
                None => rotation(),
            },
        };
        Self { order, produced: 0 }
    }

    /// The next candidate not in `skip`, or `None` when every endpoint was produced.
    pub(crate) fn next<'e>(
        &mut self,
        eligible: &'e [Endpoint],
        skip: &[Endpoint],
    ) -> Option<&'e Endpoint> {
        while self.produced < eligible.len() {
            let index = self.index(eligible, skip)?;
            self.produced += 1;
            let endpoint = &eligible[index];
            if !skip.contains(endpoint) {
                return Some(endpoint);
            }
        }
        None
    }

    fn index(&self, eligible: &[Endpoint], skip: &[Endpoint]) -> Option<usize> {
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
            Order::Rendezvous { key } => (0..count)
                .filter(|&i| !skip.contains(&eligible[i]))
                .max_by_key(|&i| rendezvous_score(key, &eligible[i])),
        }
    }
}

/// Power of two choices: two distinct random endpoints, the less loaded first.
fn two_choices(balancer: &Balancer, eligible: &[Endpoint], runtime: &Runtime) -> Order {
    let count = eligible.len();
    let a = fastrand::usize(..count);
    let mut b = fastrand::usize(..count - 1);
    if b >= a {
        b += 1;
    }
    let load = |index: usize| {
        let stats = runtime.endpoint(&eligible[index]).stats.clone();
        match balancer {
            Balancer::Ewma => stats.ewma_score(),
            _ => f64::from(stats.in_flight()),
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
    let bytes: Vec<u8> = match key {
        HashKey::ClientAddress => request.client.to_string().into_bytes(),
        HashKey::Header(name) => parts.headers.get(name)?.as_bytes().to_vec(),
        HashKey::Cookie(name) => request_cookie(&parts.headers, name)?.as_bytes().to_vec(),
        HashKey::RequestUri => parts.uri.path_and_query()?.as_str().as_bytes().to_vec(),
        HashKey::Path => parts.uri.path().as_bytes().to_vec(),
        HashKey::Host => match parts.uri.authority() {
            Some(authority) => authority.host().as_bytes().to_vec(),
            None => parts.headers.get(HOST)?.as_bytes().to_vec(),
        },
    };
    Some(fnv1a(&bytes))
}

/// Rendezvous (highest random weight) score of an endpoint for a key: removing or adding an
/// endpoint moves only the keys whose highest score it had or now has.
fn rendezvous_score(key: u64, endpoint: &Endpoint) -> u64 {
    mix(key ^ mix(fnv1a(endpoint.authority().as_str().as_bytes())))
}

/// 64-bit FNV-1a: stable across builds and replicas, so every replica maps a key alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// MurmurHash3's 64-bit finaliser, to spread FNV's output over all bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests;
