//! The retry budget: retries may add at most a fifth to a backend's requests over ten seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Retries allowed per request sent, over the window.
const RETRY_RATIO: f64 = 0.2;
/// Retries always allowed per second, so a quiet backend can still retry.
const MIN_RETRIES_PER_SECOND: u64 = 10;
const WINDOW: Duration = Duration::from_secs(10);
const BUCKETS: usize = 10;

/// Requests and retries of one backend in ten one-second buckets, lock-free: every request
/// touches it, from every core. Each bucket remembers which second it counts; a bucket found
/// holding an older second is cleared by the first request to reach it. Two requests racing to
/// clear the same bucket may lose a count between them, which a budget can afford.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    origin: Instant,
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Default)]
struct Bucket {
    /// The second (since `origin`) this bucket counts, plus one; 0 when unused.
    second: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::starting_at(Instant::now())
    }
}

impl RetryBudget {
    fn starting_at(origin: Instant) -> Self {
        Self {
            origin,
            buckets: Default::default(),
        }
    }

    /// Counts a request's first attempt.
    pub(crate) fn record_request(&self, now: Instant) {
        self.current(now).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget if any is left.
    pub(crate) fn try_retry(&self, now: Instant) -> bool {
        let bucket = self.current(now);
        if !self.has_retry(now) {
            return false;
        }
        bucket.retries.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether a retry is left, without taking it.
    pub(crate) fn has_retry(&self, now: Instant) -> bool {
        let (requests, retries) = self.totals(now);
        let floor = MIN_RETRIES_PER_SECOND * WINDOW.as_secs();
        let allowed = floor.max((requests as f64 * RETRY_RATIO) as u64);
        retries < allowed
    }

    /// The bucket of `now`'s second, cleared first if it still held an older second. A `now`
    /// a little older than another thread's counts into that thread's bucket.
    fn current(&self, now: Instant) -> &Bucket {
        let tag = self.second(now) + 1;
        let bucket = &self.buckets[(tag % BUCKETS as u64) as usize];
        let held = bucket.second.load(Ordering::Acquire);
        if held < tag
            && bucket
                .second
                .compare_exchange(held, tag, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            bucket.requests.store(0, Ordering::Relaxed);
            bucket.retries.store(0, Ordering::Relaxed);
        }
        bucket
    }

    /// Requests and retries counted in the window that ends at `now`.
    fn totals(&self, now: Instant) -> (u64, u64) {
        let newest = self.second(now) + 1;
        let oldest = newest.saturating_sub(BUCKETS as u64 - 1);
        self.buckets
            .iter()
            .filter(|bucket| (oldest..=newest).contains(&bucket.second.load(Ordering::Acquire)))
            .fold((0, 0), |(requests, retries), bucket| {
                (
                    requests + bucket.requests.load(Ordering::Relaxed),
                    retries + bucket.retries.load(Ordering::Relaxed),
                )
            })
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
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

    #[test]
    fn requests_of_the_last_ten_seconds_count_and_older_ones_do_not() {
        let start = Instant::now();
        let budget = RetryBudget::starting_at(start);
        for second in 0..20 {
            for _ in 0..1_000 {
                budget.record_request(start + Duration::from_secs(second));
            }
        }
        let now = start + Duration::from_secs(19);
        assert_eq!(budget.totals(now), (10_000, 0));
        assert_eq!(granted(&budget, now, 10_000), 2_000);
    }

    #[test]
    fn threads_counting_at_once_lose_nothing_within_a_second() {
        let start = Instant::now();
        let budget = std::sync::Arc::new(RetryBudget::starting_at(start));
        budget.record_request(start);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        budget.record_request(start);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|_| panic!("counting thread panicked"));
        }
        assert_eq!(budget.totals(start), (40_001, 0));
    }
}
