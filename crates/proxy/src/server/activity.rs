//! One client connection's activity, shared by its reader, its requests and its supervisor: which timeout runs now, which head was refused, and whether the client resets streams abusively.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Marks "not set" in the millisecond fields.
const UNSET: u64 = u64::MAX;
/// Requests cancelled by the client before their answer was ready (an HTTP/2 stream reset)
/// that make a connection abusive, once they are also at least half of its requests: the
/// CVE-2023-44487 "rapid reset" pattern, where each reset costs the proxy and its backends
/// work that the client never waits for.
const ABUSIVE_RESETS: u32 = 100;

/// The client-side timeouts a connection is held to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientTimeouts {
    /// From accepting the connection, or from the first byte of a later request, to the end
    /// of the request head.
    pub(crate) header: Duration,
    /// Between requests on a keep-alive connection.
    pub(crate) idle: Duration,
    /// How long a response may wait for the client to take more bytes.
    pub(crate) write_stall: Duration,
}

impl ClientTimeouts {
    /// How often the supervisor looks at a connection at least: the shortest timeout. A head,
    /// an idle spell or a stalled write that starts between two looks has its deadline after
    /// the second look, which then sleeps until exactly that deadline, whatever the ratio of
    /// the timeouts.
    pub(crate) fn recheck(&self) -> Duration {
        self.header.min(self.idle).min(self.write_stall)
    }
}

/// Which limit a connection ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The request head did not arrive in time (slowloris): close at once.
    Header,
    /// Nothing happened between requests: close gracefully.
    Idle,
    /// The client stopped reading a response: close at once.
    WriteStall,
    /// The client cancels requests as fast as it sends them: close at once.
    Abusive,
}

/// The shared record of one connection.
pub(crate) struct ConnectionActivity {
    origin: Instant,
    /// Milliseconds since `origin`, or [`UNSET`].
    head_started: AtomicU64,
    idle_since: AtomicU64,
    write_stalled_since: AtomicU64,
    in_flight: AtomicU32,
    /// Requests handed to the handler, and how many of them the client cancelled early.
    requests: AtomicU32,
    cancelled: AtomicU32,
    abusive: Notify,
    /// A response switched protocols (WebSocket): the bytes that follow are not HTTP.
    upgraded: AtomicBool,
}

impl ConnectionActivity {
    /// A connection accepted now: its first request head is due within the header timeout.
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            head_started: AtomicU64::new(0),
            idle_since: AtomicU64::new(UNSET),
            write_stalled_since: AtomicU64::new(UNSET),
            in_flight: AtomicU32::new(0),
            requests: AtomicU32::new(0),
            cancelled: AtomicU32::new(0),
            abusive: Notify::new(),
            upgraded: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(UNSET - 1)
    }

    fn at(&self, millis: u64) -> Instant {
        self.origin + Duration::from_millis(millis)
    }

    /// Whether a response switched the connection to another protocol.
    pub(crate) fn is_upgraded(&self) -> bool {
        self.upgraded.load(Ordering::Relaxed)
    }

    /// Since when the connection has been idle: nothing in flight, nothing of the next head,
    /// and a request answered; `None` otherwise.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let since = self.idle_since.load(Ordering::Acquire);
        let idle = self.in_flight.load(Ordering::Acquire) == 0
            && self.head_started.load(Ordering::Acquire) == UNSET
            && since != UNSET;
        idle.then(|| self.at(since))
    }

    /// Whether the connection may be parked now: a request was answered at least `idle` ago
    /// and nothing of the next one has arrived, no request is in flight, every byte written
    /// went out, and the connection still speaks HTTP.
    pub(crate) fn may_park(&self, idle: Duration) -> bool {
        let since = self.idle_since.load(Ordering::Acquire);
        self.in_flight.load(Ordering::Acquire) == 0
            && self.head_started.load(Ordering::Acquire) == UNSET
            && since != UNSET
            && self.write_stalled_since.load(Ordering::Acquire) == UNSET
            && !self.is_upgraded()
            && self.now() >= since.saturating_add(u64::try_from(idle.as_millis()).unwrap_or(UNSET))
    }

    /// The first byte of a request head arrived.
    pub(crate) fn head_started(&self) {
        let idle = self.in_flight.load(Ordering::Acquire) == 0;
        if idle && self.head_started.load(Ordering::Acquire) == UNSET {
            self.head_started.store(self.now(), Ordering::Release);
        }
    }

    /// A write to the client could not proceed (`true`) or went through again (`false`).
    pub(crate) fn write_stalled(&self, stalled: bool) {
        let value = if stalled { self.now() } else { UNSET };
        self.write_stalled_since.store(value, Ordering::Release);
    }

    /// The handler got a request; the returned guard counts it in flight until dropped.
    pub(crate) fn request_started(self: &Arc<Self>) -> RequestActivity {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(UNSET, Ordering::Release);
        self.requests.fetch_add(1, Ordering::AcqRel);
        RequestActivity {
            activity: self.clone(),
            answered: false,
        }
    }

    /// Resolves when the client turned abusive. Other changes are not announced: the
    /// supervisor looks again at least every [`ClientTimeouts::recheck`], which is soon
    /// enough for any deadline that can start in the meantime, and costs a request nothing.
    pub(crate) async fn turned_abusive(&self) {
        self.abusive.notified().await;
    }

    /// The next limit the connection may run into, and when.
    pub(crate) fn deadline(&self, timeouts: &ClientTimeouts) -> Option<(Instant, Expiry)> {
        if self.is_abusive() {
            return Some((self.origin, Expiry::Abusive));
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            let stalled = self.write_stalled_since.load(Ordering::Acquire);
            return (stalled != UNSET)
                .then(|| (self.at(stalled) + timeouts.write_stall, Expiry::WriteStall));
        }
        let head = self.head_started.load(Ordering::Acquire);
        if head != UNSET {
            return Some((self.at(head) + timeouts.header, Expiry::Header));
        }
        let idle = self.idle_since.load(Ordering::Acquire);
        (idle != UNSET).then(|| (self.at(idle) + timeouts.idle, Expiry::Idle))
    }

    /// Whether the client cancelled so many requests early that it looks like an attack.
    pub(crate) fn is_abusive(&self) -> bool {
        let cancelled = self.cancelled.load(Ordering::Acquire);
        let requests = self.requests.load(Ordering::Acquire);
        cancelled >= ABUSIVE_RESETS && cancelled.saturating_mul(2) >= requests
    }

    fn request_ended(&self, answered: bool) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle_since.store(self.now(), Ordering::Release);
        }
        if !answered {
            let cancelled = self.cancelled.fetch_add(1, Ordering::AcqRel) + 1;
            if cancelled >= ABUSIVE_RESETS && self.is_abusive() {
                self.abusive.notify_one();
            }
        }
    }
}

/// One request in flight on a connection.
pub(crate) struct RequestActivity {
    activity: Arc<ConnectionActivity>,
    answered: bool,
}

impl RequestActivity {
    /// The response switches protocols: from now on the connection carries another protocol.
    pub(crate) fn upgraded(&self) {
        self.activity.upgraded.store(true, Ordering::Relaxed);
    }

    /// The handler produced a response: the request was not cancelled.
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for RequestActivity {
    fn drop(&mut self) {
        self.activity.request_ended(self.answered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: ClientTimeouts = ClientTimeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        write_stall: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn the_first_head_is_due_from_accept_and_later_ones_from_their_first_byte() {
        let activity = Arc::new(ConnectionActivity::new());
        let accepted = Instant::now();
        assert_eq!(
            activity.deadline(&TIMEOUTS),
            Some((accepted + TIMEOUTS.header, Expiry::Header))
        );
        let mut request = activity.request_started();
        assert_eq!(
            activity.deadline(&TIMEOUTS),
            None,
            "no limit while a request runs"
        );
        request.answered();
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(request);
        let answered = Instant::now();
        assert_eq!(
            activity.deadline(&TIMEOUTS),
            Some((answered + TIMEOUTS.idle, Expiry::Idle))
        );
        tokio::time::advance(Duration::from_secs(20)).await;
        activity.head_started();
        assert_eq!(
            activity.deadline(&TIMEOUTS),
            Some((Instant::now() + TIMEOUTS.header, Expiry::Header))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_write_counts_only_while_a_request_runs() {
        let activity = Arc::new(ConnectionActivity::new());
        let mut request = activity.request_started();
        request.answered();
        activity.write_stalled(true);
        let stalled = Instant::now();
        assert_eq!(
            activity.deadline(&TIMEOUTS),
            Some((stalled + TIMEOUTS.write_stall, Expiry::WriteStall))
        );
        activity.write_stalled(false);
        assert_eq!(activity.deadline(&TIMEOUTS), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_may_park_only_once_idle_long_enough_between_requests() {
        let idle = Duration::from_millis(50);
        let activity = Arc::new(ConnectionActivity::new());
        assert!(!activity.may_park(idle), "not before its first request");
        let mut request = activity.request_started();
        assert!(!activity.may_park(idle), "not while a request runs");
        request.answered();
        drop(request);
        assert!(!activity.may_park(idle), "not right after the answer");
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(activity.may_park(idle));
        activity.write_stalled(true);
        assert!(!activity.may_park(idle), "not with bytes still to write");
        activity.write_stalled(false);
        activity.head_started();
        assert!(!activity.may_park(idle), "not once the next head has begun");
    }

    #[test]
    fn many_early_cancellations_make_a_connection_abusive() {
        let activity = Arc::new(ConnectionActivity::new());
        for _ in 0..ABUSIVE_RESETS {
            let mut answered = activity.request_started();
            answered.answered();
        }
        for _ in 0..ABUSIVE_RESETS - 1 {
            drop(activity.request_started());
        }
        assert!(!activity.is_abusive(), "fewer than the threshold");
        drop(activity.request_started());
        assert!(activity.is_abusive());
    }
}
