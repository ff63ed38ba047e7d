//! The PROXY protocol (v1 text and v2 binary) that a load balancer in front (an AWS NLB, HAProxy) writes before the client's bytes, naming the client's address.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ppp::{v1, v2, HeaderResult, PartialResult};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The longest header accepted: v1 is at most 107 bytes, v2 is 16 plus its addresses and TLVs.
const MAX_HEADER: usize = 4096;

/// What a PROXY header said.
#[derive(Debug)]
pub(crate) struct ProxyHeader {
    /// The client's and the original destination's addresses; `None` for a `LOCAL` (v2) or
    /// `UNKNOWN` (v1) header, where the connection's own addresses stand.
    pub(crate) addresses: Option<(SocketAddr, SocketAddr)>,
    /// Bytes read past the header, which belong to the HTTP stream.
    pub(crate) rest: Bytes,
}

/// Why a connection was closed before its first request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    #[error("no PROXY protocol header within {0:?}")]
    TimedOut(Duration),
    #[error("the connection closed before a complete PROXY protocol header")]
    Closed,
    #[error("invalid PROXY protocol header")]
    Invalid,
    #[error("reading the PROXY protocol header failed")]
    Io(#[source] std::io::Error),
}

/// Reads the PROXY header that must open `stream`, within `timeout`.
pub(crate) async fn read_header(
    stream: &mut TcpStream,
    timeout: Duration,
) -> Result<ProxyHeader, ProxyHeaderError> {
    tokio::time::timeout(timeout, read(stream))
        .await
        .map_err(|_| ProxyHeaderError::TimedOut(timeout))?
}

async fn read(stream: &mut TcpStream) -> Result<ProxyHeader, ProxyHeaderError> {
    let mut buffer = BytesMut::with_capacity(256);
    loop {
        let read = stream
            .read_buf(&mut buffer)
            .await
            .map_err(ProxyHeaderError::Io)?;
        if read == 0 {
            return Err(ProxyHeaderError::Closed);
        }
        let header = HeaderResult::parse(&buffer);
        if header.is_incomplete() && buffer.len() < MAX_HEADER && !v1_line_ended(&buffer) {
            continue;
        }
        let (length, addresses) = parsed(header).ok_or(ProxyHeaderError::Invalid)?;
        let rest = buffer.split_off(length).freeze();
        return Ok(ProxyHeader { addresses, rest });
    }
}

/// Whether a v1 (text) header has reached its line end: one that still does not parse then
/// is invalid, however ppp classifies it (it reads a missing field as "more to come").
fn v1_line_ended(buffer: &[u8]) -> bool {
    buffer.starts_with(b"PROXY ") && buffer.contains(&b'\n')
}

/// The header's length and addresses, or `None` when it is invalid.
fn parsed(header: HeaderResult<'_>) -> Option<(usize, Option<(SocketAddr, SocketAddr)>)> {
    match header {
        HeaderResult::V1(Ok(header)) => {
            let addresses = match header.addresses {
                v1::Addresses::Tcp4(ip) => Some(ipv4_pair(ip)),
                v1::Addresses::Tcp6(ip) => Some(ipv6_pair(ip)),
                v1::Addresses::Unknown => None,
            };
            Some((header.header.len(), addresses))
        }
        HeaderResult::V2(Ok(header)) => {
            let addresses = match (header.command, header.addresses) {
                (v2::Command::Proxy, v2::Addresses::IPv4(ip)) => Some(ipv4_pair(ip)),
                (v2::Command::Proxy, v2::Addresses::IPv6(ip)) => Some(ipv6_pair(ip)),
                _ => None,
            };
            Some((header.len(), addresses))
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => None,
    }
}

/// Source and destination of a TCP-over-IPv4 header (both versions share the type).
fn ipv4_pair(ip: v1::IPv4) -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::from((ip.source_address, ip.source_port)),
        SocketAddr::from((ip.destination_address, ip.destination_port)),
    )
}

fn ipv6_pair(ip: v1::IPv6) -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::from((ip.source_address, ip.source_port)),
        SocketAddr::from((ip.destination_address, ip.destination_port)),
    )
}
