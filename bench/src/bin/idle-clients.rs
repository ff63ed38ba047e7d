//! Opens many keep-alive client connections to a proxy, sends one request on each, and holds them idle so the proxy's memory per idle connection can be read.
//!
//! ```text
//! idle-clients --connect 127.0.0.1:18080 --host bench.test --connections 10000 --hold-seconds 30
//! idle-clients --connect 127.0.0.1:18443 --tls true ...   (HTTPS with SNI --host, HTTP/1.1 by ALPN)
//! ```
//!
//! Prints `ready` on its own line once every connection has had its response, then holds them
//! for `--hold-seconds` (or until killed). Connections are opened one after another; the kernel
//! picks each source port for its own address pair, so no port is held by a bind. Over TLS,
//! any certificate is accepted (as `curl -k`: the proxies serve a self-signed one) but the
//! handshake's signatures are checked.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use rustls::pki_types::ServerName;
use sluice_proxy::bench_support::any_certificate_client;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

struct Options {
    connect: SocketAddr,
    host: String,
    connections: usize,
    hold: Duration,
    /// HTTPS (HTTP/1.1 by ALPN).
    tls: bool,
}

/// A held connection, plain or TLS.
trait Held: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Held for T {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let options = parse(std::env::args().skip(1))?;
    let request = format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", options.host);
    let mut held = Vec::with_capacity(options.connections);
    let tls = match options.tls {
        true => Some(TlsConnector::from(any_certificate_client(vec![
            b"http/1.1".to_vec(),
        ])?)),
        false => None,
    };
    let name = ServerName::try_from(options.host.clone()).context("--host as a TLS name")?;
    for index in 0..options.connections {
        let stream = open_and_ask(options.connect, index, request.as_bytes(), |stream| async {
            let stream: Box<dyn Held> = match &tls {
                Some(tls) => Box::new(tls.connect(name.clone(), stream).await?),
                None => Box::new(stream),
            };
            Ok(stream)
        })
        .await?;
        held.push(stream);
    }
    println!("ready");
    tokio::time::sleep(options.hold).await;
    drop(held);
    Ok(())
}

/// One connection (wrapped by `wrap`, the TLS handshake when there is one), one request, and
/// its whole response read.
async fn open_and_ask<W, Fut>(
    target: SocketAddr,
    index: usize,
    request: &[u8],
    wrap: W,
) -> anyhow::Result<Box<dyn Held>>
where
    W: FnOnce(TcpStream) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Box<dyn Held>>>,
{
    let stream = TcpStream::connect(target)
        .await
        .with_context(|| format!("connection {index} to {target}"))?;
    let mut stream = wrap(stream)
        .await
        .with_context(|| format!("TLS handshake on connection {index}"))?;
    stream.write_all(request).await?;
    read_one_response(&mut stream)
        .await
        .with_context(|| format!("response on connection {index}"))?;
    Ok(stream)
}

/// Reads a response head and its `Content-Length` body; anything but a 2xx is an error.
async fn read_one_response(stream: &mut Box<dyn Held>) -> anyhow::Result<()> {
    let mut received = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            bail!("closed before a whole response");
        }
        received.extend_from_slice(&chunk[..read]);
        let Some(head_end) = find(&received, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 2") {
            bail!("answered {}", head.lines().next().unwrap_or_default());
        }
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if received.len() >= head_end + 4 + length {
            return Ok(());
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Options> {
    let mut options = Options {
        connect: SocketAddr::from(([127, 0, 0, 1], 18080)),
        host: "bench.test".to_owned(),
        connections: 10_000,
        hold: Duration::from_secs(3600),
        tls: false,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--connect" => options.connect = value.parse().context("--connect ADDR:PORT")?,
            "--host" => options.host = value,
            "--tls" => {
                options.tls = value.parse().context("--tls true|false")?;
            }
            "--connections" => options.connections = value.parse().context("--connections N")?,
            "--hold-seconds" => {
                options.hold = Duration::from_secs(value.parse().context("--hold-seconds N")?)
            }
            other => bail!("unknown flag {other}; see the header of bench/src/bin/idle-clients.rs"),
        }
    }
    Ok(options)
}
