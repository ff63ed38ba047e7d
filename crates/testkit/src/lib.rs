//! Real things on loopback for tests and the demo: echo backends that answer with their name, a raw backend that reports requests byte for byte, an oauth2-proxy-like auth service, HTTP clients, streaming bodies and a load generator.

mod auth;
mod body;
mod client;
mod echo;
mod listener;
mod load;
mod raw;
mod tls;

pub use auth::{
    start_auth_service, start_forward_auth_server, FORWARD_AUTH_COOKIE, SESSION_COOKIE,
};
pub use body::{pattern, PatternBody, PausingBody, PATTERN_CHUNK};
pub use client::{get, h2_send, h2c_client, http_client, send, Reply, TestBody};
pub use echo::{EchoBackend, EchoError};
pub use load::{LoadReport, LoadRun};
pub use raw::{RawBackend, RawBackendOptions, RawRequest};
pub use tls::{IssuedPem, TestCa, Validity};
