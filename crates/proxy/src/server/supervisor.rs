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
/// listener stopping close it gracefully. With `park_check`, the connection is also polled at
/// least that often, so that an idle HTTP/1.1 connection notices within about that time
/// that it may park (and ends its serving to do so). Returns the connection's own end, or
/// `None` when a limit ended it.
pub(super) async fn supervise<C: Connection + ?Sized>(
    mut connection: Pin<&mut C>,
    activity: &ConnectionActivity,
    timeouts: ClientTimeouts,
    stopping: impl Future<Output = ()>,
    park_check: Option<Duration>,
    peer: SocketAddr,
) -> Option<C::Output> {
    tokio::pin!(stopping);
    let mut closing = false;
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
        let recheck = park_check.map_or(timeouts.recheck(), |every| every.min(timeouts.recheck()));
        let look_again = now + recheck;
        let wake = due.map_or(look_again, |(at, _)| at.min(look_again));
        tokio::select! {
            ended = connection.as_mut() => return Some(ended),
            () = &mut stopping, if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            () = activity.turned_abusive() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

pub(super) fn log_expiry(expiry: Expiry, peer: SocketAddr) {
    match expiry {
        Expiry::Abusive => tracing::warn!(
            %peer,
            "closed a connection whose client cancelled most of its requests early (HTTP/2 rapid reset)"
        ),
        _ => tracing::debug!(%peer, ?expiry, "closed a connection that ran into a client timeout"),
    }
}
