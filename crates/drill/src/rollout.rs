//! The Deployment's rolling update (maxSurge 1, maxUnavailable 0) and the true endpoint state it changes.
//!
//! For each old pod: start a new pod (not ready), mark it ready after the ready delay, and at
//! that instant SIGTERM one old pod and mark it terminating. The old pod's endpoint is removed
//! once it has exited plus a short kubelet delay, while the rollout goes on. Every change of the
//! true state is submitted to the [`LagQueue`] as a full snapshot, so consumers see it later.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::DrillError;
use crate::lag::LagQueue;
use crate::options::Termination;
use crate::pods::{Pod, PodConfig, PodPhase};
use crate::PodEndpoint;

/// Between a pod's exit and its endpoint's removal (kubelet status update, endpoint controller).
pub const KUBELET_DELAY: Duration = Duration::from_millis(100);

/// The Service's endpoints as the cluster knows them this instant.
struct Truth {
    endpoints: Vec<PodEndpoint>,
    last_due: Instant,
}

/// The true endpoint state and the lagged feed of its changes.
pub struct Cluster {
    truth: Mutex<Truth>,
    queue: LagQueue,
}

impl Cluster {
    /// Starts from `endpoints`, which consumers already have.
    pub fn new(endpoints: Vec<PodEndpoint>, queue: LagQueue) -> Self {
        let last_due = Instant::now();
        let truth = Mutex::new(Truth {
            endpoints,
            last_due,
        });
        Self { truth, queue }
    }

    /// Applies `change` to the true state and queues the result for publishing.
    pub fn change(&self, change: impl FnOnce(&mut Vec<PodEndpoint>)) {
        let mut truth = self.truth.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut truth.endpoints);
        truth.last_due = self.queue.submit(truth.endpoints.clone());
    }

    /// When the latest change reaches the consumers.
    pub fn last_due(&self) -> Instant {
        self.truth
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_due
    }

    /// The true endpoints now.
    pub fn endpoints(&self) -> Vec<PodEndpoint> {
        let truth = self.truth.lock().unwrap_or_else(PoisonError::into_inner);
        truth.endpoints.clone()
    }
}

/// One Deployment's rolling updates.
pub struct Rollout {
    /// The true state the rollout changes.
    pub cluster: Arc<Cluster>,
    /// How new pods serve and terminate.
    pub pod_config: PodConfig,
    /// How long a new pod takes to become ready.
    pub ready_delay: Duration,
}

impl Rollout {
    /// Replaces every pod of `pods` one by one and returns the new ones. Old pods finish
    /// terminating in `removals`, which removes their endpoints.
    pub async fn roll(
        &self,
        pods: Vec<Pod>,
        removals: &mut JoinSet<()>,
    ) -> Result<Vec<Pod>, DrillError> {
        let mut replaced = Vec::with_capacity(pods.len());
        for old in pods {
            let new = self.surge().await?;
            self.terminate(old, removals);
            replaced.push(new);
        }
        Ok(replaced)
    }

    /// Starts a new pod and waits until it is ready.
    async fn surge(&self) -> Result<Pod, DrillError> {
        let pod = Pod::start_next(self.pod_config.clone()).await?;
        let address = pod.address();
        self.cluster
            .change(|endpoints| endpoints.push(PodEndpoint::starting(address)));
        tokio::time::sleep(self.ready_delay).await;
        self.cluster
            .change(|endpoints| replace(endpoints, PodEndpoint::ready(address)));
        Ok(pod)
    }

    /// SIGTERMs `pod` and marks it terminating in the same instant; removal follows its exit.
    fn terminate(&self, pod: Pod, removals: &mut JoinSet<()>) {
        let serving = self.pod_config.termination == Termination::Graceful;
        let terminating = PodEndpoint::terminating(pod.address(), serving);
        self.cluster
            .change(|endpoints| replace(endpoints, terminating));
        pod.terminate();
        removals.spawn(remove_when_exited(pod, self.cluster.clone()));
    }
}

async fn remove_when_exited(pod: Pod, cluster: Arc<Cluster>) {
    pod.reached(PodPhase::Exited).await;
    tokio::time::sleep(KUBELET_DELAY).await;
    let gone: SocketAddr = pod.address();
    cluster.change(|endpoints| endpoints.retain(|endpoint| endpoint.address != gone));
}

fn replace(endpoints: &mut [PodEndpoint], new: PodEndpoint) {
    if let Some(slot) = endpoints.iter_mut().find(|old| old.address == new.address) {
        *slot = new;
    }
}
