//! The upstream request phase's own part: the head the next hop gets, once for all attempts (this hop's headers out, the client's Host, the forwarding headers, the client certificate's headers, the target in origin form), before the route's filters change it.

use http::header::HOST;
use http::request::Parts;
use http::{HeaderValue, Uri, Version};

use super::forwarded::Forwarding;
use super::inbound::Inbound;
use crate::connection::{ClientCertificate, ClientInfo, TlsInfo};
use crate::filters::contract::RequestContext;
use crate::headers::{join_cookies, strip_hop_by_hop};

/// Host, X-Forwarded-For, -Proto, -Host, -Port, X-Real-IP and X-Request-ID.
const FORWARDING_HEADERS: usize = 7;

/// The head the next hop gets, once for all attempts: this hop's headers removed, the
/// client's Host, the forwarding headers, and the normalised target in origin form.
pub(crate) fn prepare(
    parts: &mut Parts,
    inbound: Inbound,
    client: &ClientInfo,
    context: &RequestContext<'_>,
    forwarding: &Forwarding,
) {
    strip_hop_by_hop(&mut parts.headers);
    if parts.version == Version::HTTP_2 {
        join_cookies(&mut parts.headers);
    }
    // Room for Host and the six forwarding headers at once: a client's map is sized to
    // what it sent, and growing it for each insert cost about 1,000 instructions.
    parts.headers.reserve(FORWARDING_HEADERS);
    parts.headers.insert(HOST, inbound.host.clone());
    forwarding.apply(
        &mut parts.headers,
        client,
        &inbound.host,
        &context.request_id,
    );
    parts.uri = Uri::from(inbound.target);
    if let Some(session) = &client.tls {
        let pass = context
            .target
            .is_some_and(|target| target.policy.tls.pass_client_certificate);
        client_certificate_headers(&mut parts.headers, session, pass);
    }
}

/// On a host that asks for client certificates: `ssl-client-verify` (`SUCCESS` or `NONE`)
/// and, when the route passes it on, `ssl-client-cert` (the PEM, URL-encoded as nginx's
/// `$ssl_client_escaped_cert`). Whatever the client sent under these names is dropped first.
fn client_certificate_headers(headers: &mut http::HeaderMap, session: &TlsInfo, pass: bool) {
    if session
        .site
        .as_ref()
        .is_none_or(|site| site.client_auth.is_none())
    {
        return;
    }
    headers.remove(SSL_CLIENT_CERT);
    let verified = match &session.client_certificate {
        ClientCertificate::Verified(leaf) => Some(leaf),
        _ => None,
    };
    let verify = if verified.is_some() {
        "SUCCESS"
    } else {
        "NONE"
    };
    headers.insert(SSL_CLIENT_VERIFY, HeaderValue::from_static(verify));
    if let (true, Some(certificate)) = (pass, verified) {
        if let Ok(value) = HeaderValue::try_from(escaped_pem(certificate)) {
            headers.insert(SSL_CLIENT_CERT, value);
        }
    }
}

const SSL_CLIENT_CERT: http::HeaderName = http::HeaderName::from_static("ssl-client-cert");
const SSL_CLIENT_VERIFY: http::HeaderName = http::HeaderName::from_static("ssl-client-verify");

/// A certificate as PEM, percent-encoded except RFC 3986's unreserved characters.
fn escaped_pem(certificate: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(certificate);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut escaped = String::with_capacity(pem.len() * 3 / 2);
    for byte in pem.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
}
