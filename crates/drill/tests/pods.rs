//! Pods answer over keep-alive, and each termination mode ends them the way it promises.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use bytes::Bytes;
use sluice_drill::pods::{Pod, PodConfig, PodPhase};
use sluice_drill::Termination;
use support::{connect, exchange, get, is_refused, request, within};
use tokio::net::TcpStream;
use tokio::time::{sleep, Instant};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_pod_answers_any_method_with_its_name_over_one_connection() {
    let pod = Pod::start_next(PodConfig::new(Termination::Graceful, SECOND))
        .await
        .unwrap();
    let mut connection = connect(pod.address()).await;
    let (status, body) = exchange(&mut connection, get()).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, format!("{} at {}\n", pod.name(), pod.address()));
    let upload = request("POST", Bytes::from(vec![b'x'; 64]));
    let (status, again) = exchange(&mut connection, upload).await.unwrap();
    assert_eq!((status, again), (200, body), "same pod, same connection");
}

#[tokio::test]
async fn a_graceful_pod_serves_on_then_finishes_its_requests_and_refuses_connections() {
    let mut config = PodConfig::new(Termination::Graceful, Duration::from_millis(300));
    config.service_time = Duration::from_millis(500);
    let pod = Pod::start_next(config).await.unwrap();
    let mut busy = connect(pod.address()).await;
    let in_flight = tokio::spawn(async move { exchange(&mut busy, get()).await });
    sleep(Duration::from_millis(50)).await;

    let signalled = Instant::now();
    pod.terminate();
    sleep(Duration::from_millis(100)).await;
    assert!(
        TcpStream::connect(pod.address()).await.is_ok(),
        "still accepting during preStop"
    );

    listener_closed(&pod).await;
    assert!(
        signalled.elapsed() >= Duration::from_millis(300),
        "closed before its preStop ended"
    );
    assert_refused(&pod).await;

    let (status, body) = in_flight
        .await
        .unwrap()
        .expect("the request in flight is answered");
    assert_eq!(status, 200);
    assert!(body.ends_with(&format!("at {}\n", pod.address())), "{body}");
    within(SECOND, "exiting", pod.reached(PodPhase::Exited)).await;
}

#[tokio::test]
async fn an_abrupt_pod_refuses_at_once_closes_idle_connections_and_drops_unanswered_requests() {
    let mut config = PodConfig::new(Termination::Abrupt, SECOND);
    config.service_time = Duration::from_millis(200);
    let pod = Pod::start_next(config).await.unwrap();
    let mut idle = connect(pod.address()).await;
    assert_eq!(exchange(&mut idle, get()).await.unwrap().0, 200);
    let mut busy = connect(pod.address()).await;
    let unanswered = tokio::spawn(async move { exchange(&mut busy, get()).await });
    sleep(Duration::from_millis(50)).await;

    let signalled = Instant::now();
    pod.terminate();
    listener_closed(&pod).await;
    assert!(
        signalled.elapsed() < Duration::from_millis(50),
        "abrupt must close at once"
    );
    assert_refused(&pod).await;

    within(
        Duration::from_millis(100),
        "closing the idle connection",
        idle.driver,
    )
    .await
    .unwrap();
    let outcome = unanswered.await.unwrap();
    assert!(
        outcome.is_err(),
        "a request still being processed gets no answer: {outcome:?}"
    );
    within(SECOND, "exiting", pod.reached(PodPhase::Exited)).await;
}

#[tokio::test]
async fn an_abrupt_pod_finishes_a_response_it_is_writing() {
    let mut config = PodConfig::new(Termination::Abrupt, SECOND);
    config.chunk_gap = Duration::from_millis(300);
    let pod = Pod::start_next(config).await.unwrap();
    let mut connection = connect(pod.address()).await;
    let response = connection.sender.send_request(get()).await.unwrap();
    pod.terminate();
    listener_closed(&pod).await;
    let body = http_body_util::BodyExt::collect(response.into_body()).await;
    assert!(body.is_ok(), "the body being written completes: {body:?}");
    within(SECOND, "closing the connection", connection.driver)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_crashing_pod_cuts_a_response_mid_body_and_refuses_connections() {
    let mut config = PodConfig::new(Termination::Crash, SECOND);
    config.chunk_gap = Duration::from_millis(300);
    let pod = Pod::start_next(config).await.unwrap();
    let mut connection = connect(pod.address()).await;
    let response = connection.sender.send_request(get()).await.unwrap();
    assert_eq!(response.status(), 200);
    pod.terminate();
    within(SECOND, "dying", pod.reached(PodPhase::Exited)).await;
    let body = http_body_util::BodyExt::collect(response.into_body()).await;
    let error = body.expect_err("the response must be cut off");
    assert!(
        is_reset(&error),
        "SO_LINGER 0 must make it a RST: {error:?}"
    );
    assert_refused(&pod).await;
}

/// Waits up to a second for the pod to close its listener.
async fn listener_closed(pod: &Pod) {
    within(
        SECOND,
        "closing the listener",
        pod.reached(PodPhase::ListenerClosed),
    )
    .await;
}

/// Asserts the pod's address refuses connections (its listener is really closed).
async fn assert_refused(pod: &Pod) {
    assert!(
        is_refused(TcpStream::connect(pod.address()).await),
        "connect must be refused"
    );
}

/// Whether `error` comes from a TCP reset.
fn is_reset(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionReset;
        }
        cause = current.source();
    }
    false
}
