//! End-to-end: `sluice drill`, the rolling-deploy drill, run as users run it, against its published targets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use sluice_drill::Report;

/// Drills run one at a time: each loads the machine, and the zero-failure target should not
/// compete with another drill for two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `sluice drill --json` with `args`; returns the exit code and the report (the last line).
fn drill(args: &[&str]) -> (Option<i32>, Value) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("drill")
        .args(args)
        .arg("--json")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let report = serde_json::from_str(last).unwrap_or_else(|error| {
        panic!(
            "no JSON report ({error}) in:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

fn count(report: &Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

/// The published target's drill: 5 pods, 1,000 requests per second, 2 s endpoint lag, three
/// rollouts, and no failed request allowed.
const PUBLISHED: [&str; 10] = [
    "--pods",
    "5",
    "--rps",
    "1000",
    "--endpoint-lag",
    "2s",
    "--rollouts",
    "3",
    "--max-failed",
    "0",
];

#[test]
fn endpoints_mode_loses_no_request_when_pods_die_abruptly_before_their_endpoints_go() {
    let (code, report) = drill(&[&PUBLISHED[..], &["--termination", "abrupt"]].concat());
    assert_eq!(count(&report, "failed"), 0, "{report}");
    assert_eq!(code, Some(0), "{report}");
    // Three rollouts of five pods take well over 15 s at 1,000 requests per second.
    assert!(count(&report, "requests") > 15_000, "{report}");
    assert!(
        count(&report, "retries") > 0,
        "the race never happened: {report}"
    );
    assert_eq!(report["mode"], "endpoints");
    assert_eq!(report["termination"], "abrupt");
    assert_eq!(report["cluster_ip"], Value::Null);
}

#[test]
fn an_httproute_on_a_gateway_loses_no_request_when_pods_die_abruptly() {
    let args = [
        &PUBLISHED[..],
        &["--termination", "abrupt", "--route", "httproute"],
    ]
    .concat();
    let (code, report) = drill(&args);
    assert_eq!(count(&report, "failed"), 0, "{report}");
    assert_eq!(code, Some(0), "{report}");
    assert!(count(&report, "requests") > 15_000, "{report}");
    assert!(
        count(&report, "retries") > 0,
        "the race never happened: {report}"
    );
}

#[test]
fn no_get_is_lost_when_pods_crash_mid_response_in_endpoints_or_fallback_mode() {
    for mode in ["endpoints", "fallback"] {
        let crash = ["--termination", "crash", "--mode", mode];
        let (code, report) = drill(&[&PUBLISHED[..], &crash].concat());
        assert_eq!(count(&report, "failed"), 0, "{report}");
        assert_eq!(code, Some(0), "{report}");
        assert!(count(&report, "requests") > 15_000, "{report}");
        assert!(
            count(&report, "retries") > 0,
            "no pod crashed under load: {report}"
        );
        assert_eq!(report["termination"], "crash");
    }
    // The control: without the response retry buffer, crashes cut responses off (about two
    // per crash at this load; ten crashes). A crash just after the response head can reach
    // the client before the head does: the client then sees its connection reset instead of
    // a truncated body.
    let (_, report) = drill(&[
        "--pods",
        "5",
        "--rps",
        "1000",
        "--rollouts",
        "2",
        "--termination",
        "crash",
        "--endpoint-lag",
        "500ms",
        "--ready-delay",
        "300ms",
        "--response-retry-buffer",
        "0",
    ]);
    assert!(count(&report, "failed") > 0, "{report}");
    let cut = |kind: &str| report["failures"][kind].as_u64().unwrap_or(0);
    assert!(cut("truncated") > 0, "{report}");
    assert_eq!(
        cut("truncated") + cut("reset"),
        count(&report, "failed"),
        "{report}"
    );
}

#[test]
fn the_report_has_exactly_the_documented_keys_and_names_the_cluster_ip() {
    for mode in ["service-upstream", "fallback"] {
        let (code, report) = drill(&[
            "--pods",
            "3",
            "--rps",
            "300",
            "--endpoint-lag",
            "500ms",
            "--ready-delay",
            "300ms",
            "--mode",
            mode,
        ]);
        assert_eq!(code, Some(0), "{report}");
        let keys: BTreeSet<&str> = report
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(Report::KEYS), "{report}");
        assert_eq!(report["mode"], mode);
        let emulation = report["cluster_ip"].as_str().unwrap();
        assert!(["nftables", "userspace"].contains(&emulation), "{report}");
        assert!(count(&report, "requests") > 500, "{report}");
    }
}

#[test]
fn a_drill_that_fails_more_than_allowed_exits_non_zero() {
    // A crash cuts responses mid-body: a POST without Idempotency-Key may not be sent again,
    // so some POSTs must fail.
    let (code, report) = drill(&[
        "--pods",
        "3",
        "--rps",
        "500",
        "--endpoint-lag",
        "500ms",
        "--ready-delay",
        "300ms",
        "--termination",
        "crash",
        "--method",
        "POST",
        "--max-failed",
        "0",
    ]);
    assert!(count(&report, "failed") > 0, "{report}");
    assert_eq!(code, Some(1), "{report}");
    let failures: u64 = report["failures"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(failures, count(&report, "failed"), "{report}");
}

/// A TCPRoute splices each connection to one pod: no retry can hide a pod that dies with
/// requests on its connections, and the drill reports them as connection failures; a pod
/// that drains gracefully loses (almost) nothing, and no request ever gets an HTTP error
/// from the proxy, which never speaks HTTP here.
#[test]
fn a_tcproute_drill_reports_the_connections_abrupt_terminations_cut() {
    let small = [
        "--pods",
        "3",
        "--rps",
        "500",
        "--endpoint-lag",
        "1s",
        "--rollouts",
        "2",
        "--route",
        "tcproute",
    ];
    let connection_kinds: BTreeSet<&str> = ["connect", "reset", "truncated"].into();
    for termination in ["graceful", "abrupt"] {
        let args = [&small[..], &["--termination", termination]].concat();
        let (code, report) = drill(&args);
        assert_eq!(code, Some(0), "{report}");
        let requests = count(&report, "requests");
        assert!(requests > 4_000, "{report}");
        assert_eq!(
            count(&report, "retries"),
            0,
            "a TCP splice never retries: {report}"
        );
        let failures = report["failures"].as_object().unwrap();
        assert!(
            failures
                .keys()
                .all(|kind| connection_kinds.contains(kind.as_str())),
            "only connection failures: {report}"
        );
        let summed: u64 = failures.values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(summed, count(&report, "failed"), "{report}");
        if termination == "graceful" {
            assert!(count(&report, "failed") * 100 <= requests, "{report}");
        }
        assert_eq!(report["termination"], termination);
    }
}
