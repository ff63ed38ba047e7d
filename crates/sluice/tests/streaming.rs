//! End-to-end: 100 MB up and 100 MB down through sluice, streamed, with sluice's memory staying small.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use http_body_util::{BodyExt, Either};
use sluice_testkit::{http_client, EchoBackend, PatternBody};
use support::{pod_ip, write_catch_all, Sluice};

const SIZE: u64 = 100 * 1024 * 1024;
const RSS_LIMIT: u64 = 50 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_100_mb_each_way_without_buffering() {
    let pod = EchoBackend::start("bulk", pod_ip(90)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "bulk", &[pod.addr()]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();

    let upload = http::Request::post(sluice.url("/__testkit/upload"))
        .header("host", "bulk.test")
        .body(Either::Right(PatternBody::new(SIZE)))
        .unwrap();
    let response = client.request(upload).await.unwrap();
    assert_eq!(response.status(), 200);
    let received = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&received).trim(),
        SIZE.to_string(),
        "the backend must receive every byte"
    );

    let download = http::Request::get(sluice.url(&format!("/__testkit/bytes/{SIZE}")))
        .header("host", "bulk.test")
        .body(Either::Left(Default::default()))
        .unwrap();
    let response = client.request(download).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut downloaded = 0u64;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.unwrap().data_ref() {
            downloaded += data.len() as u64;
        }
    }
    assert_eq!(downloaded, SIZE, "the client must receive every byte");

    let peak = sluice.peak_rss();
    eprintln!(
        "sluice peak RSS after 2 x 100 MB: {:.1} MiB",
        peak as f64 / (1024.0 * 1024.0)
    );
    assert!(
        peak < RSS_LIMIT,
        "sluice peaked at {} MiB of RSS; bodies must stream, not buffer",
        peak / (1024 * 1024)
    );
}
