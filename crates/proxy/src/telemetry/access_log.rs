//! The access log: one line per answered request, as JSON or as nginx's combined format with sluice's fields appended, written by its own thread through a bounded queue that drops (and counts) rather than block a request.

use std::io::Write;
use std::net::IpAddr;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::uri::PathAndQuery;
use http::{HeaderValue, Method};
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use sluice_routing::Endpoint;

/// How lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// One JSON object per line.
    Json,
    /// nginx's `combined` format, then sluice's fields (see [`write_combined`]).
    Combined,
}

/// Lines the queue holds before it drops.
pub const DEFAULT_ACCESS_LOG_QUEUE: usize = 16 * 1024;

/// The sending side of the access log, shared by every connection.
#[derive(Debug)]
pub struct AccessLog {
    queue: SyncSender<AccessRecord>,
    dropped: Counter,
}

impl AccessLog {
    /// Starts the writer thread, which writes to `output` in `format`, in batches (see
    /// [`BATCH_INTERVAL`]). `dropped` counts lines lost to a full queue.
    pub fn start(
        format: AccessLogFormat,
        output: Box<dyn Write + Send>,
        queue: usize,
        dropped: Counter,
    ) -> std::io::Result<Arc<Self>> {
        let (sender, receiver) = sync_channel(queue.max(1));
        std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || write_lines(&receiver, format, output))?;
        Ok(Arc::new(Self {
            queue: sender,
            dropped,
        }))
    }

    /// Queues `record` without waiting; a full queue drops it and counts the drop.
    pub(crate) fn push(&self, record: AccessRecord) {
        match self.queue.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.inc();
            }
        }
    }
}

/// How long the writer waits before it takes the next batch while lines keep coming. Waiting
/// rather than blocking on the queue means a request never has to wake the writer: under load
/// the writer takes a batch every interval and writes it with one system call per 64 KiB, and
/// a line reaches the file within about this long.
const BATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Writes queued records in batches until every sender is gone.
fn write_lines(
    receiver: &Receiver<AccessRecord>,
    format: AccessLogFormat,
    output: Box<dyn Write + Send>,
) {
    let mut output = std::io::BufWriter::with_capacity(64 * 1024, output);
    let mut line = Vec::with_capacity(512);
    // Idle: block until a line comes (the one wake-up a burst costs).
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        loop {
            while let Some(record) = next {
                if write_line(&mut output, &mut line, format, &record).is_err() {
                    return;
                }
                next = receiver.try_recv().ok();
            }
            if output.flush().is_err() {
                return;
            }
            std::thread::sleep(BATCH_INTERVAL);
            match receiver.try_recv() {
                Ok(record) => next = Some(record),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            }
        }
    }
}

fn write_line(
    output: &mut impl Write,
    line: &mut Vec<u8>,
    format: AccessLogFormat,
    record: &AccessRecord,
) -> std::io::Result<()> {
    line.clear();
    match format {
        AccessLogFormat::Json => {
            if serde_json::to_writer(&mut *line, &record.json()).is_err() {
                line.clear();
            }
        }
        AccessLogFormat::Combined => write_combined(line, record),
    }
    line.push(b'\n');
    output.write_all(line)
}

/// What one request leaves in the access log.
#[derive(Debug)]
pub(crate) struct AccessRecord {
    pub(crate) time: SystemTime,
    /// After trusted-proxy resolution.
    pub(crate) client: IpAddr,
    pub(crate) method: Method,
    pub(crate) host: HeaderValue,
    pub(crate) target: Option<PathAndQuery>,
    pub(crate) protocol: &'static str,
    pub(crate) status: u16,
    pub(crate) request_bytes: u64,
    pub(crate) response_bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) upstream: Option<Endpoint>,
    pub(crate) upstream_status: Option<u16>,
    pub(crate) attempts: u32,
    /// `namespace/name` of the Ingress; empty when no route matched.
    pub(crate) route: Box<str>,
    pub(crate) request_id: HeaderValue,
    pub(crate) user_agent: Option<HeaderValue>,
    pub(crate) referer: Option<HeaderValue>,
    pub(crate) tls_version: Option<&'static str>,
    pub(crate) sni: Option<Box<str>>,
    /// The request's trace, when it is traced.
    pub(crate) trace_id: Option<opentelemetry::trace::TraceId>,
}

/// The JSON line's fields, named as in docs/observability.md.
#[derive(Serialize)]
struct JsonLine<'r> {
    time: String,
    client: IpAddr,
    method: &'r str,
    host: &'r str,
    path: &'r str,
    protocol: &'static str,
    status: u16,
    request_bytes: u64,
    response_bytes: u64,
    duration_seconds: f64,
    upstream: Option<&'r str>,
    upstream_status: Option<u16>,
    attempts: u32,
    route: Option<&'r str>,
    request_id: &'r str,
    user_agent: Option<&'r str>,
    referer: Option<&'r str>,
    tls_version: Option<&'static str>,
    sni: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
}

impl AccessRecord {
    /// What the request's head says; the rest is filled in by the log phase.
    pub(crate) fn begin<B>(request: &http::Request<B>, client: IpAddr) -> Self {
        let header = |name| request.headers().get(name).cloned();
        Self {
            time: SystemTime::now(),
            client,
            method: request.method().clone(),
            host: HeaderValue::from_static(""),
            target: request.uri().path_and_query().cloned(),
            protocol: crate::telemetry::protocol(request.version()),
            status: 0,
            request_bytes: 0,
            response_bytes: 0,
            duration: Duration::ZERO,
            upstream: None,
            upstream_status: None,
            attempts: 0,
            route: Box::default(),
            request_id: HeaderValue::from_static(""),
            user_agent: header(http::header::USER_AGENT),
            referer: header(http::header::REFERER),
            tls_version: None,
            sni: None,
            trace_id: None,
        }
    }

    fn json(&self) -> JsonLine<'_> {
        fn text(value: &HeaderValue) -> Option<&str> {
            value.to_str().ok()
        }
        JsonLine {
            time: httpdate_rfc3339(self.time),
            client: self.client,
            method: self.method.as_str(),
            host: text(&self.host).unwrap_or_default(),
            path: self.target.as_ref().map_or("/", PathAndQuery::as_str),
            protocol: self.protocol,
            status: self.status,
            request_bytes: self.request_bytes,
            response_bytes: self.response_bytes,
            duration_seconds: self.duration.as_secs_f64(),
            upstream: self.upstream.as_ref().map(|e| e.authority().as_str()),
            upstream_status: self.upstream_status,
            attempts: self.attempts,
            route: (!self.route.is_empty()).then_some(&*self.route),
            request_id: text(&self.request_id).unwrap_or_default(),
            user_agent: self.user_agent.as_ref().and_then(text),
            referer: self.referer.as_ref().and_then(text),
            tls_version: self.tls_version,
            sni: self.sni.as_deref(),
            trace_id: self.trace_id.map(|id| id.to_string()),
        }
    }
}

/// nginx's `combined` line, then, space-separated: request length, request time in seconds,
/// `[route]`, upstream address, upstream status, attempts, request id, host, TLS version and
/// SNI, each `-` when absent, and the trace id when the request is traced:
///
/// ```text
/// 10.0.0.1 - - [30/Nov/2026:22:11:10 +0000] "GET /a?b=1 HTTP/1.1" 200 12 "-" "curl/8.14.1" 0 0.003 [default/web] 10.1.0.5:8080 200 1 6f1c... demo.local - -
/// ```
pub(crate) fn write_combined(line: &mut Vec<u8>, record: &AccessRecord) {
    let target = record.target.as_ref().map_or("/", PathAndQuery::as_str);
    let _ = write!(
        line,
        "{} - - [{}] \"{} {} {}\" {} {} \"",
        record.client,
        nginx_time(record.time),
        record.method,
        target,
        record.protocol,
        record.status,
        record.response_bytes,
    );
    quoted(line, record.referer.as_ref());
    line.extend_from_slice(b"\" \"");
    quoted(line, record.user_agent.as_ref());
    let _ = write!(
        line,
        "\" {} {:.3} [{}] {} {} {} ",
        record.request_bytes,
        record.duration.as_secs_f64(),
        dash(&record.route),
        record
            .upstream
            .as_ref()
            .map_or("-", |e| e.authority().as_str()),
        record
            .upstream_status
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        record.attempts,
    );
    for value in [&record.request_id, &record.host] {
        match value.to_str() {
            Ok(text) if !text.is_empty() => line.extend_from_slice(escape(text).as_bytes()),
            _ => line.push(b'-'),
        }
        line.push(b' ');
    }
    let _ = write!(
        line,
        "{} {}",
        record.tls_version.unwrap_or("-"),
        record.sni.as_deref().map_or("-", dash)
    );
    if let Some(trace_id) = record.trace_id {
        let _ = write!(line, " {trace_id}");
    }
}

fn dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

/// A header's value inside double quotes, as nginx escapes it (`"` and `\` and bytes outside
/// printable ASCII as `\xHH`); `-` when absent.
fn quoted(line: &mut Vec<u8>, value: Option<&HeaderValue>) {
    match value {
        Some(value) => line.extend_from_slice(escape_bytes(value.as_bytes()).as_bytes()),
        None => line.push(b'-'),
    }
}

fn escape(text: &str) -> String {
    escape_bytes(text.as_bytes())
}

fn escape_bytes(bytes: &[u8]) -> String {
    let mut escaped = String::with_capacity(bytes.len());
    for &byte in bytes {
        match byte {
            b'"' | b'\\' => escaped.push_str(&format!("\\x{byte:02X}")),
            0x20..=0x7e => escaped.push(char::from(byte)),
            _ => escaped.push_str(&format!("\\x{byte:02X}")),
        }
    }
    escaped
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `30/Nov/2026:22:11:10 +0000`, nginx's `$time_local` in UTC.
fn nginx_time(time: SystemTime) -> String {
    let (year, month, day, hour, minute, second, _) = civil(time);
    format!(
        "{day:02}/{}/{year}:{hour:02}:{minute:02}:{second:02} +0000",
        MONTHS[usize::from(month - 1)]
    )
}

/// `2026-11-30T22:11:10.123Z`.
fn httpdate_rfc3339(time: SystemTime) -> String {
    let (year, month, day, hour, minute, second, millis) = civil(time);
    format!("{year}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

/// Year, month (1-12), day, hour, minute, second and millisecond of `time` in UTC.
fn civil(time: SystemTime) -> (i64, u8, u8, u8, u8, u8, u32) {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since.as_secs() as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rest / 3600) as u8,
        (rest % 3600 / 60) as u8,
        (rest % 60) as u8,
        since.subsec_millis(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_formatted_in_utc() {
        // 2026-11-30T22:11:10.250Z
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_076_670_250);
        assert_eq!(nginx_time(time), "30/Nov/2026:22:11:10 +0000");
        assert_eq!(httpdate_rfc3339(time), "2026-11-30T22:11:10.250Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(httpdate_rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_traced_requests_trace_id_ends_the_combined_line_and_is_in_the_json() {
        let request = http::Request::get("/a").body(()).unwrap_or_default();
        let mut record = AccessRecord::begin(&request, IpAddr::from([127, 0, 0, 1]));
        let mut line = Vec::new();
        write_combined(&mut line, &record);
        assert!(String::from_utf8_lossy(&line).ends_with(" - -"));
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        record.trace_id = opentelemetry::trace::TraceId::from_hex(id).ok();
        line.clear();
        write_combined(&mut line, &record);
        assert!(String::from_utf8_lossy(&line).ends_with(&format!(" - - {id}")));
        let json = serde_json::to_value(record.json()).unwrap_or_default();
        assert_eq!(json["trace_id"], id);
    }

    #[test]
    fn quotes_and_control_bytes_are_escaped_as_nginx_does() {
        assert_eq!(escape("a\"b\\c\u{1}"), "a\\x22b\\x5Cc\\x01");
    }
}
