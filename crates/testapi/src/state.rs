//! State shared by the listener, the request handlers and the watch streams: the store, change notification, fault switches and counters.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::error::TestApiError;
use crate::store::Store;

/// Tunables of a test API server.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often a watch that asked for bookmarks gets one (the first comes right away).
    pub bookmark_interval: Duration,
    /// Events kept per resource type; older ones are compacted and resuming from them is 410.
    pub event_log_limit: usize,
    /// Requests remembered by [`crate::TestApiServer::requests`].
    pub request_log_limit: usize,
    /// Kinds left out of the group versions' resource lists, as in a cluster without their
    /// CRD: a client that discovers what is served does not see them.
    pub undiscovered_kinds: Vec<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bookmark_interval: Duration::from_secs(1),
            event_log_limit: 100_000,
            request_log_limit: 10_000,
            undiscovered_kinds: Vec::new(),
        }
    }
}

/// What the fault controls tell open watch streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    None,
    /// Abort every open watch connection.
    Drop,
    /// Send every open watch a 410 Expired ERROR event and end it.
    Expire,
}

/// A request to close the listener for a while.
#[derive(Debug)]
pub(crate) struct Outage {
    pub duration: Duration,
    /// Answered once the listener is closed and the open connections are ended.
    pub started: oneshot::Sender<()>,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string (empty when none).
    pub query: String,
    pub content_type: Option<String>,
}

/// Counters of what the server has served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub lists: u64,
    pub watches: u64,
    pub open_watches: usize,
    pub resource_version: u64,
}

/// Everything the server's tasks share.
#[derive(Debug)]
pub(crate) struct Shared {
    store: Mutex<Store>,
    /// The latest resourceVersion; watch streams wait on it.
    changes: watch::Sender<u64>,
    /// The latest fault interrupt with a counter so equal interrupts still notify.
    interrupts: watch::Sender<(u64, Interrupt)>,
    /// Bumped to end every open connection.
    connections: watch::Sender<u64>,
    /// Set when the server is dropped.
    shutdown: watch::Sender<bool>,
    outages: mpsc::UnboundedSender<Outage>,
    event_delay_ms: AtomicU64,
    open_watches: AtomicUsize,
    requests: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
    request_log: Mutex<VecDeque<RecordedRequest>>,
    pub(crate) options: Options,
    /// The address the server listens on (the same after an outage).
    pub(crate) addr: SocketAddr,
}

impl Shared {
    pub(crate) fn new(
        options: Options,
        addr: SocketAddr,
        outages: mpsc::UnboundedSender<Outage>,
    ) -> Self {
        let store = Store::new(options.event_log_limit);
        let rv = store.resource_version();
        Self {
            store: Mutex::new(store),
            changes: watch::Sender::new(rv),
            interrupts: watch::Sender::new((0, Interrupt::None)),
            connections: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
            outages,
            event_delay_ms: AtomicU64::new(0),
            open_watches: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            request_log: Mutex::new(VecDeque::new()),
            options,
            addr,
        }
    }

    /// The store for reading. A panic while holding the lock cannot leave it half-written in a
    /// way that matters to tests, so poisoning is ignored.
    pub(crate) fn read(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a write against the store and wakes the watch streams if anything changed.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, TestApiError>,
    ) -> Result<T, TestApiError> {
        let (result, rv) = {
            let mut store = self.read();
            let result = f(&mut store);
            (result, store.resource_version())
        };
        self.changes.send_if_modified(|current| {
            let changed = *current != rv;
            *current = rv;
            changed
        });
        result
    }

    pub(crate) fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(crate) fn subscribe_interrupts(&self) -> watch::Receiver<(u64, Interrupt)> {
        self.interrupts.subscribe()
    }

    pub(crate) fn interrupt(&self, interrupt: Interrupt) {
        self.interrupts.send_modify(|(epoch, current)| {
            *epoch += 1;
            *current = interrupt;
        });
    }

    pub(crate) fn subscribe_connections(&self) -> watch::Receiver<u64> {
        self.connections.subscribe()
    }

    /// Ends every open connection.
    pub(crate) fn kill_connections(&self) {
        self.connections.send_modify(|epoch| *epoch += 1);
    }

    pub(crate) fn subscribe_shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    pub(crate) fn request_outage(&self, outage: Outage) -> Result<(), TestApiError> {
        self.outages
            .send(outage)
            .map_err(|_| TestApiError::NotRunning)
    }

    pub(crate) fn event_delay(&self) -> Duration {
        Duration::from_millis(self.event_delay_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn set_event_delay(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.event_delay_ms.store(millis, Ordering::Relaxed);
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.open_watches.load(Ordering::Relaxed)
    }

    /// Counts an open watch until the guard is dropped.
    pub(crate) fn watch_opened(&self) -> OpenWatch<'_> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        self.open_watches.fetch_add(1, Ordering::Relaxed);
        OpenWatch(self)
    }

    pub(crate) fn list_served(&self) {
        self.lists.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut log = self
            .request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        log.push_back(request);
        while log.len() > self.options.request_log_limit {
            log.pop_front();
        }
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        let log = self
            .request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        log.iter().cloned().collect()
    }

    pub(crate) fn clear_requests(&self) {
        self.request_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            lists: self.lists.load(Ordering::Relaxed),
            watches: self.watches.load(Ordering::Relaxed),
            open_watches: self.open_watches(),
            resource_version: self.read().resource_version(),
        }
    }
}

/// Keeps the open-watch count while a watch stream runs.
#[derive(Debug)]
pub(crate) struct OpenWatch<'a>(&'a Shared);

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}
