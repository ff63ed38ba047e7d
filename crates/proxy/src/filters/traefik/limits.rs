//! Traefik's `rateLimit` (a token bucket per source, slightly-late requests delayed rather than refused) and `inFlightReq` (requests in progress per source).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use sluice_routing::middleware::{InFlightReq, RateLimit, SourceCriterion};

use super::access::client_address;
use super::ChainRequest;
use super::{answered, OwnAnswer};
use crate::filters::contract::LocalAnswer;
use crate::filters::limits::{ConnectionSlot, Connections, SlotKey};
use crate::filters::services::Services;

/// The most sources one limiter tracks; when full, sources whose bucket has refilled are
/// forgotten (they would start full anyway), and if that is not enough, all of them.
const MAX_SOURCES: usize = 65_536;

/// The key a limit counts a request under.
fn source_key(request: &ChainRequest<'_, '_>, source: &SourceCriterion) -> String {
    match source {
        SourceCriterion::ClientAddress(strategy) => {
            client_address(request, strategy).unwrap_or_default()
        }
        SourceCriterion::Header(name) => request
            .upstream
            .headers
            .get(name.as_str())
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        SourceCriterion::Host => request.host().to_owned(),
    }
}

/// One source's bucket: tokens (negative while delayed requests hold reservations) and when
/// it was last refilled.
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// `rateLimit`: golang.org/x/time/rate's token bucket per source, as Traefik runs it. The
/// buckets live in the runtime under the route, the middleware's name and its settings, so a
/// recompile that leaves those as they were keeps the counts.
pub(super) struct RateLimiter {
    name: Arc<str>,
    limit: Arc<RateLimit>,
    buckets: OnceLock<Arc<Buckets>>,
}

/// Each source's bucket.
type Buckets = Mutex<HashMap<String, Bucket>>;

/// What the bucket says about one request.
enum Verdict {
    Now,
    After(Duration),
    Refused(Duration),
}

impl RateLimiter {
    pub(super) fn new(name: Arc<str>, limit: Arc<RateLimit>) -> Self {
        Self {
            name,
            limit,
            buckets: OnceLock::new(),
        }
    }

    /// Lets the request through, after a short wait when it is only slightly early; a later
    /// one gets 429 with `Retry-After` and `X-Retry-In`.
    pub(super) async fn admit(
        &self,
        request: &ChainRequest<'_, '_>,
        services: &Services,
    ) -> Result<(), Box<LocalAnswer>> {
        let Some(rate) = self.limit.per_second else {
            return Ok(());
        };
        self.buckets.get_or_init(|| {
            let route = request
                .context
                .target
                .map(|t| t.ingress)
                .unwrap_or_default();
            let key = format!("{route} {} {:?}", self.name, self.limit);
            services.state(&key, Buckets::default)
        });
        let key = source_key(request, &self.limit.source);
        match self.reserve(&key, rate, Instant::now()) {
            Verdict::Now => Ok(()),
            Verdict::After(delay) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Verdict::Refused(delay) => Err(too_many(delay)),
        }
    }

    fn reserve(&self, key: &str, rate: f64, now: Instant) -> Verdict {
        let burst = f64::from(self.limit.burst);
        // A panic elsewhere while the lock was held leaves counts that are still counts.
        let mut buckets = self
            .buckets
            .get_or_init(Arc::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_SOURCES && !buckets.contains_key(key) {
            buckets.retain(|_, bucket| refilled(bucket, rate, burst, now) < burst);
            if buckets.len() >= MAX_SOURCES {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: burst,
            refilled: now,
        });
        bucket.tokens = refilled(bucket, rate, burst, now);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Verdict::Now;
        }
        let delay = Duration::from_secs_f64((1.0 - bucket.tokens) / rate);
        if delay <= max_delay(rate) {
            bucket.tokens -= 1.0;
            return Verdict::After(delay);
        }
        Verdict::Refused(delay)
    }
}

fn refilled(bucket: &Bucket, rate: f64, burst: f64, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
    (bucket.tokens + elapsed * rate).min(burst)
}

/// The longest Traefik delays a request rather than refuse it: half a token's time (500 ms
/// below one request a second), with Go's integer rate.
fn max_delay(rate: f64) -> Duration {
    if rate < 1.0 {
        return Duration::from_millis(500);
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = rate as u64;
    Duration::from_secs(1) / u32::try_from(whole.saturating_mul(2)).unwrap_or(u32::MAX)
}

/// Traefik's 429: `Retry-After` in whole seconds (rounded up) and `X-Retry-In` as Go writes
/// a duration.
fn too_many(delay: Duration) -> Box<LocalAnswer> {
    let mut headers = HeaderMap::new();
    let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    if let Ok(value) = HeaderValue::try_from(go_duration(delay)) {
        headers.insert(HeaderName::from_static("x-retry-in"), value);
    }
    answered(OwnAnswer {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers,
        body: bytes::Bytes::from_static(b"Too Many Requests"),
    })
}

/// A duration as Go's `time.Duration.String` writes it (`999.873ms`, `1.5s`, `2m0.5s`).
fn go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    let fraction = |value: u128, unit: u128| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let digits = unit.ilog10() as usize;
        let text = format!("{rest:0digits$}");
        format!("{whole}.{}", text.trim_end_matches('0'))
    };
    match nanos {
        0 => "0s".to_owned(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}µs", fraction(n, 1_000)),
        n if n < 1_000_000_000 => format!("{}ms", fraction(n, 1_000_000)),
        n => {
            let seconds = n / 1_000_000_000;
            let (hours, minutes) = (seconds / 3600, seconds % 3600 / 60);
            let rest = n - (hours * 3600 + minutes * 60) * 1_000_000_000;
            let seconds = format!("{}s", fraction(rest, 1_000_000_000));
            match (hours, minutes) {
                (0, 0) => seconds,
                (0, m) => format!("{m}m{seconds}"),
                (h, m) => format!("{h}h{m}m{seconds}"),
            }
        }
    }
}

/// `inFlightReq`: at most `amount` requests of one source in progress; the place is held
/// until the response has ended. The counts live in the runtime under the route, the
/// middleware's name and its settings, as `rateLimit`'s buckets do.
pub(super) struct InFlightLimit {
    name: Arc<str>,
    limit: Arc<InFlightReq>,
    connections: OnceLock<Arc<Connections>>,
}

impl InFlightLimit {
    pub(super) fn new(name: Arc<str>, limit: Arc<InFlightReq>) -> Self {
        Self {
            name,
            limit,
            connections: OnceLock::new(),
        }
    }

    pub(super) fn take(
        &self,
        request: &ChainRequest<'_, '_>,
        services: &Services,
    ) -> Result<ConnectionSlot, Box<LocalAnswer>> {
        let connections = self.connections.get_or_init(|| {
            let route = request
                .context
                .target
                .map(|t| t.ingress)
                .unwrap_or_default();
            let key = format!("{route} {} {:?}", self.name, self.limit);
            let amount = u32::try_from(self.limit.amount).unwrap_or(u32::MAX);
            services.state(&key, || Connections::with_limit(amount))
        });
        let key = SlotKey::Source(source_key(request, &self.limit.source).into());
        Connections::take(connections, key).ok_or_else(|| {
            answered(OwnAnswer {
                status: StatusCode::TOO_MANY_REQUESTS,
                headers: HeaderMap::new(),
                body: bytes::Bytes::from(format!("max connections reached: {}", self.limit.amount)),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::middleware::IpStrategy;

    fn limiter(per_second: f64, burst: u32) -> RateLimiter {
        RateLimiter::new(
            "limit".into(),
            Arc::new(RateLimit {
                per_second: Some(per_second),
                burst,
                source: SourceCriterion::ClientAddress(IpStrategy::default()),
            }),
        )
    }

    #[test]
    fn a_full_bucket_admits_the_burst_then_delays_or_refuses() {
        let limiter = limiter(10.0, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(matches!(limiter.reserve("a", 10.0, start), Verdict::Now));
        }
        // The next token comes in 100 ms, more than the 50 ms Traefik waits at 10/s.
        assert!(matches!(
            limiter.reserve("a", 10.0, start),
            Verdict::Refused(_)
        ));
        // 60 ms later it is 40 ms away: delayed, not refused.
        let later = start + Duration::from_millis(60);
        assert!(
            matches!(limiter.reserve("a", 10.0, later), Verdict::After(d) if d <= Duration::from_millis(50))
        );
        // Another source has its own bucket.
        assert!(matches!(limiter.reserve("b", 10.0, later), Verdict::Now));
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(Duration::from_micros(999_873)), "999.873ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(120_500)), "2m0.5s");
        assert_eq!(go_duration(Duration::from_secs(1)), "1s");
    }

    #[test]
    fn the_wait_is_half_a_token_with_an_integer_rate() {
        assert_eq!(max_delay(10.0), Duration::from_millis(50));
        assert_eq!(max_delay(1.9), Duration::from_millis(500));
        assert_eq!(max_delay(0.5), Duration::from_millis(500));
    }
}
