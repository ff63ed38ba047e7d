//! Ingress status: the address to publish, which served Ingresses need it written, and the PATCH that writes it — only on change, only on the leader.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerIngress};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use sluice_config::{ObjectKey, Snapshot};
use tokio::sync::watch;

/// Where the address written into `status.loadBalancer.ingress` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishTarget {
    /// `--publish-service NS/NAME`: that Service's load-balancer ingress, else its ClusterIP.
    Service(ObjectKey),
    /// `--publish-address IP|HOSTNAME`.
    Address(String),
}

/// Status writes still to be made: the address, and the served Ingresses that do not show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusWork {
    pub address: Vec<IngressLoadBalancerIngress>,
    pub ingresses: Vec<ObjectKey>,
}

impl StatusWork {
    /// The writes needed to make every served Ingress show the target's address; `None` when
    /// the address is unknown (e.g. the publish Service is not there yet).
    pub fn pending(
        target: &PublishTarget,
        snapshot: &Snapshot,
        served: &[ObjectKey],
    ) -> Option<Self> {
        let address = desired_load_balancer(target, snapshot)?;
        let ingresses = served
            .iter()
            .filter(|key| {
                snapshot
                    .ingresses
                    .get(*key)
                    .is_some_and(|ingress| current_load_balancer(ingress) != address.as_slice())
            })
            .cloned()
            .collect();
        Some(Self { address, ingresses })
    }
}

fn current_load_balancer(ingress: &Ingress) -> &[IngressLoadBalancerIngress] {
    ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

/// The load-balancer entries the target stands for.
pub fn desired_load_balancer(
    target: &PublishTarget,
    snapshot: &Snapshot,
) -> Option<Vec<IngressLoadBalancerIngress>> {
    match target {
        PublishTarget::Address(address) => Some(vec![entry(address)]),
        PublishTarget::Service(key) => {
            let service = snapshot.services.get(key)?;
            let balancers: Vec<IngressLoadBalancerIngress> = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_deref())
                .unwrap_or_default()
                .iter()
                .map(|lb| IngressLoadBalancerIngress {
                    ip: lb.ip.clone(),
                    hostname: lb.hostname.clone(),
                    ports: None,
                })
                .collect();
            if !balancers.is_empty() {
                return Some(balancers);
            }
            let cluster_ip = service.spec.as_ref()?.cluster_ip.as_deref()?;
            (!cluster_ip.is_empty() && cluster_ip != "None").then(|| vec![entry(cluster_ip)])
        }
    }
}

fn entry(address: &str) -> IngressLoadBalancerIngress {
    let is_ip = address.parse::<IpAddr>().is_ok();
    IngressLoadBalancerIngress {
        ip: is_ip.then(|| address.to_owned()),
        hostname: (!is_ip).then(|| address.to_owned()),
        ports: None,
    }
}

/// The JSON merge patch for the status subresource.
pub fn status_patch(address: &[IngressLoadBalancerIngress]) -> serde_json::Value {
    serde_json::json!({ "status": { "loadBalancer": { "ingress": address } } })
}

/// Writes the pending statuses, one merge PATCH of `ingresses/status` per Ingress.
pub async fn write_statuses(client: &Client, work: &StatusWork) -> Result<(), kube::Error> {
    let patch = status_patch(&work.address);
    for key in &work.ingresses {
        let api: Api<Ingress> = Api::namespaced(client.clone(), &key.namespace);
        api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(ingress = %format!("{}/{}", key.namespace, key.name), "wrote Ingress status");
    }
    Ok(())
}

/// Writes status whenever new work arrives and this replica leads; retries failures after a pause.
/// Ends when the work channel closes. A closed leader channel keeps its last value.
pub async fn run_status_writer(
    client: Client,
    mut work: watch::Receiver<Option<StatusWork>>,
    mut leader: watch::Receiver<bool>,
) {
    let mut leader_open = true;
    loop {
        let pending = work.borrow_and_update().clone();
        let leading = *leader.borrow_and_update();
        let mut retry = false;
        if let (true, Some(pending)) = (leading, pending) {
            if !pending.ingresses.is_empty() {
                if let Err(error) = write_statuses(&client, &pending).await {
                    tracing::warn!(%error, "writing Ingress status failed; retrying");
                    retry = true;
                }
            }
        }
        let pause = tokio::time::sleep(Duration::from_secs(if retry { 2 } else { 3600 }));
        tokio::select! {
            changed = work.changed() => if changed.is_err() { return },
            changed = leader.changed(), if leader_open => leader_open = changed.is_ok(),
            () = pause => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, Service, ServiceSpec, ServiceStatus,
    };
    use k8s_openapi::api::networking::v1::{IngressLoadBalancerStatus, IngressStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::client::Body;
    use sluice_config::KubeObject;

    fn ingress(name: &str, address: Option<&str>) -> KubeObject {
        KubeObject::Ingress(Ingress {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            status: address.map(|a| IngressStatus {
                load_balancer: Some(IngressLoadBalancerStatus {
                    ingress: Some(vec![entry(a)]),
                }),
            }),
            ..Ingress::default()
        })
    }

    fn publish_service(cluster_ip: &str, balancer: Option<&str>) -> KubeObject {
        KubeObject::Service(Service {
            metadata: ObjectMeta {
                name: Some("sluice".into()),
                namespace: Some("sluice-system".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                ..ServiceSpec::default()
            }),
            status: balancer.map(|ip| ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some(ip.into()),
                        ..LoadBalancerIngress::default()
                    }]),
                }),
                ..ServiceStatus::default()
            }),
        })
    }

    fn target() -> PublishTarget {
        PublishTarget::Service(ObjectKey::new("sluice-system", "sluice"))
    }

    #[test]
    fn publish_service_prefers_the_load_balancer_then_the_cluster_ip() {
        let snapshot = Snapshot::from_objects([publish_service("10.96.0.7", None)]);
        assert_eq!(
            desired_load_balancer(&target(), &snapshot),
            Some(vec![entry("10.96.0.7")])
        );
        let snapshot = Snapshot::from_objects([publish_service("10.96.0.7", Some("203.0.113.9"))]);
        assert_eq!(
            desired_load_balancer(&target(), &snapshot),
            Some(vec![entry("203.0.113.9")])
        );
        assert_eq!(desired_load_balancer(&target(), &Snapshot::default()), None);
    }

    #[test]
    fn publish_address_is_an_ip_or_a_hostname() {
        let snapshot = Snapshot::default();
        let ip = desired_load_balancer(&PublishTarget::Address("198.51.100.1".into()), &snapshot)
            .unwrap();
        assert_eq!(ip[0].ip.as_deref(), Some("198.51.100.1"));
        let host =
            desired_load_balancer(&PublishTarget::Address("lb.example.com".into()), &snapshot)
                .unwrap();
        assert_eq!(host[0].hostname.as_deref(), Some("lb.example.com"));
    }

    #[test]
    fn only_ingresses_whose_status_differs_need_a_write() {
        let snapshot = Snapshot::from_objects([
            publish_service("10.96.0.7", None),
            ingress("done", Some("10.96.0.7")),
            ingress("stale", Some("10.0.0.1")),
            ingress("new", None),
        ]);
        let served = [
            ObjectKey::new("shop", "done"),
            ObjectKey::new("shop", "stale"),
            ObjectKey::new("shop", "new"),
        ];
        let work = StatusWork::pending(&target(), &snapshot, &served).unwrap();
        assert_eq!(
            work.ingresses,
            [
                ObjectKey::new("shop", "stale"),
                ObjectKey::new("shop", "new")
            ]
        );
    }

    #[tokio::test]
    async fn writes_one_merge_patch_of_the_status_subresource_per_ingress() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let work = StatusWork {
            address: vec![entry("10.96.0.7")],
            ingresses: vec![
                ObjectKey::new("shop", "web"),
                ObjectKey::new("blog", "home"),
            ],
        };
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (request, respond) = handle.next_request().await.expect("a request");
                let (parts, body) = request.into_parts();
                let body: serde_json::Value =
                    serde_json::from_slice(&body.collect_bytes().await.unwrap()).unwrap();
                seen.push((
                    parts.method.to_string(),
                    parts.uri.to_string(),
                    parts.headers["content-type"].to_str().unwrap().to_owned(),
                    body,
                ));
                let KubeObject::Ingress(reply) = ingress("x", Some("10.96.0.7")) else {
                    unreachable!()
                };
                respond.send_response(Response::new(Body::from(
                    serde_json::to_vec(&reply).unwrap(),
                )));
            }
            seen
        });
        write_statuses(&client, &work).await.unwrap();
        let seen = server.await.unwrap();
        let expected_body =
            serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.96.0.7"}]}}});
        assert_eq!(seen[0].0, "PATCH");
        assert_eq!(
            seen[0].1,
            "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web/status?"
        );
        assert_eq!(seen[0].2, "application/merge-patch+json");
        assert_eq!(seen[0].3, expected_body);
        assert_eq!(
            seen[1].1,
            "/apis/networking.k8s.io/v1/namespaces/blog/ingresses/home/status?"
        );
        assert_eq!(seen[1].3, expected_body);
    }
}
