//! Gateway API: the objects sluice reads (`gateway.networking.k8s.io`), their rule parts in the data plane's terms, and the status sluice computes for them.

pub(crate) mod grpc;
pub(crate) mod rules;
pub mod status;
mod types;

pub use types::*;
