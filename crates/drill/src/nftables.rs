//! The nftables ClusterIP: kernel DNAT of 127.0.0.20:80 to a random eligible pod, as kube-proxy's nftables mode does.
//!
//! It only runs inside the drill's own network namespace, so it never changes the host's rules.
//! Each update replaces the one rule in a single `nft -f -` transaction; conntrack keeps
//! existing connections on the pod they were sent to. With no eligible pod, connections are
//! rejected with a TCP reset (kube-proxy's reject), so clients see "connection refused".

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster_ip::eligible;
use crate::error::DrillError;
use crate::netns::inside_drill_netns;
use crate::userspace::CLUSTER_IP;
use crate::PodEndpoint;

const TABLE: &str = "ip sluice_drill";

/// The DNAT rule set in the kernel, kept up to date by a task.
pub struct NftClusterIp {
    pods: watch::Sender<Vec<SocketAddr>>,
    task: JoinHandle<()>,
}

impl NftClusterIp {
    /// Installs the table for `endpoints`; fails outside the drill's network namespace.
    pub async fn start(endpoints: &[PodEndpoint]) -> Result<Self, DrillError> {
        if !inside_drill_netns() {
            let why =
                "runs only inside the drill's network namespace (see reexec_in_netns_if_needed)";
            return Err(DrillError::NftablesUnavailable(why.to_owned()));
        }
        let pods = eligible(endpoints);
        let script = ruleset(CLUSTER_IP, &pods)?;
        tokio::task::spawn_blocking(move || apply(&script))
            .await
            .map_err(|error| DrillError::NftablesUnavailable(error.to_string()))??;
        let (pods, watched) = watch::channel(pods);
        let task = tokio::spawn(keep_updated(watched));
        Ok(Self { pods, task })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        CLUSTER_IP
    }

    /// New connections go to the eligible pods of `endpoints` once the rule is replaced.
    pub fn update(&self, endpoints: &[PodEndpoint]) {
        self.pods.send_replace(eligible(endpoints));
    }
}

impl Drop for NftClusterIp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_updated(mut pods: watch::Receiver<Vec<SocketAddr>>) {
    while pods.changed().await.is_ok() {
        let current = pods.borrow_and_update().clone();
        let applied = match ruleset(CLUSTER_IP, &current) {
            Ok(script) => tokio::task::spawn_blocking(move || apply(&script)).await,
            Err(error) => Ok(Err(error)),
        };
        match applied {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "nftables ClusterIP update failed"),
            Err(error) => tracing::warn!(%error, "nftables ClusterIP update failed"),
        }
    }
}

/// The whole table as one transaction: create it if needed, then swap the rule.
pub fn ruleset(cluster_ip: SocketAddr, pods: &[SocketAddr]) -> Result<String, DrillError> {
    let IpAddr::V4(ip) = cluster_ip.ip() else {
        return Err(DrillError::NotIpv4(cluster_ip));
    };
    let matches = format!("ip daddr {ip} tcp dport {}", cluster_ip.port());
    let action = if pods.is_empty() {
        "reject with tcp reset".to_owned()
    } else {
        dnat(pods)?
    };
    Ok(format!(
        "table {TABLE} {{\n  chain output {{\n    type nat hook output priority -100; policy accept;\n  }}\n}}\n\
         flush chain {TABLE} output\n\
         add rule {TABLE} output {matches} {action}\n"
    ))
}

fn dnat(pods: &[SocketAddr]) -> Result<String, DrillError> {
    let mut entries = Vec::with_capacity(pods.len());
    for (index, pod) in pods.iter().enumerate() {
        let IpAddr::V4(ip) = pod.ip() else {
            return Err(DrillError::NotIpv4(*pod));
        };
        entries.push(format!("{index} : {ip} . {}", pod.port()));
    }
    let count = pods.len();
    Ok(format!(
        "dnat to numgen random mod {count} map {{ {} }}",
        entries.join(", ")
    ))
}

/// Runs `nft -f -` with `script` on stdin.
fn apply(script: &str) -> Result<(), DrillError> {
    let spawn_error = |source| DrillError::Spawn {
        command: "nft -f -".to_owned(),
        source,
    };
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).map_err(spawn_error)?;
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if output.status.success() {
        return Ok(());
    }
    Err(DrillError::Command {
        command: format!("nft -f - <<'EOF'\n{script}EOF"),
        detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_maps_random_numbers_to_pods_or_rejects() {
        let pods = [
            "127.0.1.1:8080".parse().unwrap(),
            "127.0.1.2:8080".parse().unwrap(),
        ];
        let script = ruleset(CLUSTER_IP, &pods).unwrap();
        assert!(script.contains(
            "add rule ip sluice_drill output ip daddr 127.0.0.20 tcp dport 80 \
             dnat to numgen random mod 2 map { 0 : 127.0.1.1 . 8080, 1 : 127.0.1.2 . 8080 }"
        ));
        assert!(script.contains("flush chain ip sluice_drill output"));
        let empty = ruleset(CLUSTER_IP, &[]).unwrap();
        assert!(empty.ends_with("tcp dport 80 reject with tcp reset\n"));
    }
}
