//! Command-line options of `sluice drill` and the small enums they choose between.

use std::time::Duration;

use clap::{Args, ValueEnum};

/// How the proxy under test reaches the Service.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// To each pod's address, from the EndpointSlices.
    Endpoints,
    /// To the Service's ClusterIP only (`service-upstream`).
    ServiceUpstream,
    /// To the pods, falling back to the ClusterIP when no pod is ready.
    Fallback,
}

impl Mode {
    /// The name as the command line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Endpoints => "endpoints",
            Mode::ServiceUpstream => "service-upstream",
            Mode::Fallback => "fallback",
        }
    }
}

/// What a pod does when it gets SIGTERM.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Termination {
    /// Serves on until the endpoint removal has propagated, then drains and exits.
    Graceful,
    /// Closes its listener and every connection at once; responses already being written finish.
    Abrupt,
    /// Dies like SIGKILL: everything is reset, responses in progress are cut off.
    Crash,
}

impl Termination {
    /// The name as the command line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Termination::Graceful => "graceful",
            Termination::Abrupt => "abrupt",
            Termination::Crash => "crash",
        }
    }
}

/// The HTTP method the load generator sends.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "UPPER")]
pub enum Method {
    /// GET without a body.
    Get,
    /// POST with a 64-byte body.
    Post,
}

/// Which ClusterIP emulation to use in the modes that need one.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterIpChoice {
    /// nftables when running as root with `nft` and `ip`, else userspace.
    Auto,
    /// Kernel DNAT with nftables, inside a network namespace of the drill's own.
    Nftables,
    /// A TCP relay in this process.
    Userspace,
}

/// Options of one drill: the Deployment, its rollout, the load, and what counts as failure.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct DrillOptions {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub pods: u32,
    /// Requests per second, sent open-loop.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rps: u32,
    /// HTTP method of every request.
    #[arg(long, value_enum, default_value = "GET", ignore_case = true)]
    pub method: Method,
    /// How long a new pod takes to become ready.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub ready_delay: Duration,
    /// How long an endpoint change takes to reach the proxy and the ClusterIP.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub endpoint_lag: Duration,
    /// What a pod does on SIGTERM.
    #[arg(long, value_enum, default_value = "graceful")]
    pub termination: Termination,
    /// How the proxy reaches the Service.
    #[arg(long, value_enum, default_value = "endpoints")]
    pub mode: Mode,
    /// Rolling updates to run one after the other.
    #[arg(long, default_value_t = 1)]
    pub rollouts: u32,
    /// Print the report as one JSON line.
    #[arg(long)]
    pub json: bool,
    /// Exit non-zero when more than this many requests failed.
    #[arg(long)]
    pub max_failed: Option<u64>,
    /// ClusterIP emulation for service-upstream and fallback.
    #[arg(long, value_enum, default_value = "auto")]
    pub cluster_ip: ClusterIpChoice,
}

impl Default for DrillOptions {
    fn default() -> Self {
        Self {
            pods: 5,
            rps: 1000,
            method: Method::Get,
            ready_delay: Duration::from_secs(1),
            endpoint_lag: Duration::from_secs(1),
            termination: Termination::Graceful,
            mode: Mode::Endpoints,
            rollouts: 1,
            json: false,
            max_failed: None,
            cluster_ip: ClusterIpChoice::Auto,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        drill: DrillOptions,
    }

    #[test]
    fn defaults_match_the_command_line_defaults() {
        let parsed = Cli::try_parse_from(["drill"]).expect("no arguments parse");
        assert_eq!(parsed.drill, DrillOptions::default());
    }

    #[test]
    fn every_flag_parses() {
        let parsed = Cli::try_parse_from([
            "drill",
            "--pods=2",
            "--rps=50",
            "--method=post",
            "--ready-delay=100ms",
            "--endpoint-lag=2s",
            "--termination=crash",
            "--mode=service-upstream",
            "--rollouts=3",
            "--json",
            "--max-failed=0",
            "--cluster-ip=userspace",
        ])
        .expect("all flags parse");
        let drill = parsed.drill;
        assert_eq!(drill.method, Method::Post);
        assert_eq!(drill.endpoint_lag, Duration::from_secs(2));
        assert_eq!(drill.termination, Termination::Crash);
        assert_eq!(drill.mode, Mode::ServiceUpstream);
        assert_eq!(drill.max_failed, Some(0));
        assert_eq!(drill.cluster_ip, ClusterIpChoice::Userspace);
        assert!(Cli::try_parse_from(["drill", "--method=GET"]).is_ok());
        assert!(Cli::try_parse_from(["drill", "--method=PUT"]).is_err());
    }
}
