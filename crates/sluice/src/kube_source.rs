//! `serve --kubernetes`: the client, the watches, the loop that turns watch events into endpoint swaps or recompiles, and the status writer with leader election.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use sluice_config::{EndpointSources, ObjectKey};
use sluice_proxy::ShutdownSignal;
use sluice_sources::kubernetes::{
    desired_load_balancer, gateway_api_resources, middleware_resources, run_gateway_status_writer,
    run_status_writer, start_watches, ClusterState, Effect, GatewayStatusAddress,
    GatewayStatusSource, PublishTarget, ServedResource, StatusWork, WatchEvent,
};
use tokio::sync::{mpsc, watch};

use crate::control::{ControlPlane, Published};

/// `--kubernetes` and its flags.
#[derive(Debug, Clone)]
pub struct KubeConfig {
    pub kubeconfig: Option<PathBuf>,
    pub namespaces: Vec<String>,
    pub publish: Option<PublishTarget>,
    pub leader_election: Option<LeaderElection>,
}

/// `--leader-elect`: the Lease and this replica's identity.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease: String,
    pub namespace: String,
    pub identity: String,
    /// How long the Lease holds without renewal; the holder renews a third of it early.
    pub duration: Duration,
}

/// A client from `--kubeconfig`, else the in-cluster service account, else `KUBECONFIG`/~/.kube/config.
pub async fn client(config: &KubeConfig) -> anyhow::Result<Client> {
    let client_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer().await.context("no Kubernetes configuration: not in a cluster, and no usable KUBECONFIG or ~/.kube/config")?,
    };
    Client::try_from(client_config).context("cannot build the Kubernetes client")
}

/// The running Kubernetes source: its events and the tasks that feed them.
pub struct KubeSource {
    client: Client,
    config: KubeConfig,
    events: mpsc::UnboundedReceiver<WatchEvent>,
    state: ClusterState,
    /// The Gateway API kinds the API server serves (watched, and written status to).
    gateway_api: Vec<ServedResource>,
    /// The addresses Gateways publish in their status, from the publish target.
    gateway_addresses: watch::Sender<Vec<GatewayStatusAddress>>,
}

/// How long the start waits for the API server to answer Gateway API discovery.
const DISCOVERY_PATIENCE: Duration = Duration::from_secs(10);

impl KubeSource {
    /// Discovers which Gateway API kinds are served and starts every watch; the control
    /// plane reports their states from now on.
    pub async fn start(client: Client, config: KubeConfig, control: &ControlPlane) -> Self {
        let gateway_api = gateway_api_resources(&client, DISCOVERY_PATIENCE).await;
        let middlewares = middleware_resources(&client, DISCOVERY_PATIENCE).await;
        let (events, registry, _tasks) =
            start_watches(&client, &config.namespaces, (&gateway_api, &middlewares));
        let state = ClusterState::new(registry.scopes());
        control.set_watches(registry);
        Self {
            client,
            config,
            events,
            state,
            gateway_api,
            gateway_addresses: watch::Sender::new(Vec::new()),
        }
    }

    /// Applies watch events until shutdown. The first table is published once every watch has
    /// listed; after that an EndpointSlice event swaps the affected backends' endpoint cells,
    /// and any other change recompiles. Events already queued when a recompile starts are
    /// folded into it; nothing waits on a timer.
    pub async fn run(mut self, control: Arc<ControlPlane>, shutdown: ShutdownSignal) {
        let leader = leadership(self.client.clone(), self.config.leader_election.clone());
        let (work, status_writer) = self.status_channel(&leader);
        let gateway_writer = self.spawn_gateway_status_writer(&control, &leader);
        let (events, events_work) = watch::channel(Vec::new());
        let instance = self
            .config
            .leader_election
            .as_ref()
            .map_or_else(|| "sluice".to_owned(), |election| election.identity.clone());
        let event_writer = tokio::spawn(crate::events::run_event_writer(
            self.client.clone(),
            instance,
            events_work,
            leader,
        ));
        let mut published = Published::default();
        let stop = shutdown.wait();
        tokio::pin!(stop);
        loop {
            let event = tokio::select! {
                event = self.events.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
                () = &mut stop => break,
            };
            let received = event.received;
            let mut effect = self.state.apply(event);
            if effect.recompile {
                self.fold_queued(&mut effect);
            }
            if !self.state.synced() {
                continue;
            }
            let recompile = effect.recompile || !control.is_ready();
            if recompile {
                published = compute_in_place(|| {
                    control.publish_with(self.state.snapshot(), &self.state, Vec::new())
                });
            } else if !effect.services.is_empty() {
                let swapped = swap_endpoints(
                    &self.state,
                    &published.endpoint_sources,
                    &effect.services,
                    &control,
                );
                if swapped > 0 {
                    control.record_propagation(received, swapped);
                }
            }
            if recompile {
                let diagnostics = &control.status().diagnostics;
                events.send_replace(crate::events::pending(self.state.snapshot(), diagnostics));
            }
            if recompile || effect.ingress_status {
                self.queue_status_writes(&work, &published.served);
            }
            if recompile {
                self.publish_gateway_addresses();
            }
        }
        drop(work);
        drop(events);
        let _ = tokio::time::timeout(Duration::from_secs(2), event_writer).await;
        if let Some(writer) = status_writer {
            let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
        }
        gateway_writer.abort();
    }

    /// Starts the Gateway API status writer on the control plane's report.
    fn spawn_gateway_status_writer(
        &self,
        control: &Arc<ControlPlane>,
        leader: &watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let reader = control.clone();
        let source = GatewayStatusSource {
            report: Box::new(move || reader.gateway_report()),
            changes: control.gateway_changes(),
            addresses: self.gateway_addresses.subscribe(),
        };
        let controller = control.compile_options().gateway_controller;
        tokio::spawn(run_gateway_status_writer(
            self.client.clone(),
            self.gateway_api.clone(),
            self.config.namespaces.clone(),
            source,
            controller,
            leader.clone(),
        ))
    }

    /// The publish target's addresses, as Gateways show them in `status.addresses`.
    fn publish_gateway_addresses(&self) {
        let Some(target) = &self.config.publish else {
            return;
        };
        let Some(entries) = desired_load_balancer(target, self.state.snapshot()) else {
            return;
        };
        let addresses: Vec<GatewayStatusAddress> = entries
            .into_iter()
            .filter_map(|entry| match (entry.ip, entry.hostname) {
                (Some(ip), _) => Some(GatewayStatusAddress {
                    address_type: "IPAddress",
                    value: ip,
                }),
                (None, Some(hostname)) => Some(GatewayStatusAddress {
                    address_type: "Hostname",
                    value: hostname,
                }),
                (None, None) => None,
            })
            .collect();
        self.gateway_addresses.send_if_modified(|current| {
            let changed = *current != addresses;
            *current = addresses;
            changed
        });
    }

    fn fold_queued(&mut self, effect: &mut Effect) {
        while let Ok(next) = self.events.try_recv() {
            effect.merge(self.state.apply(next));
        }
    }

    fn queue_status_writes(&self, work: &watch::Sender<Option<StatusWork>>, served: &[ObjectKey]) {
        let Some(target) = &self.config.publish else {
            return;
        };
        let pending = StatusWork::pending(target, self.state.snapshot(), served);
        work.send_if_modified(|current| {
            let changed = *current != pending;
            *current = pending;
            changed
        });
    }

    /// The channel the status writer takes its work from, and the writer task (when
    /// `--publish-service` or `--publish-address` is set).
    fn status_channel(
        &self,
        leader: &watch::Receiver<bool>,
    ) -> (
        watch::Sender<Option<StatusWork>>,
        Option<tokio::task::JoinHandle<()>>,
    ) {
        let (work, work_receiver) = watch::channel(None);
        if self.config.publish.is_none() {
            return (work, None);
        }
        let writer = tokio::spawn(run_status_writer(
            self.client.clone(),
            work_receiver,
            leader.clone(),
        ));
        (work, Some(writer))
    }
}

/// Recomputes the endpoint sets of the backends fed by these Services and swaps the cells that
/// changed. Returns how many changed.
fn swap_endpoints(
    state: &ClusterState,
    sources: &EndpointSources,
    services: &std::collections::BTreeSet<ObjectKey>,
    control: &ControlPlane,
) -> usize {
    let mut swapped = 0;
    for service in services {
        for source in sources.of_service(service) {
            let endpoints = state.endpoints_of(service, source.port_name.as_deref());
            swapped += usize::from(control.update_endpoints(&source.backend, endpoints));
        }
    }
    swapped
}

/// Whether this replica may write status and Events: always without `--leader-elect`, else while it holds
/// the Lease. Keeps trying to join the election if the API is unreachable at first.
fn leadership(client: Client, election: Option<LeaderElection>) -> watch::Receiver<bool> {
    let Some(election) = election else {
        // Leadership never changes: the sender goes, the value stays.
        return watch::channel(true).1;
    };
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(500);
        loop {
            let manager = LeaseManagerBuilder::new(client.clone(), election.lease.clone())
                .with_namespace(election.namespace.clone())
                .with_identity(election.identity.clone())
                .with_duration(election.duration.as_secs())
                .with_grace((election.duration.as_secs() / 3).max(1))
                .build()
                .await;
            match manager {
                Ok(manager) => {
                    let (mut state, task) = manager.watch().await;
                    loop {
                        let leading = *state.borrow_and_update();
                        tracing::info!(leading, lease = %election.lease, "leader election");
                        sender.send_replace(leading);
                        if state.changed().await.is_err() {
                            break;
                        }
                    }
                    sender.send_replace(false);
                    let _ = task.await;
                }
                Err(error) => tracing::warn!(%error, "cannot join leader election; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    });
    receiver
}

/// Runs CPU-bound work (a compile) on this task. On a multi-threaded runtime the worker first
/// hands its other tasks to another worker, so requests keep flowing; a single-threaded runtime
/// has no other worker, and the work simply runs.
fn compute_in_place<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}
