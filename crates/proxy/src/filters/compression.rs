//! Response compression: gzip, Brotli or zstd, as the client's `Accept-Encoding` allows and the route enables, for compressible answers of an endpoint, each chunk flushed as it is coded.
//!
//! What is compressed (nginx's `gzip` and Traefik's `compress` agree on most of it): a
//! response with no `Content-Encoding`, of a text, JSON, JavaScript, XML, SVG or WebAssembly
//! type, of 1024 bytes or more (or of no stated length), not to a `HEAD`, not 1xx, 204 or
//! 304, not a range (no `Content-Range`, and the request asked for none), not marked
//! `Cache-Control: no-transform`; never server-sent events or gRPC. A compressed response
//! loses `Content-Length`, gains `Content-Encoding` and `Vary: Accept-Encoding`, and a strong
//! `ETag` becomes weak. An answer that was compressible but not compressed for this client
//! still gets `Vary`, so a cache keeps the two apart.

use std::io::Write;

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE,
    ETAG, RANGE, VARY,
};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, Method, StatusCode};
use sluice_routing::{Coding, Codings, RoutePolicy};

use super::contract::{Filter, Flow, RequestContext};
use super::services::{boxed, MemoryShare, RouteFilter, Services};
use crate::upstream::response_body::BodyCoding;
use crate::upstream::retry_buffer::{declared_length, is_stream};

/// The smallest response compressed when its length is known (nginx's `gzip_min_length`
/// default is 20; ingress-nginx and Traefik use 1024).
const MIN_LENGTH: u64 = 1024;

/// gzip's level in zlib-rs's scale: 2 does what zlib's level 1 (ingress-nginx's `gzip-level`
/// default) does. zlib-rs's level 1 is a quicker strategy whose output was 36 % larger than
/// nginx's at level 1 for bench/run's 100 KiB JSON (22,514 bytes against 16,565; level 2:
/// 15,071), for 0.6 of level 2's time.
const GZIP_LEVEL: u32 = 2;
/// Brotli's quality: 4 costs about what gzip at 6 does and compresses better.
const BROTLI_QUALITY: u32 = 4;
/// Brotli's window: 512 KiB, enough for answers a proxy compresses.
const BROTLI_WINDOW_LOG: u32 = 19;
/// zstd's level: its default, fast.
const ZSTD_LEVEL: i32 = 3;
/// zstd's window: 512 KiB, as Brotli's.
const ZSTD_WINDOW_LOG: u32 = 19;

/// What one compressing stream is counted as holding against the proxy-wide budget: an
/// estimate from the codings' documented state sizes at these settings (zlib's 256 KiB
/// deflate state; Brotli's and zstd's 512 KiB windows with their tables), not a measurement.
fn memory(coding: Coding) -> usize {
    match coding {
        Coding::Gzip => 320 << 10,
        Coding::Brotli | Coding::Zstd => 2 << 20,
    }
}

/// The route's compression: the codings it may use.
pub(crate) struct Compress {
    codings: Codings,
}

impl Compress {
    /// The filter of a route that compresses: its own codings, or the proxy's default.
    pub(crate) fn of(policy: &RoutePolicy, default: Codings) -> Option<RouteFilter> {
        let codings = policy.compression.resolve(default);
        if codings.is_empty() {
            return None;
        }
        boxed(Self { codings })
    }
}

/// What the request allows, kept for the response: the coding chosen, and whether the
/// request may get a compressed answer at all (not `HEAD`, no `Range`).
struct Negotiated {
    coding: Option<Coding>,
    allowed: bool,
}

impl Filter<Services> for Compress {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        let allowed = request.method != Method::HEAD && !request.headers.contains_key(RANGE);
        context.slots.insert(Negotiated {
            coding: negotiate(&request.headers, self.codings),
            allowed,
        });
        Ok(())
    }

    fn on_response_body(
        &self,
        context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        services: &Services,
    ) -> Option<Box<dyn BodyCoding>> {
        let negotiated = context.slots.take::<Negotiated>()?;
        if !compressible(response) {
            return None;
        }
        add_vary(&mut response.headers);
        let coding = negotiated.coding.filter(|_| negotiated.allowed)?;
        let share = services.compression_budget.take(memory(coding))?;
        let length = declared_length(&response.headers);
        let coder = Coder::new(coding, length, share).ok()?;
        let headers = &mut response.headers;
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
        headers.remove(CONTENT_LENGTH);
        weaken_etag(headers);
        Some(Box::new(coder))
    }
}

/// The coding the client prefers among `enabled`: the highest `q` above 0, zstd before
/// Brotli before gzip at equal `q`. A coding the client does not name takes the `q` of `*`,
/// or is not acceptable; `x-gzip` names gzip (RFC 9110 §12.5.3).
fn negotiate(headers: &HeaderMap, enabled: Codings) -> Option<Coding> {
    let mut named: [Option<f32>; 3] = [None; 3];
    let mut any = None;
    let slot = |coding: Coding| Coding::PREFERENCE.iter().position(|c| *c == coding);
    for value in headers.get_all(ACCEPT_ENCODING) {
        let Ok(text) = value.to_str() else {
            continue;
        };
        for item in text.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let q = parts
                .filter_map(|param| {
                    let (key, value) = param.split_once('=')?;
                    key.trim().eq_ignore_ascii_case("q").then(|| value.trim())
                })
                .next()
                .map_or(Some(1.0), |q| {
                    q.parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q))
                });
            let Some(q) = q else {
                continue;
            };
            let is = |token: &str| name.eq_ignore_ascii_case(token);
            let coding = match () {
                () if is("gzip") || is("x-gzip") => Coding::Gzip,
                () if is("br") => Coding::Brotli,
                () if is("zstd") => Coding::Zstd,
                () if name == "*" => {
                    any = Some(q);
                    continue;
                }
                () => continue,
            };
            if let Some(at) = slot(coding) {
                named[at] = Some(q);
            }
        }
    }
    let mut best: Option<(Coding, f32)> = None;
    for (at, coding) in Coding::PREFERENCE.into_iter().enumerate() {
        let q = named[at].or(any).unwrap_or(0.0);
        if enabled.has(coding) && q > 0.0 && best.is_none_or(|(_, best_q)| q > best_q) {
            best = Some((coding, q));
        }
    }
    best.map(|(coding, _)| coding)
}

/// Whether the endpoint's answer is one sluice compresses, whoever asked.
fn compressible(response: &response::Parts) -> bool {
    let status = response.status;
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return false;
    }
    let headers = &response.headers;
    if headers.contains_key(CONTENT_ENCODING) || headers.contains_key(CONTENT_RANGE) {
        return false;
    }
    let no_transform = headers.get_all(CACHE_CONTROL).iter().any(|value| {
        value.to_str().is_ok_and(|text| {
            text.split(',')
                .any(|directive| directive.trim().eq_ignore_ascii_case("no-transform"))
        })
    });
    if no_transform || declared_length(headers).is_some_and(|length| length < MIN_LENGTH) {
        return false;
    }
    headers.get(CONTENT_TYPE).is_some_and(compressible_type)
}

/// Text, JSON, JavaScript, XML, SVG and WebAssembly, and any `+json` or `+xml` type; never
/// the streams the retry buffer never holds either (server-sent events, whose events must
/// reach the client when sent, and gRPC).
fn compressible_type(content_type: &HeaderValue) -> bool {
    if is_stream(Some(content_type)) {
        return false;
    }
    let Ok(text) = content_type.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or_default().trim();
    let is = |name: &str| essence.eq_ignore_ascii_case(name);
    let ends = |suffix: &str| {
        let at = essence.len().saturating_sub(suffix.len());
        essence
            .get(at..)
            .is_some_and(|end| end.eq_ignore_ascii_case(suffix))
    };
    essence
        .get(..5)
        .is_some_and(|start| start.eq_ignore_ascii_case("text/"))
        || [
            "application/json",
            "application/javascript",
            "application/x-javascript",
            "application/xml",
            "image/svg+xml",
            "application/wasm",
        ]
        .into_iter()
        .any(is)
        || ends("+json")
        || ends("+xml")
}

/// Adds `Accept-Encoding` to `Vary`, into the existing value when there is one (unless it
/// already names it, or is `*`).
fn add_vary(headers: &mut HeaderMap) {
    let existing: Vec<String> = headers
        .get_all(VARY)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .map(str::to_owned)
        .collect();
    let named = existing
        .iter()
        .flat_map(|value| value.split(','))
        .any(|name| {
            let name = name.trim();
            name == "*" || name.eq_ignore_ascii_case("accept-encoding")
        });
    if named {
        return;
    }
    let merged = match existing.is_empty() {
        true => "Accept-Encoding".to_owned(),
        false => format!("{}, Accept-Encoding", existing.join(", ")),
    };
    if let Ok(value) = HeaderValue::from_str(&merged) {
        headers.insert(VARY, value);
    }
}

/// A strong `ETag` made weak: the coded bytes are not the ones the tag names.
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(tag) = headers.get(ETAG) else {
        return;
    };
    if tag.as_bytes().starts_with(b"W/") {
        return;
    }
    let mut weak = b"W/".to_vec();
    weak.extend_from_slice(tag.as_bytes());
    if let Ok(value) = HeaderValue::from_bytes(&weak) {
        headers.insert(ETAG, value);
    }
}

/// One response's compressor, writing into a buffer that each chunk empties.
enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    /// `None` once finished (Brotli ends by giving its writer up).
    Brotli(Option<Box<brotli::CompressorWriter<Vec<u8>>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// A compressor and its share of the proxy-wide budget.
struct Coder {
    encoder: Encoder,
    _share: MemoryShare,
}

impl Coder {
    fn new(coding: Coding, length: Option<u64>, share: MemoryShare) -> std::io::Result<Self> {
        let encoder = match coding {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(GZIP_LEVEL),
            )),
            Coding::Brotli => Encoder::Brotli(Some(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                BROTLI_QUALITY,
                BROTLI_WINDOW_LOG,
            )))),
            Coding::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
                encoder.window_log(ZSTD_WINDOW_LOG)?;
                encoder.set_pledged_src_size(length)?;
                Encoder::Zstd(encoder)
            }
        };
        Ok(Self {
            encoder,
            _share: share,
        })
    }
}

impl BodyCoding for Coder {
    fn code(&mut self, chunk: &[u8]) -> std::io::Result<Bytes> {
        let buffer = match &mut self.encoder {
            Encoder::Gzip(encoder) => {
                encoder.write_all(chunk)?;
                encoder.flush()?;
                encoder.get_mut()
            }
            Encoder::Brotli(Some(encoder)) => {
                encoder.write_all(chunk)?;
                encoder.flush()?;
                encoder.get_mut()
            }
            Encoder::Brotli(None) => return Ok(Bytes::new()),
            Encoder::Zstd(encoder) => {
                encoder.write_all(chunk)?;
                encoder.flush()?;
                encoder.get_mut()
            }
        };
        Ok(Bytes::from(std::mem::take(buffer)))
    }

    fn finish(&mut self) -> std::io::Result<Bytes> {
        let tail = match &mut self.encoder {
            Encoder::Gzip(encoder) => {
                encoder.try_finish()?;
                std::mem::take(encoder.get_mut())
            }
            Encoder::Brotli(encoder) => match encoder.take() {
                Some(encoder) => encoder.into_inner(),
                None => Vec::new(),
            },
            Encoder::Zstd(encoder) => {
                encoder.do_finish()?;
                std::mem::take(encoder.get_mut())
            }
        };
        Ok(Bytes::from(tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn accepting(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT_ENCODING,
            HeaderValue::from_str(value).expect("value"),
        );
        headers
    }

    #[test]
    fn the_highest_q_wins_and_ties_go_to_zstd_then_br_then_gzip() {
        let all = Codings::ALL;
        let cases = [
            ("gzip", Some(Coding::Gzip)),
            ("gzip, deflate, br", Some(Coding::Brotli)),
            ("gzip, deflate, br, zstd", Some(Coding::Zstd)),
            ("br;q=0.5, gzip;q=0.8", Some(Coding::Gzip)),
            ("zstd;q=0, br;q=0, gzip;q=0", None),
            ("*", Some(Coding::Zstd)),
            ("*;q=0.5, gzip", Some(Coding::Gzip)),
            ("*, zstd;q=0", Some(Coding::Brotli)),
            ("identity", None),
            ("x-gzip", Some(Coding::Gzip)),
            ("GZIP;Q=1.0", Some(Coding::Gzip)),
            ("gzip;q=2", None),
            ("", None),
        ];
        for (header, expected) in cases {
            assert_eq!(negotiate(&accepting(header), all), expected, "{header:?}");
        }
        let gzip_only = Codings::NONE.with(Coding::Gzip);
        assert_eq!(negotiate(&accepting("zstd, br"), gzip_only), None);
        assert_eq!(
            negotiate(&accepting("zstd, gzip;q=0.1"), gzip_only),
            Some(Coding::Gzip)
        );
        assert_eq!(negotiate(&HeaderMap::new(), Codings::ALL), None);
    }

    fn head(status: u16, headers: &[(&str, &str)]) -> response::Parts {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("response").into_parts().0
    }

    #[test]
    fn only_compressible_answers_are_compressed() {
        let json = ("content-type", "application/json; charset=utf-8");
        assert!(compressible(&head(200, &[json])));
        assert!(compressible(&head(
            200,
            &[json, ("content-length", "1024")]
        )));
        assert!(!compressible(&head(
            200,
            &[json, ("content-length", "1023")]
        )));
        assert!(!compressible(&head(204, &[json])));
        assert!(!compressible(&head(304, &[json])));
        assert!(!compressible(&head(
            206,
            &[json, ("content-range", "bytes 0-9/99")]
        )));
        assert!(!compressible(&head(
            200,
            &[json, ("content-encoding", "gzip")]
        )));
        assert!(!compressible(&head(
            200,
            &[json, ("cache-control", "public, no-transform")]
        )));
        assert!(!compressible(&head(200, &[("content-type", "image/png")])));
        assert!(!compressible(&head(200, &[])));
        for essence in [
            "text/html",
            "application/javascript",
            "application/xml",
            "image/svg+xml",
            "application/wasm",
            "application/problem+json",
            "application/atom+xml",
            "Text/HTML; charset=utf-8",
            "Application/Problem+JSON",
        ] {
            assert!(
                compressible_type(&HeaderValue::from_static(essence)),
                "{essence}"
            );
        }
        for essence in [
            "text/event-stream",
            "application/grpc",
            "application/grpc+proto",
            "application/octet-stream",
            "video/mp4",
            "Text/Event-Stream; charset=utf-8",
            "application/jsonx",
        ] {
            assert!(
                !compressible_type(&HeaderValue::from_static(essence)),
                "{essence}"
            );
        }
    }

    #[test]
    fn vary_is_merged_and_strong_etags_are_weakened() {
        let mut headers = HeaderMap::new();
        add_vary(&mut headers);
        assert_eq!(headers[VARY], "Accept-Encoding");
        add_vary(&mut headers);
        assert_eq!(headers.get_all(VARY).iter().count(), 1);
        let mut headers = HeaderMap::new();
        headers.append(VARY, HeaderValue::from_static("Origin"));
        headers.append(VARY, HeaderValue::from_static("Cookie"));
        add_vary(&mut headers);
        assert_eq!(headers[VARY], "Origin, Cookie, Accept-Encoding");
        let mut headers = HeaderMap::new();
        headers.insert(VARY, HeaderValue::from_static("*"));
        add_vary(&mut headers);
        assert_eq!(headers[VARY], "*");

        let mut headers = HeaderMap::new();
        headers.insert(ETAG, HeaderValue::from_static("\"abc\""));
        weaken_etag(&mut headers);
        assert_eq!(headers[ETAG], "W/\"abc\"");
        weaken_etag(&mut headers);
        assert_eq!(headers[ETAG], "W/\"abc\"");
    }

    /// Codes `chunks` with `coding` and returns the whole coded body.
    fn code_all(coding: Coding, chunks: &[&[u8]]) -> Vec<u8> {
        let budget = super::super::services::MemoryBudget::new(8 << 20);
        let share = budget.take(memory(coding)).expect("budget");
        let mut coder = Coder::new(coding, None, share).expect("coder");
        let mut coded = Vec::new();
        for chunk in chunks {
            coded.extend_from_slice(&coder.code(chunk).expect("code"));
        }
        coded.extend_from_slice(&coder.finish().expect("finish"));
        coded
    }

    fn decode(coding: Coding, coded: &[u8]) -> Vec<u8> {
        let mut plain = Vec::new();
        match coding {
            Coding::Gzip => flate2::read::GzDecoder::new(coded)
                .read_to_end(&mut plain)
                .map(|_| ()),
            Coding::Brotli => brotli::Decompressor::new(coded, 4096)
                .read_to_end(&mut plain)
                .map(|_| ()),
            Coding::Zstd => zstd::stream::read::Decoder::new(coded)
                .and_then(|mut decoder| decoder.read_to_end(&mut plain))
                .map(|_| ()),
        }
        .expect("decodes");
        plain
    }

    #[test]
    fn every_coding_round_trips_and_gives_its_memory_back() {
        let text = "{\"name\": \"sluice\", \"items\": [1, 2, 3]}\n".repeat(200);
        for coding in Coding::PREFERENCE {
            let coded = code_all(coding, &[text.as_bytes(), b"tail\n"]);
            assert!(coded.len() < text.len() / 4, "{coding:?}: {}", coded.len());
            let plain = decode(coding, &coded);
            assert_eq!(plain, [text.as_bytes(), b"tail\n"].concat(), "{coding:?}");
        }
        let budget = super::super::services::MemoryBudget::new(memory(Coding::Zstd));
        let share = budget.take(memory(Coding::Zstd));
        assert!(share.is_some());
        assert!(budget.take(1).is_none(), "the budget is spent");
        drop(share);
        assert!(
            budget.take(memory(Coding::Zstd)).is_some(),
            "and given back"
        );
    }
}
