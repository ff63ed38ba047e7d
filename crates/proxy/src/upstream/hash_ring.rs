//! The consistent-hash ring of an endpoint set (ketama, as nginx's `hash ... consistent`), built once per set and kept in its runtime.

use sluice_routing::Endpoint;

/// Points each endpoint owns on a hash ring: enough for an even spread (about ±10 % at 100),
/// few enough that the ring of 1,000 endpoints is 1.6 MB.
pub(crate) const RING_POINTS: u64 = 100;

/// Consistent hashing (ketama, as nginx's `hash ... consistent`): every endpoint owns
/// [`RING_POINTS`] points on a ring of 64-bit values, placed by its address's stable hash. A key
/// goes to the owner of the first point at or after it, and a retry to the next distinct owner
/// clockwise. Adding an endpoint to N moves about 1/(N+1) of the keys, all to the new one.
/// Built once per endpoint set, on first use.
pub(crate) struct HashRing(Vec<(u64, u32)>);

impl HashRing {
    pub(crate) fn new(eligible: &[Endpoint]) -> Self {
        let mut points: Vec<(u64, u32)> = eligible
            .iter()
            .enumerate()
            .flat_map(|(index, endpoint)| {
                (1..=RING_POINTS)
                    .map(move |point| (mix(endpoint.stable_hash() ^ mix(point)), index as u32))
            })
            .collect();
        points.sort_unstable();
        Self(points)
    }

    /// Where on the ring `key` starts.
    pub(crate) fn start(&self, key: u64) -> usize {
        let key = mix(key);
        match self.0.partition_point(|&(point, _)| point < key) {
            at if at == self.0.len() => 0,
            at => at,
        }
    }

    /// The owner of the next point from `cursor` that `wanted` accepts, moving the cursor past
    /// it; `None` once every point was looked at.
    pub(crate) fn next_owner(
        &self,
        cursor: &mut usize,
        visited: &mut usize,
        wanted: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        while *visited < self.0.len() {
            let (_, owner) = self.0[*cursor % self.0.len()];
            *cursor += 1;
            *visited += 1;
            if wanted(owner as usize) {
                return Some(owner as usize);
            }
        }
        None
    }
}

/// MurmurHash3's 64-bit finaliser, to spread FNV's output over all bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}
