//! TLS and protocol annotations: redirects to HTTPS, HSTS, Traefik's TLS router settings, client certificates, passthrough and the protocol spoken to pods.

use sluice_routing::{Listeners, TlsPolicy, UpstreamProtocol, UpstreamTls, VerifyClient};

use super::keys::{PolicyKeys, Setting};
use super::values::{parse_bool, Found, Report};
use super::Annotations;

/// Traefik's router annotations on an Ingress.
pub(crate) const TRAEFIK_ROUTER_TLS: &str = "traefik.ingress.kubernetes.io/router.tls";
pub(crate) const TRAEFIK_ROUTER_ENTRYPOINTS: &str =
    "traefik.ingress.kubernetes.io/router.entrypoints";
/// Traefik's Service annotation choosing the scheme spoken to the pods.
pub(crate) const TRAEFIK_SERVERS_SCHEME: &str =
    "traefik.ingress.kubernetes.io/service.serversscheme";

/// What an Ingress's TLS annotations ask of the handshake rather than of its routes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteAnnotations {
    /// `ssl-passthrough: "true"`: the Ingress's hosts are spliced to the backend unterminated.
    pub passthrough: bool,
    /// `auth-tls-secret` (a Secret of the Ingress's own namespace) and `auth-tls-verify-client`.
    pub client_auth: Option<ClientAuthRequest>,
}

/// A client-certificate rule as annotated, before its Secret is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuthRequest {
    /// The Secret's name (its namespace is the Ingress's).
    pub secret: String,
    pub verify: VerifyClient,
    /// The diagnostic field naming `auth-tls-secret`.
    pub field: String,
}

/// The route-side TLS settings of an Ingress.
pub(crate) fn tls_policy(
    keys: &PolicyKeys<'_>,
    annotations: &Annotations,
    report: &mut Report<'_>,
) -> TlsPolicy {
    let defaults = TlsPolicy::default();
    let flag = |report: &mut Report<'_>, name: Setting, default: bool| {
        report
            .parse(
                keys.get(name),
                "\"true\" or \"false\"",
                &format!("treated as {default}"),
                parse_bool,
            )
            .unwrap_or(default)
    };
    let hsts = report.parse(
        keys.get(Setting::Hsts),
        "a Strict-Transport-Security value such as \"max-age=31536000; includeSubDomains\"",
        "no Strict-Transport-Security header is sent",
        parse_hsts,
    );
    TlsPolicy {
        ssl_redirect: flag(report, Setting::SslRedirect, defaults.ssl_redirect),
        force_ssl_redirect: flag(report, Setting::ForceSslRedirect, false),
        hsts,
        listeners: traefik_listeners(annotations, report),
        pass_client_certificate: flag(report, Setting::AuthTlsPassCertificateToUpstream, false),
    }
}

/// `max-age=N` with optional `includeSubDomains` and `preload`, as RFC 6797 §6.1 writes it.
fn parse_hsts(value: &str) -> Option<String> {
    let mut max_age = false;
    for directive in value.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let lower = directive.to_ascii_lowercase();
        if let Some(seconds) = lower.strip_prefix("max-age=") {
            max_age = !seconds.is_empty() && seconds.bytes().all(|b| b.is_ascii_digit());
            if !max_age {
                return None;
            }
        } else if lower != "includesubdomains" && lower != "preload" {
            return None;
        }
    }
    max_age.then(|| value.trim().to_owned())
}

/// Traefik's `router.tls` and `router.entrypoints` (`web` plain, `websecure` TLS, as in its
/// default install).
fn traefik_listeners(annotations: &Annotations, report: &mut Report<'_>) -> Listeners {
    let tls_only = report
        .parse(
            found(annotations, TRAEFIK_ROUTER_TLS),
            "\"true\" or \"false\"",
            "treated as false",
            parse_bool,
        )
        .unwrap_or(false);
    let entrypoints = report.parse(
        found(annotations, TRAEFIK_ROUTER_ENTRYPOINTS),
        "a comma-separated list of \"web\" (the plain listener) and \"websecure\" (the TLS listener)",
        "the route is served on both listeners",
        parse_entrypoints,
    );
    match (tls_only, entrypoints) {
        (true, _) => Listeners::Tls,
        (false, Some(listeners)) => listeners,
        (false, None) => Listeners::Both,
    }
}

fn parse_entrypoints(value: &str) -> Option<Listeners> {
    let (mut plain, mut tls) = (false, false);
    for name in value.split(',').map(str::trim) {
        match name {
            "web" => plain = true,
            "websecure" => tls = true,
            _ => return None,
        }
    }
    match (plain, tls) {
        (true, true) => Some(Listeners::Both),
        (true, false) => Some(Listeners::Plain),
        (false, true) => Some(Listeners::Tls),
        (false, false) => None,
    }
}

fn found<'a>(annotations: &'a Annotations, key: &'a str) -> Option<Found<'a>> {
    annotations.get(key).map(|value| Found { key, value })
}

/// `proxy-ssl-verify: "on"` with the Secret (`proxy-ssl-secret`, in the Ingress's namespace)
/// whose `ca.crt` verifies the pods' certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxySslVerify {
    /// The Secret's name; `None` when `proxy-ssl-secret` is missing or refused.
    pub secret: Option<String>,
    /// The diagnostic field naming `proxy-ssl-verify`.
    pub field: String,
}

/// `proxy-ssl-verify` and `proxy-ssl-secret`. `None` when verification is off (the default).
pub(crate) fn proxy_ssl_verify(
    keys: &PolicyKeys<'_>,
    namespace: &str,
    report: &mut Report<'_>,
) -> Option<ProxySslVerify> {
    let found = keys.get(Setting::ProxySslVerify)?;
    let on = report.parse(
        Some(found),
        "\"on\" or \"off\"",
        "treated as off",
        |value| match value.to_ascii_lowercase().as_str() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        },
    )?;
    if !on {
        return None;
    }
    let secret = keys.get(Setting::ProxySslSecret).and_then(|secret| {
        let value = secret.value.trim();
        let (secret_namespace, name) = value.split_once('/').unwrap_or((namespace, value));
        if secret_namespace == namespace && !name.is_empty() {
            return Some(name.to_owned());
        }
        report.warning(
            secret,
            format!("ignored: an Ingress may only use a Secret of its own namespace ({namespace})"),
        );
        None
    });
    Some(ProxySslVerify {
        secret,
        field: found.field(),
    })
}

/// `backend-protocol`, with `proxy-ssl-name` for the TLS protocols.
/// `None` leaves the choice to the Service (Traefik's scheme annotation, `appProtocol`).
pub(crate) fn backend_protocol(
    keys: &PolicyKeys<'_>,
    report: &mut Report<'_>,
) -> Option<UpstreamProtocol> {
    if let Some((found, name)) = unspoken_protocol(keys) {
        report.error(
            found,
            format!("sluice does not speak {name} to pods, and HTTP sent to a {name} port never works: every route of this Ingress answers 503; put an HTTP server (nginx, Apache) in front of the {name} server in the pod"),
        );
        return None;
    }
    let protocol = report.parse(
        keys.get(Setting::BackendProtocol),
        "HTTP, HTTPS, GRPC, GRPCS or H2C",
        "HTTP/1.1 is spoken to the pods",
        parse_backend_protocol,
    )?;
    let UpstreamProtocol::Tls(mut tls) = protocol else {
        return Some(protocol);
    };
    tls.server_name = keys
        .get(Setting::ProxySslName)
        .map(|found| found.value.trim().to_owned())
        .filter(|name| !name.is_empty());
    Some(UpstreamProtocol::Tls(tls))
}

/// `backend-protocol: FCGI` or `AJP`, with the protocol's name: protocols sluice does not
/// speak, so HTTP sent to such a port never works and the Ingress's routes answer 503.
pub(crate) fn unspoken_protocol<'a>(keys: &PolicyKeys<'a>) -> Option<(Found<'a>, &'static str)> {
    let found = keys.get(Setting::BackendProtocol)?;
    let name = match found.value.trim().to_ascii_uppercase().as_str() {
        "FCGI" => "FastCGI",
        "AJP" => "AJP",
        _ => return None,
    };
    Some((found, name))
}

fn parse_backend_protocol(value: &str) -> Option<UpstreamProtocol> {
    Some(match value.to_ascii_uppercase().as_str() {
        "HTTP" => UpstreamProtocol::Http1,
        "H2C" | "GRPC" => UpstreamProtocol::H2c,
        "HTTPS" => UpstreamProtocol::Tls(UpstreamTls::default()),
        "GRPCS" => UpstreamProtocol::Tls(UpstreamTls {
            http2_only: true,
            ..UpstreamTls::default()
        }),
        _ => return None,
    })
}

/// Traefik's `service.serversscheme` on a Service: `http`, `https` or `h2c`.
pub(crate) fn servers_scheme(
    annotations: &Annotations,
    report: &mut Report<'_>,
) -> Option<UpstreamProtocol> {
    report.parse(
        found(annotations, TRAEFIK_SERVERS_SCHEME),
        "\"http\", \"https\" or \"h2c\"",
        "HTTP/1.1 is spoken to the pods",
        |value| match value.to_ascii_lowercase().as_str() {
            "http" => Some(UpstreamProtocol::Http1),
            "h2c" => Some(UpstreamProtocol::H2c),
            "https" => Some(UpstreamProtocol::Tls(UpstreamTls::default())),
            _ => None,
        },
    )
}

/// A Service port's `appProtocol`, the Kubernetes-native way to name the protocol.
pub(crate) fn app_protocol(value: &str) -> Option<UpstreamProtocol> {
    match value.to_ascii_lowercase().as_str() {
        "kubernetes.io/h2c" => Some(UpstreamProtocol::H2c),
        "https" | "kubernetes.io/wss" => Some(UpstreamProtocol::Tls(UpstreamTls::default())),
        "http" | "kubernetes.io/ws" => Some(UpstreamProtocol::Http1),
        _ => None,
    }
}

/// The handshake-side annotations: passthrough and client certificates. A Secret in another
/// namespace is refused: an Ingress may only use its own namespace's Secrets.
pub(crate) fn site_annotations(
    keys: &PolicyKeys<'_>,
    namespace: &str,
    report: &mut Report<'_>,
) -> SiteAnnotations {
    let passthrough = report
        .parse(
            keys.get(Setting::SslPassthrough),
            "\"true\" or \"false\"",
            "treated as false",
            parse_bool,
        )
        .unwrap_or(false);
    SiteAnnotations {
        passthrough,
        client_auth: client_auth(keys, namespace, report),
    }
}

fn client_auth(
    keys: &PolicyKeys<'_>,
    namespace: &str,
    report: &mut Report<'_>,
) -> Option<ClientAuthRequest> {
    let secret_found = keys.get(Setting::AuthTlsSecret)?;
    let verify_found = keys.get(Setting::AuthTlsVerifyClient);
    let verify = match verify_found.map(|found| found.value.trim().to_ascii_lowercase()) {
        None => Some(VerifyClient::On),
        Some(value) => match value.as_str() {
            "on" => Some(VerifyClient::On),
            "optional" => Some(VerifyClient::Optional),
            "off" => None,
            "optional_no_ca" => {
                if let Some(found) = verify_found {
                    report.warning(found, "optional_no_ca is not supported: a client certificate is asked for and, when sent, verified against the CA (as optional)");
                }
                Some(VerifyClient::Optional)
            }
            _ => {
                if let Some(found) = verify_found {
                    report.warning(found, format!("invalid value {:?}: expected on, optional, optional_no_ca or off; treated as on", found.value));
                }
                Some(VerifyClient::On)
            }
        },
    }?;
    let value = secret_found.value.trim();
    let (secret_namespace, name) = value.split_once('/').unwrap_or((namespace, value));
    if secret_namespace != namespace || name.is_empty() {
        report.warning(
            secret_found,
            format!("ignored: an Ingress may only use a Secret of its own namespace ({namespace}); no client certificate is asked for"),
        );
        return None;
    }
    Some(ClientAuthRequest {
        secret: name.to_owned(),
        verify,
        field: secret_found.field(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsts_values_follow_rfc_6797() {
        assert!(parse_hsts("max-age=31536000; includeSubDomains").is_some());
        assert!(parse_hsts("max-age=0").is_some());
        assert!(parse_hsts("max-age=60; preload; includeSubDomains").is_some());
        assert!(
            parse_hsts("includeSubDomains").is_none(),
            "max-age is required"
        );
        assert!(parse_hsts("max-age=abc").is_none());
        assert!(parse_hsts("max-age=1; <script>").is_none());
    }

    #[test]
    fn entrypoints_name_traefiks_default_listeners() {
        assert_eq!(parse_entrypoints("web"), Some(Listeners::Plain));
        assert_eq!(parse_entrypoints("websecure"), Some(Listeners::Tls));
        assert_eq!(parse_entrypoints("web, websecure"), Some(Listeners::Both));
        assert_eq!(parse_entrypoints("metrics"), None);
    }

    #[test]
    fn backend_protocols_are_ingress_nginx_names() {
        assert_eq!(parse_backend_protocol("grpc"), Some(UpstreamProtocol::H2c));
        assert!(matches!(
            parse_backend_protocol("GRPCS"),
            Some(UpstreamProtocol::Tls(UpstreamTls {
                http2_only: true,
                ..
            }))
        ));
        assert_eq!(parse_backend_protocol("FCGI"), None);
    }
}
