//! What the proxy has learnt about one endpoint from its own traffic: load, latency and passive health.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Consecutive failed connects that eject an endpoint.
pub(crate) const EJECT_AFTER_FAILURES: u32 = 3;
/// The first ejection's length; each further one doubles it, up to [`MAX_EJECTION`].
const BASE_EJECTION: Duration = Duration::from_secs(1);
const MAX_EJECTION: Duration = Duration::from_secs(30);
/// How fast the latency average forgets: the decay time constant of peak EWMA.
const EWMA_DECAY: Duration = Duration::from_secs(10);

/// Load, latency and health of one endpoint. What every request reads or writes is atomic;
/// only a change of health takes the lock.
#[derive(Debug, Default)]
pub(crate) struct EndpointStats {
    in_flight: AtomicU32,
    latency: PeakEwma,
    /// Mirrors `health.ejected_until.is_some()`, so that admitting a request to a healthy
    /// endpoint takes no lock.
    out_of_rotation: AtomicBool,
    health: Mutex<Health>,
    /// Attempts sent to the endpoint, and those that failed or answered 5xx.
    attempts: AtomicU64,
    failures: AtomicU64,
    /// Mirrors `health.cut_responses > 0`, so that a complete response takes no lock.
    cutting: AtomicBool,
}

/// The peak-EWMA latency, lock-free. Two samples folded in at once may lose one of them,
/// which an average can afford.
#[derive(Debug, Default)]
struct PeakEwma {
    /// Nanoseconds as `f64` bits; 0 until the first sample.
    value: AtomicU64,
    /// When the value last changed, in nanoseconds since [`EPOCH`] (0: never).
    updated: AtomicU64,
}

/// The origin of the latency average's timestamps.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

#[derive(Debug, Default)]
struct Health {
    /// Failed connects since the last connect that succeeded.
    consecutive_failures: u32,
    /// Responses cut off mid-body since the last that arrived whole.
    cut_responses: u32,
    /// Ejections since the endpoint last succeeded; sets the next ejection's length.
    ejections: u32,
    ejected_until: Option<Instant>,
    /// A request is on its way to an endpoint whose ejection ran out.
    trial_in_flight: bool,
}

/// Whether a request may go to an endpoint now.
#[derive(Debug)]
pub(crate) enum Admission {
    Open,
    /// The ejection has run out and this request is the trial that decides whether the
    /// endpoint returns.
    Trial(TrialGuard),
    Ejected,
}

impl EndpointStats {
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request as in flight until the returned guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Peak-EWMA score: the latency average times the requests in flight (plus this one).
    /// Endpoints with no latency sample yet score 0, so new endpoints get tried.
    pub(crate) fn ewma_score(&self) -> f64 {
        let latency = f64::from_bits(self.latency.value.load(Ordering::Relaxed));
        latency * f64::from(self.in_flight() + 1)
    }

    /// Folds in the time one response took to start, at `now`.
    pub(crate) fn record_latency(&self, sample: Duration, now: Instant) {
        let now = now.saturating_duration_since(*EPOCH).as_nanos() as u64 + 1;
        let sample = sample.as_nanos() as f64;
        let value = f64::from_bits(self.latency.value.load(Ordering::Relaxed));
        let updated = self.latency.updated.load(Ordering::Relaxed);
        let next = if updated != 0 && sample < value {
            let elapsed = now.saturating_sub(updated) as f64 / 1e9;
            let weight = (-elapsed / EWMA_DECAY.as_secs_f64()).exp();
            value * weight + sample * (1.0 - weight)
        } else {
            // Peak: a slower sample replaces the average at once.
            sample
        };
        self.latency.value.store(next.to_bits(), Ordering::Relaxed);
        self.latency.updated.store(now, Ordering::Relaxed);
    }

    /// Whether this endpoint may take a request now. When an ejection has run out, the first
    /// request to ask claims the trial; until the trial's guard resolves, others are kept away.
    pub(crate) fn admit(self: &Arc<Self>, now: Instant) -> Admission {
        if !self.out_of_rotation.load(Ordering::Acquire) {
            return Admission::Open;
        }
        let Some(mut health) = self.health() else {
            return Admission::Open;
        };
        match health.ejected_until {
            None => Admission::Open,
            Some(until) if now < until => Admission::Ejected,
            Some(_) if health.trial_in_flight => Admission::Ejected,
            Some(_) => {
                health.trial_in_flight = true;
                Admission::Trial(TrialGuard {
                    stats: Some(self.clone()),
                })
            }
        }
    }

    /// Whether the endpoint is out of rotation: ejected, or past its ejection but not yet
    /// proven by a trial. This is what the "at most half ejected" cap counts.
    pub(crate) fn is_ejected(&self) -> bool {
        self.out_of_rotation.load(Ordering::Acquire)
    }

    /// One attempt ended; `failed` when it got no response or a 5xx.
    pub(crate) fn record_outcome(&self, failed: bool) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Attempts so far, and failed ones.
    pub(crate) fn outcomes(&self) -> (u64, u64) {
        (
            self.attempts.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }

    /// The latency average, once there is a sample.
    pub(crate) fn latency(&self) -> Option<Duration> {
        let nanos = f64::from_bits(self.latency.value.load(Ordering::Relaxed));
        (nanos > 0.0).then(|| Duration::from_nanos(nanos as u64))
    }

    /// A connection was set up: failed connects count from zero again.
    pub(crate) fn record_connect_success(&self) {
        if let Some(mut health) = self.health() {
            health.consecutive_failures = 0;
        }
    }

    /// The health record, locked; the guard keeps `out_of_rotation` in step when it drops.
    fn health(&self) -> Option<HealthGuard<'_>> {
        Some(HealthGuard {
            health: self.health.lock().ok()?,
            out_of_rotation: &self.out_of_rotation,
        })
    }

    /// A connect failed. Returns `true` when this failure ejects the endpoint; `may_eject`
    /// says whether its backend can spare one more ejected endpoint.
    pub(crate) fn record_connect_failure(&self, now: Instant, may_eject: bool) -> bool {
        let Some(mut health) = self.health() else {
            return false;
        };
        health.consecutive_failures += 1;
        let due = health.consecutive_failures >= EJECT_AFTER_FAILURES;
        if !due || !may_eject || health.ejected_until.is_some() {
            return false;
        }
        health.eject(now);
        true
    }

    /// A response was cut off before its declared end (reset, early close, stall): the
    /// request had reached the endpoint, which failed it. Three in a row eject the endpoint,
    /// as three failed connects do; `may_eject` as for those. Returns `true` when this ejects.
    pub(crate) fn record_response_cut(&self, now: Instant, may_eject: bool) -> bool {
        let Some(mut health) = self.health() else {
            return false;
        };
        health.cut_responses += 1;
        self.cutting.store(true, Ordering::Relaxed);
        let due = health.cut_responses >= EJECT_AFTER_FAILURES;
        if !due || !may_eject || health.ejected_until.is_some() {
            return false;
        }
        health.eject(now);
        true
    }

    /// A response that was already streaming to the client was cut off. It counts as a
    /// failed attempt and towards the run of cut responses; the ejection itself waits for the
    /// next failure an attempt sees, which knows how many of the backend's endpoints are out.
    pub(crate) fn record_streamed_cut(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.record_response_cut(Instant::now(), false);
    }

    /// A response arrived whole: a run of cut responses is over.
    pub(crate) fn record_response_complete(&self) {
        if !self.cutting.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut health) = self.health() {
            health.cut_responses = 0;
            self.cutting.store(false, Ordering::Relaxed);
        }
    }
}

/// The locked health record of an endpoint. Whatever the holder changed, the endpoint's
/// lock-free "out of rotation" flag agrees with it once the guard drops.
struct HealthGuard<'s> {
    health: MutexGuard<'s, Health>,
    out_of_rotation: &'s AtomicBool,
}

impl std::ops::Deref for HealthGuard<'_> {
    type Target = Health;

    fn deref(&self) -> &Health {
        &self.health
    }
}

impl std::ops::DerefMut for HealthGuard<'_> {
    fn deref_mut(&mut self) -> &mut Health {
        &mut self.health
    }
}

impl Drop for HealthGuard<'_> {
    fn drop(&mut self) {
        let out = self.health.ejected_until.is_some();
        self.out_of_rotation.store(out, Ordering::Release);
    }
}

impl Health {
    /// Takes the endpoint out of rotation, each time for twice as long, up to the maximum.
    fn eject(&mut self, now: Instant) {
        let factor = 1u32 << self.ejections.min(16);
        self.ejected_until = Some(now + (BASE_EJECTION * factor).min(MAX_EJECTION));
        self.ejections += 1;
        self.trial_in_flight = false;
    }
}

/// The claim on an ejected endpoint's trial. It always resolves: [`TrialGuard::alive`] returns
/// the endpoint, [`TrialGuard::failed`] ejects it again, and dropping it unresolved (the retry
/// budget refused the attempt, the client went away) releases the claim for the next request.
#[derive(Debug)]
pub(crate) struct TrialGuard {
    stats: Option<Arc<EndpointStats>>,
}

impl TrialGuard {
    /// The endpoint answered (any HTTP response): it is back in rotation.
    pub(crate) fn alive(mut self) {
        if let Some(stats) = self.stats.take() {
            if let Some(mut health) = stats.health() {
                *health = Health::default();
            }
        }
    }

    /// The trial failed. The endpoint is ejected again, for longer, when its backend can
    /// spare it (`may_eject`); otherwise it goes back into rotation.
    /// Returns `true` when it was ejected again.
    pub(crate) fn failed(mut self, now: Instant, may_eject: bool) -> bool {
        let Some(stats) = self.stats.take() else {
            return false;
        };
        let Some(mut health) = stats.health() else {
            return false;
        };
        if may_eject {
            health.eject(now);
        } else {
            health.ejected_until = None;
            health.trial_in_flight = false;
        }
        may_eject
    }
}

impl Drop for TrialGuard {
    fn drop(&mut self) {
        if let Some(stats) = self.stats.take() {
            if let Some(mut health) = stats.health() {
                health.trial_in_flight = false;
            }
        }
    }
}

/// Marks a request in flight to an endpoint until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<EndpointStats>);

impl InFlight {
    /// The endpoint's record.
    pub(crate) fn stats(&self) -> &EndpointStats {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ejects a fresh endpoint at `at`.
    fn ejected_at(at: Instant) -> Arc<EndpointStats> {
        let stats = Arc::new(EndpointStats::default());
        for _ in 1..EJECT_AFTER_FAILURES {
            assert!(!stats.record_connect_failure(at, true));
        }
        assert!(stats.record_connect_failure(at, true));
        stats
    }

    fn is_trial(admission: &Admission) -> bool {
        matches!(admission, Admission::Trial(_))
    }

    #[test]
    fn three_failed_connects_eject_and_the_ejection_grows() {
        let start = Instant::now();
        let stats = ejected_at(start);
        assert!(matches!(stats.admit(start), Admission::Ejected));
        let after_first = start + BASE_EJECTION;
        let Admission::Trial(trial) = stats.admit(after_first) else {
            panic!("the ejection ran out: a trial is due");
        };
        assert!(
            matches!(stats.admit(after_first), Admission::Ejected),
            "only one trial at a time"
        );
        assert!(
            trial.failed(after_first, true),
            "a failed trial ejects again"
        );
        assert!(matches!(
            stats.admit(after_first + BASE_EJECTION),
            Admission::Ejected
        ));
        assert!(
            is_trial(&stats.admit(after_first + BASE_EJECTION * 2)),
            "the second ejection lasts twice as long"
        );
    }

    #[test]
    fn a_trial_that_answers_returns_the_endpoint() {
        let start = Instant::now();
        let stats = ejected_at(start);
        let later = start + BASE_EJECTION;
        let Admission::Trial(trial) = stats.admit(later) else {
            panic!("a trial is due");
        };
        assert!(stats.is_ejected(), "not back until the trial says so");
        trial.alive();
        assert!(matches!(stats.admit(later), Admission::Open));
        assert!(!stats.is_ejected());
        assert!(
            !stats.record_connect_failure(later, true),
            "failures count from zero again"
        );
    }

    #[test]
    fn a_trial_dropped_unresolved_releases_its_claim() {
        let start = Instant::now();
        let stats = ejected_at(start);
        let later = start + BASE_EJECTION;
        drop(stats.admit(later));
        assert!(
            is_trial(&stats.admit(later)),
            "the next request may take the trial"
        );
        assert!(
            stats.is_ejected(),
            "and the endpoint still counts as ejected"
        );
    }

    #[test]
    fn a_failed_trial_the_backend_cannot_spare_goes_back_into_rotation() {
        let start = Instant::now();
        let stats = ejected_at(start);
        let later = start + BASE_EJECTION;
        let Admission::Trial(trial) = stats.admit(later) else {
            panic!("a trial is due");
        };
        assert!(!trial.failed(later, false));
        assert!(matches!(stats.admit(later), Admission::Open));
    }

    #[test]
    fn an_endpoint_the_backend_cannot_spare_is_not_ejected() {
        let stats = Arc::new(EndpointStats::default());
        let now = Instant::now();
        for _ in 0..5 {
            assert!(!stats.record_connect_failure(now, false));
        }
        assert!(matches!(stats.admit(now), Admission::Open));
    }

    #[test]
    fn ewma_jumps_to_a_slow_peak_and_decays_towards_fast_samples() {
        let stats = EndpointStats::default();
        let start = Instant::now();
        stats.record_latency(Duration::from_millis(10), start);
        stats.record_latency(Duration::from_millis(100), start);
        let peak = stats.ewma_score();
        assert!((peak - 100e6).abs() < 1.0, "peak {peak}");
        stats.record_latency(Duration::from_millis(1), start + Duration::from_millis(20));
        let decayed = stats.ewma_score();
        assert!(decayed < peak && decayed > 1e6, "decayed {decayed}");
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let stats = Arc::new(EndpointStats::default());
        let first = stats.begin();
        let second = stats.begin();
        assert_eq!(stats.in_flight(), 2);
        drop(first);
        drop(second);
        assert_eq!(stats.in_flight(), 0);
    }

    #[test]
    fn three_cut_responses_in_a_row_eject_and_a_whole_one_ends_the_run() {
        let stats = Arc::new(EndpointStats::default());
        let now = Instant::now();
        assert!(!stats.record_response_cut(now, true));
        assert!(!stats.record_response_cut(now, true));
        stats.record_response_complete();
        assert!(!stats.record_response_cut(now, true));
        assert!(!stats.record_response_cut(now, true));
        stats.record_connect_success();
        assert!(
            stats.record_response_cut(now, true),
            "a new connection does not end a run of cut responses"
        );
        assert!(matches!(stats.admit(now), Admission::Ejected));
    }

    #[test]
    fn a_streamed_cut_counts_but_leaves_the_ejection_to_an_attempt() {
        let stats = Arc::new(EndpointStats::default());
        for _ in 0..3 {
            stats.record_streamed_cut();
        }
        assert_eq!(stats.outcomes(), (0, 3));
        assert!(matches!(stats.admit(Instant::now()), Admission::Open));
        assert!(stats.record_response_cut(Instant::now(), true));
    }
}
