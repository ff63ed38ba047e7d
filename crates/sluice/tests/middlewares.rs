//! End-to-end: Traefik Middlewares named by router.middlewares, applied with Traefik's semantics through the real binary, with real auth servers and backends that report what they received byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{
    http_client, send, start_forward_auth_server, RawBackend, RawBackendOptions, RawRequest, Reply,
    FORWARD_AUTH_COOKIE,
};
use support::tls::{curl, https_args};
use support::{annotated_ingress, service, write_manifest, Sluice};

const ROUTER_MIDDLEWARES: &str = "traefik.ingress.kubernetes.io/router.middlewares";

/// A loopback address of this file's own, standing in for a pod or a server.
fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 6, n))
}

/// A Middleware `name` in namespace `default` whose spec is `spec` (YAML, indented by two).
fn middleware(name: &str, spec: &str) -> String {
    format!("apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}")
}

/// Ingress `name` for `host`, every path to Service `web` port 80, naming `middlewares`.
fn routed(name: &str, host: &str, paths: &[&str], middlewares: &str) -> String {
    let paths: Vec<(&str, &str, &str, u16)> =
        paths.iter().map(|p| (*p, "Prefix", "web", 80)).collect();
    annotated_ingress(name, host, &paths, &[(ROUTER_MIDDLEWARES, middlewares)])
}

/// A directory with `documents` and Service `web` in front of `pod`, and sluice serving it.
async fn serve(
    documents: &[String],
    pod: SocketAddr,
    flags: &[&str],
) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = documents.to_vec();
    all.push(service("web", 80, &[pod]));
    write_manifest(dir.path(), "app.yaml", &all);
    let sluice = Sluice::start(dir.path(), flags).await;
    (dir, sluice)
}

async fn request(
    sluice: &Sluice,
    method: Method,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    send(
        &http_client(),
        method,
        &sluice.url(path),
        host,
        headers,
        Bytes::new(),
    )
    .await
    .unwrap()
}

fn header(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get(name)
        .map(|value| value.to_str().unwrap().to_owned())
}

/// What curl printed with `-i`: the status, the header lines (lowercase names) and the body.
fn curl_reply(args: &[&str]) -> (u16, Vec<(String, String)>, String) {
    let mut all = vec!["-k", "-i"];
    all.extend(args);
    let (code, out) = curl(&all);
    assert_eq!(code, 0, "curl failed: {out}");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authelias_documented_forward_auth_lets_a_session_in_and_returns_the_auth_servers_refusal_as_sent(
) {
    let pod = RawBackend::start(ip(1)).await.unwrap();
    let auth = start_forward_auth_server(ip(2)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Authelia's docs (integration/kubernetes/traefik-ingress), the Middleware's address
    // pointed at the test's forwardAuth server.
    let documented = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/tests/fixtures/traefik_forwardauth_authelia.yaml"),
    )
    .unwrap();
    let documented = documented
        .split("---\napiVersion: v1\nkind: Service")
        .next()
        .unwrap()
        .replace(
            "http://authelia.default.svc.cluster.local/api/authz/forward-auth",
            &format!("http://{}/api/authz/forward-auth", auth.addr()),
        );
    std::fs::write(dir.path().join("authelia.yaml"), documented).unwrap();
    write_manifest(dir.path(), "app.yaml", &[service("app", 80, &[pod.addr()])]);
    let sluice = Sluice::start(dir.path(), &["--watch-ingress-without-class"]).await;
    let tls = sluice.listen_tls;
    let target = https_args(tls, "app.example.com", "/bar/x?y=1");
    let target: Vec<&str> = target.iter().map(String::as_str).collect();

    // No session: the auth server's 401 goes to the client as it was sent, body and all.
    let (status, headers, body) = curl_reply(&target);
    assert_eq!(status, 401);
    assert_eq!(body, "401 Unauthorized by the test forwardAuth server");
    assert_eq!(values(&headers, "x-auth-reason"), ["no session"]);
    assert_eq!(values(&headers, "set-cookie"), ["authelia_flow=1; Path=/"]);
    assert!(pod.requests().is_empty(), "the app never saw it");
    let asked = auth.only_request();
    assert_eq!(asked.request_line(), "GET /api/authz/forward-auth HTTP/1.1");
    assert_eq!(asked.header("x-forwarded-method"), Some("GET"));
    assert_eq!(asked.header("x-forwarded-proto"), Some("https"));
    let host = format!("app.example.com:{}", tls.port());
    assert_eq!(asked.header("x-forwarded-host"), Some(host.as_str()));
    assert_eq!(asked.header("x-forwarded-uri"), Some("/bar/x?y=1"));
    assert_eq!(asked.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(asked.header("host"), Some(auth.addr().to_string().as_str()));

    // A browser: Authelia's redirect to its sign-in page, built from the X-Forwarded-*.
    let mut browser = target.clone();
    browser.extend(["-H", "Accept: text/html"]);
    let (status, headers, _) = curl_reply(&browser);
    assert_eq!(status, 302);
    let wanted = format!("https://auth.example.com/?rd=https://{host}/bar/x?y=1");
    assert_eq!(values(&headers, "location"), [wanted.as_str()]);

    // A session: the app gets Remote-* from the auth server, never the client's own copy.
    let cookie = format!("Cookie: {FORWARD_AUTH_COOKIE}=ana");
    let mut signed_in = target.clone();
    signed_in.extend([
        "-H",
        &cookie,
        "-H",
        "Remote-User: admin",
        "-H",
        "Remote-Name: Admin",
    ]);
    let (status, _, _) = curl_reply(&signed_in);
    assert_eq!(status, 200);
    let forwarded = pod.only_request();
    assert_eq!(forwarded.request_line(), "GET /bar/x?y=1 HTTP/1.1");
    assert_eq!(forwarded.header_values("remote-user"), ["ana"]);
    assert_eq!(forwarded.header_values("remote-groups"), ["admins,dev"]);
    assert_eq!(forwarded.header_values("remote-email"), ["ana@example.com"]);
    assert_eq!(forwarded.header_values("remote-name"), ["User ana"]);

    // router.tls "true" (and router.entryPoints websecure): plain HTTP does not serve it.
    let plain = request(&sluice, Method::GET, "app.example.com", "/bar", &[]).await;
    assert_eq!(plain.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_admits_the_secrets_users_and_can_name_the_user_and_hide_the_credentials() {
    let pod = RawBackend::start(ip(3)).await.unwrap();
    // What `htpasswd -s` and `openssl passwd -apr1 -salt Zx7k2p9Q secret` write.
    let users =
        "test:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\nana:$apr1$Zx7k2p9Q$XUAtLBcy5/9fi7YE4vXDH0\n";
    let documents = [
        middleware("users", "  basicAuth:\n    secret: users\n    removeHeader: true\n    headerField: X-WebAuth-User\n"),
        middleware("admin", "  basicAuth:\n    secret: admin\n    realm: Admins\n"),
        support::secret("users", None, &[("users", users)]),
        support::secret("admin", Some("kubernetes.io/basic-auth"), &[("username", "root"), ("password", "hunter2")]),
        routed("users", "shop.test", &["/"], "default-users@kubernetescrd"),
        routed("admin", "admin.test", &["/"], "admin@kubernetescrd"),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &[]).await;

    let refused = request(&sluice, Method::GET, "shop.test", "/", &[]).await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        header(&refused, "www-authenticate").as_deref(),
        Some("Basic realm=\"traefik\"")
    );
    assert_eq!(refused.body, "401 Unauthorized\n");
    let wrong = support::basic("test:wrong");
    assert_eq!(
        request(
            &sluice,
            Method::GET,
            "shop.test",
            "/",
            &[("authorization", &wrong)]
        )
        .await
        .status,
        401
    );
    assert!(pod.requests().is_empty());

    for (credentials, user) in [("test:test", "test"), ("ana:secret", "ana")] {
        let authorization = support::basic(credentials);
        let headers = [
            ("authorization", authorization.as_str()),
            ("x-webauth-user", "mallory"),
        ];
        let reply = request(&sluice, Method::GET, "shop.test", "/in", &headers).await;
        assert_eq!(reply.status, 200, "{credentials}");
        let forwarded = pod.requests().pop().unwrap();
        assert_eq!(forwarded.header_values("x-webauth-user"), [user]);
        assert!(
            forwarded.header_values("authorization").is_empty(),
            "removeHeader"
        );
    }

    // A kubernetes.io/basic-auth Secret: its one user, by plain password; its realm.
    let refused = request(&sluice, Method::GET, "admin.test", "/", &[]).await;
    assert_eq!(
        header(&refused, "www-authenticate").as_deref(),
        Some("Basic realm=\"Admins\"")
    );
    let root = support::basic("root:hunter2");
    let reply = request(
        &sluice,
        Method::GET,
        "admin.test",
        "/",
        &[("authorization", &root)],
    )
    .await;
    assert_eq!(reply.status, 200);
    let forwarded = pod.requests().pop().unwrap();
    assert_eq!(
        forwarded.header_values("authorization"),
        [root.as_str()],
        "kept without removeHeader"
    );
}

/// `GET path` for `host` from the local address `from`, as raw bytes (with `extra` header lines).
async fn get_from(
    from: IpAddr,
    sluice: &Sluice,
    host: &str,
    path: &str,
    extra: &str,
) -> support::wire::Reply {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let mut stream = socket.connect(sluice.listen).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    support::wire::read_until_closed(&mut stream, Duration::from_secs(5)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_allow_list_checks_the_connection_and_depth_reads_the_trusted_proxys_x_forwarded_for() {
    let pod = RawBackend::start(ip(4)).await.unwrap();
    let documents = [
        middleware("local", "  ipAllowList:\n    sourceRange: [127.0.0.1/32]\n"),
        middleware("office", "  ipAllowList:\n    sourceRange: [10.0.0.0/8]\n    rejectStatusCode: 404\n    ipStrategy:\n      depth: 1\n"),
        middleware("legacy", "  ipWhiteList:\n    sourceRange: [127.0.0.2]\n"),
        routed("local", "local.test", &["/"], "default-local@kubernetescrd"),
        routed("office", "office.test", &["/"], "default-office@kubernetescrd"),
        routed("legacy", "legacy.test", &["/"], "default-legacy@kubernetescrd"),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &["--trusted-proxies", "127.0.0.3"]).await;
    let local = [127, 0, 0, 1].into();
    let other = [127, 0, 0, 2].into();
    let proxy = [127, 0, 0, 3].into();

    assert_eq!(
        get_from(local, &sluice, "local.test", "/", "")
            .await
            .status(),
        Some(200)
    );
    let refused = get_from(other, &sluice, "local.test", "/", "").await;
    assert_eq!(refused.status(), Some(403));
    assert_eq!(refused.body(), "Forbidden");
    // No strategy: the connection's address counts, whatever X-Forwarded-For says.
    let spoofed = get_from(
        other,
        &sluice,
        "local.test",
        "/",
        "X-Forwarded-For: 127.0.0.1\r\n",
    )
    .await;
    assert_eq!(spoofed.status(), Some(403));
    assert_eq!(
        get_from(other, &sluice, "legacy.test", "/", "")
            .await
            .status(),
        Some(200)
    );
    assert_eq!(
        get_from(local, &sluice, "legacy.test", "/", "")
            .await
            .status(),
        Some(403)
    );

    // depth 1: the last X-Forwarded-For entry the trusted proxy wrote.
    let via = |client: &str| format!("X-Forwarded-For: 192.0.2.9, {client}\r\n");
    assert_eq!(
        get_from(proxy, &sluice, "office.test", "/", &via("10.1.2.3"))
            .await
            .status(),
        Some(200)
    );
    let outside = get_from(proxy, &sluice, "office.test", "/", &via("192.0.2.1")).await;
    assert_eq!(outside.status(), Some(404), "rejectStatusCode");
    assert_eq!(outside.body(), "Not Found");
    // From an untrusted peer the header is not believed: depth finds nothing and refuses.
    let untrusted = get_from(local, &sluice, "office.test", "/", &via("10.1.2.3")).await;
    assert_eq!(untrusted.status(), Some(404));
    assert_eq!(pod.requests().len(), 3);
}

/// Host, path asked, request line the pod gets, headers it gets.
type Rewrite<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_middlewares_rewrite_the_path_the_pod_gets_byte_for_byte() {
    let pod = RawBackend::start(ip(5)).await.unwrap();
    let documents = [
        middleware("strip", "  stripPrefix:\n    prefixes: [/api, /v1/]\n"),
        middleware("add", "  addPrefix:\n    prefix: /internal\n"),
        middleware(
            "strip-add",
            "  chain:\n    middlewares:\n    - name: strip\n    - name: add\n",
        ),
        middleware(
            "regex",
            "  stripPrefixRegex:\n    regex: [\"/users/[a-z]+\"]\n",
        ),
        middleware("replace", "  replacePath:\n    path: /health\n"),
        middleware(
            "replace-regex",
            "  replacePathRegex:\n    regex: ^/old/(.*)\n    replacement: /new/$1\n",
        ),
        routed(
            "chain",
            "chain.test",
            &["/"],
            "default-strip-add@kubernetescrd",
        ),
        routed("regex", "regex.test", &["/"], "default-regex@kubernetescrd"),
        routed(
            "replace",
            "replace.test",
            &["/"],
            "default-replace@kubernetescrd",
        ),
        routed(
            "rewrite",
            "rewrite.test",
            &["/"],
            "default-replace-regex@kubernetescrd",
        ),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &[]).await;
    let cases: [Rewrite; 7] = [
        (
            "chain.test",
            "/api/orders?id=7",
            "GET /internal/orders?id=7 HTTP/1.1",
            &[("x-forwarded-prefix", "/api")],
        ),
        (
            "chain.test",
            "/api",
            "GET /internal/ HTTP/1.1",
            &[("x-forwarded-prefix", "/api")],
        ),
        (
            "chain.test",
            "/v1/list",
            "GET /internal/list HTTP/1.1",
            &[("x-forwarded-prefix", "/v1/")],
        ),
        ("chain.test", "/other", "GET /internal/other HTTP/1.1", &[]),
        (
            "regex.test",
            "/users/ana/profile",
            "GET /profile HTTP/1.1",
            &[("x-forwarded-prefix", "/users/ana")],
        ),
        (
            "replace.test",
            "/anything?x=1",
            "GET /health?x=1 HTTP/1.1",
            &[("x-replaced-path", "/anything")],
        ),
        (
            "rewrite.test",
            "/old/a/b",
            "GET /new/a/b HTTP/1.1",
            &[("x-replaced-path", "/old/a/b")],
        ),
    ];
    for (host, path, line, headers) in cases {
        let reply = request(&sluice, Method::GET, host, path, &[]).await;
        assert_eq!(reply.status, 200, "{host}{path}");
        let got: RawRequest = pod.requests().pop().unwrap();
        assert_eq!(got.request_line(), line, "{host}{path}");
        for (name, value) in headers {
            assert_eq!(got.header_values(name), [*value], "{host}{path} {name}");
        }
        if headers.is_empty() {
            assert!(got.header_values("x-forwarded-prefix").is_empty());
        }
    }
    // A stripped path that is not clean is Traefik's 400, and never reaches the pod.
    let before = pod.requests().len();
    let reply = request(&sluice, Method::GET, "chain.test", "/api//etc/passwd", &[]).await;
    assert_eq!(reply.status, 400);
    assert_eq!(pod.requests().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_middlewares_answer_with_traefiks_statuses_and_locations() {
    let pod = RawBackend::start(ip(6)).await.unwrap();
    let documents = [
        middleware("https", "  redirectScheme:\n    scheme: https\n    permanent: true\n"),
        middleware("port", "  redirectScheme:\n    scheme: https\n    port: \"8443\"\n"),
        middleware("www", "  redirectRegex:\n    regex: ^http://shop.test/(.*)\n    replacement: http://www.shop.test/${1}\n"),
        routed("https", "secure.test", &["/"], "default-https@kubernetescrd"),
        routed("port", "port.test", &["/"], "default-port@kubernetescrd"),
        routed("www", "shop.test", &["/"], "default-www@kubernetescrd"),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &[]).await;
    let cases = [
        (
            Method::GET,
            "secure.test",
            "/a?b=1",
            301,
            "https://secure.test/a?b=1",
        ),
        (
            Method::POST,
            "secure.test",
            "/a",
            308,
            "https://secure.test/a",
        ),
        (
            Method::GET,
            "port.test",
            "/x",
            302,
            "https://port.test:8443/x",
        ),
        (
            Method::PUT,
            "port.test",
            "/x",
            307,
            "https://port.test:8443/x",
        ),
        (
            Method::GET,
            "shop.test",
            "/cart?id=1",
            302,
            "http://www.shop.test/cart?id=1",
        ),
    ];
    for (method, host, path, status, location) in cases {
        let reply = request(&sluice, method.clone(), host, path, &[]).await;
        assert_eq!(reply.status, status, "{method} {host}{path}");
        assert_eq!(
            header(&reply, "location").as_deref(),
            Some(location),
            "{host}{path}"
        );
    }
    assert_eq!(
        request(&sluice, Method::GET, "secure.test", "/", &[])
            .await
            .body,
        "Moved Permanently"
    );
    assert!(pod.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_middleware_edits_both_heads_and_answers_cors_preflights_itself() {
    let pod = RawBackend::start(ip(7)).await.unwrap();
    let spec = "  headers:\n    customRequestHeaders:\n      X-Script-Name: test\n      X-Drop-Me: \"\"\n    customResponseHeaders:\n      X-Custom-Response-Header: value\n      X-Powered-By: \"\"\n    frameDeny: true\n    contentTypeNosniff: true\n    stsSeconds: 31536000\n    forceSTSHeader: true\n    accessControlAllowMethods: [GET, OPTIONS, PUT]\n    accessControlAllowHeaders: [X-Token]\n    accessControlAllowOriginList: [https://app.example.com]\n    accessControlAllowOriginListRegex: [\"^https://.*\\\\.example\\\\.org$\"]\n    accessControlMaxAge: 100\n    addVaryHeader: true\n";
    let documents = [
        middleware("headers", spec),
        routed(
            "headers",
            "shop.test",
            &["/"],
            "default-headers@kubernetescrd",
        ),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &[]).await;
    let reply = request(
        &sluice,
        Method::GET,
        "shop.test",
        "/",
        &[("x-drop-me", "1"), ("origin", "https://a.b.example.org")],
    )
    .await;
    assert_eq!(reply.status, 200);
    let got = pod.only_request();
    assert_eq!(got.header_values("x-script-name"), ["test"]);
    assert!(got.header_values("x-drop-me").is_empty());
    assert_eq!(
        header(&reply, "x-custom-response-header").as_deref(),
        Some("value")
    );
    assert_eq!(header(&reply, "x-frame-options").as_deref(), Some("DENY"));
    assert_eq!(
        header(&reply, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(
        header(&reply, "strict-transport-security").as_deref(),
        Some("max-age=31536000")
    );
    assert_eq!(
        header(&reply, "access-control-allow-origin").as_deref(),
        Some("https://a.b.example.org")
    );
    assert_eq!(header(&reply, "vary").as_deref(), Some("Origin"));

    // A preflight is answered by sluice, 200 with no body, and never forwarded.
    let preflight = request(
        &sluice,
        Method::OPTIONS,
        "shop.test",
        "/api",
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "PUT"),
        ],
    )
    .await;
    assert_eq!(preflight.status, 200);
    assert_eq!(preflight.body, "");
    assert_eq!(
        header(&preflight, "access-control-allow-origin").as_deref(),
        Some("https://app.example.com")
    );
    assert_eq!(
        header(&preflight, "access-control-allow-methods").as_deref(),
        Some("GET,OPTIONS,PUT")
    );
    assert_eq!(
        header(&preflight, "access-control-allow-headers").as_deref(),
        Some("X-Token")
    );
    assert_eq!(
        header(&preflight, "access-control-max-age").as_deref(),
        Some("100")
    );
    // An origin that is not allowed: still answered by sluice, without Allow-Origin.
    let other = request(
        &sluice,
        Method::OPTIONS,
        "shop.test",
        "/api",
        &[
            ("origin", "https://evil.test"),
            ("access-control-request-method", "PUT"),
        ],
    )
    .await;
    assert_eq!(other.status, 200);
    assert_eq!(header(&other, "access-control-allow-origin"), None);
    assert_eq!(pod.requests().len(), 1, "no preflight reached the pod");
}

/// A pod on its own thread that answers `ok`, after 600 ms for a path with `/slow`, and
/// closes each connection.
fn slow_pod(ip: IpAddr) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                if String::from_utf8_lossy(&head).contains("/slow") {
                    std::thread::sleep(Duration::from_millis(600));
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_and_in_flight_answer_429_as_traefik_does() {
    let slow = slow_pod(ip(8));
    let documents = [
        middleware(
            "limit",
            "  rateLimit:\n    average: 1\n    period: 1m\n    burst: 2\n",
        ),
        middleware("one", "  inFlightReq:\n    amount: 1\n"),
        routed("limit", "limit.test", &["/"], "default-limit@kubernetescrd"),
        routed("one", "one.test", &["/"], "default-one@kubernetescrd"),
    ];
    let (_dir, sluice) = serve(&documents, slow, &[]).await;
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(
                request(&sluice, Method::GET, "limit.test", "/", &[])
                    .await
                    .status
                    .as_u16(),
            );
        }
        statuses
    };
    assert_eq!(statuses, [200, 200, 429], "a burst of 2, then one a minute");
    let limited = request(&sluice, Method::GET, "limit.test", "/", &[]).await;
    assert_eq!(limited.body, "Too Many Requests");
    let retry_after: u64 = header(&limited, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(header(&limited, "x-retry-in").is_some());

    // One request of one.test in progress at a time: the second gets 429 until the first ends.
    let url = sluice.url("/slow");
    let first = tokio::spawn(async move {
        send(
            &http_client(),
            Method::GET,
            &url,
            "one.test",
            &[],
            Bytes::new(),
        )
        .await
        .unwrap()
        .status
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = request(&sluice, Method::GET, "one.test", "/", &[]).await;
    assert_eq!(second.status, 429);
    assert_eq!(second.body, "max connections reached: 1");
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(
        request(&sluice, Method::GET, "one.test", "/", &[])
            .await
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_middleware_serves_the_error_services_page_under_the_pods_status() {
    let failing = RawBackend::start_with(
        SocketAddr::new(ip(9), 0),
        RawBackendOptions {
            answer: Some(
                |request| match request.request_line().contains("/missing") {
                    true => {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found".to_owned()
                    }
                    false => {
                        "HTTP/1.1 502 Bad Gateway\r\nx-pod: 1\r\ncontent-length: 8\r\n\r\npod said"
                            .to_owned()
                    }
                },
            ),
            ..RawBackendOptions::default()
        },
    )
    .await
    .unwrap();
    let pages = RawBackend::start_with(
        SocketAddr::new(ip(10), 0),
        RawBackendOptions {
            answer: Some(|request| {
                let body = format!("page for {}", request.request_line());
                format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\r\n{body}", body.len())
            }),
            ..RawBackendOptions::default()
        },
    )
    .await
    .unwrap();
    let documents = [
        middleware("oops", "  errors:\n    status: [\"500-599\"]\n    query: /{status}.html?from={url}\n    service:\n      name: pages\n      port: 80\n"),
        routed("shop", "shop.test", &["/"], "default-oops@kubernetescrd"),
        service("pages", 80, &[pages.addr()]),
    ];
    let (_dir, sluice) = serve(&documents, failing.addr(), &[]).await;
    let reply = request(
        &sluice,
        Method::GET,
        "shop.test",
        "/cart",
        &[("x-user", "ana")],
    )
    .await;
    assert_eq!(reply.status, 502, "the pod's status, with the page's body");
    assert_eq!(
        reply.body,
        "page for GET /502.html?from=http%3A%2F%2Fshop.test%2Fcart HTTP/1.1"
    );
    assert_eq!(header(&reply, "content-type").as_deref(), Some("text/html"));
    assert_eq!(header(&reply, "x-pod"), None);
    let asked = pages.only_request();
    assert_eq!(asked.header("host"), Some("shop.test"));
    assert_eq!(asked.header("x-user"), Some("ana"));
    // A status outside the ranges is the pod's own answer.
    let missing = request(&sluice, Method::GET, "shop.test", "/missing", &[]).await;
    assert_eq!(
        (missing.status.as_u16(), missing.body.as_str()),
        (404, "not found")
    );
}

/// Runs `kubectl --kubeconfig K args...`, failing the test when it fails.
fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) {
    let output = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn wait_for_status(sluice: &Sluice, host: &str, path: &str, wanted: u16) {
    support::wait_until(
        &format!("{host}{path} to answer {wanted}"),
        Duration::from_secs(10),
        || async { request(sluice, Method::GET, host, path, &[]).await.status == wanted },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn middlewares_applied_with_kubectl_to_the_api_server_are_watched_in_both_groups_and_a_deleted_one_fails_closed(
) {
    let pod = RawBackend::start(ip(11)).await.unwrap();
    let api = sluice_testapi::TestApiServer::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).unwrap();
    let strip_old_group = "apiVersion: traefik.containo.us/v1alpha1\nkind: Middleware\nmetadata:\n  name: strip\n  namespace: default\nspec:\n  stripPrefix:\n    prefixes: [/api]\n".to_owned();
    let documents = [
        strip_old_group.clone(),
        middleware("users", "  basicAuth:\n    secret: users\n"),
        support::secret("users", None, &[("users", "test:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=")]),
        middleware("stamp", "  headers:\n    customResponseHeaders:\n      X-Served-By: sluice\n"),
        middleware("www", "  redirectRegex:\n    regex: ^http://old.test/(.*)\n    replacement: http://new.test/${1}\n    permanent: true\n"),
        middleware("secured", "  chain:\n    middlewares: [{name: users}, {name: stamp}]\n"),
        routed("api", "api.test", &["/api"], "default-strip@kubernetescrd,default-stamp@kubernetescrd"),
        routed("admin", "admin.test", &["/"], "default-secured@kubernetescrd"),
        routed("old", "old.test", &["/"], "default-www@kubernetescrd"),
        service("web", 80, &[pod.addr()]),
        middleware("auth", "  forwardAuth:\n    address: http://127.0.0.1:9/verify\n    trustForwardHeader: true\n    authResponseHeaders: [Remote-User]\n"),
        middleware("allow", "  ipAllowList:\n    sourceRange: [127.0.0.0/8]\n"),
        middleware("https", "  redirectScheme:\n    scheme: https\n"),
        middleware("regex", "  stripPrefixRegex:\n    regex: [\"^/v[0-9]+\"]\n"),
        middleware("add", "  addPrefix:\n    prefix: /app\n"),
        middleware("replace", "  replacePath:\n    path: /x\n"),
        middleware("rewrite", "  replacePathRegex:\n    regex: ^/a/(.*)\n    replacement: /b/$1\n"),
        middleware("limit", "  rateLimit:\n    average: 10\n    burst: 5\n"),
        middleware("inflight", "  inFlightReq:\n    amount: 3\n"),
        middleware("buffer", "  buffering:\n    maxRequestBodyBytes: 2048\n"),
        middleware("retry", "  retry:\n    attempts: 2\n"),
        middleware("compress", "  compress: {}\n"),
        middleware("oops", "  errors:\n    status: [\"500-599\"]\n    query: /{status}.html\n    service:\n      name: web\n      port: 80\n"),
        routed("all", "all.test", &["/"], "default-auth@kubernetescrd,default-allow@kubernetescrd,default-https@kubernetescrd,default-regex@kubernetescrd,default-add@kubernetescrd,default-replace@kubernetescrd,default-rewrite@kubernetescrd,default-limit@kubernetescrd,default-inflight@kubernetescrd,default-buffer@kubernetescrd,default-retry@kubernetescrd,default-compress@kubernetescrd,default-oops@kubernetescrd"),
    ];
    write_manifest(dir.path(), "app.yaml", &documents);
    let manifest = dir.path().join("app.yaml");
    let manifest = manifest.to_str().unwrap();
    kubectl(&kubeconfig, &["apply", "-f", manifest]);
    let sluice = Sluice::start_kubernetes(&kubeconfig, &[]).await;

    let reply = request(&sluice, Method::GET, "api.test", "/api/orders", &[]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(header(&reply, "x-served-by").as_deref(), Some("sluice"));
    assert_eq!(
        pod.requests().pop().unwrap().request_line(),
        "GET /orders HTTP/1.1"
    );
    assert_eq!(
        request(&sluice, Method::GET, "admin.test", "/", &[])
            .await
            .status,
        401
    );
    let authorization = support::basic("test:test");
    let reply = request(
        &sluice,
        Method::GET,
        "admin.test",
        "/",
        &[("authorization", &authorization)],
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(header(&reply, "x-served-by").as_deref(), Some("sluice"));
    let moved = request(&sluice, Method::GET, "old.test", "/a?b=1", &[]).await;
    assert_eq!(moved.status, 301);
    assert_eq!(
        header(&moved, "location").as_deref(),
        Some("http://new.test/a?b=1")
    );

    // The Middleware goes: its routes fail closed rather than serve unstripped; it comes back.
    kubectl(
        &kubeconfig,
        &[
            "delete",
            "middlewares.traefik.containo.us",
            "strip",
            "-n",
            "default",
        ],
    );
    wait_for_status(&sluice, "api.test", "/api/orders", 503).await;
    let requests = pod.requests().len();
    std::fs::write(dir.path().join("strip.yaml"), strip_old_group).unwrap();
    let strip = dir.path().join("strip.yaml");
    kubectl(&kubeconfig, &["apply", "-f", strip.to_str().unwrap()]);
    wait_for_status(&sluice, "api.test", "/api/orders", 200).await;
    assert_eq!(pod.requests().len(), requests + 1, "no 503 reached the pod");
    // The basicAuth Secret goes: the admin routes refuse everyone.
    kubectl(&kubeconfig, &["delete", "secret", "users", "-n", "default"]);
    wait_for_status(&sluice, "admin.test", "/", 503).await;
}

/// Traefik's `retry` goes through the load balancer again, which with one server picks that
/// server: a pod that drops the first two connections unanswered is answered on the third
/// try with `attempts: 3`, and one that drops three is not (Traefik's attempts are tries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_middleware_tries_the_only_pod_again_up_to_its_attempts() {
    let pod = sluice_testkit::EchoBackend::start("only", ip(12))
        .await
        .unwrap();
    let documents = [
        middleware("again", "  retry:\n    attempts: 3\n"),
        routed("flaky", "flaky.test", &["/"], "default-again@kubernetescrd"),
    ];
    let (_dir, sluice) = serve(&documents, pod.addr(), &[]).await;
    let answered = request(
        &sluice,
        Method::GET,
        "flaky.test",
        "/?succeedAfter=2&uuid=a",
        &[],
    )
    .await;
    assert_eq!(answered.status, 200, "{answered:?}");
    assert_eq!(pod.requests(), 3, "two dropped tries, then the answer");
    let failed = request(
        &sluice,
        Method::GET,
        "flaky.test",
        "/?succeedAfter=3&uuid=b",
        &[],
    )
    .await;
    assert_eq!(failed.status, 502, "{failed:?}");
    assert_eq!(pod.requests(), 6, "three tries in all");
}
