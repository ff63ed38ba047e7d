//! Gateway API listeners as the data plane reads them: per bound socket, listeners by hostname, route rules by host in precedence order, and weighted backend choices.
//!
//! A request that arrives on a Gateway listener's socket is matched in three steps:
//! 1. the listener: among the listeners sharing the socket, the one whose hostname matches
//!    the request's host most specifically (exact, then the longest wildcard, then none);
//! 2. the rule: among that listener's rules whose hostname matches (again most specific
//!    first), the first in the HTTPRoute precedence order whose path, method, headers and
//!    query parameters all match ([`RulePrecedence`]);
//! 3. the backend: one of the rule's backendRefs, by weight. A backendRef that could not be
//!    resolved keeps its share of the traffic and answers 500, as the spec requires.

use std::cmp::Reverse;
use std::net::SocketAddr;
use std::sync::Arc;

use hashbrown::HashMap;
use http::{HeaderMap, Method};

use crate::attached::Attached;
use crate::backend::BackendIndex;
use crate::path::PathMatch;
use crate::policy::RoutePolicy;
use crate::tls::TlsSite;

/// A Gateway API hostname: a listener's or a route's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// No hostname: every host.
    Any,
    /// One name, lowercase.
    Exact(Arc<str>),
    /// `*.example.com`, kept as `.example.com`: one or more labels before the suffix.
    Wildcard(Arc<str>),
}

impl HostPattern {
    /// Reads a hostname as the spec writes it (`foo.example.com`, `*.example.com`).
    pub fn parse(hostname: Option<&str>) -> Self {
        match hostname.map(str::trim) {
            None | Some("") => Self::Any,
            Some(name) => {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix('*') {
                    Some(suffix) => Self::Wildcard(suffix.into()),
                    None => Self::Exact(name.into()),
                }
            }
        }
    }

    /// Whether a normalised request host matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(name) => **name == *host,
            Self::Wildcard(suffix) => host.len() > suffix.len() && host.ends_with(&**suffix),
        }
    }

    /// The hostnames both this listener hostname and a route hostname `route` match, as the
    /// hostname the route is served under on the listener; `None` when they share none.
    pub fn intersect(&self, route: &Self) -> Option<Self> {
        match (self, route) {
            (Self::Any, other) | (other, Self::Any) => Some(other.clone()),
            (Self::Exact(a), Self::Exact(b)) => (a == b).then(|| self.clone()),
            (Self::Wildcard(_), Self::Exact(name)) => self.matches(name).then(|| route.clone()),
            (Self::Exact(name), Self::Wildcard(_)) => route.matches(name).then(|| self.clone()),
            (Self::Wildcard(a), Self::Wildcard(b)) => {
                if a.ends_with(&**b) {
                    Some(self.clone())
                } else if b.ends_with(&**a) {
                    Some(route.clone())
                } else {
                    None
                }
            }
        }
    }

    /// Sort key: exact names first, then wildcards with the longest suffix, then no hostname.
    fn specificity(&self) -> (u8, Reverse<usize>) {
        match self {
            Self::Exact(name) => (0, Reverse(name.len())),
            Self::Wildcard(suffix) => (1, Reverse(suffix.len())),
            Self::Any => (2, Reverse(0)),
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Exact(name) => f.write_str(name),
            Self::Wildcard(suffix) => write!(f, "*{suffix}"),
        }
    }
}

/// A header or query parameter value condition.
#[derive(Clone, Debug)]
pub enum ValueCondition {
    Exact(String),
    /// Matched against the whole value.
    Regex(Arc<regex::Regex>),
}

impl ValueCondition {
    /// A `RegularExpression` match: the pattern must match the whole value (as Envoy's
    /// `safe_regex` does, which the conformance suite was written against).
    pub fn regex(pattern: &str) -> Result<Self, regex::Error> {
        let compiled = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(1 << 20)
            .build()?;
        Ok(Self::Regex(Arc::new(compiled)))
    }

    pub fn matches(&self, value: &[u8]) -> bool {
        match self {
            Self::Exact(expected) => expected.as_bytes() == value,
            Self::Regex(regex) => std::str::from_utf8(value).is_ok_and(|v| regex.is_match(v)),
        }
    }
}

impl PartialEq for ValueCondition {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Eq for ValueCondition {}

/// What one HTTPRoute match asks of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestMatch {
    pub path: PathMatch,
    pub method: Option<Method>,
    /// Header names are case-insensitive; any of the request's values may match.
    pub headers: Vec<(http::HeaderName, ValueCondition)>,
    /// Parameter names are case-sensitive; the first occurrence in the query is compared.
    pub query: Vec<(String, ValueCondition)>,
}

impl RequestMatch {
    pub fn matches(&self, request: &RequestFacts<'_>) -> bool {
        self.path.matches(request.path)
            && self.method.as_ref().is_none_or(|m| m == request.method)
            && self.headers.iter().all(|(name, condition)| {
                request
                    .headers
                    .get_all(name)
                    .iter()
                    .any(|value| condition.matches(value.as_bytes()))
            })
            && self.query.iter().all(|(name, condition)| {
                query_value(request.query, name).is_some_and(|v| condition.matches(v.as_bytes()))
            })
    }
}

/// The first value of parameter `name` in a query string (`a=1&b=2`), as sent.
fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then_some(value)
    })
}

/// What a rule lookup reads from a request.
#[derive(Clone, Copy, Debug)]
pub struct RequestFacts<'r> {
    pub method: &'r Method,
    /// Without the query string.
    pub path: &'r str,
    pub query: Option<&'r str>,
    pub headers: &'r HeaderMap,
}

/// The HTTPRoute precedence of one match, smallest first: an Exact path, then the longest
/// prefix (regular expressions after prefixes, longest first), then a method, then more
/// header matches, then more query matches, then the route's age rank (oldest first, then by
/// `namespace/name`, as the compiler orders routes), then the rule's and the match's place in
/// the route.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RulePrecedence {
    path_kind: u8,
    path_length: Reverse<usize>,
    no_method: bool,
    headers: Reverse<usize>,
    query: Reverse<usize>,
    age_rank: usize,
    rule: usize,
    matched: usize,
}

impl RulePrecedence {
    /// The precedence of `request_match`, match `matched` of rule `rule` of the route whose
    /// place in the compiler's oldest-first order is `age_rank`.
    pub fn of(
        request_match: &RequestMatch,
        age_rank: usize,
        (rule, matched): (usize, usize),
    ) -> Self {
        let path_kind = match request_match.path.kind() {
            crate::PathKind::Exact => 0,
            crate::PathKind::Prefix => 1,
            crate::PathKind::Regex => 2,
        };
        Self {
            path_kind,
            path_length: Reverse(request_match.path.path().len()),
            no_method: request_match.method.is_none(),
            headers: Reverse(request_match.headers.len()),
            query: Reverse(request_match.query.len()),
            age_rank,
            rule,
            matched,
        }
    }
}

/// One backendRef of a rule: where it sends (or `None` when it could not be resolved and
/// answers 500), its weight, and the policy of requests sent through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedBackend {
    pub backend: Option<BackendIndex>,
    pub weight: u32,
    pub policy: Arc<RoutePolicy>,
    pub telemetry: Attached,
}

/// What a rule does with a request it matched: one of its backendRefs, by weight (a rule
/// with none answers 500; the compiler gives a redirect-only rule a backend to stand on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleAction {
    pub choices: Vec<WeightedBackend>,
}

impl RuleAction {
    /// Picks a backendRef by weight; `draw(total)` returns a number in `1..=total`. `None`
    /// when the rule has no backendRef with a weight above zero.
    pub fn choose(&self, draw: impl FnOnce(u32) -> u32) -> Option<&WeightedBackend> {
        let total: u32 = self.choices.iter().map(|c| c.weight).sum();
        if total == 0 {
            return None;
        }
        if let [only] = self.choices.as_slice() {
            return Some(only);
        }
        let mut ticket = draw(total);
        self.choices.iter().find(|choice| {
            if ticket <= choice.weight {
                return true;
            }
            ticket -= choice.weight;
            false
        })
    }
}

/// One match of one route rule, as a listener holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayRule {
    pub request_match: RequestMatch,
    pub precedence: RulePrecedence,
    /// The route as `namespace/name`.
    pub route: Arc<str>,
    pub action: Arc<RuleAction>,
}

/// The rules of one listener, grouped by the hostname they are served under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ListenerRules {
    exact: HashMap<Arc<str>, Vec<GatewayRule>>,
    /// Longest suffix first.
    wildcards: Vec<(Arc<str>, Vec<GatewayRule>)>,
    any: Vec<GatewayRule>,
}

impl ListenerRules {
    fn add(&mut self, host: HostPattern, rule: GatewayRule) {
        let rules = match host {
            HostPattern::Any => &mut self.any,
            HostPattern::Exact(name) => self.exact.entry(name).or_default(),
            HostPattern::Wildcard(suffix) => {
                match self.wildcards.iter().position(|(s, _)| *s == suffix) {
                    Some(at) => &mut self.wildcards[at].1,
                    None => {
                        self.wildcards.push((suffix, Vec::new()));
                        let last = self.wildcards.len() - 1;
                        &mut self.wildcards[last].1
                    }
                }
            }
        };
        rules.push(rule);
    }

    fn sort(&mut self) {
        self.wildcards
            .sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let all = self
            .exact
            .values_mut()
            .chain(self.wildcards.iter_mut().map(|(_, rules)| rules))
            .chain(std::iter::once(&mut self.any));
        for rules in all {
            rules.sort_by(|a, b| a.precedence.cmp(&b.precedence));
            rules.dedup_by(|a, b| a.precedence == b.precedence);
        }
    }

    /// The first rule served under `host` (exact name, then the longest wildcard, then any),
    /// whatever it matches: a stream has no request to match.
    fn first(&self, host: &str) -> Option<&GatewayRule> {
        if let Some(rule) = self.exact.get(host).and_then(|rules| rules.first()) {
            return Some(rule);
        }
        let wildcard = self.wildcards.iter().find_map(|(suffix, rules)| {
            let under = host.len() > suffix.len() && host.ends_with(&**suffix);
            under.then(|| rules.first()).flatten()
        });
        wildcard.or_else(|| self.any.first())
    }

    fn find(&self, host: &str, request: &RequestFacts<'_>) -> Option<&GatewayRule> {
        fn first<'r>(
            rules: &'r [GatewayRule],
            request: &RequestFacts<'_>,
        ) -> Option<&'r GatewayRule> {
            rules
                .iter()
                .find(|rule| rule.request_match.matches(request))
        }
        if let Some(rule) = self.exact.get(host).and_then(|rules| first(rules, request)) {
            return Some(rule);
        }
        let wildcard = self.wildcards.iter().find_map(|(suffix, rules)| {
            let under = host.len() > suffix.len() && host.ends_with(&**suffix);
            under.then(|| first(rules, request)).flatten()
        });
        wildcard.or_else(|| first(&self.any, request))
    }
}

/// One listener on a socket: its protocol, its hostname, its TLS site when it terminates TLS,
/// and its rules.
#[derive(Clone, Debug, PartialEq)]
struct SocketListener {
    protocol: SocketProtocol,
    hostname: HostPattern,
    site: Option<Arc<TlsSite>>,
    rules: ListenerRules,
}

/// What a Gateway socket speaks: one protocol per socket, as the listeners bound on it agree;
/// HTTPS and TLS listeners share a socket, which is then served as HTTPS and hands the
/// connections whose server name selects a TLS listener to the stream path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SocketProtocol {
    /// HTTP/1.1 and h2c.
    Http,
    /// TLS terminated before HTTP.
    Https,
    /// TLS routed by its server name (TLSRoute): each listener passes the stream through
    /// untouched, or terminates TLS (it has a site) and sends the decrypted bytes on.
    Tls,
    /// A TCP stream sent on as it is (TCPRoute).
    Tcp,
    /// UDP datagrams, per client flow (UDPRoute).
    Udp,
}

/// The transport a Gateway socket is bound with: a TCP and a UDP socket may share an address
/// and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Stream,
    Datagram,
}

impl SocketProtocol {
    /// The protocol as a Gateway listener names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "HTTP",
            Self::Https => "HTTPS",
            Self::Tls => "TLS",
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
        }
    }

    /// TCP, or UDP for a UDP listener.
    pub fn transport(self) -> Transport {
        match self {
            Self::Udp => Transport::Datagram,
            _ => Transport::Stream,
        }
    }

    /// Whether requests on the socket are HTTP (routed per request, not per connection).
    pub fn is_http(self) -> bool {
        matches!(self, Self::Http | Self::Https)
    }

    /// Whether listeners of the two protocols may share one socket: the same protocol, or
    /// HTTPS and TLS, which the ClientHello's server name tells apart before any byte is
    /// answered.
    pub fn shares_socket_with(self, other: Self) -> bool {
        let tls = |protocol| matches!(protocol, Self::Https | Self::Tls);
        self == other || (tls(self) && tls(other))
    }

    /// The protocol a socket is served with when listeners of `self` and `other` share it:
    /// HTTPS when either is (its server reads the ClientHello and hands TLS listeners' names
    /// on), the protocol itself otherwise.
    fn merged_with(self, other: Self) -> Self {
        match (self, other) {
            (Self::Https, _) | (_, Self::Https) => Self::Https,
            _ => self,
        }
    }
}

/// How a TLS socket's listener treats a connection whose server name selected it.
#[derive(Debug)]
pub enum TlsMode<'t> {
    /// The TLS stream goes to the backend untouched.
    Passthrough,
    /// TLS ends here with the site's certificate; the decrypted stream goes on.
    Terminate(&'t Arc<TlsSite>),
}

/// Everything served on one bound address and port: the listeners merged onto it, most
/// specific hostname first.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewaySocket {
    pub protocol: SocketProtocol,
    listeners: Vec<SocketListener>,
}

/// Where a request on a Gateway socket goes.
#[derive(Debug)]
pub enum GatewayOutcome<'t> {
    /// A rule matched: its backend choice (or, for a rule without backendRefs, its own
    /// policy with no backend).
    Matched {
        rule: &'t GatewayRule,
        choice: Option<&'t WeightedBackend>,
    },
    /// No listener or no rule matched: 404.
    NoRoute,
}

/// The Gateway listeners of a table, by socket address and transport.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewaySockets(HashMap<(SocketAddr, Transport), GatewaySocket>);

impl GatewaySockets {
    /// The TLS site of the listener that a server name (or, without one, a request host)
    /// selects on an HTTPS socket; `None` serves the default certificate.
    pub fn tls_site(&self, socket: SocketAddr, host: &str) -> Option<&Arc<TlsSite>> {
        self.listener(socket, host)?.site.as_ref()
    }

    /// Which listener of the socket a host (or server name) selects, by position: two names
    /// that select different listeners must not share a TLS connection (421).
    pub fn listener_position(&self, socket: SocketAddr, host: &str) -> Option<usize> {
        self.0
            .get(&(socket, Transport::Stream))?
            .listeners
            .iter()
            .position(|listener| listener.hostname.matches(host))
    }

    /// On a TLS socket: whether the listener a server name (`""` without one) selects passes
    /// the stream through or terminates it; `None` when no listener takes the name.
    /// On an HTTPS socket shared with TLS listeners, a name that selects an HTTPS listener is
    /// `None` too: the HTTPS server terminates it.
    pub fn tls_mode(&self, socket: SocketAddr, server_name: &str) -> Option<TlsMode<'_>> {
        let listener = self
            .listener(socket, server_name)
            .filter(|listener| listener.protocol == SocketProtocol::Tls)?;
        Some(match &listener.site {
            Some(site) => TlsMode::Terminate(site),
            None => TlsMode::Passthrough,
        })
    }

    /// Routes a connection on a TLS or TCP socket: the first rule (in precedence order) served
    /// under the server name (`""` on TCP) on the listener it selects, and a backend by weight.
    pub fn stream_lookup(
        &self,
        socket: SocketAddr,
        server_name: &str,
        draw: impl FnOnce(u32) -> u32,
    ) -> GatewayOutcome<'_> {
        self.connection_lookup((socket, Transport::Stream), server_name, draw)
    }

    /// Routes a new client flow on a UDP socket: the first rule of its listener, and a
    /// backend by weight.
    pub fn datagram_lookup(
        &self,
        socket: SocketAddr,
        draw: impl FnOnce(u32) -> u32,
    ) -> GatewayOutcome<'_> {
        self.connection_lookup((socket, Transport::Datagram), "", draw)
    }

    /// Whether any listener on the HTTPS socket at `socket` is a TLS one: its server then
    /// keeps the ClientHello's bytes, to hand them on with the connection.
    pub fn has_tls_listeners(&self, socket: SocketAddr) -> bool {
        self.0
            .get(&(socket, Transport::Stream))
            .is_some_and(|socket| {
                let tls = |l: &SocketListener| l.protocol == SocketProtocol::Tls;
                socket.listeners.iter().any(tls)
            })
    }

    fn connection_lookup(
        &self,
        key: (SocketAddr, Transport),
        server_name: &str,
        draw: impl FnOnce(u32) -> u32,
    ) -> GatewayOutcome<'_> {
        let listener = self.0.get(&key).and_then(|socket| {
            socket
                .listeners
                .iter()
                .find(|listener| listener.hostname.matches(server_name))
                .filter(|listener| !listener.protocol.is_http())
        });
        let Some(rule) = listener.and_then(|listener| listener.rules.first(server_name)) else {
            return GatewayOutcome::NoRoute;
        };
        GatewayOutcome::Matched {
            rule,
            choice: rule.action.choose(draw),
        }
    }

    fn listener(&self, socket: SocketAddr, host: &str) -> Option<&SocketListener> {
        self.0
            .get(&(socket, Transport::Stream))?
            .listeners
            .iter()
            .find(|listener| listener.hostname.matches(host))
    }

    /// Every listener with the rules it serves, by socket and then most specific hostname
    /// first, for reports (`sluice check`, the admin API).
    pub fn served(&self) -> Vec<ServedListener<'_>> {
        let mut sockets: Vec<_> = self.0.iter().collect();
        sockets.sort_by_key(|(address, _)| **address);
        let mut served = Vec::new();
        for ((address, _), socket) in sockets {
            for listener in &socket.listeners {
                let rules = &listener.rules;
                let mut exact: Vec<_> = rules.exact.iter().collect();
                exact.sort_by(|a, b| a.0.cmp(b.0));
                let mut by_host: Vec<(String, &[GatewayRule])> = exact
                    .into_iter()
                    .map(|(host, rules)| (host.to_string(), rules.as_slice()))
                    .collect();
                by_host.extend(
                    rules
                        .wildcards
                        .iter()
                        .map(|(suffix, rules)| (format!("*{suffix}"), rules.as_slice())),
                );
                if !rules.any.is_empty() {
                    by_host.push(("*".to_owned(), rules.any.as_slice()));
                }
                served.push(ServedListener {
                    socket: *address,
                    protocol: listener.protocol,
                    hostname: &listener.hostname,
                    rules: by_host,
                });
            }
        }
        served
    }

    /// The sockets to bind, with the protocol each speaks, sorted by address.
    pub fn addresses(&self) -> Vec<(SocketAddr, SocketProtocol)> {
        let mut all: Vec<_> = self.0.iter().map(|(a, s)| (a.0, s.protocol)).collect();
        all.sort();
        all
    }

    /// Matches a request that arrived on the socket `socket` for the normalised `host`.
    pub fn lookup(
        &self,
        socket: SocketAddr,
        host: &str,
        request: &RequestFacts<'_>,
        draw: impl FnOnce(u32) -> u32,
    ) -> GatewayOutcome<'_> {
        let listener = self
            .listener(socket, host)
            .filter(|listener| listener.protocol.is_http());
        let Some(rule) = listener.and_then(|listener| listener.rules.find(host, request)) else {
            return GatewayOutcome::NoRoute;
        };
        GatewayOutcome::Matched {
            rule,
            choice: rule.action.choose(draw),
        }
    }
}

/// One listener as a report shows it: where it is bound, its hostname, and its rules by the
/// host they are served under, in precedence order.
#[derive(Debug)]
pub struct ServedListener<'t> {
    pub socket: SocketAddr,
    pub protocol: SocketProtocol,
    pub hostname: &'t HostPattern,
    pub rules: Vec<(String, &'t [GatewayRule])>,
}

/// Builds the Gateway part of a table: listeners first, then the rules attached to them.
#[derive(Debug, Default)]
pub struct GatewaySocketsBuilder {
    sockets: HashMap<(SocketAddr, Transport), GatewaySocket>,
}

impl GatewaySocketsBuilder {
    /// Adds a listener with `hostname` on `socket`, with its TLS site when it terminates TLS
    /// (HTTPS, or a TLS listener in Terminate mode); a listener already there with the same
    /// hostname, or a socket of a protocol this one cannot share, is kept (the compiler
    /// reports the conflict). Says whether it was added.
    pub fn add_listener(
        &mut self,
        (socket, protocol): (SocketAddr, SocketProtocol),
        hostname: HostPattern,
        site: Option<Arc<TlsSite>>,
    ) -> bool {
        let key = (socket, protocol.transport());
        let entry = self.sockets.entry(key).or_insert_with(|| GatewaySocket {
            protocol,
            listeners: Vec::new(),
        });
        if !entry.protocol.shares_socket_with(protocol)
            || entry.listeners.iter().any(|l| l.hostname == hostname)
        {
            return false;
        }
        entry.protocol = entry.protocol.merged_with(protocol);
        entry.listeners.push(SocketListener {
            protocol,
            hostname,
            site,
            rules: ListenerRules::default(),
        });
        true
    }

    /// Serves `rule` under `host` on the listener with `listener_host` on the socket of
    /// `protocol` at `socket`.
    pub fn add_rule(
        &mut self,
        (socket, protocol, listener_host): (SocketAddr, SocketProtocol, &HostPattern),
        host: HostPattern,
        rule: GatewayRule,
    ) {
        let key = (socket, protocol.transport());
        let listener = self.sockets.get_mut(&key).and_then(|socket| {
            socket
                .listeners
                .iter_mut()
                .find(|l| l.hostname == *listener_host)
        });
        if let Some(listener) = listener {
            listener.rules.add(host, rule);
        }
    }

    pub fn build(mut self) -> GatewaySockets {
        for socket in self.sockets.values_mut() {
            socket
                .listeners
                .sort_by_key(|listener| listener.hostname.specificity());
            for listener in &mut socket.listeners {
                listener.rules.sort();
            }
        }
        GatewaySockets(self.sockets)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pattern(text: &str) -> HostPattern {
        HostPattern::parse(Some(text))
    }

    #[test]
    fn wildcards_match_one_or_more_labels_but_not_the_suffix_itself() {
        let wildcard = pattern("*.example.com");
        assert!(wildcard.matches("a.example.com"));
        assert!(wildcard.matches("a.b.example.com"));
        assert!(!wildcard.matches("example.com"));
        assert!(!wildcard.matches("aexample.com"));
    }

    #[test]
    fn hostnames_intersect_as_the_spec_says() {
        let cases = [
            ("*.example.com", "foo.example.com", Some("foo.example.com")),
            ("foo.example.com", "*.example.com", Some("foo.example.com")),
            (
                "*.example.com",
                "*.foo.example.com",
                Some("*.foo.example.com"),
            ),
            (
                "*.foo.example.com",
                "*.example.com",
                Some("*.foo.example.com"),
            ),
            ("foo.example.com", "bar.example.com", None),
            ("*.example.com", "example.com", None),
            ("*.example.com", "*.example.net", None),
        ];
        for (listener, route, expected) in cases {
            let got = pattern(listener).intersect(&pattern(route));
            assert_eq!(got, expected.map(pattern), "{listener} ∩ {route}");
        }
        assert_eq!(
            HostPattern::Any.intersect(&pattern("a.b")),
            Some(pattern("a.b"))
        );
    }

    fn request_match(path: PathMatch) -> RequestMatch {
        RequestMatch {
            path,
            method: None,
            headers: Vec::new(),
            query: Vec::new(),
        }
    }

    fn precedence(m: &RequestMatch, age_rank: usize, rule: usize) -> RulePrecedence {
        RulePrecedence::of(m, age_rank, (rule, 0))
    }

    #[test]
    fn precedence_orders_path_then_method_headers_query_age_rule() {
        let exact = request_match(PathMatch::exact("/a"));
        let long = request_match(PathMatch::prefix("/a/b"));
        let short = request_match(PathMatch::prefix("/a"));
        let mut with_method = request_match(PathMatch::prefix("/a"));
        with_method.method = Some(Method::POST);
        let mut with_header = request_match(PathMatch::prefix("/a"));
        with_header.headers = vec![(
            http::HeaderName::from_static("x"),
            ValueCondition::Exact("1".into()),
        )];
        let mut with_query = request_match(PathMatch::prefix("/a"));
        with_query.query = vec![("q".into(), ValueCondition::Exact("1".into()))];
        let ordered = [
            precedence(&exact, 5, 9),
            precedence(&long, 5, 9),
            precedence(&with_method, 5, 9),
            precedence(&with_header, 5, 9),
            precedence(&with_query, 5, 9),
            precedence(&short, 1, 9),
            precedence(&short, 5, 0),
            precedence(&short, 5, 1),
        ];
        for pair in ordered.windows(2) {
            assert!(pair[0] < pair[1], "{:?} before {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn conditions_match_headers_any_value_and_query_first_value() {
        let mut m = request_match(PathMatch::prefix("/"));
        m.headers = vec![(
            http::HeaderName::from_static("version"),
            ValueCondition::regex("v[12]").unwrap(),
        )];
        m.query = vec![("animal".into(), ValueCondition::Exact("whale".into()))];
        let mut headers = HeaderMap::new();
        headers.append("version", "v3".parse().unwrap());
        headers.append("version", "v2".parse().unwrap());
        fn facts<'r>(query: Option<&'r str>, headers: &'r HeaderMap) -> RequestFacts<'r> {
            RequestFacts {
                method: &Method::GET,
                path: "/x",
                query,
                headers,
            }
        }
        assert!(m.matches(&facts(Some("animal=whale&animal=dolphin"), &headers)));
        assert!(!m.matches(&facts(Some("animal=dolphin&animal=whale"), &headers)));
        assert!(!m.matches(&facts(None, &headers)));
        headers.remove("version");
        headers.insert("version", "v22".parse().unwrap());
        let whole = m.matches(&facts(Some("animal=whale"), &headers));
        assert!(!whole, "regex is whole-value");
    }

    #[test]
    fn weights_split_by_ticket_and_zero_total_chooses_nothing() {
        let choice = |weight| WeightedBackend {
            backend: None,
            weight,
            policy: Arc::default(),
            telemetry: Attached::default(),
        };
        let action = RuleAction {
            choices: vec![choice(1), choice(0), choice(3)],
        };
        let weight_of = |ticket| {
            action.choose(|total| {
                assert_eq!(total, 4);
                ticket
            })
        };
        assert_eq!(weight_of(1).map(|c| c.weight), Some(1));
        assert_eq!(weight_of(2).map(|c| c.weight), Some(3));
        assert_eq!(weight_of(4).map(|c| c.weight), Some(3));
        let none = RuleAction {
            choices: vec![choice(0)],
        };
        assert!(none.choose(|_| 1).is_none());
    }
}
