//! The test API server over plain HTTP: discovery, CRUD with Status errors, paging, watches and the fault controls, checked on the wire.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sluice_testapi::TestApiServer;

async fn start() -> (TestApiServer, Http) {
    let server = TestApiServer::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let http = Http {
        client: Client::builder(TokioExecutor::new()).build_http(),
        base: server.url(),
    };
    (server, http)
}

struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Http {
    async fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> hyper::Response<Incoming> {
        let body = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .header("user-agent", "http-api-test/1.0")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        self.client.request(request).await.unwrap()
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let response = self.raw(method, path, content_type, body).await;
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)));
        (status, value)
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(Method::GET, path, "application/json", None).await
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(Method::POST, path, "application/json", Some(body))
            .await
    }

    async fn put(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(Method::PUT, path, "application/json", Some(body))
            .await
    }

    async fn patch(&self, path: &str, content_type: &str, body: &Value) -> (StatusCode, Value) {
        self.send(Method::PATCH, path, content_type, Some(body))
            .await
    }

    async fn watch(&self, path: &str) -> Lines {
        let response = self.raw(Method::GET, path, "application/json", None).await;
        assert_eq!(response.status(), StatusCode::OK, "watch {path}");
        Lines {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }
}

/// The JSON lines of a watch response.
struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
}

#[derive(Debug)]
enum Next {
    Event(Value),
    End,
    Aborted,
    Silent,
}

impl Lines {
    async fn next_within(&mut self, timeout: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                return Next::Event(serde_json::from_slice(&line).unwrap());
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Next::Silent,
                Ok(None) => return Next::End,
                Ok(Some(Err(_))) => return Next::Aborted,
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    async fn next_event(&mut self) -> Value {
        loop {
            match self.next_within(Duration::from_secs(5)).await {
                Next::Event(event) if event["type"] == "BOOKMARK" => continue,
                Next::Event(event) => return event,
                other => panic!("expected an event, got {other:?}"),
            }
        }
    }
}

fn service(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    })
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn assert_status(body: &Value, code: u16, reason: &str) {
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
}

#[tokio::test]
async fn discovery_describes_the_served_resources() {
    let (_server, http) = start().await;
    let (status, version) = http.get("/version").await;
    assert_eq!(status, StatusCode::OK);
    assert!(version["gitVersion"].as_str().unwrap().starts_with("v1.33"));

    let (_, api) = http.get("/api").await;
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));

    let (_, apis) = http.get("/apis").await;
    let groups: Vec<&str> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for group in [
        "networking.k8s.io",
        "discovery.k8s.io",
        "coordination.k8s.io",
    ] {
        assert!(groups.contains(&group), "{groups:?}");
    }
    assert_eq!(apis["groups"][0]["preferredVersion"]["version"], "v1");

    let (_, networking) = http.get("/apis/networking.k8s.io/v1").await;
    assert_eq!(networking["kind"], "APIResourceList");
    assert_eq!(networking["groupVersion"], "networking.k8s.io/v1");
    let resources = networking["resources"].as_array().unwrap();
    let find = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
            .clone()
    };
    let ingresses = find("ingresses");
    assert_eq!(ingresses["kind"], "Ingress");
    assert_eq!(ingresses["singularName"], "ingress");
    assert_eq!(ingresses["namespaced"], true);
    assert!(ingresses["verbs"]
        .as_array()
        .unwrap()
        .contains(&json!("watch")));
    assert_eq!(
        find("ingresses/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert_eq!(find("ingressclasses")["namespaced"], false);

    let (_, core) = http.get("/api/v1").await;
    let core = core["resources"].as_array().unwrap().clone();
    let services = core.iter().find(|r| r["name"] == "services").unwrap();
    assert_eq!(services["shortNames"], json!(["svc"]));
    assert!(core
        .iter()
        .any(|r| r["name"] == "namespaces" && r["namespaced"] == false));
    assert!(core.iter().any(|r| r["name"] == "secrets"));
    let (_, slices) = http.get("/apis/discovery.k8s.io/v1").await;
    assert_eq!(slices["resources"][0]["kind"], "EndpointSlice");
    let (_, leases) = http.get("/apis/coordination.k8s.io/v1").await;
    assert_eq!(leases["resources"][0]["kind"], "Lease");

    let (_, openapi) = http.get("/openapi/v3").await;
    let url = openapi["paths"]["apis/networking.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, doc) = http.get(&url).await;
    assert_eq!(status, StatusCode::OK);
    let patch = &doc["paths"]["/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses/{name}"]
        ["patch"];
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Ingress");

    let (status, body) = http.get("/apis/batch/v1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    let (status, body) = http.get("/api/v1/pods").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    let (status, body) = http.post("/version", &json!({})).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_status(&body, 405, "MethodNotAllowed");
}

#[tokio::test]
async fn writes_follow_the_api_conventions_and_fail_with_status_objects() {
    let (_server, http) = start().await;
    let collection = "/api/v1/namespaces/shop/services";
    let (status, created) = http
        .post(collection, &service("shop", "web", json!({"app": "web"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for field in ["uid", "resourceVersion", "creationTimestamp", "namespace"] {
        assert!(created["metadata"][field].is_string(), "{field}: {created}");
    }
    assert_eq!(created["metadata"]["generation"], 1);

    let (status, body) = http
        .post(collection, &service("shop", "web", json!({})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_status(&body, 409, "AlreadyExists");
    assert_eq!(body["details"]["name"], "web");

    let (status, body) = http.get("/api/v1/namespaces/shop/services/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
    assert_eq!(body["message"], "services \"nope\" not found");

    let (status, body) = http.post(collection, &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "other"}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_status(&body, 400, "BadRequest");
    let (status, body) = http
        .send(Method::POST, collection, "application/json", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_status(&body, 400, "BadRequest");

    // Replace: the current version wins, a stale one conflicts.
    let item = "/api/v1/namespaces/shop/services/web";
    let mut changed = created.clone();
    changed["spec"]["ports"][0]["port"] = json!(81);
    let (status, replaced) = http.put(item, &changed).await;
    assert_eq!(status, StatusCode::OK);
    assert!(rv_of(&replaced) > rv_of(&created));
    assert_eq!(replaced["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(replaced["metadata"]["generation"], 2);
    let (status, body) = http.put(item, &changed).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_status(&body, 409, "Conflict");
    let mut renamed = replaced.clone();
    renamed["metadata"]["name"] = json!("other");
    let (status, _) = http.put(item, &renamed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = http.put(collection, &replaced).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_status(&body, 405, "MethodNotAllowed");

    // Merge and strategic merge patches.
    let (status, patched) = http
        .patch(
            item,
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"tier": "front"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    let (status, patched) = http
        .patch(item, "application/strategic-merge-patch+json", &json!({"spec": {"$setElementOrder/ports": [{"port": 81}, {"port": 443}], "ports": [{"port": 443, "name": "https"}]}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        patched["spec"]["ports"],
        json!([{"name": "http", "port": 81}, {"name": "https", "port": 443}])
    );
    let (status, body) = http.patch(item, "application/yaml", &json!({})).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_status(&body, 415, "UnsupportedMediaType");

    // Delete reads DeleteOptions like kubectl's and honours preconditions.
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "preconditions": {"uid": "not-the-uid"}});
    let (status, body) = http
        .send(Method::DELETE, item, "application/json", Some(&options))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_status(&body, 409, "Conflict");
    let options =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
    let (status, deleted) = http
        .send(Method::DELETE, item, "application/json", Some(&options))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(deleted["metadata"]["name"], "web");
    assert!(rv_of(&deleted) > rv_of(&patched));
    let (status, _) = http.get(item).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = http
        .send(Method::DELETE, item, "application/json", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_status(&body, 404, "NotFound");
}

#[tokio::test]
async fn lists_page_with_limit_and_continue_and_filter_by_selectors() {
    let (server, http) = start().await;
    let objects = (0..1234).map(|i| {
        let ns = format!("ns-{}", i % 3);
        service(
            &ns,
            &format!("svc-{i:04}"),
            json!({"app": if i % 2 == 0 { "even" } else { "odd" }, "index": i.to_string()}),
        )
    });
    assert_eq!(server.insert_many(objects).unwrap(), 1234);

    let mut names = Vec::new();
    let mut sizes = Vec::new();
    let mut list_rv = None;
    let mut path = "/api/v1/services?limit=500".to_owned();
    loop {
        let (status, list) = http.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["kind"], "ServiceList");
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            list_rv.get_or_insert(rv.clone()),
            &rv,
            "every page has the first page's version"
        );
        let items = list["items"].as_array().unwrap();
        sizes.push(items.len());
        for item in items {
            for field in ["uid", "resourceVersion", "creationTimestamp", "namespace"] {
                assert!(item["metadata"][field].is_string(), "{field}");
            }
            names.push(format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            ));
        }
        match list["metadata"]["continue"].as_str() {
            Some(token) => path = format!("/api/v1/services?limit=500&continue={token}"),
            None => break,
        }
    }
    assert_eq!(sizes, [500, 500, 234]);
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 1234);
    assert_eq!(names, unique, "items come in namespace/name order");

    let (_, one_namespace) = http
        .get("/api/v1/namespaces/ns-1/services?limit=1000")
        .await;
    let items = one_namespace["items"].as_array().unwrap();
    assert_eq!(items.len(), 411);
    assert!(items.iter().all(|i| i["metadata"]["namespace"] == "ns-1"));
    assert!(one_namespace["metadata"]["continue"].is_null());

    let (_, even) = http
        .get("/api/v1/namespaces/ns-0/services?labelSelector=app%3Deven%2Cindex%21%3D0")
        .await;
    let items = even["items"].as_array().unwrap();
    assert!(items
        .iter()
        .all(|i| i["metadata"]["labels"]["app"] == "even" && i["metadata"]["name"] != "svc-0000"));
    assert_eq!(items.len(), 205);
    let (_, by_name) = http
        .get("/api/v1/services?fieldSelector=metadata.name%3Dsvc-0007")
        .await;
    assert_eq!(by_name["items"].as_array().unwrap().len(), 1);
    assert_eq!(by_name["items"][0]["metadata"]["namespace"], "ns-1");
    let (_, by_namespace) = http
        .get("/api/v1/services?fieldSelector=metadata.namespace%3Dns-2&labelSelector=app%3Dodd")
        .await;
    assert_eq!(by_namespace["items"].as_array().unwrap().len(), 205);
    let (status, body) = http
        .get("/api/v1/services?fieldSelector=spec.type%3DClusterIP")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_status(&body, 400, "BadRequest");
    let (status, _) = http
        .get("/api/v1/services?limit=2&continue=not-a-token")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn watch_replays_from_a_resource_version_then_streams_live_with_bookmarks() {
    let (server, http) = start().await;
    let a = server.create(service("ns", "a", json!({}))).unwrap();
    let from = rv_of(&a);
    server.create(service("ns", "b", json!({}))).unwrap();
    server
        .patch(
            "svc",
            "ns",
            "a",
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .unwrap();
    server.create(service("elsewhere", "c", json!({}))).unwrap();

    let mut watch = http
        .watch(&format!("/api/v1/namespaces/ns/services?watch=true&resourceVersion={from}&allowWatchBookmarks=true"))
        .await;
    let first = watch.next_event().await;
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b"))
    );
    let second = watch.next_event().await;
    assert_eq!(
        (
            second["type"].as_str(),
            second["object"]["metadata"]["name"].as_str()
        ),
        (Some("MODIFIED"), Some("a"))
    );

    let started = Instant::now();
    let live = server.create(service("ns", "live", json!({}))).unwrap();
    let event = watch.next_event().await;
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "live events are flushed at once"
    );
    assert_eq!(event["type"], "ADDED");
    assert_eq!(
        event["object"]["metadata"]["resourceVersion"],
        live["metadata"]["resourceVersion"]
    );

    // A bookmark carries a version at least as new as everything delivered.
    let bookmark = match watch.next_within(Duration::from_secs(3)).await {
        Next::Event(event) if event["type"] == "BOOKMARK" => event,
        other => panic!("expected a bookmark, got {other:?}"),
    };
    assert_eq!(bookmark["object"]["kind"], "Service");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert!(rv_of(&bookmark["object"]) >= rv_of(&live));

    let deleted = server.delete("Service", "ns", "live").unwrap();
    let event = watch.next_event().await;
    assert_eq!(event["type"], "DELETED");
    assert_eq!(
        event["object"]["metadata"]["resourceVersion"],
        deleted["metadata"]["resourceVersion"]
    );
    assert!(rv_of(&deleted) > rv_of(&live));

    // Without a resourceVersion a watch starts with every current object.
    let mut fresh = http.watch("/api/v1/namespaces/ns/services?watch=1").await;
    let names: Vec<String> = [fresh.next_event().await, fresh.next_event().await]
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["ADDED a", "ADDED b"]);
}

#[tokio::test]
async fn an_expired_resource_version_is_an_error_event_over_http_200() {
    let (server, http) = start().await;
    let old = server.create(service("ns", "a", json!({}))).unwrap();
    server.create(service("ns", "b", json!({}))).unwrap();
    server.compact();
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&resourceVersion={}",
            rv_of(&old)
        ))
        .await;
    let Next::Event(event) = watch.next_within(Duration::from_secs(2)).await else {
        panic!("expected an ERROR event");
    };
    assert_eq!(event["type"], "ERROR");
    assert_status(&event["object"], 410, "Expired");
    assert!(matches!(
        watch.next_within(Duration::from_secs(2)).await,
        Next::End
    ));

    // The current version is still watchable after compaction.
    let current = server.resource_version();
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&resourceVersion={current}"
        ))
        .await;
    server.create(service("ns", "c", json!({}))).unwrap();
    assert_eq!(watch.next_event().await["object"]["metadata"]["name"], "c");
}

#[tokio::test]
async fn expiring_resource_versions_ends_open_watches_with_410() {
    let (server, http) = start().await;
    let current = server.resource_version();
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&resourceVersion={current}"
        ))
        .await;
    assert!(
        server
            .wait_for_open_watches(1, Duration::from_secs(2))
            .await
    );
    server.expire_resource_versions();
    let event = watch.next_event().await;
    assert_eq!(event["type"], "ERROR");
    assert_status(&event["object"], 410, "Expired");
    assert!(matches!(
        watch.next_within(Duration::from_secs(2)).await,
        Next::End
    ));
}

#[tokio::test]
async fn dropped_watches_are_aborted_and_new_watches_are_left_alone() {
    let (server, http) = start().await;
    let mut first = http
        .watch("/apis/networking.k8s.io/v1/ingresses?watch=true&resourceVersion=1")
        .await;
    let mut second = http
        .watch("/api/v1/services?watch=true&resourceVersion=1&allowWatchBookmarks=true")
        .await;
    assert!(
        server
            .wait_for_open_watches(2, Duration::from_secs(2))
            .await
    );
    assert_eq!(server.drop_watches(), 2);
    for watch in [&mut first, &mut second] {
        loop {
            match watch.next_within(Duration::from_secs(2)).await {
                Next::Event(event) if event["type"] == "BOOKMARK" => continue,
                Next::Aborted => break,
                other => panic!("expected the stream to be aborted, got {other:?}"),
            }
        }
    }
    let rv = server.resource_version();
    let mut again = http
        .watch(&format!("/api/v1/services?watch=true&resourceVersion={rv}"))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.create(service("ns", "after", json!({}))).unwrap();
    assert_eq!(
        again.next_event().await["object"]["metadata"]["name"],
        "after"
    );
    assert_eq!(server.open_watches(), 1);
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    let (server, http) = start().await;
    let started = Instant::now();
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&timeoutSeconds=1&resourceVersion={}",
            server.resource_version()
        ))
        .await;
    assert!(matches!(
        watch.next_within(Duration::from_secs(3)).await,
        Next::End
    ));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(2500),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn streaming_lists_send_initial_events_then_an_annotated_bookmark() {
    let (server, http) = start().await;
    server.create(service("ns", "a", json!({}))).unwrap();
    server.create(service("ns", "b", json!({}))).unwrap();
    let mut watch = http
        .watch("/api/v1/services?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
        .await;
    for name in ["a", "b"] {
        let Next::Event(event) = watch.next_within(Duration::from_secs(2)).await else {
            panic!()
        };
        assert_eq!(
            (
                event["type"].as_str(),
                event["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some(name))
        );
    }
    let Next::Event(bookmark) = watch.next_within(Duration::from_secs(2)).await else {
        panic!()
    };
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv_of(&bookmark["object"]), server.resource_version());
    server.create(service("ns", "c", json!({}))).unwrap();
    assert_eq!(watch.next_event().await["object"]["metadata"]["name"], "c");

    let (status, body) = http
        .get("/api/v1/services?watch=true&sendInitialEvents=true")
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_status(&body, 422, "Invalid");
}

#[tokio::test]
async fn selector_watches_see_relabelled_objects_arrive_and_leave() {
    let (server, http) = start().await;
    server
        .create(service("ns", "a", json!({"app": "db"})))
        .unwrap();
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&labelSelector=app%3Dweb&resourceVersion={}",
            server.resource_version()
        ))
        .await;
    server
        .patch(
            "services",
            "ns",
            "a",
            &json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .unwrap();
    assert_eq!(watch.next_event().await["type"], "ADDED");
    server
        .patch(
            "services",
            "ns",
            "a",
            &json!({"spec": {"type": "ClusterIP"}}),
        )
        .unwrap();
    assert_eq!(watch.next_event().await["type"], "MODIFIED");
    server
        .patch(
            "services",
            "ns",
            "a",
            &json!({"metadata": {"labels": {"app": "db"}}}),
        )
        .unwrap();
    let left = watch.next_event().await;
    assert_eq!(left["type"], "DELETED");
    assert_eq!(left["object"]["metadata"]["labels"]["app"], "db");
    server
        .create(service("ns", "b", json!({"app": "db"})))
        .unwrap();
    server
        .create(service("ns", "c", json!({"app": "web"})))
        .unwrap();
    assert_eq!(watch.next_event().await["object"]["metadata"]["name"], "c");
}

#[tokio::test]
async fn the_status_subresource_changes_only_status() {
    let (_server, http) = start().await;
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": "a.example"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "6.6.6.6"}]}}
    });
    let base = "/apis/networking.k8s.io/v1/namespaces/shop/ingresses";
    let (status, created) = http.post(base, &ingress).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["status"], json!({"loadBalancer": {}}));

    let mut body = created.clone();
    body["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.7"}]}});
    body["spec"]["ingressClassName"] = json!("changed-through-status");
    let (status, after) = http.put(&format!("{base}/web/status"), &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        after["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.7"
    );
    assert_eq!(after["spec"]["ingressClassName"], "sluice");

    let (_, got) = http.get(&format!("{base}/web/status")).await;
    assert_eq!(got, after);

    let (_, after_main) = http
        .patch(&format!("{base}/web"), "application/merge-patch+json", &json!({"spec": {"ingressClassName": "other"}, "status": {"loadBalancer": {"ingress": []}}}))
        .await;
    assert_eq!(after_main["spec"]["ingressClassName"], "other");
    assert_eq!(
        after_main["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.7"
    );
    let mut put_main = after_main.clone();
    put_main["status"] = json!({});
    let (_, after_put) = http.put(&format!("{base}/web"), &put_main).await;
    assert_eq!(
        after_put["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.7"
    );

    let (status, after_patch) = http
        .patch(&format!("{base}/web/status"), "application/strategic-merge-patch+json", &json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}, "metadata": {"labels": {"x": "y"}}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        after_patch["status"]["loadBalancer"]["ingress"],
        json!([{"hostname": "lb.example"}])
    );
    assert!(after_patch["metadata"]["labels"].is_null());
    assert_eq!(
        after_patch["metadata"]["generation"],
        after_put["metadata"]["generation"]
    );

    let (status, _) = http.get("/api/v1/namespaces/shop/secrets/x/status").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn server_side_apply_conflicts_on_fields_another_manager_owns() {
    let (_server, http) = start().await;
    let lease = |holder: &str| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"}, "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}});
    let path = "/apis/coordination.k8s.io/v1/namespaces/sluice/leases/leader";
    let apply = "application/apply-patch+yaml";
    let (status, created) = http
        .patch(&format!("{path}?fieldManager=a"), apply, &lease("a"))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["spec"]["holderIdentity"], "a");
    let (status, body) = http
        .patch(&format!("{path}?fieldManager=b"), apply, &lease("b"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_status(&body, 409, "Conflict");
    let (status, forced) = http
        .patch(
            &format!("{path}?fieldManager=b&force=true"),
            apply,
            &lease("b"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(forced["spec"]["holderIdentity"], "b");
    let (status, body) = http.patch(path, apply, &lease("c")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn refusing_connections_really_closes_the_listener_then_reopens_it() {
    let (server, http) = start().await;
    let addr = server.addr();
    let mut watch = http
        .watch("/api/v1/services?watch=true&resourceVersion=1")
        .await;
    assert!(
        server
            .wait_for_open_watches(1, Duration::from_secs(2))
            .await
    );
    server
        .refuse_connections(Duration::from_millis(800))
        .await
        .unwrap();
    let refused = tokio::net::TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(matches!(
        watch.next_within(Duration::from_secs(2)).await,
        Next::End | Next::Aborted
    ));
    // Writes through the Rust API go on during the outage.
    server.create(service("ns", "during", json!({}))).unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (status, got) = http.get("/api/v1/namespaces/ns/services/during").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["metadata"]["name"], "during");

    // The HTTP control answers first, then the outage starts.
    let (status, body) = http.post("/__testapi/refuse?millis=600", &json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(http.get("/version").await.0, StatusCode::OK);
}

#[tokio::test]
async fn delayed_events_arrive_late() {
    let (server, http) = start().await;
    server.set_event_delay(Duration::from_millis(400));
    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&resourceVersion={}",
            server.resource_version()
        ))
        .await;
    let started = Instant::now();
    server.create(service("ns", "slow", json!({}))).unwrap();
    assert_eq!(
        watch.next_event().await["object"]["metadata"]["name"],
        "slow"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(380),
        "{:?}",
        started.elapsed()
    );
    server.set_event_delay(Duration::ZERO);
    let started = Instant::now();
    server.create(service("ns", "fast", json!({}))).unwrap();
    assert_eq!(
        watch.next_event().await["object"]["metadata"]["name"],
        "fast"
    );
    assert!(started.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn the_http_fault_controls_and_seeding() {
    let (server, http) = start().await;
    let (status, seeded) = http
        .post("/__testapi/seed", &json!({"kind": "List", "items": [service("a", "one", json!({})), service("b", "two", json!({}))]}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seeded["inserted"], 2);
    assert_eq!(server.count("svc").unwrap(), 2);

    let mut watch = http
        .watch(&format!(
            "/api/v1/services?watch=true&resourceVersion={}",
            server.resource_version()
        ))
        .await;
    assert!(
        server
            .wait_for_open_watches(1, Duration::from_secs(2))
            .await
    );
    let (_, dropped) = http.post("/__testapi/drop-watches", &json!({})).await;
    assert_eq!(dropped["dropped"], 1);
    assert!(matches!(
        watch.next_within(Duration::from_secs(2)).await,
        Next::Aborted
    ));

    let (_, expired) = http.post("/__testapi/expire", &json!({})).await;
    assert_eq!(
        expired["resourceVersion"],
        server.resource_version().to_string()
    );
    let (_, delay) = http.post("/__testapi/delay?millis=250", &json!({})).await;
    assert_eq!(delay["eventDelayMillis"], 250);
    let (status, stats) = http.get("/__testapi/stats").await;
    assert_eq!(status, StatusCode::OK);
    assert!(stats["requests"].as_u64().unwrap() >= 5);
    assert_eq!(stats["watches"], 1);
    let (status, _) = http.get("/__testapi/expire").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(server
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.path == "/__testapi/seed"));
}

#[tokio::test]
async fn kubeconfig_points_at_the_server() {
    let (server, _http) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!("server: {}", server.url())),
        "{text}"
    );
    assert!(text.contains("current-context: sluice-testapi"));
}
