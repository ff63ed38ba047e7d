//! Route rules: each rule's matches, filters and settings, and its backendRefs and mirrors resolved to backends with their policies.

use super::*;
/// Compiles every rule of a route: matches, filters and backendRefs.
pub(super) fn compile_rules(
    route: &RouteInput<'_>,
    (rank, backend_client): (usize, Option<Arc<Certificate>>),
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> CompiledRules {
    let key = route.name.key;
    let object = route.name.object();
    let name: Arc<str> = format!("{}/{}", key.namespace, key.name).into();
    let mut compiled = CompiledRules {
        rank,
        route: name,
        rules: Vec::new(),
        dropped: Vec::new(),
        unresolved: None,
    };
    for (index, rule) in route.spec.rules.iter().enumerate() {
        let field = format!("spec.rules[{index}]");
        let mut filters = FilterSet::default();
        let parts = request_matches(&rule.matches, &field).and_then(|matches| {
            add_filters(&rule.filters, &field, &mut filters)?;
            let settings = rule_settings(
                rule.timeouts.as_ref(),
                rule.retry.as_ref(),
                rule.session_persistence.as_ref(),
                &field,
            )?;
            Ok((matches, settings))
        });
        let (matches, settings) = match parts {
            Ok(parts) => parts,
            Err(unsupported) => {
                compiled.drop_rule(unsupported, &object, sinks.diagnostics);
                continue;
            }
        };
        let mut choices = Vec::new();
        let mut dropped = None;
        for (position, backend_ref) in rule.backend_refs.iter().enumerate() {
            let at = format!("{field}.backendRefs[{position}]");
            let mut own = filters.clone();
            if let Err(unsupported) = add_filters(&backend_ref.filters, &at, &mut own) {
                dropped = Some(unsupported);
                break;
            }
            let reference = RouteBackend {
                route: route.name,
                backend_ref,
                field: (index, position),
                backend_client: backend_client.as_ref(),
            };
            let own = policy_of(
                own,
                &settings,
                route.name,
                inputs,
                (sinks, &mut compiled.unresolved),
            );
            match backend_choice(&reference, own, inputs, sinks) {
                Ok(choice) => choices.push(choice),
                Err((reason, message, choice)) => {
                    let share = match route.name.kind {
                        "TLSRoute" | "TCPRoute" => "its share of the connections is closed",
                        "UDPRoute" => "its share of the flows is dropped",
                        _ => "its share of the requests answers 500",
                    };
                    sinks
                        .diagnostics
                        .error(&object, &at, format!("{message}; {share}"));
                    compiled.unresolved.get_or_insert((reason, message));
                    choices.push(choice);
                }
            }
        }
        if let Some(unsupported) = dropped {
            compiled.drop_rule(unsupported, &object, sinks.diagnostics);
            continue;
        }
        let policy = policy_of(
            filters,
            &settings,
            route.name,
            inputs,
            (sinks, &mut compiled.unresolved),
        );
        if rule.backend_refs.is_empty() && policy.edits.redirect.is_some() {
            choices.push(redirect_only(policy.clone(), sinks.builder));
        }
        let action = Arc::new(RuleAction { choices });
        compiled.rules.push((index, matches, action));
    }
    compiled
}

/// A rule that only redirects still needs a backend to stand on: an empty one, which the
/// redirect answers before any endpoint is chosen.
pub(super) fn redirect_only(
    policy: Arc<RoutePolicy>,
    builder: &mut TableBuilder,
) -> WeightedBackend {
    let id = BackendId::redirect_only();
    builder.add_backend(Backend::new(
        id.clone(),
        BackendMode::Endpoints,
        EndpointSet::default(),
    ));
    WeightedBackend {
        backend: builder.backend_index(&id),
        weight: 1,
        policy,
        telemetry: Default::default(),
    }
}

/// A backendRef of a route rule, and where it sits.
pub(super) struct RouteBackend<'a> {
    pub(super) route: RouteRef<'a>,
    pub(super) backend_ref: &'a HttpBackendRef,
    /// Rule and backendRef index.
    pub(super) field: (usize, usize),
    /// What its Gateway presents to backends that ask for a client certificate.
    pub(super) backend_client: Option<&'a Arc<Certificate>>,
}

/// The weighted backend a backendRef resolves to; an invalid one keeps its weight and answers
/// 500, with the `ResolvedRefs` reason and message.
pub(super) fn backend_choice(
    reference: &RouteBackend<'_>,
    base: Arc<RoutePolicy>,
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Result<WeightedBackend, (&'static str, String, WeightedBackend)> {
    let target = &reference.backend_ref.backend;
    let weight = reference.backend_ref.weight.unwrap_or(1);
    let (rule, backend) = reference.field;
    let field = BackendField::RouteBackend { rule, backend };
    let resolved = match resolve_service_ref(reference.route, target, field, inputs, sinks) {
        Ok(resolved) => resolved,
        Err((reason, message)) => {
            let choice = WeightedBackend {
                backend: None,
                weight,
                policy: base,
                telemetry: Default::default(),
            };
            return Err((reason, message, choice));
        }
    };
    let no_annotations = IngressPolicy::default();
    let side = IngressSide {
        key: reference.route.key,
        kind: reference.route.kind,
        policy: &no_annotations,
        service_upstream: ServiceUpstream::Off,
        base: &base,
    };
    let namespace = target
        .namespace
        .as_deref()
        .unwrap_or(&reference.route.key.namespace);
    let service_name = ServiceName {
        namespace,
        name: &target.name,
    };
    let mut policy = route_policy(&side, &resolved, service_name, sinks.diagnostics);
    let backend_tls = target.port.and_then(|port| {
        let service = (namespace, target.name.as_str(), port);
        inputs.backend_tls.for_backend(inputs.services, service)
    });
    match backend_tls {
        None => {
            if matches!(&policy.upstream, UpstreamProtocol::Tls(tls) if tls.verify_roots.is_none())
            {
                sinks.diagnostics.info(
                    &reference.route.object(),
                    format!("spec.rules[{rule}].backendRefs[{backend}]"),
                    format!("the pods of Service {namespace}/{} are spoken to over TLS (the port's appProtocol) without verifying their certificates; a BackendTLSPolicy targeting the Service verifies them", target.name),
                );
            }
        }
        Some(Ok(_)) if reference.route.kind == "UDPRoute" => {
            let why = format!("a BackendTLSPolicy asks for TLS to Service {namespace}/{}, which a UDPRoute cannot carry", target.name);
            policy = Arc::new(RoutePolicy {
                refused: Some(why),
                ..RoutePolicy::clone(&policy)
            });
        }
        Some(Ok(mut tls)) => {
            tls.http2_only = reference.route.kind == "GRPCRoute";
            tls.client_certificate = reference.backend_client.cloned();
            policy = Arc::new(RoutePolicy {
                upstream: UpstreamProtocol::Tls(tls),
                ..RoutePolicy::clone(&policy)
            });
        }
        Some(Err(why)) => {
            policy = Arc::new(RoutePolicy {
                refused: Some(why),
                ..RoutePolicy::clone(&policy)
            });
        }
    }
    if reference.route.kind == "GRPCRoute" && policy.upstream == UpstreamProtocol::Http1 {
        // gRPC needs HTTP/2; a Service port that says nothing is spoken to in h2c.
        policy = Arc::new(RoutePolicy {
            upstream: UpstreamProtocol::H2c,
            ..RoutePolicy::clone(&policy)
        });
    }
    Ok(WeightedBackend {
        backend: sinks.builder.backend_index(&resolved.id),
        weight,
        policy,
        telemetry: Default::default(),
    })
}

/// Resolves a route's reference to a Service port (kind, ReferenceGrant, port, presence) and
/// adds its backend to the table; or the `ResolvedRefs` reason and message.
pub(super) fn resolve_service_ref<'s>(
    route: RouteRef<'_>,
    target: &BackendObjectReference,
    field: BackendField,
    inputs: &GatewayInputs<'s>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Result<Resolved<'s>, (&'static str, String)> {
    let core = target.group.as_deref().unwrap_or("").is_empty();
    let kind = target.kind.as_deref().unwrap_or("Service");
    if !core || kind != "Service" {
        return Err((
            "InvalidKind",
            format!("backendRef kind {kind} is not a Service"),
        ));
    }
    let (kind_of_route, route) = (route.kind, route.key);
    let namespace = target.namespace.as_deref().unwrap_or(&route.namespace);
    let from = GrantFrom {
        kind: kind_of_route,
        namespace: &route.namespace,
    };
    if namespace != route.namespace
        && !granted(inputs.snapshot, from, ("Service", namespace, &target.name))
    {
        let message = format!(
            "no ReferenceGrant in {namespace} lets {kind_of_route}s of {} use Service {}",
            route.namespace, target.name
        );
        return Err(("RefNotPermitted", message));
    }
    let Some(port) = target.port else {
        let message = format!("backendRef to Service {} needs a port", target.name);
        return Err(("UnsupportedValue", message));
    };
    if inputs.services.get(namespace, &target.name).is_none() {
        let message = format!("Service {namespace}/{} not found", target.name);
        return Err(("BackendNotFound", message));
    }
    let service = IngressServiceBackend {
        name: target.name.clone(),
        port: Some(ServiceBackendPort {
            number: Some(i32::from(port)),
            name: None,
        }),
    };
    let service_reference = ServiceReference {
        namespace,
        service: &service,
        field,
        ingress: route,
        owner_kind: kind_of_route,
        service_upstream: false,
    };
    let sink = BackendSink {
        builder: sinks.builder,
        endpoint_sources: sinks.endpoint_sources,
        diagnostics: sinks.diagnostics,
    };
    resolve(inputs.services, inputs.endpoints, &service_reference, sink).ok_or_else(|| {
        let message = format!("Service {namespace}/{} has no such port", target.name);
        ("BackendNotFound", message)
    })
}

/// The policy of a rule (or of one of its backendRefs): its filters, CORS and settings.
pub(super) fn policy_of(
    set: FilterSet<'_>,
    settings: &RuleSettings,
    route: RouteRef<'_>,
    inputs: &GatewayInputs<'_>,
    sinks: (
        &mut GatewaySinks<'_, '_>,
        &mut Option<(&'static str, String)>,
    ),
) -> Arc<RoutePolicy> {
    let cors = set.cors.clone();
    let edits = set.filters.clone();
    let mirrors = resolve_mirrors(set, route, inputs, sinks);
    Arc::new(RoutePolicy {
        edits,
        mirrors,
        upstream_failure_status: UpstreamFailureStatus::ServiceUnavailable,
        cors,
        retry: settings.retry.clone(),
        timeouts: settings.timeouts,
        session: settings.session.clone(),
        ..RoutePolicy::default()
    })
}

/// The mirrors of the filters, their backends resolved; a mirror that does not resolve is
/// left out (the route's `ResolvedRefs` says why) and the rule is served without it.
pub(super) fn resolve_mirrors(
    set: FilterSet<'_>,
    route: RouteRef<'_>,
    inputs: &GatewayInputs<'_>,
    (sinks, unresolved): (
        &mut GatewaySinks<'_, '_>,
        &mut Option<(&'static str, String)>,
    ),
) -> Vec<Mirror> {
    let FilterSet { mirrors, .. } = set;
    let mut resolved_mirrors = Vec::new();
    let object = route.object();
    for mirror in mirrors {
        let field = BackendField::Mirror;
        match resolve_service_ref(route, mirror.backend, field, inputs, sinks) {
            Ok(resolved) => resolved_mirrors.push(Mirror::Backend {
                index: sinks.builder.backend_index(&resolved.id),
                backend: resolved.id,
                numerator: mirror.numerator,
                denominator: mirror.denominator,
            }),
            Err((reason, message)) => {
                sinks.diagnostics.error(
                    &object,
                    &mirror.field,
                    format!("{message}; requests are not mirrored there"),
                );
                unresolved.get_or_insert((reason, message));
            }
        }
    }
    resolved_mirrors
}
