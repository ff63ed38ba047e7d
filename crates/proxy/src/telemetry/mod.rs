//! The telemetry layer: metric families, the access log, traces and the end of the log phase; it uses nothing of the crate but `error`.

pub(crate) mod access_log;
pub(crate) mod completion;
pub(crate) mod metrics;
pub(crate) mod trace;

pub(crate) use metrics::*;
