//! Which data-plane worker runs on the current thread, for the state each worker keeps apart.
//!
//! `sluice serve --workers N` runs N single-threaded runtimes, each on a thread of its own
//! with its own listening sockets. A pooled upstream connection is driven by a task of the
//! runtime that opened it, so each worker reuses only the connections it opened: another
//! worker taking one would make every request on it cross threads twice. Threads that are no
//! worker (the control plane, tests) count as worker 0.

use std::cell::Cell;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Marks the current thread as data-plane worker `index` for the rest of its life.
pub fn enter_worker(index: usize) {
    WORKER.with(|worker| worker.set(index));
}

/// The worker the current thread runs (0 when none was entered).
pub(crate) fn current() -> usize {
    WORKER.with(Cell::get)
}
