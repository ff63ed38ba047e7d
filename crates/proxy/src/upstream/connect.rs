//! How the data plane talks to a route's endpoints: HTTP/1.1, h2c, or TLS where ALPN picks HTTP/2 or HTTP/1.1, with the endpoint's certificate verified against the route's CAs or, as ingress-nginx does by default, not at all.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sluice_routing::{SubjectName, UpstreamProtocol, UpstreamTls};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::ProxyError;

/// The protocol of one request's connections to its endpoints.
pub(crate) enum Wire {
    Http1,
    H2c,
    Tls {
        config: Arc<ClientConfig>,
        /// The name sent as SNI and verified; `None` uses the endpoint's IP address.
        server_name: Option<ServerName<'static>>,
        http2_only: bool,
        /// What a pooled connection must have been opened with to be reused: the
        /// verification settings and the server name, hashed.
        identity: u64,
    },
}

impl Wire {
    /// The wire for a route's protocol; `host` (the request's, without a port) is the TLS
    /// server name unless the route names one (`proxy-ssl-name`).
    pub(crate) fn for_route(protocol: &UpstreamProtocol, host: &str) -> Result<Self, ProxyError> {
        Ok(match protocol {
            UpstreamProtocol::Http1 => Self::Http1,
            UpstreamProtocol::H2c => Self::H2c,
            UpstreamProtocol::Tls(tls) => {
                let name = tls.server_name.as_deref().unwrap_or(host);
                let (config, settings) = client_config(tls)?;
                let mut identity = DefaultHasher::new();
                (settings, name).hash(&mut identity);
                Self::Tls {
                    config,
                    server_name: ServerName::try_from(name.to_owned()).ok(),
                    http2_only: tls.http2_only,
                    identity: identity.finish(),
                }
            }
        })
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Self::Tls { .. })
    }

    /// Which pooled connections this wire may reuse: 0 for plain ones, else a hash of the TLS
    /// settings and server name, so that a connection verified for one BackendTLSPolicy (or
    /// opened with one SNI) never carries a request that asks for another.
    pub(crate) fn identity(&self) -> u64 {
        match self {
            Self::Http1 | Self::H2c => 0,
            Self::Tls { identity, .. } => *identity,
        }
    }

    pub(crate) fn may_use_http2(&self) -> bool {
        !matches!(self, Self::Http1)
    }

    pub(crate) fn may_use_http1(&self) -> bool {
        match self {
            Self::Http1 => true,
            Self::H2c => false,
            Self::Tls { http2_only, .. } => !http2_only,
        }
    }

    /// Sets up the protocol on a connected socket: the TLS handshake when the wire has one.
    pub(crate) async fn open(
        &self,
        stream: TcpStream,
        authority: &str,
    ) -> Result<Opened, ProxyError> {
        match self {
            Self::Http1 => Ok(Opened::Http1(Stream::Plain(stream))),
            Self::H2c => Ok(Opened::Http2(Stream::Plain(stream))),
            Self::Tls {
                config,
                server_name,
                ..
            } => {
                let name = match server_name {
                    Some(name) => name.clone(),
                    None => endpoint_name(authority)?,
                };
                let tls = TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(ProxyError::ConnectFailed)?;
                let http2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let stream = Stream::Tls(Box::new(tls));
                Ok(match http2 {
                    true => Opened::Http2(stream),
                    false => Opened::Http1(stream),
                })
            }
        }
    }
}

/// Opens TLS over a connected socket for a TCP stream (a TLS-terminating or TCP listener's
/// connection to a Service a BackendTLSPolicy targets): the route's verification and server
/// name, no ALPN.
pub(crate) async fn open_stream_tls(
    tls: &UpstreamTls,
    stream: TcpStream,
    authority: &str,
) -> io::Result<TlsStream<TcpStream>> {
    let (config, _) = client_config(tls).map_err(io::Error::other)?;
    let mut config = ClientConfig::clone(&config);
    config.alpn_protocols.clear();
    let name = match &tls.server_name {
        Some(name) => ServerName::try_from(name.clone()).map_err(io::Error::other)?,
        None => endpoint_name(authority).map_err(io::Error::other)?,
    };
    TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
}

/// The endpoint's IP address as a TLS server name.
fn endpoint_name(authority: &str) -> Result<ServerName<'static>, ProxyError> {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|error| {
        ProxyError::ConnectFailed(io::Error::new(io::ErrorKind::InvalidInput, error))
    })
}

/// A connected socket, with the protocol ALPN chose.
pub(crate) enum Opened {
    Http1(Stream),
    Http2(Stream),
}

/// A socket to an endpoint, plain or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(stream) => stream.is_write_vectored(),
            Self::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The route's TLS client configuration and a hash of the settings it was built from, made
/// once and attached to its policy.
fn client_config(tls: &UpstreamTls) -> Result<(Arc<ClientConfig>, u64), ProxyError> {
    let build = || build_client_config(tls).map(|config| (config, settings_hash(tls)));
    let built = tls
        .client
        .get_or_attach(|| build().map_err(|error| error.to_string()));
    match built {
        Some(Ok(built)) => Ok(built.clone()),
        Some(Err(reason)) => Err(ProxyError::ConnectFailed(io::Error::other(reason.clone()))),
        None => build().map_err(|error| ProxyError::ConnectFailed(io::Error::other(error))),
    }
}

/// A hash of everything that decides how an endpoint's certificate is checked.
fn settings_hash(tls: &UpstreamTls) -> u64 {
    let mut hasher = DefaultHasher::new();
    tls.http2_only.hash(&mut hasher);
    tls.system_roots.hash(&mut hasher);
    tls.server_name.hash(&mut hasher);
    tls.subject_alt_names.hash(&mut hasher);
    match &tls.verify_roots {
        Some(roots) => roots
            .iter()
            .for_each(|root| root.as_ref().hash(&mut hasher)),
        None => "no verification".hash(&mut hasher),
    }
    if let Some(certificate) = &tls.client_certificate {
        certificate
            .key
            .cert
            .iter()
            .for_each(|cert| cert.as_ref().hash(&mut hasher));
    }
    hasher.finish()
}

/// A Gateway's backend client certificate, presented whenever an endpoint asks for one.
#[derive(Debug)]
struct PresentCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for PresentCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn build_client_config(tls: &UpstreamTls) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let verifier: Arc<dyn ServerCertVerifier> = match &tls.verify_roots {
        Some(roots) => {
            let mut store = RootCertStore::empty();
            store.add_parsable_certificates(roots.iter().cloned());
            if tls.system_roots {
                store.add_parsable_certificates(system_roots());
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|error| rustls::Error::General(error.to_string()))?;
            match tls.subject_alt_names.is_empty() {
                true => webpki,
                false => Arc::new(SubjectNameVerifier {
                    webpki,
                    names: tls.subject_alt_names.clone(),
                }),
            }
        }
        None => Arc::new(AcceptAnyCertificate(provider)),
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &tls.client_certificate {
        Some(certificate) => {
            builder.with_client_cert_resolver(Arc::new(PresentCertificate(certificate.key.clone())))
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match tls.http2_only {
        true => vec![b"h2".to_vec()],
        false => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
}

/// The CAs the operating system trusts (read once; none when its store cannot be read).
fn system_roots() -> Vec<CertificateDer<'static>> {
    static ROOTS: std::sync::OnceLock<Vec<CertificateDer<'static>>> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            for error in &loaded.errors {
                tracing::warn!(%error, "reading the system's CA certificates");
            }
            loaded.certs
        })
        .clone()
}

/// BackendTLSPolicy's `subjectAltNames`: the chain is verified as usual, but the certificate
/// must carry one of the names (a DNS name, matched as webpki matches a server name, or a URI,
/// compared exactly) rather than the name sent as SNI.
#[derive(Debug)]
struct SubjectNameVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    names: Vec<SubjectName>,
}

impl SubjectNameVerifier {
    /// Whether the certificate carries `uri` as a URI subject alternative name.
    fn carries_uri(end_entity: &CertificateDer<'_>, uri: &str) -> bool {
        let Ok((_, certificate)) = x509_parser::parse_x509_certificate(end_entity) else {
            return false;
        };
        let Ok(Some(names)) = certificate.subject_alternative_name() else {
            return false;
        };
        names.value.general_names.iter().any(|name| {
            matches!(name, x509_parser::extensions::GeneralName::URI(carried) if *carried == uri)
        })
    }
}

impl ServerCertVerifier for SubjectNameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verify = |name: &ServerName<'_>| {
            self.webpki
                .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
        };
        // The chain first: a wrong name is the only failure the names below may make good.
        match verify(server_name) {
            Ok(verified) if self.names.is_empty() => return Ok(verified),
            Ok(_) => {}
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => {}
            Err(error) => return Err(error),
        }
        let carried = self.names.iter().any(|name| match name {
            SubjectName::Dns(dns) => {
                ServerName::try_from(dns.as_str()).is_ok_and(|dns| verify(&dns).is_ok())
            }
            SubjectName::Uri(uri) => Self::carries_uri(end_entity, uri),
        });
        match carried {
            true => Ok(ServerCertVerified::assertion()),
            false => Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `proxy-ssl-verify: "off"`: any certificate is accepted, but the handshake's signatures are
/// still checked, so the session is bound to the key the endpoint presented.
#[derive(Debug)]
pub(crate) struct AcceptAnyCertificate(pub(crate) Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
