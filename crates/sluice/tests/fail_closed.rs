//! End-to-end: what sluice cannot honour that restricts access or routing makes the affected routes answer 503 (and the diagnostic an error), while the rest of the table serves; TLS entries without hosts serve the rule hosts their certificate covers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr};

use sluice_testkit::{get, http_client, EchoBackend};
use support::tls::{curl, https_args, write_pem};
use support::{annotated_ingress, ingress, run_check_with, service, write_manifest, Sluice};

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 7, n))
}

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(path).unwrap();
    // The fixture's objects, without its expectations.
    text.split("apiVersion: sluice.dev/test")
        .next()
        .unwrap()
        .to_owned()
}

async fn status(sluice: &Sluice, host: &str, path: &str) -> u16 {
    get(&http_client(), &sluice.url(path), host)
        .await
        .unwrap()
        .status
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snippet_answers_503_on_every_route_of_its_ingress_and_the_rest_of_the_table_serves() {
    let pod = EchoBackend::start("nextcloud", ip(1)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The nextcloud chart's Ingress as rendered, with its server-snippet's deny rules.
    let chart = fixture("snippet_fails_closed_nextcloud.yaml");
    let chart: String = chart
        .split("---\napiVersion: v1\nkind: Service")
        .next()
        .unwrap()
        .to_owned();
    std::fs::write(dir.path().join("nextcloud.yaml"), chart).unwrap();
    write_manifest(
        dir.path(),
        "rest.yaml",
        &[
            service("nextcloud", 8080, &[pod.addr()]),
            ingress("open", "open.test", &[("/", "Prefix", "nextcloud", 8080)])
                .replace("ingressClassName: sluice", "ingressClassName: nginx"),
            annotated_ingress(
                "checked",
                "checked.test",
                &[("/", "Prefix", "nextcloud", 8080)],
                &[
                    (
                        "nginx.ingress.kubernetes.io/configuration-snippet",
                        "more_set_headers \"X-A: 1\";",
                    ),
                    ("sluice.dev/ignore-snippets", "true"),
                ],
            )
            .replace("ingressClassName: sluice", "ingressClassName: nginx"),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--ingress-class", "nginx"]).await;
    for path in ["/config/config.php", "/data/ana/files/secret.txt", "/"] {
        assert_eq!(
            status(&sluice, "nextcloud.kube.home", path).await,
            503,
            "{path}"
        );
    }
    assert_eq!(pod.requests(), 0, "nothing of nextcloud was served");
    assert_eq!(
        status(&sluice, "open.test", "/config/config.php").await,
        200
    );
    assert_eq!(status(&sluice, "checked.test", "/").await, 200, "opted out");
    let routes = sluice.routes().await;
    let errors: Vec<&serde_json::Value> = routes["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["object"], "Ingress default/nextcloud");
    assert_eq!(
        errors[0]["field"],
        "metadata.annotations[nginx.ingress.kubernetes.io/server-snippet]"
    );
    let (code, out) = run_check_with(dir.path(), &["--ingress-class", "nginx"]);
    assert_eq!(code, Some(1), "check fails on the error: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_middlewares_wafs_load_balancer_actions_and_fastcgi_answer_503_only_where_they_apply(
) {
    let pod = EchoBackend::start("web", ip(2)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let route = |name: &str, annotations: &[(&str, &str)]| {
        annotated_ingress(
            name,
            &format!("{name}.test"),
            &[("/", "Prefix", "web", 80)],
            annotations,
        )
    };
    let use_annotation = ingress("alb", "alb.test", &[("/", "Prefix", "web", 80)]).replace(
        "      - path: /\n",
        "      - path: /login\n        pathType: Prefix\n        backend:\n          service:\n            name: ssl-redirect\n            port:\n              name: use-annotation\n      - path: /\n",
    );
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            service("web", 80, &[pod.addr()]),
            route(
                "authelia",
                &[(
                    "traefik.ingress.kubernetes.io/router.middlewares",
                    "authelia-forwardauth-authelia@kubernetescrd",
                )],
            ),
            route(
                "waf",
                &[("nginx.ingress.kubernetes.io/enable-modsecurity", "true")],
            ),
            route(
                "php",
                &[("nginx.ingress.kubernetes.io/backend-protocol", "FCGI")],
            ),
            route("plain", &[]),
            use_annotation,
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(status(&sluice, "authelia.test", "/").await, 503);
    assert_eq!(status(&sluice, "waf.test", "/").await, 503);
    assert_eq!(status(&sluice, "php.test", "/index.php").await, 503);
    assert_eq!(status(&sluice, "alb.test", "/login").await, 503);
    assert_eq!(pod.requests(), 0);
    assert_eq!(
        status(&sluice, "alb.test", "/").await,
        200,
        "the other path serves"
    );
    assert_eq!(status(&sluice, "plain.test", "/").await, 200);
    assert_eq!(pod.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_entry_without_hosts_serves_its_certificate_for_the_hosts_it_covers_and_redirects_them(
) {
    let pod = EchoBackend::start("argocd", ip(3)).await.unwrap();
    let ca = sluice_testkit::TestCa::new("fail-closed test CA").unwrap();
    let issued = ca.server(&["argocd.example.com"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_path = write_pem(dir.path(), "ca.pem", &ca.cert_pem());
    // Argo CD's GKE Ingress, its "/*" path written as Prefix "/" (as its doc's newer Ingress).
    let argocd = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: argocd\nspec:\n  ingressClassName: sluice\n  tls:\n    - secretName: secret-example-com\n  rules:\n    - host: argocd.example.com\n      http:\n        paths:\n        - pathType: Prefix\n          path: \"/\"\n          backend:\n            service:\n              name: argocd-server\n              port:\n                number: 80\n    - host: other.example.com\n      http:\n        paths:\n        - pathType: Prefix\n          path: \"/\"\n          backend:\n            service:\n              name: argocd-server\n              port:\n                number: 80\n";
    write_manifest(
        dir.path(),
        "argocd.yaml",
        &[
            argocd.to_owned(),
            issued.secret_yaml("default", "secret-example-com", None),
            service("argocd-server", 80, &[pod.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let target = https_args(sluice.listen_tls, "argocd.example.com", "/");
    let (code, body) = curl(&["--cacert", &ca_path, &target[0], &target[1], &target[2]]);
    assert_eq!(
        (code, body.as_str()),
        (0, "argocd\n"),
        "verified against the CA"
    );
    let redirect = get(
        &http_client(),
        &sluice.url("/applications?x=1"),
        "argocd.example.com",
    )
    .await
    .unwrap();
    assert_eq!(redirect.status, 308);
    let location = format!(
        "https://argocd.example.com:{}/applications?x=1",
        sluice.listen_tls.port()
    );
    assert_eq!(redirect.headers["location"], location.as_str());
    // A rule host the certificate does not cover: plain HTTP as before, and a warning.
    assert_eq!(status(&sluice, "other.example.com", "/").await, 200);
    let routes = sluice.routes().await;
    let warned = routes["diagnostics"].as_array().unwrap().iter().any(|d| {
        d["severity"] == "warning"
            && d["message"]
                .as_str()
                .unwrap()
                .contains("does not cover rule host other.example.com")
    });
    assert!(warned, "{routes}");
}
