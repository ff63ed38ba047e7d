//! End-to-end: `sluice serve --kubernetes` against the test API server, with real backends on loopback and constant load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_testapi::{Options, TestApiServer};
use sluice_testkit::{get, http_client, EchoBackend, LoadRun};
use support::{pod_ip, wait_until, Sluice};

fn ingress(name: &str, host: &str, service: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": service, "port": {"name": "http"}}}}
        ]}}]}
    })
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}
    })
}

/// One EndpointSlice per backend port number, as the EndpointSlice controller would split them.
fn slice(service: &str, name: &str, pods: &[&EchoBackend]) -> Value {
    let port = pods.first().map_or(8080, |p| p.addr().port());
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|p| json!({"addresses": [p.addr().ip().to_string()], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port}],
        "endpoints": endpoints
    })
}

/// Pods that share one port number, as pods behind one targetPort do.
async fn pods(names: &[&str], first_ip: u8) -> Vec<EchoBackend> {
    'attempt: for _ in 0..20 {
        let first = EchoBackend::start(names[0], pod_ip(first_ip))
            .await
            .unwrap();
        let port = first.addr().port();
        let mut pods = vec![first];
        for (offset, name) in names.iter().enumerate().skip(1) {
            match EchoBackend::start_on(
                name,
                SocketAddr::new(pod_ip(first_ip + offset as u8), port),
            )
            .await
            {
                Ok(pod) => pods.push(pod),
                Err(_) => continue 'attempt,
            }
        }
        return pods;
    }
    panic!("no port free on all pod addresses");
}

struct Cluster {
    api: TestApiServer,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
}

impl Cluster {
    async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    async fn start_with(options: Options) -> Self {
        let api = TestApiServer::start_with("127.0.0.1:0".parse().unwrap(), options)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig).unwrap();
        Self {
            api,
            _dir: dir,
            kubeconfig,
        }
    }

    /// A cluster with Service `shop/web`, its slice `web-a` holding `pods`, and an Ingress
    /// routing `shop.test` to it.
    async fn serving_web(pods: &[&EchoBackend]) -> Self {
        let cluster = Self::start().await;
        cluster.apply(service("web"));
        cluster.apply(slice("web", "web-a", pods));
        cluster.apply(ingress("web", "shop.test", "web"));
        cluster
    }

    fn apply(&self, object: Value) {
        self.api.apply(object).unwrap();
    }

    /// `status.loadBalancer.ingress` of the Ingress `shop/web`.
    fn web_status(&self) -> Value {
        self.api.get("Ingress", "shop", "web").unwrap()["status"]["loadBalancer"]["ingress"].clone()
    }

    /// Who holds the leader-election Lease `namespace/sluice-leader`.
    fn lease_holder(&self, namespace: &str) -> Option<String> {
        let lease = self.api.get("Lease", namespace, "sluice-leader")?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    }
}

/// Flags of a replica that publishes `lb.example.com` and elects a leader through the Lease
/// `sluice-system/sluice-leader`, held for 2 s without renewal.
fn leader_flags(identity: &'static str) -> [&'static str; 9] {
    [
        "--publish-address",
        "lb.example.com",
        "--leader-elect",
        "--leader-elect-namespace",
        "sluice-system",
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-identity",
        identity,
    ]
}

async fn body_of(sluice: &Sluice, host: &str) -> String {
    match get(&http_client(), &sluice.url("/"), host).await {
        Ok(reply) if reply.status == 200 => reply.body.trim().to_owned(),
        Ok(reply) => format!("{} {}", reply.status, reply.body.trim()),
        Err(error) => format!("error {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_created_through_the_api_serves_within_100_ms() {
    let pods = pods(&["shop-1"], 100).await;
    let cluster = Cluster::start().await;
    cluster.apply(service("web"));
    cluster.apply(slice("web", "web-a", &[&pods[0]]));
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &["--namespace", "shop"]).await;
    assert_eq!(
        body_of(&sluice, "shop.test").await,
        "404 Not Found 404 no route"
    );

    let created = Instant::now();
    cluster.apply(ingress("web", "shop.test", "web"));
    let client = http_client();
    loop {
        let reply = get(&client, &sluice.url("/"), "shop.test").await.unwrap();
        if reply.status == 200 {
            assert_eq!(reply.body, "shop-1\n");
            break;
        }
        assert!(
            created.elapsed() < Duration::from_secs(5),
            "the Ingress never started serving"
        );
    }
    let elapsed = created.elapsed();
    eprintln!("Ingress created → first 200: {elapsed:?}");
    assert!(elapsed < Duration::from_millis(100), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_endpoints_up_and_down_under_load_fails_no_request() {
    let pods = pods(&["pod-a", "pod-b", "pod-c"], 110).await;
    let [a, b, c] = [&pods[0], &pods[1], &pods[2]];
    let cluster = Cluster::serving_web(&[a]).await;
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &[]).await;
    let publishes = sluice.metric("sluice_config_publishes_total").await;

    let load = LoadRun::start(&sluice.url("/"), "shop.test", 4, Duration::from_secs(30));
    for pods in [
        vec![a, b, c],
        vec![b, c],
        vec![c],
        vec![a, c],
        vec![a, b, c],
        vec![a],
    ] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.apply(slice("web", "web-a", &pods));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = load.finish().await;

    assert_eq!(
        report.failed, 0,
        "failed requests while scaling: {:?}",
        report.failures
    );
    for pod in ["pod-a", "pod-b", "pod-c"] {
        assert!(
            report.by_backend.get(pod).copied().unwrap_or(0) > 0,
            "{pod} got no traffic: {:?}",
            report.by_backend
        );
    }
    assert_eq!(
        sluice.metric("sluice_config_publishes_total").await,
        publishes,
        "endpoint changes must not recompile"
    );
    let status = sluice.status().await;
    assert!(status["propagations"].as_u64().unwrap() >= 6, "{status}");
    let seconds = status["lastPropagation"]["seconds"].as_f64().unwrap();
    assert!(seconds < 1.0, "propagation took {seconds} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_and_expired_resource_versions_fail_no_request_and_never_flap() {
    let pods = pods(&["steady"], 120).await;
    let extra = pods_on_other_port("late", 121).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &[]).await;
    let publishes = sluice.metric("sluice_config_publishes_total").await;
    let propagations = sluice.status().await["propagations"].as_u64().unwrap();

    let load = LoadRun::start(&sluice.url("/"), "shop.test", 4, Duration::from_secs(30));
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if round % 2 == 0 {
            cluster.api.drop_watches();
        } else {
            cluster.api.expire_resource_versions();
        }
        assert!(
            cluster
                .api
                .wait_for_open_watches(5, Duration::from_secs(10))
                .await,
            "watches must come back"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sluice.metric("sluice_config_publishes_total").await,
        publishes,
        "re-lists of unchanged objects must not republish"
    );
    assert_eq!(
        sluice.status().await["propagations"].as_u64().unwrap(),
        propagations,
        "re-lists must not touch endpoints"
    );

    // A change made between a 410 and the re-list still arrives.
    cluster.api.expire_resource_versions();
    cluster.apply(slice("web", "web-b", &[&extra]));
    wait_until(
        "the new endpoint to serve",
        Duration::from_secs(10),
        || async { body_of(&sluice, "shop.test").await == "late" },
    )
    .await;
    let report = load.finish().await;
    assert_eq!(
        report.failed, 0,
        "failed requests during watch faults: {:?}",
        report.failures
    );
}

/// One pod on its own port number (a second EndpointSlice of the same Service).
async fn pods_on_other_port(name: &str, ip: u8) -> EchoBackend {
    EchoBackend::start(name, pod_ip(ip)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_outage_of_30_seconds_fails_no_request_and_changes_apply_after() {
    let pods = pods(&["before", "after"], 130).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &[]).await;

    let load = LoadRun::start(&sluice.url("/"), "shop.test", 2, Duration::from_secs(120));
    cluster
        .api
        .refuse_connections(Duration::from_secs(30))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.apply(slice("web", "web-a", &[&pods[1]]));
    cluster.apply(ingress("more", "more.test", "web"));
    let outage_ends = Instant::now() + Duration::from_secs(28);
    while Instant::now() < outage_ends {
        let ready = get(
            &http_client(),
            &format!("http://{}/readyz", sluice.admin),
            "admin",
        )
        .await
        .unwrap();
        assert_eq!(
            ready.status, 200,
            "readiness must stay green during the outage"
        );
        assert_eq!(
            body_of(&sluice, "shop.test").await,
            "before",
            "the last good table keeps serving"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let status = sluice.status().await;
    assert!(
        status["watches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["phase"] == "retrying"),
        "watches must report the outage: {status}"
    );

    wait_until(
        "the changes made during the outage",
        Duration::from_secs(75),
        || async {
            body_of(&sluice, "shop.test").await == "after"
                && body_of(&sluice, "more.test").await == "after"
        },
    )
    .await;
    let report = load.finish().await;
    assert_eq!(
        report.failed, 0,
        "failed requests during the outage: {:?}",
        report.failures
    );
    let status = sluice.status().await;
    let watches = status["watches"].as_array().unwrap();
    for kind in ["Ingress", "EndpointSlice"] {
        let watch = watches.iter().find(|w| w["kind"] == kind).unwrap();
        assert_eq!(
            watch["phase"], "synced",
            "{kind} delivered events, so it is synced again: {status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_status_is_written_once_and_never_loops() {
    let pods = pods(&["pod"], 140).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    cluster.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "sluice", "namespace": "sluice-system"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.99", "ports": [{"port": 80}]},
    }));
    let sluice = Sluice::start_kubernetes(
        &cluster.kubeconfig,
        &["--publish-service", "sluice-system/sluice"],
    )
    .await;

    wait_until("the Ingress status", Duration::from_secs(10), || async {
        cluster.web_status() == json!([{"ip": "10.96.0.99"}])
    })
    .await;

    // The load balancer gets an address: the status follows.
    let mut balancer = cluster
        .api
        .get("Service", "sluice-system", "sluice")
        .unwrap();
    balancer["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}});
    cluster.api.replace_status(balancer).unwrap();
    wait_until("the new address", Duration::from_secs(10), || async {
        cluster.web_status() == json!([{"ip": "203.0.113.7"}])
    })
    .await;

    let publishes = sluice.metric("sluice_config_publishes_total").await;
    let version = cluster.api.resource_version();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cluster.api.resource_version(),
        version,
        "sluice must stop writing once the status is right"
    );
    assert_eq!(
        sluice.metric("sluice_config_publishes_total").await,
        publishes,
        "status writes must not republish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_holds_the_lease_and_writes_status_and_the_other_takes_over() {
    let pods = pods(&["pod"], 150).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let published = json!([{"hostname": "lb.example.com"}]);
    let first = Sluice::start_kubernetes(&cluster.kubeconfig, &leader_flags("replica-1")).await;
    wait_until("replica-1 to lead", Duration::from_secs(10), || async {
        cluster.lease_holder("sluice-system").as_deref() == Some("replica-1")
    })
    .await;
    let second = Sluice::start_kubernetes(&cluster.kubeconfig, &leader_flags("replica-2")).await;
    wait_until("the Ingress status", Duration::from_secs(10), || async {
        cluster.web_status() == published
    })
    .await;
    for sluice in [&first, &second] {
        assert_eq!(
            body_of(sluice, "shop.test").await,
            "pod",
            "every replica proxies"
        );
    }

    drop(first);
    wait_until(
        "replica-2 to take the Lease over",
        Duration::from_secs(15),
        || async { cluster.lease_holder("sluice-system").as_deref() == Some("replica-2") },
    )
    .await;
    let mut stale = cluster.api.get("Ingress", "shop", "web").unwrap();
    stale["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
    cluster.api.replace_status(stale).unwrap();
    wait_until(
        "the new leader to correct the status",
        Duration::from_secs(10),
        || async { cluster.web_status() == published },
    )
    .await;
    assert_eq!(body_of(&second, "shop.test").await, "pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_becomes_a_diagnostic_and_blocks_nothing() {
    let pods = pods(&["good"], 160).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let mut broken = ingress("broken", "broken.test", "missing");
    broken["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = json!("Regex");
    cluster.apply(broken);
    cluster.apply(ingress("dangling", "dangling.test", "missing"));
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &[]).await;

    assert_eq!(body_of(&sluice, "shop.test").await, "good");
    assert_eq!(
        body_of(&sluice, "dangling.test").await,
        "503 Service Unavailable 503 no endpoints available"
    );
    let diagnostics = sluice.routes().await["diagnostics"].to_string();
    assert!(
        diagnostics.contains("Ingress shop/broken") && diagnostics.contains("not a pathType"),
        "{diagnostics}"
    );
    assert!(
        diagnostics.contains("Ingress shop/dangling")
            && diagnostics.contains("Service shop/missing not found"),
        "{diagnostics}"
    );
}

/// A `kubernetes.io/tls` Secret in `shop`, its PEM in `data` (base64), as the API serves it.
fn tls_secret(name: &str, issued: &sluice_testkit::IssuedPem) -> Value {
    use base64::Engine as _;
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "shop"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": encode(&issued.cert), "tls.key": encode(&issued.key)}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_created_after_its_ingress_and_then_updated_is_served_without_a_restart() {
    let pods = pods(&["shop-1"], 140).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let mut secured = ingress("web", "shop.test", "web");
    secured["spec"]["tls"] = json!([{"hosts": ["shop.test"], "secretName": "shop-tls"}]);
    cluster.apply(secured);
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &[]).await;
    let tls = sluice.listen_tls;
    let subject = || support::tls::served_subject(tls, Some("shop.test"));
    assert_eq!(subject(), "CN=sluiceself-signeddefaultcertificate");
    let diagnostics = sluice.routes().await["diagnostics"].to_string();
    assert!(
        diagnostics.contains("Secret shop/shop-tls: the Secret does not exist"),
        "{diagnostics}"
    );

    let ca = sluice_testkit::TestCa::new("cluster CA").unwrap();
    cluster.apply(tls_secret("shop-tls", &ca.server(&["shop.test"]).unwrap()));
    wait_until(
        "the created Secret's certificate",
        Duration::from_secs(10),
        || async { subject() == "CN=shop.test" },
    )
    .await;

    cluster.apply(tls_secret(
        "shop-tls",
        &ca.server(&["renewed.shop.test", "shop.test"]).unwrap(),
    ));
    wait_until(
        "the updated Secret's certificate",
        Duration::from_secs(10),
        || async { subject() == "CN=renewed.shop.test" },
    )
    .await;
}

/// The Events on the Ingress `shop/web` that sluice wrote.
fn events_on_web(cluster: &Cluster) -> Vec<Value> {
    cluster
        .api
        .list("Event", Some("shop"))
        .unwrap()
        .into_iter()
        .filter(|event| {
            event["regarding"]["kind"] == "Ingress"
                && event["regarding"]["name"] == "web"
                && event["reportingController"] == "sluice.dev/ingress-controller"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diagnostic_becomes_an_event_on_its_ingress_and_repeats_extend_its_series() {
    let pods = pods(&["shop-1"], 130).await;
    let cluster = Cluster::serving_web(&[&pods[0]]).await;
    let mut web = ingress("web", "shop.test", "web");
    web["metadata"]["annotations"] =
        json!({"nginx.ingress.kubernetes.io/load-balance": "fastest-please"});
    cluster.apply(web.clone());
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &["--namespace", "shop"]).await;
    wait_until(
        "an Event on the Ingress",
        Duration::from_secs(5),
        || async { !events_on_web(&cluster).is_empty() },
    )
    .await;
    let events = events_on_web(&cluster);
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "IgnoredConfiguration");
    assert!(
        event["note"].as_str().unwrap().contains("load-balance"),
        "{event}"
    );
    assert_eq!(
        event["regarding"]["uid"],
        cluster.api.get("Ingress", "shop", "web").unwrap()["metadata"]["uid"]
    );
    assert!(event["series"].is_null());

    // The same Ingress applied again with another change: the same diagnostic again.
    web["metadata"]["labels"] = json!({"team": "shop"});
    cluster.apply(web);
    wait_until("the series to count 2", Duration::from_secs(5), || async {
        events_on_web(&cluster)
            .first()
            .is_some_and(|event| event["series"]["count"] == 2)
    })
    .await;
    assert_eq!(events_on_web(&cluster).len(), 1, "no second Event");
    // A change elsewhere (a Service) recompiles but does not repeat the Ingress's Event.
    let mut svc = service("web");
    svc["metadata"]["labels"] = json!({"tier": "front"});
    cluster.apply(svc);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let events = events_on_web(&cluster);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["series"]["count"], 2);
    drop(sluice);
}

/// The Gateway API objects of one app in `shop`: sluice's GatewayClass, a Gateway at
/// 127.0.3.20 with one HTTP listener on `port`, and an HTTPRoute sending `path` to `service`.
fn gateway_objects(port: u16) -> [Value; 2] {
    [
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "sluice"},
            "spec": {"controllerName": "sluice.dev/gateway-controller"}
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "shop"},
            "spec": {"gatewayClassName": "sluice",
                     "addresses": [{"type": "IPAddress", "value": "127.0.3.20"}],
                     "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}]}
        }),
    ]
}

fn http_route(path: &str, service: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "app", "namespace": "shop"},
        "spec": {"parentRefs": [{"name": "gw"}],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": path}}],
                            "backendRefs": [{"name": service, "port": 80}]}]}
    })
}

/// `(type, status, reason)` of each condition in a status condition list.
fn conditions(list: &Value) -> Vec<(String, String, String)> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let field = |name: &str| c[name].as_str().unwrap_or_default().to_owned();
            (field("type"), field("status"), field("reason"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_httproute_through_the_api_serves_on_its_gateway_changes_within_50_ms_and_gets_status() {
    let pods = pods(&["shop-1", "shop-2"], 170).await;
    let cluster = Cluster::start().await;
    cluster.apply(service("web"));
    cluster.apply(slice("web", "web-a", &[&pods[0]]));
    cluster.apply(service("next"));
    cluster.apply(slice("next", "next-a", &[&pods[1]]));
    let port = support::free_port();
    for object in gateway_objects(port) {
        cluster.apply(object);
    }
    cluster.apply(http_route("/", "web"));
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &["--namespace", "shop"]).await;
    let url = format!("http://127.0.3.20:{port}/");
    let client = http_client();
    wait_until(
        "the Gateway to serve the route",
        Duration::from_secs(10),
        || async {
            get(&client, &url, "shop.test")
                .await
                .is_ok_and(|r| r.body == "shop-1\n")
        },
    )
    .await;

    let changed = Instant::now();
    cluster.apply(http_route("/", "next"));
    loop {
        let reply = get(&client, &url, "shop.test").await.unwrap();
        if reply.body == "shop-2\n" {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(5),
            "the change never served"
        );
    }
    let elapsed = changed.elapsed();
    eprintln!("HTTPRoute changed → first request to the new backend: {elapsed:?}");
    assert!(elapsed < Duration::from_millis(50), "took {elapsed:?}");

    wait_until(
        "the route's status for its latest generation",
        Duration::from_secs(10),
        || async {
            let route = cluster.api.get("HTTPRoute", "shop", "app").unwrap();
            let observed = &route["status"]["parents"][0]["conditions"][0]["observedGeneration"];
            *observed == route["metadata"]["generation"]
        },
    )
    .await;
    let route = cluster.api.get("HTTPRoute", "shop", "app").unwrap();
    let parent = &route["status"]["parents"][0];
    assert_eq!(parent["controllerName"], "sluice.dev/gateway-controller");
    assert_eq!(parent["parentRef"]["name"], "gw");
    let accepted = (
        "Accepted".to_owned(),
        "True".to_owned(),
        "Accepted".to_owned(),
    );
    assert_eq!(conditions(&parent["conditions"])[0], accepted, "{route}");
    assert!(parent["conditions"][0]["lastTransitionTime"].is_string());
    assert_eq!(
        parent["conditions"][0]["observedGeneration"],
        route["metadata"]["generation"]
    );
    let gateway = cluster.api.get("Gateway", "shop", "gw").unwrap();
    let listener = &gateway["status"]["listeners"][0];
    assert_eq!(listener["attachedRoutes"], 1, "{gateway}");
    let programmed = (
        "Programmed".to_owned(),
        "True".to_owned(),
        "Programmed".to_owned(),
    );
    assert!(
        conditions(&gateway["status"]["conditions"]).contains(&programmed),
        "{gateway}"
    );
    let class = cluster.api.get("GatewayClass", "", "sluice").unwrap();
    assert_eq!(
        conditions(&class["status"]["conditions"])[0].1,
        "True",
        "{class}"
    );
    let features = class["status"]["supportedFeatures"].as_array().unwrap();
    assert!(features.iter().any(|f| f["name"] == "HTTPRoute"), "{class}");
    drop(sluice);
}

/// An HTTPRoute `name` in `shop` with these parentRefs and rules.
fn route_with(name: &str, parent_refs: Value, rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"parentRefs": parent_refs, "rules": rules}
    })
}

/// A route on listener `section` of Gateway `gw`, with `hostnames`, sending to `backend_ref`.
fn listener_route(name: &str, section: &str, hostnames: &[&str], backend_ref: Value) -> Value {
    let mut route = route_with(
        name,
        json!([{"name": "gw", "sectionName": section}]),
        json!([{"backendRefs": [backend_ref]}]),
    );
    route["spec"]["hostnames"] = json!(hostnames);
    route
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_gateway_api_status_condition_reaches_the_api_server_and_a_route_that_leaves_loses_its_parent(
) {
    let pods = pods(&["status-1"], 172).await;
    let cluster = Cluster::start().await;
    cluster.apply(service("web"));
    cluster.apply(slice("web", "web-a", &[&pods[0]]));
    let taken = std::net::TcpListener::bind("127.0.3.22:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let [p1, p2, p3, p4, p5] = [(); 5].map(|()| support::free_port());
    let class = |name: &str, parameters: Option<Value>| {
        let mut class = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": name},
            "spec": {"controllerName": "sluice.dev/gateway-controller"}
        });
        if let Some(parameters) = parameters {
            class["spec"]["parametersRef"] = parameters;
        }
        class
    };
    let gateway = |name: &str, class: &str, ip: &str, listeners: Value| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"gatewayClassName": class,
                     "addresses": [{"type": "IPAddress", "value": ip}],
                     "listeners": listeners}
        })
    };
    let parameters = json!({"group": "", "kind": "ConfigMap", "name": "gateway-parameters"});
    let mut with_parameters = gateway(
        "params",
        "sluice",
        "127.0.3.23",
        json!([{"name": "http", "port": p1, "protocol": "HTTP"}]),
    );
    with_parameters["spec"]["infrastructure"] = json!({"parametersRef": parameters.clone()});
    let web = json!({"name": "web", "port": 80});
    let extension = json!({"type": "ExtensionRef",
                           "extensionRef": {"group": "example.dev", "kind": "Thing", "name": "x"}});
    for object in [
        class("sluice", None),
        class("with-params", Some(parameters)),
        gateway(
            "gw",
            "sluice",
            "127.0.3.21",
            json!([
                {"name": "http", "port": p1, "protocol": "HTTP", "hostname": "*.shop.test"},
                {"name": "dup", "port": p1, "protocol": "HTTP", "hostname": "*.shop.test"},
                {"name": "https", "port": p2, "protocol": "HTTPS", "hostname": "secure.shop.test",
                 "tls": {"certificateRefs": [{"name": "no-such-secret"}]}},
                {"name": "custom", "port": p3, "protocol": "example.com/quic"},
                {"name": "grpc-only", "port": p4, "protocol": "HTTP",
                 "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}},
                {"name": "bad-kinds", "port": p5, "protocol": "HTTP",
                 "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}},
            ]),
        ),
        gateway(
            "taken",
            "sluice",
            "127.0.3.22",
            json!([{"name": "http", "port": taken_port, "protocol": "HTTP"}]),
        ),
        with_parameters,
        gateway(
            "of-other-class",
            "with-params",
            "127.0.3.24",
            json!([{"name": "http", "port": p1, "protocol": "HTTP"}]),
        ),
        listener_route("ok", "http", &["a.shop.test"], web.clone()),
        listener_route("wrong-host", "http", &["a.elsewhere.test"], web.clone()),
        listener_route("no-parent", "nope", &[], web.clone()),
        listener_route("not-allowed", "grpc-only", &[], web.clone()),
        listener_route(
            "invalid-kind",
            "http",
            &[],
            json!({"group": "", "kind": "ConfigMap", "name": "web"}),
        ),
        listener_route(
            "not-found",
            "http",
            &[],
            json!({"name": "missing", "port": 80}),
        ),
        listener_route(
            "not-permitted",
            "http",
            &[],
            json!({"name": "web", "namespace": "other", "port": 80}),
        ),
        route_with(
            "extension-only",
            json!([{"name": "gw", "sectionName": "http"}]),
            json!([{"filters": [extension.clone()], "backendRefs": [web.clone()]}]),
        ),
        route_with(
            "partly",
            json!([{"name": "gw", "sectionName": "http"}]),
            json!([
                {"matches": [{"path": {"value": "/x"}}], "filters": [extension], "backendRefs": [web.clone()]},
                {"backendRefs": [web]},
            ]),
        ),
    ] {
        cluster.apply(object);
    }
    // Another controller's parent on the route that will leave: it must stay.
    let mut ok = cluster.api.get("HTTPRoute", "shop", "ok").unwrap();
    let foreign = json!({"parentRef": {"name": "their-gateway"}, "controllerName": "example.dev/other",
                         "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                         "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    ok["status"] = json!({"parents": [foreign.clone()]});
    cluster.api.replace_status(ok).unwrap();
    // A route that left while no sluice led still shows the parent an earlier leader wrote:
    // the new term sweeps it away and keeps the other controller's.
    cluster.apply(route_with(
        "left-earlier",
        json!([{"name": "their-gateway"}]),
        json!([{"backendRefs": [{"name": "web", "port": 80}]}]),
    ));
    let mut left = cluster
        .api
        .get("HTTPRoute", "shop", "left-earlier")
        .unwrap();
    let earlier = json!({"parentRef": {"name": "gw"}, "controllerName": "sluice.dev/gateway-controller",
                         "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                         "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    left["status"] = json!({"parents": [earlier, foreign]});
    cluster.api.replace_status(left).unwrap();

    let sluice = Sluice::start_kubernetes(
        &cluster.kubeconfig,
        &["--namespace", "shop", "--publish-address", "203.0.113.9"],
    )
    .await;
    let route_conditions = |name: &str| {
        let route = cluster.api.get("HTTPRoute", "shop", name).unwrap();
        let ours = route["status"]["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["controllerName"] == "sluice.dev/gateway-controller")
            .cloned();
        ours.map(|p| conditions(&p["conditions"]))
    };
    let routes = [
        "ok",
        "wrong-host",
        "no-parent",
        "not-allowed",
        "invalid-kind",
        "not-found",
        "not-permitted",
        "extension-only",
        "partly",
    ];
    wait_until("every route's status", Duration::from_secs(10), || async {
        routes.iter().all(|name| route_conditions(name).is_some())
    })
    .await;
    wait_until(
        "the earlier leader's parent entry to go",
        Duration::from_secs(10),
        || async { route_conditions("left-earlier").is_none() },
    )
    .await;
    let left = cluster
        .api
        .get("HTTPRoute", "shop", "left-earlier")
        .unwrap();
    let parents = left["status"]["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 1, "{left}");
    assert_eq!(parents[0]["controllerName"], "example.dev/other");
    let triple = |t: &str, s: &str, r: &str| (t.to_owned(), s.to_owned(), r.to_owned());
    let accepted = triple("Accepted", "True", "Accepted");
    let resolved = triple("ResolvedRefs", "True", "ResolvedRefs");
    let expected_routes = [
        ("ok", vec![accepted.clone(), resolved.clone()]),
        (
            "wrong-host",
            vec![
                triple("Accepted", "False", "NoMatchingListenerHostname"),
                resolved.clone(),
            ],
        ),
        (
            "no-parent",
            vec![
                triple("Accepted", "False", "NoMatchingParent"),
                resolved.clone(),
            ],
        ),
        (
            "not-allowed",
            vec![
                triple("Accepted", "False", "NotAllowedByListeners"),
                resolved.clone(),
            ],
        ),
        (
            "invalid-kind",
            vec![
                accepted.clone(),
                triple("ResolvedRefs", "False", "InvalidKind"),
            ],
        ),
        (
            "not-found",
            vec![
                accepted.clone(),
                triple("ResolvedRefs", "False", "BackendNotFound"),
            ],
        ),
        (
            "not-permitted",
            vec![
                accepted.clone(),
                triple("ResolvedRefs", "False", "RefNotPermitted"),
            ],
        ),
        (
            "extension-only",
            vec![
                triple("Accepted", "False", "UnsupportedValue"),
                resolved.clone(),
            ],
        ),
        (
            "partly",
            vec![
                accepted.clone(),
                triple("PartiallyInvalid", "True", "UnsupportedValue"),
                resolved.clone(),
            ],
        ),
    ];
    for (name, expected) in &expected_routes {
        assert_eq!(route_conditions(name).as_ref(), Some(expected), "{name}");
    }
    let route = cluster.api.get("HTTPRoute", "shop", "ok").unwrap();
    for condition in route["status"]["parents"][1]["conditions"]
        .as_array()
        .unwrap()
    {
        assert_eq!(
            condition["observedGeneration"],
            route["metadata"]["generation"]
        );
        assert!(condition["lastTransitionTime"].is_string(), "{route}");
    }

    wait_until("the Gateways' status", Duration::from_secs(10), || async {
        ["gw", "taken", "params"].iter().all(|name| {
            let gateway = cluster.api.get("Gateway", "shop", name).unwrap();
            gateway["status"]["listeners"].is_array()
        })
    })
    .await;
    let gw = cluster.api.get("Gateway", "shop", "gw").unwrap();
    let status = &gw["status"];
    assert_eq!(
        status["addresses"],
        json!([{"type": "IPAddress", "value": "203.0.113.9"}])
    );
    assert_eq!(
        conditions(&status["conditions"]),
        vec![
            triple("Accepted", "True", "ListenersNotValid"),
            triple("Programmed", "True", "Programmed"),
        ],
        "{gw}"
    );
    let listener = |name: &str| {
        let listeners = status["listeners"].as_array().unwrap();
        let found = listeners.iter().find(|l| l["name"] == name).unwrap();
        (conditions(&found["conditions"]), found.clone())
    };
    let (http, http_status) = listener("http");
    assert_eq!(
        http,
        vec![
            accepted.clone(),
            resolved.clone(),
            triple("Conflicted", "False", "NoConflicts"),
            triple("Programmed", "True", "Programmed"),
        ]
    );
    // ok, invalid-kind, not-found, not-permitted and partly are accepted on it.
    assert_eq!(http_status["attachedRoutes"], 5, "{gw}");
    let kinds: Vec<&str> = http_status["supportedKinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["HTTPRoute", "GRPCRoute"]);
    assert!(listener("dup")
        .0
        .contains(&triple("Conflicted", "True", "HostnameConflict")));
    assert!(listener("https").0.contains(&triple(
        "ResolvedRefs",
        "False",
        "InvalidCertificateRef"
    )));
    assert!(listener("custom")
        .0
        .contains(&triple("Accepted", "False", "UnsupportedProtocol")));
    assert!(listener("bad-kinds").0.contains(&triple(
        "ResolvedRefs",
        "False",
        "InvalidRouteKinds"
    )));
    let taken_status = cluster.api.get("Gateway", "shop", "taken").unwrap();
    let taken_listener = conditions(&taken_status["status"]["listeners"][0]["conditions"]);
    assert!(
        taken_listener.contains(&triple("Accepted", "False", "PortUnavailable")),
        "{taken_status}"
    );
    assert!(
        conditions(&taken_status["status"]["conditions"]).contains(&triple(
            "Programmed",
            "False",
            "Invalid"
        )),
        "{taken_status}"
    );
    let params = cluster.api.get("Gateway", "shop", "params").unwrap();
    assert_eq!(
        conditions(&params["status"]["conditions"])[0],
        triple("Accepted", "False", "InvalidParameters"),
        "{params}"
    );
    let class = cluster.api.get("GatewayClass", "", "with-params").unwrap();
    assert_eq!(
        conditions(&class["status"]["conditions"]),
        vec![triple("Accepted", "False", "InvalidParameters")],
        "{class}"
    );
    let other = cluster
        .api
        .get("Gateway", "shop", "of-other-class")
        .unwrap();
    assert!(other["status"]["listeners"].is_null(), "{other}");

    // The route leaves for a Gateway sluice does not serve: sluice's parent entry goes, the
    // other controller's stays.
    cluster.apply(route_with(
        "ok",
        json!([{"name": "their-gateway"}]),
        json!([{"backendRefs": [{"name": "web", "port": 80}]}]),
    ));
    wait_until(
        "sluice's parent entry to go",
        Duration::from_secs(10),
        || async { route_conditions("ok").is_none() },
    )
    .await;
    let route = cluster.api.get("HTTPRoute", "shop", "ok").unwrap();
    let parents = route["status"]["parents"].as_array().unwrap();
    assert_eq!(parents.len(), 1, "{route}");
    assert_eq!(parents[0]["controllerName"], "example.dev/other");
    drop((sluice, taken));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tls_policy_gets_its_ancestor_status_and_keeps_other_controllers_ancestors() {
    let pods = pods(&["btls-1"], 174).await;
    let cluster = Cluster::start().await;
    cluster.apply(service("web"));
    cluster.apply(slice("web", "web-a", &[&pods[0]]));
    let port = support::free_port();
    for object in gateway_objects(port) {
        cluster.apply(object);
    }
    cluster.apply(http_route("/", "web"));
    cluster.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
        "metadata": {"name": "web-tls", "namespace": "shop"},
        "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                 "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "web-ca"}],
                                "hostname": "web.shop.internal"}}
    }));
    let mut policy = cluster
        .api
        .get("BackendTLSPolicy", "shop", "web-tls")
        .unwrap();
    let foreign = json!({"ancestorRef": {"name": "their-gateway"}, "controllerName": "example.dev/other",
                         "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                         "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    policy["status"] = json!({"ancestors": [foreign]});
    cluster.api.replace_status(policy).unwrap();
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &["--namespace", "shop"]).await;
    let ours = || {
        let policy = cluster
            .api
            .get("BackendTLSPolicy", "shop", "web-tls")
            .unwrap();
        let ancestor = policy["status"]["ancestors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["controllerName"] == "sluice.dev/gateway-controller")
            .cloned();
        (policy, ancestor)
    };
    wait_until("the policy's status", Duration::from_secs(10), || async {
        ours().1.is_some()
    })
    .await;
    let (policy, ancestor) = ours();
    let ancestor = ancestor.unwrap();
    assert_eq!(ancestor["ancestorRef"]["name"], "gw", "{policy}");
    assert_eq!(ancestor["ancestorRef"]["kind"], "Gateway", "{policy}");
    let triple = |t: &str, s: &str, r: &str| (t.to_owned(), s.to_owned(), r.to_owned());
    assert_eq!(
        conditions(&ancestor["conditions"]),
        [
            triple("Accepted", "False", "NoValidCACertificate"),
            triple("ResolvedRefs", "False", "InvalidCACertificateRef"),
        ]
    );
    assert_eq!(
        ancestor["conditions"][0]["observedGeneration"],
        policy["metadata"]["generation"]
    );
    let ancestors = policy["status"]["ancestors"].as_array().unwrap();
    assert!(
        ancestors
            .iter()
            .any(|a| a["controllerName"] == "example.dev/other"),
        "the other controller's ancestor stays: {policy}"
    );
    // Nothing reaches the pod while the policy has no CA: 503, never plaintext.
    let client = http_client();
    let reply = get(&client, &format!("http://127.0.3.20:{port}/"), "shop.test")
        .await
        .unwrap();
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(pods[0].requests(), 0);
    drop(sluice);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_set_through_the_api_serves_on_its_gateway_and_gets_its_status() {
    let cluster = Cluster::start().await;
    listener_set_serves_and_gets_its_status(
        &cluster,
        "gateway.networking.k8s.io/v1",
        "ListenerSet",
        176,
    )
    .await;
}

/// Where only the experimental channel's CRD is installed, sluice watches `XListenerSet` in its
/// place and writes its status there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_experimental_xlistenerset_through_the_api_serves_on_its_gateway_and_gets_its_status() {
    let cluster = Cluster::start_with(Options {
        undiscovered_kinds: vec!["ListenerSet"],
        ..Options::default()
    })
    .await;
    listener_set_serves_and_gets_its_status(
        &cluster,
        "gateway.networking.x-k8s.io/v1alpha1",
        "XListenerSet",
        177,
    )
    .await;
    assert!(
        cluster.api.list("ListenerSet", None).unwrap().is_empty(),
        "nothing was written as a standard ListenerSet"
    );
}

/// A set `team-a` of `kind` attached to Gateway `gw`, and an HTTPRoute on it: the route serves
/// on the Gateway's address, and the set, the Gateway and the route get their status.
async fn listener_set_serves_and_gets_its_status(
    cluster: &Cluster,
    api_version: &str,
    kind: &str,
    pod: u8,
) {
    let pods = pods(&["lset-1"], pod).await;
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    cluster.apply(service("web"));
    cluster.apply(slice("web", "web-a", &[&pods[0]]));
    let port = support::free_port();
    let [class, mut gateway] = gateway_objects(port);
    gateway["spec"]["allowedListeners"] = json!({"namespaces": {"from": "Same"}});
    cluster.apply(class);
    cluster.apply(gateway);
    cluster.apply(json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "team-a", "namespace": "shop"},
        "spec": {"parentRef": {"name": "gw"},
                 "listeners": [{"name": "team-a", "port": port, "protocol": "HTTP", "hostname": "team-a.shop.test"}]}
    }));
    cluster.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "team-a", "namespace": "shop"},
        "spec": {"parentRefs": [{"group": group, "kind": kind, "name": "team-a"}],
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}
    }));
    let sluice = Sluice::start_kubernetes(&cluster.kubeconfig, &["--namespace", "shop"]).await;
    let url = format!("http://127.0.3.20:{port}/");
    let client = http_client();
    wait_until(
        "the ListenerSet's route to serve",
        Duration::from_secs(10),
        || async {
            get(&client, &url, "team-a.shop.test")
                .await
                .is_ok_and(|r| r.body == "lset-1\n")
        },
    )
    .await;
    wait_until(
        "the ListenerSet's status",
        Duration::from_secs(10),
        || async {
            let set = cluster.api.get(kind, "shop", "team-a").unwrap();
            set["status"]["listeners"][0]["attachedRoutes"] == 1
        },
    )
    .await;
    let set = cluster.api.get(kind, "shop", "team-a").unwrap();
    let accepted = (
        "Accepted".to_owned(),
        "True".to_owned(),
        "Accepted".to_owned(),
    );
    assert_eq!(
        conditions(&set["status"]["conditions"])[0],
        accepted,
        "{set}"
    );
    assert_eq!(
        set["status"]["conditions"][0]["observedGeneration"],
        set["metadata"]["generation"]
    );
    let gateway = cluster.api.get("Gateway", "shop", "gw").unwrap();
    assert_eq!(gateway["status"]["attachedListenerSets"], 1, "{gateway}");
    let route = cluster.api.get("HTTPRoute", "shop", "team-a").unwrap();
    assert_eq!(
        route["status"]["parents"][0]["parentRef"]["kind"], kind,
        "{route}"
    );
    // The Gateway's own hostname-less listener does not take the ListenerSet's route.
    let reply = get(&client, &url, "other.shop.test").await.unwrap();
    assert_eq!(reply.status, 404, "{reply:?}");
    drop(sluice);
}
