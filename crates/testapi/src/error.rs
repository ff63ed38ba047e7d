//! The crate's one error type: Kubernetes API failures (carried as `Status` code and reason) and I/O.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{json, Value};

/// Everything that can go wrong in the test API server.
#[derive(Debug, thiserror::Error)]
pub enum TestApiError {
    /// A request the Kubernetes API would refuse; served to HTTP clients as a `Status` object.
    #[error("{code} {reason}: {message}")]
    Api {
        /// HTTP status code, also the Status `code`.
        code: u16,
        /// The Status `reason`, e.g. `NotFound`, `AlreadyExists`, `Conflict`.
        reason: &'static str,
        /// Human-readable message.
        message: String,
        /// The Status `details` (name, group, kind), when the failure concerns one object.
        details: Option<Value>,
    },
    /// The listener could not be bound.
    #[error("binding {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A kubeconfig could not be written.
    #[error("writing kubeconfig {path}")]
    WriteKubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A watch stream was cut by the `drop watches` fault control (the connection is aborted).
    #[error("watch stream dropped by the test API server's fault control")]
    WatchDropped,
    /// The server task is gone (the server was dropped or panicked).
    #[error("the test API server is not running")]
    NotRunning,
}

impl TestApiError {
    pub(crate) fn api(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::Api {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::api(400, "BadRequest", message)
    }

    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(plural, group);
        Self::Api {
            code: 404,
            reason: "NotFound",
            message: format!("{resource} \"{name}\" not found"),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
        }
    }

    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(plural, group);
        Self::Api {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{resource} \"{name}\" already exists"),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
        }
    }

    pub(crate) fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let resource = qualified(plural, group);
        Self::Api {
            code: 409,
            reason: "Conflict",
            message: format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
            details: Some(json!({"name": name, "group": group, "kind": plural})),
        }
    }

    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::api(410, "Expired", message)
    }

    /// The HTTP status code this error is served with.
    pub fn code(&self) -> u16 {
        match self {
            Self::Api { code, .. } => *code,
            _ => 500,
        }
    }

    /// The Kubernetes `Status.reason` this error is served with.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Api { reason, .. } => reason,
            _ => "InternalError",
        }
    }

    /// This error as a Kubernetes `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string_message(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let (
            Self::Api {
                details: Some(details),
                ..
            },
            Some(map),
        ) = (self, status.as_object_mut())
        {
            map.insert("details".into(), details.clone());
        }
        status
    }

    fn to_string_message(&self) -> String {
        match self {
            Self::Api { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// `services` or `ingresses.networking.k8s.io`, as the API server names resources in messages.
fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}
