//! The routing table: an immutable, comparable map from host and path to a backend whose endpoints swap on their own.
//!
//! Words used throughout: a **route** (host + path match) leads to a **backend** (a Service
//! port, or its ClusterIP), which holds **endpoints** (pod addresses). The table is built once
//! by the compiler, published atomically, and only read by the data plane.

mod access;
mod attached;
mod backend;
mod canary;
mod compression;
mod gateway;
mod host;
pub mod middleware;
mod normalize;
mod path;
mod policy;
mod table;
mod tls;
mod variable;
mod view;

pub use access::{AccessControl, AuthCache, BasicAuth, ExternalAuth};
pub use attached::Attached;
pub use backend::{
    stable_hash, Backend, BackendId, BackendIndex, BackendMode, Condition, Endpoint, EndpointCell,
    EndpointSet,
};
pub use canary::CanaryRule;
pub use compression::{Coding, Codings, Compression};
pub use gateway::{
    GatewayOutcome, GatewayRule, GatewaySocket, GatewaySockets, GatewaySocketsBuilder, HostPattern,
    RequestFacts, RequestMatch, RuleAction, RulePrecedence, ServedListener, SocketProtocol,
    TlsMode, Transport, ValueCondition, WeightedBackend,
};
pub use host::{normalize_request_host, HostMatch};
pub use normalize::{normalize_path, PathError};
pub use path::{PathKind, PathMatch};
pub use policy::{
    Balancer, Cors, CorsRules, ErrorPages, HashKey, HeaderChanges, Listeners, Mirror,
    OriginPattern, PathChange, PathRewrite, RateLimits, Redirect, RedirectTo, RequestEdits,
    RetryOn, RetryPolicy, RoutePolicy, RouteTracing, SameSite, SessionAffinity, SourceRanges,
    SourceVerdict, StickyCookie, SubjectName, TlsPolicy, UpstreamFailureStatus, UpstreamProtocol,
    UpstreamTimeouts, UpstreamTls,
};
pub use table::{Canary, CanaryRoute, GatewayMiss, Route, RoutingTable, TableBuilder, Target};
pub use tls::{Certificate, ClientAuth, TlsHosts, TlsSite, VerifyClient};
pub use variable::Variable;
pub use view::{BackendView, CanaryView, GatewayListenerView, RouteView, TableView};
