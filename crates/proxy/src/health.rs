//! What the proxy has learnt about one endpoint from its own traffic: load, latency and passive health.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive failed connects that eject an endpoint.
pub(crate) const EJECT_AFTER_FAILURES: u32 = 3;
/// The first ejection's length; each further one doubles it, up to [`MAX_EJECTION`].
const BASE_EJECTION: Duration = Duration::from_secs(1);
const MAX_EJECTION: Duration = Duration::from_secs(30);
/// How fast the latency average forgets: the decay time constant of peak EWMA.
const EWMA_DECAY: Duration = Duration::from_secs(10);

/// Load, latency and health of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct EndpointStats {
    in_flight: AtomicU32,
    latency: Mutex<PeakEwma>,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct PeakEwma {
    /// Nanoseconds; 0 until the first sample.
    value: f64,
    updated: Option<Instant>,
}

#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    /// Ejections since the endpoint last succeeded; sets the next ejection's length.
    ejections: u32,
    ejected_until: Option<Instant>,
    /// A request is on its way to an endpoint whose ejection ran out.
    trial_in_flight: bool,
}

/// Whether a request may go to an endpoint now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Open,
    /// The ejection has run out and this request is the trial.
    Trial,
    Ejected,
}

impl EndpointStats {
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request as in flight until the returned guard drops.
    pub(crate) fn begin(self: &std::sync::Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Peak-EWMA score: the latency average times the requests in flight (plus this one).
    /// Endpoints with no latency sample yet score 0, so new endpoints get tried.
    pub(crate) fn ewma_score(&self) -> f64 {
        let latency = self.latency.lock().map(|l| l.value).unwrap_or(0.0);
        latency * f64::from(self.in_flight() + 1)
    }

    /// Folds in the time one response took to start.
    pub(crate) fn record_latency(&self, sample: Duration) {
        let Ok(mut latency) = self.latency.lock() else {
            return;
        };
        let now = Instant::now();
        let sample = sample.as_nanos() as f64;
        latency.value = match latency.updated {
            Some(updated) if sample < latency.value => {
                let elapsed = now.saturating_duration_since(updated).as_secs_f64();
                let weight = (-elapsed / EWMA_DECAY.as_secs_f64()).exp();
                latency.value * weight + sample * (1.0 - weight)
            }
            // Peak: a slower sample replaces the average at once.
            _ => sample,
        };
        latency.updated = Some(now);
    }

    /// Whether this endpoint may take a request now; claims the trial when an ejection has
    /// just run out.
    pub(crate) fn admit(&self, now: Instant) -> Admission {
        let Ok(mut health) = self.health.lock() else {
            return Admission::Open;
        };
        match health.ejected_until {
            None => Admission::Open,
            Some(until) if now < until => Admission::Ejected,
            Some(_) if health.trial_in_flight => Admission::Ejected,
            Some(_) => {
                health.trial_in_flight = true;
                Admission::Trial
            }
        }
    }

    pub(crate) fn is_ejected(&self, now: Instant) -> bool {
        self.health
            .lock()
            .is_ok_and(|h| h.ejected_until.is_some_and(|until| now < until))
    }

    /// A connection was set up, so the endpoint is healthy again.
    pub(crate) fn record_success(&self) {
        if let Ok(mut health) = self.health.lock() {
            *health = Health::default();
        }
    }

    /// A connect failed. Returns `true` when this failure ejects the endpoint; `may_eject`
    /// says whether its backend can spare one more ejected endpoint.
    pub(crate) fn record_connect_failure(&self, now: Instant, may_eject: bool) -> bool {
        let Ok(mut health) = self.health.lock() else {
            return false;
        };
        health.consecutive_failures += 1;
        let was_trial = std::mem::take(&mut health.trial_in_flight);
        let due = was_trial || health.consecutive_failures >= EJECT_AFTER_FAILURES;
        if !due || !may_eject {
            if was_trial {
                // The trial failed but the backend cannot spare the endpoint: leave it open.
                health.ejected_until = None;
            }
            return false;
        }
        let factor = 1u32 << health.ejections.min(16);
        health.ejected_until = Some(now + (BASE_EJECTION * factor).min(MAX_EJECTION));
        health.ejections += 1;
        true
    }
}

/// Marks a request in flight to an endpoint until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(std::sync::Arc<EndpointStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failed_connects_eject_and_the_ejection_grows() {
        let stats = EndpointStats::default();
        let start = Instant::now();
        assert!(!stats.record_connect_failure(start, true));
        assert!(!stats.record_connect_failure(start, true));
        assert!(stats.record_connect_failure(start, true));
        assert_eq!(stats.admit(start), Admission::Ejected);
        let after_first = start + BASE_EJECTION;
        assert_eq!(stats.admit(after_first), Admission::Trial);
        assert_eq!(
            stats.admit(after_first),
            Admission::Ejected,
            "only one trial at a time"
        );
        assert!(
            stats.record_connect_failure(after_first, true),
            "a failed trial ejects again"
        );
        assert_eq!(stats.admit(after_first + BASE_EJECTION), Admission::Ejected);
        assert_eq!(
            stats.admit(after_first + BASE_EJECTION * 2),
            Admission::Trial,
            "the second ejection lasts twice as long"
        );
    }

    #[test]
    fn a_successful_trial_returns_the_endpoint() {
        let stats = EndpointStats::default();
        let start = Instant::now();
        for _ in 0..EJECT_AFTER_FAILURES {
            stats.record_connect_failure(start, true);
        }
        let later = start + BASE_EJECTION;
        assert_eq!(stats.admit(later), Admission::Trial);
        stats.record_success();
        assert_eq!(stats.admit(later), Admission::Open);
        assert!(
            !stats.record_connect_failure(later, true),
            "failures count from zero again"
        );
    }

    #[test]
    fn an_endpoint_the_backend_cannot_spare_is_not_ejected() {
        let stats = EndpointStats::default();
        let now = Instant::now();
        for _ in 0..5 {
            assert!(!stats.record_connect_failure(now, false));
        }
        assert_eq!(stats.admit(now), Admission::Open);
    }

    #[test]
    fn ewma_jumps_to_a_slow_peak_and_decays_towards_fast_samples() {
        let stats = EndpointStats::default();
        stats.record_latency(Duration::from_millis(10));
        stats.record_latency(Duration::from_millis(100));
        let peak = stats.ewma_score();
        assert!((peak - 100e6).abs() < 1.0, "peak {peak}");
        std::thread::sleep(Duration::from_millis(20));
        stats.record_latency(Duration::from_millis(1));
        let decayed = stats.ewma_score();
        assert!(decayed < peak && decayed > 1e6, "decayed {decayed}");
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let stats = std::sync::Arc::new(EndpointStats::default());
        let first = stats.begin();
        let second = stats.begin();
        assert_eq!(stats.in_flight(), 2);
        drop(first);
        drop(second);
        assert_eq!(stats.in_flight(), 0);
    }
}
