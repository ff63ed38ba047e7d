//! `sluice serve`: bind the listeners, start the source (manifest directory or Kubernetes API), and run proxy, admin and source loop until shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_config::CompileOptions;
use sluice_proxy::{
    serve, AccessLog, AccessLogFormat, ListenerOptions, Proxy, ProxyOptions, ShutdownSignal,
    TlsTerminator,
};
use sluice_sources::kubernetes::{WatchId, WatchPhase, WatchRegistry};
use sluice_sources::{watch_dir, DirChanges, ManifestDir};
use tokio::net::TcpListener;

use crate::admin;
use crate::control::ControlPlane;
use crate::kube_source::{self, KubeConfig, KubeSource};
use crate::workers::{self, Plan, Workers};

/// Where the snapshot comes from.
#[derive(Debug, Clone)]
pub enum SourceConfig {
    /// `--manifests DIR`
    Manifests(PathBuf),
    /// `--kubernetes`
    Kubernetes(KubeConfig),
}

/// Everything `serve` needs, from the command line.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub source: SourceConfig,
    pub listen: SocketAddr,
    /// The TLS listener (`--listen-tls`); `None` when off.
    pub listen_tls: Option<SocketAddr>,
    pub admin: SocketAddr,
    pub compile: CompileOptions,
    pub proxy: ProxyOptions,
    /// The proxy listener's protocol options and client limits.
    pub listener: ListenerOptions,
    /// Metrics, access log and admin access.
    pub observe: ObserveConfig,
    /// On SIGTERM: how long to keep serving with /readyz failing.
    pub shutdown_delay: Duration,
    /// Then: how long requests in flight may finish.
    pub grace_period: Duration,
    /// `--udp-idle-timeout`: how long a Gateway UDP flow lives without a datagram.
    pub udp_idle_timeout: Duration,
    /// `--udp-max-flows`: how many flows one Gateway UDP listener keeps at once.
    pub udp_max_flows: usize,
    /// `--workers`: data-plane workers, each with its own sockets on `listen` and `listen_tls`.
    pub workers: usize,
}

/// What sluice lets operators see, and who may look.
#[derive(Debug, Clone, Default)]
pub struct ObserveConfig {
    /// `--metrics-per-endpoint`
    pub per_endpoint: bool,
    /// `--access-log`; `None` when off.
    pub access_log: Option<AccessLogConfig>,
    /// `--tracing-otlp-endpoint`, `--tracing-sample-ratio` and `--tracing-service-name`;
    /// `None` when no endpoint is given.
    pub tracing: Option<sluice_proxy::TracingOptions>,
    /// `--admin-token`
    pub admin_token: Option<String>,
    /// `--admin-insecure`: a non-loopback `--admin` without a token is allowed.
    pub admin_insecure: bool,
    /// `--metrics`: the listener of /metrics and the probes only.
    pub metrics: Option<SocketAddr>,
}

/// `--access-log`, `--access-log-file` (stdout when `None`) and `--access-log-buffer`.
#[derive(Debug, Clone)]
pub struct AccessLogConfig {
    pub format: AccessLogFormat,
    pub file: Option<PathBuf>,
    pub buffer: usize,
}

/// A started source, ready to loop.
enum Source {
    Manifests {
        source: ManifestDir,
        changes: DirChanges,
        watch: DirWatch,
    },
    Kubernetes(Box<KubeSource>),
}

/// A server whose listeners are bound and whose source has started, ready to run.
pub struct Server {
    config: ServeConfig,
    control: Arc<ControlPlane>,
    source: Source,
    /// One socket per data-plane worker on `--listen`, and on `--listen-tls` when it is on.
    proxy_listeners: Vec<TcpListener>,
    tls_listeners: Vec<TcpListener>,
    admin_listener: TcpListener,
    metrics_listener: Option<TcpListener>,
}

impl Server {
    /// Binds both listeners and starts the source: a manifest directory is read and its first
    /// table published; the Kubernetes watches start and publish once they have listed. Fails if
    /// an address is taken, the directory cannot be read, or the Kubernetes client cannot be
    /// configured.
    pub async fn bind(config: ServeConfig) -> anyhow::Result<Self> {
        let workers = config.workers.max(1);
        let proxy_listeners = workers::bind(config.listen, workers)
            .with_context(|| format!("cannot listen on {} (--listen)", config.listen))?;
        let tls_listeners = match config.listen_tls {
            Some(address) => workers::bind(address, workers)
                .with_context(|| format!("cannot listen on {address} (--listen-tls)"))?,
            None => Vec::new(),
        };
        check_admin_exposure(&config)?;
        let admin_listener = TcpListener::bind(config.admin)
            .await
            .with_context(|| format!("cannot listen on {} (--admin)", config.admin))?;
        let metrics_listener = match config.observe.metrics {
            Some(address) => Some(
                TcpListener::bind(address)
                    .await
                    .with_context(|| format!("cannot listen on {address} (--metrics)"))?,
            ),
            None => None,
        };
        let control = ControlPlane::new(config.compile.clone());
        let source = match &config.source {
            SourceConfig::Manifests(dir) => {
                let changes = watch_dir(dir)?;
                let watch = DirWatch::new(&control);
                let mut source = ManifestDir::new(dir);
                control.apply(source.load()?);
                watch.loaded();
                Source::Manifests {
                    source,
                    changes,
                    watch,
                }
            }
            SourceConfig::Kubernetes(kube) => {
                let client = kube_source::client(kube).await?;
                Source::Kubernetes(Box::new(
                    KubeSource::start(client, kube.clone(), &control).await,
                ))
            }
        };
        Ok(Self {
            config,
            control,
            source,
            proxy_listeners,
            tls_listeners,
            admin_listener,
            metrics_listener,
        })
    }

    /// Serves until `shutdown` fires, then drains requests in flight.
    pub async fn run(self, shutdown: ShutdownSignal) -> anyhow::Result<()> {
        let Self {
            config,
            control,
            source,
            proxy_listeners,
            tls_listeners,
            admin_listener,
            metrics_listener,
        } = self;
        tracing::info!(listen = %config.listen, listen_tls = ?config.listen_tls, admin = %config.admin, workers = proxy_listeners.len(), "sluice is serving");
        let metrics = control.metrics();
        metrics.export_per_endpoint(config.observe.per_endpoint);
        let mut proxy = Proxy::new(control.table().clone(), &config.proxy);
        if let Some(access_log) = &config.observe.access_log {
            proxy = proxy.with_access_log(start_access_log(access_log, metrics)?);
        }
        if let Some(options) = &config.observe.tracing {
            let (tracing, exporting) =
                sluice_proxy::Tracing::start(options, metrics.tracing_spans_dropped.clone())?;
            tokio::spawn(exporting);
            tracing::info!(endpoint = %options.endpoint, sample_ratio = options.sample_ratio, "tracing: spans go to the collector over OTLP/HTTP");
            proxy = proxy.with_tracing(tracing);
        }
        let proxy = Arc::new(proxy);
        proxy.watch_shutdown(shutdown.clone(), config.grace_period);
        // One handler for every proxy listener (a closure holding the proxy is Clone).
        let handler_proxy = proxy.clone();
        let proxy_handler = move |request, client| {
            let proxy = handler_proxy.clone();
            async move { proxy.handle(request, client).await }
        };
        let terminator = match tls_listeners.is_empty() {
            true => None,
            false => Some(Arc::new(tls_terminator(&control, &config)?)),
        };
        let mut workers = Workers::start(
            proxy_listeners,
            tls_listeners,
            Plan {
                handler: proxy_handler.clone(),
                shutdown: shutdown.clone(),
                http: ListenerOptions {
                    metrics: metrics.connections.listener("http"),
                    ..config.listener.clone()
                },
                https: ListenerOptions {
                    metrics: metrics.connections.listener("https"),
                    ..config.listener.clone()
                },
                terminator,
            },
        )?;
        let gateway_task = tokio::spawn(crate::gateway_listeners::run(
            control.clone(),
            proxy_handler.clone(),
            (
                ListenerOptions {
                    metrics: metrics.connections.listener("gateway"),
                    ..config.listener.clone()
                },
                crate::gateway_listeners::StreamSettings {
                    connect: config.proxy.connect_timeout,
                    udp_idle: config.udp_idle_timeout,
                    udp_max_flows: config.udp_max_flows,
                    metrics: metrics.streams.clone(),
                },
            ),
            shutdown.clone(),
        ));
        let admin = Arc::new(admin::Admin::new(
            control.clone(),
            config.observe.admin_token.clone(),
        ));
        let admin_handler = move |request, _client| admin.clone().handle(request);
        let metrics_task = metrics_listener.map(|listener| {
            let metrics = Arc::new(admin::Admin::metrics_only(control.clone()));
            let handler = move |request, _client| metrics.clone().handle(request);
            let options = ListenerOptions {
                grace_period: config.grace_period,
                ..ListenerOptions::default()
            };
            tokio::spawn(serve(listener, handler, shutdown.clone(), options))
        });
        let admin_options = ListenerOptions {
            grace_period: config.grace_period,
            ..ListenerOptions::default()
        };
        let admin_task = tokio::spawn(serve(
            admin_listener,
            admin_handler,
            shutdown.clone(),
            admin_options,
        ));
        tokio::spawn(mark_draining(shutdown.clone(), control.clone()));
        match source {
            Source::Manifests {
                source,
                changes,
                watch,
            } => reload_until_shutdown(source, changes, watch, &control, shutdown).await,
            Source::Kubernetes(source) => source.run(control.clone(), shutdown).await,
        }
        workers.drained().await?;
        gateway_task.await.context("Gateway listener task failed")?;
        // WebSocket tunnels end by the end of the grace period (counted from the listeners
        // stopping, which has passed): wait for them, with a margin for their close.
        let tunnels = proxy.tunnels_closed();
        if tokio::time::timeout(config.grace_period + TUNNEL_CLOSE_MARGIN, tunnels)
            .await
            .is_err()
        {
            tracing::warn!("upgraded connections still open after the grace period");
        }
        admin_task.await.context("admin listener task failed")?;
        if let Some(task) = metrics_task {
            task.await.context("metrics listener task failed")?;
        }
        tracing::info!("sluice stopped");
        Ok(())
    }
}

/// Refuses an admin listener that anyone on the network could use: a non-loopback `--admin`
/// needs `--admin-token`, unless the operator says `--admin-insecure`.
fn check_admin_exposure(config: &ServeConfig) -> anyhow::Result<()> {
    let observe = &config.observe;
    if config.admin.ip().is_loopback() || observe.admin_token.is_some() || observe.admin_insecure {
        return Ok(());
    }
    anyhow::bail!(
        "--admin {} is not a loopback address and no --admin-token is set: anyone who can reach it could read every host, backend and pod address (/api/routes) and change the log level (PUT /log-level). Keep --admin on 127.0.0.1 and reach it with kubectl port-forward, serve probes and Prometheus from --metrics, set --admin-token, or pass --admin-insecure",
        config.admin
    )
}

/// The TLS listener's handshakes, with a self-signed certificate generated for handshakes
/// that no Secret serves.
fn tls_terminator(control: &ControlPlane, config: &ServeConfig) -> anyhow::Result<TlsTerminator> {
    let terminator = TlsTerminator::new(control.table().clone(), config.proxy.connect_timeout)
        .context("cannot set up the TLS listener")?;
    match &config.compile.default_certificate {
        Some(secret) => tracing::info!(secret = %format!("{}/{}", secret.namespace, secret.name), "default certificate from --default-certificate (a self-signed one is generated as its stand-in while the Secret cannot serve)"),
        None => tracing::info!("no --default-certificate: handshakes that name no TLS host get a self-signed certificate generated at start"),
    }
    Ok(terminator)
}

/// Starts the access log's writer, to `file` (appended) or stdout.
fn start_access_log(
    config: &AccessLogConfig,
    metrics: &crate::metrics::Metrics,
) -> anyhow::Result<Arc<AccessLog>> {
    let output: Box<dyn std::io::Write + Send> = match &config.file {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {} (--access-log-file)", path.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    AccessLog::start(
        config.format,
        output,
        config.buffer,
        metrics.access_log_dropped.clone(),
    )
    .context("cannot start the access log writer")
}

/// Runs `sluice serve` to completion.
pub async fn run(config: ServeConfig, shutdown: ShutdownSignal) -> anyhow::Result<()> {
    Server::bind(config).await?.run(shutdown).await
}

/// Reloads the manifests on every change. A directory that cannot be read (say, while the
/// process is out of file descriptors) keeps the last good table serving, and the reload is
/// tried again a second later.
async fn reload_until_shutdown(
    mut source: ManifestDir,
    mut changes: DirChanges,
    watch: DirWatch,
    control: &ControlPlane,
    shutdown: ShutdownSignal,
) {
    let stop = shutdown.wait();
    tokio::pin!(stop);
    let mut retry_pending = false;
    loop {
        let retry = async {
            match retry_pending {
                true => tokio::time::sleep(RELOAD_RETRY).await,
                false => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed() => {
                if !changed {
                    tracing::warn!(dir = %source.dir().display(), "manifest watcher stopped; serving the last good table without reloads");
                    watch.failed("the directory watch stopped; no more reloads".to_owned());
                    stop.await;
                    return;
                }
            }
            () = retry => {}
            () = &mut stop => return,
        }
        retry_pending = match source.load() {
            Ok(load) => {
                control.apply(load);
                watch.loaded();
                false
            }
            Err(error) => {
                let error = format!("{error:#}");
                tracing::error!(%error, retry_in = ?RELOAD_RETRY, "reload failed; the last good table keeps serving");
                watch.failed(error);
                true
            }
        };
    }
}

/// The manifest directory's watch, reported as one watch of kind `manifests` (in
/// `/api/status` and as `sluice_watch_up{kind="manifests"}`): synced while the directory reads,
/// retrying while it cannot be read or once its watcher has stopped.
struct DirWatch {
    registry: Arc<WatchRegistry>,
    id: WatchId,
}

impl DirWatch {
    fn new(control: &ControlPlane) -> Self {
        let registry = Arc::new(WatchRegistry::default());
        let id = registry.register("manifests", None);
        control.set_watches(registry.clone());
        Self { registry, id }
    }

    fn loaded(&self) {
        self.registry.enter(self.id, WatchPhase::Synced, None);
    }

    fn failed(&self, error: String) {
        self.registry
            .enter(self.id, WatchPhase::Retrying, Some(error));
    }
}

/// How long upgraded connections may take to close after their grace period.
const TUNNEL_CLOSE_MARGIN: Duration = Duration::from_secs(1);

/// How soon a reload that failed is tried again.
const RELOAD_RETRY: Duration = Duration::from_secs(1);

/// A listening socket with room for a burst of new connections: a backlog of 1,024 (the
/// standard library's is 128; nginx's 511), and the address reusable at once after a restart.
/// With `reuse_port`, other sockets with it may bind the same address (one per `--workers`).
pub(crate) fn bind_listener(
    address: std::net::SocketAddr,
    reuse_port: bool,
) -> std::io::Result<TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(address)?;
    socket.listen(1024)
}

/// Fails readiness once the shutdown starts draining.
async fn mark_draining(shutdown: ShutdownSignal, control: Arc<ControlPlane>) {
    shutdown.draining().await;
    control.set_draining();
}

/// A shutdown signal driven by Ctrl-C or SIGTERM: the first starts draining (readiness fails,
/// serving goes on) for `delay`, then stops; a second signal stops at once.
pub fn shutdown_on_signal(delay: Duration) -> ShutdownSignal {
    let (trigger, signal) = ShutdownSignal::new();
    tokio::spawn(async move {
        wait_for_signal().await;
        trigger.drain();
        tracing::info!(
            ?delay,
            "shutting down: /readyz answers 503 while serving goes on"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = wait_for_signal() => tracing::info!("second signal: stopping now"),
        }
        tracing::info!(
            "stopped accepting; closing idle connections and finishing requests in flight"
        );
        trigger.stop();
    });
    signal
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
