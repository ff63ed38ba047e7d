//! HTTP routing: discovery, the resource endpoints with Kubernetes semantics, and the `/__testapi/` fault controls.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::body::ResponseBody;
use crate::discovery;
use crate::error::TestApiError;
use crate::resources::{self, NAMESPACES, RESOURCES};
use crate::selector::{FieldSelector, LabelSelector, Selectors};
use crate::state::{Interrupt, Outage, RecordedRequest, Shared};
use crate::store::{PatchKind, Subresource};
use crate::watch::{self, WatchSpec, WatchStart};

/// How long a deleted namespace stays Terminating before it and its contents are removed.
const NAMESPACE_CLEANUP_DELAY: Duration = Duration::from_millis(200);

/// Request bodies larger than this are refused.
const MAX_BODY: usize = 64 << 20;

type ApiResponse = Response<ResponseBody>;

/// Serves one request; every failure becomes a `Status` response.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<ApiResponse, Infallible> {
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    shared.record(RecordedRequest {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().unwrap_or("").to_owned(),
        content_type,
    });
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = match route(shared, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%method, %path, %error, "request failed");
            status_response(&error)
        }
    };
    Ok(response)
}

/// The parsed query string.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        Self(
            query
                .unwrap_or("")
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (percent_decode(key), percent_decode(value))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, TestApiError> {
        match self.get(key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                TestApiError::bad_request(format!("invalid value {text:?} for {key}"))
            }),
        }
    }

    fn selectors(&self) -> Result<Selectors, TestApiError> {
        Ok(Selectors {
            labels: LabelSelector::parse(self.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(self.get("fieldSelector").unwrap_or(""))?,
        })
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn route(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<ApiResponse, TestApiError> {
    let path = request.uri().path().to_owned();
    let query = Query::parse(request.uri().query());
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let method = request.method().clone();
    let get_only = |value: Option<Value>| -> Result<ApiResponse, TestApiError> {
        if method != Method::GET {
            return Err(method_not_allowed(&method));
        }
        value
            .map(|v| json_response(StatusCode::OK, &v))
            .ok_or_else(not_found_path)
    };
    match segments.as_slice() {
        ["version"] => get_only(Some(discovery::version())),
        ["healthz" | "livez" | "readyz", ..] => Ok(text_response(StatusCode::OK, "ok")),
        ["api"] => get_only(Some(discovery::api_versions(&shared.addr.to_string()))),
        ["apis"] => get_only(Some(discovery::group_list())),
        ["apis", group] => get_only(discovery::group(group)),
        ["api", "v1"] => get_only(resources::api_resource_list(
            "",
            "v1",
            &shared.options.undiscovered_kinds,
        )),
        ["apis", group, version] => get_only(resources::api_resource_list(
            group,
            version,
            &shared.options.undiscovered_kinds,
        )),
        ["openapi", "v2"] if method == Method::GET => {
            let accept = request
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if accept.contains("protobuf") {
                let mut response =
                    Response::new(ResponseBody::full(discovery::openapi_v2_protobuf()));
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(discovery::OPENAPI_V2_PROTOBUF),
                );
                Ok(response)
            } else {
                Ok(json_response(StatusCode::OK, &discovery::openapi_v2_json()))
            }
        }
        ["openapi", "v3"] => get_only(Some(discovery::openapi_root())),
        ["openapi", "v3", rest @ ..] => get_only(discovery::openapi_group_version(&rest.join("/"))),
        ["__testapi", action] => control(&shared, action, &method, &query, request).await,
        ["api", "v1", rest @ ..] => {
            let target = Target::parse("", "v1", rest)?;
            resource(shared, target, query, request).await
        }
        ["apis", group, version, rest @ ..] => {
            let target = Target::parse(group, version, rest)?;
            resource(shared, target, query, request).await
        }
        _ => Err(not_found_path()),
    }
}

/// What a resource URL addresses.
#[derive(Debug)]
struct Target {
    res: usize,
    /// `None` for cluster-scoped types and all-namespaces requests.
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

impl Target {
    fn parse(group: &str, version: &str, rest: &[&str]) -> Result<Self, TestApiError> {
        let namespaced = match rest {
            ["namespaces", namespace, plural, tail @ ..] => {
                resources::by_plural(group, version, plural)
                    .filter(|&res| RESOURCES[res].namespaced)
                    .map(|res| (res, Some((*namespace).to_owned()), tail))
            }
            _ => None,
        };
        let (res, namespace, tail) = match namespaced {
            Some(found) => found,
            None => match rest {
                [plural, tail @ ..] => {
                    let res =
                        resources::by_plural(group, version, plural).ok_or_else(not_found_path)?;
                    (res, None, tail)
                }
                [] => return Err(not_found_path()),
            },
        };
        let (name, status) = match tail {
            [] => (None, false),
            [name] => (Some((*name).to_owned()), false),
            [name, "status"] if RESOURCES[res].status_subresource => {
                (Some((*name).to_owned()), true)
            }
            _ => return Err(not_found_path()),
        };
        if RESOURCES[res].namespaced && namespace.is_none() && name.is_some() {
            return Err(not_found_path());
        }
        Ok(Self {
            res,
            namespace,
            name,
            status,
        })
    }
}

async fn resource(
    shared: Arc<Shared>,
    target: Target,
    query: Query,
    request: Request<Incoming>,
) -> Result<ApiResponse, TestApiError> {
    let method = request.method().clone();
    let manager = field_manager(&query, &request);
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let wants_table = request
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("as=Table"));
    let res = target.res;
    let r = &RESOURCES[res];
    let namespace = target.namespace.clone().unwrap_or_default();
    let subresource = if target.status {
        Subresource::Status
    } else {
        Subresource::Main
    };
    let Some(name) = target.name.clone() else {
        return match method {
            Method::GET if query.flag("watch") => watch_collection(shared, &target, &query),
            Method::GET => list(&shared, &target, &query, wants_table),
            Method::POST if target.namespace.is_some() || !r.namespaced => {
                let body = read_json(request).await?;
                let created = shared
                    .write(|store| store.create(res, &namespace, body, Some(&manager), true))?;
                Ok(json_response(StatusCode::CREATED, &created))
            }
            Method::DELETE => {
                let selectors = query.selectors()?;
                let deleted = shared.write(|store| {
                    Ok(store.delete_collection(res, target.namespace.as_deref(), &selectors))
                })?;
                let items: Vec<&Value> = deleted.iter().map(|o| o.as_ref()).collect();
                let rv = shared.read().resource_version();
                Ok(json_response(
                    StatusCode::OK,
                    &list_document(res, &items, rv, None),
                ))
            }
            _ => Err(method_not_allowed(&method)),
        };
    };
    match method {
        Method::GET => {
            let object = shared.read().get(res, &namespace, &name)?;
            if wants_table {
                let rv = shared.read().resource_version();
                return Ok(json_response(
                    StatusCode::OK,
                    &discovery::table(&[&object], rv),
                ));
            }
            Ok(json_response(StatusCode::OK, &object))
        }
        Method::PUT => {
            let body = read_json(request).await?;
            let replaced = shared.write(|store| {
                store.replace(res, &namespace, &name, body, subresource, Some(&manager))
            })?;
            Ok(json_response(StatusCode::OK, &replaced))
        }
        Method::PATCH => {
            let kind = patch_kind(&content_type, query.flag("force"))?;
            let body = read_json(request).await?;
            // Server-side apply needs an explicit fieldManager; other writes default to the
            // user agent.
            let manager = match kind {
                PatchKind::Apply { .. } => query.get("fieldManager").filter(|m| !m.is_empty()),
                _ => Some(manager.as_str()),
            };
            let (patched, existed) = shared.write(|store| {
                let existed = store.get(res, &namespace, &name).is_ok();
                store
                    .patch(res, &namespace, &name, &body, kind, subresource, manager)
                    .map(|patched| (patched, existed))
            })?;
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok(json_response(code, &patched))
        }
        Method::DELETE if !target.status => {
            let options = read_body(request).await?;
            let options: Value = if options.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&options)
                    .map_err(|e| TestApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
            };
            let preconditions = options.get("preconditions").cloned();
            if res == NAMESPACES {
                return terminate_namespace(shared, &name, preconditions.as_ref());
            }
            let deleted = shared
                .write(|store| store.delete(res, &namespace, &name, preconditions.as_ref()))?;
            Ok(json_response(StatusCode::OK, &deleted))
        }
        _ => Err(method_not_allowed(&method)),
    }
}

/// Deletes a namespace the way the API server and the namespace controller do together: it
/// turns Terminating now, and it and its contents are removed shortly after.
fn terminate_namespace(
    shared: Arc<Shared>,
    name: &str,
    preconditions: Option<&Value>,
) -> Result<ApiResponse, TestApiError> {
    let terminating = shared.write(|store| store.terminate_namespace(name, preconditions))?;
    let name = name.to_owned();
    tokio::spawn(async move {
        tokio::time::sleep(NAMESPACE_CLEANUP_DELAY).await;
        let _ = shared.write(|store| store.delete(NAMESPACES, "", &name, None));
    });
    Ok(json_response(StatusCode::OK, &terminating))
}

/// The field manager of a write: the `fieldManager` parameter, else the user agent's product.
fn field_manager(query: &Query, request: &Request<Incoming>) -> String {
    if let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) {
        return manager.to_owned();
    }
    request
        .headers()
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|ua| !ua.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

fn patch_kind(content_type: &str, force: bool) -> Result<PatchKind, TestApiError> {
    let media = content_type.split(';').next().unwrap_or("").trim();
    match media {
        "application/merge-patch+json" => Ok(PatchKind::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            Ok(PatchKind::Apply { force })
        }
        other => Err(TestApiError::api(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"),
        )),
    }
}

fn list(
    shared: &Shared,
    target: &Target,
    query: &Query,
    wants_table: bool,
) -> Result<ApiResponse, TestApiError> {
    let selectors = query.selectors()?;
    let limit = query.number::<usize>("limit")?.filter(|&l| l > 0);
    let token = query.get("continue").filter(|t| !t.is_empty());
    let page = shared.read().list(
        target.res,
        target.namespace.as_deref(),
        &selectors,
        limit,
        token,
    )?;
    shared.list_served();
    let items: Vec<&Value> = page.items.iter().map(|o| o.as_ref()).collect();
    if wants_table {
        let mut table = discovery::table(&items, page.resource_version);
        if let Some(token) = &page.continue_token {
            table["metadata"]["continue"] = json!(token);
        }
        return Ok(json_response(StatusCode::OK, &table));
    }
    let document = list_document(
        target.res,
        &items,
        page.resource_version,
        page.continue_token.as_deref(),
    );
    Ok(json_response(StatusCode::OK, &document))
}

/// `{"kind":"ServiceList",...,"items":[...]}`, serialized without copying the items.
fn list_document(res: usize, items: &[&Value], rv: u64, continue_token: Option<&str>) -> RawJson {
    let r = &RESOURCES[res];
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    let mut out = Vec::with_capacity(64 + items.len() * 512);
    out.extend_from_slice(b"{\"kind\":\"");
    out.extend_from_slice(r.kind.as_bytes());
    out.extend_from_slice(b"List\",\"apiVersion\":\"");
    out.extend_from_slice(r.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    let _ = serde_json::to_writer(&mut out, &metadata);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, item);
    }
    out.extend_from_slice(b"]}");
    RawJson(out)
}

/// Already-serialized JSON.
struct RawJson(Vec<u8>);

fn watch_collection(
    shared: Arc<Shared>,
    target: &Target,
    query: &Query,
) -> Result<ApiResponse, TestApiError> {
    let selectors = query.selectors()?;
    let bookmarks = query.flag("allowWatchBookmarks");
    let rv = query.get("resourceVersion").filter(|v| !v.is_empty());
    let start = if query.flag("sendInitialEvents") {
        if query.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(TestApiError::api(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        WatchStart::Initial {
            end_bookmark: bookmarks,
        }
    } else {
        match rv {
            None | Some("0") => WatchStart::Initial {
                end_bookmark: false,
            },
            Some(text) => WatchStart::From(text.parse().map_err(|_| {
                TestApiError::bad_request(format!("invalid resource version {text:?}"))
            })?),
        }
    };
    let timeout = query
        .number::<u64>("timeoutSeconds")?
        .map(Duration::from_secs);
    let spec = WatchSpec {
        res: target.res,
        namespace: target.namespace.clone(),
        selectors,
        start,
        bookmarks,
        timeout,
    };
    let body = watch::start(shared, spec);
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// `/__testapi/{action}`: the fault controls and seeding, for scripts and other processes.
async fn control(
    shared: &Arc<Shared>,
    action: &str,
    method: &Method,
    query: &Query,
    request: Request<Incoming>,
) -> Result<ApiResponse, TestApiError> {
    if action == "stats" {
        let stats = shared.stats();
        return Ok(json_response(
            StatusCode::OK,
            &json!({
                "requests": stats.requests,
                "lists": stats.lists,
                "watches": stats.watches,
                "openWatches": stats.open_watches,
                "resourceVersion": stats.resource_version.to_string(),
            }),
        ));
    }
    if method != Method::POST {
        return Err(method_not_allowed(method));
    }
    match action {
        "drop-watches" => {
            let open = shared.open_watches();
            shared.interrupt(Interrupt::Drop);
            Ok(json_response(StatusCode::OK, &json!({"dropped": open})))
        }
        "expire" | "compact" => {
            shared.write(|store| {
                store.compact_all();
                Ok(())
            })?;
            if action == "expire" {
                shared.interrupt(Interrupt::Expire);
            }
            let rv = shared.read().resource_version();
            Ok(json_response(
                StatusCode::OK,
                &json!({"resourceVersion": rv.to_string()}),
            ))
        }
        "refuse" => {
            let duration = match (
                query.number::<f64>("seconds")?,
                query.number::<u64>("millis")?,
            ) {
                (_, Some(millis)) => Duration::from_millis(millis),
                (Some(seconds), None) if seconds >= 0.0 && seconds.is_finite() => {
                    Duration::from_secs_f64(seconds)
                }
                _ => {
                    return Err(TestApiError::bad_request(
                        "refuse needs seconds=N or millis=N",
                    ))
                }
            };
            // Answer first: the outage starts shortly after, and this connection closes.
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let (started, _) = oneshot::channel();
                let _ = shared.request_outage(Outage { duration, started });
            });
            let mut response = json_response(
                StatusCode::ACCEPTED,
                &json!({"refusingForMillis": duration.as_millis() as u64, "startsInMillis": 100}),
            );
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            Ok(response)
        }
        "delay" => {
            let millis = query.number::<u64>("millis")?.unwrap_or(0);
            shared.set_event_delay(Duration::from_millis(millis));
            Ok(json_response(
                StatusCode::OK,
                &json!({"eventDelayMillis": millis}),
            ))
        }
        "seed" => {
            let body = read_json(request).await?;
            let objects = match body {
                Value::Array(items) => items,
                Value::Object(mut map) if map.contains_key("items") => match map.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                },
                single => vec![single],
            };
            let count = shared.write(|store| store.insert_many(objects))?;
            Ok(json_response(StatusCode::OK, &json!({"inserted": count})))
        }
        _ => Err(not_found_path()),
    }
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, TestApiError> {
    Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| TestApiError::bad_request(format!("reading the request body: {e}")))
}

async fn read_json(request: Request<Incoming>) -> Result<Value, TestApiError> {
    let bytes = read_body(request).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        TestApiError::bad_request(format!(
            "the request body is not JSON (the test API server reads JSON only): {e}"
        ))
    })
}

fn not_found_path() -> TestApiError {
    TestApiError::api(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn method_not_allowed(method: &Method) -> TestApiError {
    TestApiError::api(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource ({method})"),
    )
}

/// Something the server answers with as JSON.
trait JsonBody {
    fn to_bytes(&self) -> Vec<u8>;
}

impl JsonBody for Value {
    fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl JsonBody for RawJson {
    fn to_bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}

impl JsonBody for Arc<Value> {
    fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self.as_ref()).unwrap_or_default()
    }
}

fn json_response(code: StatusCode, body: &impl JsonBody) -> ApiResponse {
    let mut response = Response::new(ResponseBody::full(body.to_bytes()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn text_response(code: StatusCode, text: &'static str) -> ApiResponse {
    let mut response = Response::new(ResponseBody::full(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = code;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn status_response(error: &TestApiError) -> ApiResponse {
    let code = StatusCode::from_u16(error.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &error.to_status())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn queries_are_percent_decoded() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier%21%3Dx&watch=1&limit=500&x=a+b",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier!=x"));
        assert!(q.flag("watch"));
        assert_eq!(q.number::<usize>("limit").unwrap(), Some(500));
        assert_eq!(q.get("x"), Some("a b"));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn resource_urls() {
        let t = Target::parse("", "v1", &["namespaces", "default", "services", "web"]).unwrap();
        assert_eq!(
            (
                RESOURCES[t.res].plural,
                t.namespace.as_deref(),
                t.name.as_deref()
            ),
            ("services", Some("default"), Some("web"))
        );
        let t = Target::parse("", "v1", &["services"]).unwrap();
        assert_eq!((t.namespace, t.name), (None, None));
        let t = Target::parse("", "v1", &["namespaces", "default"]).unwrap();
        assert_eq!(
            (RESOURCES[t.res].plural, t.name.as_deref()),
            ("namespaces", Some("default"))
        );
        let t = Target::parse("", "v1", &["namespaces", "default", "status"]).unwrap();
        assert!(t.status);
        let t = Target::parse(
            "networking.k8s.io",
            "v1",
            &["namespaces", "a", "ingresses", "b", "status"],
        )
        .unwrap();
        assert!(t.status);
        assert!(Target::parse("", "v1", &["namespaces", "a", "secrets", "b", "status"]).is_err());
        assert!(Target::parse("", "v1", &["services", "web"]).is_err());
        assert!(Target::parse("", "v1", &["pods"]).is_err());
    }

    #[test]
    fn patch_media_types() {
        assert_eq!(
            patch_kind("application/merge-patch+json", false).unwrap(),
            PatchKind::Merge
        );
        assert_eq!(
            patch_kind(
                "application/strategic-merge-patch+json; charset=utf-8",
                false
            )
            .unwrap(),
            PatchKind::Strategic
        );
        assert_eq!(
            patch_kind("application/apply-patch+yaml", true).unwrap(),
            PatchKind::Apply { force: true }
        );
        assert_eq!(
            patch_kind("application/json", false).unwrap_err().code(),
            415
        );
    }
}
