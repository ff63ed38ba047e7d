//! The drill's own network namespace, where kernel DNAT of 127/8 addresses works and touches nothing outside.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::DrillError;

/// Set (to the namespace's name) in a process the drill started inside its namespace.
pub const NETNS_ENV: &str = "SLUICE_DRILL_NETNS";
const PREFIX: &str = "sluice-drill-";

static NEXT_NETNS: AtomicU32 = AtomicU32::new(0);

/// Whether this process runs inside a namespace the drill created.
pub fn inside_drill_netns() -> bool {
    std::env::var_os(NETNS_ENV).is_some()
}

/// Why nftables cannot be used here, if it cannot: it needs root, `ip` and `nft`.
pub fn nftables_unavailable() -> Option<String> {
    if effective_uid() != Some(0) {
        return Some("not running as root".to_owned());
    }
    for (program, flag) in [("ip", "-V"), ("nft", "--version")] {
        let works = Command::new(program)
            .arg(flag)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !works {
            return Some(format!("`{program}` is not installed"));
        }
    }
    None
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

/// A network namespace with loopback up; deleted when dropped.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `sluice-drill-<pid>-<n>`, after deleting namespaces left by drills that died.
    pub fn create() -> Result<Netns, DrillError> {
        delete_stale();
        let serial = NEXT_NETNS.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{}-{serial}", std::process::id());
        run_ip(&["netns", "add", &name])?;
        let netns = Netns { name };
        run_ip(&[
            "netns",
            "exec",
            &netns.name,
            "ip",
            "link",
            "set",
            "lo",
            "up",
        ])?;
        Ok(netns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `program` with `args` inside the namespace, sharing this process's stdio.
    pub fn run<I>(&self, program: &Path, args: I) -> Result<ExitStatus, DrillError>
    where
        I: IntoIterator<Item = OsString>,
    {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .arg(program)
            .args(args)
            .env(NETNS_ENV, &self.name)
            .status()
            .map_err(|source| DrillError::Spawn {
                command: format!("ip netns exec {} {}", self.name, program.display()),
                source,
            })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(error) = run_ip(&["netns", "delete", &self.name]) {
            tracing::warn!(%error, "could not delete the drill's network namespace");
        }
    }
}

/// Deletes `sluice-drill-<pid>-*` namespaces whose process is gone.
fn delete_stale() {
    let Ok(listing) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let listing = String::from_utf8_lossy(&listing.stdout);
    for name in listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            let _ = run_ip(&["netns", "delete", name]);
        }
    }
}

fn run_ip(args: &[&str]) -> Result<(), DrillError> {
    let command = format!("ip {}", args.join(" "));
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|source| DrillError::Spawn {
            command: command.clone(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    let detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Err(DrillError::Command { command, detail })
}
