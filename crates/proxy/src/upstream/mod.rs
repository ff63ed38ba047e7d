//! The upstream layer: attempts and retries, candidates and balancers, health and ejection, the retry budget, pools, the connectors, request and response bodies, upgrades and the runtime state learnt from traffic; it may use only `telemetry` and the crate's bottom.

pub(crate) mod attempt;
pub(crate) mod balance;
pub(crate) mod budget;
pub(crate) mod connect;
pub(crate) mod hash_ring;
pub(crate) mod health;
pub(crate) mod http1;
pub(crate) mod idle;
pub(crate) mod outbound;
pub(crate) mod pool;
pub(crate) mod request_body;
pub(crate) mod response_body;
pub(crate) mod retry_buffer;
pub(crate) mod runtime;
pub(crate) mod session_key;
pub(crate) mod upgrade;
