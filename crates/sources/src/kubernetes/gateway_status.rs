//! Gateway API status: writes the compiled conditions of GatewayClasses, Gateways and routes to their status subresources — only what changed, only on the leader, and never touching other controllers' route parents.
//!
//! Each object is read before it is written: a condition whose status did not change keeps
//! its `lastTransitionTime`, and a route's `status.parents` keeps the entries of every other
//! controller. What was written last is remembered, so an unchanged report costs no request,
//! and a route that stops naming sluice's Gateways loses the parent entries sluice wrote; the
//! memory is dropped whenever leadership is lost, so a new term writes everything once and
//! first sweeps the routes for parent entries an earlier leader left behind.

use std::collections::HashMap;
use std::time::Duration;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use sluice_config::gateway::status::{Condition, GatewayReport, ListenerStatus};
use tokio::sync::watch;

use super::watch::ServedResource;

/// One entry of `Gateway.status.addresses`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayStatusAddress {
    /// `IPAddress` or `Hostname`.
    pub address_type: &'static str,
    pub value: String,
}

/// What the writer reads: the report to write and the addresses Gateways publish.
pub struct GatewayStatusSource {
    /// The current report (as compiled, with unbound listeners marked).
    pub report: Box<dyn Fn() -> GatewayReport + Send + Sync>,
    /// Bumped whenever the report may have changed.
    pub changes: watch::Receiver<u64>,
    /// From `--publish-service` / `--publish-address`; empty when neither is set.
    pub addresses: watch::Receiver<Vec<GatewayStatusAddress>>,
}

/// The object a status belongs to: kind, namespace (empty when cluster-scoped) and name.
type StatusKey = (&'static str, String, String);

/// Writes Gateway API status whenever the report changes and this replica leads; retries
/// failures after a pause. Ends when the change channel closes. `namespaces` scopes the
/// sweep for stale route parents as the watches are scoped (all when empty).
pub async fn run_gateway_status_writer(
    client: Client,
    resources: Vec<ServedResource>,
    namespaces: Vec<String>,
    mut source: GatewayStatusSource,
    controller: String,
    mut leader: watch::Receiver<bool>,
) {
    if resources.is_empty() {
        return;
    }
    let writer = Writer {
        client,
        resources,
        namespaces,
        controller,
    };
    let mut written: HashMap<StatusKey, Value> = HashMap::new();
    let mut swept = false;
    let mut leader_open = true;
    loop {
        source.changes.borrow_and_update();
        let leading = *leader.borrow_and_update();
        let mut retry = false;
        if leading {
            let report = (source.report)();
            let addresses = source.addresses.borrow_and_update().clone();
            let mut wanted = desired(&report, &addresses, &writer.controller);
            wanted.extend(abandoned_routes(&written, &wanted));
            if !swept {
                match writer.stale_routes(&wanted).await {
                    Ok(stale) => {
                        wanted.extend(stale.into_iter().map(|key| {
                            let empty = no_parents(key.0);
                            (key, empty)
                        }));
                        swept = true;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "listing routes for stale Gateway API parents failed; retrying");
                        retry = true;
                    }
                }
            }
            for (key, status) in wanted {
                if written.get(&key) == Some(&status) {
                    continue;
                }
                match writer.write(&key, &status).await {
                    Ok(()) if status == no_parents(key.0) => {
                        written.remove(&key);
                    }
                    Ok(()) => {
                        written.insert(key, status);
                    }
                    Err(error) => {
                        tracing::warn!(kind = key.0, namespace = %key.1, name = %key.2, %error, "writing Gateway API status failed; retrying");
                        retry = true;
                        // A stale parent is found only by sweeping: sweep again on the retry.
                        swept = false;
                    }
                }
            }
        } else {
            written.clear();
            swept = false;
        }
        let pause = tokio::time::sleep(Duration::from_secs(if retry { 2 } else { 3600 }));
        tokio::select! {
            changed = source.changes.changed() => if changed.is_err() { return },
            changed = source.addresses.changed() => if changed.is_err() { return },
            changed = leader.changed(), if leader_open => leader_open = changed.is_ok(),
            () = pause => {}
        }
    }
}

/// The status every served object should show, without transition times.
fn desired(
    report: &GatewayReport,
    addresses: &[GatewayStatusAddress],
    controller: &str,
) -> Vec<(StatusKey, Value)> {
    let mut out = Vec::new();
    for class in &report.classes {
        let features: Vec<Value> = class
            .supported_features
            .iter()
            .map(|name| json!({"name": name}))
            .collect();
        let status =
            json!({"conditions": conditions(&class.conditions), "supportedFeatures": features});
        out.push((("GatewayClass", String::new(), class.name.clone()), status));
    }
    for gateway in &report.gateways {
        let listeners: Vec<Value> = gateway.listeners.iter().map(listener_json).collect();
        let addresses: Vec<Value> = addresses
            .iter()
            .map(|a| json!({"type": a.address_type, "value": a.value}))
            .collect();
        let status = json!({
            "addresses": addresses,
            "conditions": conditions(&gateway.conditions),
            "listeners": listeners,
            "attachedListenerSets": gateway.attached_listener_sets,
        });
        out.push((
            ("Gateway", gateway.namespace.clone(), gateway.name.clone()),
            status,
        ));
    }
    for route in &report.routes {
        let kind = ROUTE_KINDS
            .iter()
            .find(|kind| **kind == route.kind)
            .copied()
            .unwrap_or("HTTPRoute");
        let parents: Vec<Value> = route
            .parents
            .iter()
            .map(|p| {
                json!({
                    "parentRef": p.parent_ref,
                    "controllerName": controller,
                    "conditions": conditions(&p.conditions),
                })
            })
            .collect();
        out.push((
            (kind, route.namespace.clone(), route.name.clone()),
            json!({"parents": parents}),
        ));
    }
    for set in &report.listener_sets {
        let listeners: Vec<Value> = set.listeners.iter().map(listener_json).collect();
        let status = json!({"conditions": conditions(&set.conditions), "listeners": listeners});
        out.push((
            ("ListenerSet", set.namespace.clone(), set.name.clone()),
            status,
        ));
    }
    for policy in &report.backend_tls_policies {
        let ancestors: Vec<Value> = policy
            .ancestors
            .iter()
            .map(|a| {
                json!({
                    "ancestorRef": a.ancestor_ref,
                    "controllerName": controller,
                    "conditions": conditions(&a.conditions),
                })
            })
            .collect();
        out.push((
            (
                "BackendTLSPolicy",
                policy.namespace.clone(),
                policy.name.clone(),
            ),
            json!({"ancestors": ancestors}),
        ));
    }
    out
}

/// Routes (and policies) sluice wrote parents (ancestors) for that name none of its Gateways
/// any more: sluice's entries go (other controllers' stay).
fn abandoned_routes(
    written: &HashMap<StatusKey, Value>,
    desired: &[(StatusKey, Value)],
) -> Vec<(StatusKey, Value)> {
    written
        .keys()
        .filter(|key| ROUTE_KINDS.contains(&key.0) || key.0 == "BackendTLSPolicy")
        .filter(|key| !desired.iter().any(|(wanted, _)| wanted == *key))
        .map(|key| (key.clone(), no_parents(key.0)))
        .collect()
}

/// The route kinds whose status sluice writes.
const ROUTE_KINDS: [&str; 5] = ["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"];

/// The field of a kind's status that lists its entries per controller: a policy's
/// `ancestors`, a route's `parents`.
fn entries_field(kind: &str) -> &'static str {
    match kind {
        "BackendTLSPolicy" => "ancestors",
        _ => "parents",
    }
}

/// A status with none of sluice's entries left.
fn no_parents(kind: &str) -> Value {
    json!({ entries_field(kind): [] })
}

/// One entry of a Gateway's or ListenerSet's `status.listeners`.
fn listener_json(listener: &ListenerStatus) -> Value {
    json!({
        "name": listener.name,
        "supportedKinds": listener.supported_kinds,
        "attachedRoutes": listener.attached_routes,
        "conditions": conditions(&listener.conditions),
    })
}

fn conditions(conditions: &[Condition]) -> Value {
    serde_json::to_value(conditions).unwrap_or_default()
}

/// Writes one object's status.
struct Writer {
    client: Client,
    resources: Vec<ServedResource>,
    namespaces: Vec<String>,
    controller: String,
}

impl Writer {
    fn api(&self, kind: &str, namespace: &str) -> Option<Api<DynamicObject>> {
        let resource = self.resources.iter().find(|r| r.kind == kind)?;
        Some(match resource.namespaced {
            true => Api::namespaced_with(self.client.clone(), namespace, &resource.api),
            false => Api::all_with(self.client.clone(), &resource.api),
        })
    }

    /// Routes outside `desired` whose status still shows a parent entry of this controller:
    /// left by an earlier leader (before a restart) for a route that has since left.
    async fn stale_routes(
        &self,
        desired: &[(StatusKey, Value)],
    ) -> Result<Vec<StatusKey>, kube::Error> {
        let mut stale = Vec::new();
        let routes = self
            .resources
            .iter()
            .filter(|r| ROUTE_KINDS.contains(&r.kind));
        for resource in routes {
            for api in self.scoped_apis(resource) {
                for route in api.list(&ListParams::default()).await? {
                    let key = (
                        resource.kind,
                        route.namespace().unwrap_or_default(),
                        route.name_any(),
                    );
                    if self.shows_our_parent(&route) && !desired.iter().any(|(k, _)| *k == key) {
                        stale.push(key);
                    }
                }
            }
        }
        Ok(stale)
    }

    /// One API per watched namespace, or one for all of them.
    fn scoped_apis(&self, resource: &ServedResource) -> Vec<Api<DynamicObject>> {
        if self.namespaces.is_empty() {
            return vec![Api::all_with(self.client.clone(), &resource.api)];
        }
        self.namespaces
            .iter()
            .map(|namespace| Api::namespaced_with(self.client.clone(), namespace, &resource.api))
            .collect()
    }

    fn shows_our_parent(&self, route: &DynamicObject) -> bool {
        route.data["status"]["parents"]
            .as_array()
            .is_some_and(|parents| {
                parents
                    .iter()
                    .any(|p| p["controllerName"] == *self.controller)
            })
    }

    /// Reads the object, merges `status` into what it shows (transition times kept, other
    /// controllers' parents kept) and patches the status subresource when it differs.
    async fn write(
        &self,
        (kind, namespace, name): &StatusKey,
        status: &Value,
    ) -> Result<(), kube::Error> {
        let Some(api) = self.api(kind, namespace) else {
            return Ok(());
        };
        let Some(current) = api.get_opt(name).await? else {
            return Ok(());
        };
        let shown = current.data.get("status").cloned().unwrap_or(Value::Null);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut merged = status.clone();
        stamp(&mut merged, &shown, &now);
        let field = entries_field(kind);
        if let (Some(parents), Some(shown_parents)) = (
            merged.get_mut(field).and_then(Value::as_array_mut),
            shown.get(field).and_then(Value::as_array),
        ) {
            let others = shown_parents.iter().filter(|p| {
                p.get("controllerName").and_then(Value::as_str) != Some(&self.controller)
            });
            let mut all: Vec<Value> = others.cloned().collect();
            all.append(parents);
            *parents = all;
        }
        if without_times(&merged) == without_times(&shown) {
            return Ok(());
        }
        let patch = json!({"status": merged});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(kind, namespace, name, "wrote Gateway API status");
        Ok(())
    }
}

/// Gives every condition list in `status` its `lastTransitionTime`: the one `shown` has for
/// the same condition type and status (matched by the list's place in the object), else now.
fn stamp(status: &mut Value, shown: &Value, now: &str) {
    match status {
        Value::Object(fields) => {
            for (key, value) in fields.iter_mut() {
                let before = shown.get(key).unwrap_or(&Value::Null);
                if key == "conditions" {
                    stamp_conditions(value, before, now);
                } else {
                    stamp(value, before, now);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let before = shown.get(index).unwrap_or(&Value::Null);
                stamp(item, before, now);
            }
        }
        _ => {}
    }
}

fn stamp_conditions(conditions: &mut Value, shown: &Value, now: &str) {
    for condition in conditions.as_array_mut().into_iter().flatten() {
        let same = shown.as_array().and_then(|list| {
            list.iter().find(|c| {
                c.get("type") == condition.get("type") && c.get("status") == condition.get("status")
            })
        });
        let time = same
            .and_then(|c| c.get("lastTransitionTime"))
            .cloned()
            .unwrap_or_else(|| Value::String(now.to_owned()));
        if let Some(fields) = condition.as_object_mut() {
            fields.insert("lastTransitionTime".into(), time);
        }
    }
}

/// The value with every `lastTransitionTime` removed, for comparing what matters.
fn without_times(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| *key != "lastTransitionTime")
                .map(|(key, value)| (key.clone(), without_times(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let shown = json!({"conditions": [
            {"type": "Accepted", "status": "True", "lastTransitionTime": "then"},
            {"type": "Programmed", "status": "True", "lastTransitionTime": "then"},
        ]});
        let mut status = json!({"conditions": [
            {"type": "Accepted", "status": "True"},
            {"type": "Programmed", "status": "False"},
        ]});
        stamp(&mut status, &shown, "now");
        assert_eq!(status["conditions"][0]["lastTransitionTime"], "then");
        assert_eq!(status["conditions"][1]["lastTransitionTime"], "now");
        assert_ne!(without_times(&status), without_times(&shown));
    }
}
