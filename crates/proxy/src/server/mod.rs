//! Listeners: accept TCP connections, serve HTTP/1.1 or h2c (prior knowledge) on each, and shut down in phases: drain, stop, finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Where a process is in its shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    /// Told to stop: readiness fails so load balancers move away, but requests are still
    /// served on every connection.
    Draining,
    /// Listeners close, idle keep-alive connections close, requests in flight finish.
    Stopping,
}

/// Moves every server of the process through the shutdown phases.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<Phase>);

impl ShutdownTrigger {
    /// Enters [`Phase::Draining`] (no-op once stopping).
    pub fn drain(&self) {
        self.0.send_if_modified(|phase| {
            let changed = *phase == Phase::Serving;
            if changed {
                *phase = Phase::Draining;
            }
            changed
        });
    }

    /// Enters [`Phase::Stopping`]. Dropping the trigger does the same.
    pub fn stop(&self) {
        let _ = self.0.send(Phase::Stopping);
    }
}

/// Tells servers to drain and stop. Cloned into every server of the process.
#[derive(Clone, Debug)]
pub struct ShutdownSignal(watch::Receiver<Phase>);

impl ShutdownSignal {
    /// A signal and the trigger that moves it on.
    pub fn new() -> (ShutdownTrigger, Self) {
        let (sender, receiver) = watch::channel(Phase::Serving);
        (ShutdownTrigger(sender), Self(receiver))
    }

    /// Resolves once the servers should stop accepting (or the trigger is gone).
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|phase| *phase == Phase::Stopping).await;
    }

    /// Resolves once draining has begun (or the trigger is gone).
    pub async fn draining(mut self) {
        let _ = self.0.wait_for(|phase| *phase >= Phase::Draining).await;
    }
}

/// Serves `handler` on every connection accepted from `listener` until `shutdown` reaches
/// [`Phase::Stopping`], then closes the listener, closes idle keep-alive connections (HTTP/1.1
/// answers in flight with `Connection: close`, HTTP/2 sends GOAWAY) and waits up to
/// `grace_period` for requests in flight to finish.
pub async fn serve<F, Fut, B>(
    listener: TcpListener,
    handler: F,
    shutdown: ShutdownSignal,
    grace_period: Duration,
) where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = service_fn(move |request| {
            let response = handler(request, peer);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = graceful.watch(
            builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned(),
        );
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace_period, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace_period,
            "requests still in flight after the grace period; closing their connections"
        );
    }
}
