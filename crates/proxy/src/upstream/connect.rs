//! How the data plane talks to a route's endpoints: HTTP/1.1, h2c, or TLS where ALPN picks HTTP/2 or HTTP/1.1, with the endpoint's certificate verified against the route's CAs or, as ingress-nginx does by default, not at all.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sluice_routing::{UpstreamProtocol, UpstreamTls};
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
                Self::Tls {
                    config: client_config(tls)?,
                    server_name: ServerName::try_from(name.to_owned()).ok(),
                    http2_only: tls.http2_only,
                }
            }
        })
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Self::Tls { .. })
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

/// The route's TLS client configuration, built once and attached to its policy.
fn client_config(tls: &UpstreamTls) -> Result<Arc<ClientConfig>, ProxyError> {
    let built = tls
        .client
        .get_or_attach(|| build_client_config(tls).map_err(|error| error.to_string()));
    match built {
        Some(Ok(config)) => Ok(config.clone()),
        Some(Err(reason)) => Err(ProxyError::ConnectFailed(io::Error::other(reason.clone()))),
        None => build_client_config(tls)
            .map_err(|error| ProxyError::ConnectFailed(io::Error::other(error))),
    }
}

fn build_client_config(tls: &UpstreamTls) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let mut config = match &tls.verify_roots {
        Some(roots) => {
            let mut store = RootCertStore::empty();
            store.add_parsable_certificates(roots.iter().cloned());
            builder.with_root_certificates(store).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = match tls.http2_only {
        true => vec![b"h2".to_vec()],
        false => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
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
