//! A connection's supervisor: drives a connection's serving future (sluice's HTTP/1.1, hyper's HTTP/2) while holding it to the client limits.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use std::error::Error as StdError;

use hyper::body::{Body, Incoming};
use hyper::rt::bounds::Http2ServerConnExec;
use hyper::rt::{Read, Write};
use hyper::server::conn::http2;
use hyper::service::HttpService;

use super::activity::{ClientTimeouts, ConnectionActivity, Expiry};

/// A connection's serving: a future that serves until the connection is done, and can be
/// asked to finish what is in flight and stop.
pub(super) trait Connection: Future {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, B, S, E> Connection for http2::Connection<I, S, E>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: Read + Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    E: Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self);
    }
}

/// Drives `connection` to its end while holding it to the client limits: a head late, a
/// response unread or a client cancelling everything closes it at once; idleness and the
/// listener stopping close it gracefully. Returns the connection's own end, or `None` when a
/// limit ended it.
///
/// With `park_check`, an idle HTTP/1.1 connection is polled once it has been idle that long,
/// so that it notices it may park (and ends its serving to do so). A busy connection is looked
/// at less and less often, up to [`MAX_PARK_CHECK`] apart: with hundreds of busy connections,
/// a look every 50 ms each was a timer and a round of polls every few requests.
pub(super) async fn supervise<C: Connection + ?Sized>(
    mut connection: Pin<&mut C>,
    activity: &ConnectionActivity,
    timeouts: ClientTimeouts,
    stopping: impl Future<Output = ()>,
    park_check: Option<Duration>,
    peer: SocketAddr,
) -> Option<C::Output> {
    tokio::pin!(stopping);
    let abusive = activity.turned_abusive();
    tokio::pin!(abusive);
    let sleep = tokio::time::sleep(timeouts.recheck());
    tokio::pin!(sleep);
    let mut closing = false;
    let mut busy_for = Duration::ZERO;
    loop {
        let due = activity
            .deadline(&timeouts)
            .filter(|(_, expiry)| !(closing && *expiry == Expiry::Idle));
        let now = tokio::time::Instant::now();
        match due {
            Some((at, Expiry::Idle)) if at <= now => {
                connection.as_mut().graceful_shutdown();
                closing = true;
                continue;
            }
            Some((at, expiry)) if at <= now => {
                log_expiry(expiry, peer);
                return None;
            }
            _ => {}
        }
        let look_again = match park_check {
            None => now + timeouts.recheck(),
            Some(after) => match activity.idle_since() {
                // Idle: due to park once idle for `after`.
                Some(since) if since + after > now => {
                    busy_for = Duration::ZERO;
                    since + after
                }
                Some(_) => now + after,
                // Busy: look again later each time it is still busy.
                None => {
                    busy_for = (busy_for * 2).clamp(after, MAX_PARK_CHECK);
                    now + busy_for
                }
            },
        };
        let look_again = look_again.min(now + timeouts.recheck());
        sleep
            .as_mut()
            .reset(due.map_or(look_again, |(at, _)| at.min(look_again)));
        tokio::select! {
            ended = connection.as_mut() => return Some(ended),
            () = &mut stopping, if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            // The notification is spent: a new one waits for the next.
            () = &mut abusive => abusive.set(activity.turned_abusive()),
            () = &mut sleep => {}
        }
    }
}

/// The longest a busy HTTP/1.1 connection goes without a look at whether it may park.
const MAX_PARK_CHECK: Duration = Duration::from_millis(800);

pub(super) fn log_expiry(expiry: Expiry, peer: SocketAddr) {
    match expiry {
        Expiry::Abusive => tracing::warn!(
            %peer,
            "closed a connection whose client cancelled most of its requests early (HTTP/2 rapid reset)"
        ),
        _ => tracing::debug!(%peer, ?expiry, "closed a connection that ran into a client timeout"),
    }
}
