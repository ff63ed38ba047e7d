//! Client certificates as ingress-nginx checks them: the handshake asks for one and completes either way, and the request is refused with 400 when the site requires a certificate that was not sent or one that does not verify; a Gateway listener that allows valid certificates only refuses the others in the handshake.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConnection, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use sluice_routing::{ClientAuth, VerifyClient};

use crate::connection::ClientCertificate;

/// The two verifiers of a site that asks for client certificates: the one the handshake uses
/// (asks, checks the client's signature, accepts any certificate) and the strict one the
/// certificate is checked with afterwards.
#[derive(Debug)]
pub(crate) struct ClientCheck {
    strict: Arc<dyn ClientCertVerifier>,
}

impl ClientCheck {
    /// The checks for `auth`; `None` when its CAs give no usable root (the site's handshakes
    /// then fail, rather than serve without the check it asks for).
    pub(crate) fn new(
        auth: &ClientAuth,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<(Self, Arc<dyn ClientCertVerifier>), String> {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(auth.roots.iter().cloned());
        let strict = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|error| error.to_string())?;
        // A Gateway listener that allows valid certificates only refuses the others in the
        // handshake; everything else asks and decides at the request.
        let asking: Arc<dyn ClientCertVerifier> = match auth.verify {
            VerifyClient::Required => strict.clone(),
            _ => Arc::new(AskForCertificate(strict.clone())),
        };
        Ok((Self { strict }, asking))
    }

    /// The client's certificate on `connection`, verified.
    pub(crate) fn check(&self, connection: &ServerConnection) -> ClientCertificate {
        let Some((leaf, intermediates)) = connection
            .peer_certificates()
            .and_then(|chain| chain.split_first())
        else {
            return ClientCertificate::None;
        };
        match self
            .strict
            .verify_client_cert(leaf, intermediates, UnixTime::now())
        {
            Ok(_) => ClientCertificate::Verified(leaf.clone().into_owned()),
            Err(error) => ClientCertificate::Failed(error.to_string()),
        }
    }
}

/// Asks for a client certificate and lets the handshake complete without one or with one the
/// CA did not sign, so that the request can be refused with an HTTP answer, as nginx does; the
/// client's proof of its key is still checked.
#[derive(Debug)]
struct AskForCertificate(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for AskForCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
