//! End-to-end: `sluice serve --kubernetes` against the test API server, with real backends on loopback and constant load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_testapi::TestApiServer;
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
        let api = TestApiServer::start("127.0.0.1:0".parse().unwrap())
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
