//! The Gateway API status sluice computes for the objects it serves: conditions as the spec names them, per GatewayClass, Gateway, listener and route parent.
//!
//! The report is plain data from the compile. `sluice check` and `/api/gateways` show it; in a
//! cluster the leader writes it to the objects' `status`.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::types::{ParentReference, RouteGroupKind};

/// One status condition, as `metav1.Condition` carries it (without the transition time,
/// which the writer adds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub condition_type: String,
    /// `True` or `False`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
}

impl Condition {
    pub fn new(
        condition_type: &str,
        holds: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            condition_type: condition_type.to_owned(),
            status: if holds { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.into(),
            observed_generation: 0,
        }
    }

    pub fn holds(&self) -> bool {
        self.status == "True"
    }
}

/// Sets the generation every condition of a list was computed from.
pub(crate) fn observed(mut conditions: Vec<Condition>, generation: Option<i64>) -> Vec<Condition> {
    for condition in &mut conditions {
        condition.observed_generation = generation.unwrap_or(0);
    }
    conditions
}

/// The status of every Gateway API object this sluice serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayReport {
    pub classes: Vec<ClassStatus>,
    pub gateways: Vec<GatewayStatus>,
    pub routes: Vec<RouteStatus>,
    /// Every BackendTLSPolicy, with an ancestor per Gateway whose routes reach its Services.
    #[serde(default, rename = "backendTLSPolicies")]
    pub backend_tls_policies: Vec<PolicyStatus>,
    /// Every ListenerSet whose parent is a served Gateway.
    #[serde(default)]
    pub listener_sets: Vec<ListenerSetStatus>,
}

impl GatewayReport {
    /// Marks the listeners whose socket could not be bound: `Accepted=False`,
    /// `reason=PortUnavailable`, not programmed; a Gateway left with no programmed listener
    /// is not programmed either.
    pub fn mark_unbound(&mut self, unbound: &[(SocketAddr, String)]) {
        for gateway in &mut self.gateways {
            let generation = gateway.generation;
            let mut marked = false;
            for listener in &mut gateway.listeners {
                let failed = listener
                    .sockets
                    .iter()
                    .find_map(|socket| unbound.iter().find(|(s, _)| s == socket));
                let Some((socket, why)) = failed else {
                    continue;
                };
                let message = format!("cannot listen on {socket}: {why}");
                listener.set(
                    Condition::new("Accepted", false, "PortUnavailable", &message),
                    generation,
                );
                listener.set(
                    Condition::new("Programmed", false, "Invalid", &message),
                    generation,
                );
                marked = true;
            }
            let none_programmed = !gateway.listeners.iter().any(|l| l.is("Programmed"));
            if marked && none_programmed {
                let condition =
                    Condition::new("Programmed", false, "Invalid", "no listener could be bound");
                set(&mut gateway.conditions, condition, generation);
            }
        }
    }
}

/// Replaces the condition of the same type, or adds it.
fn set(conditions: &mut Vec<Condition>, mut condition: Condition, generation: Option<i64>) {
    condition.observed_generation = generation.unwrap_or(0);
    match conditions
        .iter_mut()
        .find(|c| c.condition_type == condition.condition_type)
    {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub conditions: Vec<Condition>,
    /// The feature names sluice passes, sorted, as `status.supportedFeatures[].name`.
    pub supported_features: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
    /// The ListenerSets attached to it (selected by `allowedListeners` and accepted).
    #[serde(default)]
    pub attached_listener_sets: u32,
}

/// A ListenerSet's status: its own conditions and one entry per listener.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetStatus {
    /// `ListenerSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The parent Gateway, `namespace/name`.
    pub gateway: String,
    pub conditions: Vec<Condition>,
    pub listeners: Vec<ListenerStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    pub supported_kinds: Vec<RouteGroupKind>,
    pub attached_routes: u32,
    pub conditions: Vec<Condition>,
    /// Where the listener is bound (not part of the Kubernetes status).
    pub sockets: Vec<SocketAddr>,
}

impl ListenerStatus {
    fn set(&mut self, condition: Condition, generation: Option<i64>) {
        set(&mut self.conditions, condition, generation);
    }

    /// Whether the condition of this type holds.
    pub fn is(&self, condition_type: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.condition_type == condition_type && c.holds())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// `HTTPRoute`, `GRPCRoute`, `TLSRoute`, `TCPRoute` or `UDPRoute`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub parents: Vec<ParentStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentStatus {
    pub parent_ref: ParentReference,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
}

/// A policy's status: its conditions per ancestor (the Gateways it takes effect under), as
/// `status.ancestors` carries them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// `BackendTLSPolicy`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// What it targets, as `Service namespace/name` (with `:port-name` for a sectionName).
    #[serde(default)]
    pub targets: Vec<String>,
    pub ancestors: Vec<AncestorStatus>,
}

/// One entry of a policy's `status.ancestors`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AncestorStatus {
    pub ancestor_ref: ParentReference,
    pub controller_name: String,
    pub conditions: Vec<Condition>,
}

/// `Accepted=True (Accepted), Programmed=False (Invalid: why)`.
fn conditions_text(conditions: &[Condition]) -> String {
    let one = |c: &Condition| match c.holds() {
        true => format!("{}={} ({})", c.condition_type, c.status, c.reason),
        false => format!(
            "{}={} ({}: {})",
            c.condition_type, c.status, c.reason, c.message
        ),
    };
    conditions.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// One line per listener, indented under its Gateway or ListenerSet.
fn write_listeners(
    f: &mut std::fmt::Formatter<'_>,
    listeners: &[ListenerStatus],
) -> std::fmt::Result {
    for listener in listeners {
        let sockets: Vec<String> = listener.sockets.iter().map(ToString::to_string).collect();
        writeln!(
            f,
            "  listener {} on {}: {} attached route(s); {}",
            listener.name,
            sockets.join(", "),
            listener.attached_routes,
            conditions_text(&listener.conditions)
        )?;
    }
    Ok(())
}

/// The report as `sluice check` prints it: one line per object, listener and route parent.
impl std::fmt::Display for GatewayReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for class in &self.classes {
            writeln!(
                f,
                "GatewayClass {}: {}",
                class.name,
                conditions_text(&class.conditions)
            )?;
        }
        for gateway in &self.gateways {
            let conditions = conditions_text(&gateway.conditions);
            writeln!(
                f,
                "Gateway {}/{}: {conditions}",
                gateway.namespace, gateway.name
            )?;
            write_listeners(f, &gateway.listeners)?;
        }
        for set in &self.listener_sets {
            let conditions = conditions_text(&set.conditions);
            writeln!(
                f,
                "ListenerSet {}/{} on Gateway {}: {conditions}",
                set.namespace, set.name, set.gateway
            )?;
            write_listeners(f, &set.listeners)?;
        }
        for route in &self.routes {
            for parent in &route.parents {
                let reference = &parent.parent_ref;
                let section = reference
                    .section_name
                    .as_deref()
                    .map(|s| format!(" listener {s}"))
                    .unwrap_or_default();
                writeln!(
                    f,
                    "{} {}/{} on {} {}/{}{section}: {}",
                    route.kind,
                    route.namespace,
                    route.name,
                    reference.kind.as_deref().unwrap_or("Gateway"),
                    reference.namespace.as_deref().unwrap_or(&route.namespace),
                    reference.name,
                    conditions_text(&parent.conditions)
                )?;
            }
        }
        for policy in &self.backend_tls_policies {
            writeln!(
                f,
                "{} {}/{} targets {}",
                policy.kind,
                policy.namespace,
                policy.name,
                match policy.targets.is_empty() {
                    true => "no Service".to_owned(),
                    false => policy.targets.join(", "),
                }
            )?;
            if policy.ancestors.is_empty() {
                writeln!(
                    f,
                    "{} {}/{}: no Gateway's routes reach the Services it targets",
                    policy.kind, policy.namespace, policy.name
                )?;
            }
            for ancestor in &policy.ancestors {
                let reference = &ancestor.ancestor_ref;
                writeln!(
                    f,
                    "{} {}/{} under Gateway {}/{}: {}",
                    policy.kind,
                    policy.namespace,
                    policy.name,
                    reference.namespace.as_deref().unwrap_or(&policy.namespace),
                    reference.name,
                    conditions_text(&ancestor.conditions)
                )?;
            }
        }
        Ok(())
    }
}

impl GatewayReport {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
            && self.gateways.is_empty()
            && self.routes.is_empty()
            && self.backend_tls_policies.is_empty()
            && self.listener_sets.is_empty()
    }
}
