//! Command-line interface: `serve`, `check` and `demo`, with their flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use sluice_config::{CompileOptions, ObjectKey};
use sluice_proxy::UpstreamOptions;

use sluice_sources::kubernetes::PublishTarget;

use crate::kube_source::{KubeConfig, LeaderElection};
use crate::serve::{ServeConfig, SourceConfig};

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Kubernetes ingress controller and HTTP reverse proxy"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Ingress routes from Kubernetes manifests in a directory, reloading on change.
    Serve(Box<ServeArgs>),
    /// Parse and compile manifests, print the route table and every diagnostic; exit 1 on errors.
    Check(CheckArgs),
    /// Run a complete example: three demo pods, a ClusterIP, manifests, and sluice on 127.0.0.1:8080.
    Demo(DemoArgs),
    /// Replay a Deployment's rolling update under load through sluice and count failed requests.
    Drill(Box<sluice_drill::DrillOptions>),
}

/// Which Ingresses to serve.
#[derive(Debug, Clone, Args)]
pub struct ClassArgs {
    /// The IngressClass name to serve.
    #[arg(long, default_value = "sluice", value_name = "NAME")]
    pub ingress_class: String,
    /// Also serve Ingresses that name no class.
    #[arg(long)]
    pub watch_ingress_without_class: bool,
}

impl ClassArgs {
    pub fn compile_options(&self) -> CompileOptions {
        CompileOptions {
            ingress_class: self.ingress_class.clone(),
            watch_without_class: self.watch_ingress_without_class,
        }
    }
}

/// Listener addresses and proxy tunables shared by `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Timeout for connecting to an endpoint (e.g. 5s, 500ms); expiry answers 504.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,
    /// Timeout for an endpoint's response headers once the request is sent; expiry answers 504.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub response_header_timeout: Duration,
    /// Secret that keys sticky-session cookie values; give every replica the same one. Without
    /// it a built-in key is used: replicas still agree, but values are not secret.
    #[arg(
        long,
        env = "SLUICE_SESSION_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub session_secret: Option<String>,
}

impl ProxyArgs {
    pub fn upstream_options(&self) -> UpstreamOptions {
        UpstreamOptions {
            connect_timeout: self.connect_timeout,
            response_header_timeout: self.response_header_timeout,
            session_secret: self.session_secret.as_ref().map(|s| s.as_bytes().to_vec()),
        }
    }
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["manifests", "kubernetes"])))]
pub struct ServeArgs {
    /// Directory of Kubernetes manifests (*.yaml, *.yml, *.json), watched for changes.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Watch the Kubernetes API (--kubeconfig when given, else in-cluster, else KUBECONFIG).
    #[arg(long)]
    pub kubernetes: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address the proxy listens on.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Address of the admin listener (/healthz, /readyz, /metrics, /api/routes, /api/status).
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub admin: SocketAddr,
    #[command(flatten)]
    pub class: ClassArgs,
    #[command(flatten)]
    pub proxy: ProxyArgs,
    /// On SIGTERM, how long /readyz answers 503 while sluice keeps serving, so load balancers
    /// stop sending before the listener closes.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,
    /// After the shutdown delay, how long requests in flight may finish before their
    /// connections are closed.
    #[arg(long, alias = "drain-timeout", default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub grace_period: Duration,
}

/// Flags of the Kubernetes source.
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Kubeconfig file to use instead of the in-cluster or default configuration.
    #[arg(long, value_name = "PATH", conflicts_with = "manifests")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (repeat for several); all namespaces by default.
    #[arg(long = "namespace", value_name = "NS", conflicts_with = "manifests")]
    pub namespaces: Vec<String>,
    /// Write this Service's load-balancer address (else its ClusterIP) into served Ingresses' status.
    #[arg(long, value_name = "NS/NAME", conflicts_with = "manifests", value_parser = parse_object_key)]
    pub publish_service: Option<ObjectKey>,
    /// Write this IP or hostname into served Ingresses' status.
    #[arg(
        long,
        value_name = "IP|HOSTNAME",
        conflicts_with = "manifests",
        conflicts_with = "publish_service"
    )]
    pub publish_address: Option<String>,
    /// Write status only while holding a coordination.k8s.io Lease (for several replicas).
    #[arg(long, conflicts_with = "manifests")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "sluice-leader", value_name = "NAME")]
    pub leader_elect_lease: String,
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NS"
    )]
    pub leader_elect_namespace: String,
    /// This replica's identity in the election (defaults to the pod name, else the host name).
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub leader_elect_identity: Option<String>,
    /// How long the Lease holds without renewal before another replica may take it over.
    #[arg(long, default_value = "15s", value_parser = parse_lease_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,
}

/// Whole seconds, at least 2 (the Lease's `leaseDurationSeconds`).
fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.as_secs() < 2 || duration.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?}: the lease duration must be whole seconds, at least 2s"
        ));
    }
    Ok(duration)
}

fn parse_object_key(text: &str) -> Result<ObjectKey, String> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(ObjectKey::new(namespace, name))
        }
        _ => Err(format!("{text:?} is not NAMESPACE/NAME")),
    }
}

impl KubeArgs {
    fn into_config(self) -> KubeConfig {
        let publish = match (self.publish_service, self.publish_address) {
            (Some(service), _) => Some(PublishTarget::Service(service)),
            (None, Some(address)) => Some(PublishTarget::Address(address)),
            (None, None) => None,
        };
        let identity = self.leader_elect_identity.unwrap_or_else(host_name);
        KubeConfig {
            kubeconfig: self.kubeconfig,
            namespaces: self.namespaces,
            publish,
            leader_election: self.leader_elect.then_some(LeaderElection {
                lease: self.leader_elect_lease,
                namespace: self.leader_elect_namespace,
                identity,
                duration: self.leader_elect_lease_duration,
            }),
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("sluice-{}", std::process::id()))
}

impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        let source = match self.manifests {
            Some(dir) => SourceConfig::Manifests(dir),
            None => SourceConfig::Kubernetes(self.kube.into_config()),
        };
        ServeConfig {
            compile: self.class.compile_options(),
            upstream: self.proxy.upstream_options(),
            shutdown_delay: self.shutdown_delay,
            grace_period: self.grace_period,
            source,
            listen: self.listen,
            admin: self.admin,
        }
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Directory of Kubernetes manifests to check.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    #[command(flatten)]
    pub class: ClassArgs,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address the demo proxy listens on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Address of the demo's admin listener.
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub admin: SocketAddr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_defaults_match_the_proxy_defaults() {
        let cli = Cli::parse_from(["sluice", "serve", "--manifests", "dir"]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(
            args.proxy.connect_timeout,
            sluice_proxy::DEFAULT_CONNECT_TIMEOUT
        );
        assert_eq!(
            args.proxy.response_header_timeout,
            sluice_proxy::DEFAULT_RESPONSE_HEADER_TIMEOUT
        );
        assert_eq!(args.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(args.admin, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(args.class.ingress_class, "sluice");
    }

    #[test]
    fn serve_needs_exactly_one_source() {
        assert!(Cli::try_parse_from(["sluice", "serve"]).is_err());
        assert!(
            Cli::try_parse_from(["sluice", "serve", "--manifests", "d", "--kubernetes"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["sluice", "serve", "--manifests", "d", "--namespace", "a"])
                .is_err(),
            "--namespace needs --kubernetes"
        );
        assert!(Cli::try_parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--namespace",
            "a",
            "--namespace",
            "b"
        ])
        .is_ok());
    }

    #[test]
    fn publish_service_must_be_namespace_slash_name() {
        assert!(Cli::try_parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--publish-service",
            "just-a-name"
        ])
        .is_err());
        let cli = Cli::parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--publish-service",
            "sluice-system/sluice",
            "--leader-elect",
        ]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let SourceConfig::Kubernetes(kube) = args.into_config().source else {
            panic!("not kubernetes")
        };
        assert_eq!(
            kube.publish,
            Some(PublishTarget::Service(ObjectKey::new(
                "sluice-system",
                "sluice"
            )))
        );
        assert_eq!(
            kube.leader_election.map(|l| l.lease).as_deref(),
            Some("sluice-leader")
        );
    }
}
