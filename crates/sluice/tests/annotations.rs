//! End-to-end: ingress-nginx's annotations with ingress-nginx's semantics, through the real binary and real backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{http_client, send, Reply};
use support::{annotated_ingress, ingress, pods_on, run_check, service, write_manifest, Sluice};

const ALLOW: &str = "nginx.ingress.kubernetes.io/allowlist-source-range";
const WHITELIST: &str = "nginx.ingress.kubernetes.io/whitelist-source-range";
const DENY: &str = "nginx.ingress.kubernetes.io/denylist-source-range";

async fn get_as(sluice: &Sluice, path: &str, forwarded_for: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = forwarded_for
        .map(|client| vec![("x-forwarded-for", client)])
        .unwrap_or_default();
    send(
        &http_client(),
        Method::GET,
        &sluice.url(path),
        "shop.test",
        &headers,
        Bytes::new(),
    )
    .await
    .unwrap()
}

/// `shop.test`: `/` open (Ingress `open`), `/admin` with `annotations` (Ingress `admin`),
/// both to one echo pod.
fn write_shop(dir: &std::path::Path, pod: std::net::SocketAddr, annotations: &[(&str, &str)]) {
    write_manifest(
        dir,
        "shop.yaml",
        &[
            ingress("open", "shop.test", &[("/", "Prefix", "web", 80)]),
            annotated_ingress(
                "admin",
                "shop.test",
                &[("/admin", "Prefix", "web", 80)],
                annotations,
            ),
            service("web", 80, &[pod]),
        ],
    );
}

/// `shop.test` with one Ingress, `shop`, sending `path` (Prefix) to `pod` with `annotations`.
fn write_route(
    dir: &std::path::Path,
    pod: std::net::SocketAddr,
    path: &str,
    annotations: &[(&str, &str)],
) {
    write_manifest(
        dir,
        "shop.yaml",
        &[
            annotated_ingress(
                "shop",
                "shop.test",
                &[(path, "Prefix", "web", 80)],
                annotations,
            ),
            service("web", 80, &[pod]),
        ],
    );
}

/// A directory with `shop.yaml` holding `documents`, and sluice serving it.
async fn serve_shop(documents: &[String]) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "shop.yaml", documents);
    let sluice = Sluice::start(dir.path(), &[]).await;
    (dir, sluice)
}

/// One echo pod on pod IP `ip`, and a directory with `shop.test` written with `annotations`
/// on `/admin` (for `sluice check`, or for a sluice started with more flags).
async fn shop_files(
    ip: u8,
    annotations: &[(&str, &str)],
) -> (sluice_testkit::EchoBackend, tempfile::TempDir) {
    let pod = pods_on(&["web"], ip, 0).await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    write_shop(dir.path(), pod.addr(), annotations);
    (pod, dir)
}

/// One echo pod on pod IP `ip`, `shop.test` written with `annotations` on `/admin`, and sluice
/// serving it with `flags`.
struct Shop {
    pod: sluice_testkit::EchoBackend,
    dir: tempfile::TempDir,
    sluice: Sluice,
}

impl Shop {
    async fn start(ip: u8, annotations: &[(&str, &str)], flags: &[&str]) -> Self {
        let (pod, dir) = shop_files(ip, annotations).await;
        let sluice = Sluice::start(dir.path(), flags).await;
        Self { pod, dir, sluice }
    }

    /// Rewrites the `/admin` annotations and waits for the table after `generation`.
    async fn annotate(&self, annotations: &[(&str, &str)], generation: u64) {
        write_shop(self.dir.path(), self.pod.addr(), annotations);
        self.sluice.wait_for_generation_after(generation).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_admits_its_ranges_and_answers_403_to_everyone_else() {
    let shop = Shop::start(140, &[(ALLOW, "10.0.0.0/8, 2001:db8::/32")], &[]).await;
    let refused = get_as(&shop.sluice, "/admin", None).await;
    assert_eq!(refused.status, 403, "127.0.0.1 is outside the allowlist");
    assert_eq!(refused.body, "403 forbidden\n");
    assert_eq!(shop.pod.requests(), 0, "the pod never saw it");
    // Only the annotated Ingress's routes are restricted.
    assert_eq!(get_as(&shop.sluice, "/", None).await.status, 200);
    // The older name, with the client's own range.
    shop.annotate(&[(WHITELIST, "127.0.0.0/8")], 1).await;
    assert_eq!(get_as(&shop.sluice, "/admin", None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_denylist_is_checked_first_and_wins_over_the_allowlist() {
    let both = [(ALLOW, "127.0.0.0/8"), (DENY, "127.0.0.1")];
    let shop = Shop::start(141, &both, &[]).await;
    assert_eq!(get_as(&shop.sluice, "/admin", None).await.status, 403);
    shop.annotate(&[(DENY, "192.0.2.0/24")], 1).await;
    assert_eq!(get_as(&shop.sluice, "/admin", None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_apply_to_the_client_behind_a_trusted_proxy() {
    let (_pod, dir) = shop_files(142, &[(ALLOW, "10.0.0.0/8")]).await;
    let trusted = Sluice::start(dir.path(), &["--trusted-proxies", "127.0.0.0/8"]).await;
    assert_eq!(
        get_as(&trusted, "/admin", Some("10.1.2.3")).await.status,
        200
    );
    assert_eq!(
        get_as(&trusted, "/admin", Some("192.168.1.1")).await.status,
        403
    );
    // From a peer that is not trusted, X-Forwarded-For is not believed.
    let untrusted = Sluice::start(dir.path(), &[]).await;
    assert_eq!(
        get_as(&untrusted, "/admin", Some("10.1.2.3")).await.status,
        403
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_range_is_an_error_and_its_routes_answer_503() {
    let (pod, dir) = shop_files(143, &[(ALLOW, "10.0.0.0/8, 10.0.0.300")]).await;
    let (code, report) = run_check(dir.path());
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("\"10.0.0.300\" is not an IPv4 or IPv6 address or CIDR range"),
        "{report}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 503);
    assert_eq!(get_as(&sluice, "/", None).await.status, 200);
    assert_eq!(pod.requests(), 1);
}

const PERMANENT: &str = "nginx.ingress.kubernetes.io/permanent-redirect";
const TEMPORAL: &str = "nginx.ingress.kubernetes.io/temporal-redirect";

/// Annotations, and the status and `Location` they give `/admin/x`.
type RedirectCase = (&'static [(&'static str, &'static str)], (u16, &'static str));

async fn location_of(sluice: &Sluice, path: &str) -> (u16, String) {
    let reply = get_as(sluice, path, None).await;
    let location = reply
        .headers
        .get("location")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (reply.status.as_u16(), location)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_and_temporal_redirects_fill_in_nginx_variables_with_their_codes() {
    let shop = Shop::start(144, &[(PERMANENT, "https://new.test$request_uri")], &[]).await;
    let sluice = &shop.sluice;
    assert_eq!(
        location_of(sluice, "/admin/a?b=1").await,
        (301, "https://new.test/admin/a?b=1".to_owned())
    );
    let cases: [RedirectCase; 3] = [
        (
            &[
                (PERMANENT, "https://new.test/"),
                ("nginx.ingress.kubernetes.io/permanent-redirect-code", "308"),
            ],
            (308, "https://new.test/"),
        ),
        (
            &[(TEMPORAL, "$scheme://www.$host$request_uri")],
            (302, "http://www.shop.test/admin/x"),
        ),
        (
            // Both: the temporal one wins, as in ingress-nginx; an invalid code keeps 302.
            &[
                (TEMPORAL, "/elsewhere"),
                ("nginx.ingress.kubernetes.io/temporal-redirect-code", "399"),
                (PERMANENT, "https://new.test/"),
            ],
            (302, "/elsewhere"),
        ),
    ];
    for (generation, (annotations, (code, location))) in (1..).zip(cases) {
        shop.annotate(annotations, generation).await;
        assert_eq!(
            location_of(sluice, "/admin/x").await,
            (code, location.to_owned()),
            "{annotations:?}"
        );
    }
    let (_, report) = run_check(shop.dir.path());
    assert!(
        report.contains("ignored: nginx.ingress.kubernetes.io/temporal-redirect is also set"),
        "{report}"
    );
    assert!(report.contains("\"399\""), "{report}");
    assert_eq!(shop.pod.requests(), 0, "redirects never reach the pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_with_another_nginx_variable_is_a_warning_and_the_route_serves() {
    let (_pod, dir) = shop_files(145, &[(PERMANENT, "https://new.test$uri")]).await;
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("the redirect uses $uri, which sluice does not fill in"),
        "{report}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(location_of(&sluice, "/admin").await, (200, String::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_root_redirects_only_the_root_on_the_clients_scheme_and_host() {
    let pods = pods_on(&["web"], 146, 0).await;
    let (_dir, sluice) = serve_shop(&[
        annotated_ingress(
            "shop",
            "shop.test",
            &[("/", "Prefix", "web", 80)],
            &[("nginx.ingress.kubernetes.io/app-root", "/app1")],
        ),
        service("web", 80, &[pods[0].addr()]),
    ])
    .await;
    assert_eq!(
        location_of(&sluice, "/").await,
        (302, "http://shop.test/app1".to_owned())
    );
    assert_eq!(location_of(&sluice, "/app1").await.0, 200);
    assert_eq!(location_of(&sluice, "/other").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_vhost_and_x_forwarded_prefix_reach_the_pod_byte_for_byte() {
    let backend = sluice_testkit::RawBackend::start(support::pod_ip(147))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_shop(
        dir.path(),
        backend.addr(),
        &[
            (
                "nginx.ingress.kubernetes.io/upstream-vhost",
                "internal.svc:8080",
            ),
            ("nginx.ingress.kubernetes.io/x-forwarded-prefix", "/admin"),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(get_as(&sluice, "/admin/users", None).await.status, 200);
    let request = backend.only_request();
    assert_eq!(request.header_values("host"), ["internal.svc:8080"]);
    assert_eq!(request.header_values("x-forwarded-prefix"), ["/admin"]);
    assert_eq!(request.header_values("x-forwarded-host"), ["shop.test"]);
    // The open route keeps the client's Host.
    assert_eq!(get_as(&sluice, "/", None).await.status, 200);
    let requests = backend.requests();
    assert_eq!(requests[1].header_values("host"), ["shop.test"]);
    assert!(requests[1].header_values("x-forwarded-prefix").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_header_annotations_set_request_and_response_headers() {
    let backend = sluice_testkit::RawBackend::start(support::pod_ip(148))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_shop(
        dir.path(),
        backend.addr(),
        &[
            (
                "sluice.dev/request-headers",
                "X-Team: shop\nX-Client: replaced\nnot a header",
            ),
            (
                "sluice.dev/response-headers",
                "X-Frame-Options: DENY\nCache-Control: no-store",
            ),
        ],
    );
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("the line \"not a header\" is not a header (Name: value)"),
        "{report}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let reply = send(
        &http_client(),
        Method::GET,
        &sluice.url("/admin"),
        "shop.test",
        &[("x-client", "from the client")],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["x-frame-options"], "DENY");
    assert_eq!(reply.headers["cache-control"], "no-store");
    let request = backend.only_request();
    assert_eq!(request.header_values("x-team"), ["shop"]);
    assert_eq!(request.header_values("x-client"), ["replaced"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_access_log_false_leaves_the_ingress_out_of_the_access_log() {
    let (_pod, dir) = shop_files(
        149,
        &[("nginx.ingress.kubernetes.io/enable-access-log", "false")],
    )
    .await;
    let log = dir.path().join("access.log");
    let sluice = Sluice::start(
        dir.path(),
        &[
            "--access-log",
            "json",
            "--access-log-file",
            log.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(get_as(&sluice, "/admin/quiet", None).await.status, 200);
    assert_eq!(get_as(&sluice, "/logged", None).await.status, 200);
    support::wait_until(
        "the logged line",
        std::time::Duration::from_secs(5),
        || async { std::fs::read_to_string(&log).is_ok_and(|text| text.contains("/logged")) },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(!text.contains("/admin/quiet"));
}

async fn with_origin(sluice: &Sluice, method: Method, origin: &str) -> Reply {
    send(
        &http_client(),
        method,
        &sluice.url("/admin/api"),
        "shop.test",
        &[("origin", origin), ("access-control-request-method", "PUT")],
        Bytes::new(),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_answers_an_allowed_preflight_itself_and_gives_other_origins_nothing() {
    let shop = Shop::start(
        150,
        &[
            ("nginx.ingress.kubernetes.io/enable-cors", "true"),
            (
                "nginx.ingress.kubernetes.io/cors-allow-origin",
                "https://app.test, https://*.example.com",
            ),
            ("nginx.ingress.kubernetes.io/cors-expose-headers", "X-Total"),
        ],
        &[],
    )
    .await;
    let sluice = &shop.sluice;
    let preflight = with_origin(sluice, Method::OPTIONS, "https://ui.example.com").await;
    assert_eq!(preflight.status, 204);
    let header = |reply: &Reply, name: &str| {
        reply
            .headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let expected = [
        ("access-control-allow-origin", "https://ui.example.com"),
        ("access-control-allow-credentials", "true"),
        ("access-control-allow-methods", "GET, PUT, POST, DELETE, PATCH, OPTIONS"),
        ("access-control-allow-headers", "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization"),
        ("access-control-expose-headers", "X-Total"),
        ("access-control-max-age", "1728000"),
    ];
    for (name, value) in expected {
        assert_eq!(header(&preflight, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(
        shop.pod.requests(),
        0,
        "the preflight never reached the pod"
    );
    // An allowed origin's request goes to the pod and comes back with the headers.
    let allowed = with_origin(sluice, Method::GET, "https://app.test").await;
    assert_eq!(allowed.status, 200);
    assert_eq!(
        header(&allowed, "access-control-allow-origin").as_deref(),
        Some("https://app.test")
    );
    // Another origin: no CORS header, and its OPTIONS is the pod's to answer.
    for origin in [
        "https://evil.test",
        "https://a.b.example.com",
        "http://app.test",
    ] {
        let refused = with_origin(sluice, Method::GET, origin).await;
        assert_eq!(refused.status, 200);
        assert_eq!(
            header(&refused, "access-control-allow-origin"),
            None,
            "{origin}"
        );
    }
    let before = shop.pod.requests();
    let options = with_origin(sluice, Method::OPTIONS, "https://evil.test").await;
    assert_eq!(header(&options, "access-control-allow-origin"), None);
    assert_eq!(shop.pod.requests(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_defaults_to_any_origin_and_cors_settings_without_enable_cors_warn() {
    let shop = Shop::start(
        151,
        &[
            ("nginx.ingress.kubernetes.io/enable-cors", "true"),
            (
                "nginx.ingress.kubernetes.io/cors-allow-credentials",
                "false",
            ),
        ],
        &[],
    )
    .await;
    let sluice = &shop.sluice;
    let reply = with_origin(sluice, Method::GET, "https://anyone.test").await;
    assert_eq!(reply.headers["access-control-allow-origin"], "*");
    assert!(reply
        .headers
        .get("access-control-allow-credentials")
        .is_none());
    let cors_only = [(
        "nginx.ingress.kubernetes.io/cors-allow-origin",
        "https://app.test",
    )];
    write_shop(shop.dir.path(), shop.pod.addr(), &cors_only);
    let (_, report) = run_check(shop.dir.path());
    assert!(
        report.contains("cors-allow-origin]: ignored: enable-cors is not \"true\""),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_read_timeout_bounds_the_wait_for_a_slow_pod_on_that_ingress_only() {
    let pods = pods_on(&["slow"], 152, 0).await;
    let dir = tempfile::tempdir().unwrap();
    // The echo pod sleeps on /__testkit/sleep/MS: one exact path under the timeout, the rest
    // of the host without it.
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress("open", "shop.test", &[("/", "Prefix", "web", 80)]),
            annotated_ingress(
                "slow",
                "shop.test",
                &[("/__testkit/sleep/3000", "Exact", "web", 80)],
                &[
                    ("nginx.ingress.kubernetes.io/proxy-read-timeout", "1"),
                    ("nginx.ingress.kubernetes.io/proxy-next-upstream", "off"),
                ],
            ),
            service("web", 80, &[pods[0].addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--response-header-timeout", "10s"]).await;
    let started = std::time::Instant::now();
    let reply = get_as(&sluice, "/__testkit/sleep/3000", None).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 504);
    assert!(
        waited >= std::time::Duration::from_millis(900)
            && waited < std::time::Duration::from_millis(2_900),
        "answered after {waited:?}"
    );
    // The other Ingress keeps the proxy-wide timeout: the pod's answer after 1.5 s arrives.
    let reply = get_as(&sluice, "/__testkit/sleep/1500", None).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_timeout_is_a_warning_and_the_proxy_wide_one_applies() {
    let (_pod, dir) = shop_files(
        153,
        &[("nginx.ingress.kubernetes.io/proxy-connect-timeout", "0")],
    )
    .await;
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("proxy-connect-timeout]: invalid value \"0\"")
            && report.contains("--connect-timeout applies"),
        "{report}"
    );
}

const REWRITE: &str = "nginx.ingress.kubernetes.io/rewrite-target";

/// GETs `path` on `host` and returns the status.
async fn status_on(sluice: &Sluice, host: &str, path: &str) -> u16 {
    let reply = send(
        &http_client(),
        Method::GET,
        &sluice.url(path),
        host,
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    reply.status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_target_fills_in_groups_or_replaces_the_whole_path_and_regex_covers_the_host() {
    let backend = sluice_testkit::RawBackend::start(support::pod_ip(154))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pod = backend.addr();
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            annotated_ingress(
                "api",
                "shop.test",
                &[("\"/api(/|$)(.*)\"", "ImplementationSpecific", "web", 80)],
                &[(REWRITE, "/$2")],
            ),
            annotated_ingress(
                "old",
                "shop.test",
                &[("/old", "Prefix", "web", 80)],
                &[(REWRITE, "/new")],
            ),
            ingress("plain", "shop.test", &[("/Static", "Prefix", "web", 80)]),
            service("web", 80, &[pod]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    for path in [
        "/api/users/7?x=1",
        "/API",
        "/old/sub/x?q=1",
        "/static/app.js",
    ] {
        assert_eq!(status_on(&sluice, "shop.test", path).await, 200, "{path}");
    }
    let lines: Vec<String> = backend
        .requests()
        .iter()
        .map(|request| request.request_line().to_owned())
        .collect();
    assert_eq!(
        lines,
        [
            "GET /users/7?x=1 HTTP/1.1",
            "GET / HTTP/1.1",
            "GET /new?q=1 HTTP/1.1",
            // Another Ingress of the host: now a case-insensitive regex, not rewritten.
            "GET /static/app.js HTTP/1.1",
        ]
    );
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("sets use-regex or rewrite-target for host shop.test"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_path_with_a_trailing_slash_redirects_the_bare_directory_unless_turned_off() {
    let pods = pods_on(&["web"], 155, 0).await;
    let (_dir, sluice) = serve_shop(&[
        ingress("shop", "shop.test", &[("/foo/", "Prefix", "web", 80)]),
        annotated_ingress(
            "kept",
            "kept.test",
            &[("/foo/", "Prefix", "web", 80)],
            &[("sluice.dev/trailing-slash-redirect", "false")],
        ),
        service("web", 80, &[pods[0].addr()]),
    ])
    .await;
    assert_eq!(
        location_of(&sluice, "/foo?a=1").await,
        (301, "http://shop.test/foo/?a=1".to_owned())
    );
    assert_eq!(location_of(&sluice, "/foo/").await.0, 200);
    assert_eq!(location_of(&sluice, "/foo/bar").await.0, 200);
    assert_eq!(pods[0].requests(), 2);
    assert_eq!(status_on(&sluice, "kept.test", "/foo").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_alias_shares_the_hosts_routes_and_www_redirects_the_other_name() {
    let pods = pods_on(&["web"], 156, 0).await;
    let (dir, sluice) = serve_shop(&[
        annotated_ingress(
            "shop",
            "www.shop.test",
            &[("/", "Prefix", "web", 80)],
            &[
                (
                    "nginx.ingress.kubernetes.io/server-alias",
                    "shop.example, other.test",
                ),
                ("nginx.ingress.kubernetes.io/from-to-www-redirect", "true"),
            ],
        ),
        // A later Ingress of the same host adds a path the alias serves too.
        ingress("extra", "www.shop.test", &[("/extra", "Exact", "web", 80)]),
        ingress("other", "other.test", &[("/", "Prefix", "web", 80)]),
        service("web", 80, &[pods[0].addr()]),
    ])
    .await;
    assert_eq!(status_on(&sluice, "shop.example", "/extra").await, 200);
    assert_eq!(status_on(&sluice, "unknown.test", "/").await, 404);
    let redirect = |path: &'static str, host: &'static str| {
        let sluice = &sluice;
        async move {
            let reply = send(
                &http_client(),
                Method::GET,
                &sluice.url(path),
                host,
                &[],
                Bytes::new(),
            )
            .await
            .unwrap();
            let location = reply
                .headers
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned());
            (reply.status.as_u16(), location)
        }
    };
    assert_eq!(
        redirect("/", "shop.test").await,
        (308, Some("http://www.shop.test".to_owned()))
    );
    assert_eq!(
        redirect("/a/b?c=1", "shop.test:8080").await,
        (308, Some("http://www.shop.test:8080/a/b?c=1".to_owned()))
    );
    assert_eq!(pods[0].requests(), 1);
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("server-alias other.test is a host of its own"),
        "{report}"
    );
}

/// Request headers, as a test case lists them.
type Headers = &'static [(&'static str, &'static str)];

/// GETs `/` on `shop.test` with `headers` and returns the status.
async fn get_with(sluice: &Sluice, headers: &[(&str, &str)]) -> u16 {
    let reply = send(
        &http_client(),
        Method::GET,
        &sluice.url("/"),
        "shop.test",
        headers,
        Bytes::new(),
    )
    .await
    .unwrap();
    reply.status.as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_takes_requests_by_header_then_cookie_then_weight_within_two_percent() {
    let pods = pods_on(&["stable", "beta"], 157, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let canary = |name: &str, host: &str, extra: &[(&'static str, &'static str)]| {
        let mut annotations = vec![
            ("nginx.ingress.kubernetes.io/canary", "true"),
            ("nginx.ingress.kubernetes.io/canary-by-header", "X-Canary"),
            ("nginx.ingress.kubernetes.io/canary-by-cookie", "canary"),
            ("nginx.ingress.kubernetes.io/canary-weight", "30"),
        ];
        annotations.extend_from_slice(extra);
        annotated_ingress(name, host, &[("/", "Prefix", "beta", 80)], &annotations)
    };
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress("main", "shop.test", &[("/", "Prefix", "stable", 80)]),
            canary("canary", "shop.test", &[]),
            canary("lonely", "lonely.test", &[]),
            service("stable", 80, &[pods[0].addr()]),
            service("beta", 80, &[pods[1].addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let counts = || (pods[0].requests(), pods[1].requests());
    let cases: [(Headers, (u64, u64)); 4] = [
        (
            &[("x-canary", "always"), ("cookie", "canary=never")],
            (0, 1),
        ),
        (
            &[("x-canary", "never"), ("cookie", "canary=always")],
            (1, 0),
        ),
        (&[("cookie", "a=b; canary=always")], (0, 1)),
        (&[("cookie", "canary=never")], (1, 0)),
    ];
    for (headers, (stable, beta)) in cases {
        let before = counts();
        assert_eq!(get_with(&sluice, headers).await, 200);
        let after = counts();
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (stable, beta),
            "{headers:?}"
        );
    }
    // By weight: 30 % of 10,000 requests, within ±2 %.
    let before = counts();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = sluice.url("/");
        tasks.push(tokio::spawn(async move {
            let client = http_client();
            for _ in 0..1250 {
                let reply = send(&client, Method::GET, &url, "shop.test", &[], Bytes::new());
                assert_eq!(reply.await.unwrap().status, 200);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let beta = (counts().1 - before.1) as f64 / 10_000.0;
    assert!((0.28..=0.32).contains(&beta), "canary share {beta}");
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains(
            "canary for host lonely.test path /: no main Ingress serves this host and path"
        ),
        "{report}"
    );
}

const AUTH_URL: &str = "nginx.ingress.kubernetes.io/auth-url";

async fn request_with(
    sluice: &Sluice,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &'static str,
) -> Reply {
    send(
        &http_client(),
        method,
        &sluice.url(path),
        "shop.test",
        headers,
        Bytes::from_static(body.as_bytes()),
    )
    .await
    .unwrap()
}

fn header_of(reply: &Reply, name: &str) -> Vec<String> {
    reply
        .headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_auth_runs_the_oauth2_proxy_flow_with_nginx_auth_request_semantics() {
    let pod = sluice_testkit::RawBackend::start(support::pod_ip(158))
        .await
        .unwrap();
    let auth = sluice_testkit::start_auth_service(support::pod_ip(159))
        .await
        .unwrap();
    let auth_url = format!("http://{}/oauth2/auth", auth.addr());
    let dir = tempfile::tempdir().unwrap();
    write_route(
        dir.path(),
        pod.addr(),
        "/admin",
        &[
            (AUTH_URL, &auth_url),
            (
                "nginx.ingress.kubernetes.io/auth-signin",
                "https://auth.test/oauth2/start",
            ),
            (
                "nginx.ingress.kubernetes.io/auth-response-headers",
                "X-Auth-Request-User, X-Auth-Request-Email",
            ),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    // Not signed in: the auth service's 401 becomes a redirect to the sign-in page.
    let reply = request_with(&sluice, Method::GET, "/admin/a?x=1", &[], "").await;
    assert_eq!(reply.status, 302);
    assert_eq!(
        header_of(&reply, "location"),
        ["https://auth.test/oauth2/start?rd=http://shop.test%2Fadmin%2Fa%3Fx%3D1"]
    );
    let asked = auth.only_request();
    assert_eq!(asked.request_line(), "GET /oauth2/auth HTTP/1.1");
    assert_eq!(
        asked.header_values("x-original-url"),
        ["http://shop.test/admin/a?x=1"]
    );
    assert_eq!(asked.header_values("x-original-method"), ["GET"]);
    assert_eq!(
        asked.header_values("x-auth-request-redirect"),
        ["/admin/a?x=1"]
    );
    assert_eq!(
        asked.header_values("host"),
        [auth.addr().to_string().as_str()]
    );
    assert_eq!(pod.requests().len(), 0, "the pod never saw it");
    // Signed in: the pod gets the auth service's headers, never the client's own copies.
    let cookie = format!("{}=ana", sluice_testkit::SESSION_COOKIE);
    let signed_in = [
        ("cookie", cookie.as_str()),
        ("x-auth-request-user", "mallory"),
    ];
    let reply = request_with(&sluice, Method::POST, "/admin/save", &signed_in, "payload").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        header_of(&reply, "set-cookie"),
        ["_oauth2_proxy=ana; Path=/; HttpOnly"]
    );
    let forwarded = pod.only_request();
    assert_eq!(forwarded.header_values("x-auth-request-user"), ["ana"]);
    assert_eq!(
        forwarded.header_values("x-auth-request-email"),
        ["ana@example.test"]
    );
    assert_eq!(forwarded.body, b"payload");
    let asked = &auth.requests()[1];
    assert_eq!(asked.request_line(), "GET /oauth2/auth HTTP/1.1");
    assert_eq!(asked.header_values("x-original-method"), ["POST"]);
    assert!(asked.header_values("content-length").is_empty());
    assert!(
        asked.body.is_empty(),
        "the auth service never gets the body"
    );
    // A banned user: the auth service's 403 goes to the client.
    let banned = format!("{}=banned", sluice_testkit::SESSION_COOKIE);
    let reply = request_with(
        &sluice,
        Method::GET,
        "/admin",
        &[("cookie", banned.as_str())],
        "",
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(pod.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_auth_401_passes_through_and_a_failing_or_silent_auth_service_is_a_500() {
    let pod = sluice_testkit::RawBackend::start(support::pod_ip(160))
        .await
        .unwrap();
    let auth = sluice_testkit::start_auth_service(support::pod_ip(161))
        .await
        .unwrap();
    let silent = std::net::TcpListener::bind((support::pod_ip(162), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let auth_url = format!("http://{}/oauth2/auth", auth.addr());
    write_route(dir.path(), pod.addr(), "/admin", &[(AUTH_URL, &auth_url)]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let reply = request_with(&sluice, Method::GET, "/admin", &[], "").await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        header_of(&reply, "www-authenticate"),
        ["Bearer realm=\"oauth2\""]
    );
    assert!(
        header_of(&reply, "set-cookie").is_empty(),
        "only with auth-always-set-cookie"
    );
    // An answer that is neither 2xx, 401 nor 403 (here a 404): 500.
    let wrong = format!("http://{}/nope", auth.addr());
    write_route(dir.path(), pod.addr(), "/admin", &[(AUTH_URL, &wrong)]);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(
        request_with(&sluice, Method::GET, "/admin", &[], "")
            .await
            .status,
        500
    );
    // No answer within the route's proxy-read-timeout: 500.
    let never = format!("http://{}/oauth2/auth", silent.local_addr().unwrap());
    write_route(
        dir.path(),
        pod.addr(),
        "/admin",
        &[
            (AUTH_URL, &never),
            ("nginx.ingress.kubernetes.io/proxy-read-timeout", "1"),
        ],
    );
    sluice.wait_for_generation_after(2).await;
    let started = std::time::Instant::now();
    assert_eq!(
        request_with(&sluice, Method::GET, "/admin", &[], "")
            .await
            .status,
        500
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(pod.requests().is_empty());
}

/// Runs `openssl` with `args` and returns its output, trimmed.
fn openssl(args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_checks_htpasswd_apr1_sha1_and_bcrypt_users_and_satisfy_any_admits_ranges() {
    let pods = pods_on(&["web"], 163, 0).await;
    let apr1 = openssl(
        &["passwd", "-apr1", "-salt", "s4ltS4lt", "-stdin"],
        "ana-pw",
    );
    // htpasswd -s: base64 of the binary SHA-1.
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "printf %s bob-pw | openssl dgst -sha1 -binary | openssl base64",
        ])
        .output()
        .unwrap();
    let sha1 = format!("{{SHA}}{}", String::from_utf8(out.stdout).unwrap().trim());
    let bcrypt = bcrypt::hash("cat-pw", 4).unwrap();
    let htpasswd = format!("ana:{apr1}\nbob:{sha1}\ncat:{bcrypt}\n");
    let dir = tempfile::tempdir().unwrap();
    let write = |annotations: &[(&str, &str)]| {
        write_manifest(
            dir.path(),
            "shop.yaml",
            &[
                annotated_ingress(
                    "admin",
                    "shop.test",
                    &[("/admin", "Prefix", "web", 80)],
                    annotations,
                ),
                service("web", 80, &[pods[0].addr()]),
                support::secret("users", None, &[("auth", &htpasswd)]),
                support::secret("user-map", None, &[("dan", &apr1)]),
            ],
        );
    };
    let basic_auth = [
        ("nginx.ingress.kubernetes.io/auth-type", "basic"),
        ("nginx.ingress.kubernetes.io/auth-secret", "users"),
        ("nginx.ingress.kubernetes.io/auth-realm", "Shop staff"),
    ];
    write(&basic_auth);
    let sluice = Sluice::start(dir.path(), &["--trusted-proxies", "127.0.0.0/8"]).await;
    let status = |authorization: Option<String>, client: Option<&'static str>| {
        let sluice = &sluice;
        async move {
            let mut headers = Vec::new();
            if let Some(value) = &authorization {
                headers.push(("authorization", value.as_str()));
            }
            if let Some(client) = client {
                headers.push(("x-forwarded-for", client));
            }
            request_with(sluice, Method::GET, "/admin", &headers, "").await
        }
    };
    let refused = status(None, None).await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        header_of(&refused, "www-authenticate"),
        ["Basic realm=\"Shop staff\""]
    );
    for good in ["ana:ana-pw", "bob:bob-pw", "cat:cat-pw"] {
        assert_eq!(
            status(Some(support::basic(good)), None).await.status,
            200,
            "{good}"
        );
    }
    for bad in ["ana:bob-pw", "bob:", "eve:ana-pw", "cat:cat-pX"] {
        assert_eq!(
            status(Some(support::basic(bad)), None).await.status,
            401,
            "{bad}"
        );
    }
    // auth-map: one key per user.
    let map = [
        ("nginx.ingress.kubernetes.io/auth-type", "basic"),
        ("nginx.ingress.kubernetes.io/auth-secret", "user-map"),
        ("nginx.ingress.kubernetes.io/auth-secret-type", "auth-map"),
    ];
    write(&map);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(
        status(Some(support::basic("dan:ana-pw")), None)
            .await
            .status,
        200
    );
    assert_eq!(
        status(Some(support::basic("ana:ana-pw")), None)
            .await
            .status,
        401
    );
    // satisfy any: a client inside the allowlist needs no password; others still may sign in.
    let mut any = basic_auth.to_vec();
    any.push((
        "nginx.ingress.kubernetes.io/allowlist-source-range",
        "10.0.0.0/8",
    ));
    any.push(("nginx.ingress.kubernetes.io/satisfy", "any"));
    write(&any);
    sluice.wait_for_generation_after(2).await;
    assert_eq!(status(None, Some("10.1.2.3")).await.status, 200);
    assert_eq!(status(None, Some("192.0.2.1")).await.status, 401);
    assert_eq!(
        status(Some(support::basic("ana:ana-pw")), Some("192.0.2.1"))
            .await
            .status,
        200
    );
    // satisfy all (the default): both the range and the password are needed.
    any.pop();
    write(&any);
    sluice.wait_for_generation_after(3).await;
    assert_eq!(status(None, Some("10.1.2.3")).await.status, 401);
    assert_eq!(
        status(Some(support::basic("ana:ana-pw")), Some("192.0.2.1"))
            .await
            .status,
        403
    );
    // A missing Secret refuses everyone.
    write(&[
        ("nginx.ingress.kubernetes.io/auth-type", "basic"),
        ("nginx.ingress.kubernetes.io/auth-secret", "nobody"),
    ]);
    sluice.wait_for_generation_after(4).await;
    assert_eq!(
        status(Some(support::basic("ana:ana-pw")), None)
            .await
            .status,
        503
    );
    let (_, report) = run_check(dir.path());
    assert!(
        report.contains("Secret default/nobody: the Secret does not exist"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_signs_in_curl_with_an_htdigest_user() {
    let pods = pods_on(&["web"], 164, 0).await;
    let ha1 = openssl(&["dgst", "-md5", "-r"], "ana:Shop:ana-pw");
    let ha1 = ha1.split_whitespace().next().unwrap().to_owned();
    let (_dir, sluice) = serve_shop(&[
        annotated_ingress(
            "admin",
            "shop.test",
            &[("/admin", "Prefix", "web", 80)],
            &[
                ("nginx.ingress.kubernetes.io/auth-type", "digest"),
                ("nginx.ingress.kubernetes.io/auth-secret", "users"),
                ("nginx.ingress.kubernetes.io/auth-realm", "Shop"),
            ],
        ),
        service("web", 80, &[pods[0].addr()]),
        support::secret("users", None, &[("auth", &format!("ana:Shop:{ha1}\n"))]),
    ])
    .await;
    let curl = |user: &str| {
        let output = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--digest",
                "-u",
                user,
            ])
            .args(["-H", "Host: shop.test"])
            .arg(sluice.url("/admin/report?period=day"))
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(curl("ana:ana-pw"), "200");
    assert_eq!(curl("ana:wrong"), "401");
    assert_eq!(pods[0].requests(), 1);
}

/// nginx.tmpl sets `proxy_set_header Authorization "";` next to `auth_basic` and `auth_digest`:
/// the pod never sees the client's credentials, signed in with curl's `-u` and `--digest`, or
/// admitted by address under `satisfy any`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_and_digest_credentials_never_reach_the_pod() {
    let pod = sluice_testkit::RawBackend::start(support::pod_ip(232))
        .await
        .unwrap();
    let apr1 = openssl(
        &["passwd", "-apr1", "-salt", "s4ltS4lt", "-stdin"],
        "ana-pw",
    );
    let ha1 = openssl(&["dgst", "-md5", "-r"], "ana:Shop:ana-pw");
    let ha1 = ha1.split_whitespace().next().unwrap().to_owned();
    let auth = |kind: &'static str, secret: &'static str| {
        [
            ("nginx.ingress.kubernetes.io/auth-type", kind),
            ("nginx.ingress.kubernetes.io/auth-secret", secret),
            ("nginx.ingress.kubernetes.io/auth-realm", "Shop"),
            (
                "nginx.ingress.kubernetes.io/allowlist-source-range",
                "127.0.0.0/8",
            ),
            ("nginx.ingress.kubernetes.io/satisfy", "any"),
        ]
    };
    let (_dir, sluice) = serve_shop(&[
        annotated_ingress(
            "basic",
            "shop.test",
            &[("/basic", "Prefix", "web", 80)],
            &auth("basic", "users")[..3],
        ),
        annotated_ingress(
            "digest",
            "shop.test",
            &[("/digest", "Prefix", "web", 80)],
            &auth("digest", "digest-users")[..3],
        ),
        annotated_ingress(
            "any",
            "shop.test",
            &[("/any", "Prefix", "web", 80)],
            &auth("basic", "users"),
        ),
        service("web", 80, &[pod.addr()]),
        support::secret("users", None, &[("auth", &format!("ana:{apr1}\n"))]),
        support::secret(
            "digest-users",
            None,
            &[("auth", &format!("ana:Shop:{ha1}\n"))],
        ),
    ])
    .await;
    let curl = |flags: &[&str], path: &str| {
        let output = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(flags)
            .args(["-H", "Host: shop.test"])
            .arg(sluice.url(path))
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(curl(&["-u", "ana:ana-pw"], "/basic"), "200");
    assert_eq!(curl(&["--digest", "-u", "ana:ana-pw"], "/digest"), "200");
    // Admitted by its address (loopback is in the allowlist), credentials sent all the same.
    assert_eq!(curl(&["-u", "ana:wrong"], "/any"), "200");
    let requests = pod.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(
            request.header_values("authorization"),
            Vec::<&str>::new(),
            "{}",
            request.head
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_cache_key_keeps_the_auth_services_answer_per_key() {
    let pod = sluice_testkit::RawBackend::start(support::pod_ip(165))
        .await
        .unwrap();
    let auth = sluice_testkit::start_auth_service(support::pod_ip(166))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let auth_url = format!("http://{}/oauth2/auth", auth.addr());
    write_route(
        dir.path(),
        pod.addr(),
        "/admin",
        &[
            (AUTH_URL, &auth_url),
            (
                "nginx.ingress.kubernetes.io/auth-cache-key",
                "$cookie__oauth2_proxy",
            ),
            (
                "nginx.ingress.kubernetes.io/auth-cache-duration",
                "200 202 1m",
            ),
            (
                "nginx.ingress.kubernetes.io/auth-response-headers",
                "X-Auth-Request-User",
            ),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    for user in ["ana", "ana", "bob", "ana"] {
        let cookie = format!("{}={user}", sluice_testkit::SESSION_COOKIE);
        let reply = request_with(
            &sluice,
            Method::GET,
            "/admin",
            &[("cookie", cookie.as_str())],
            "",
        )
        .await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(auth.requests().len(), 2, "one question per session");
    let users: Vec<String> = pod
        .requests()
        .iter()
        .map(|request| request.header_values("x-auth-request-user").join(","))
        .collect();
    assert_eq!(users, ["ana", "ana", "bob", "ana"]);
    // 401 is not in the cached statuses: asked every time.
    for _ in 0..2 {
        assert_eq!(
            request_with(&sluice, Method::GET, "/admin", &[], "")
                .await
                .status,
            401
        );
    }
    assert_eq!(auth.requests().len(), 4);
}

/// The statuses of `count` GETs of `path` sent one after another.
async fn statuses(sluice: &Sluice, path: &str, count: usize) -> Vec<u16> {
    let mut seen = Vec::new();
    for _ in 0..count {
        seen.push(
            request_with(sluice, Method::GET, path, &[], "")
                .await
                .status
                .as_u16(),
        );
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_rps_admits_the_burst_then_answers_503_or_the_chosen_status() {
    let pods = pods_on(&["web"], 167, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let limits = [
        ("nginx.ingress.kubernetes.io/limit-rps", "1"),
        ("nginx.ingress.kubernetes.io/limit-burst-multiplier", "2"),
    ];
    write_route(dir.path(), pods[0].addr(), "/", &limits);
    let sluice = Sluice::start(dir.path(), &[]).await;
    // One request and a burst of 1 × 2 pass at once; the rest are refused.
    assert_eq!(
        statuses(&sluice, "/", 6).await,
        [200, 200, 200, 503, 503, 503]
    );
    assert_eq!(pods[0].requests(), 3);
    // A second later one more request has drained.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(statuses(&sluice, "/", 2).await, [200, 503]);
    let mut with_status = limits.to_vec();
    with_status.push(("sluice.dev/limit-status-code", "429"));
    write_route(dir.path(), pods[0].addr(), "/", &with_status);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(statuses(&sluice, "/", 4).await, [200, 200, 200, 429]);
    // An exempt client is never limited.
    let mut exempt = limits.to_vec();
    exempt.push(("nginx.ingress.kubernetes.io/limit-whitelist", "127.0.0.0/8"));
    write_route(dir.path(), pods[0].addr(), "/", &exempt);
    sluice.wait_for_generation_after(2).await;
    assert_eq!(statuses(&sluice, "/", 6).await, [200; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_connections_caps_a_clients_requests_in_progress() {
    let pods = pods_on(&["web"], 168, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_route(
        dir.path(),
        pods[0].addr(),
        "/",
        &[("nginx.ingress.kubernetes.io/limit-connections", "1")],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let slow = request_with(&sluice, Method::GET, "/__testkit/sleep/600", &[], "");
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        request_with(&sluice, Method::GET, "/", &[], "").await
    };
    let (slow, second) = tokio::join!(slow, second);
    assert_eq!((slow.status.as_u16(), second.status.as_u16()), (200, 503));
    // Once the first is answered, the client may send again.
    assert_eq!(statuses(&sluice, "/", 2).await, [200, 200]);
    // A response whose body is still going out holds the place until it ends: here a 64 MiB
    // body the client stops reading after its head.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut reader = tokio::net::TcpStream::connect(sluice.listen).await.unwrap();
    let head = "GET /__testkit/bytes/67108864 HTTP/1.1\r\nhost: shop.test\r\n\r\n";
    reader.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 12];
    reader.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert_eq!(statuses(&sluice, "/", 1).await, [503]);
    // The client leaves: its place is free again.
    drop(reader);
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = statuses(&sluice, "/", 1).await;
        if seen == [200] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(seen, [200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffering_and_http_version_annotations_are_explained_and_the_route_streams() {
    let (pod, dir) = shop_files(
        169,
        &[
            ("nginx.ingress.kubernetes.io/proxy-buffering", "on"),
            ("nginx.ingress.kubernetes.io/proxy-request-buffering", "off"),
            ("nginx.ingress.kubernetes.io/proxy-http-version", "1.0"),
        ],
    )
    .await;
    let (code, report) = run_check(dir.path());
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("sluice streams responses, as with off"),
        "{report}"
    );
    assert!(
        report.contains("off is sluice's normal behaviour: request bodies stream"),
        "{report}"
    );
    assert!(report.contains("HTTP/1.0 is not offered"), "{report}");
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 200);
    assert_eq!(pod.requests(), 1);
}

#[test]
fn check_migration_report_counts_every_nginx_and_traefik_annotation_with_its_support() {
    let dir = tempfile::tempdir().unwrap();
    let nginx_ingress = |name: &str, annotations: &[(&str, &str)]| {
        annotated_ingress(
            name,
            "shop.test",
            &[("/", "Prefix", "web", 80)],
            annotations,
        )
        .replace("ingressClassName: sluice", "ingressClassName: nginx")
    };
    let mut web = service("web", 80, &[]);
    web = web.replacen(
        "  name: web\n",
        "  name: web\n  annotations:\n    traefik.ingress.kubernetes.io/service.nativelb: \"true\"\n",
        1,
    );
    write_manifest(
        dir.path(),
        "nginx.yaml",
        &[
            nginx_ingress(
                "a",
                &[
                    (REWRITE, "/"),
                    ("nginx.ingress.kubernetes.io/configuration-snippet", "x"),
                    ("nginx.ingress.kubernetes.io/proxy-buffering", "on"),
                ],
            ),
            nginx_ingress(
                "b",
                &[(REWRITE, "/$1"), ("ingress.kubernetes.io/limit-rate", "1")],
            ),
            web,
        ],
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "--migration-report", "--manifests"])
        .arg(dir.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    let row = |key: &str| {
        report
            .lines()
            .find(|line| line.split_whitespace().next() == Some(key))
            .map(|line| {
                line.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| panic!("no row for {key}:\n{report}"))
    };
    assert_eq!(
        row("nginx.ingress.kubernetes.io/rewrite-target"),
        "nginx.ingress.kubernetes.io/rewrite-target 2 fully"
    );
    assert_eq!(
        row("nginx.ingress.kubernetes.io/configuration-snippet"),
        "nginx.ingress.kubernetes.io/configuration-snippet 1 not"
    );
    assert_eq!(
        row("nginx.ingress.kubernetes.io/proxy-buffering"),
        "nginx.ingress.kubernetes.io/proxy-buffering 1 partly"
    );
    assert_eq!(
        row("ingress.kubernetes.io/limit-rate"),
        "ingress.kubernetes.io/limit-rate 1 not"
    );
    assert_eq!(
        row("traefik.ingress.kubernetes.io/service.nativelb"),
        "traefik.ingress.kubernetes.io/service.nativelb 1 fully"
    );
    assert!(
        report.contains("Annotation uses honoured fully: 3, partly: 1, not: 2."),
        "{report}"
    );
    assert!(
        report.contains("Objects by their least honoured annotation: fully 1, partly 0, not 2."),
        "{report}"
    );
    // Without the flag, no report.
    let (_, plain) = run_check(dir.path());
    assert!(!plain.contains("Migration report"), "{plain}");
}

/// Waits up to 5 s for `backend` to have received `count` requests.
async fn wait_for_requests(backend: &sluice_testkit::RawBackend, count: usize) {
    for _ in 0..500 {
        if backend.requests().len() >= count {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "the backend saw {} requests, not {count}",
        backend.requests().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_target_gets_a_copy_and_its_failure_never_touches_the_client() {
    let pods = pods_on(&["web"], 170, 0).await;
    let mirror = sluice_testkit::RawBackend::start(support::pod_ip(171))
        .await
        .unwrap();
    let silent = std::net::TcpListener::bind((support::pod_ip(172), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |annotations: &[(&str, &str)]| {
        write_route(dir.path(), pods[0].addr(), "/", annotations);
    };
    let target = format!("http://{}$request_uri", mirror.addr());
    write(&[
        ("nginx.ingress.kubernetes.io/mirror-target", &target),
        ("nginx.ingress.kubernetes.io/mirror-host", "mirror.test"),
    ]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let reply = request_with(
        &sluice,
        Method::POST,
        "/orders?id=7",
        &[("x-user", "ana")],
        "hello",
    )
    .await;
    assert_eq!(reply.status, 200);
    wait_for_requests(&mirror, 1).await;
    let copy = mirror.only_request();
    assert_eq!(copy.request_line(), "POST /orders?id=7 HTTP/1.1");
    assert_eq!(copy.header_values("host"), ["mirror.test"]);
    assert_eq!(copy.header_values("x-original-uri"), ["/orders?id=7"]);
    assert_eq!(copy.header_values("x-user"), ["ana"]);
    assert_eq!(copy.body, b"hello");
    assert_eq!(pods[0].requests(), 1, "the pod got the request once");
    // mirror-request-body: off sends the head only.
    write(&[
        ("nginx.ingress.kubernetes.io/mirror-target", &target),
        ("nginx.ingress.kubernetes.io/mirror-request-body", "off"),
    ]);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(
        request_with(&sluice, Method::POST, "/b", &[], "hello")
            .await
            .status,
        200
    );
    wait_for_requests(&mirror, 2).await;
    let copy = &mirror.requests()[1];
    assert_eq!(copy.header_values("content-length"), ["0"]);
    assert!(copy.body.is_empty());
    // A mirror that never answers delays nothing.
    let never = format!("http://{}$request_uri", silent.local_addr().unwrap());
    write(&[("nginx.ingress.kubernetes.io/mirror-target", &never)]);
    sluice.wait_for_generation_after(2).await;
    let started = std::time::Instant::now();
    for _ in 0..3 {
        assert_eq!(
            request_with(&sluice, Method::GET, "/c", &[], "")
                .await
                .status,
            200
        );
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_http_errors_ask_the_default_backend_as_ingress_nginx_does() {
    let pods = pods_on(&["web"], 173, 0).await;
    let errors = sluice_testkit::RawBackend::start(support::pod_ip(174))
        .await
        .unwrap();
    let (_dir, sluice) = serve_shop(&[
        annotated_ingress(
            "shop",
            "shop.test",
            &[("/", "Prefix", "web", 80)],
            &[
                ("nginx.ingress.kubernetes.io/custom-http-errors", "404,503"),
                ("nginx.ingress.kubernetes.io/default-backend", "errors"),
            ],
        ),
        annotated_ingress(
            "empty",
            "empty.test",
            &[("/", "Prefix", "nobody", 80)],
            &[("nginx.ingress.kubernetes.io/default-backend", "errors")],
        ),
        service("web", 80, &[pods[0].addr()]),
        service("errors", 8080, &[errors.addr()]),
        service("nobody", 80, &[]),
    ])
    .await;
    let reply = request_with(
        &sluice,
        Method::GET,
        "/__testkit/status/404?x=1",
        &[("accept", "text/html")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200, "the default backend's answer");
    let asked = errors.only_request();
    assert_eq!(asked.request_line(), "GET / HTTP/1.1");
    for (name, value) in [
        ("x-code", "404"),
        ("x-format", "text/html"),
        ("x-original-uri", "/__testkit/status/404?x=1"),
        ("x-namespace", "default"),
        ("x-ingress-name", "shop"),
        ("x-service-name", "web"),
        ("x-service-port", "80"),
    ] {
        assert_eq!(asked.header_values(name), [value], "{name}");
    }
    // A status not listed is the pod's own.
    assert_eq!(
        request_with(&sluice, Method::GET, "/__testkit/status/500", &[], "")
            .await
            .status,
        500
    );
    assert_eq!(errors.requests().len(), 1);
    // default-backend alone serves a Service with no endpoints, the request as sent.
    let reply = send(
        &http_client(),
        Method::GET,
        &sluice.url("/page?y=2"),
        "empty.test",
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(
        errors.requests()[1].request_line(),
        "GET /page?y=2 HTTP/1.1"
    );
}

/// ingress-nginx's e2e `annotations/default_backend.go`, set up as upstream does: an Ingress
/// named and hosted `default-backend` sends `/` to Service `invalid` port 80, which does not
/// exist, with `default-backend` naming the echo Service. The echo pod must see `X-Code: 503`,
/// the Ingress, the Service that had no endpoints and the client's request id, plus the rest
/// of nginx.tmpl's `custom-default-backend-` block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_backend_of_a_service_without_endpoints_is_told_why() {
    let echo = sluice_testkit::RawBackend::start(support::pod_ip(233))
        .await
        .unwrap();
    let (_dir, sluice) = serve_shop(&[
        annotated_ingress(
            "default-backend",
            "default-backend",
            &[("/", "Prefix", "invalid", 80)],
            &[("nginx.ingress.kubernetes.io/default-backend", "echo")],
        ),
        service("echo", 80, &[echo.addr()]),
    ])
    .await;
    let reply = send(
        &http_client(),
        Method::GET,
        &sluice.url("/alma/armud"),
        "default-backend",
        &[
            ("x-request-id", "something-unique"),
            ("accept", "text/html"),
        ],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    let asked = echo.only_request();
    assert_eq!(asked.request_line(), "GET /alma/armud HTTP/1.1");
    for (name, value) in [
        ("x-code", "503"),
        ("x-ingress-name", "default-backend"),
        ("x-service-name", "invalid"),
        ("x-request-id", "something-unique"),
        ("x-namespace", "default"),
        ("x-service-port", "80"),
        ("x-format", "text/html"),
        ("x-original-uri", "/alma/armud"),
    ] {
        assert_eq!(asked.header_values(name), [value], "{name}: {}", asked.head);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_come_from_a_config_map_and_follow_its_changes() {
    let pods = pods_on(&["web"], 175, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let write = |data: &str| {
        write_manifest(
            dir.path(),
            "shop.yaml",
            &[
                annotated_ingress(
                    "shop",
                    "shop.test",
                    &[("/", "Prefix", "web", 80)],
                    &[
                        ("nginx.ingress.kubernetes.io/custom-headers", "default/shop-headers"),
                        ("sluice.dev/response-headers", "X-Frame-Options: DENY"),
                    ],
                ),
                service("web", 80, &[pods[0].addr()]),
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-headers\ndata:\n{data}"),
            ],
        );
    };
    write("  X-Team: shop\n  X-Frame-Options: SAMEORIGIN\n");
    let sluice = Sluice::start(dir.path(), &[]).await;
    let reply = request_with(&sluice, Method::GET, "/", &[], "").await;
    assert_eq!(reply.status, 200);
    assert_eq!(header_of(&reply, "x-team"), ["shop"]);
    assert_eq!(
        header_of(&reply, "x-frame-options"),
        ["DENY"],
        "sluice.dev/response-headers wins"
    );
    write("  X-Team: checkout\n");
    sluice.wait_for_generation_after(1).await;
    let reply = request_with(&sluice, Method::GET, "/", &[], "").await;
    assert_eq!(header_of(&reply, "x-team"), ["checkout"]);
}
