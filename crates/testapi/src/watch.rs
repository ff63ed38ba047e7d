//! Watch streams: initial events, replay from the event log, live events, bookmarks, timeouts, and the faults that cut them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::body::ResponseBody;
use crate::error::TestApiError;
use crate::object;
use crate::resources::RESOURCES;
use crate::selector::Selectors;
use crate::state::{Interrupt, Shared};
use crate::store::{EventType, LoggedEvent};

/// Events fetched from the log per lock.
const BATCH: usize = 1024;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchStart {
    /// ADDED for every current object first; with `end_bookmark`, then a BOOKMARK annotated
    /// `k8s.io/initial-events-end` (streaming lists).
    Initial { end_bookmark: bool },
    /// Every event after this resourceVersion.
    From(u64),
}

/// A watch request, parsed.
#[derive(Debug, Clone)]
pub(crate) struct WatchSpec {
    pub res: usize,
    pub namespace: Option<String>,
    pub selectors: Selectors,
    pub start: WatchStart,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
}

/// How a stream ended.
enum Outcome {
    /// Timeout, or the client went away: end the body cleanly.
    Ended,
    /// Send this 410 as an ERROR event, then end.
    Expired(TestApiError),
    /// Abort the connection.
    Dropped,
    /// A fault interrupt arrived; it decides how the stream ends.
    Interrupted,
}

/// Starts a watch stream and returns its body.
pub(crate) fn start(shared: Arc<Shared>, spec: WatchSpec) -> ResponseBody {
    let (lines, receiver) = mpsc::channel(256);
    let (abort, abort_receiver) = oneshot::channel();
    // Subscribe before the task starts, so a fault fired right after the response is returned
    // still reaches this stream.
    let interrupts = shared.subscribe_interrupts();
    let shutdown = shared.subscribe_shutdown();
    tokio::spawn(async move {
        run(&shared, spec, lines, abort, interrupts, shutdown).await;
    });
    ResponseBody::stream(receiver, abort_receiver)
}

async fn run(
    shared: &Shared,
    spec: WatchSpec,
    lines: mpsc::Sender<Bytes>,
    abort: oneshot::Sender<()>,
    mut interrupts: watch::Receiver<(u64, Interrupt)>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _open = shared.watch_opened();
    let deadline = spec.timeout.map(|t| Instant::now() + t);
    // The stream checks this before every event, so nothing that happened after a fault
    // interrupt is delivered ahead of it.
    let probe = interrupts.clone();
    let outcome = tokio::select! {
        biased;
        _ = next_interrupt(&mut interrupts) => Outcome::Interrupted,
        _ = shutdown.wait_for(|down| *down) => Outcome::Dropped,
        _ = sleep_until(deadline) => Outcome::Ended,
        outcome = stream(shared, &spec, &lines, probe) => outcome,
    };
    let outcome = match outcome {
        Outcome::Interrupted => match interrupts.borrow().1 {
            Interrupt::Expire => Outcome::Expired(TestApiError::expired(
                "too old resource version: the test API server expired every resourceVersion",
            )),
            Interrupt::Drop | Interrupt::None => Outcome::Dropped,
        },
        other => other,
    };
    match outcome {
        Outcome::Ended | Outcome::Interrupted => {}
        Outcome::Expired(error) => {
            let line = event_line("ERROR", &error.to_status());
            let _ = tokio::time::timeout(Duration::from_secs(5), lines.send(line)).await;
        }
        Outcome::Dropped => {
            let _ = abort.send(());
            // Keep the channel open until the body has seen the abort, so the connection is
            // aborted rather than ended cleanly.
            lines.closed().await;
        }
    }
}

async fn next_interrupt(interrupts: &mut watch::Receiver<(u64, Interrupt)>) -> Interrupt {
    loop {
        if interrupts.changed().await.is_err() {
            return std::future::pending().await;
        }
        let (_, interrupt) = *interrupts.borrow_and_update();
        if interrupt != Interrupt::None {
            return interrupt;
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn stream(
    shared: &Shared,
    spec: &WatchSpec,
    lines: &mpsc::Sender<Bytes>,
    interrupts: watch::Receiver<(u64, Interrupt)>,
) -> Outcome {
    let interrupted = || interrupts.has_changed().unwrap_or(false);
    let mut changes = shared.subscribe_changes();
    changes.borrow_and_update();
    let (initial, mut cursor) = {
        let store = shared.read();
        match spec.start {
            WatchStart::Initial { .. } => {
                let (items, rv) =
                    store.snapshot(spec.res, spec.namespace.as_deref(), &spec.selectors);
                (Ok(items), rv)
            }
            WatchStart::From(rv) => (store.check_watchable(spec.res, rv).map(|()| Vec::new()), rv),
        }
    };
    let initial = match initial {
        Ok(items) => items,
        Err(error) => return Outcome::Expired(error),
    };
    for object in initial {
        if lines.send(event_line("ADDED", &object)).await.is_err() {
            return Outcome::Ended;
        }
    }
    if spec.start == (WatchStart::Initial { end_bookmark: true }) {
        let line = bookmark_line(spec.res, cursor, true);
        if lines.send(line).await.is_err() {
            return Outcome::Ended;
        }
    }
    let mut bookmarks = tokio::time::interval(shared.options.bookmark_interval);
    bookmarks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        changes.borrow_and_update();
        let fetched = shared.read().events_after(spec.res, cursor, BATCH);
        let (events, through) = match fetched {
            Ok(fetched) => fetched,
            Err(error) => return Outcome::Expired(error),
        };
        let full = events.len() == BATCH;
        for event in &events {
            let Some(event_type) = visible(spec, event) else {
                continue;
            };
            if interrupted() {
                return Outcome::Interrupted;
            }
            let delay = shared.event_delay();
            if !delay.is_zero() {
                tokio::time::sleep_until(event.at + delay).await;
            }
            if lines
                .send(event_line(event_type, &event.object))
                .await
                .is_err()
            {
                return Outcome::Ended;
            }
        }
        cursor = through;
        if full {
            continue;
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return Outcome::Ended;
                }
            }
            _ = bookmarks.tick(), if spec.bookmarks => {
                if lines.send(bookmark_line(spec.res, cursor, false)).await.is_err() {
                    return Outcome::Ended;
                }
            }
            () = lines.closed() => return Outcome::Ended,
        }
    }
}

/// The event type this watcher sees for a logged event, if any: a modification that moves an
/// object into or out of the selection is ADDED or DELETED, as in the API server's watch cache.
fn visible(spec: &WatchSpec, event: &LoggedEvent) -> Option<&'static str> {
    let selected = |object: &Value| {
        spec.namespace
            .as_deref()
            .is_none_or(|ns| object::meta_str(object, "namespace") == Some(ns))
            && spec.selectors.matches(object)
    };
    let now = selected(&event.object);
    match event.kind {
        EventType::Added | EventType::Deleted => now.then_some(event.kind.as_str()),
        EventType::Modified => {
            let before = event.previous.as_deref().is_some_and(selected);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

/// One JSON line: `{"type":...,"object":...}`.
fn event_line(event_type: &str, object: &Value) -> Bytes {
    let mut line = Vec::with_capacity(512);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event_type.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    if serde_json::to_writer(&mut line, object).is_err() {
        line.extend_from_slice(b"null");
    }
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark_line(res: usize, rv: u64, initial_events_end: bool) -> Bytes {
    let r = &RESOURCES[res];
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": metadata});
    event_line("BOOKMARK", &object)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn lines_are_single_json_documents() {
        let line = event_line("ADDED", &json!({"metadata": {"name": "a"}}));
        assert!(line.ends_with(b"\n"));
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed["type"], "ADDED");
        assert_eq!(parsed["object"]["metadata"]["name"], "a");
        let bookmark: Value = serde_json::from_slice(&bookmark_line(1, 42, true)).unwrap();
        assert_eq!(bookmark["type"], "BOOKMARK");
        assert_eq!(bookmark["object"]["kind"], "Service");
        assert_eq!(bookmark["object"]["metadata"]["resourceVersion"], "42");
        assert_eq!(
            bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }
}
