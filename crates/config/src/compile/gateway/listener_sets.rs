//! ListenerSets: listeners added to a served Gateway that allows them (`spec.allowedListeners`), planned on the Gateway's addresses after its own listeners, oldest set first, with their status.

use super::frontend::{client_auth, refuse_listener, validation_for};
use super::*;
use crate::gateway::status::ListenerSetStatus;
use crate::gateway::ListenerSet;

/// A ListenerSet whose parent is a served Gateway.
pub(super) struct ServedListenerSet<'a> {
    pub(super) key: &'a ObjectKey,
    pub(super) set: &'a ListenerSet,
    /// The parent Gateway, by index.
    pub(super) gateway: usize,
    pub(super) conditions: Vec<Condition>,
}

impl ServedListenerSet<'_> {
    pub(super) fn accepted(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.condition_type == "Accepted" && c.holds())
    }
}

/// The ListenerSets whose parentRef names a served Gateway, oldest first (then by
/// namespace/name): the order their listeners claim hostnames and ports in.
pub(super) fn served_listener_sets<'a>(
    snapshot: &'a Snapshot,
    gateways: &[ServedGateway<'_>],
) -> Vec<ServedListenerSet<'a>> {
    oldest_first(&snapshot.listener_sets)
        .into_iter()
        .filter_map(|(key, set)| {
            let parent = &set.spec.parent_ref;
            let group = parent.group.as_deref().unwrap_or(GATEWAY_GROUP);
            let kind = parent.kind.as_deref().unwrap_or("Gateway");
            if group != GATEWAY_GROUP || kind != "Gateway" {
                return None;
            }
            let namespace = parent.namespace.as_deref().unwrap_or(&key.namespace);
            let gateway = gateways
                .iter()
                .position(|g| g.key.namespace == namespace && g.key.name == parent.name)?;
            Some(ServedListenerSet {
                key,
                set,
                gateway,
                conditions: Vec::new(),
            })
        })
        .collect()
}

/// Whether the Gateway's `allowedListeners` takes ListenerSets from `namespace` (none by
/// default).
fn allows_listeners(gateway: &ServedGateway<'_>, namespace: &str, snapshot: &Snapshot) -> bool {
    let namespaces = gateway
        .gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|allowed| allowed.namespaces.as_ref());
    match namespaces.and_then(|n| n.from.as_deref()).unwrap_or("None") {
        "All" => true,
        "Same" => namespace == gateway.key.namespace,
        "Selector" => namespaces
            .and_then(|n| n.selector.as_ref())
            .is_some_and(|selector| selects(selector, namespace, snapshot)),
        _ => false,
    }
}

/// Plans the listeners of ListenerSet `index` on its Gateway's addresses and sets its
/// conditions: not allowed, parent not accepted, or accepted while any listener is.
pub(super) fn plan_listener_set<'a>(
    index: usize,
    (gateway, sets): (&ServedGateway<'_>, &mut [ServedListenerSet<'a>]),
    (plans, claimed): (&mut Vec<ListenerPlan<'a>>, &mut ClaimedSockets),
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) {
    let served = &mut sets[index];
    let object = ObjectRef::new("ListenerSet", Some(&served.key.namespace), &served.key.name);
    let gateway_name = format!("{}/{}", gateway.key.namespace, gateway.key.name);
    if !allows_listeners(gateway, &served.key.namespace, inputs.snapshot) {
        let message = format!(
            "Gateway {gateway_name} does not allow ListenerSets from namespace {} (spec.allowedListeners)",
            served.key.namespace
        );
        sinks
            .diagnostics
            .warning(&object, "spec.parentRef", &message);
        served.conditions = set_conditions(false, "NotAllowed", &message);
        return;
    }
    if gateway.addresses.is_empty() {
        let message = format!("Gateway {gateway_name} is not accepted");
        sinks
            .diagnostics
            .warning(&object, "spec.parentRef", &message);
        served.conditions = set_conditions(false, "ParentNotAccepted", &message);
        return;
    }
    let mut any_programmed = false;
    for (position, listener) in served.set.spec.listeners.iter().enumerate() {
        let certificate = terminates_tls(listener).then(|| {
            let owner = (inputs.snapshot, served.key, "ListenerSet");
            listener_certificate(listener, owner, sinks.tls)
        });
        let mut plan = plan_listener(served.gateway, listener, &gateway.addresses, certificate);
        plan.set = Some(index);
        plan.namespace = &served.key.namespace;
        // The parent Gateway's frontend validation covers its ports, whoever adds the
        // listener: a ListenerSet cannot open a port the Gateway guards without the check.
        let validation = validation_for(gateway.gateway, listener);
        if let Some(validation) = validation.filter(|_| terminates_tls(listener)) {
            let context = (inputs.snapshot, gateway.key);
            match client_auth(validation, context, sinks.tls) {
                Ok(auth) => plan.client_auth = Some(auth),
                Err(problem) => refuse_listener(&mut plan, problem),
            }
        }
        if plan.accepted() {
            claim_sockets(&mut plan, claimed);
        }
        conflicts_refuse(&mut plan);
        for condition in plan.conditions.iter().filter(|c| troubled(c)) {
            let message = format!("{}: {}", condition.reason, condition.message);
            let field = format!("spec.listeners[{position}]");
            sinks.diagnostics.warning(&object, &field, message);
        }
        any_programmed |= plan.programmed();
        plans.push(plan);
    }
    served.conditions = match any_programmed {
        true => {
            let message = format!("attached to Gateway {gateway_name}");
            set_conditions(true, "Accepted", &message)
        }
        false => set_conditions(
            false,
            "ListenersNotValid",
            "no listener of the ListenerSet is valid",
        ),
    };
}

/// A conflicting ListenerSet listener is not accepted: the Gateway's own listeners, and older
/// ListenerSets', keep their hostname and protocol.
fn conflicts_refuse(plan: &mut ListenerPlan<'_>) {
    let Some(conflict) = plan
        .conditions
        .iter()
        .find(|c| c.condition_type == "Conflicted" && c.holds())
        .cloned()
    else {
        return;
    };
    for kind in ["Accepted", "Programmed"] {
        let condition = Condition::new(kind, false, &conflict.reason, conflict.message.clone());
        replace(&mut plan.conditions, condition);
    }
}

/// Whether a listener condition reports a problem.
fn troubled(condition: &Condition) -> bool {
    match condition.condition_type.as_str() {
        "Conflicted" => condition.holds(),
        "Programmed" => false,
        _ => !condition.holds(),
    }
}

/// A ListenerSet's `Accepted` and `Programmed` conditions, with one reason.
fn set_conditions(holds: bool, reason: &str, message: &str) -> Vec<Condition> {
    let programmed_reason = match holds {
        true => "Programmed",
        false => reason,
    };
    vec![
        Condition::new("Accepted", holds, reason, message),
        Condition::new("Programmed", holds, programmed_reason, message),
    ]
}

/// The status of every served ListenerSet.
pub(super) fn listener_set_statuses(
    sets: &[ServedListenerSet<'_>],
    gateways: &[ServedGateway<'_>],
    plans: &[ListenerPlan<'_>],
) -> Vec<ListenerSetStatus> {
    sets.iter()
        .enumerate()
        .map(|(index, served)| {
            let generation = served.set.metadata.generation;
            let gateway = &gateways[served.gateway];
            ListenerSetStatus {
                kind: "ListenerSet".to_owned(),
                namespace: served.key.namespace.clone(),
                name: served.key.name.clone(),
                generation,
                gateway: format!("{}/{}", gateway.key.namespace, gateway.key.name),
                conditions: observed(served.conditions.clone(), generation),
                listeners: plans
                    .iter()
                    .filter(|plan| plan.set == Some(index))
                    .map(|plan| listener_status(plan, generation))
                    .collect(),
            }
        })
        .collect()
}
