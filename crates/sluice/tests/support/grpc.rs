//! gRPC test kit: the Echo service of `echo.proto` (prost messages derived by hand, so no protoc) served by tonic over hyper on a pod address, and a tonic client over hyper-util for h2c and TLS.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::codegen::{BoxFuture, Context, Poll, Service};
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    #[prost(string, tag = "1")]
    pub message: String,
    #[prost(uint32, tag = "2")]
    pub count: u32,
    #[prost(uint64, tag = "3")]
    pub delay_ms: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    #[prost(string, tag = "1")]
    pub message: String,
    #[prost(string, tag = "2")]
    pub pod: String,
}

type Codec = tonic_prost::ProstCodec<EchoReply, EchoRequest>;
type ClientCodec = tonic_prost::ProstCodec<EchoRequest, EchoReply>;
type ReplyStream = std::pin::Pin<Box<dyn Stream<Item = Result<EchoReply, Status>> + Send>>;

/// A tower service for one method of one pod: what tonic's generated code writes per method.
struct Method<Req, Res> {
    pod: &'static str,
    handler: fn(&'static str, Request<Req>) -> BoxFuture<Response<Res>, Status>,
}

impl<Req, Res> Service<Request<Req>> for Method<Req, Res> {
    type Response = Response<Res>;
    type Error = Status;
    type Future = BoxFuture<Response<Res>, Status>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        (self.handler)(self.pod, request)
    }
}

/// An Echo pod: answers every method with its name, until dropped (then its listener and
/// every connection close at once, as when a pod dies).
pub struct EchoPod {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for EchoPod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EchoPod {
    pub async fn start(name: &'static str, addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                connections.spawn(async move {
                    let service = service_fn(move |request| route(name, request));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            connections: accepted,
            task,
        }
    }
}

async fn route(
    pod: &'static str,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, Infallible> {
    let mut grpc = tonic::server::Grpc::new(Codec::default());
    let response = match request.uri().path() {
        "/echo.Echo/Unary" => {
            let method = Method {
                pod,
                handler: unary,
            };
            grpc.unary(method, request).await
        }
        "/echo.Echo/ServerStream" => {
            let method = Method {
                pod,
                handler: server_stream,
            };
            grpc.server_streaming(method, request).await
        }
        "/echo.Echo/ClientStream" => {
            let method = Method {
                pod,
                handler: client_stream,
            };
            grpc.client_streaming(method, request).await
        }
        "/echo.Echo/Bidi" => {
            let method = Method { pod, handler: bidi };
            grpc.streaming(method, request).await
        }
        _ => Status::unimplemented("no such method").into_http(),
    };
    Ok(response)
}

fn reply(pod: &str, message: String) -> EchoReply {
    EchoReply {
        message,
        pod: pod.to_owned(),
    }
}

fn unary(
    pod: &'static str,
    request: Request<EchoRequest>,
) -> BoxFuture<Response<EchoReply>, Status> {
    Box::pin(async move {
        let request = request.into_inner();
        tokio::time::sleep(Duration::from_millis(request.delay_ms)).await;
        Ok(Response::new(reply(pod, request.message)))
    })
}

fn server_stream(
    pod: &'static str,
    request: Request<EchoRequest>,
) -> BoxFuture<Response<ReplyStream>, Status> {
    Box::pin(async move {
        let request = request.into_inner();
        let items = futures_util::stream::unfold(0u32, move |sent| {
            let request = request.clone();
            async move {
                if sent == request.count {
                    return None;
                }
                if sent > 0 {
                    tokio::time::sleep(Duration::from_millis(request.delay_ms)).await;
                }
                let item = reply(pod, format!("{} #{sent}", request.message));
                Some((Ok(item), sent + 1))
            }
        });
        Ok(Response::new(Box::pin(items) as ReplyStream))
    })
}

fn client_stream(
    pod: &'static str,
    request: Request<Streaming<EchoRequest>>,
) -> BoxFuture<Response<EchoReply>, Status> {
    Box::pin(async move {
        let mut stream = request.into_inner();
        let mut messages = Vec::new();
        while let Some(item) = stream.next().await {
            messages.push(item?.message);
        }
        Ok(Response::new(reply(pod, messages.join(","))))
    })
}

fn bidi(
    pod: &'static str,
    request: Request<Streaming<EchoRequest>>,
) -> BoxFuture<Response<ReplyStream>, Status> {
    Box::pin(async move {
        let replies = request
            .into_inner()
            .map(move |item| item.map(|request| reply(pod, request.message)));
        Ok(Response::new(Box::pin(replies) as ReplyStream))
    })
}

/// Resolves every name to one address (so a client can name a host and reach loopback).
#[derive(Clone)]
pub struct FixedResolver(SocketAddr);

impl Service<Name> for FixedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _name: Name) -> Self::Future {
        std::future::ready(Ok(vec![self.0].into_iter()))
    }
}

type H2cTransport = Client<HttpConnector<FixedResolver>, tonic::body::Body>;
type TlsTransport =
    Client<hyper_rustls::HttpsConnector<HttpConnector<FixedResolver>>, tonic::body::Body>;

/// A tonic Echo client over one transport; clones share the transport's connections.
#[derive(Clone)]
pub struct EchoClient<T> {
    grpc: tonic::client::Grpc<T>,
}

/// A client for `http://{host}` (h2c with prior knowledge) that connects to `addr`.
pub fn h2c_client(addr: SocketAddr, host: &str) -> EchoClient<H2cTransport> {
    let connector = HttpConnector::new_with_resolver(FixedResolver(addr));
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector);
    let origin = format!("http://{host}:{}", addr.port()).parse().unwrap();
    EchoClient {
        grpc: tonic::client::Grpc::with_origin(client, origin),
    }
}

/// A client for `https://{host}` (ALPN h2) that connects to `addr` and trusts `ca_pem`.
pub fn tls_client(addr: SocketAddr, host: &str, ca_pem: &str) -> EchoClient<TlsTransport> {
    let config = super::tls::client_config(ca_pem);
    let mut http = HttpConnector::new_with_resolver(FixedResolver(addr));
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http2()
        .wrap_connector(http);
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector);
    let origin = format!("https://{host}:{}", addr.port()).parse().unwrap();
    EchoClient {
        grpc: tonic::client::Grpc::with_origin(client, origin),
    }
}

impl<T> EchoClient<T>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<tonic::codegen::StdError>,
    T::Error: Into<tonic::codegen::StdError>,
{
    async fn ready(&mut self) -> Result<(), Status> {
        self.grpc
            .ready()
            .await
            .map_err(|error| Status::unavailable(error.into().to_string()))
    }

    pub async fn unary(&mut self, request: Request<EchoRequest>) -> Result<EchoReply, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/echo.Echo/Unary");
        let response = self
            .grpc
            .unary(request, path, ClientCodec::default())
            .await?;
        Ok(response.into_inner())
    }

    pub async fn server_stream(
        &mut self,
        request: EchoRequest,
    ) -> Result<Streaming<EchoReply>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/echo.Echo/ServerStream");
        let response = self
            .grpc
            .server_streaming(Request::new(request), path, ClientCodec::default())
            .await?;
        Ok(response.into_inner())
    }

    pub async fn client_stream(&mut self, messages: Vec<&str>) -> Result<EchoReply, Status> {
        self.ready().await?;
        let requests: Vec<EchoRequest> = messages
            .into_iter()
            .map(|message| EchoRequest {
                message: message.to_owned(),
                ..EchoRequest::default()
            })
            .collect();
        let path = http::uri::PathAndQuery::from_static("/echo.Echo/ClientStream");
        let stream = futures_util::stream::iter(requests);
        let response = self
            .grpc
            .client_streaming(Request::new(stream), path, ClientCodec::default())
            .await?;
        Ok(response.into_inner())
    }

    /// Opens a bidirectional call fed by `requests`.
    pub async fn bidi(
        &mut self,
        requests: tokio::sync::mpsc::Receiver<EchoRequest>,
    ) -> Result<Streaming<EchoReply>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/echo.Echo/Bidi");
        let stream = futures_util::stream::unfold(requests, |mut requests| async move {
            requests.recv().await.map(|request| (request, requests))
        });
        let response = self
            .grpc
            .streaming(Request::new(stream), path, ClientCodec::default())
            .await?;
        Ok(response.into_inner())
    }
}
