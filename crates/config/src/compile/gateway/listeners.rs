//! Gateway listeners: each served Gateway's listeners planned into sockets, hostnames, route kinds, certificates and conditions, with conflicts on a socket resolved oldest Gateway first.

use super::frontend::{client_auth, insecure_fallback, refuse_listener, validation_for};
use super::*;
/// One listener of a served Gateway, as compiled.
pub(super) struct ListenerPlan<'a> {
    /// The Gateway whose sockets it listens on (by index).
    pub(super) gateway: usize,
    /// The ListenerSet it comes from (by index), or `None` for the Gateway's own.
    pub(super) set: Option<usize>,
    /// The namespace of the Gateway or ListenerSet (`allowedRoutes.namespaces.from: Same`).
    pub(super) namespace: &'a str,
    pub(super) listener: &'a Listener,
    pub(super) sockets: Vec<SocketAddr>,
    pub(super) hostname: HostPattern,
    /// What the listener speaks; `None` for a protocol sluice does not serve.
    pub(super) protocol: Option<SocketProtocol>,
    pub(super) kinds: Vec<RouteGroupKind>,
    pub(super) conditions: Vec<Condition>,
    pub(super) attached: u32,
    /// On an HTTPS listener and a TLS listener in Terminate mode: the certificate of its first
    /// `certificateRefs` Secret.
    pub(super) certificate: Option<Arc<Certificate>>,
    /// The Gateway's frontend client-certificate validation for the listener's port.
    pub(super) client_auth: Option<Arc<sluice_routing::ClientAuth>>,
}

impl ListenerPlan<'_> {
    /// Whether it is one of the Gateway's own listeners (not a ListenerSet's).
    pub(super) fn of_gateway(&self, index: usize) -> bool {
        self.gateway == index && self.set.is_none()
    }

    /// Whether a parentRef naming `parent` may attach a route to it.
    pub(super) fn belongs_to(&self, parent: Parent) -> bool {
        match parent {
            Parent::Gateway(index) => self.of_gateway(index),
            Parent::ListenerSet(index) => self.set == Some(index),
        }
    }

    pub(super) fn accepted(&self) -> bool {
        self.condition("Accepted")
    }

    pub(super) fn programmed(&self) -> bool {
        self.condition("Programmed")
    }

    fn condition(&self, condition_type: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.condition_type == condition_type && c.holds())
    }
}

/// Each served Gateway's listeners with their sockets and conditions, conflicts resolved in
/// Gateway order; sets each Gateway's own conditions.
pub(super) fn plan_listeners<'a>(
    (gateways, sets): (&mut [ServedGateway<'a>], &mut [ServedListenerSet<'a>]),
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Vec<ListenerPlan<'a>> {
    let mut plans = Vec::new();
    let mut claimed = ClaimedSockets::new();
    for (index, served) in gateways.iter_mut().enumerate() {
        let diagnostics = &mut *sinks.diagnostics;
        let object = ObjectRef::new("Gateway", Some(&served.key.namespace), &served.key.name);
        // Whether a listener lets clients through without a valid certificate.
        let mut insecure = false;
        let addresses = match gateway_addresses(served.gateway, inputs.default_address) {
            Ok(addresses) => addresses,
            Err(rejection) => {
                diagnostics.error(&object, rejection.field, &rejection.message);
                served.conditions = rejection.conditions();
                Vec::new()
            }
        };
        served.addresses = addresses.clone();
        for (position, listener) in served.gateway.spec.listeners.iter().enumerate() {
            let field = format!("spec.listeners[{position}]");
            let certificate = terminates_tls(listener).then(|| {
                let owner = (inputs.snapshot, served.key, "Gateway");
                listener_certificate(listener, owner, sinks.tls)
            });
            let mut plan = plan_listener(index, listener, &addresses, certificate);
            plan.namespace = &served.key.namespace;
            let validation = validation_for(served.gateway, listener);
            if let Some(validation) = validation.filter(|_| terminates_tls(listener)) {
                insecure |= insecure_fallback(validation);
                let context = (inputs.snapshot, served.key);
                match client_auth(validation, context, sinks.tls) {
                    Ok(auth) => plan.client_auth = Some(auth),
                    Err(problem) => refuse_listener(&mut plan, problem),
                }
            }
            if addresses.is_empty() {
                let message = "the Gateway is not accepted";
                let condition = Condition::new("Programmed", false, "Invalid", message);
                replace(&mut plan.conditions, condition);
            } else if plan.accepted() {
                claim_sockets(&mut plan, &mut claimed);
            }
            let troubles = plan
                .conditions
                .iter()
                .filter(|c| match c.condition_type.as_str() {
                    "Conflicted" => c.holds(),
                    "Programmed" => false,
                    _ => !c.holds(),
                });
            for condition in troubles {
                sinks.diagnostics.warning(
                    &object,
                    &field,
                    format!("{}: {}", condition.reason, condition.message),
                );
            }
            plans.push(plan);
        }
        if served.conditions.is_empty() {
            served.conditions = gateway_conditions(index, &plans);
        }
        if insecure {
            served.conditions.push(Condition::new(
                "InsecureFrontendValidationMode",
                true,
                "ConfigurationChanged",
                "a listener lets clients through without a valid certificate (AllowInsecureFallback)",
            ));
        }
    }
    for index in 0..sets.len() {
        let gateway = &gateways[sets[index].gateway];
        plan_listener_set(
            index,
            (gateway, sets),
            (&mut plans, &mut claimed),
            inputs,
            sinks,
        );
    }
    plans
}

/// Why a served Gateway is not accepted as a whole: nothing of it is bound.
pub(super) struct GatewayRejection {
    pub(super) field: &'static str,
    accepted_reason: &'static str,
    programmed_reason: &'static str,
    pub(super) message: String,
}

impl GatewayRejection {
    fn address(message: String) -> Self {
        GatewayRejection {
            field: "spec.addresses",
            accepted_reason: "UnsupportedAddress",
            programmed_reason: "AddressNotUsable",
            message,
        }
    }

    pub(super) fn conditions(&self) -> Vec<Condition> {
        vec![
            Condition::new("Accepted", false, self.accepted_reason, &self.message),
            Condition::new("Programmed", false, self.programmed_reason, &self.message),
        ]
    }
}

/// The addresses a Gateway's listeners bind: its `IPAddress` addresses, else the default; or
/// why it binds none (an address sluice cannot bind, or `infrastructure.parametersRef`,
/// since sluice takes no parameters).
pub(super) fn gateway_addresses(
    gateway: &Gateway,
    default: IpAddr,
) -> Result<Vec<IpAddr>, GatewayRejection> {
    let parameters = gateway.spec.infrastructure.as_ref();
    if let Some(parameters) = parameters.and_then(|i| i.parameters_ref.as_ref()) {
        return Err(GatewayRejection {
            field: "spec.infrastructure.parametersRef",
            accepted_reason: "InvalidParameters",
            programmed_reason: "Invalid",
            message: format!("names {parameters}; sluice takes no parameters"),
        });
    }
    let mut addresses = Vec::new();
    for address in &gateway.spec.addresses {
        let kind = address.address_type.as_deref().unwrap_or("IPAddress");
        if kind != "IPAddress" {
            return Err(GatewayRejection::address(format!(
                "address type {kind} is not supported; only IPAddress"
            )));
        }
        if address.value.is_empty() {
            continue;
        }
        let ip = address.value.parse::<IpAddr>().map_err(|_| {
            GatewayRejection::address(format!("{:?} is not an IP address", address.value))
        })?;
        addresses.push(ip);
    }
    if addresses.is_empty() {
        addresses.push(default);
    }
    Ok(addresses)
}

/// A listener's sockets, hostname, route kinds and conditions, before conflicts.
pub(super) fn plan_listener<'a>(
    gateway: usize,
    listener: &'a Listener,
    addresses: &[IpAddr],
    certificate: Option<Result<Arc<Certificate>, (&'static str, String)>>,
) -> ListenerPlan<'a> {
    let protocol = listener_protocol(listener);
    let (mut kinds, kinds_valid) = supported_kinds(listener);
    let mut conditions = Vec::new();
    let protocol_ok = protocol.is_some();
    if !protocol_ok {
        // A listener sluice cannot serve takes no route kind.
        kinds.clear();
    }
    if protocol_ok {
        conditions.push(Condition::new(
            "Accepted",
            true,
            "Accepted",
            "listener accepted",
        ));
    } else {
        let message = format!(
            "protocol {} is not supported; HTTP, HTTPS, TLS, TCP and UDP are",
            listener.protocol
        );
        conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedProtocol",
            message,
        ));
    }
    let (refs, certificate) = match certificate {
        Some(Ok(certificate)) => (Ok(()), Some(certificate)),
        Some(Err(problem)) => (Err(problem), None),
        None => (Ok(()), None),
    };
    match (&refs, kinds_valid) {
        (Err((reason, message)), _) => {
            conditions.push(Condition::new(
                "ResolvedRefs",
                false,
                reason,
                message.clone(),
            ));
        }
        (Ok(()), false) => conditions.push(Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            format!(
                "allowedRoutes.kinds names a kind a {} listener does not take",
                listener.protocol
            ),
        )),
        (Ok(()), true) => conditions.push(Condition::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "references resolved",
        )),
    }
    conditions.push(Condition::new(
        "Conflicted",
        false,
        "NoConflicts",
        "no conflict",
    ));
    let programmed = match (protocol_ok, &refs) {
        (false, _) => Condition::new("Programmed", false, "Invalid", "the listener is not valid"),
        (true, Err(_)) => Condition::new(
            "Programmed",
            false,
            "Invalid",
            "the certificate references do not resolve",
        ),
        (true, Ok(())) => Condition::new("Programmed", true, "Programmed", "listening"),
    };
    conditions.push(programmed);
    ListenerPlan {
        gateway,
        set: None,
        namespace: "",
        listener,
        sockets: addresses
            .iter()
            .map(|ip| SocketAddr::new(*ip, listener.port))
            .collect(),
        hostname: match protocol {
            // A TCP or UDP listener's hostname means nothing: neither names a host.
            Some(SocketProtocol::Tcp | SocketProtocol::Udp) => HostPattern::Any,
            _ => HostPattern::parse(listener.hostname.as_deref()),
        },
        protocol,
        kinds,
        conditions,
        attached: 0,
        certificate,
        client_auth: None,
    }
}

/// The protocol a listener names, when sluice serves it.
pub(super) fn listener_protocol(listener: &Listener) -> Option<SocketProtocol> {
    match listener.protocol.as_str() {
        "HTTP" => Some(SocketProtocol::Http),
        "HTTPS" => Some(SocketProtocol::Https),
        "TLS" => Some(SocketProtocol::Tls),
        "TCP" => Some(SocketProtocol::Tcp),
        "UDP" => Some(SocketProtocol::Udp),
        _ => None,
    }
}

/// Whether TLS ends at the listener: HTTPS, and TLS unless its mode is Passthrough (the
/// default mode is Terminate).
pub(super) fn terminates_tls(listener: &Listener) -> bool {
    let mode = listener.tls.as_ref().and_then(|tls| tls.mode.as_deref());
    match listener.protocol.as_str() {
        "HTTPS" => true,
        "TLS" => mode != Some("Passthrough"),
        _ => false,
    }
}

/// The route kinds a protocol's listener can take.
fn kinds_for(listener: &Listener) -> &'static [&'static str] {
    match listener_protocol(listener) {
        Some(SocketProtocol::Http | SocketProtocol::Https) => &["HTTPRoute", "GRPCRoute"],
        Some(SocketProtocol::Tls) => &["TLSRoute"],
        Some(SocketProtocol::Tcp) => &["TCPRoute"],
        Some(SocketProtocol::Udp) => &["UDPRoute"],
        None => &[],
    }
}

/// The route kinds a listener takes, and whether every kind it names is one sluice serves
/// on its protocol.
pub(super) fn supported_kinds(listener: &Listener) -> (Vec<RouteGroupKind>, bool) {
    let kind = |name: &str| RouteGroupKind {
        group: Some(GATEWAY_GROUP.to_owned()),
        kind: name.to_owned(),
    };
    let possible = kinds_for(listener);
    let named = listener.allowed_routes.as_ref().map(|a| &a.kinds);
    let Some(named) = named.filter(|kinds| !kinds.is_empty()) else {
        return (possible.iter().map(|k| kind(k)).collect(), true);
    };
    let served: Vec<RouteGroupKind> = named
        .iter()
        .filter(|k| {
            k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                && possible.contains(&k.kind.as_str())
        })
        .map(|k| kind(&k.kind))
        .collect();
    let all_served = served.len() == named.len();
    (served, all_served)
}

/// Checks an HTTPS listener's certificate Secrets (kind, ReferenceGrant, a certificate that
/// loads) and returns the first one's certificate, which the listener serves.
pub(super) fn listener_certificate(
    listener: &Listener,
    (snapshot, key, owner_kind): (&Snapshot, &ObjectKey, &str),
    tls: &mut TlsMerge<'_>,
) -> Result<Arc<Certificate>, (&'static str, String)> {
    let refs = listener
        .tls
        .as_ref()
        .map(|tls| tls.certificate_refs.as_slice())
        .unwrap_or_default();
    if refs.is_empty() {
        return Err((
            "InvalidCertificateRef",
            format!(
                "a {} listener that terminates TLS needs tls.certificateRefs",
                listener.protocol
            ),
        ));
    }
    for reference in refs {
        let core = reference.group.as_deref().unwrap_or("").is_empty();
        if !core || reference.kind.as_deref().unwrap_or("Secret") != "Secret" {
            return Err((
                "InvalidCertificateRef",
                format!("{} is not a Secret", reference.name),
            ));
        }
        let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
        let from = GrantFrom {
            kind: owner_kind,
            namespace: &key.namespace,
        };
        if namespace != key.namespace
            && !granted(snapshot, from, ("Secret", namespace, &reference.name))
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant in {namespace} lets {owner_kind}s of {} use Secret {}",
                    key.namespace, reference.name
                ),
            ));
        }
    }
    let mut first = None;
    for reference in refs {
        let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
        let secret = ObjectKey::new(namespace, &reference.name);
        let certificate = tls.listener_certificate(&secret).map_err(|problem| {
            let message = format!("Secret {namespace}/{}: {problem}", reference.name);
            ("InvalidCertificateRef", message)
        })?;
        first.get_or_insert(certificate);
    }
    first.ok_or(("InvalidCertificateRef", "no certificate".to_owned()))
}

/// Who listens on each socket (a TCP and a UDP socket may share an address and port):
/// protocol, hostname, and Gateway (by index).
pub(super) type ClaimedSockets =
    BTreeMap<(SocketAddr, bool), Vec<(Option<SocketProtocol>, HostPattern, usize)>>;

/// A listener socket's key among the claimed ones: its address, and whether it is UDP.
fn claim_key(socket: SocketAddr, protocol: Option<SocketProtocol>) -> (SocketAddr, bool) {
    (socket, protocol == Some(SocketProtocol::Udp))
}

/// Claims the listener's sockets and hostname; a socket another listener holds with a
/// protocol this one cannot share (HTTPS and TLS can), another listener of the same Gateway
/// with the same hostname, or one of another protocol with the same hostname, makes this one
/// Conflicted and not programmed. Listeners of different Gateways with the same address,
/// port and hostname cannot be told apart: they merge, and the socket serves the routes of
/// both.
pub(super) fn claim_sockets(plan: &mut ListenerPlan<'_>, claimed: &mut ClaimedSockets) {
    let conflict = plan.sockets.iter().find_map(|socket| {
        let holders = claimed.get(&claim_key(*socket, plan.protocol))?;
        if holders
            .iter()
            .any(|(protocol, _, _)| !shares_socket(*protocol, plan.protocol))
        {
            return Some((
                "ProtocolConflict",
                format!("{socket} is served with another protocol"),
            ));
        }
        // Listeners of different Gateways merge by hostname only when they speak the same
        // protocol: an HTTPS and a TLS listener with one hostname cannot be told apart.
        holders
            .iter()
            .any(|(protocol, host, gateway)| {
                *host == plan.hostname && (*gateway == plan.gateway || *protocol != plan.protocol)
            })
            .then(|| {
                (
                    "HostnameConflict",
                    format!(
                        "another listener serves hostname {} on {socket}",
                        plan.hostname
                    ),
                )
            })
    });
    if let Some((reason, message)) = conflict {
        let programmed = plan.programmed();
        replace(
            &mut plan.conditions,
            Condition::new("Conflicted", true, reason, message.clone()),
        );
        if programmed {
            replace(
                &mut plan.conditions,
                Condition::new("Programmed", false, "Invalid", message),
            );
        }
        return;
    }
    if plan.programmed() {
        for socket in &plan.sockets {
            let key = claim_key(*socket, plan.protocol);
            claimed.entry(key).or_default().push((
                plan.protocol,
                plan.hostname.clone(),
                plan.gateway,
            ));
        }
    }
}

/// Whether listeners of the two protocols may share a socket (see
/// [`SocketProtocol::shares_socket_with`]).
fn shares_socket(a: Option<SocketProtocol>, b: Option<SocketProtocol>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.shares_socket_with(b),
        (a, b) => a == b,
    }
}

pub(super) fn replace(conditions: &mut [Condition], condition: Condition) {
    if let Some(existing) = conditions
        .iter_mut()
        .find(|c| c.condition_type == condition.condition_type)
    {
        *existing = condition;
    }
}

/// A Gateway's conditions from its listeners: accepted while any listener is, programmed
/// while any listener is.
pub(super) fn gateway_conditions(index: usize, plans: &[ListenerPlan<'_>]) -> Vec<Condition> {
    let own: Vec<_> = plans.iter().filter(|p| p.of_gateway(index)).collect();
    let valid = own.iter().filter(|p| p.accepted()).count();
    let programmed = own.iter().any(|p| p.programmed());
    vec![
        match (valid, own.len()) {
            (valid, all) if valid == all => {
                Condition::new("Accepted", true, "Accepted", "served by sluice")
            }
            (0, _) => Condition::new(
                "Accepted",
                false,
                "ListenersNotValid",
                "no listener is valid",
            ),
            _ => Condition::new(
                "Accepted",
                true,
                "ListenersNotValid",
                "served by sluice, but some listeners are not valid",
            ),
        },
        match programmed {
            true => Condition::new("Programmed", true, "Programmed", "listening"),
            false => Condition::new("Programmed", false, "Invalid", "no listener is programmed"),
        },
    ]
}

pub(super) fn gateway_status(
    index: usize,
    served: &ServedGateway<'_>,
    (plans, sets): (&[ListenerPlan<'_>], &[ServedListenerSet<'_>]),
) -> GatewayStatus {
    let generation = served.gateway.metadata.generation;
    let attached_listener_sets = sets
        .iter()
        .filter(|set| set.gateway == index && set.accepted())
        .count();
    GatewayStatus {
        attached_listener_sets: u32::try_from(attached_listener_sets).unwrap_or(u32::MAX),
        namespace: served.key.namespace.clone(),
        name: served.key.name.clone(),
        generation,
        conditions: observed(served.conditions.clone(), generation),
        listeners: plans
            .iter()
            .filter(|plan| plan.of_gateway(index))
            .map(|plan| listener_status(plan, generation))
            .collect(),
    }
}

/// A listener's entry in its Gateway's or ListenerSet's `status.listeners`.
pub(super) fn listener_status(plan: &ListenerPlan<'_>, generation: Option<i64>) -> ListenerStatus {
    ListenerStatus {
        name: plan.listener.name.clone(),
        supported_kinds: plan.kinds.clone(),
        attached_routes: plan.attached,
        conditions: observed(plan.conditions.clone(), generation),
        sockets: plan.sockets.clone(),
    }
}
