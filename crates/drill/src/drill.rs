//! The drill from start to report, and the re-exec into a network namespace that nftables needs.

use std::future::Future;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::cluster_ip::{ClusterIp, ClusterIpKind};
use crate::error::DrillError;
use crate::lag::LagQueue;
use crate::load::Load;
use crate::netns::{inside_drill_netns, nftables_unavailable, Netns};
use crate::options::{ClusterIpChoice, DrillOptions, Mode};
use crate::pods::{Pod, PodConfig};
use crate::rollout::{Cluster, Rollout};
use crate::{Environment, PodEndpoint, ProxyUnderTest, Report};

/// Load before the first rollout.
const STEADY_STATE: Duration = Duration::from_secs(1);
/// Load after the last endpoint change reached the proxy.
const SETTLE: Duration = Duration::from_millis(500);
/// A graceful pod serves on this long past the endpoint lag before it drains.
const PRESTOP_MARGIN: Duration = Duration::from_secs(1);

/// Runs the whole drill. `start_proxy` is called once, after the pods and the ClusterIP
/// emulation are up.
pub async fn run<P, F, Fut>(options: &DrillOptions, start_proxy: F) -> anyhow::Result<Report>
where
    F: FnOnce(Environment) -> Fut,
    Fut: Future<Output = anyhow::Result<P>>,
    P: ProxyUnderTest,
{
    let pod_config = PodConfig::new(options.termination, options.endpoint_lag + PRESTOP_MARGIN);
    let kind = ClusterIpKind::for_options(options);
    let stage = Stage::set_up(options.pods, &pod_config, kind).await?;
    let proxy = Arc::new(start_proxy(stage.environment(options.mode)).await?);
    let queue = LagQueue::spawn(options.endpoint_lag, feed(proxy.clone(), stage.cluster_ip));
    let cluster = Arc::new(Cluster::new(stage.initial, queue));
    let load = Load::start(proxy.address(), options.rps, options.method)?;
    tokio::time::sleep(STEADY_STATE).await;
    let rollout = Rollout {
        cluster: cluster.clone(),
        pod_config,
        ready_delay: options.ready_delay,
    };
    let _last_pods = roll(&rollout, stage.pods, options.rollouts).await?;
    tokio::time::sleep_until(cluster.last_due() + SETTLE).await;
    let outcome = load.finish().await;
    Ok(Report::new(&outcome, options, kind))
}

/// What stands before the proxy starts: the initial pods, all ready, and the ClusterIP.
struct Stage {
    pods: Vec<Pod>,
    initial: Vec<PodEndpoint>,
    cluster_ip: Option<Arc<ClusterIp>>,
}

impl Stage {
    async fn set_up(
        count: u32,
        config: &PodConfig,
        kind: Option<ClusterIpKind>,
    ) -> Result<Stage, DrillError> {
        let mut pods = Vec::new();
        for _ in 0..count {
            pods.push(Pod::start_next(config.clone()).await?);
        }
        let initial: Vec<PodEndpoint> = pods
            .iter()
            .map(|pod| PodEndpoint::ready(pod.address()))
            .collect();
        let cluster_ip = match kind {
            Some(kind) => Some(Arc::new(ClusterIp::start(kind, &initial).await?)),
            None => None,
        };
        Ok(Stage {
            pods,
            initial,
            cluster_ip,
        })
    }

    fn environment(&self, mode: Mode) -> Environment {
        Environment {
            mode,
            cluster_ip: self
                .cluster_ip
                .as_ref()
                .map(|cluster_ip| cluster_ip.address()),
            initial_endpoints: self.initial.clone(),
        }
    }
}

/// Where published endpoint lists go: the ClusterIP emulation, then the proxy.
fn feed<P: ProxyUnderTest>(
    proxy: Arc<P>,
    cluster_ip: Option<Arc<ClusterIp>>,
) -> impl FnMut(&[PodEndpoint]) + Send + 'static {
    move |endpoints| {
        if let Some(cluster_ip) = &cluster_ip {
            cluster_ip.update(endpoints);
        }
        proxy.publish_endpoints(endpoints);
    }
}

/// Runs `rollouts` rolling updates and waits until every old pod is gone from the true state.
async fn roll(
    rollout: &Rollout,
    mut pods: Vec<Pod>,
    rollouts: u32,
) -> Result<Vec<Pod>, DrillError> {
    let mut removals = JoinSet::new();
    for _ in 0..rollouts {
        pods = rollout.roll(pods, &mut removals).await?;
    }
    while removals.join_next().await.is_some() {}
    Ok(pods)
}

/// Re-runs this program inside a fresh network namespace when the drill should use nftables.
///
/// Returns the child's exit status (the caller should exit with it), or `None` when the drill
/// runs in this process: already inside the namespace, endpoints mode, `--cluster-ip
/// userspace`, or `auto` without root, `ip` or `nft`. `--cluster-ip nftables` without them is
/// an error. The child inherits stdin, stdout and stderr; the namespace is deleted afterwards.
pub fn reexec_in_netns_if_needed(options: &DrillOptions) -> anyhow::Result<Option<ExitStatus>> {
    if inside_drill_netns() || options.mode == Mode::Endpoints {
        return Ok(None);
    }
    let unavailable = nftables_unavailable();
    match (options.cluster_ip, unavailable) {
        (ClusterIpChoice::Userspace, _) | (ClusterIpChoice::Auto, Some(_)) => Ok(None),
        (ClusterIpChoice::Nftables, Some(why)) => Err(DrillError::NftablesUnavailable(why).into()),
        (ClusterIpChoice::Nftables | ClusterIpChoice::Auto, None) => {
            let program = std::env::current_exe()?;
            let netns = Netns::create()?;
            let status = netns.run(&program, std::env::args_os().skip(1))?;
            Ok(Some(status))
        }
    }
}
