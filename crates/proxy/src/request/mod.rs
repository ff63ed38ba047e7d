//! The request layer: the phase driver, the route phase, inbound checks, forwarding headers and the table handle; it may use `filters`, `upstream`, `telemetry` and the crate's bottom (`error`, `headers`, `connection`).

pub(crate) mod driver;
pub(crate) mod forwarded;
pub(crate) mod grpc;
pub(crate) mod inbound;
pub(crate) mod options;
pub(crate) mod table_handle;
