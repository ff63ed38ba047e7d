//! compile(): the pure step from a snapshot of Kubernetes objects to a routing table and diagnostics.
//!
//! The files, in the order a compile uses them: `options` (what a compile is told and gives
//! back), `class` (which Ingresses this sluice serves), `ingress` (one Ingress into a
//! `fragment`, with `backend`, `policy`, `auth` and `middlewares`), `version` (what the
//! fragment read), `merge` (the fragments into the table), `tls` (certificates and TLS sites),
//! `gateway` (the Gateway API kinds), and `compiler` (the whole compile, each fragment cached
//! until its inputs change). No file imports one that comes later in its own step.

mod auth;
mod backend;
mod class;
mod compiler;
mod endpoint_cache;
mod fragment;
mod gateway;
mod ingress;
mod merge;
mod middlewares;
mod options;
mod policy;
mod tls;
mod version;

pub use backend::{
    ready_endpoints, EndpointResolver, EndpointSource, EndpointSources, SliceIndex,
    SERVICE_NAME_LABEL,
};
pub use class::CONTROLLER;
pub use compiler::Compiler;
pub use endpoint_cache::EndpointCache;
pub use gateway::{DEFAULT_GATEWAY_CONTROLLER, SUPPORTED_FEATURES};
pub use options::{CompileOptions, Compiled};
pub use tls::TLS_SECRET_TYPE;

use crate::snapshot::Snapshot;

/// Compiles a snapshot into a routing table. Pure and deterministic: no I/O, and the same
/// snapshot always gives an equal result.
pub fn compile(snapshot: &Snapshot, options: &CompileOptions) -> Compiled {
    compile_with(snapshot, options, &SliceIndex::new(snapshot))
}

/// [`compile`] with endpoint sets from `endpoints`, which must agree with the snapshot's
/// EndpointSlices (the Kubernetes source passes its cache, so a recompile re-reads no slice).
/// Every Ingress is compiled afresh; [`Compiler`] gives the same result and reuses
/// what did not change.
pub fn compile_with(
    snapshot: &Snapshot,
    options: &CompileOptions,
    endpoints: &dyn EndpointResolver,
) -> Compiled {
    Compiler::new(options.clone()).compile(snapshot, endpoints)
}
