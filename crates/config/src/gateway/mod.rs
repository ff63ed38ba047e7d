//! Gateway API: the objects sluice reads (`gateway.networking.k8s.io`).

mod types;

pub use types::*;
