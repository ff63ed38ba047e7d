//! Gateway API: the objects sluice reads (`gateway.networking.k8s.io`), and what it says about them while it does not serve them yet.

mod types;

pub use types::*;

use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::Snapshot;

/// Every Gateway API object read gets an info saying it is not served yet, so that a manifest
/// directory or cluster with Gateways does not look served when it is not.
pub(crate) fn report_unserved(snapshot: &Snapshot, diagnostics: &mut Diagnostics) {
    const MESSAGE: &str =
        "read, but sluice does not serve Gateway API objects yet; Ingresses are served as before";
    for name in snapshot.gateway_classes.keys() {
        diagnostics.info(&ObjectRef::new("GatewayClass", None, name), "", MESSAGE);
    }
    let namespaced = snapshot
        .gateways
        .keys()
        .map(|key| ("Gateway", key))
        .chain(snapshot.http_routes.keys().map(|key| ("HTTPRoute", key)))
        .chain(snapshot.grpc_routes.keys().map(|key| ("GRPCRoute", key)));
    for (kind, key) in namespaced {
        let object = ObjectRef::new(kind, Some(&key.namespace), &key.name);
        diagnostics.info(&object, "", MESSAGE);
    }
}
