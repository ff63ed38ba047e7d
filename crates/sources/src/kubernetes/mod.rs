//! The Kubernetes source: kube-rs watchers for the Ingress kinds and the Gateway API kinds the API server serves, feeding a cluster state that says what each event changes, and the status writers.

mod cluster;
mod gateway_status;
mod ingress_status;
mod trim;
mod watch;

pub use cluster::{ClusterState, Effect, WatchScope};
pub use gateway_status::{run_gateway_status_writer, GatewayStatusAddress, GatewayStatusSource};
pub use ingress_status::{
    desired_load_balancer, run_status_writer, status_patch, write_statuses, PublishTarget,
    StatusWork,
};
pub use watch::{
    gateway_api_resources, middleware_resources, start_watches, ServedResource, WatchEvent,
    WatchId, WatchPhase, WatchRegistry, WatchReport,
};
