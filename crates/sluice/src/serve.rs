//! `sluice serve`: bind the listeners, start the source (manifest directory or Kubernetes API), and run proxy, admin and source loop until shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_config::CompileOptions;
use sluice_proxy::{serve, Proxy, ShutdownSignal, UpstreamOptions};
use sluice_sources::{watch_dir, DirChanges, ManifestDir};
use tokio::net::TcpListener;

use crate::admin;
use crate::control::ControlPlane;
use crate::kube_source::{self, KubeConfig, KubeSource};
use crate::metrics::Metrics;

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
    pub admin: SocketAddr,
    pub compile: CompileOptions,
    pub upstream: UpstreamOptions,
    pub drain_timeout: Duration,
}

/// A started source, ready to loop.
enum Source {
    Manifests {
        source: ManifestDir,
        changes: DirChanges,
    },
    Kubernetes(Box<KubeSource>),
}

/// A server whose listeners are bound and whose source has started, ready to run.
pub struct Server {
    config: ServeConfig,
    control: Arc<ControlPlane>,
    source: Source,
    proxy_listener: TcpListener,
    admin_listener: TcpListener,
}

impl Server {
    /// Binds both listeners and starts the source: a manifest directory is read and its first
    /// table published; the Kubernetes watches start and publish once they have listed. Fails if
    /// an address is taken, the directory cannot be read, or the Kubernetes client cannot be
    /// configured.
    pub async fn bind(config: ServeConfig) -> anyhow::Result<Self> {
        let proxy_listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {} (--listen)", config.listen))?;
        let admin_listener = TcpListener::bind(config.admin)
            .await
            .with_context(|| format!("cannot listen on {} (--admin)", config.admin))?;
        let control = ControlPlane::new(config.compile.clone(), Arc::new(Metrics::new()));
        let source = match &config.source {
            SourceConfig::Manifests(dir) => {
                let changes = watch_dir(dir)?;
                let mut source = ManifestDir::new(dir);
                control.apply(source.load()?);
                Source::Manifests { source, changes }
            }
            SourceConfig::Kubernetes(kube) => {
                let client = kube_source::client(kube).await?;
                Source::Kubernetes(Box::new(KubeSource::start(client, kube.clone(), &control)))
            }
        };
        Ok(Self {
            config,
            control,
            source,
            proxy_listener,
            admin_listener,
        })
    }

    /// Serves until `shutdown` fires, then drains requests in flight.
    pub async fn run(self, shutdown: ShutdownSignal) -> anyhow::Result<()> {
        let Self {
            config,
            control,
            source,
            proxy_listener,
            admin_listener,
        } = self;
        tracing::info!(listen = %config.listen, admin = %config.admin, "sluice is serving");
        let proxy = Arc::new(Proxy::new(control.table().clone(), &config.upstream));
        let proxy_handler = move |request, client| {
            let proxy = proxy.clone();
            async move { proxy.handle(request, client).await }
        };
        let admin_control = control.clone();
        let admin_handler = move |request, _client| admin::handle(admin_control.clone(), request);
        let proxy_task = tokio::spawn(serve(
            proxy_listener,
            proxy_handler,
            shutdown.clone(),
            config.drain_timeout,
        ));
        let admin_task = tokio::spawn(serve(
            admin_listener,
            admin_handler,
            shutdown.clone(),
            config.drain_timeout,
        ));
        match source {
            Source::Manifests { source, changes } => {
                reload_until_shutdown(source, changes, &control, shutdown).await
            }
            Source::Kubernetes(source) => source.run(control.clone(), shutdown).await,
        }
        proxy_task.await.context("proxy listener task failed")?;
        admin_task.await.context("admin listener task failed")?;
        tracing::info!("sluice stopped");
        Ok(())
    }
}

/// Runs `sluice serve` to completion.
pub async fn run(config: ServeConfig, shutdown: ShutdownSignal) -> anyhow::Result<()> {
    Server::bind(config).await?.run(shutdown).await
}

/// Reloads the manifests on every change. A directory that cannot be read keeps the last
/// good table serving.
async fn reload_until_shutdown(
    mut source: ManifestDir,
    mut changes: DirChanges,
    control: &ControlPlane,
    shutdown: ShutdownSignal,
) {
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if !changed {
                    tracing::warn!(dir = %source.dir().display(), "manifest watcher stopped; serving the last good table without reloads");
                    stop.await;
                    return;
                }
                match source.load() {
                    Ok(load) => control.apply(load),
                    Err(error) => tracing::error!(error = %format!("{error:#}"), "reload failed; the last good table keeps serving"),
                }
            }
            () = &mut stop => return,
        }
    }
}

/// A shutdown signal that fires on Ctrl-C or SIGTERM.
pub fn shutdown_on_signal() -> ShutdownSignal {
    let (sender, signal) = ShutdownSignal::new();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: draining requests in flight");
        let _ = sender.send(true);
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
