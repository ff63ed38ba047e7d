//! The admin listener: liveness, readiness, metrics, and the route table and control-plane status as JSON.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Serialize;
use sluice_config::{Diagnostic, Severity};
use sluice_routing::TableView;
use sluice_sources::kubernetes::WatchReport;

use crate::control::{Activity, ControlPlane};

/// `GET /api/routes`: the table and every diagnostic.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RoutesResponse<'a> {
    generation: u64,
    #[serde(flatten)]
    table: TableView,
    diagnostics: &'a [Diagnostic],
}

/// `GET /api/status`: readiness, the watches' states and the latest compile and propagation.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusResponse {
    ready: bool,
    draining: bool,
    generation: u64,
    /// `null` when serving from a manifest directory.
    watches: Option<Vec<WatchReport>>,
    #[serde(flatten)]
    activity: Activity,
    errors: usize,
    warnings: usize,
}

/// Answers one admin request.
pub async fn handle(
    control: Arc<ControlPlane>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match request.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if control.is_draining() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down, requests are still served\n",
        ),
        "/readyz" if control.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no configuration published yet\n",
        ),
        "/api/routes" => routes(&control),
        "/api/status" => status(&control),
        "/metrics" => metrics(&control),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /healthz, /readyz, /metrics, /api/routes or /api/status\n",
        ),
    }
}

fn routes(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    json(&RoutesResponse {
        generation: status.generation,
        table: TableView::of(&control.table().load()),
        diagnostics: &status.diagnostics,
    })
}

fn status(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    let count = |severity| {
        status
            .diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    };
    json(&StatusResponse {
        ready: control.is_ready(),
        draining: control.is_draining(),
        generation: status.generation,
        watches: control.watch_reports(),
        activity: control.activity(),
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
    })
}

fn metrics(control: &ControlPlane) -> Response<Full<Bytes>> {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    with_type(
        Bytes::from(control.metrics().encode()),
        StatusCode::OK,
        content_type,
    )
}

fn json(body: &impl Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(body) {
        Ok(json) => with_type(Bytes::from(json), StatusCode::OK, "application/json"),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render JSON: {error}\n"),
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    with_type(
        Bytes::copy_from_slice(body.as_bytes()),
        status,
        "text/plain; charset=utf-8",
    )
}

fn with_type(body: Bytes, status: StatusCode, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
