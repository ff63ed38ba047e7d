//! TLS helpers for the end-to-end tests: manifests with `spec.tls`, and the real clients (openssl s_client, curl) run against sluice's TLS listener.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

/// An Ingress of class sluice with one rule per host to `service` port 80, a `spec.tls` entry
/// `(hosts, secret)` per item of `tls`, and `annotations`.
pub fn tls_ingress(
    name: &str,
    hosts: &[&str],
    service: &str,
    tls: &[(&[&str], &str)],
    annotations: &[(&str, &str)],
) -> String {
    let mut yaml =
        format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n");
    if !annotations.is_empty() {
        yaml.push_str("  annotations:\n");
        for (key, value) in annotations {
            writeln!(yaml, "    {key}: {value:?}").unwrap();
        }
    }
    yaml.push_str("spec:\n  ingressClassName: sluice\n");
    if !tls.is_empty() {
        yaml.push_str("  tls:\n");
        for (tls_hosts, secret) in tls {
            let quoted: Vec<String> = tls_hosts.iter().map(|host| format!("{host:?}")).collect();
            writeln!(
                yaml,
                "  - hosts: [{}]\n    secretName: {secret}",
                quoted.join(", ")
            )
            .unwrap();
        }
    }
    yaml.push_str("  rules:\n");
    for host in hosts {
        writeln!(
            yaml,
            "  - host: {host:?}\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service:\n            name: {service}\n            port:\n              number: 80"
        )
        .unwrap();
    }
    yaml
}

/// The subject of the certificate sluice serves at `addr` for `sni` (no SNI when `None`),
/// as openssl prints it, without spaces: `CN=a.test`.
pub fn served_subject(addr: SocketAddr, sni: Option<&str>) -> String {
    let mut command = Command::new("openssl");
    command.args(["s_client", "-connect", &addr.to_string()]);
    match sni {
        Some(name) => command.args(["-servername", name]),
        None => command.arg("-noservername"),
    };
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("subject="))
        .map(|subject| subject.replace(' ', ""))
        .unwrap_or_else(|| format!("no certificate: {text}"))
}

/// Runs curl with `args`; returns its exit code and standard output (`-s` is added).
pub fn curl(args: &[&str]) -> (i32, String) {
    let output = Command::new("curl")
        .arg("-s")
        .args(args)
        .output()
        .expect("curl");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// `--resolve host:port:ip` and `https://host:port{path}` for curl to reach sluice's TLS
/// listener under the name `host` (so that SNI is `host`).
pub fn https_args(tls: SocketAddr, host: &str, path: &str) -> [String; 3] {
    [
        "--resolve".to_owned(),
        format!("{host}:{}:{}", tls.port(), tls.ip()),
        format!("https://{host}:{}{path}", tls.port()),
    ]
}

/// Writes `pem` to `dir/name` and returns its path as a string.
pub fn write_pem(dir: &Path, name: &str, pem: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path.to_string_lossy().into_owned()
}

/// A rustls client configuration that trusts the CA certificates in `ca_pem`.
pub fn client_config(ca_pem: &str) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth()
}

/// A rustls server configuration serving `issued` (a certificate and its key, PEM), for test
/// pods that terminate TLS themselves.
pub fn server_config(issued: &sluice_testkit::IssuedPem) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(issued.cert.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(issued.key.as_bytes()).unwrap();
    rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap()
}

/// A TLS connection to `addr` under `server_name`, trusting the CAs in `ca` (TLS 1.2 or
/// later); the error when the handshake fails or takes more than 5 s.
pub async fn tls_dial(
    addr: std::net::SocketAddr,
    server_name: &str,
    ca: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client_config(ca)));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        connector.connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("handshake timed out"))?
}

/// A pod that terminates TLS itself with `issued` and serves HTTP/1.1, answering every request
/// with `reply(server name the client asked for, request path)` (`-` without a server name).
pub async fn https_pod(
    ip: std::net::IpAddr,
    issued: &sluice_testkit::IssuedPem,
    reply: impl Fn(&str, &str) -> String + Clone + Send + Sync + 'static,
) -> SocketAddr {
    use hyper::service::service_fn;
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server_config(issued)));
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, reply) = (acceptor.clone(), reply.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("-").to_owned();
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let body = reply(&sni, request.uri().path());
                    let body = http_body_util::Full::new(bytes::Bytes::from(body));
                    async move { Ok::<_, std::convert::Infallible>(http::Response::new(body)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}
