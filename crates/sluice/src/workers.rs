//! Data-plane workers (`--workers N`): single-threaded runtimes on threads of their own, each serving its own `SO_REUSEPORT` sockets on the proxy and TLS addresses.
//!
//! The kernel spreads new connections over the sockets bound to one address; a connection
//! then lives on the worker that accepted it, with no work stealing, and each worker reuses
//! only the upstream connections it opened ([`sluice_proxy::enter_worker`]). The control plane
//! (source, compile, admin, metrics and the Gateway listeners) stays on the main runtime, so a
//! compile at cluster scale never stalls a request.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Body;
use sluice_proxy::{
    serve, serve_tls, ClientBody, ClientInfo, ListenerOptions, ShutdownSignal, TlsTerminator,
};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::serve::bind_listener;

/// The cores this process may run on (its CPU affinity or container limit): the default
/// number of workers.
pub(crate) fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `workers` listening sockets on `address`. With more than one, each has `SO_REUSEPORT` and
/// the address is first bound alone: a port that another process holds (even with
/// `SO_REUSEPORT`, which would otherwise share it silently) is an error, and port 0 resolves to
/// one port for all the workers.
pub(crate) fn bind(address: SocketAddr, workers: usize) -> std::io::Result<Vec<TcpListener>> {
    if workers <= 1 {
        return Ok(vec![bind_listener(address, false)?]);
    }
    let alone = bind_listener(address, false)?;
    let address = alone.local_addr()?;
    drop(alone);
    (0..workers).map(|_| bind_listener(address, true)).collect()
}

/// What every worker serves: the handler, the shutdown signal, and each listener's options.
pub(crate) struct Plan<F> {
    pub(crate) handler: F,
    pub(crate) shutdown: ShutdownSignal,
    pub(crate) http: ListenerOptions,
    pub(crate) https: ListenerOptions,
    pub(crate) terminator: Option<Arc<TlsTerminator>>,
}

/// The running workers; [`Workers::drained`] resolves when each has drained its listeners.
/// Their runtimes live on until this is dropped: the WebSocket tunnels and upstream
/// connections they drive must outlast the listeners (`serve` waits for the tunnels).
pub(crate) struct Workers {
    drained: Vec<oneshot::Receiver<()>>,
    _release: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts one worker per proxy socket; worker `i` also serves TLS socket `i` when there
    /// is a TLS listener. The sockets leave this runtime for the workers' own.
    pub(crate) fn start<F, Fut, B>(
        proxy: Vec<TcpListener>,
        tls: Vec<TcpListener>,
        plan: Plan<F>,
    ) -> anyhow::Result<Self>
    where
        F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<B>> + Send + 'static,
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut tls = tls.into_iter();
        let mut workers = Self {
            drained: Vec::new(),
            _release: Vec::new(),
        };
        for (index, listener) in proxy.into_iter().enumerate() {
            let sockets = Sockets {
                proxy: listener.into_std()?,
                tls: tls.next().map(TcpListener::into_std).transpose()?,
            };
            let (release, released) = oneshot::channel();
            workers
                .drained
                .push(start_worker(index, sockets, &plan, released)?);
            workers._release.push(release);
        }
        Ok(workers)
    }

    /// Resolves once every worker has stopped accepting and its connections have finished
    /// (under the grace period).
    pub(crate) async fn drained(&mut self) -> anyhow::Result<()> {
        for (index, drained) in std::mem::take(&mut self.drained).into_iter().enumerate() {
            drained
                .await
                .map_err(|_| anyhow::anyhow!("data-plane worker {index} ended abnormally"))?;
        }
        Ok(())
    }
}

/// One worker's sockets, out of any runtime while they move to the worker's thread.
struct Sockets {
    proxy: std::net::TcpListener,
    tls: Option<std::net::TcpListener>,
}

/// Builds worker `index`'s runtime here (so that failing to is an error of `serve`), then
/// runs its listeners on a thread of its own until they have drained, and its other tasks
/// until `released`.
fn start_worker<F, Fut, B>(
    index: usize,
    sockets: Sockets,
    plan: &Plan<F>,
    released: oneshot::Receiver<()>,
) -> anyhow::Result<oneshot::Receiver<()>>
where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .with_context(|| format!("cannot start the runtime of data-plane worker {index}"))?;
    let (drained, done) = oneshot::channel();
    let handler = plan.handler.clone();
    let shutdown = plan.shutdown.clone();
    let http = plan.http.clone();
    let https = plan.https.clone();
    let terminator = plan.terminator.clone();
    std::thread::Builder::new()
        .name(format!("sluice-worker-{index}"))
        .spawn(move || {
            sluice_proxy::enter_worker(index);
            runtime.block_on(async move {
                let proxy = match TcpListener::from_std(sockets.proxy) {
                    Ok(listener) => listener,
                    Err(error) => {
                        tracing::error!(worker = index, %error, "cannot serve the proxy socket");
                        return;
                    }
                };
                let tls = sockets.tls.zip(terminator).map(|(socket, terminator)| {
                    let listener = TcpListener::from_std(socket)?;
                    let serving = serve_tls(
                        listener,
                        handler.clone(),
                        shutdown.clone(),
                        https,
                        terminator,
                    );
                    Ok::<_, std::io::Error>(tokio::spawn(serving))
                });
                let tls = match tls.transpose() {
                    Ok(task) => task,
                    Err(error) => {
                        tracing::error!(worker = index, %error, "cannot serve the TLS socket");
                        None
                    }
                };
                serve(proxy, handler, shutdown, http).await;
                if let Some(task) = tls {
                    let _ = task.await;
                }
                let _ = drained.send(());
                let _ = released.await;
            });
        })
        .with_context(|| format!("cannot start the thread of data-plane worker {index}"))?;
    Ok(done)
}
