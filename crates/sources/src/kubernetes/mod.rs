//! The Kubernetes source: kube-rs watchers for the five kinds, feeding a cluster state that says what each event changes.

mod cluster;
mod ingress_status;
mod trim;
mod watch;

pub use cluster::{ClusterState, Effect, WatchScope};
pub use ingress_status::{
    desired_load_balancer, run_status_writer, status_patch, write_statuses, PublishTarget,
    StatusWork,
};
pub use watch::{start_watches, WatchEvent, WatchId, WatchRegistry, WatchReport};
