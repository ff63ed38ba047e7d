//! TLS in the routing table: the certificate each SNI host gets, the hosts that ask for client certificates, and the hosts passed through unterminated.
//!
//! Certificates are published with the routes, in the same table: a handshake reads the table
//! once, so a Secret change, a new TLS entry and a removed one all take effect for the next
//! handshake, and a connection keeps what it started with.

use std::fmt;
use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;
use rustls::pki_types::CertificateDer;
use rustls::sign::CertifiedKey;
use serde::Serialize;

use crate::attached::Attached;
use crate::backend::BackendIndex;
use crate::host::{wildcard_suffix, HostMatch};

/// A certificate chain and its private key, ready to serve.
pub struct Certificate {
    /// Where it came from: the Secret's `namespace/name`, or a name for a generated one.
    pub source: Arc<str>,
    pub key: Arc<CertifiedKey>,
}

impl Certificate {
    pub fn new(source: impl Into<Arc<str>>, key: CertifiedKey) -> Self {
        Self {
            source: source.into(),
            key: Arc::new(key),
        }
    }
}

/// Equal when the source and the chain are equal (the key is checked against the chain's
/// first certificate when it is loaded).
impl PartialEq for Certificate {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.key.cert == other.key.cert
    }
}

impl Eq for Certificate {}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("source", &self.source)
            .field("chain", &self.key.cert.len())
            .finish()
    }
}

/// ingress-nginx's `auth-tls-verify-client`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyClient {
    /// A client certificate signed by the CA is required.
    On,
    /// A client certificate is asked for and, when sent, must be signed by the CA.
    Optional,
    /// Gateway `AllowValidOnly`: the handshake itself fails without a certificate the CA
    /// signed.
    Required,
    /// Gateway `AllowInsecureFallback`: a certificate is asked for, and any answer (none, one
    /// the CA did not sign) is let through.
    InsecureFallback,
}

/// Mutual TLS for a host: the CAs a client certificate must chain to.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientAuth {
    /// The Secret holding `ca.crt`, as `namespace/name`.
    pub secret: Arc<str>,
    pub roots: Vec<CertificateDer<'static>>,
    pub verify: VerifyClient,
}

/// What a TLS host serves at the handshake.
#[derive(Debug)]
pub struct TlsSite {
    /// The Ingress that named the host in `spec.tls`, as `namespace/name`.
    pub ingress: Arc<str>,
    /// The host's own certificate; `None` serves the default one (a diagnostic says why).
    pub certificate: Option<Arc<Certificate>>,
    pub client_auth: Option<Arc<ClientAuth>>,
    /// The data plane's server configuration for this site, built once.
    pub config: Attached,
}

impl TlsSite {
    pub fn new(
        ingress: Arc<str>,
        certificate: Option<Arc<Certificate>>,
        client_auth: Option<Arc<ClientAuth>>,
    ) -> Self {
        Self {
            ingress,
            certificate,
            client_auth,
            config: Attached::default(),
        }
    }

    /// Whether a connection set up for `self` may carry requests for `other`: the same
    /// certificate (from the same Secret, or the same chain) and the same client-certificate
    /// rule (the same CA Secret and mode). A renewal keeps the Secret, so connections opened
    /// before it stay usable.
    pub fn same_terms(&self, other: &TlsSite) -> bool {
        let certificate = match (&self.certificate, &other.certificate) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                Arc::ptr_eq(a, b) || a.source == b.source || a.key.cert == b.key.cert
            }
            _ => false,
        };
        let client_auth = match (&self.client_auth, &other.client_auth) {
            (None, None) => true,
            (Some(a), Some(b)) => a.secret == b.secret && a.verify == b.verify,
            _ => false,
        };
        certificate && client_auth
    }
}

impl PartialEq for TlsSite {
    fn eq(&self, other: &Self) -> bool {
        self.ingress == other.ingress
            && self.certificate == other.certificate
            && self.client_auth == other.client_auth
    }
}

/// Values by host: exact names first, then one-label wildcards.
#[derive(Debug)]
pub(crate) struct HostMap<T> {
    exact: HashMap<Arc<str>, T>,
    wildcard: HashMap<Arc<str>, T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }
}

impl<T: PartialEq> PartialEq for HostMap<T> {
    fn eq(&self, other: &Self) -> bool {
        self.exact == other.exact && self.wildcard == other.wildcard
    }
}

impl<T> HostMap<T> {
    /// Inserts unless the host is taken (or is no host at all); says whether it inserted.
    pub(crate) fn insert_new(&mut self, host: HostMatch, value: T) -> bool {
        let (map, name) = match host {
            HostMatch::Any => return false,
            HostMatch::Exact(name) => (&mut self.exact, name),
            HostMatch::Wildcard(suffix) => (&mut self.wildcard, suffix),
        };
        match map.entry(name) {
            Entry::Vacant(vacant) => {
                vacant.insert(value);
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// The value for a lowercase host name: its own, else its one-label wildcard's.
    pub(crate) fn get(&self, host: &str) -> Option<&T> {
        self.exact
            .get(host)
            .or_else(|| self.wildcard.get(wildcard_suffix(host)?))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }

    /// Every entry, sorted by host for stable output.
    pub(crate) fn entries(&self) -> Vec<(HostMatch, &T)> {
        let exact = self
            .exact
            .iter()
            .map(|(name, value)| (HostMatch::Exact(name.clone()), value));
        let wildcard = self
            .wildcard
            .iter()
            .map(|(name, value)| (HostMatch::Wildcard(name.clone()), value));
        let mut entries: Vec<_> = exact.chain(wildcard).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }
}

/// The table's TLS part.
#[derive(Debug, Default, PartialEq)]
pub struct TlsHosts {
    pub(crate) sites: HostMap<Arc<TlsSite>>,
    /// `--default-certificate`, when its Secret could be used; else the data plane's own.
    pub(crate) default_certificate: Option<Arc<Certificate>>,
    /// Hosts whose TLS connections are spliced to a backend unterminated, with the Ingress.
    pub(crate) passthrough: HostMap<(BackendIndex, Arc<str>)>,
}

impl TlsHosts {
    /// The site for an SNI or request host (lowercase): an exact name, then a wildcard. No
    /// hashing at all when no host has TLS.
    pub fn site(&self, host: &str) -> Option<&Arc<TlsSite>> {
        if self.sites.is_empty() {
            return None;
        }
        self.sites.get(host)
    }

    /// The certificate named by `--default-certificate`, if it could be used.
    pub fn default_certificate(&self) -> Option<&Arc<Certificate>> {
        self.default_certificate.as_ref()
    }

    /// Whether any host is passed through (only then is a ClientHello read before the
    /// handshake starts).
    pub fn has_passthrough(&self) -> bool {
        !self.passthrough.is_empty()
    }

    /// Every TLS host with its site, sorted by host.
    pub fn sites(&self) -> Vec<(HostMatch, &Arc<TlsSite>)> {
        self.sites.entries()
    }

    /// Every passthrough host with its backend's position and Ingress, sorted by host.
    pub fn passthrough_hosts(&self) -> Vec<(HostMatch, &(BackendIndex, Arc<str>))> {
        self.passthrough.entries()
    }

    pub(crate) fn passthrough(&self, host: &str) -> Option<&(BackendIndex, Arc<str>)> {
        self.passthrough.get(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_hosts_win_over_one_label_wildcards() {
        let mut map = HostMap::default();
        assert!(map.insert_new(HostMatch::from_rule_host(Some("*.example.com")), 1));
        assert!(map.insert_new(HostMatch::from_rule_host(Some("a.example.com")), 2));
        assert!(!map.insert_new(HostMatch::from_rule_host(Some("a.example.com")), 3));
        assert!(!map.insert_new(HostMatch::Any, 4));
        assert_eq!(map.get("a.example.com"), Some(&2));
        assert_eq!(map.get("b.example.com"), Some(&1));
        assert_eq!(map.get("x.b.example.com"), None, "one label only");
        assert_eq!(map.get("example.com"), None);
    }
}
