//! The TLS listener's handshake: the ClientHello's SNI picks a site from the published table (its certificate and client-certificate rule), a passthrough host is spliced unterminated, and everything else gets the default certificate.

use bytes::Bytes;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{Acceptor, ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ProtocolVersion, ServerConfig};
use sluice_routing::{Certificate, RoutingTable, TlsMode, TlsSite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use super::client_auth::ClientCheck;
use super::rewound::Rewound;
use crate::connection::{ClientCertificate, TlsInfo};
use crate::request::table_handle::TableHandle;

/// The outcome of a TLS listener's first bytes.
pub(crate) enum Handshake {
    /// Terminated here: serve HTTP over the stream.
    Terminated(Box<TlsStream<Rewound<TcpStream>>>, Arc<TlsInfo>),
    /// A passthrough host: the connection is to be spliced to the host's backend, replaying
    /// what was read.
    Passthrough(Passthrough),
    /// On a Gateway HTTPS socket shared with TLS listeners, a server name that selects a TLS
    /// listener: the connection, with what was read to be read again, goes to the stream path
    /// ([`TlsTerminator::serve_tls_listener`]).
    TlsListener(Rewound<TcpStream>),
}

/// A connection for a passthrough host, its ClientHello read but not answered.
pub(crate) struct Passthrough {
    socket: TcpStream,
    hello: Vec<u8>,
    unread: Bytes,
    table: Arc<RoutingTable>,
    host: Box<str>,
}

/// The outcome of a Gateway TLS socket's first bytes.
pub(crate) enum StreamHandshake {
    /// The listener the server name selects passes TLS through: the socket, and the bytes
    /// read from it so far (the ClientHello) to replay to the backend.
    Passthrough { socket: TcpStream, replay: Vec<u8> },
    /// The listener terminates TLS: the decrypted stream.
    Terminated(Box<TlsStream<Rewound<TcpStream>>>),
}

/// Builds the server configuration of each site on first use, and keeps the default one.
pub struct TlsTerminator {
    table: TableHandle,
    provider: Arc<CryptoProvider>,
    /// Served when neither a site nor `--default-certificate` has a certificate.
    generated: Arc<Certificate>,
    /// The default configuration, with the table's default certificate it was built for.
    default_config: Mutex<Option<DefaultConfig>>,
    connect_timeout: Duration,
    /// On a Gateway HTTPS or TLS socket: its address; the listener the server name selects on
    /// it gives the certificate, instead of the Ingress TLS hosts.
    gateway_socket: Option<std::net::SocketAddr>,
    /// ALPN `h2` and `http/1.1` offered: not on a TLS socket, whose decrypted bytes go to a
    /// backend sluice does not speak HTTP to.
    alpn: bool,
    /// On a Gateway HTTPS socket: how the connections of the TLS listeners that share it are
    /// served.
    tls_listeners: Option<TlsListeners>,
}

/// The TLS listeners' side of a Gateway HTTPS socket: their terminator (no ALPN) and the
/// stream path's options.
struct TlsListeners {
    terminator: Arc<TlsTerminator>,
    options: Arc<super::stream::StreamOptions>,
}

/// A site's server configuration, and the check of client certificates when it asks for them.
#[derive(Clone)]
struct SiteConfig {
    server: Arc<ServerConfig>,
    client_check: Option<Arc<ClientCheck>>,
}

/// The default configuration and the table's default certificate it was built for.
type DefaultConfig = (Option<Arc<Certificate>>, Arc<ServerConfig>);

/// Why the TLS listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("generating the self-signed default certificate failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsTerminator {
    /// A terminator over the published table, with a freshly generated self-signed
    /// certificate for handshakes that no Secret serves.
    pub fn new(table: TableHandle, connect_timeout: Duration) -> Result<Self, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let generated = generate_self_signed(
            "sluice-generated-default",
            &["sluice.invalid".to_owned()],
            &provider,
        )?;
        Ok(Self {
            table,
            provider,
            generated: Arc::new(generated),
            default_config: Mutex::new(None),
            connect_timeout,
            gateway_socket: None,
            alpn: true,
            tls_listeners: None,
        })
    }

    /// This terminator for the Gateway TLS socket bound at `socket` (TLSRoute): the listener
    /// the server name selects passes the stream through or terminates it, without ALPN.
    pub fn for_gateway_stream_socket(mut self, socket: std::net::SocketAddr) -> Self {
        self.gateway_socket = Some(socket);
        self.alpn = false;
        self
    }

    /// Reads the ClientHello on a Gateway TLS socket, routes it by its server name with
    /// `route` (before any byte is answered: a name no route takes gets the connection closed,
    /// not a TLS alert), and, as the listener the name selects says, hands the connection back
    /// for passthrough or completes the handshake.
    pub(crate) async fn stream_handshake<R>(
        &self,
        mut io: Rewound<TcpStream>,
        route: impl FnOnce(&RoutingTable, &str) -> io::Result<R>,
    ) -> io::Result<(R, StreamHandshake)> {
        let socket = self
            .gateway_socket
            .ok_or_else(|| io::Error::other("not a Gateway TLS socket"))?;
        let table = self.table.load();
        io.record();
        let mut start = LazyConfigAcceptor::new(Acceptor::default(), io).await?;
        let server_name: Box<str> = start
            .client_hello()
            .server_name()
            .map(|name| name.to_ascii_lowercase().into_boxed_str())
            .unwrap_or_default();
        // A name no listener takes finds no route either.
        let routed = route(&table, &server_name)?;
        let mode = table.gateways().tls_mode(socket, &server_name);
        let Some(mode) = mode else {
            return Err(io::Error::other(format!(
                "no TLS listener takes server name {server_name:?}"
            )));
        };
        let handshake = match mode {
            TlsMode::Passthrough => {
                let (socket, mut replay, unread) = start.io.into_parts();
                replay.extend_from_slice(&unread);
                StreamHandshake::Passthrough { socket, replay }
            }
            TlsMode::Terminate(site) => {
                start.io.stop_recording();
                let config = self.config_for(Some(site), &table)?;
                let stream = start.into_stream(config.server.clone()).await?;
                StreamHandshake::Terminated(Box::new(stream))
            }
        };
        Ok((routed, handshake))
    }

    /// This terminator for the Gateway HTTPS socket bound at `socket`: each handshake gets
    /// the certificate of the HTTPS listener its server name selects; a name that selects a
    /// TLS listener sharing the socket is served as on a TLS socket (by a terminator like
    /// [`Self::for_gateway_stream_socket`]'s, sharing this one's table and default
    /// certificate) with `options`.
    pub fn for_gateway_socket(
        mut self,
        socket: std::net::SocketAddr,
        options: super::stream::StreamOptions,
    ) -> Self {
        let stream_side = Self {
            table: self.table.clone(),
            provider: self.provider.clone(),
            generated: self.generated.clone(),
            default_config: Mutex::new(None),
            connect_timeout: self.connect_timeout,
            gateway_socket: None,
            alpn: true,
            tls_listeners: None,
        };
        self.gateway_socket = Some(socket);
        self.tls_listeners = Some(TlsListeners {
            terminator: Arc::new(stream_side.for_gateway_stream_socket(socket)),
            options: Arc::new(options),
        });
        self
    }

    /// Serves a connection that [`Self::handshake`] handed over as
    /// [`Handshake::TlsListener`]: its ClientHello is read again, and it is routed, passed
    /// through or terminated, and spliced as on a socket of TLS listeners alone.
    pub(crate) async fn serve_tls_listener(&self, io: Rewound<TcpStream>) {
        let Some(side) = &self.tls_listeners else {
            return;
        };
        super::stream::serve_handed_over(io, &side.options, &side.terminator).await;
    }

    /// Whether the ClientHello's server name selects a TLS listener sharing this Gateway
    /// HTTPS socket.
    fn selects_tls_listener(&self, table: &RoutingTable, server_name: Option<&str>) -> bool {
        let Some(socket) = self.gateway_socket.filter(|_| self.tls_listeners.is_some()) else {
            return false;
        };
        let gateways = table.gateways();
        gateways
            .tls_mode(socket, server_name.unwrap_or(""))
            .is_some()
    }

    /// Reads the ClientHello and completes the handshake, or splices a passthrough host.
    pub(crate) async fn handshake(&self, mut io: Rewound<TcpStream>) -> io::Result<Handshake> {
        let table = self.table.load();
        let passthrough = self.gateway_socket.is_none() && table.tls().has_passthrough();
        let shared = self.tls_listeners.is_some()
            && (self.gateway_socket)
                .is_some_and(|socket| table.gateways().has_tls_listeners(socket));
        if passthrough || shared {
            io.record();
        }
        let mut start = LazyConfigAcceptor::new(Acceptor::default(), io).await?;
        let sni = start
            .client_hello()
            .server_name()
            .map(|name| name.to_ascii_lowercase().into_boxed_str());
        if shared && self.selects_tls_listener(&table, sni.as_deref()) {
            let (socket, mut replay, unread) = start.io.into_parts();
            replay.extend_from_slice(&unread);
            let io = Rewound::new(socket, Bytes::from(replay));
            return Ok(Handshake::TlsListener(io));
        }
        if let Some(host) = sni
            .as_ref()
            .filter(|name| passthrough && table.passthrough(name).is_some())
        {
            let host = host.clone();
            let (socket, hello, unread) = start.io.into_parts();
            return Ok(Handshake::Passthrough(Passthrough {
                socket,
                hello,
                unread,
                table,
                host,
            }));
        }
        start.io.stop_recording();
        let site = match self.gateway_socket {
            Some(socket) => table
                .gateways()
                .tls_site(socket, sni.as_deref().unwrap_or("")),
            None => sni.as_deref().and_then(|name| table.tls().site(name)),
        }
        .cloned();
        let config = self.config_for(site.as_deref(), &table)?;
        let stream = start.into_stream(config.server.clone()).await?;
        let (_, connection) = stream.get_ref();
        let info = TlsInfo {
            sni,
            version: match connection.protocol_version() {
                Some(ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLSv1.3",
            },
            site,
            client_certificate: match &config.client_check {
                Some(check) => check.check(connection),
                None => ClientCertificate::NotAsked,
            },
        };
        Ok(Handshake::Terminated(Box::new(stream), Arc::new(info)))
    }

    /// The configuration for `site`, built once and attached to it; the default one without.
    fn config_for(&self, site: Option<&TlsSite>, table: &RoutingTable) -> io::Result<SiteConfig> {
        let Some(site) = site else {
            return self.default_config(table).map(|server| SiteConfig {
                server,
                client_check: None,
            });
        };
        let built = site.config.get_or_attach(|| {
            let certificate = site
                .certificate
                .clone()
                .or_else(|| table.tls().default_certificate().cloned())
                .unwrap_or_else(|| self.generated.clone());
            self.build_config(&certificate, site)
                .map_err(|error| error.to_string())
        });
        match built {
            Some(Ok(config)) => Ok(config.clone()),
            Some(Err(reason)) => Err(io::Error::other(reason.clone())),
            None => Err(io::Error::other("a site's configuration has another type")),
        }
    }

    fn default_config(&self, table: &RoutingTable) -> io::Result<Arc<ServerConfig>> {
        let wanted = table.tls().default_certificate().cloned();
        let mut cached = self
            .default_config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((built_for, config)) = cached.as_ref() {
            let same = match (built_for, &wanted) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if same {
                return Ok(config.clone());
            }
        }
        let certificate = wanted.clone().unwrap_or_else(|| self.generated.clone());
        let config = self
            .base_config(None)
            .map(|builder| finish(builder, &certificate, self.alpn))
            .map_err(io::Error::other)?;
        *cached = Some((wanted, config.clone()));
        Ok(config)
    }

    fn build_config(
        &self,
        certificate: &Arc<Certificate>,
        site: &TlsSite,
    ) -> Result<SiteConfig, rustls::Error> {
        let Some(auth) = &site.client_auth else {
            let server = finish(self.base_config(None)?, certificate, self.alpn);
            return Ok(SiteConfig {
                server,
                client_check: None,
            });
        };
        // No usable CA: every handshake for the site fails, rather than serving it without
        // the client check it asks for.
        let (check, asking) = ClientCheck::new(auth, &self.provider).map_err(|error| {
            rustls::Error::General(format!(
                "client certificates for {} cannot be verified: {error}",
                site.ingress
            ))
        })?;
        Ok(SiteConfig {
            server: finish(self.base_config(Some(asking))?, certificate, self.alpn),
            client_check: Some(Arc::new(check)),
        })
    }

    fn base_config(
        &self,
        verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>, rustls::Error>
    {
        let builder = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        Ok(match verifier {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        })
    }

    /// Connects to the passthrough host's endpoints in rotation until one answers, replays
    /// what was read (the ClientHello, and any bytes after a PROXY header not read yet), and
    /// copies bytes both ways until either side closes. No timeout but the connect's: the
    /// connection lives as long as its two ends want.
    pub(crate) async fn splice(&self, passthrough: Passthrough) -> io::Result<()> {
        let Passthrough {
            socket: mut client,
            hello,
            unread,
            table,
            host,
        } = passthrough;
        let Some((backend, _)) = table.passthrough(&host) else {
            return Err(io::Error::other("the passthrough host is gone"));
        };
        let replay: [&[u8]; 2] = [&hello, &unread];
        let to = super::stream::Upstream { backend, tls: None };
        super::stream::splice(&mut client, &replay, to, self.connect_timeout)
            .await
            .map_err(io::Error::from)
    }
}

/// The one certificate, and ALPN `h2` and `http/1.1` when `alpn`.
fn finish(
    builder: rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>,
    certificate: &Arc<Certificate>,
    alpn: bool,
) -> Arc<ServerConfig> {
    let mut config = builder.with_cert_resolver(Arc::new(OneCertificate(certificate.key.clone())));
    if alpn {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    }
    Arc::new(config)
}

/// Always the same certificate: the site was chosen from the ClientHello already.
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A self-signed ECDSA P-256 certificate for `names`.
fn generate_self_signed(
    source: &str,
    names: &[String],
    provider: &CryptoProvider,
) -> Result<Certificate, TlsSetupError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "sluice self-signed default certificate",
    );
    let certificate = params.self_signed(&key)?;
    let private_key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let certified = CertifiedKey::from_der(vec![certificate.der().clone()], private_key, provider)?;
    Ok(Certificate::new(source, certified))
}
