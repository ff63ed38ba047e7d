//! Real things on loopback for tests and the demo: echo backends that answer with their name, HTTP clients, streaming bodies and a load generator.

mod body;
mod client;
mod echo;
mod load;

pub use body::{PatternBody, PATTERN_CHUNK};
pub use client::{get, h2c_client, http_client, send, Reply};
pub use echo::{EchoBackend, EchoError};
pub use load::{LoadReport, LoadRun};
