//! The admin listener: liveness, readiness and the route table with its diagnostics as JSON.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Serialize;
use sluice_config::Diagnostic;
use sluice_routing::TableView;

use crate::control::ControlPlane;

/// `GET /api/routes`: the table and every diagnostic.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RoutesResponse<'a> {
    generation: u64,
    #[serde(flatten)]
    table: TableView,
    diagnostics: &'a [Diagnostic],
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
        "/readyz" if control.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no configuration published yet\n",
        ),
        "/api/routes" => routes(&control),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /healthz, /readyz or /api/routes\n",
        ),
    }
}

fn routes(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    let body = RoutesResponse {
        generation: status.generation,
        table: TableView::of(&control.table().load()),
        diagnostics: &status.diagnostics,
    };
    match serde_json::to_vec_pretty(&body) {
        Ok(json) => {
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response.headers_mut().insert(
                CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render routes: {error}\n"),
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
