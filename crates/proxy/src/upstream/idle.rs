//! A body read under an idle timer: the clock runs only while the body waits for a chunk, so a slow but steady body never times out and a stalled one does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame};
use tokio::time::{Instant, Sleep};

/// How a body read under an idle timer failed.
pub(crate) enum Watched<E> {
    /// No chunk came within the idle timeout.
    Stalled,
    Failed(E),
}

/// What [`poll_watched`] yields: the next frame, the end, or why there is none.
pub(crate) type WatchedFrame<B> =
    Option<Result<Frame<<B as Body>::Data>, Watched<<B as Body>::Error>>>;

/// The next frame of `inner`, with the idle clock running while it waits.
pub(crate) fn poll_watched<B: Body + Unpin>(
    inner: &mut B,
    idle: &mut IdleTimer,
    cx: &mut Context<'_>,
) -> Poll<WatchedFrame<B>> {
    match Pin::new(inner).poll_frame(cx) {
        Poll::Ready(Some(Ok(frame))) => {
            idle.progressed();
            Poll::Ready(Some(Ok(frame)))
        }
        Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(Watched::Failed(error)))),
        Poll::Ready(None) => Poll::Ready(None),
        Poll::Pending if idle.expired(cx) => Poll::Ready(Some(Err(Watched::Stalled))),
        Poll::Pending => Poll::Pending,
    }
}

/// The clock between two chunks of a body. It starts when the body has to wait and stops
/// when a chunk arrives; the timer is allocated once, the first time the body waits.
pub(crate) struct IdleTimer {
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    running: bool,
}

impl IdleTimer {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            sleep: None,
            running: false,
        }
    }

    /// The body is waiting: starts the clock if it is not running, and says whether it ran out.
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let deadline = Instant::now() + self.timeout;
        let sleep = match (&mut self.sleep, self.running) {
            (Some(sleep), true) => sleep,
            (Some(sleep), false) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            (slot @ None, _) => slot.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.running = true;
        sleep.as_mut().poll(cx).is_ready()
    }

    pub(crate) fn progressed(&mut self) {
        self.running = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test(start_paused = true)]
    async fn the_idle_clock_runs_only_while_the_body_waits() {
        let mut timer = IdleTimer::new(Duration::from_secs(60));
        let waker = futures_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!timer.expired(&mut cx));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!timer.expired(&mut cx));
        timer.progressed();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!timer.expired(&mut cx), "a chunk restarted the clock");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(poll_fn(|cx| Poll::Ready(timer.expired(cx))).await);
    }

    fn futures_waker() -> std::task::Waker {
        std::task::Waker::noop().clone()
    }
}
