//! The end of the log phase: once a response's last byte has gone out (or the client left), the request is measured into its route's metrics and handed to the access log.

use std::sync::Arc;
use std::time::Instant;

use http::StatusCode;

use crate::telemetry::access_log::{AccessLog, AccessRecord};
use crate::telemetry::trace::RequestTrace;
use crate::telemetry::{Measured, RouteMetrics};

/// What a request still has to record when its response ends.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) started: Instant,
    pub(crate) method: &'static str,
    pub(crate) status: StatusCode,
    pub(crate) request_bytes: u64,
    pub(crate) route: Arc<RouteMetrics>,
    /// The access-log line, with its sizes and duration still to fill in; `None` when the
    /// access log is off.
    pub(crate) log: Option<Box<(Arc<AccessLog>, AccessRecord)>>,
    /// Places the request holds until its response ends (under `limit-connections` and
    /// Traefik's `inFlightReq`).
    pub(crate) held: Vec<Box<dyn std::any::Any + Send + Sync>>,
    /// The request's span, ended with the response (or when the client leaves).
    pub(crate) trace: Option<RequestTrace>,
}

impl Completion {
    /// The response ended after `response_bytes` body bytes. (A completion dropped without
    /// finishing, when the client left, gives its `limit-connections` place back too.)
    pub(crate) fn finish(self, response_bytes: u64) {
        // The response has ended: the client may use its place for another request.
        drop(self.held);
        let duration = self.started.elapsed();
        self.route.record(
            self.method,
            &Measured {
                status: self.status,
                request_bytes: self.request_bytes,
                response_bytes,
                duration,
            },
        );
        if let Some(trace) = self.trace {
            trace.finish();
        }
        if let Some(log) = self.log {
            let (sink, mut record) = *log;
            record.response_bytes = response_bytes;
            record.request_bytes = self.request_bytes;
            record.duration = duration;
            sink.push(record);
        }
    }
}

/// A request body's declared length (0 when it declares none).
pub(crate) fn declared_length(headers: &http::HeaderMap) -> u64 {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}
