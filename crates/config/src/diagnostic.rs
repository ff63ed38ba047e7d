//! Diagnostics as data: what the compiler dropped, ignored or could not resolve, and why.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::snapshot::ObjectKey;

/// How much a diagnostic matters. `sluice check` fails on any `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, nothing is lost: e.g. what service-upstream mode gives up.
    Info,
    /// Something was ignored or lost a conflict; the rest serves.
    Warning,
    /// Something does not serve as written: a dropped route, a missing Service or port.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
        })
    }
}

/// The Kubernetes object a diagnostic is about, as `Kind namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ObjectRef(String);

impl ObjectRef {
    pub fn new(kind: &str, namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(namespace) => Self(format!("{kind} {namespace}/{name}")),
            None => Self(format!("{kind} {name}")),
        }
    }

    /// `Ingress namespace/name`.
    pub fn ingress(key: &ObjectKey) -> Self {
        Self::new("Ingress", Some(&key.namespace), &key.name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One finding of the compiler: which object, which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub object: ObjectRef,
    /// The field path inside the object, e.g. `spec.rules[0].http.paths[1].backend.service.port`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity, self.object)?;
        if !self.field.is_empty() {
            write!(f, " {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Collects diagnostics for one object at a time.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    pub(crate) fn push(
        &mut self,
        severity: Severity,
        object: &ObjectRef,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Diagnostic {
            severity,
            object: object.clone(),
            field: field.into(),
            message: message.into(),
        });
    }

    pub(crate) fn error(
        &mut self,
        object: &ObjectRef,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Error, object, field, message);
    }

    pub(crate) fn warning(
        &mut self,
        object: &ObjectRef,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Warning, object, field, message);
    }

    pub(crate) fn info(
        &mut self,
        object: &ObjectRef,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Info, object, field, message);
    }

    pub(crate) fn extend_from(&mut self, diagnostics: &[Diagnostic]) {
        self.0.extend_from_slice(diagnostics);
    }

    pub(crate) fn into_vec(self) -> Vec<Diagnostic> {
        self.0
    }

    pub(crate) fn append(&mut self, mut other: Diagnostics) {
        self.0.append(&mut other.0);
    }

    /// Sorted and de-duplicated, so two compiles of the same input report the same list.
    pub(crate) fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.0.sort();
        self.0.dedup();
        self.0
    }
}
