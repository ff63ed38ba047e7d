//! Who the client is and what a backend is told about it: X-Forwarded-*, X-Real-IP, Forwarded and X-Request-ID, taken on trust only from the configured proxies.
//!
//! From an untrusted peer (every peer, by default, as in ingress-nginx), sluice replaces the
//! `X-Forwarded-*` family, `X-Real-IP` and `X-Request-ID` with what it saw itself and drops
//! `Forwarded`. A peer inside `--trusted-proxies` (Traefik's `forwardedHeaders.trustedIPs`)
//! keeps its `X-Forwarded-*`, `Forwarded` and `X-Request-ID`; its address is appended to
//! `X-Forwarded-For`, and the real client is the rightmost address in that list that is not
//! itself a trusted proxy.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use http::header::{HeaderMap, HeaderName, HeaderValue, FORWARDED};
use ipnet::IpNet;

use crate::connection::{ClientInfo, ForwardedValues};
use crate::headers::forwarded_for;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// The request id header, set on the request to the backend and on the response.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_FORWARDED_PREFIX: &str = "x-forwarded-";
/// The longest client-sent `X-Request-ID` kept; a longer one is replaced.
const MAX_KEPT_REQUEST_ID: usize = 200;

/// The address ranges whose forwarding headers are believed (`--trusted-proxies`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Whether `address` is a trusted proxy.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.0.iter().any(|net| net.contains(&address))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `CIDR[,CIDR…]`; a bare address is a /32 (or /128).
impl FromStr for TrustedProxies {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut nets = Vec::new();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let net = IpNet::from_str(item)
                .or_else(|_| IpAddr::from_str(item).map(IpNet::from))
                .map_err(|_| format!("{item:?} is not an IP address or CIDR range"))?;
            nets.push(net.trunc());
        }
        Ok(Self(nets))
    }
}

/// An IPv4 address written as IPv4-mapped IPv6 (a dual-stack listener's view) as plain IPv4.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

/// The forwarding facts of one request, decided once.
#[derive(Debug)]
pub(crate) struct Forwarding {
    /// Whether the peer is a trusted proxy.
    pub(crate) trusted: bool,
    /// The client as best known: the peer, or for a trusted peer the rightmost untrusted
    /// address of `X-Forwarded-For`.
    pub(crate) real_client: IpAddr,
}

impl Forwarding {
    /// Decides whom to believe about the request in `headers`, from connection `info`.
    pub(crate) fn decide(headers: &HeaderMap, info: &ClientInfo, trusted: &TrustedProxies) -> Self {
        let peer = canonical(info.client.ip());
        if !trusted.contains(peer) {
            return Self {
                trusted: false,
                real_client: peer,
            };
        }
        let mut real_client = peer;
        for hop in forwarded_for(headers).iter().rev() {
            let Some(address) = parse_hop(hop) else {
                break;
            };
            real_client = address;
            if !trusted.contains(address) {
                break;
            }
        }
        Self {
            trusted: true,
            real_client,
        }
    }

    /// Rewrites the forwarding headers for the backend. `host` is the Host the backend gets
    /// and `request_id` the id this request carries.
    pub(crate) fn apply(
        &self,
        headers: &mut HeaderMap,
        info: &ClientInfo,
        host: &HeaderValue,
        request_id: &HeaderValue,
    ) {
        let peer = canonical(info.client.ip());
        let real_client = match self.real_client == peer {
            true => info.forwarded.client.clone(),
            false => address_value(self.real_client),
        };
        let proto = HeaderValue::from_static(if info.tls.is_some() { "https" } else { "http" });
        if self.trusted {
            let chain = forwarded_for(headers);
            let appended = match chain.is_empty() {
                true => peer.to_string(),
                false => format!("{}, {peer}", chain.join(", ")),
            };
            if let Ok(value) = HeaderValue::try_from(appended) {
                headers.insert(X_FORWARDED_FOR, value);
            }
            keep_or_insert(headers, X_FORWARDED_PROTO, proto);
            keep_or_insert(headers, X_FORWARDED_HOST, host.clone());
            keep_or_insert(headers, X_FORWARDED_PORT, port_value(info));
        } else {
            remove_forwarding(headers);
            // Untrusted: the peer is the real client.
            headers.insert(X_FORWARDED_FOR, real_client.clone());
            headers.insert(X_FORWARDED_PROTO, proto);
            headers.insert(X_FORWARDED_HOST, host.clone());
            headers.insert(X_FORWARDED_PORT, port_value(info));
        }
        headers.insert(X_REAL_IP, real_client);
        headers.insert(X_REQUEST_ID, request_id.clone());
    }

    /// Whether a trusted proxy in front says the request arrived over HTTPS
    /// (`X-Forwarded-Proto: https`).
    pub(crate) fn says_https(&self, headers: &HeaderMap) -> bool {
        self.trusted
            && headers
                .get(X_FORWARDED_PROTO)
                .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"))
    }

    /// The request id: the one the request carries, from any peer, as nginx.tmpl's
    /// `map $http_x_request_id $req_id` keeps it (it identifies, it grants nothing), when it
    /// is at most [`MAX_KEPT_REQUEST_ID`] bytes of visible ASCII; else a new one (32 hex
    /// digits, as ingress-nginx's `$request_id`).
    pub(crate) fn request_id(&self, headers: &HeaderMap) -> HeaderValue {
        let kept = headers.get(X_REQUEST_ID).filter(|value| {
            let bytes = value.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= MAX_KEPT_REQUEST_ID
                && bytes.iter().all(u8::is_ascii_graphic)
        });
        match kept {
            Some(value) => value.clone(),
            None => new_request_id(),
        }
    }
}

/// A fresh random request id: 32 lowercase hex digits. Written nibble by nibble rather than
/// with `format!("{:032x}")`, which cost about 900 instructions of a request's 51,000
/// (bench/instructions); this costs under 100.
fn new_request_id() -> HeaderValue {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let random = fastrand::u128(..);
    let mut id = [0u8; 32];
    for (index, digit) in id.iter_mut().enumerate() {
        let nibble = (random >> (124 - 4 * index)) & 0xf;
        *digit = DIGITS[nibble as usize];
    }
    HeaderValue::from_bytes(&id).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// Every `X-Forwarded-*` header, `X-Real-IP`, `X-Request-ID` and `Forwarded`: what an
/// untrusted client may not say about itself. One pass over the names; nothing is hashed
/// unless the client sent one.
fn remove_forwarding(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            name.as_str().starts_with(X_FORWARDED_PREFIX)
                || **name == X_REAL_IP
                || **name == X_REQUEST_ID
                || **name == FORWARDED
        })
        .cloned()
        .collect();
    for name in named {
        headers.remove(name);
    }
}

/// An address as a header value.
fn address_value(address: IpAddr) -> HeaderValue {
    let value = match address {
        IpAddr::V4(v4) => {
            let (text, length) = ipv4_text(v4);
            HeaderValue::from_bytes(&text[..length])
        }
        IpAddr::V6(_) => HeaderValue::try_from(address.to_string()),
    };
    value.unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `a.b.c.d` and its length, octet by octet with itoa: `Display` went through the formatting
/// machinery and cost about 1,500 instructions per request (bench/instructions).
fn ipv4_text(address: Ipv4Addr) -> ([u8; 15], usize) {
    let mut text = [0u8; 15];
    let mut length = 0;
    for (index, octet) in address.octets().into_iter().enumerate() {
        if index > 0 {
            text[length] = b'.';
            length += 1;
        }
        let mut buffer = itoa::Buffer::new();
        let digits = buffer.format(octet).as_bytes();
        text[length..length + digits.len()].copy_from_slice(digits);
        length += digits.len();
    }
    (text, length)
}

/// One `X-Forwarded-For` hop as an address: `1.2.3.4`, `1.2.3.4:5678`, `::1` or `[::1]:80`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(address) = IpAddr::from_str(hop) {
        return Some(canonical(address));
    }
    let host = match hop.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next()?,
        None => hop.rsplit_once(':')?.0,
    };
    IpAddr::from_str(host).ok().map(canonical)
}

fn port_value(info: &ClientInfo) -> HeaderValue {
    info.forwarded.port.clone()
}

/// What the forwarding headers say of a connection from `client` to `server`, made once.
pub(crate) fn forwarded_values(client: SocketAddr, server: SocketAddr) -> ForwardedValues {
    ForwardedValues {
        client: address_value(canonical(client.ip())),
        port: HeaderValue::from(server.port()),
    }
}

fn keep_or_insert(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    headers.entry(name).or_insert(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(client: &str) -> ClientInfo {
        let client = client.parse().unwrap_or_else(|e| panic!("{client}: {e}"));
        let server = "127.0.0.1:8080".parse().unwrap_or_else(|e| panic!("{e}"));
        ClientInfo {
            peer: client,
            client,
            server,
            tls: None,
            gateway_socket: None,
            forwarded: forwarded_values(client, server),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
                    HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
                )
            })
            .collect()
    }

    fn trusted(text: &str) -> TrustedProxies {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn forward(
        inbound: &[(&str, &str)],
        client: &str,
        proxies: &TrustedProxies,
    ) -> (HeaderMap, Forwarding) {
        let mut headers = headers(inbound);
        let info = info(client);
        let forwarding = Forwarding::decide(&headers, &info, proxies);
        let id = forwarding.request_id(&headers);
        forwarding.apply(
            &mut headers,
            &info,
            &HeaderValue::from_static("shop.test"),
            &id,
        );
        (headers, forwarding)
    }

    const SPOOFED: [(&str, &str); 7] = [
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "evil.test"),
        ("x-forwarded-port", "443"),
        ("x-real-ip", "6.6.6.6"),
        ("forwarded", "for=6.6.6.6"),
        ("x-request-id", "chosen-by-client"),
    ];

    fn request_id(sent: &str) -> String {
        let (h, _) = forward(
            &[("x-request-id", sent)],
            "203.0.113.9:5000",
            &TrustedProxies::default(),
        );
        h["x-request-id"].to_str().unwrap_or_default().to_owned()
    }

    /// nginx.tmpl keeps any client's `X-Request-ID` (`map $http_x_request_id $req_id`).
    #[test]
    fn any_clients_request_id_is_kept_unless_it_is_overlong_or_not_visible_ascii() {
        assert_eq!(request_id("something-unique"), "something-unique");
        for replaced in ["a b", &"x".repeat(201)] {
            let id = request_id(replaced);
            assert!(
                id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "{replaced:?} became {id}"
            );
        }
    }

    /// The id written nibble by nibble reads as `format!("{:032x}")` would: lowercase, zero
    /// padded, and a new one each time.
    #[test]
    fn new_request_ids_are_32_lowercase_hex_digits_and_differ() {
        let ids: Vec<String> = (0..64)
            .map(|_| new_request_id().to_str().unwrap_or_default().to_owned())
            .collect();
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{id}"
            );
            let value = u128::from_str_radix(id, 16).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(format!("{value:032x}"), *id);
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }

    /// IPv4 written with itoa reads as its `Display`, at every octet width.
    #[test]
    fn address_values_read_as_the_address_displays() {
        for text in [
            "0.0.0.0",
            "1.2.3.4",
            "10.0.0.1",
            "127.0.0.1",
            "192.168.100.200",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ] {
            let address: IpAddr = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(address_value(address), address.to_string().as_str());
        }
    }

    #[test]
    fn an_untrusted_client_cannot_say_who_it_is() {
        let (h, forwarding) = forward(&SPOOFED, "203.0.113.9:5000", &TrustedProxies::default());
        assert!(!forwarding.trusted);
        assert_eq!(h["x-forwarded-for"], "203.0.113.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "shop.test");
        assert_eq!(h["x-forwarded-port"], "8080");
        assert_eq!(h["x-real-ip"], "203.0.113.9");
        assert!(!h.contains_key("forwarded"));
        assert_eq!(
            h["x-request-id"], "chosen-by-client",
            "an id claims nothing"
        );
    }

    #[test]
    fn a_trusted_proxy_keeps_its_headers_and_names_the_real_client() {
        let proxies = trusted("10.0.0.0/8, 192.0.2.1");
        let (h, forwarding) = forward(
            &[
                ("x-forwarded-for", "198.51.100.7, 10.1.1.1"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-port", "443"),
                ("forwarded", "for=198.51.100.7;proto=https"),
                ("x-request-id", "abc-123"),
            ],
            "192.0.2.1:5000",
            &proxies,
        );
        assert!(forwarding.trusted);
        assert_eq!(h["x-forwarded-for"], "198.51.100.7, 10.1.1.1, 192.0.2.1");
        assert_eq!(h["x-real-ip"], "198.51.100.7", "rightmost untrusted hop");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-port"], "443");
        assert_eq!(
            h["x-forwarded-host"], "shop.test",
            "set when the proxy did not"
        );
        assert_eq!(h["forwarded"], "for=198.51.100.7;proto=https");
        assert_eq!(h["x-request-id"], "abc-123");
    }

    #[test]
    fn a_client_cannot_hide_behind_a_spoofed_hop_left_of_the_real_one() {
        let proxies = trusted("10.0.0.0/8");
        let (h, _) = forward(
            &[("x-forwarded-for", "1.1.1.1, 203.0.113.9")],
            "10.0.0.1:1",
            &proxies,
        );
        assert_eq!(h["x-real-ip"], "203.0.113.9");
    }

    #[test]
    fn when_every_hop_is_trusted_the_leftmost_is_the_client() {
        let proxies = trusted("10.0.0.0/8");
        let (h, _) = forward(
            &[("x-forwarded-for", "10.9.9.9:1234, 10.1.1.1")],
            "10.0.0.1:1",
            &proxies,
        );
        assert_eq!(h["x-real-ip"], "10.9.9.9");
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_ranges() {
        let proxies = trusted("127.0.0.0/8");
        assert!(proxies.contains("::ffff:127.0.0.5".parse().unwrap_or_else(|e| panic!("{e}"))));
        let (h, _) = forward(&[], "[::ffff:127.0.0.5]:80", &TrustedProxies::default());
        assert_eq!(h["x-forwarded-for"], "127.0.0.5");
    }

    #[test]
    fn trusted_proxies_parse_addresses_and_ranges() {
        assert_eq!(
            trusted("10.0.0.1, 2001:db8::/32,"),
            TrustedProxies(vec![
                "10.0.0.1/32".parse().unwrap_or_else(|e| panic!("{e}")),
                "2001:db8::/32".parse().unwrap_or_else(|e| panic!("{e}")),
            ])
        );
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
        assert!("example.com".parse::<TrustedProxies>().is_err());
    }
}
