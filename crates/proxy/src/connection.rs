//! What the accept layer learnt about a client's connection, handed to every request on it: the addresses, the TLS session and the client certificate.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sluice_routing::{TlsSite, VerifyClient};

/// What a handler knows about the connection a request arrived on.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    /// The TCP peer: the client, or a load balancer that speaks the PROXY protocol.
    pub peer: SocketAddr,
    /// The client: the PROXY header's source address, else the peer.
    pub client: SocketAddr,
    /// The address the client connected to: the PROXY header's destination, else the
    /// listener's own address.
    pub server: SocketAddr,
    /// The TLS session, on the TLS listener.
    pub tls: Option<Arc<TlsInfo>>,
    /// On a Gateway listener's socket: the address it is bound on, which selects the
    /// Gateway listeners whose routes the request is matched against.
    pub gateway_socket: Option<SocketAddr>,
    /// The forwarding header values that describe the connection, made once for all its
    /// requests.
    pub(crate) forwarded: ForwardedValues,
}

/// What the forwarding headers say of a connection: the client's address (`X-Real-IP`,
/// `X-Forwarded-For`) and the port it connected to (`X-Forwarded-Port`). Made when the
/// connection is accepted, so that a keep-alive request clones them rather than formatting
/// and allocating them again.
#[derive(Clone, Debug)]
pub(crate) struct ForwardedValues {
    pub(crate) client: http::HeaderValue,
    pub(crate) port: http::HeaderValue,
}

/// What a request knows about the TLS connection it arrived on.
#[derive(Debug)]
pub struct TlsInfo {
    /// The server name the client sent, lowercase.
    pub sni: Option<Box<str>>,
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The site the handshake used; `None` when it served the default certificate.
    pub site: Option<Arc<TlsSite>>,
    /// The client's certificate, checked against the site's CAs.
    pub client_certificate: ClientCertificate,
}

impl TlsInfo {
    /// Whether the connection's client certificate lets a request through: `None` when it
    /// does, else whether one was sent (for the 400 that says why).
    pub(crate) fn client_refusal(&self) -> Option<bool> {
        let verify = self.site.as_ref()?.client_auth.as_ref()?.verify;
        match self.client_certificate.allows(verify) {
            true => None,
            false => Some(self.client_certificate != ClientCertificate::None),
        }
    }

    /// Whether a request for a host whose site is `host_site` may use this connection: the
    /// host's certificate and client-certificate rule must be the ones this connection was set
    /// up with (else 421 Misdirected Request, RFC 9110 §15.5.20). A host without a TLS entry
    /// may use any connection.
    pub(crate) fn may_serve(&self, host_site: Option<&Arc<TlsSite>>) -> bool {
        match (host_site, &self.site) {
            (None, _) => true,
            (Some(host), Some(connection)) => {
                Arc::ptr_eq(host, connection) || host.same_terms(connection)
            }
            (Some(host), None) => host.certificate.is_none() && host.client_auth.is_none(),
        }
    }
}

/// What the client showed, checked against the site's CAs after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCertificate {
    /// The site asks for none.
    NotAsked,
    /// Asked for, none sent.
    None,
    /// Sent and signed by the site's CA (the leaf).
    Verified(CertificateDer<'static>),
    /// Sent, and it does not verify (why).
    Failed(String),
}

impl ClientCertificate {
    /// Whether a request may go on under `verify`: `on` needs a verified certificate,
    /// `optional` refuses only one that was sent and does not verify.
    pub(crate) fn allows(&self, verify: VerifyClient) -> bool {
        if verify == VerifyClient::InsecureFallback {
            return true;
        }
        match self {
            Self::NotAsked | Self::Verified(_) => true,
            Self::None => verify == VerifyClient::Optional,
            Self::Failed(_) => false,
        }
    }
}
