//! The routing table: an immutable, comparable map from host and path to a backend whose endpoints swap on their own.
//!
//! Words used throughout: a **route** (host + path match) leads to a **backend** (a Service
//! port, or its ClusterIP), which holds **endpoints** (pod addresses). The table is built once
//! by the compiler, published atomically, and only read by the data plane.

mod backend;
mod host;
mod path;
mod table;
mod view;

pub use backend::{Backend, BackendId, BackendMode, Endpoint, EndpointCell, EndpointSet};
pub use host::{normalize_request_host, HostMatch};
pub use path::{PathKind, PathMatch};
pub use table::{BackendIndex, Route, RoutingTable, TableBuilder};
pub use view::{BackendView, RouteView, TableView};
