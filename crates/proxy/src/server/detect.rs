//! Which HTTP a connection speaks: ALPN's choice on TLS, else the first bytes read, where the HTTP/2 connection preface means HTTP/2 (h2c with prior knowledge) and anything else HTTP/1.1.

use std::io;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The first read's buffer: a typical request head fits, and it stays the HTTP/1.1
/// connection's read buffer.
const FIRST_READ: usize = 4096;

/// The protocol of one client connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    /// What ALPN chose on a TLS connection; `None` when the client offered no protocol, in
    /// which case the first bytes decide.
    pub(super) fn of_alpn(alpn: Option<&[u8]>) -> Option<Self> {
        match alpn {
            Some(b"h2") => Some(Self::Http2),
            Some(_) => Some(Self::Http1),
            None => None,
        }
    }
}

/// What `bytes`, the start of a stream, say: `None` while they are a proper prefix of the
/// preface.
fn judge(bytes: &[u8]) -> Option<Protocol> {
    let seen = bytes.len().min(PREFACE.len());
    if bytes[..seen] != PREFACE[..seen] {
        Some(Protocol::Http1)
    } else if seen == PREFACE.len() {
        Some(Protocol::Http2)
    } else {
        None
    }
}

/// Reads until the stream's protocol is known, starting from `prefix` (bytes already read
/// after a PROXY header). Returns the protocol and every byte read, for the protocol's
/// server to read first; `None` when the client left before saying.
pub(super) async fn detect<S: AsyncRead + Unpin>(
    stream: &mut S,
    prefix: Bytes,
) -> io::Result<Option<(Protocol, BytesMut)>> {
    if let Some(protocol) = judge(&prefix) {
        return Ok(Some((protocol, BytesMut::from(&prefix[..]))));
    }
    let mut read = BytesMut::with_capacity(FIRST_READ.max(prefix.len() + PREFACE.len()));
    read.extend_from_slice(&prefix);
    loop {
        if stream.read_buf(&mut read).await? == 0 {
            return Ok(None);
        }
        if let Some(protocol) = judge(&read) {
            return Ok(Some((protocol, read)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_differing_byte_decides_for_http1() {
        assert_eq!(judge(b""), None);
        assert_eq!(judge(b"PRI * HTTP/2"), None);
        assert_eq!(judge(b"G"), Some(Protocol::Http1));
        assert_eq!(judge(b"PROPFIND / HTTP/1.1\r\n"), Some(Protocol::Http1));
        assert_eq!(judge(b"PRI * HTTP/1.1\r\n"), Some(Protocol::Http1));
        assert_eq!(judge(PREFACE), Some(Protocol::Http2));
        assert_eq!(
            judge(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\x12\x04"),
            Some(Protocol::Http2)
        );
    }

    #[test]
    fn alpn_decides_on_tls_when_the_client_offered_a_protocol() {
        assert_eq!(Protocol::of_alpn(Some(b"h2")), Some(Protocol::Http2));
        assert_eq!(Protocol::of_alpn(Some(b"http/1.1")), Some(Protocol::Http1));
        assert_eq!(Protocol::of_alpn(None), None);
    }

    #[tokio::test]
    async fn a_preface_in_pieces_is_read_to_its_end() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for piece in PREFACE[3..].chunks(5) {
                client.write_all(piece).await?;
                tokio::task::yield_now().await;
            }
            client.write_all(b"\0\0\0\x04\0\0\0\0\0").await?;
            io::Result::Ok(client)
        });
        let detected = detect(&mut server, Bytes::from_static(b"PRI"))
            .await
            .ok()
            .flatten();
        let (protocol, read) = detected.unwrap_or((Protocol::Http1, BytesMut::new()));
        assert_eq!(protocol, Protocol::Http2);
        assert!(
            read.starts_with(PREFACE),
            "every byte read is kept: {read:?}"
        );
        let _ = writer.await;
    }

    #[tokio::test]
    async fn a_client_that_leaves_before_saying_is_none() {
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert_eq!(detect(&mut server, Bytes::new()).await.ok(), Some(None));
    }
}
