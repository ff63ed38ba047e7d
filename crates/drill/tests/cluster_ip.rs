//! Both ClusterIP emulations spread new connections over the published ready pods and follow the lagged endpoint feed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use sluice_drill::cluster_ip::{ClusterIp, ClusterIpKind};
use sluice_drill::lag::LagQueue;
use sluice_drill::pods::{Pod, PodConfig};
use sluice_drill::{PodEndpoint, Termination};
use support::{get_once, in_drill_netns, is_refused, runtime};
use tokio::net::TcpStream;
use tokio::time::{sleep, Instant};

async fn three_pods() -> Vec<Pod> {
    let mut pods = Vec::new();
    for _ in 0..3 {
        let config = PodConfig::new(Termination::Graceful, Duration::from_secs(1));
        pods.push(Pod::start_next(config).await.unwrap());
    }
    pods
}

fn ready(pods: &[Pod]) -> Vec<PodEndpoint> {
    pods.iter()
        .map(|pod| PodEndpoint::ready(pod.address()))
        .collect()
}

/// Which pod answered each of `count` fresh connections to `address`.
async fn spread(address: SocketAddr, count: usize) -> BTreeMap<String, usize> {
    let mut answers = BTreeMap::new();
    for _ in 0..count {
        let body = get_once(address).await;
        let pod = body.split_whitespace().next().unwrap().to_owned();
        *answers.entry(pod).or_default() += 1;
    }
    answers
}

/// Connections reach every pod, then, once a removal is delivered, never the removed pod.
async fn follows_the_feed(kind: ClusterIpKind) {
    let pods = three_pods().await;
    let cluster_ip = std::sync::Arc::new(ClusterIp::start(kind, &ready(&pods)).await.unwrap());
    assert_eq!(cluster_ip.kind(), kind);
    let address = cluster_ip.address();

    let before = spread(address, 60).await;
    assert_eq!(before.len(), 3, "every pod gets connections: {before:?}");
    assert!(
        before.values().all(|count| *count >= 5),
        "spread: {before:?}"
    );

    let lag = Duration::from_secs(1);
    let feed = cluster_ip.clone();
    let queue = LagQueue::spawn(lag, move |endpoints| feed.update(endpoints));
    let due = queue.submit(ready(&pods[..2]));
    let during_lag = spread(address, 30).await;
    assert!(
        Instant::now() < due,
        "the check ran too slowly to mean anything"
    );
    assert!(
        during_lag.contains_key(pods[2].name()),
        "removed too early: {during_lag:?}"
    );

    tokio::time::sleep_until(due + Duration::from_millis(300)).await;
    let after = spread(address, 30).await;
    assert!(
        !after.contains_key(pods[2].name()),
        "removed pod still used: {after:?}"
    );
    assert_eq!(after.len(), 2, "{after:?}");

    queue.submit(Vec::new());
    queue.finish().await;
    sleep(Duration::from_millis(300)).await;
    let no_pods = TcpStream::connect(address).await;
    match kind {
        ClusterIpKind::Nftables => assert!(is_refused(no_pods), "nftables rejects"),
        ClusterIpKind::Userspace => support::assert_closed_at_once(no_pods.unwrap()).await,
    }
}

#[tokio::test]
async fn the_userspace_cluster_ip_spreads_connections_and_follows_the_lagged_feed() {
    follows_the_feed(ClusterIpKind::Userspace).await;
}

#[test]
fn the_nftables_cluster_ip_spreads_connections_and_follows_the_lagged_feed() {
    in_drill_netns(
        "the_nftables_cluster_ip_spreads_connections_and_follows_the_lagged_feed",
        || runtime().block_on(follows_the_feed(ClusterIpKind::Nftables)),
    );
}
