//! End-to-end: WebSocket through sluice with tokio-tungstenite on both ends: echo, a 1 MB message, table and endpoint changes during the connection, the idle timeout, and shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use support::{ingress, pod_ip, service, websocket_echo_pod, write_manifest, Sluice};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(sluice: &Sluice, host: &str) -> Client {
    let mut request = format!("ws://{}/chat", sluice.listen)
        .into_client_request()
        .unwrap();
    request.headers_mut().insert("host", host.parse().unwrap());
    let (client, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), 101);
    client
}

async fn round_trip(client: &mut Client, text: &str) -> String {
    client.send(Message::text(text)).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), client.next()).await {
        Ok(Some(Ok(Message::Text(reply)))) => reply.to_string(),
        other => panic!("no echo for {text:?}: {other:?}"),
    }
}

fn manifests(dir: &std::path::Path, pods: &[SocketAddr], extra_route: bool) {
    let mut documents = vec![
        ingress("chat", "chat.test", &[("/", "Prefix", "chat", 80)]),
        service("chat", 80, pods),
    ];
    if extra_route {
        documents.push(ingress(
            "extra",
            "extra.test",
            &[("/", "Prefix", "chat", 80)],
        ));
    }
    write_manifest(dir, "chat.yaml", &documents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echoes_large_messages_and_survives_table_and_endpoint_changes() {
    let first = websocket_echo_pod("ws-1", pod_ip(150)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[first], false);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut client = connect(&sluice, "chat.test").await;
    assert_eq!(round_trip(&mut client, "hello").await, "ws-1: hello");

    let megabyte: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    client
        .send(Message::binary(megabyte.clone()))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), client.next()).await {
        Ok(Some(Ok(Message::Binary(echoed)))) => {
            assert!(echoed[..] == megabyte[..], "1 MB echoed intact")
        }
        other => panic!("no binary echo: {other:?}"),
    }

    // A table swap, then an endpoint change that removes the pod: the open tunnel stays.
    let generation = sluice.generation().await;
    manifests(dir.path(), &[first], true);
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(
        round_trip(&mut client, "after a swap").await,
        "ws-1: after a swap"
    );
    let second = websocket_echo_pod("ws-2", pod_ip(151)).await;
    let generation = sluice.generation().await;
    manifests(dir.path(), &[second], true);
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(
        round_trip(&mut client, "pod left the endpoints").await,
        "ws-1: pod left the endpoints",
        "an open WebSocket stays with its pod until the pod closes it"
    );
    let mut fresh = connect(&sluice, "chat.test").await;
    assert_eq!(round_trip(&mut fresh, "new").await, "ws-2: new");
}

/// Waits for the server side to end the connection; returns how long it took.
async fn closed_within(client: &mut Client, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        match tokio::time::timeout(limit, client.next()).await {
            Ok(None | Some(Err(_)) | Some(Ok(Message::Close(_)))) => return started.elapsed(),
            Ok(Some(Ok(_))) => continue,
            Err(_) => panic!("the connection stayed open beyond {limit:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_websocket_closes_after_its_own_idle_timeout_not_the_body_timeout() {
    let pod = websocket_echo_pod("ws", pod_ip(152)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[pod], false);
    let sluice = Sluice::start(
        dir.path(),
        &[
            "--websocket-idle-timeout",
            "1500ms",
            "--body-idle-timeout",
            "300ms",
            "--client-idle-timeout",
            "300ms",
        ],
    )
    .await;
    let mut client = connect(&sluice, "chat.test").await;
    // Traffic every 500 ms outlives the body and client idle timeouts.
    for round in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            round_trip(&mut client, &format!("{round}")).await,
            format!("ws: {round}")
        );
    }
    let took = closed_within(&mut client, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(1200),
        "closed after {took:?}, before the idle timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shutdown_a_websocket_gets_the_grace_period_then_a_close() {
    let pod = websocket_echo_pod("ws", pod_ip(153)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[pod], false);
    let mut sluice = Sluice::start(
        dir.path(),
        &["--shutdown-delay", "0s", "--grace-period", "1s"],
    )
    .await;
    let mut client = connect(&sluice, "chat.test").await;
    assert_eq!(round_trip(&mut client, "before").await, "ws: before");
    sluice.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        round_trip(&mut client, "during the grace period").await,
        "ws: during the grace period"
    );
    let took = closed_within(&mut client, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(3), "closed after {took:?}");
    assert_eq!(sluice.wait_exit(Duration::from_secs(5)).await, Some(0));
}
