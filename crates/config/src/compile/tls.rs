//! TLS compile: certificates from `kubernetes.io/tls` Secrets for each Ingress's `spec.tls` hosts, client-certificate CAs and passthrough hosts, each problem a diagnostic with the default certificate as the fallback.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hashbrown::HashMap;
use k8s_openapi::api::core::v1::Secret;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use sluice_routing::{Certificate, ClientAuth, HostMatch, TableBuilder, TlsSite};
use x509_parser::extensions::GeneralName;

use super::fragment::{FragmentRoute, TlsEntry};
use super::version::Version;
use crate::annotations::{ProxySslVerify, SiteAnnotations};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// The Secret type that carries a certificate and its key.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// A certificate loaded from a Secret, with what the checks against each host need.
pub(super) struct LoadedCertificate {
    certificate: Arc<Certificate>,
    /// Validity, in seconds since the Unix epoch.
    not_before: i64,
    not_after: i64,
    /// The leaf's DNS subject alternative names, lowercase; without any, its subject's
    /// common name.
    names: Vec<String>,
}

impl LoadedCertificate {
    /// Why the certificate cannot serve `host` at `now`, if it cannot.
    fn problem_for(&self, host: &HostMatch, now: i64) -> Option<String> {
        if now < self.not_before {
            return Some("the certificate is not valid yet".to_owned());
        }
        if now > self.not_after {
            return Some("the certificate has expired".to_owned());
        }
        (!self.covers(host)).then(|| {
            format!(
                "the certificate does not cover {host} (its names: {})",
                self.names_text()
            )
        })
    }

    fn names_text(&self) -> String {
        if self.names.is_empty() {
            "none".to_owned()
        } else {
            self.names.join(", ")
        }
    }

    /// Whether a subject alternative name covers the host: the same name, or a `*.` name one
    /// label above it.
    fn covers(&self, host: &HostMatch) -> bool {
        let wanted = host.to_string();
        self.names.iter().any(|name| {
            *name == wanted
                || name.strip_prefix("*.").is_some_and(|suffix| {
                    wanted.split_once('.').is_some_and(|(label, rest)| {
                        !label.is_empty() && label != "*" && rest == suffix
                    })
                })
        })
    }
}

/// What a Secret held, parsed once per version.
struct CachedSecret {
    version: Version<Secret>,
    certificate: Option<Result<Arc<LoadedCertificate>, String>>,
    roots: Option<Result<Arc<Vec<CertificateDer<'static>>>, String>>,
}

/// Certificates and CA bundles by Secret, reparsed only when the Secret changes.
#[derive(Default)]
pub(super) struct SecretCache {
    secrets: HashMap<ObjectKey, CachedSecret>,
}

impl SecretCache {
    /// Forgets Secrets that changed or are gone.
    pub(super) fn refresh(&mut self, snapshot: &Snapshot) {
        self.secrets.retain(|key, cached| {
            snapshot
                .secrets
                .get(key)
                .is_some_and(|secret| cached.version.matches(secret))
        });
    }

    fn entry<'s>(&'s mut self, key: &ObjectKey, secret: &Secret) -> &'s mut CachedSecret {
        self.secrets
            .entry(key.clone())
            .or_insert_with(|| CachedSecret {
                version: Version::of(secret),
                certificate: None,
                roots: None,
            })
    }

    /// The certificate and key of `kubernetes.io/tls` Secret `key`, or why it cannot serve.
    pub(super) fn certificate(
        &mut self,
        snapshot: &Snapshot,
        key: &ObjectKey,
    ) -> Result<Arc<LoadedCertificate>, String> {
        let secret = snapshot
            .secrets
            .get(key)
            .ok_or_else(|| "the Secret does not exist".to_owned())?;
        self.entry(key, secret)
            .certificate
            .get_or_insert_with(|| load_certificate(key, secret).map(Arc::new))
            .clone()
    }

    /// The CA certificates (`ca.crt`) of Secret `key`, or why they cannot be used.
    pub(super) fn roots(
        &mut self,
        snapshot: &Snapshot,
        key: &ObjectKey,
    ) -> Result<Arc<Vec<CertificateDer<'static>>>, String> {
        let secret = snapshot
            .secrets
            .get(key)
            .ok_or_else(|| "the Secret does not exist".to_owned())?;
        self.entry(key, secret)
            .roots
            .get_or_insert_with(|| load_roots(secret).map(Arc::new))
            .clone()
    }
}

/// A Secret's value for `name`, from `data` (base64 in YAML) or `stringData`.
pub(super) fn secret_value<'s>(secret: &'s Secret, name: &str) -> Option<&'s [u8]> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(name))
        .map(|bytes| bytes.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(name))
                .map(String::as_bytes)
        })
}

fn load_certificate(key: &ObjectKey, secret: &Secret) -> Result<LoadedCertificate, String> {
    let kind = secret.type_.as_deref().unwrap_or("Opaque");
    if kind != TLS_SECRET_TYPE {
        return Err(format!(
            "the Secret's type is {kind}, not {TLS_SECRET_TYPE}"
        ));
    }
    let pem = secret_value(secret, "tls.crt").ok_or("the Secret has no tls.crt")?;
    let key_pem = secret_value(secret, "tls.key").ok_or("the Secret has no tls.key")?;
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("tls.crt is not valid PEM: {error}"))?;
    let leaf = chain.first().ok_or("tls.crt holds no certificate")?;
    let (not_before, not_after, names) = leaf_facts(leaf)?;
    let private_key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|error| format!("tls.key is not a PEM private key: {error}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, private_key, &provider).map_err(|error| match error {
            rustls::Error::InconsistentKeys(_) => {
                "tls.key does not match the certificate in tls.crt".to_owned()
            }
            other => format!("tls.key cannot be used: {other}"),
        })?;
    let source = format!("{}/{}", key.namespace, key.name);
    Ok(LoadedCertificate {
        certificate: Arc::new(Certificate::new(source, certified)),
        not_before,
        not_after,
        names,
    })
}

/// The leaf's validity window and DNS names.
fn leaf_facts(leaf: &CertificateDer<'_>) -> Result<(i64, i64, Vec<String>), String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|error| format!("tls.crt's first certificate does not parse: {error}"))?;
    let validity = parsed.validity();
    let names = match parsed.subject_alternative_name() {
        Ok(Some(extension)) => extension
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                GeneralName::DNSName(dns) => Some(dns.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(error) => return Err(format!("tls.crt's subjectAltName does not parse: {error}")),
    };
    let names = if names.is_empty() {
        parsed
            .subject()
            .iter_common_name()
            .filter_map(|name| name.as_str().ok())
            .map(str::to_ascii_lowercase)
            .collect()
    } else {
        names
    };
    Ok((
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
        names,
    ))
}

fn load_roots(secret: &Secret) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = secret_value(secret, "ca.crt").ok_or("the Secret has no ca.crt")?;
    let roots = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("ca.crt is not valid PEM: {error}"))?;
    if roots.is_empty() {
        return Err("ca.crt holds no certificate".to_owned());
    }
    Ok(roots)
}

/// A Secret a fragment read, with the version it saw (`None`: it did not exist).
pub(super) type SecretRead = (ObjectKey, Option<Version<Secret>>);

/// The CAs that verify the pods' certificates (`proxy-ssl-verify: "on"`, `proxy-ssl-secret`),
/// and the Secret read, for the fragment's inputs. A Secret that cannot be read is an error
/// and gives no CA, so that every pod certificate is refused rather than trusted.
pub(super) fn verify_roots(
    key: &ObjectKey,
    verify: &ProxySslVerify,
    secrets: &BTreeMap<ObjectKey, Secret>,
    diagnostics: &mut Diagnostics,
) -> (Vec<CertificateDer<'static>>, Option<SecretRead>) {
    let object = ObjectRef::ingress(key);
    let Some(name) = &verify.secret else {
        diagnostics.error(&object, verify.field.clone(), "proxy-ssl-verify is on but proxy-ssl-secret names no Secret of this namespace; every pod certificate is refused");
        return (Vec::new(), None);
    };
    let secret_key = ObjectKey::new(&key.namespace, name);
    let secret = secrets.get(&secret_key);
    let read = Some((secret_key.clone(), secret.map(Version::of)));
    let roots = secret
        .ok_or_else(|| "the Secret does not exist".to_owned())
        .and_then(load_roots);
    match roots {
        Ok(roots) => (roots, read),
        Err(problem) => {
            diagnostics.error(
                &object,
                verify.field.clone(),
                format!("Secret {}/{name}: {problem}; every pod certificate is refused until it is fixed", key.namespace),
            );
            (Vec::new(), read)
        }
    }
}

/// What one served Ingress brings to the TLS side of the table.
pub(super) struct IngressTls<'f> {
    pub key: &'f ObjectKey,
    pub source: &'f Arc<str>,
    pub entries: &'f [TlsEntry],
    pub site: &'f SiteAnnotations,
    pub routes: &'f [FragmentRoute],
}

/// Adds the TLS sites, client-certificate rules and passthrough hosts of served Ingresses,
/// oldest first (the oldest claim to a host wins), to the table.
pub(super) struct TlsMerge<'c> {
    cache: &'c mut SecretCache,
    snapshot: &'c Snapshot,
    /// Seconds since the Unix epoch, for the validity checks.
    now: i64,
    /// Who holds each TLS host, for the diagnostic of a later claim.
    owners: HashMap<HostMatch, ObjectKey>,
}

impl TlsMerge<'_> {
    pub(super) fn new<'c>(cache: &'c mut SecretCache, snapshot: &'c Snapshot) -> TlsMerge<'c> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
            });
        TlsMerge {
            cache,
            snapshot,
            now,
            owners: HashMap::new(),
        }
    }

    pub(super) fn add(
        &mut self,
        ingress: &IngressTls<'_>,
        builder: &mut TableBuilder,
        diagnostics: &mut Diagnostics,
    ) {
        let client_auth = self.client_auth(ingress, diagnostics);
        for entry in ingress.entries {
            let loaded = entry.secret.as_deref().map(|name| {
                let secret = ObjectKey::new(&ingress.key.namespace, name);
                self.cache.certificate(self.snapshot, &secret)
            });
            let hosts = match entry.hosts.is_empty() {
                true => self.covered_rule_hosts(ingress, entry, &loaded, diagnostics),
                false => entry.hosts.clone(),
            };
            for host in &hosts {
                let certificate = self.certificate_for(ingress, entry, host, &loaded, diagnostics);
                let site = TlsSite::new(ingress.source.clone(), certificate, client_auth.clone());
                self.claim(ingress.key, host, Arc::new(site), builder, diagnostics);
            }
        }
        if ingress.site.passthrough {
            self.add_passthrough(ingress, builder, diagnostics);
        }
    }

    /// For an entry that names no hosts: the Ingress's rule hosts its certificate covers
    /// (subject alternative names, else the common name; a wildcard one label deep), which it
    /// then serves like named hosts, HTTPS redirect included. A host it does not cover is a
    /// warning and keeps the default certificate; a certificate that cannot serve is an error.
    fn covered_rule_hosts(
        &self,
        ingress: &IngressTls<'_>,
        entry: &TlsEntry,
        loaded: &Option<Result<Arc<LoadedCertificate>, String>>,
        diagnostics: &mut Diagnostics,
    ) -> Vec<HostMatch> {
        let object = ObjectRef::ingress(ingress.key);
        let field = format!("{}.secretName", entry.field);
        let secret = entry.secret.as_deref().unwrap_or_default();
        let namespace = &ingress.key.namespace;
        let loaded = match loaded {
            Some(Ok(loaded)) => loaded,
            Some(Err(problem)) => {
                let message = format!("Secret {namespace}/{secret}: {problem}; the entry names no hosts, so no host gets a certificate from it");
                diagnostics.error(&object, field, message);
                return Vec::new();
            }
            None => return Vec::new(),
        };
        let mut hosts: Vec<HostMatch> = Vec::new();
        for route in ingress.routes {
            if route.host == HostMatch::Any || hosts.contains(&route.host) {
                continue;
            }
            if loaded.covers(&route.host) {
                hosts.push(route.host.clone());
                continue;
            }
            let message = format!(
                "the entry names no hosts, and the certificate of Secret {namespace}/{secret} does not cover rule host {} (its names: {}): that host is served with the default certificate and no HTTPS redirect; name it in spec.tls[].hosts with a certificate that covers it",
                route.host,
                loaded.names_text()
            );
            diagnostics.warning(&object, field.clone(), message);
        }
        hosts
    }

    /// The host's certificate, or `None` (the default certificate) with a diagnostic saying
    /// why.
    fn certificate_for(
        &self,
        ingress: &IngressTls<'_>,
        entry: &TlsEntry,
        host: &HostMatch,
        loaded: &Option<Result<Arc<LoadedCertificate>, String>>,
        diagnostics: &mut Diagnostics,
    ) -> Option<Arc<Certificate>> {
        let secret = entry.secret.as_deref()?;
        let problem = match loaded.as_ref()? {
            Ok(loaded) => match loaded.problem_for(host, self.now) {
                None => return Some(loaded.certificate.clone()),
                Some(problem) => problem,
            },
            Err(problem) => problem.clone(),
        };
        diagnostics.error(
            &ObjectRef::ingress(ingress.key),
            format!("{}.secretName", entry.field),
            format!(
                "Secret {}/{secret}: {problem}; {host} is served with the default certificate",
                ingress.key.namespace
            ),
        );
        None
    }

    fn claim(
        &mut self,
        key: &ObjectKey,
        host: &HostMatch,
        site: Arc<TlsSite>,
        builder: &mut TableBuilder,
        diagnostics: &mut Diagnostics,
    ) {
        if builder.add_tls_site(host.clone(), site) {
            self.owners.insert(host.clone(), key.clone());
            return;
        }
        match self.owners.get(host) {
            Some(owner) if owner != key => {
                let message = format!(
                    "ignored for {host}: Ingress {}/{} is older and its TLS entry for the host wins",
                    owner.namespace, owner.name
                );
                diagnostics.warning(&ObjectRef::ingress(key), "spec.tls", message);
            }
            _ => {}
        }
    }

    /// The client-certificate rule of the Ingress's TLS hosts. A CA that cannot be read fails
    /// closed: the rule stays with no CA, and every client certificate is refused.
    fn client_auth(
        &mut self,
        ingress: &IngressTls<'_>,
        diagnostics: &mut Diagnostics,
    ) -> Option<Arc<ClientAuth>> {
        let request = ingress.site.client_auth.as_ref()?;
        let object = ObjectRef::ingress(ingress.key);
        if ingress.entries.is_empty() {
            diagnostics.warning(
                &object,
                request.field.clone(),
                "ignored: client certificates are asked for on TLS hosts only, and this Ingress has no spec.tls entry",
            );
            return None;
        }
        let secret = ObjectKey::new(&ingress.key.namespace, &request.secret);
        let roots = match self.cache.roots(self.snapshot, &secret) {
            Ok(roots) => roots.as_ref().clone(),
            Err(problem) => {
                diagnostics.error(
                    &object,
                    request.field.clone(),
                    format!(
                        "Secret {}/{}: {problem}; the Ingress's TLS hosts refuse every client certificate until it is fixed",
                        secret.namespace, secret.name
                    ),
                );
                Vec::new()
            }
        };
        Some(Arc::new(ClientAuth {
            secret: format!("{}/{}", secret.namespace, secret.name).into(),
            roots,
            verify: request.verify,
        }))
    }

    fn add_passthrough(
        &mut self,
        ingress: &IngressTls<'_>,
        builder: &mut TableBuilder,
        diagnostics: &mut Diagnostics,
    ) {
        let object = ObjectRef::ingress(ingress.key);
        let field = "metadata.annotations[nginx.ingress.kubernetes.io/ssl-passthrough]";
        let mut hosts: Vec<&HostMatch> = Vec::new();
        for route in ingress.routes {
            if route.host == HostMatch::Any {
                diagnostics.warning(&object, field, "rules without a host cannot be passed through (TLS passthrough routes by SNI); they serve plain HTTP only");
                continue;
            }
            if hosts.contains(&&route.host) {
                continue;
            }
            hosts.push(&route.host);
            builder.add_passthrough(
                route.host.clone(),
                route.backend.clone(),
                ingress.source.clone(),
            );
            let message = format!(
                "TLS connections for {} are passed through unterminated to {}; only the host matters, paths are ignored",
                route.host, route.backend
            );
            diagnostics.info(&object, field, message);
        }
    }

    /// The certificate of a Gateway listener's `certificateRefs` Secret, or why it cannot
    /// serve (missing, not a TLS Secret, unreadable, expired or not valid yet).
    pub(super) fn listener_certificate(
        &mut self,
        secret: &ObjectKey,
    ) -> Result<Arc<Certificate>, String> {
        let loaded = self.cache.certificate(self.snapshot, secret)?;
        if now_outside(&loaded, self.now) {
            return Err("the certificate is expired or not valid yet".to_owned());
        }
        Ok(loaded.certificate.clone())
    }

    /// The CA certificates (`ca.crt`) of Secret `secret`, for a Gateway listener's
    /// client-certificate validation.
    pub(super) fn client_roots(
        &mut self,
        secret: &ObjectKey,
    ) -> Result<Arc<Vec<CertificateDer<'static>>>, String> {
        self.cache.roots(self.snapshot, secret)
    }

    /// `--default-certificate`: used when its Secret can serve, else a diagnostic and the
    /// data plane's generated one.
    pub(super) fn default_certificate(
        &mut self,
        secret: &ObjectKey,
        builder: &mut TableBuilder,
        diagnostics: &mut Diagnostics,
    ) {
        let object = ObjectRef::new("Secret", Some(&secret.namespace), &secret.name);
        match self.cache.certificate(self.snapshot, secret) {
            Ok(loaded) => {
                if now_outside(&loaded, self.now) {
                    diagnostics.warning(&object, "tls.crt", "the default certificate (--default-certificate) is expired or not valid yet; it is served anyway");
                }
                builder.set_default_certificate(loaded.certificate.clone());
            }
            Err(problem) => diagnostics.error(
                &object,
                "tls.crt",
                format!("--default-certificate: {problem}; the generated self-signed certificate is served instead"),
            ),
        }
    }
}

fn now_outside(loaded: &LoadedCertificate, now: i64) -> bool {
    now < loaded.not_before || now > loaded.not_after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(names: &[&str]) -> LoadedCertificate {
        let key = rcgen_free_key();
        LoadedCertificate {
            certificate: Arc::new(Certificate::new("ns/s", key)),
            not_before: 100,
            not_after: 200,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    /// A CertifiedKey whose contents the checks below never read.
    fn rcgen_free_key() -> CertifiedKey {
        #[derive(Debug)]
        struct NoKey;
        impl rustls::sign::SigningKey for NoKey {
            fn choose_scheme(
                &self,
                _: &[rustls::SignatureScheme],
            ) -> Option<Box<dyn rustls::sign::Signer>> {
                None
            }
            fn algorithm(&self) -> rustls::SignatureAlgorithm {
                rustls::SignatureAlgorithm::ECDSA
            }
        }
        CertifiedKey::new(vec![CertificateDer::from(vec![0u8])], Arc::new(NoKey))
    }

    fn host(name: &str) -> HostMatch {
        HostMatch::from_rule_host(Some(name))
    }

    #[test]
    fn wildcard_names_cover_one_label_only() {
        let cert = loaded(&["*.example.com", "exact.test"]);
        assert!(cert.covers(&host("a.example.com")));
        assert!(cert.covers(&host("exact.test")));
        assert!(cert.covers(&host("*.example.com")));
        assert!(!cert.covers(&host("a.b.example.com")));
        assert!(!cert.covers(&host("example.com")));
        assert!(!cert.covers(&host("other.test")));
    }

    #[test]
    fn validity_is_checked_before_names() {
        let cert = loaded(&["a.test"]);
        assert_eq!(
            cert.problem_for(&host("a.test"), 50).as_deref(),
            Some("the certificate is not valid yet")
        );
        assert_eq!(
            cert.problem_for(&host("a.test"), 250).as_deref(),
            Some("the certificate has expired")
        );
        assert_eq!(cert.problem_for(&host("a.test"), 150), None);
        assert!(cert
            .problem_for(&host("b.test"), 150)
            .is_some_and(|p| p.contains("does not cover b.test")));
    }
}
