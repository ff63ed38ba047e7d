//! A pod's HTTP side: its keep-alive connections and the slow, two-chunk answer it gives.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use http::{header, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::options::Termination;
use crate::pods::PodConfig;

/// A response body sent as a stream of chunks.
pub(crate) type PodBody = StreamBody<BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

/// Why a pod answered a request by closing the connection.
#[derive(Debug, thiserror::Error)]
#[error("pod is shutting down")]
pub(crate) struct PodClosed;

/// What every connection of one pod shares.
pub(crate) struct Shared {
    name: String,
    address: SocketAddr,
    config: PodConfig,
    refusing: AtomicBool,
}

impl Shared {
    pub(crate) fn new(name: &str, address: SocketAddr, config: PodConfig) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            address,
            config,
            refusing: AtomicBool::new(false),
        })
    }

    pub(crate) fn config(&self) -> &PodConfig {
        &self.config
    }

    /// From now on, requests that have not started their response get the connection closed.
    pub(crate) fn refuse_new_responses(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }
}

/// A pod's open connections, each served by hyper and watched for graceful shutdown.
pub(crate) struct Connections {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    graceful: GracefulShutdown,
}

impl Connections {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            tasks: JoinSet::new(),
            graceful: GracefulShutdown::new(),
        }
    }

    /// Accepts and serves connections until `until` completes.
    pub(crate) async fn accept_until(&mut self, listener: &TcpListener, until: impl Future) {
        tokio::pin!(until);
        loop {
            tokio::select! {
                biased;
                _ = &mut until => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => self.serve(stream),
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                },
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
            }
        }
    }

    fn serve(&mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        if self.shared.config.termination == Termination::Crash {
            let _ = stream.set_zero_linger();
        }
        let shared = self.shared.clone();
        let service = service_fn(move |request| respond(shared.clone(), request));
        let connection = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let watched = self.graceful.watch(connection);
        self.tasks.spawn(async move {
            let _ = watched.await;
        });
    }

    /// Shuts every connection down gracefully, cutting what is left after `limit`.
    pub(crate) async fn drain(self, limit: Duration) {
        let Connections {
            tasks, graceful, ..
        } = self;
        let _ = tokio::time::timeout(limit, graceful.shutdown()).await;
        drop(tasks);
    }

    /// Aborts every connection at once.
    pub(crate) fn kill(mut self) {
        self.tasks.abort_all();
    }
}

/// Reads and discards the request body, waits the service time, and answers in two chunks.
async fn respond(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<PodBody>, PodClosed> {
    request.into_body().collect().await.map_err(|_| PodClosed)?;
    tokio::time::sleep(shared.config.service_time).await;
    if shared.refusing.load(Ordering::SeqCst) {
        return Err(PodClosed);
    }
    let first = Bytes::from(format!("{} ", shared.name));
    let second = Bytes::from(format!("at {}\n", shared.address));
    let length = first.len() + second.len();
    let body = two_chunks(first, second, shared.config.chunk_gap);
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, header::HeaderValue::from(length));
    Ok(response)
}

/// A body of `first`, then after `gap`, `second`.
fn two_chunks(first: Bytes, second: Bytes, gap: Duration) -> PodBody {
    let chunks = [(Duration::ZERO, first), (gap, second)];
    let frames = stream::iter(chunks).then(|(wait, chunk)| async move {
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(Frame::data(chunk))
    });
    StreamBody::new(frames.boxed())
}
