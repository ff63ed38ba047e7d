//! The filters layer: the filter contract, the registry that builds a route's chain from its policy, and one file per filter; it may use `upstream`, `telemetry` and the crate's bottom, never `request` or `server`.
//!
//! Adding a filter: write `filters/<name>.rs` with a type that implements
//! `contract::Filter` for the hooks it needs, keep its per-request state in
//! `contract::Slots` and its per-policy state through `services::Services::state`, and add one line to
//! `registry::Filters::build` where it belongs in the order. The compiler sets the policy field it
//! reads; the phase driver does not change.

pub(crate) mod access;
pub(crate) mod compression;
pub(crate) mod contract;
pub(crate) mod cors;
pub(crate) mod error_pages;
pub(crate) mod external_auth;
pub(crate) mod fail_closed;
pub(crate) mod grant;
pub(crate) mod header_edits;
pub(crate) mod hsts;
pub(crate) mod limits;
pub(crate) mod mirror;
pub(crate) mod passwords;
pub(crate) mod redirect;
pub(crate) mod registry;
pub(crate) mod services;
pub(crate) mod session;
pub(crate) mod source_ranges;
pub(crate) mod template;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod traefik;
