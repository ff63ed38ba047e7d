//! Process logs: tracing to stderr as text or JSON, at a level set by `--log-level` or `RUST_LOG` and changed at run time through the admin listener.

use std::sync::OnceLock;

use clap::{Args, ValueEnum};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// Logging flags, accepted by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// How log lines are written to stderr.
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    pub log_format: LogFormat,
    /// The level, or a tracing filter such as `info,sluice_proxy=debug`. Defaults to
    /// `RUST_LOG`, else `info`.
    #[arg(long, global = true, value_name = "LEVEL|FILTER")]
    pub log_level: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Changes the filter of the running subscriber.
static LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Starts logging; a filter that does not parse is reported and `info` is used.
pub fn init(args: &LogArgs) {
    let text = args
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_owned());
    let (filter, problem) = match EnvFilter::try_new(&text) {
        Ok(filter) => (filter, None),
        Err(error) => (EnvFilter::new("info"), Some(error)),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let output = match args.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init();
    let _ = LEVEL.set(handle);
    if let Some(error) = problem {
        tracing::warn!(filter = %text, %error, "the log level does not parse; logging at info");
    }
}

/// Sets the filter (`debug`, `info,sluice_proxy=trace`, ...) of the running process.
pub fn set_level(text: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(text.trim())
        .map_err(|error| format!("{:?} is not a log level or filter: {error}", text.trim()))?;
    let handle = LEVEL.get().ok_or("logging is not set up")?;
    handle
        .reload(filter)
        .map_err(|error| format!("cannot change the log level: {error}"))?;
    tracing::info!(filter = %text.trim(), "log level changed");
    Ok(())
}

/// The filter in use now.
pub fn level() -> String {
    LEVEL
        .get()
        .and_then(|handle| handle.with_current(ToString::to_string).ok())
        .unwrap_or_default()
}
