//! A bounded load generator: workers sending GETs over keep-alive connections, counting every failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{get, http_client};

/// What a load run saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub ok: u64,
    pub failed: u64,
    /// The first few failures, for the assertion message.
    pub failures: Vec<String>,
    /// Successful answers per body (the backend's name).
    pub by_backend: BTreeMap<String, u64>,
}

impl LoadReport {
    fn merge(&mut self, other: LoadReport) {
        self.ok += other.ok;
        self.failed += other.failed;
        let room = 10usize.saturating_sub(self.failures.len());
        self.failures.extend(other.failures.into_iter().take(room));
        for (backend, count) in other.by_backend {
            *self.by_backend.entry(backend).or_default() += count;
        }
    }
}

/// A load run in progress. Every request must answer 200; anything else counts as failed.
pub struct LoadRun {
    stop: watch::Sender<bool>,
    workers: JoinSet<LoadReport>,
}

impl LoadRun {
    /// Starts `concurrency` workers GETting `url` with Host `host`, each on its own
    /// keep-alive connection, for at most `limit`.
    pub fn start(url: &str, host: &str, concurrency: usize, limit: Duration) -> Self {
        let (stop, stopped) = watch::channel(false);
        let url: Arc<str> = url.into();
        let host: Arc<str> = host.into();
        let mut workers = JoinSet::new();
        for _ in 0..concurrency {
            let (url, host, stopped) = (url.clone(), host.clone(), stopped.clone());
            workers.spawn(worker(url, host, stopped, limit));
        }
        Self { stop, workers }
    }

    /// Stops the workers and adds up what they saw.
    pub async fn finish(mut self) -> LoadReport {
        let _ = self.stop.send(true);
        let mut report = LoadReport::default();
        while let Some(joined) = self.workers.join_next().await {
            match joined {
                Ok(part) => report.merge(part),
                Err(error) => {
                    report.failed += 1;
                    report.failures.push(format!("worker died: {error}"));
                }
            }
        }
        report
    }
}

async fn worker(
    url: Arc<str>,
    host: Arc<str>,
    stopped: watch::Receiver<bool>,
    limit: Duration,
) -> LoadReport {
    let client = http_client();
    let mut report = LoadReport::default();
    let deadline = tokio::time::Instant::now() + limit;
    while !*stopped.borrow() && tokio::time::Instant::now() < deadline {
        match get(&client, &url, &host).await {
            Ok(reply) if reply.status.is_success() => {
                report.ok += 1;
                *report
                    .by_backend
                    .entry(reply.body.trim().to_owned())
                    .or_default() += 1;
            }
            Ok(reply) => record_failure(
                &mut report,
                format!("{} {}", reply.status, reply.body.trim()),
            ),
            Err(error) => record_failure(&mut report, format!("request error: {error}")),
        }
    }
    report
}

fn record_failure(report: &mut LoadReport, failure: String) {
    report.failed += 1;
    if report.failures.len() < 10 {
        report.failures.push(failure);
    }
}
