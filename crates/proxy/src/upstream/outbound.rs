//! The proxy's own HTTP(S) client for requests that are not the client's: external auth subrequests and mirrored copies.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub(crate) type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP(S) client for auth services and mirrors, made on first use and shared by every route.
#[derive(Default)]
pub(crate) struct OutboundClient(OnceLock<Result<HttpsClient, String>>);

impl OutboundClient {
    pub(crate) fn get(&self) -> Result<&HttpsClient, &str> {
        self.0
            .get_or_init(build_client)
            .as_ref()
            .map_err(String::as_str)
    }
}

/// An HTTP/1.1 client that speaks TLS to `https://` auth services, verified with the system's
/// CA certificates (none when the system has none: such services then fail).
fn build_client() -> Result<HttpsClient, String> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match builder.with_provider_and_native_roots(provider.clone()) {
        Ok(builder) => builder,
        Err(error) => {
            tracing::warn!(%error, "no system CA certificates: https auth services cannot be verified");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|error| error.to_string())?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    Ok(client_over(builder.https_or_http().enable_http1()))
}

/// An HTTP/1.1 client that speaks TLS with `config` (its own CAs, no verification, a client
/// certificate), for an auth server with TLS settings of its own.
pub(crate) fn client_with_tls(config: rustls::ClientConfig) -> HttpsClient {
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
    client_over(builder.https_or_http().enable_http1())
}

fn client_over(
    builder: hyper_rustls::HttpsConnectorBuilder<hyper_rustls::builderstates::WantsProtocols2>,
) -> HttpsClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let connector = builder.wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}
