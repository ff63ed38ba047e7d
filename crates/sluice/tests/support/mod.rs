//! Shared helpers for the end-to-end tests: run the real sluice binary on loopback, write manifests, wait for conditions.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod grpc;
pub mod tls;
pub mod wire;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_testkit::{get, http_client};

/// The real `sluice` binary, started with `serve` on free loopback ports. Killed on drop.
pub struct Sluice {
    child: Child,
    pub listen: SocketAddr,
    /// The TLS listener (a free port unless the test passed its own `--listen-tls`).
    pub listen_tls: SocketAddr,
    pub admin: SocketAddr,
    pub dir: PathBuf,
    /// Where its standard error goes.
    log: tempfile::NamedTempFile,
}

/// The binary under test: this build's, or `SLUICE_TEST_BINARY` (to show that a new test
/// fails against an older build).
pub fn sluice_binary() -> OsString {
    std::env::var_os("SLUICE_TEST_BINARY")
        .unwrap_or_else(|| OsString::from(env!("CARGO_BIN_EXE_sluice")))
}

/// How the binary is started.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// Shell commands run before sluice in the same process (e.g. `ulimit -n 256;`).
    pub shell_prefix: Option<String>,
    /// `RUST_LOG` for this run (else `SLUICE_TEST_LOG`, else `warn`).
    pub log_filter: Option<String>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sluice {
    /// Starts `sluice serve --manifests dir` plus `extra` flags and waits for /readyz.
    pub async fn start(dir: &Path, extra: &[&str]) -> Self {
        Self::start_with(dir, extra, Launch::default()).await
    }

    /// [`Self::start`], launched as `launch` says.
    pub async fn start_with(dir: &Path, extra: &[&str], launch: Launch) -> Self {
        let mut args = vec![OsString::from("--manifests"), dir.as_os_str().to_owned()];
        args.extend(extra.iter().map(OsString::from));
        Self::start_ready(args, dir, Duration::from_secs(20), &launch).await
    }

    /// Starts `sluice serve --kubernetes --kubeconfig FILE` plus `extra` flags and waits for
    /// /readyz (every watch listed once).
    pub async fn start_kubernetes(kubeconfig: &Path, extra: &[&str]) -> Self {
        let mut args = vec![
            OsString::from("--kubernetes"),
            OsString::from("--kubeconfig"),
            kubeconfig.as_os_str().to_owned(),
        ];
        args.extend(extra.iter().map(OsString::from));
        let dir = kubeconfig.parent().unwrap_or(kubeconfig);
        Self::start_ready(args, dir, Duration::from_secs(30), &Launch::default()).await
    }

    /// Spawns sluice and waits for /readyz. A free port can be taken by another test between
    /// choosing and binding it; sluice then exits at once, and is started again on new ports.
    async fn start_ready(
        args: Vec<OsString>,
        dir: &Path,
        limit: Duration,
        launch: &Launch,
    ) -> Self {
        for _ in 0..3 {
            let mut sluice = Self::spawn(args.clone(), dir, launch);
            if sluice.wait_ready(limit).await {
                return sluice;
            }
        }
        panic!("sluice exited at start three times");
    }

    fn spawn(source: Vec<OsString>, dir: &Path, launch: &Launch) -> Self {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let listen_tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let tls_flag = match source.iter().any(|arg| arg == "--listen-tls") {
            true => Vec::new(),
            false => vec![
                OsString::from("--listen-tls"),
                OsString::from(listen_tls.to_string()),
            ],
        };
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut command = match &launch.shell_prefix {
            Some(prefix) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("{prefix} exec \"$0\" \"$@\""))
                    .arg(sluice_binary());
                shell
            }
            None => Command::new(sluice_binary()),
        };
        let child = command
            .arg("serve")
            .args(source)
            .args(tls_flag)
            .args([
                "--listen",
                &listen.to_string(),
                "--admin",
                &admin.to_string(),
            ])
            .env(
                "RUST_LOG",
                launch.log_filter.clone().unwrap_or_else(|| {
                    std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "warn".to_owned())
                }),
            )
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("start sluice");
        Self {
            child,
            listen,
            listen_tls,
            admin,
            dir: dir.to_owned(),
            log,
        }
    }

    /// Everything sluice wrote to standard error so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Waits for /readyz to answer 200; `false` if the process exited first.
    async fn wait_ready(&mut self, limit: Duration) -> bool {
        let client = http_client();
        let ready_url = format!("http://{}/readyz", self.admin);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            let ready = get(&client, &ready_url, "admin").await;
            if ready.is_ok_and(|r| r.status == 200) {
                // Another test's sluice on a reused port would answer too; ours would have
                // failed to bind and exited by now.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return self.child.try_wait().unwrap().is_none();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out after {limit:?} waiting for sluice to be ready");
    }

    /// The /api/status document.
    pub async fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.admin_get("/api/status").await.body).unwrap()
    }

    /// `GET path` on the admin listener.
    pub async fn admin_get(&self, path: &str) -> sluice_testkit::Reply {
        let url = format!("http://{}{path}", self.admin);
        get(&http_client(), &url, "admin").await.unwrap()
    }

    /// The value of a Prometheus counter or gauge line, e.g. `sluice_config_publishes_total`.
    pub async fn metric(&self, name: &str) -> f64 {
        let reply = self.admin_get("/metrics").await;
        let line = reply
            .body
            .lines()
            .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '));
        line.and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {}", reply.body))
    }

    /// A scrape of /metrics, parsed by a Prometheus text-format parser.
    pub async fn scrape(&self) -> prometheus_parse::Scrape {
        let reply = self.admin_get("/metrics").await;
        assert_eq!(reply.status, 200);
        let lines = reply.body.lines().map(|line| Ok(line.to_owned()));
        prometheus_parse::Scrape::parse(lines).expect("the exposition parses")
    }

    /// The sum of every series of `name` whose labels include `labels` (0 when none does).
    pub async fn metric_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sum_of(&self.scrape().await, name, labels)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listen)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as the kubelet does when the pod is deleted.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits up to `limit` for the process to exit and returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("sluice did not exit within {limit:?}");
    }

    /// The status code of /readyz.
    pub async fn readyz(&self) -> u16 {
        let url = format!("http://{}/readyz", self.admin);
        get(&http_client(), &url, "admin")
            .await
            .map_or(0, |reply| reply.status.as_u16())
    }

    /// Peak resident memory of the sluice process, in bytes (VmHWM).
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }

    /// The /api/routes document.
    pub async fn routes(&self) -> serde_json::Value {
        let reply = get(
            &http_client(),
            &format!("http://{}/api/routes", self.admin),
            "admin",
        )
        .await
        .unwrap();
        serde_json::from_str(&reply.body).unwrap()
    }

    /// Waits until a table newer than `generation` is published.
    pub async fn wait_for_generation_after(&self, generation: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.routes().await["generation"].as_u64().unwrap() > generation {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no table newer than generation {generation} was published within 5 s");
    }

    pub async fn generation(&self) -> u64 {
        self.routes().await["generation"].as_u64().unwrap()
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `condition` every 20 ms until it holds, or panics after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// An Ingress of class sluice with one rule: `host` (empty for any) and `(path, pathType, service, port)`.
pub fn ingress(name: &str, host: &str, paths: &[(&str, &str, &str, u16)]) -> String {
    let mut yaml = format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\nspec:\n  ingressClassName: sluice\n  rules:\n  - {}http:\n      paths:\n",
        if host.is_empty() { String::new() } else { format!("host: {host}\n    ") }
    );
    for (path, path_type, service, port) in paths {
        writeln!(
            yaml,
            "      - path: {path}\n        pathType: {path_type}\n        backend:\n          service:\n            name: {service}\n            port:\n              number: {port}"
        )
        .unwrap();
    }
    yaml
}

/// A Service with one port, and one EndpointSlice per endpoint (endpoints may differ in port).
pub fn service(name: &str, port: u16, endpoints: &[SocketAddr]) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: {port}\n");
    for (index, endpoint) in endpoints.iter().enumerate() {
        write!(
            yaml,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-{index}\n  labels:\n    kubernetes.io/service-name: {name}\naddressType: IPv4\nports:\n- port: {}\nendpoints:\n- addresses: [\"{}\"]\n",
            endpoint.port(),
            endpoint.ip()
        )
        .unwrap();
    }
    yaml
}

/// Writes a manifest file atomically (write then rename), as config management tools do.
pub fn write_manifest(dir: &Path, name: &str, documents: &[String]) {
    let text = documents.join("---\n");
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, dir.join(name)).unwrap();
}

/// A loopback address standing in for a pod IP.
pub fn pod_ip(n: u8) -> std::net::IpAddr {
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, n))
}

/// Runs `sluice check --manifests dir`; returns its exit code and standard output.
pub fn run_check(dir: &Path) -> (Option<i32>, String) {
    run_check_with(dir, &[])
}

/// Runs `sluice check --manifests dir` with `args`; returns its exit code and standard output.
pub fn run_check_with(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--manifests"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// An endpoint's conditions as its EndpointSlice states them.
#[derive(Clone, Copy, Debug)]
pub enum PodState {
    Ready,
    /// Terminating but still serving (during a graceful shutdown).
    Draining,
    /// Terminating and no longer serving.
    Gone,
}

/// A Service with one port and one EndpointSlice listing `endpoints` with their conditions.
pub fn service_with_states(name: &str, port: u16, endpoints: &[(SocketAddr, PodState)]) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  clusterIP: 10.96.0.10\n  ports:\n  - port: {port}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-slice\n  labels:\n    kubernetes.io/service-name: {name}\naddressType: IPv4\nports:\n- port: {}\nendpoints:\n",
        endpoints.first().map_or(80, |(addr, _)| addr.port())
    );
    for (endpoint, state) in endpoints {
        let (ready, serving, terminating) = match state {
            PodState::Ready => (true, true, false),
            PodState::Draining => (false, true, true),
            PodState::Gone => (false, false, true),
        };
        writeln!(
            yaml,
            "- addresses: [\"{}\"]\n  conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}",
            endpoint.ip()
        )
        .unwrap();
    }
    yaml
}

/// [`ingress`] with annotations.
pub fn annotated_ingress(
    name: &str,
    host: &str,
    paths: &[(&str, &str, &str, u16)],
    annotations: &[(&str, &str)],
) -> String {
    let mut block = String::from("  annotations:\n");
    for (key, value) in annotations {
        writeln!(block, "    {key}: {value:?}").unwrap();
    }
    ingress(name, host, paths).replacen(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n{block}"),
        1,
    )
}

/// Echo pods named `names` on consecutive pod IPs from `first_ip`, all on `port` (as one
/// EndpointSlice port requires).
pub async fn pods_on(names: &[&str], first_ip: u8, port: u16) -> Vec<sluice_testkit::EchoBackend> {
    let mut pods = Vec::new();
    for (offset, name) in names.iter().enumerate() {
        let addr = SocketAddr::new(pod_ip(first_ip + offset as u8), port);
        pods.push(
            sluice_testkit::EchoBackend::start_on(name, addr)
                .await
                .unwrap(),
        );
    }
    pods
}

/// Writes `NAME.yaml`: a catch-all Ingress `name` to Service `name` port 80 with these
/// endpoints, the smallest app sluice can serve.
pub fn write_catch_all(dir: &Path, name: &str, endpoints: &[SocketAddr]) {
    write_manifest(
        dir,
        &format!("{name}.yaml"),
        &[
            ingress(name, "", &[("/", "Prefix", name, 80)]),
            service(name, 80, endpoints),
        ],
    );
}

/// A raw backend on pod IP `ip` behind a catch-all Ingress, and sluice serving it with `flags`.
pub async fn raw_backend_behind_sluice(
    ip: u8,
    flags: &[&str],
) -> (sluice_testkit::RawBackend, tempfile::TempDir, Sluice) {
    let backend = sluice_testkit::RawBackend::start(pod_ip(ip)).await.unwrap();
    let (dir, sluice) = sluice_in_front_of(backend.addr(), flags).await;
    (backend, dir, sluice)
}

/// sluice with `flags` in front of one endpoint at `addr`, behind a catch-all Ingress.
pub async fn sluice_in_front_of(addr: SocketAddr, flags: &[&str]) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &[addr]);
    let sluice = Sluice::start(dir.path(), flags).await;
    (dir, sluice)
}

/// The sum of every series of `name` in `scrape` whose labels include `labels`.
pub fn sum_of(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == name)
        .filter(|sample| {
            labels
                .iter()
                .all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
        .map(|sample| match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

/// A WebSocket pod (tokio-tungstenite) that echoes every message, text prefixed by its name
/// and `: `.
pub async fn websocket_echo_pod(name: &'static str, ip: std::net::IpAddr) -> SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    let reply = match message {
                        Message::Text(text) => Message::text(format!("{name}: {text}")),
                        Message::Binary(bytes) => Message::Binary(bytes),
                        Message::Close(_) => break,
                        _ => continue,
                    };
                    if socket.send(reply).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A Secret `name` of `kind` (`None`: no type, Opaque) with `data` as stringData.
pub fn secret(name: &str, kind: Option<&str>, data: &[(&str, &str)]) -> String {
    let kind = kind
        .map(|kind| format!("type: {kind}\n"))
        .unwrap_or_default();
    let mut yaml =
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n{kind}stringData:\n");
    for (key, value) in data {
        yaml.push_str(&format!("  {key}: {value:?}\n"));
    }
    yaml
}

/// `Basic base64(user:password)`, an `Authorization` value.
pub fn basic(user_password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

/// Waits (up to 10 s) until `addr` accepts TCP connections.
pub async fn wait_for_socket(addr: SocketAddr) {
    wait_until(
        &format!("{addr} to accept"),
        Duration::from_secs(10),
        || async move { tokio::net::TcpStream::connect(addr).await.is_ok() },
    )
    .await;
}
