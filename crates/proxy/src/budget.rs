//! The retry budget: retries may add at most a fifth to a backend's requests over ten seconds.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Retries allowed per request sent, over the window.
const RETRY_RATIO: f64 = 0.2;
/// Retries always allowed per second, so a quiet backend can still retry.
const MIN_RETRIES_PER_SECOND: u64 = 10;
const WINDOW: Duration = Duration::from_secs(10);
const BUCKETS: usize = 10;

/// Requests and retries of one backend in ten one-second buckets.
#[derive(Debug)]
pub(crate) struct RetryBudget(Mutex<Buckets>);

#[derive(Debug)]
struct Buckets {
    origin: Instant,
    /// Index (in seconds since `origin`) of the newest bucket.
    newest: u64,
    requests: [u64; BUCKETS],
    retries: [u64; BUCKETS],
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::starting_at(Instant::now())
    }
}

impl RetryBudget {
    fn starting_at(origin: Instant) -> Self {
        Self(Mutex::new(Buckets {
            origin,
            newest: 0,
            requests: [0; BUCKETS],
            retries: [0; BUCKETS],
        }))
    }

    /// Counts a request's first attempt.
    pub(crate) fn record_request(&self, now: Instant) {
        if let Ok(mut buckets) = self.0.lock() {
            let slot = buckets.advance(now);
            buckets.requests[slot] += 1;
        }
    }

    /// Takes one retry from the budget if any is left.
    pub(crate) fn try_retry(&self, now: Instant) -> bool {
        let Ok(mut buckets) = self.0.lock() else {
            return false;
        };
        let slot = buckets.advance(now);
        let requests: u64 = buckets.requests.iter().sum();
        let retries: u64 = buckets.retries.iter().sum();
        let floor = MIN_RETRIES_PER_SECOND * WINDOW.as_secs();
        let allowed = floor.max((requests as f64 * RETRY_RATIO) as u64);
        if retries >= allowed {
            return false;
        }
        buckets.retries[slot] += 1;
        true
    }
}

impl Buckets {
    /// Moves the window to `now`, clearing buckets that fell out; returns `now`'s bucket.
    fn advance(&mut self, now: Instant) -> usize {
        let second = now.saturating_duration_since(self.origin).as_secs();
        let stale = second.saturating_sub(self.newest).min(BUCKETS as u64);
        for step in 1..=stale {
            let slot = ((self.newest + step) % BUCKETS as u64) as usize;
            self.requests[slot] = 0;
            self.retries[slot] = 0;
        }
        self.newest = self.newest.max(second);
        (second % BUCKETS as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(budget: &RetryBudget, now: Instant, wanted: u64) -> u64 {
        (0..wanted).filter(|_| budget.try_retry(now)).count() as u64
    }

    #[test]
    fn retries_are_capped_at_a_fifth_of_requests() {
        let start = Instant::now();
        let budget = RetryBudget::starting_at(start);
        for _ in 0..10_000 {
            budget.record_request(start);
        }
        assert_eq!(granted(&budget, start, 10_000), 2_000);
    }

    #[test]
    fn a_quiet_backend_still_gets_the_floor() {
        let start = Instant::now();
        let budget = RetryBudget::starting_at(start);
        budget.record_request(start);
        assert_eq!(granted(&budget, start, 1_000), MIN_RETRIES_PER_SECOND * 10);
    }

    #[test]
    fn the_budget_refills_as_the_window_moves_on() {
        let start = Instant::now();
        let budget = RetryBudget::starting_at(start);
        assert_eq!(granted(&budget, start, 1_000), 100);
        let later = start + WINDOW + Duration::from_secs(1);
        assert_eq!(
            granted(&budget, later, 1_000),
            100,
            "old retries left the window"
        );
    }
}
