//! The request layer: the phase driver, the route phase, inbound checks, forwarding headers, the upstream head, and the table handle; it may use `filters`, `upstream`, `telemetry` and the crate's bottom (`error`, `headers`, `connection`, `shutdown`), never `server`.

pub(crate) mod answer;
pub(crate) mod driver;
pub(crate) mod forwarded;
pub(crate) mod grpc;
pub(crate) mod inbound;
pub(crate) mod options;
pub(crate) mod respond;
pub(crate) mod route;
pub(crate) mod table_handle;
pub(crate) mod upstream_head;

use crate::error::ProxyError;
use crate::filters::contract::LocalAnswer;

/// Why a request stopped before an endpoint's answer: the proxy answered it itself, or it
/// failed.
#[derive(Debug)]
pub(crate) enum Stop {
    Answer(Box<LocalAnswer>),
    Fail(ProxyError),
}

impl From<Box<LocalAnswer>> for Stop {
    fn from(answer: Box<LocalAnswer>) -> Self {
        Self::Answer(answer)
    }
}

impl From<ProxyError> for Stop {
    fn from(error: ProxyError) -> Self {
        Self::Fail(error)
    }
}
