//! Certificates for tests and the demo: a throwaway CA that issues server and client certificates as PEM, as a `kubernetes.io/tls` Secret holds them.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its private key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct IssuedPem {
    pub cert: String,
    pub key: String,
}

impl IssuedPem {
    /// A Secret manifest of type `kubernetes.io/tls` holding the pair (with `ca` as `ca.crt`
    /// when given), in `stringData`.
    pub fn secret_yaml(&self, namespace: &str, name: &str, ca: Option<&str>) -> String {
        let mut yaml = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indent(&self.cert),
            indent(&self.key)
        );
        if let Some(ca) = ca {
            yaml.push_str("  ca.crt: |\n");
            yaml.push_str(&indent(ca));
        }
        yaml
    }
}

fn indent(pem: &str) -> String {
    pem.lines().map(|line| format!("    {line}\n")).collect()
}

/// A self-signed certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// When an issued certificate is valid, relative to now.
#[derive(Clone, Copy, Debug)]
pub enum Validity {
    /// From a day ago for a year.
    Current,
    /// Ended yesterday.
    Expired,
    /// Starts tomorrow.
    NotYetValid,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Result<Self, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (DNS names, `*.` wildcards allowed, or URIs such as
    /// `spiffe://...`), valid now.
    pub fn server(&self, names: &[&str]) -> Result<IssuedPem, rcgen::Error> {
        self.issue(
            names,
            Validity::Current,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate with common name `name`.
    pub fn client(&self, name: &str) -> Result<IssuedPem, rcgen::Error> {
        self.issue(
            &[name],
            Validity::Current,
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A server certificate for `names` with the given validity.
    pub fn server_with(
        &self,
        names: &[&str],
        validity: Validity,
    ) -> Result<IssuedPem, rcgen::Error> {
        self.issue(names, validity, ExtendedKeyUsagePurpose::ServerAuth)
    }

    fn issue(
        &self,
        names: &[&str],
        validity: Validity,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<IssuedPem, rcgen::Error> {
        // A name with a scheme (`spiffe://...`) is a URI subject alternative name; the others
        // are DNS names or IP addresses.
        let (uris, names): (Vec<&str>, Vec<&str>) =
            names.iter().partition(|name| name.contains("://"));
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        for uri in uris {
            params.subject_alt_names.push(SanType::URI(uri.try_into()?));
        }
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        params.extended_key_usages = vec![usage];
        let now = time::OffsetDateTime::now_utc();
        let day = time::Duration::days(1);
        let (from, to) = match validity {
            Validity::Current => (now - day, now + day * 365),
            Validity::Expired => (now - day * 30, now - day),
            Validity::NotYetValid => (now + day, now + day * 30),
        };
        params.not_before = from;
        params.not_after = to;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedPem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
