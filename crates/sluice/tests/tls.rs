//! End-to-end: TLS termination with real clients (openssl s_client, curl): certificates from Secrets by SNI, the default certificate, bad Secrets, 421, redirects, HSTS, Traefik's listener annotations, client certificates, hot reload and passthrough.
//!
//! The clients run as blocking processes, so every test runs on a multi-threaded runtime: the
//! backends keep answering on the other worker meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sluice_testkit::{EchoBackend, RawBackend, TestCa, Validity};
use support::tls::{curl, https_args, served_subject, tls_ingress, write_pem};
use support::{pod_ip, run_check, service, wait_until, write_manifest, Sluice};

/// Subjects as openssl prints them without spaces.
fn cn(name: &str) -> String {
    format!("CN={name}")
}

const DEFAULT_SUBJECT: &str = "CN=sluiceself-signeddefaultcertificate";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_picks_the_exact_host_then_the_wildcard_else_the_default_certificate() {
    let pod = EchoBackend::start("web", pod_ip(120)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let exact = ca.server(&["a.example.test"]).unwrap();
    let wildcard = ca.server(&["*.example.test"]).unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "app",
                &["a.example.test", "*.example.test"],
                "web",
                &[
                    (&["a.example.test"], "exact"),
                    (&["*.example.test"], "wild"),
                ],
                &[],
            ),
            service("web", 80, &[pod.addr()]),
            exact.secret_yaml("default", "exact", None),
            wildcard.secret_yaml("default", "wild", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let tls = sluice.listen_tls;
    assert_eq!(
        served_subject(tls, Some("a.example.test")),
        cn("a.example.test")
    );
    assert_eq!(
        served_subject(tls, Some("b.example.test")),
        cn("*.example.test")
    );
    assert_eq!(
        served_subject(tls, Some("x.b.example.test")),
        DEFAULT_SUBJECT,
        "a wildcard covers one label only"
    );
    assert_eq!(served_subject(tls, Some("unknown.test")), DEFAULT_SUBJECT);
    assert_eq!(served_subject(tls, None), DEFAULT_SUBJECT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http2_and_http11_over_tls_and_the_pod_hears_https() {
    let backend = RawBackend::start(pod_ip(121)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "app",
                &["secure.test"],
                "web",
                &[(&["secure.test"], "cert")],
                &[],
            ),
            service("web", 80, &[backend.addr()]),
            ca.server(&["secure.test"])
                .unwrap()
                .secret_yaml("default", "cert", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let [resolve, to, url] = https_args(sluice.listen_tls, "secure.test", "/hello?x=1");
    for (flag, expected) in [("--http2", "HTTP/2 200"), ("--http1.1", "HTTP/1.1 200")] {
        let (code, out) = curl(&["-i", flag, "--cacert", &ca_file, &resolve, &to, &url]);
        assert_eq!(code, 0, "curl {flag} failed: {out}");
        assert!(out.starts_with(expected), "{flag}: {out}");
    }
    let requests = backend.requests();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(request.request_line(), "GET /hello?x=1 HTTP/1.1");
        assert_eq!(request.header("x-forwarded-proto"), Some("https"));
        assert_eq!(
            request.header("host"),
            Some(format!("secure.test:{}", sluice.listen_tls.port()).as_str())
        );
        assert_eq!(
            request.header("x-forwarded-port"),
            Some(sluice.listen_tls.port().to_string().as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_secret_is_a_diagnostic_and_its_host_falls_back_to_the_default() {
    let pod = EchoBackend::start("web", pod_ip(122)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let good = ca.server(&["good.test"]).unwrap();
    let mut mismatched = ca.server(&["mismatch.test"]).unwrap();
    mismatched.key = ca.server(&["unrelated.test"]).unwrap().key;
    let opaque = good
        .secret_yaml("default", "opaque", None)
        .replace("type: kubernetes.io/tls", "type: Opaque");
    let garbage = "apiVersion: v1\nkind: Secret\nmetadata: {name: garbage}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: not a certificate\n  tls.key: not a key\n".to_owned();
    let hosts = [
        ("good.test", "good"),
        ("missing.test", "missing"),
        ("opaque.test", "opaque"),
        ("garbage.test", "garbage"),
        ("mismatch.test", "mismatch"),
        ("expired.test", "expired"),
        ("future.test", "future"),
        ("uncovered.test", "good"),
    ];
    let mut documents: Vec<String> = hosts
        .iter()
        .map(|(host, secret)| {
            let name = host.trim_end_matches(".test");
            tls_ingress(name, &[host], "web", &[(&[host], secret)], &[])
        })
        .collect();
    documents.extend([
        service("web", 80, &[pod.addr()]),
        good.secret_yaml("default", "good", None),
        opaque,
        garbage,
        mismatched.secret_yaml("default", "mismatch", None),
        ca.server_with(&["expired.test"], Validity::Expired)
            .unwrap()
            .secret_yaml("default", "expired", None),
        ca.server_with(&["future.test"], Validity::NotYetValid)
            .unwrap()
            .secret_yaml("default", "future", None),
    ]);
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "app.yaml", &documents);

    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(1), "bad certificates are errors:\n{out}");
    for (ingress, reason) in [
        (
            "Ingress default/missing",
            "Secret default/missing: the Secret does not exist",
        ),
        (
            "Ingress default/opaque",
            "Secret default/opaque: the Secret's type is Opaque, not kubernetes.io/tls",
        ),
        ("Ingress default/garbage", "Secret default/garbage: tls.crt"),
        (
            "Ingress default/mismatch",
            "Secret default/mismatch: tls.key does not match the certificate in tls.crt",
        ),
        (
            "Ingress default/expired",
            "Secret default/expired: the certificate has expired",
        ),
        (
            "Ingress default/future",
            "Secret default/future: the certificate is not valid yet",
        ),
        (
            "Ingress default/uncovered",
            "Secret default/good: the certificate does not cover uncovered.test",
        ),
    ] {
        let line = out
            .lines()
            .find(|line| line.contains(ingress) && line.contains("secretName"))
            .unwrap_or_else(|| panic!("no diagnostic for {ingress}:\n{out}"));
        assert!(line.contains(reason), "{line}");
        assert!(
            line.contains("served with the default certificate"),
            "{line}"
        );
    }

    let sluice = Sluice::start(dir.path(), &[]).await;
    let tls = sluice.listen_tls;
    assert_eq!(served_subject(tls, Some("good.test")), cn("good.test"));
    for (host, _) in &hosts[1..] {
        assert_eq!(served_subject(tls, Some(host)), DEFAULT_SUBJECT, "{host}");
    }
    let routes = sluice.routes().await;
    let diagnostics = routes["diagnostics"].to_string();
    assert!(
        diagnostics.contains("Secret default/expired: the certificate has expired"),
        "{diagnostics}"
    );
    assert!(
        sluice
            .log()
            .contains("Secret default/missing: the Secret does not exist"),
        "the log names it too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_served_with_another_certificate_than_the_connections_gets_421() {
    let pod = EchoBackend::start("web", pod_ip(123)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    let dir = tempfile::tempdir().unwrap();
    let shared = ca.server(&["a.test", "b.test"]).unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "a",
                &["a.test", "b.test", "c.test", "plain.test"],
                "web",
                &[(&["a.test", "b.test"], "ab"), (&["c.test"], "c")],
                &[],
            ),
            service("web", 80, &[pod.addr()]),
            shared.secret_yaml("default", "ab", None),
            ca.server(&["c.test"])
                .unwrap()
                .secret_yaml("default", "c", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let [resolve, to, url] = https_args(sluice.listen_tls, "a.test", "/");
    let status = |host: &str| {
        let header = format!("Host: {host}");
        curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            &ca_file,
            &resolve,
            &to,
            &url,
            "-H",
            &header,
        ])
        .1
    };
    assert_eq!(status("a.test"), "200");
    assert_eq!(
        status("b.test"),
        "200",
        "the same certificate may carry both hosts"
    );
    assert_eq!(status("c.test"), "421", "c.test has its own certificate");
    assert_eq!(
        status("plain.test"),
        "200",
        "a host without TLS entry takes any connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_redirects_to_https_unless_turned_off_and_hsts_goes_over_tls_only() {
    let pod = EchoBackend::start("web", pod_ip(124)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    let dir = tempfile::tempdir().unwrap();
    let hsts = ("sluice.dev/hsts", "max-age=31536000; includeSubDomains");
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "secure",
                &["secure.test"],
                "web",
                &[(&["secure.test"], "cert")],
                &[hsts],
            ),
            tls_ingress(
                "relaxed",
                &["relaxed.test"],
                "web",
                &[(&["relaxed.test"], "cert")],
                &[("nginx.ingress.kubernetes.io/ssl-redirect", "false")],
            ),
            tls_ingress(
                "forced",
                &["forced.test"],
                "web",
                &[],
                &[("nginx.ingress.kubernetes.io/force-ssl-redirect", "true")],
            ),
            tls_ingress("open", &["open.test"], "web", &[], &[]),
            service("web", 80, &[pod.addr()]),
            ca.server(&["secure.test", "relaxed.test"])
                .unwrap()
                .secret_yaml("default", "cert", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let port = sluice.listen_tls.port();
    let plain = |host: &str, path: &str| {
        let header = format!("Host: {host}");
        curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            "-H",
            &header,
            &sluice.url(path),
        ])
        .1
    };
    assert_eq!(
        plain("secure.test", "/a/b?q=1"),
        format!("308 https://secure.test:{port}/a/b?q=1")
    );
    assert_eq!(
        plain("forced.test", "/x"),
        format!("308 https://forced.test:{port}/x")
    );
    assert_eq!(plain("relaxed.test", "/"), "200 ");
    assert_eq!(plain("open.test", "/"), "200 ");
    assert_eq!(
        plain("secure.test", "/.well-known/acme-challenge/token"),
        "200 ",
        "ACME HTTP-01 challenges are never redirected"
    );

    let [resolve, to, url] = https_args(sluice.listen_tls, "secure.test", "/");
    let (_, head) = curl(&["-I", "--cacert", &ca_file, &resolve, &to, &url]);
    assert!(
        head.to_ascii_lowercase()
            .contains("strict-transport-security: max-age=31536000; includesubdomains"),
        "{head}"
    );
    let (_, head) = curl(&["-I", "-H", "Host: relaxed.test", &sluice.url("/")]);
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("strict-transport-security"),
        "{head}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_router_annotations_pick_the_listeners() {
    let pod = EchoBackend::start("web", pod_ip(125)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "tls-only",
                &["tls-only.test"],
                "web",
                &[],
                &[("traefik.ingress.kubernetes.io/router.tls", "true")],
            ),
            tls_ingress(
                "web-only",
                &["web-only.test"],
                "web",
                &[],
                &[("traefik.ingress.kubernetes.io/router.entrypoints", "web")],
            ),
            tls_ingress(
                "secure-only",
                &["secure-only.test"],
                "web",
                &[],
                &[(
                    "traefik.ingress.kubernetes.io/router.entrypoints",
                    "websecure",
                )],
            ),
            service("web", 80, &[pod.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let status = |host: &str, tls: bool| {
        let header = format!("Host: {host}");
        let url = match tls {
            true => format!("https://{}/", sluice.listen_tls),
            false => sluice.url("/"),
        };
        curl(&[
            "-k",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &header,
            &url,
        ])
        .1
    };
    assert_eq!(status("tls-only.test", true), "200");
    assert_eq!(status("tls-only.test", false), "404");
    assert_eq!(status("web-only.test", false), "200");
    assert_eq!(status("web-only.test", true), "404");
    assert_eq!(status("secure-only.test", true), "200");
    assert_eq!(status("secure-only.test", false), "404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_entries_and_secrets_reload_without_a_restart() {
    let pod = EchoBackend::start("web", pod_ip(126)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = |tls: bool| {
        let entry: &[(&[&str], &str)] = if tls { &[(&["hot.test"], "hot")] } else { &[] };
        tls_ingress("app", &["hot.test"], "web", entry, &[])
    };
    write_manifest(
        dir.path(),
        "app.yaml",
        &[app(false), service("web", 80, &[pod.addr()])],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let tls = sluice.listen_tls;
    assert_eq!(served_subject(tls, Some("hot.test")), DEFAULT_SUBJECT);

    // A new TLS entry, its Secret in another file.
    write_manifest(
        dir.path(),
        "secret.yaml",
        &[ca.server(&["hot.test"])
            .unwrap()
            .secret_yaml("default", "hot", None)],
    );
    write_manifest(
        dir.path(),
        "app.yaml",
        &[app(true), service("web", 80, &[pod.addr()])],
    );
    wait_until("the new certificate", Duration::from_secs(10), || async {
        served_subject(tls, Some("hot.test")) == cn("hot.test")
    })
    .await;

    // The Secret replaced: a certificate naming a second host shows it is the new one.
    write_manifest(
        dir.path(),
        "secret.yaml",
        &[ca.server(&["hot.test", "second.test"])
            .unwrap()
            .secret_yaml("default", "hot", None)],
    );
    wait_until(
        "the replaced certificate",
        Duration::from_secs(10),
        || async {
            let mut command = std::process::Command::new("openssl");
            let out = command
                .args([
                    "s_client",
                    "-connect",
                    &tls.to_string(),
                    "-servername",
                    "hot.test",
                ])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .unwrap();
            let pem = String::from_utf8_lossy(&out.stdout).into_owned();
            let text = std::process::Command::new("openssl")
                .args(["x509", "-noout", "-text"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    use std::io::Write;
                    child.stdin.take().unwrap().write_all(pem.as_bytes())?;
                    child.wait_with_output()
                })
                .unwrap();
            String::from_utf8_lossy(&text.stdout).contains("DNS:second.test")
        },
    )
    .await;

    // The entry removed: back to the default certificate.
    write_manifest(
        dir.path(),
        "app.yaml",
        &[app(false), service("web", 80, &[pod.addr()])],
    );
    wait_until(
        "the default certificate again",
        Duration::from_secs(10),
        || async { served_subject(tls, Some("hot.test")) == DEFAULT_SUBJECT },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_certificate_flag_serves_a_secret_to_handshakes_without_a_host() {
    let pod = EchoBackend::start("web", pod_ip(127)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress("app", &["app.test"], "web", &[], &[]),
            service("web", 80, &[pod.addr()]),
            ca.server(&["fallback.test"])
                .unwrap()
                .secret_yaml("edge", "fallback", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--default-certificate", "edge/fallback"]).await;
    assert_eq!(served_subject(sluice.listen_tls, None), cn("fallback.test"));
    assert_eq!(
        served_subject(sluice.listen_tls, Some("app.test")),
        cn("fallback.test")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_or_optional_and_passed_on() {
    let backend = RawBackend::start(pod_ip(128)).await.unwrap();
    let ca = TestCa::new("server CA").unwrap();
    let client_ca = TestCa::new("client CA").unwrap();
    let stranger_ca = TestCa::new("stranger CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    let client = client_ca.client("alice").unwrap();
    let client_cert = write_pem(files.path(), "client.pem", &client.cert);
    let client_key = write_pem(files.path(), "client.key", &client.key);
    let stranger = stranger_ca.client("mallory").unwrap();
    let stranger_cert = write_pem(files.path(), "stranger.pem", &stranger.cert);
    let stranger_key = write_pem(files.path(), "stranger.key", &stranger.key);
    let ca_secret =
        format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: client-ca}}\nstringData:\n  ca.crt: |\n{}",
        client_ca.cert_pem().lines().map(|l| format!("    {l}\n")).collect::<String>()
    );
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "strict",
                &["strict.test"],
                "web",
                &[(&["strict.test"], "cert")],
                &[
                    (
                        "nginx.ingress.kubernetes.io/auth-tls-secret",
                        "default/client-ca",
                    ),
                    ("nginx.ingress.kubernetes.io/auth-tls-verify-client", "on"),
                    (
                        "nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream",
                        "true",
                    ),
                ],
            ),
            tls_ingress(
                "relaxed",
                &["relaxed.test"],
                "web",
                &[(&["relaxed.test"], "cert")],
                &[
                    (
                        "nginx.ingress.kubernetes.io/auth-tls-secret",
                        "default/client-ca",
                    ),
                    (
                        "nginx.ingress.kubernetes.io/auth-tls-verify-client",
                        "optional",
                    ),
                ],
            ),
            service("web", 80, &[backend.addr()]),
            ca.server(&["strict.test", "relaxed.test"])
                .unwrap()
                .secret_yaml("default", "cert", None),
            ca_secret,
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let request = |host: &str, cert: Option<(&str, &str)>| {
        let [resolve, to, url] = https_args(sluice.listen_tls, host, "/");
        let mut args = vec![
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--cacert",
            &ca_file,
            &resolve,
            &to,
            &url,
            "-H",
            "ssl-client-verify: SUCCESS",
        ];
        if let Some((cert, key)) = cert {
            args.extend(["--cert", cert, "--key", key]);
        }
        curl(&args)
    };
    // As ingress-nginx: the handshake completes and the request gets 400.
    assert_eq!(
        request("strict.test", None),
        (0, "400".to_owned()),
        "on: no certificate"
    );
    assert_eq!(
        request("strict.test", Some((&stranger_cert, &stranger_key))),
        (0, "400".to_owned()),
        "on: a certificate from another CA"
    );
    assert_eq!(backend.requests().len(), 0);
    assert_eq!(
        request("strict.test", Some((&client_cert, &client_key))).1,
        "200"
    );
    let passed = backend.only_request();
    assert_eq!(passed.header("ssl-client-verify"), Some("SUCCESS"));
    let escaped = passed
        .header("ssl-client-cert")
        .expect("the certificate is passed on");
    assert!(
        escaped.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
        "{escaped}"
    );

    assert_eq!(
        request("relaxed.test", None).1,
        "200",
        "optional: no certificate is fine"
    );
    let requests = backend.requests();
    let last = requests.last().unwrap();
    assert_eq!(
        last.header("ssl-client-verify"),
        Some("NONE"),
        "the client's own header is replaced"
    );
    assert_eq!(last.header("ssl-client-cert"), None);
    assert_eq!(
        request("relaxed.test", Some((&stranger_cert, &stranger_key))),
        (0, "400".to_owned()),
        "optional: a certificate that is sent must verify"
    );
}

/// `openssl s_server -www` on `addr` with `certificate`: a pod that terminates TLS itself.
struct OpensslServer(std::process::Child);

impl OpensslServer {
    async fn start(addr: std::net::SocketAddr, cert: &str, key: &str) -> Self {
        let child = std::process::Command::new("openssl")
            .args([
                "s_server",
                "-accept",
                &addr.to_string(),
                "-cert",
                cert,
                "-key",
                key,
                "-www",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl s_server");
        wait_until(
            "openssl s_server to listen",
            Duration::from_secs(10),
            || async { tokio::net::TcpStream::connect(addr).await.is_ok() },
        )
        .await;
        Self(child)
    }
}

impl Drop for OpensslServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_passthrough_splices_the_tls_stream_to_a_pod_that_terminates_it() {
    let pod_ca = TestCa::new("pod CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let issued = pod_ca.server(&["pass.test"]).unwrap();
    let cert = write_pem(files.path(), "pod.pem", &issued.cert);
    let key = write_pem(files.path(), "pod.key", &issued.key);
    let ca_file = write_pem(files.path(), "ca.pem", &pod_ca.cert_pem());
    let port = support::free_port();
    let pod_addr = std::net::SocketAddr::new(pod_ip(129), port);
    let _pod = OpensslServer::start(pod_addr, &cert, &key).await;
    let plain = EchoBackend::start("plain", pod_ip(130)).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress(
                "argocd",
                &["pass.test"],
                "argocd",
                &[],
                &[("nginx.ingress.kubernetes.io/ssl-passthrough", "true")],
            )
            .replace("path: /\n", "path: /api\n"),
            service("argocd", 80, &[pod_addr]),
            tls_ingress("other", &["other.test"], "plain", &[], &[]),
            service("plain", 80, &[plain.addr()]),
        ],
    );
    let (_, check) = run_check(dir.path());
    assert!(
        check.contains("TLS connections for pass.test are passed through unterminated")
            && check.contains("paths are ignored"),
        "{check}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let tls = sluice.listen_tls;
    assert_eq!(
        served_subject(tls, Some("pass.test")),
        cn("pass.test"),
        "the client sees the pod's own certificate"
    );
    let [resolve, to, url] = https_args(tls, "pass.test", "/any/path");
    let (code, body) = curl(&["--http1.1", "--cacert", &ca_file, &resolve, &to, &url]);
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("s_server"), "openssl's status page: {body}");
    // Other hosts are still terminated by sluice.
    assert_eq!(served_subject(tls, Some("other.test")), DEFAULT_SUBJECT);
    let (_, status) = curl(&[
        "-k",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "Host: other.test",
        &format!("https://{tls}/"),
    ]);
    assert_eq!(status, "200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_pods_skips_verification_by_default_and_verifies_against_proxy_ssl_secret() {
    let pod_ca = TestCa::new("pod CA").unwrap();
    let other_ca = TestCa::new("other CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let issued = pod_ca.server(&["pod.internal"]).unwrap();
    let cert = write_pem(files.path(), "pod.pem", &issued.cert);
    let key = write_pem(files.path(), "pod.key", &issued.key);
    let pod_addr = std::net::SocketAddr::new(pod_ip(131), support::free_port());
    let _pod = OpensslServer::start(pod_addr, &cert, &key).await;
    let ca_secret = |name: &str, ca: &TestCa| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\nstringData:\n  ca.crt: |\n{}",
            ca.cert_pem().lines().map(|l| format!("    {l}\n")).collect::<String>()
        )
    };
    let https = ("nginx.ingress.kubernetes.io/backend-protocol", "HTTPS");
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            tls_ingress("unverified", &["unverified.test"], "pod", &[], &[https]),
            tls_ingress(
                "verified",
                &["verified.test"],
                "pod",
                &[],
                &[
                    https,
                    ("nginx.ingress.kubernetes.io/proxy-ssl-verify", "on"),
                    (
                        "nginx.ingress.kubernetes.io/proxy-ssl-secret",
                        "default/pod-ca",
                    ),
                    ("nginx.ingress.kubernetes.io/proxy-ssl-name", "pod.internal"),
                ],
            ),
            tls_ingress(
                "wrong-ca",
                &["wrong-ca.test"],
                "pod",
                &[],
                &[
                    https,
                    ("nginx.ingress.kubernetes.io/proxy-ssl-verify", "on"),
                    (
                        "nginx.ingress.kubernetes.io/proxy-ssl-secret",
                        "default/other-ca",
                    ),
                    ("nginx.ingress.kubernetes.io/proxy-ssl-name", "pod.internal"),
                ],
            ),
            service("pod", 80, &[pod_addr]),
            ca_secret("pod-ca", &pod_ca),
            ca_secret("other-ca", &other_ca),
        ],
    );
    let (_, check) = run_check(dir.path());
    assert!(
        check.contains("without verifying their certificates (proxy-ssl-verify is off"),
        "{check}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let fetch = |host: &str| {
        let header = format!("Host: {host}");
        curl(&["-w", "\n%{http_code}", "-H", &header, &sluice.url("/")]).1
    };
    let unverified = fetch("unverified.test");
    assert!(
        unverified.ends_with("\n200") && unverified.contains("s_server"),
        "{unverified}"
    );
    let verified = fetch("verified.test");
    assert!(
        verified.ends_with("\n200") && verified.contains("s_server"),
        "{verified}"
    );
    assert!(
        fetch("wrong-ca.test").ends_with("\n502"),
        "a certificate the CA did not sign is refused"
    );
}

/// A TLS client connection to sluice for `host`, trusting `ca_pem`.
async fn hold_connection(
    addr: std::net::SocketAddr,
    host: &str,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let config = support::tls::client_config(ca_pem);
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    connector.connect(name, tcp).await.unwrap()
}

/// Sends `GET /` for `host` on `stream` and returns the response once its body `expected` is in.
async fn get_on(
    stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    host: &str,
    expected: &str,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&response).ends_with(expected) {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("no full response: {}", String::from_utf8_lossy(&response)))
            .unwrap();
        assert!(read > 0, "closed: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_keeps_its_certificate_while_the_secret_is_replaced() {
    let pod = EchoBackend::start("held", pod_ip(132)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = tls_ingress(
        "app",
        &["hold.test"],
        "web",
        &[(&["hold.test"], "hold")],
        &[],
    );
    let write = |names: &[&str]| {
        let secret = ca
            .server(names)
            .unwrap()
            .secret_yaml("default", "hold", None);
        write_manifest(
            dir.path(),
            "app.yaml",
            &[app.clone(), service("web", 80, &[pod.addr()]), secret],
        );
    };
    write(&["hold.test"]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut held = hold_connection(sluice.listen_tls, "hold.test", &ca.cert_pem()).await;
    let first = held.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert!(get_on(&mut held, "hold.test", "held\n")
        .await
        .starts_with("HTTP/1.1 200"));

    write(&["hold.test", "renewed.hold.test"]);
    wait_until(
        "new handshakes to get the new certificate",
        Duration::from_secs(10),
        || async {
            let fresh = hold_connection(sluice.listen_tls, "hold.test", &ca.cert_pem()).await;
            fresh.get_ref().1.peer_certificates().unwrap()[0] != first
        },
    )
    .await;
    let response = get_on(&mut held, "hold.test", "held\n").await;
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "the held connection still serves: {response}"
    );
    assert_eq!(held.get_ref().1.peer_certificates().unwrap()[0], first);
}

/// An idle HTTPS keep-alive connection parks like a plain one (the client offers no ALPN, so
/// the first bytes decide the protocol) and serves its next requests on the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tls_connection_parks_and_serves_again_on_the_same_session() {
    let pod = EchoBackend::start("parked", pod_ip(135)).await.unwrap();
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = tls_ingress(
        "app",
        &["park.test"],
        "web",
        &[(&["park.test"], "park")],
        &[],
    );
    let secret = ca
        .server(&["park.test"])
        .unwrap()
        .secret_yaml("default", "park", None);
    write_manifest(
        dir.path(),
        "app.yaml",
        &[app, service("web", 80, &[pod.addr()]), secret],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut held = hold_connection(sluice.listen_tls, "park.test", &ca.cert_pem()).await;
    for round in 0..3 {
        let response = get_on(&mut held, "park.test", "parked\n").await;
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "round {round}: {response}"
        );
        wait_until(
            "the TLS connection to park",
            Duration::from_secs(5),
            || async {
                sluice
                    .metric_sum("sluice_parked_connections", &[("listener", "https")])
                    .await
                    == 1.0
            },
        )
        .await;
    }
}

/// An Argo CD-like pod on `ip` that terminates TLS itself for pass.test, behind sluice with
/// `ssl-passthrough` and `flags`.
struct PassthroughPod {
    ca: TestCa,
    ca_file: String,
    sluice: Sluice,
    _pod: OpensslServer,
    _files: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

impl PassthroughPod {
    async fn start(ip: u8, flags: &[&str]) -> Self {
        let ca = TestCa::new("pod CA").unwrap();
        let files = tempfile::tempdir().unwrap();
        let issued = ca.server(&["pass.test"]).unwrap();
        let cert = write_pem(files.path(), "pod.pem", &issued.cert);
        let key = write_pem(files.path(), "pod.key", &issued.key);
        let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
        let pod_addr = std::net::SocketAddr::new(pod_ip(ip), support::free_port());
        let pod = OpensslServer::start(pod_addr, &cert, &key).await;
        let dir = tempfile::tempdir().unwrap();
        let passthrough = ("nginx.ingress.kubernetes.io/ssl-passthrough", "true");
        write_manifest(
            dir.path(),
            "app.yaml",
            &[
                tls_ingress("argocd", &["pass.test"], "argocd", &[], &[passthrough]),
                service("argocd", 80, &[pod_addr]),
            ],
        );
        let sluice = Sluice::start(dir.path(), flags).await;
        Self {
            ca,
            ca_file,
            sluice,
            _pod: pod,
            _files: files,
            _dir: dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_behind_a_proxy_protocol_load_balancer_replays_every_byte_after_the_header() {
    let pod = PassthroughPod::start(133, &["--proxy-protocol"]).await;
    let [resolve, to, url] = https_args(pod.sluice.listen_tls, "pass.test", "/");
    let (code, body) = curl(&[
        "--haproxy-protocol",
        "--http1.1",
        "--cacert",
        &pod.ca_file,
        &resolve,
        &to,
        &url,
    ]);
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("s_server"), "openssl's status page: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_connection_outlives_the_client_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pod = PassthroughPod::start(134, &["--client-header-timeout", "1s"]).await;
    let sluice = &pod.sluice;
    let config = std::sync::Arc::new(support::tls::client_config(&pod.ca.cert_pem()));
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = tokio::net::TcpStream::connect(sluice.listen_tls)
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("pass.test").unwrap();
    let mut stream = connector.connect(name, tcp).await.unwrap();
    let open = [("listener", "https"), ("protocol", "passthrough")];
    assert_eq!(
        sluice.metric_sum("sluice_open_connections", &open).await,
        1.0
    );
    // Twice the header timeout with nothing sent: the spliced connection stays up.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut page = Vec::new();
    let _ = stream.read_to_end(&mut page).await;
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("s_server"), "the pod's status page: {page}");
    drop(stream);
    wait_until(
        "the passthrough gauge back to 0",
        Duration::from_secs(5),
        || async { sluice.metric_sum("sluice_open_connections", &open).await == 0.0 },
    )
    .await;
}
