//! The Kubernetes source at cluster scale: the real sluice binary against the test API server
//! holding a synthetic cluster, measuring start-to-ready, memory, endpoint propagation and
//! recompile time.
//!
//! Usage (release build of sluice first):
//! ```sh
//! cargo build --release -p sluice -p sluice-bench
//! target/release/kube-scale [SERVICES...]      # default: 1000 10000
//! ```
//! Each scale has SERVICES Services, as many Ingresses and EndpointSlices, and 10 endpoints per
//! slice. Set SLUICE_BIN to use another sluice binary.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use sluice_bench::{
    cluster, endpoint_slice, ingress, percentiles, scales_from_args, Scale, NAMESPACE,
};
use sluice_testapi::TestApiServer;
use sluice_testkit::{get, http_client, EchoBackend};

/// Endpoint changes per second, as the issue asks.
const CHANGE_RATE: u32 = 100;
/// Changes measured per propagation run.
const CHANGES: usize = 500;
/// Ingress changes measured for recompile time.
const RECOMPILES: usize = 20;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let scales = scales_from_args()?;
    let binary = std::env::var("SLUICE_BIN").unwrap_or_else(|_| "target/release/sluice".to_owned());
    anyhow::ensure!(
        Path::new(&binary).exists(),
        "{binary} not found: run `cargo build --release -p sluice` first"
    );
    let mut rows = Vec::new();
    for services in scales {
        rows.push(
            run(
                &binary,
                Scale {
                    services,
                    endpoints_per_service: 10,
                },
            )
            .await?,
        );
    }
    println!("\n| Services = Ingresses | endpoints | start → ready | RSS after ready | in-process propagation p50 / p99 | end-to-end propagation p50 / p99 | one-Ingress recompile p50 / p99 |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

async fn run(binary: &str, scale: Scale) -> anyhow::Result<String> {
    eprintln!(
        "== {} Services, {} endpoints",
        scale.services,
        scale.services * scale.endpoints_per_service
    );
    let api = TestApiServer::start("127.0.0.1:0".parse()?).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig)?;
    api.insert_many(cluster(scale))?;
    let probe = Probe::start(&api).await?;

    let started = Instant::now();
    let sluice = Sluice::spawn(binary, &kubeconfig)?;
    sluice.wait_ready(Duration::from_secs(60)).await?;
    let ready = started.elapsed();
    let rss = sluice.rss_bytes()?;
    eprintln!("ready in {ready:?}, RSS {} MiB", rss / (1 << 20));

    let (in_p50, in_p99) = in_process_propagation(&api, &sluice, scale).await?;
    let (e2e_p50, e2e_p99) = probe.end_to_end_propagation(&api, &sluice).await?;
    let (compile_p50, compile_p99) = recompile(&api, &sluice).await?;
    Ok(format!(
        "| {} | {} | {:.2} s | {} MiB | {:.3} / {:.3} ms | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
        scale.services,
        scale.services * scale.endpoints_per_service,
        ready.as_secs_f64(),
        rss / (1 << 20),
        in_p50 * 1e3,
        in_p99 * 1e3,
        e2e_p50 * 1e3,
        e2e_p99 * 1e3,
        compile_p50 * 1e3,
        compile_p99 * 1e3,
    ))
}

/// Single EndpointSlice changes at CHANGE_RATE per second, each to a different Service; for
/// each, sluice's own figure from watch-event receipt to the swapped cell (`/api/status`).
async fn in_process_propagation(
    api: &TestApiServer,
    sluice: &Sluice,
    scale: Scale,
) -> anyhow::Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(CHANGES);
    let period = Duration::from_secs(1) / CHANGE_RATE;
    let mut next = tokio::time::Instant::now();
    for change in 0..CHANGES {
        next += period;
        let before = sluice.status().await?["propagations"]
            .as_u64()
            .unwrap_or_default();
        let service = (change * 7919) % scale.services;
        // Shifts 1..=63 never repeat the initial set (shift 0, addresses modulo 64).
        api.apply(endpoint_slice(
            service,
            change % 63 + 1,
            scale.endpoints_per_service,
        ))?;
        let status = sluice
            .wait_status(|s| s["propagations"].as_u64().unwrap_or_default() > before)
            .await?;
        samples.push(
            status["lastPropagation"]["seconds"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
        tokio::time::sleep_until(next).await;
    }
    Ok(percentiles(&mut samples))
}

/// One-Ingress changes; sluice's compile time for each (`/api/status`).
async fn recompile(api: &TestApiServer, sluice: &Sluice) -> anyhow::Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(RECOMPILES);
    for change in 0..RECOMPILES {
        let generation = sluice.status().await?["generation"]
            .as_u64()
            .unwrap_or_default();
        let extra = format!("/v{change}");
        api.apply(ingress(change, &["/", &extra]))?;
        let status = sluice
            .wait_status(|s| s["generation"].as_u64().unwrap_or_default() > generation)
            .await?;
        samples.push(
            status["lastCompile"]["seconds"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    Ok(percentiles(&mut samples))
}

/// A real Service with two real pods, whose slice flips between them.
struct Probe {
    pods: [EchoBackend; 2],
}

impl Probe {
    const HOST: &'static str = "probe.bench.test";

    async fn start(api: &TestApiServer) -> anyhow::Result<Self> {
        let first = EchoBackend::start("probe-a", IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1))).await?;
        let port = first.addr().port();
        let second = EchoBackend::start_on(
            "probe-b",
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 3, 2)), port),
        )
        .await?;
        let probe = Self {
            pods: [first, second],
        };
        api.apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "probe", "namespace": NAMESPACE},
            "spec": {"clusterIP": "10.96.255.1", "ports": [{"name": "http", "port": 80}]}
        }))?;
        api.apply(probe.slice(0))?;
        api.apply(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "probe", "namespace": NAMESPACE},
            "spec": {"ingressClassName": "sluice", "rules": [{"host": Self::HOST, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "probe", "port": {"name": "http"}}}}
            ]}}]}
        }))?;
        Ok(probe)
    }

    fn slice(&self, pod: usize) -> Value {
        let addr = self.pods[pod].addr();
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "probe-a", "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": "probe"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": addr.port()}],
            "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}]
        })
    }

    /// From the API write to the first request through sluice that reaches the new pod.
    async fn end_to_end_propagation(
        &self,
        api: &TestApiServer,
        sluice: &Sluice,
    ) -> anyhow::Result<(f64, f64)> {
        let client = http_client();
        let url = format!("http://{}/", sluice.listen);
        let mut samples = Vec::with_capacity(CHANGES / 2);
        let period = Duration::from_secs(1) / CHANGE_RATE;
        for change in 1..=CHANGES / 2 {
            let pod = change % 2;
            let wanted = format!("{}\n", self.pods[pod].name());
            let written = Instant::now();
            api.apply(self.slice(pod))?;
            loop {
                let reply = get(&client, &url, Self::HOST)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                if reply.body == wanted {
                    break;
                }
                if written.elapsed() > Duration::from_secs(5) {
                    bail!("the probe never reached {wanted:?}");
                }
            }
            samples.push(written.elapsed().as_secs_f64());
            tokio::time::sleep(period.saturating_sub(written.elapsed())).await;
        }
        Ok(percentiles(&mut samples))
    }
}

/// The sluice process under test. Killed on drop.
struct Sluice {
    child: Child,
    listen: SocketAddr,
    admin: SocketAddr,
}

impl Sluice {
    fn spawn(binary: &str, kubeconfig: &Path) -> anyhow::Result<Self> {
        let listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port()?);
        let admin = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port()?);
        let child = Command::new(binary)
            .args(["serve", "--kubernetes", "--kubeconfig"])
            .arg(kubeconfig)
            .args([
                "--listen",
                &listen.to_string(),
                "--admin",
                &admin.to_string(),
            ])
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {binary}"))?;
        Ok(Self {
            child,
            listen,
            admin,
        })
    }

    async fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let client = http_client();
        let url = format!("http://{}/readyz", self.admin);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if get(&client, &url, "admin")
                .await
                .is_ok_and(|r| r.status == 200)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        bail!("sluice was not ready within {limit:?}")
    }

    async fn status(&self) -> anyhow::Result<Value> {
        let reply = get(
            &http_client(),
            &format!("http://{}/api/status", self.admin),
            "admin",
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(serde_json::from_str(&reply.body)?)
    }

    async fn wait_status(&self, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.status().await?;
            if done(&status) {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("sluice's status never showed the change: {status}");
            }
            // Poll gently: sluice reports its own timings, and a busy poller would steal the CPU
            // it is timing.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn rss_bytes(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .context("no VmRSS")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("no value")?
            .parse()?;
        Ok(kib * 1024)
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
