//! Configuration: the snapshot of Kubernetes objects, manifest parsing, annotations and the pure compile step.

pub mod annotations;
mod compile;
mod diagnostic;
mod error;
pub mod gateway;
mod manifest;
pub mod migration;
mod snapshot;
pub mod traefik;

pub use compile::{
    compile, compile_with, ready_endpoints, CompileOptions, Compiled, Compiler, EndpointCache,
    EndpointResolver, EndpointSource, EndpointSources, SliceIndex, CONTROLLER,
    DEFAULT_GATEWAY_CONTROLLER, SERVICE_NAME_LABEL, SUPPORTED_FEATURES, TLS_SECRET_TYPE,
};
pub use diagnostic::{Diagnostic, ObjectRef, Severity};
pub use error::DocumentError;
pub use manifest::{gateway_api_object, middleware_object, parse_manifest, Document, Format};
pub use snapshot::{KubeObject, ObjectKey, Snapshot, DEFAULT_NAMESPACE};
