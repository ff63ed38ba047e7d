//! Command-line interface: `serve`, `check` and `demo`, with their flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sluice_config::CompileOptions;
use sluice_proxy::UpstreamOptions;

use crate::serve::ServeConfig;

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
    Serve(ServeArgs),
    /// Parse and compile manifests, print the route table and every diagnostic; exit 1 on errors.
    Check(CheckArgs),
    /// Run a complete example: three demo pods, a ClusterIP, manifests, and sluice on 127.0.0.1:8080.
    Demo(DemoArgs),
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
    /// On shutdown, how long to let requests in flight finish.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub drain_timeout: Duration,
}

impl ProxyArgs {
    pub fn upstream_options(&self) -> UpstreamOptions {
        UpstreamOptions {
            connect_timeout: self.connect_timeout,
            response_header_timeout: self.response_header_timeout,
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory of Kubernetes manifests (*.yaml, *.yml, *.json), watched for changes.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// Address the proxy listens on.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Address of the admin listener (/healthz, /readyz, /api/routes).
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub admin: SocketAddr,
    #[command(flatten)]
    pub class: ClassArgs,
    #[command(flatten)]
    pub proxy: ProxyArgs,
}

impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        ServeConfig {
            compile: self.class.compile_options(),
            upstream: self.proxy.upstream_options(),
            drain_timeout: self.proxy.drain_timeout,
            manifests: self.manifests,
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
}
