//! The drill re-runs itself inside its own network namespace exactly when nftables is wanted and possible.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sluice_drill::netns::{inside_drill_netns, nftables_unavailable};
use sluice_drill::{reexec_in_netns_if_needed, ClusterIpChoice, ClusterIpKind, DrillOptions, Mode};
use support::proxy::RoundRobinProxy;
use support::runtime;

fn options(mode: Mode, cluster_ip: ClusterIpChoice) -> DrillOptions {
    DrillOptions {
        mode,
        cluster_ip,
        ..DrillOptions::default()
    }
}

#[test]
fn endpoints_mode_and_userspace_run_in_this_process() {
    for choice in [
        ClusterIpChoice::Auto,
        ClusterIpChoice::Nftables,
        ClusterIpChoice::Userspace,
    ] {
        let endpoints = options(Mode::Endpoints, choice);
        assert!(reexec_in_netns_if_needed(&endpoints).unwrap().is_none());
        assert_eq!(ClusterIpKind::for_options(&endpoints), None);
    }
    let userspace = options(Mode::Fallback, ClusterIpChoice::Userspace);
    assert!(reexec_in_netns_if_needed(&userspace).unwrap().is_none());
    assert_eq!(
        ClusterIpKind::for_options(&userspace),
        Some(ClusterIpKind::Userspace)
    );
}

/// In the parent this re-runs the test binary (same arguments) in a namespace and checks it
/// passed; in the child, it runs a short drill through the kernel's DNAT.
#[test]
fn auto_reexecs_into_a_namespace_and_drills_through_nftables_there() {
    let options = DrillOptions {
        pods: 2,
        rps: 100,
        ready_delay: Duration::from_millis(100),
        endpoint_lag: Duration::from_millis(200),
        ..options(Mode::Fallback, ClusterIpChoice::Auto)
    };
    if !inside_drill_netns() {
        if let Some(why) = nftables_unavailable() {
            println!("skipped: {why}");
            return;
        }
    }
    match reexec_in_netns_if_needed(&options).unwrap() {
        Some(child) => assert!(child.success(), "the drill inside the namespace failed"),
        None => {
            assert!(
                inside_drill_netns(),
                "auto with nftables available must re-exec"
            );
            let report = runtime()
                .block_on(sluice_drill::run(&options, RoundRobinProxy::start))
                .unwrap();
            assert_eq!(report.cluster_ip.as_deref(), Some("nftables"), "{report:?}");
            assert!(report.requests > 100, "{report:?}");
        }
    }
}
