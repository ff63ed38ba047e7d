//! The drill's verdict: how many requests failed and how, latency, and what was drilled.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::cluster_ip::ClusterIpKind;
use crate::load::LoadOutcome;
use crate::options::DrillOptions;

/// What one drill saw. Serializes to exactly these nine keys.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Requests sent.
    pub requests: u64,
    /// Requests that failed (anything but a complete 200).
    pub failed: u64,
    /// Failed requests by kind: `status_502`, `connect`, `reset`, `truncated`, `timeout`, ...
    pub failures: BTreeMap<String, u64>,
    /// Retries the proxy made, as the caller learned from it ([`Report::with_retries`]).
    pub retries: u64,
    /// Median latency of successful requests, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency of successful requests, in milliseconds.
    pub p99_ms: f64,
    /// `endpoints`, `service-upstream` or `fallback`.
    pub mode: String,
    /// `graceful`, `abrupt` or `crash`.
    pub termination: String,
    /// `nftables`, `userspace`, or none in endpoints mode.
    pub cluster_ip: Option<String>,
}

impl Report {
    /// The keys of the JSON line, a contract with scripts and tests that read it.
    pub const KEYS: [&'static str; 9] = [
        "requests",
        "failed",
        "failures",
        "retries",
        "p50_ms",
        "p99_ms",
        "mode",
        "termination",
        "cluster_ip",
    ];

    /// The report of a drill run with `options` whose load saw `outcome`.
    pub fn new(
        outcome: &LoadOutcome,
        options: &DrillOptions,
        cluster_ip: Option<ClusterIpKind>,
    ) -> Self {
        Self {
            requests: outcome.requests,
            failed: outcome.failed,
            failures: outcome.failures.clone(),
            retries: 0,
            p50_ms: outcome.latency_ms(0.50),
            p99_ms: outcome.latency_ms(0.99),
            mode: options.mode.as_str().to_owned(),
            termination: options.termination.as_str().to_owned(),
            cluster_ip: cluster_ip.map(|kind| kind.as_str().to_owned()),
        }
    }

    /// The same report with the proxy's retry count.
    pub fn with_retries(self, retries: u64) -> Self {
        Self { retries, ..self }
    }

    /// Whether more requests failed than `max_failed` allows (never, without a limit).
    pub fn exceeds(&self, max_failed: Option<u64>) -> bool {
        max_failed.is_some_and(|limit| self.failed > limit)
    }

    /// The report as one line of JSON.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The human summary, several lines.
    pub fn summary(&self) -> String {
        self.to_string()
    }

    /// Prints the human summary to stdout.
    pub fn print_summary(&self) {
        print!("{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cluster_ip = self.cluster_ip.as_deref().unwrap_or("none");
        writeln!(
            f,
            "drill: mode {}, termination {}, ClusterIP {cluster_ip}",
            self.mode, self.termination
        )?;
        let share = if self.requests == 0 {
            0.0
        } else {
            100.0 * self.failed as f64 / self.requests as f64
        };
        writeln!(
            f,
            "requests {}, failed {} ({share:.3}%), proxy retries {}",
            self.requests, self.failed, self.retries
        )?;
        writeln!(
            f,
            "latency of successful requests: p50 {:.2} ms, p99 {:.2} ms",
            self.p50_ms, self.p99_ms
        )?;
        for (kind, count) in &self.failures {
            writeln!(f, "  {kind:<12} {count}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn report() -> Report {
        Report {
            requests: 100,
            failed: 2,
            failures: BTreeMap::from([("reset".to_owned(), 2)]),
            retries: 0,
            p50_ms: 2.5,
            p99_ms: 9.0,
            mode: "endpoints".to_owned(),
            termination: "crash".to_owned(),
            cluster_ip: None,
        }
    }

    #[test]
    fn the_json_line_has_exactly_the_nine_keys() {
        let line = report().with_retries(7).to_json_line();
        assert!(!line.contains('\n'));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let keys: BTreeSet<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(Report::KEYS));
        assert_eq!(value["retries"], 7);
        assert!(value["cluster_ip"].is_null());
    }

    #[test]
    fn exceeds_only_past_the_limit() {
        assert!(!report().exceeds(None));
        assert!(!report().exceeds(Some(2)));
        assert!(report().exceeds(Some(1)));
        assert!(report().summary().contains("reset"));
    }
}
