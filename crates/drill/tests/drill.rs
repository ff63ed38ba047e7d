//! Whole drills against a tiny round-robin proxy: they finish, count requests, and catch the failures a rollout causes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use sluice_drill::{ClusterIpChoice, DrillOptions, Mode, Report, Termination};
use support::proxy::RoundRobinProxy;
use support::{in_drill_netns, runtime};

fn short(termination: Termination, mode: Mode) -> DrillOptions {
    DrillOptions {
        pods: 2,
        rps: 200,
        ready_delay: Duration::from_millis(100),
        endpoint_lag: Duration::from_millis(200),
        termination,
        mode,
        ..DrillOptions::default()
    }
}

async fn drill(options: &DrillOptions) -> Report {
    let report = sluice_drill::run(options, RoundRobinProxy::start)
        .await
        .unwrap();
    print!("{report}");
    report
}

fn assert_nine_keys(report: &Report) {
    let line = report.to_json_line();
    let value: serde_json::Value = serde_json::from_str(&line).unwrap();
    let keys: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(Report::KEYS), "{line}");
}

#[tokio::test]
async fn a_short_graceful_drill_completes_and_reports_nine_keys() {
    let options = short(Termination::Graceful, Mode::Endpoints);
    let report = drill(&options).await;
    // 1 s steady state + 2 × 100 ms ready + 200 ms lag + 100 ms kubelet + 500 ms, at 200 rps.
    assert!(report.requests > 300, "{report:?}");
    assert!(
        report.p50_ms > 0.0 && report.p99_ms >= report.p50_ms,
        "{report:?}"
    );
    assert_eq!(
        (report.mode.as_str(), report.termination.as_str()),
        ("endpoints", "graceful")
    );
    assert_eq!(report.cluster_ip, None);
    assert_nine_keys(&report);
    assert_eq!(report.clone().with_retries(3).retries, 3);
}

#[tokio::test]
async fn a_crash_drill_catches_the_requests_sent_to_dead_pods_during_the_lag() {
    let report = drill(&short(Termination::Crash, Mode::Endpoints)).await;
    assert!(
        report.failed > 0,
        "a crash is visible to a proxy without retries: {report:?}"
    );
    assert_eq!(report.failed, report.failures.values().sum::<u64>());
    assert!(report.failures.contains_key("status_502"), "{report:?}");
    assert!(report.exceeds(Some(0)));
}

#[tokio::test]
async fn a_service_upstream_drill_goes_through_the_userspace_cluster_ip() {
    let options = DrillOptions {
        cluster_ip: ClusterIpChoice::Userspace,
        ..short(Termination::Graceful, Mode::ServiceUpstream)
    };
    let report = drill(&options).await;
    assert!(report.requests > 300, "{report:?}");
    assert_eq!(report.cluster_ip.as_deref(), Some("userspace"));
    assert_eq!(report.mode, "service-upstream");
}

#[test]
fn a_service_upstream_drill_goes_through_the_nftables_cluster_ip() {
    in_drill_netns(
        "a_service_upstream_drill_goes_through_the_nftables_cluster_ip",
        || {
            let options = DrillOptions {
                cluster_ip: ClusterIpChoice::Nftables,
                ..short(Termination::Graceful, Mode::ServiceUpstream)
            };
            let report = runtime().block_on(drill(&options));
            assert!(report.requests > 300, "{report:?}");
            assert_eq!(report.cluster_ip.as_deref(), Some("nftables"));
        },
    );
}
