//! Traefik's `ipAllowList` (with its `ipStrategy`) and `basicAuth`: who may use the route, answered as Traefik answers a refusal.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine;
use http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use sluice_routing::middleware::{BasicAuthStep, IpAllowList, IpStrategy};

use super::ChainRequest;
use super::{answered, OwnAnswer};
use crate::filters::contract::LocalAnswer;
use crate::filters::passwords::verify;

/// The client's address as `strategy` picks it, as text (`None` when it picks none: a depth
/// past the end of `X-Forwarded-For`, every entry excluded, or no header).
pub(super) fn client_address(
    request: &ChainRequest<'_, '_>,
    strategy: &IpStrategy,
) -> Option<String> {
    let picked = if strategy.depth > 0 {
        let hops: Vec<&str> = request.forwarded_for?.split(',').map(str::trim).collect();
        let index = hops.len().checked_sub(strategy.depth)?;
        Some(hops[index].to_owned()).filter(|hop| !hop.is_empty())
    } else if !strategy.excluded.is_empty() {
        request
            .forwarded_for?
            .split(',')
            .map(str::trim)
            .rev()
            .filter(|hop| !hop.is_empty())
            .find(|hop| {
                parse_address(hop).is_none_or(|address| {
                    !strategy
                        .excluded
                        .iter()
                        .any(|range| range.contains(&address))
                })
            })
            .map(str::to_owned)
    } else {
        Some(request.context.connection.client.ip().to_string())
    };
    let picked = picked?;
    match (strategy.ipv6_subnet, parse_address(&picked)) {
        (Some(bits), Some(IpAddr::V6(v6))) => {
            let network = ipnet::Ipv6Net::new(v6, bits).ok()?.trunc();
            Some(network.addr().to_string())
        }
        _ => Some(picked),
    }
}

/// An address as `X-Forwarded-For` may write it: bare, or with a port.
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
        .map(|address| match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        })
}

/// `ipAllowList`: a client outside the ranges gets the reject status with its reason phrase
/// as the body (`Forbidden`).
pub(super) struct AllowListCheck(pub(super) Arc<IpAllowList>);

impl AllowListCheck {
    pub(super) fn check(&self, request: &ChainRequest<'_, '_>) -> Result<(), Box<LocalAnswer>> {
        let list = &self.0;
        let admitted = client_address(request, &list.strategy)
            .and_then(|text| parse_address(&text))
            .is_some_and(|address| list.ranges.iter().any(|range| range.contains(&address)));
        if admitted {
            return Ok(());
        }
        let status = StatusCode::from_u16(list.reject_status).unwrap_or(StatusCode::FORBIDDEN);
        let reason = status.canonical_reason().unwrap_or("Forbidden");
        Err(answered(OwnAnswer {
            status,
            headers: HeaderMap::new(),
            body: bytes::Bytes::from_static(reason.as_bytes()),
        }))
    }
}

/// `basicAuth`: `Authorization: Basic` against the Secret's users; a refusal is Traefik's
/// 401 with its challenge.
pub(super) struct BasicAuthCheck(pub(super) Arc<BasicAuthStep>);

impl BasicAuthCheck {
    pub(super) fn check(&self, request: &mut ChainRequest<'_, '_>) -> Result<(), Box<LocalAnswer>> {
        let auth = &self.0;
        let headers = &mut request.upstream.headers;
        let user = credentials(headers.get(AUTHORIZATION)).and_then(|(user, password)| {
            let (_, hash) = auth.users.iter().rev().find(|(name, _)| *name == user)?;
            verify(password.as_bytes(), hash).then_some(user)
        });
        let Some(user) = user else {
            return Err(self.challenge());
        };
        if let Some(field) = auth
            .header_field
            .as_deref()
            .and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        {
            headers.remove(&field);
            if let Ok(value) = HeaderValue::try_from(user) {
                headers.insert(field, value);
            }
        }
        if auth.remove_header {
            headers.remove(AUTHORIZATION);
        }
        Ok(())
    }

    fn challenge(&self) -> Box<LocalAnswer> {
        let mut headers = HeaderMap::new();
        let realm: String = self.0.realm.chars().filter(|c| *c != '"').collect();
        if let Ok(value) = HeaderValue::try_from(format!("Basic realm=\"{realm}\"")) {
            headers.insert(WWW_AUTHENTICATE, value);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        answered(OwnAnswer {
            status: StatusCode::UNAUTHORIZED,
            headers,
            body: bytes::Bytes::from_static(b"401 Unauthorized\n"),
        })
    }
}

/// The user and password of `Authorization: Basic` (the scheme in any case; the password may
/// hold `:`).
fn credentials(header: Option<&HeaderValue>) -> Option<(String, String)> {
    let text = header?.to_str().ok()?;
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_split_at_the_first_colon() {
        let header = HeaderValue::from_static("basic YW5hOnA6dw==");
        assert_eq!(
            credentials(Some(&header)),
            Some(("ana".to_owned(), "p:w".to_owned()))
        );
        assert_eq!(
            credentials(Some(&HeaderValue::from_static("Bearer x"))),
            None
        );
    }

    #[test]
    fn forwarded_addresses_may_carry_ports_and_map_ipv4() {
        assert_eq!(parse_address("10.0.0.1:4567"), Some([10, 0, 0, 1].into()));
        assert_eq!(
            parse_address(" ::ffff:10.0.0.1 "),
            Some([10, 0, 0, 1].into())
        );
        assert_eq!(parse_address("unknown"), None);
    }
}
