//! Accepting connections until the listener stops, each in a task of its own, and without spinning when accept fails: out of file descriptors (EMFILE), the listener backs off from 10 ms doubling to 1 s and logs once a second with a count.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::shutdown::ShutdownSignal;

const FIRST_DELAY: Duration = Duration::from_millis(10);
const MAX_DELAY: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The listener's state between failed accepts.
#[derive(Debug, Default)]
pub(crate) struct Acceptor {
    delay: Option<Duration>,
    /// Failures since the last log line.
    unlogged: u64,
    last_log: Option<Instant>,
}

impl Acceptor {
    /// The next connection. A failed accept (most often EMFILE: the process is out of file
    /// descriptors while connections pile up in the backlog) waits before the next try, so
    /// that the process does not spin and whatever frees a descriptor can run.
    pub(crate) async fn accept(&mut self, listener: &TcpListener) -> (TcpStream, SocketAddr) {
        loop {
            match listener.accept().await {
                Ok(accepted) => {
                    self.recovered();
                    return accepted;
                }
                // The peer gave up while queued: nothing is wrong with the listener.
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Err(error) => {
                    let delay = self.failed(&error);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Counts a failure, logs at most once per [`LOG_EVERY`], and says how long to wait.
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        let delay = self.delay.map_or(FIRST_DELAY, |d| (d * 2).min(MAX_DELAY));
        self.delay = Some(delay);
        self.unlogged += 1;
        let now = Instant::now();
        if self.last_log.is_none_or(|at| now - at >= LOG_EVERY) {
            tracing::warn!(
                %error,
                failures = self.unlogged,
                next_try_in = ?delay,
                "accept failed; backing off (raise the file descriptor limit if this is EMFILE)"
            );
            self.unlogged = 0;
            self.last_log = Some(now);
        }
        delay
    }

    fn recovered(&mut self) {
        if self.delay.take().is_some() {
            tracing::info!(
                unlogged_failures = self.unlogged,
                "accepting connections again"
            );
            self.unlogged = 0;
        }
    }
}

/// Accepts connections on `listener` until `shutdown`, each served by `serve` in a task of its
/// own; then closes the listener and gives the open connections up to `grace_period` before
/// closing them. Returns how many were still open when the grace period ran out.
pub(crate) async fn accept_until_stopped<F, Fut>(
    listener: TcpListener,
    shutdown: ShutdownSignal,
    grace_period: Duration,
    mut serve: F,
) -> usize
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut acceptor = Acceptor::default();
    let mut connections = JoinSet::new();
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = acceptor.accept(&listener) => accepted,
            () = &mut stop => break,
        };
        connections.spawn(serve(stream, peer));
    }
    drop(listener);
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace_period, finished).await.is_ok() {
        return 0;
    }
    let open = connections.len();
    connections.shutdown().await;
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_from_ten_milliseconds_to_one_second() {
        let mut acceptor = Acceptor::default();
        let error = std::io::Error::from_raw_os_error(24);
        let delays: Vec<Duration> = (0..9).map(|_| acceptor.failed(&error)).collect();
        let millis: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        acceptor.recovered();
        assert_eq!(
            acceptor.failed(&error),
            FIRST_DELAY,
            "a success resets the backoff"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_logged_once_a_second_with_a_count() {
        let mut acceptor = Acceptor::default();
        let error = std::io::Error::from_raw_os_error(24);
        acceptor.failed(&error);
        assert_eq!(acceptor.unlogged, 0, "the first failure is logged at once");
        for _ in 0..5 {
            acceptor.failed(&error);
        }
        assert_eq!(
            acceptor.unlogged, 5,
            "then counted until a second has passed"
        );
        tokio::time::advance(LOG_EVERY).await;
        acceptor.failed(&error);
        assert_eq!(acceptor.unlogged, 0);
    }
}
