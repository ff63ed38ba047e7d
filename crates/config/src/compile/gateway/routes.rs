//! Route attachment: which listeners each HTTPRoute or GRPCRoute parentRef selects (sectionName, port, allowedRoutes, hostnames), the parents' conditions, and the rules served on each listener.

use super::*;
/// A route's rules as compiled once for all its parents.
pub(super) struct CompiledRules {
    /// The route's place in the oldest-first order, and its `namespace/name`.
    pub(super) rank: usize,
    pub(super) route: Arc<str>,
    /// Rule index, its matches and what it does.
    pub(super) rules: Vec<(usize, Vec<RequestMatch>, Arc<RuleAction>)>,
    pub(super) dropped: Vec<Unsupported>,
    /// The first backendRef that did not resolve: reason and message.
    pub(super) unresolved: Option<(&'static str, String)>,
}

/// A route of either kind by kind and key.
#[derive(Clone, Copy)]
pub(super) struct RouteRef<'a> {
    /// `HTTPRoute` or `GRPCRoute`.
    pub(super) kind: &'static str,
    pub(super) key: &'a ObjectKey,
}

impl RouteRef<'_> {
    pub(super) fn object(&self) -> ObjectRef {
        ObjectRef::new(self.kind, Some(&self.key.namespace), &self.key.name)
    }
}

/// A route as the compile reads it: a GRPCRoute is read as the HTTPRoute it amounts to (its
/// service and method matches are path matches).
pub(super) struct RouteInput<'a> {
    pub(super) name: RouteRef<'a>,
    pub(super) generation: Option<i64>,
    pub(super) spec: std::borrow::Cow<'a, HttpRouteSpec>,
}

/// Every route, HTTPRoutes, GRPCRoutes, TLSRoutes, TCPRoutes then UDPRoutes, each kind oldest
/// first.
pub(super) fn route_inputs(snapshot: &Snapshot) -> Vec<RouteInput<'_>> {
    let http = oldest_first(&snapshot.http_routes)
        .into_iter()
        .map(|(key, route)| RouteInput {
            name: RouteRef {
                kind: "HTTPRoute",
                key,
            },
            generation: route.metadata.generation,
            spec: std::borrow::Cow::Borrowed(&route.spec),
        });
    let grpc = oldest_first(&snapshot.grpc_routes)
        .into_iter()
        .map(|(key, route)| RouteInput {
            name: RouteRef {
                kind: "GRPCRoute",
                key,
            },
            generation: route.metadata.generation,
            spec: std::borrow::Cow::Owned(crate::gateway::grpc::as_http_route(&route.spec)),
        });
    let stream = |kind: &'static str, routes| {
        oldest_first(routes).into_iter().map(
            move |(key, route): (&ObjectKey, &crate::gateway::TlsRoute)| RouteInput {
                name: RouteRef { kind, key },
                generation: route.metadata.generation,
                spec: std::borrow::Cow::Owned(crate::gateway::grpc::stream_as_http_route(
                    &route.spec,
                )),
            },
        )
    };
    http.chain(grpc)
        .chain(stream("TLSRoute", &snapshot.tls_routes))
        .chain(stream("TCPRoute", &snapshot.tcp_routes))
        .chain(stream("UDPRoute", &snapshot.udp_routes))
        .collect()
}

impl CompiledRules {
    /// Leaves a rule out, with a warning at the field that makes it unsupported.
    pub(super) fn drop_rule(
        &mut self,
        unsupported: Unsupported,
        object: &ObjectRef,
        diagnostics: &mut Diagnostics,
    ) {
        let message = format!("{}; the rule is not served", unsupported.message);
        diagnostics.warning(object, &unsupported.field, message);
        self.dropped.push(unsupported);
    }
}

/// Attaches one route to the listeners its parentRefs select, serves its rules there, and
/// returns the status of each parentRef that names a served Gateway.
pub(super) fn attach_route(
    route: &RouteInput<'_>,
    rank: usize,
    (parents_served, plans): (ParentsServed<'_, '_>, &mut [ListenerPlan<'_>]),
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Vec<ParentStatus> {
    let key = route.name.key;
    let object = route.name.object();
    let route_hosts: Vec<HostPattern> = match route.spec.hostnames.as_slice() {
        [] => vec![HostPattern::Any],
        names => names.iter().map(|n| HostPattern::parse(Some(n))).collect(),
    };
    let mut compiled: Option<CompiledRules> = None;
    let mut parents = Vec::new();
    let mut attached_to: Vec<usize> = Vec::new();
    // Why parentRefs name no Gateway sluice serves (the others' refusals are warned each).
    let mut unattached: Vec<String> = Vec::new();
    let mut any_accepted = false;
    for (index, parent) in route.spec.parent_refs.iter().enumerate() {
        let Some(target) = parent_of(parent, key, parents_served) else {
            unattached.push(format!(
                "spec.parentRefs[{index}]: {}",
                unserved_parent(parent, key, inputs)
            ));
            continue;
        };
        let rules = compiled.get_or_insert_with(|| {
            let backend_client = backend_client(route, parents_served, sinks.diagnostics);
            compile_rules(route, (rank, backend_client), inputs, sinks)
        });
        let attachment = attach(
            parent,
            route.name,
            target,
            &route_hosts,
            plans,
            inputs.snapshot,
        );
        let conditions = parent_conditions(&attachment, rules);
        if let Err((reason, message)) = &attachment {
            sinks.diagnostics.warning(
                &object,
                format!("spec.parentRefs[{index}]"),
                format!("not accepted ({reason}): {message}"),
            );
        }
        any_accepted |= attachment.is_ok();
        if let (Ok(listeners), false) = (&attachment, rules.rules.is_empty()) {
            for (plan_index, hosts) in listeners {
                serve_rules(&plans[*plan_index], hosts, rules, sinks.builder);
                if !attached_to.contains(plan_index) {
                    attached_to.push(*plan_index);
                }
            }
        }
        parents.push(ParentStatus {
            parent_ref: ParentReference {
                group: Some(
                    parent
                        .group
                        .clone()
                        .unwrap_or_else(|| GATEWAY_GROUP.to_owned()),
                ),
                kind: Some(parent.kind.clone().unwrap_or_else(|| "Gateway".to_owned())),
                namespace: Some(
                    parent
                        .namespace
                        .clone()
                        .unwrap_or_else(|| key.namespace.clone()),
                ),
                ..parent.clone()
            },
            controller_name: inputs.controller.to_owned(),
            conditions: observed(conditions, route.generation),
        });
    }
    if !any_accepted && (route.spec.parent_refs.is_empty() || !unattached.is_empty()) {
        let why = match route.spec.parent_refs.is_empty() {
            true => "it has no parentRefs".to_owned(),
            false => unattached.join("; "),
        };
        let message = format!(
            "attaches to no listener of a Gateway sluice serves, so it serves nothing: {why}"
        );
        sinks
            .diagnostics
            .warning(&object, "spec.parentRefs", message);
    }
    for plan_index in attached_to {
        plans[plan_index].attached += 1;
    }
    parents
}

/// The certificate a route's TLS backends are shown: its Gateways' backend client
/// certificate. Rules are compiled once per route, so when its Gateways present different
/// ones the first Gateway's is used, with a warning.
fn backend_client(
    route: &RouteInput<'_>,
    (gateways, sets): ParentsServed<'_, '_>,
    diagnostics: &mut Diagnostics,
) -> Option<Arc<Certificate>> {
    let mut certificates = route
        .spec
        .parent_refs
        .iter()
        .filter_map(|parent| parent_of(parent, route.name.key, (gateways, sets)))
        .map(|target| match target {
            Parent::Gateway(index) => index,
            Parent::ListenerSet(index) => sets[index].gateway,
        })
        .map(|index| gateways[index].backend_client.clone());
    let first = certificates.next()?;
    if certificates.any(|other| other != first) {
        let message = "its Gateways present different backend client certificates; the first parent's is used for every one";
        diagnostics.warning(&route.name.object(), "spec.parentRefs", message);
    }
    first
}

/// Why a parentRef names no Gateway sluice serves: another kind, a Gateway that does not
/// exist, or one of a class another controller (or none) serves.
fn unserved_parent(
    parent: &ParentReference,
    route: &ObjectKey,
    inputs: &GatewayInputs<'_>,
) -> String {
    let group = parent.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = parent.kind.as_deref().unwrap_or("Gateway");
    let namespace = parent.namespace.as_deref().unwrap_or(&route.namespace);
    let name = &parent.name;
    if group == GATEWAY_GROUP && kind == "ListenerSet" {
        let key = ObjectKey::new(namespace, name);
        return match inputs.snapshot.listener_sets.get(&key) {
            None => format!("ListenerSet {namespace}/{name} does not exist"),
            Some(set) => format!(
                "ListenerSet {namespace}/{name} is attached to Gateway {}, which sluice does not serve",
                set.spec.parent_ref.name
            ),
        };
    }
    if group != GATEWAY_GROUP || kind != "Gateway" {
        return format!("the parent is a {kind} of group {group:?}, not a Gateway or ListenerSet");
    }
    let Some(gateway) = inputs
        .snapshot
        .gateways
        .get(&ObjectKey::new(namespace, name))
    else {
        return format!("Gateway {namespace}/{name} does not exist");
    };
    let class_name = &gateway.spec.gateway_class_name;
    match inputs.snapshot.gateway_classes.get(class_name) {
        None => format!("Gateway {namespace}/{name} names GatewayClass {class_name}, which does not exist"),
        Some(class) if class.spec.controller_name != inputs.controller => format!(
            "Gateway {namespace}/{name} is of GatewayClass {class_name}, which another controller ({}) serves",
            class.spec.controller_name
        ),
        Some(_) => format!("Gateway {namespace}/{name} is not served: its GatewayClass {class_name} is not accepted"),
    }
}

/// The listeners (by plan index) a parentRef attaches a route to, each with the hostnames the
/// route is served under there; or the `Accepted=False` reason and message.
pub(super) type Attachment = Result<Vec<(usize, Vec<HostPattern>)>, (&'static str, String)>;

/// The served Gateways and ListenerSets routes may name as parents.
pub(super) type ParentsServed<'p, 'a> = (&'p [ServedGateway<'a>], &'p [ServedListenerSet<'a>]);

/// The served Gateway or ListenerSet a parentRef names.
pub(super) fn parent_of(
    parent: &ParentReference,
    route: &ObjectKey,
    (gateways, sets): ParentsServed<'_, '_>,
) -> Option<Parent> {
    let namespace = parent.namespace.as_deref().unwrap_or(&route.namespace);
    let group = parent.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = parent.kind.as_deref().unwrap_or("Gateway");
    let kind = match (group, kind) {
        (GATEWAY_GROUP, kind) => kind,
        // The experimental spelling names the same ListenerSets.
        (EXPERIMENTAL_GATEWAY_GROUP, "XListenerSet") => "ListenerSet",
        _ => return None,
    };
    match kind {
        "Gateway" => gateways
            .iter()
            .position(|g| g.key.namespace == namespace && g.key.name == parent.name)
            .map(Parent::Gateway),
        "ListenerSet" => sets
            .iter()
            .position(|s| s.key.namespace == namespace && s.key.name == parent.name)
            .map(Parent::ListenerSet),
        _ => None,
    }
}

/// The listeners (by plan index) a parentRef attaches the route to, with the hostnames it is
/// served under on each; or why it attaches to none.
pub(super) fn attach(
    parent: &ParentReference,
    route: RouteRef<'_>,
    target: Parent,
    route_hosts: &[HostPattern],
    plans: &[ListenerPlan<'_>],
    snapshot: &Snapshot,
) -> Attachment {
    let owner = match target {
        Parent::Gateway(_) => "Gateway",
        Parent::ListenerSet(_) => "ListenerSet",
    };
    let candidates: Vec<usize> = (0..plans.len())
        .filter(|&i| plans[i].belongs_to(target))
        .filter(|&i| {
            parent
                .section_name
                .as_deref()
                .is_none_or(|s| s == plans[i].listener.name)
        })
        .filter(|&i| parent.port.is_none_or(|p| p == plans[i].listener.port))
        .collect();
    if candidates.is_empty() {
        return Err((
            "NoMatchingParent",
            format!("no listener of the {owner} has this sectionName and port"),
        ));
    }
    if candidates.iter().all(|&i| plans[i].sockets.is_empty()) {
        return Err((
            "NoMatchingParent",
            format!("the {owner} is not accepted, so none of its listeners serves"),
        ));
    }
    let allowed: Vec<usize> = candidates
        .into_iter()
        .filter(|&i| plans[i].accepted() && allows(&plans[i], route, snapshot))
        .collect();
    if allowed.is_empty() {
        return Err((
            "NotAllowedByListeners",
            format!("no listener of the {owner} allows routes of this kind from this namespace"),
        ));
    }
    let attached: Vec<(usize, Vec<HostPattern>)> = allowed
        .into_iter()
        .filter_map(|i| {
            let hosts: Vec<HostPattern> = route_hosts
                .iter()
                .filter_map(|host| plans[i].hostname.intersect(host))
                .collect();
            (!hosts.is_empty()).then_some((i, hosts))
        })
        .collect();
    if attached.is_empty() {
        return Err((
            "NoMatchingListenerHostname",
            "no hostname of the route matches a listener's".to_owned(),
        ));
    }
    Ok(attached)
}

/// Whether the listener's `allowedRoutes` takes an HTTPRoute from the route's namespace.
pub(super) fn allows(plan: &ListenerPlan<'_>, route: RouteRef<'_>, snapshot: &Snapshot) -> bool {
    let kind_ok = plan.kinds.iter().any(|k| k.kind == route.kind);
    let route = route.key;
    let namespaces = plan
        .listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let from = namespaces.and_then(|n| n.from.as_deref()).unwrap_or("Same");
    let namespace_ok = match from {
        "All" => true,
        "Selector" => namespaces
            .and_then(|n| n.selector.as_ref())
            .is_some_and(|selector| selects(selector, &route.namespace, snapshot)),
        _ => route.namespace == plan.namespace,
    };
    kind_ok && namespace_ok
}

/// Whether a namespace selector selects `namespace`, judged on its labels (from the Namespace
/// object, when read) and the one every namespace carries, `kubernetes.io/metadata.name`.
pub(super) fn selects(selector: &LabelSelector, namespace: &str, snapshot: &Snapshot) -> bool {
    let mut labels = snapshot
        .namespaces
        .get(namespace)
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    labels.insert(
        "kubernetes.io/metadata.name".to_owned(),
        namespace.to_owned(),
    );
    let labels_ok = selector
        .match_labels
        .as_ref()
        .is_none_or(|wanted| wanted.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let listed = |v: &String| e.values.iter().flatten().any(|w| w == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// A parentRef's conditions: `Accepted` (with `PartiallyInvalid` when rules were dropped) and
/// `ResolvedRefs`.
pub(super) fn parent_conditions(attachment: &Attachment, rules: &CompiledRules) -> Vec<Condition> {
    let mut conditions = Vec::new();
    match (attachment, rules.rules.is_empty(), rules.dropped.first()) {
        (Err((reason, message)), _, _) => {
            conditions.push(Condition::new("Accepted", false, reason, message.clone()))
        }
        (Ok(_), true, Some(dropped)) => conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedValue",
            format!(
                "every rule is invalid; {}: {}",
                dropped.field, dropped.message
            ),
        )),
        (Ok(_), _, dropped) => {
            conditions.push(Condition::new(
                "Accepted",
                true,
                "Accepted",
                "route accepted",
            ));
            if let Some(dropped) = dropped {
                conditions.push(Condition::new(
                    "PartiallyInvalid",
                    true,
                    "UnsupportedValue",
                    format!(
                        "{}: {}; the rule is dropped",
                        dropped.field, dropped.message
                    ),
                ));
            }
        }
    }
    conditions.push(match &rules.unresolved {
        Some((reason, message)) => Condition::new("ResolvedRefs", false, reason, message.clone()),
        None => Condition::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every backendRef resolved",
        ),
    });
    conditions
}

/// Adds the route's rules to one listener, under each hostname the route is served with. A
/// listener that is not programmed (conflicted, or not served yet) serves nothing: its socket
/// and hostname may belong to another listener.
pub(super) fn serve_rules(
    plan: &ListenerPlan<'_>,
    hosts: &[HostPattern],
    rules: &CompiledRules,
    builder: &mut TableBuilder,
) {
    let Some(protocol) = plan.protocol.filter(|_| plan.programmed()) else {
        return;
    };
    for (rule, matches, action) in &rules.rules {
        for (matched, request_match) in matches.iter().enumerate() {
            let gateway_rule = GatewayRule {
                request_match: request_match.clone(),
                precedence: RulePrecedence::of(request_match, rules.rank, (*rule, matched)),
                route: rules.route.clone(),
                action: action.clone(),
            };
            for socket in &plan.sockets {
                for host in hosts {
                    builder.gateways().add_rule(
                        (*socket, protocol, &plan.hostname),
                        host.clone(),
                        gateway_rule.clone(),
                    );
                }
            }
        }
    }
}
