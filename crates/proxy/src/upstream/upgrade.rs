//! Protocol upgrades (WebSocket over HTTP/1.1): the Upgrade request goes to the pod as it came, and after a 101 both connections are joined byte for byte until either side closes, the tunnel idles out, or shutdown's grace period ends.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONNECTION, UPGRADE};
use http::{HeaderMap, HeaderValue, Request, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::shutdown::ShutdownSignal;
use crate::switch::PendingSwitch;
use crate::upstream::health::InFlight;
use crate::upstream::http1::Http1Connection;

/// The protocol an HTTP/1.1 request asks to switch to (`Connection: upgrade` with `Upgrade`),
/// if it asks for WebSocket. Any other protocol is not passed on: `Upgrade: h2c` to a pod
/// would open a tunnel of requests the proxy never sees (h2c smuggling), as Envoy also refuses
/// by default.
pub(crate) fn requested_upgrade<B>(request: &Request<B>) -> Option<HeaderValue> {
    if request.version() != Version::HTTP_11 {
        return None;
    }
    let headers = request.headers();
    let asks = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    let protocol = headers.get(UPGRADE)?;
    let websocket = protocol.as_bytes().eq_ignore_ascii_case(b"websocket");
    (asks && websocket).then(|| protocol.clone())
}

/// Puts the upgrade headers back after the hop-by-hop headers were stripped.
pub(crate) fn restore_upgrade_headers(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, protocol);
}

/// When upgraded connections end on shutdown: after the grace period from the moment the
/// listeners stop.
#[derive(Clone)]
pub(crate) struct TunnelShutdown {
    pub(crate) signal: ShutdownSignal,
    pub(crate) grace_period: Duration,
}

/// Counts open tunnels, so that the process waits for them on shutdown.
#[derive(Default)]
pub(crate) struct OpenTunnels {
    open: std::sync::atomic::AtomicUsize,
    closed: tokio::sync::Notify,
}

impl OpenTunnels {
    /// Counts a tunnel as open until the guard drops.
    pub(crate) fn open(self: &Arc<Self>) -> TunnelGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        TunnelGuard(self.clone())
    }

    /// Resolves once no tunnel is open.
    pub(crate) async fn all_closed(&self) {
        loop {
            let notified = self.closed.notified();
            if self.open.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One open tunnel.
pub(crate) struct TunnelGuard(Arc<OpenTunnels>);

impl Drop for TunnelGuard {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.closed.notify_waiters();
        }
    }
}

/// A client's request to switch protocols (a WebSocket upgrade), taken from its request
/// before the head goes upstream.
pub(crate) struct ClientUpgrade {
    protocol: HeaderValue,
    switch: PendingSwitch,
}

impl ClientUpgrade {
    /// The upgrade `request` asks for, when it asks for one the proxy passes on (and its
    /// connection can switch).
    pub(crate) fn take<B>(request: &mut Request<B>) -> Option<Self> {
        let protocol = requested_upgrade(request)?;
        let switch = request.extensions_mut().remove::<PendingSwitch>()?;
        Some(Self { protocol, switch })
    }

    /// Puts the upgrade back on the head that goes upstream (this hop's headers were removed).
    pub(crate) fn restore(&self, headers: &mut HeaderMap) {
        restore_upgrade_headers(headers, self.protocol.clone());
    }
}

/// The process's upgraded connections: how long they may idle, when they end on shutdown,
/// and how many are open.
#[derive(Default)]
pub(crate) struct Tunnels {
    idle_timeout: Duration,
    /// When tunnels must end on shutdown (set once).
    shutdown: std::sync::OnceLock<TunnelShutdown>,
    open: Arc<OpenTunnels>,
}

impl Tunnels {
    pub(crate) fn new(idle_timeout: Duration) -> Self {
        Self {
            idle_timeout,
            ..Self::default()
        }
    }

    /// Tunnels get `grace_period` once `signal` stops the listeners. Set once.
    pub(crate) fn watch_shutdown(&self, signal: ShutdownSignal, grace_period: Duration) {
        let _ = self.shutdown.set(TunnelShutdown {
            signal,
            grace_period,
        });
    }

    /// Resolves once every tunnel has ended.
    pub(crate) async fn all_closed(&self) {
        self.open.all_closed().await;
    }

    /// Joins the client's connection and the endpoint's, once both have switched protocols,
    /// keeping the endpoint's load until the tunnel ends.
    pub(crate) fn open(
        &self,
        client: ClientUpgrade,
        endpoint: Http1Connection,
        in_flight: InFlight,
    ) {
        tokio::spawn(tunnel(
            client.switch,
            endpoint,
            in_flight,
            self.idle_timeout,
            self.shutdown.get().cloned(),
            self.open.open(),
        ));
    }
}

/// Joins the client's upgraded connection, once it has switched, to the endpoint's, keeping
/// the endpoint's in-flight count until the tunnel ends.
pub(crate) async fn tunnel(
    client: PendingSwitch,
    endpoint: Http1Connection,
    in_flight: InFlight,
    idle_timeout: Duration,
    shutdown: Option<TunnelShutdown>,
    guard: TunnelGuard,
) {
    let client = match client.switched().await {
        Ok(client) => client,
        Err(error) => {
            tracing::debug!(%error, "an upgrade did not complete");
            return;
        }
    };
    let activity = Arc::new(Activity::new());
    let mut client = Tracked::new(client, activity.clone());
    let mut endpoint = Tracked::new(endpoint, activity.clone());
    let copy = tokio::io::copy_bidirectional(&mut client, &mut endpoint);
    tokio::pin!(copy);
    let stopping = async {
        match &shutdown {
            Some(shutdown) => {
                shutdown.signal.clone().wait().await;
                tokio::time::sleep(shutdown.grace_period).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stopping);
    loop {
        let idle_until = activity.last() + idle_timeout;
        tokio::select! {
            result = &mut copy => {
                if let Err(error) = result {
                    tracing::debug!(%error, "an upgraded connection ended with an error");
                }
                break;
            }
            () = &mut stopping => {
                tracing::debug!("closed an upgraded connection at the end of the grace period");
                break;
            }
            () = tokio::time::sleep_until(idle_until) => {
                if activity.last() + idle_timeout <= Instant::now() {
                    tracing::debug!(?idle_timeout, "closed an idle upgraded connection");
                    break;
                }
            }
        }
    }
    drop(in_flight);
    drop(guard);
}

/// When bytes last moved either way.
struct Activity {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(elapsed, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A stream that notes each read that brought bytes.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Tracked<T> {
    fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(connection: &str, upgrade: &str) -> Request<()> {
        Request::builder()
            .header(CONNECTION, connection)
            .header(UPGRADE, upgrade)
            .body(())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_websocket_upgrades_are_passed_on() {
        assert!(requested_upgrade(&request("Upgrade", "websocket")).is_some());
        assert!(requested_upgrade(&request("keep-alive, upgrade", "WebSocket")).is_some());
        assert!(
            requested_upgrade(&request("upgrade", "h2c")).is_none(),
            "h2c smuggling"
        );
        assert!(requested_upgrade(&request("keep-alive", "websocket")).is_none());
    }
}
