//! A connection's supervisor: drives hyper's connection future while holding it to the client limits, and tells a parked HTTP/1.1 connection from one that ended.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use std::error::Error as StdError;

use hyper::body::{Body, Incoming};
use hyper::rt::bounds::Http2ServerConnExec;
use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper::service::HttpService;

use super::activity::{ClientTimeouts, ConnectionActivity, Expiry};

/// A hyper server connection: a future that serves until the connection is done, and can be
/// asked to finish what is in flight and stop.
pub(super) trait Connection: Future<Output = hyper::Result<()>> {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, B, S> Connection for http1::UpgradeableConnection<I, S>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    I: Read + Write + Unpin + Send + 'static,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }
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

/// How a supervised connection future ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// The connection is over: the client left, a limit was hit, or the listener stopped.
    Closed,
    /// An idle HTTP/1.1 connection let go of hyper's state; its socket is still open and
    /// `closing` says whether it should close rather than wait for the next request.
    Parked { closing: bool },
}

/// Drives `connection` to its end while holding it to the client limits: a head late, a
/// response unread or a client cancelling everything closes it at once; idleness and the
/// listener stopping close it gracefully. With `park_check`, the connection is also polled
/// at least that often, so that an idle HTTP/1.1 connection parks within about that time
/// (hyper reads again on each poll, and the stream parks it when there is nothing to read).
pub(super) async fn supervise<C: Connection + ?Sized>(
    mut connection: Pin<&mut C>,
    activity: &ConnectionActivity,
    timeouts: ClientTimeouts,
    stopping: impl Future<Output = ()>,
    park_check: Option<Duration>,
    peer: SocketAddr,
) -> Ended {
    let recheck = park_check.map_or(timeouts.recheck(), |every| every.min(timeouts.recheck()));
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
                return Ended::Closed;
            }
            _ => {}
        }
        let look_again = now + recheck;
        let wake = due.map_or(look_again, |(at, _)| at.min(look_again));
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                    return Ended::Closed;
                }
                return match activity.is_parked() {
                    true => Ended::Parked { closing },
                    false => Ended::Closed,
                };
            }
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
