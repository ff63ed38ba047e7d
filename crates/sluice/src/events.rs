//! Kubernetes Events for diagnostics: each diagnostic about an object becomes an events.k8s.io/v1 Event on that object, written by the leader, and a diagnostic reported again after the object changed extends the Event's series instead of creating another.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use sluice_config::{Diagnostic, ObjectKey, Severity, Snapshot};
use tokio::sync::watch;

/// The `reportingController` of sluice's Events.
pub const REPORTING_CONTROLLER: &str = "sluice.dev/ingress-controller";

/// Notes are cut to this many bytes (the API server refuses more than 1 kB).
const MAX_NOTE: usize = 1024;

/// One diagnostic as an Event would carry it, with the object it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    regarding: Regarding,
    kind: EventKind,
}

/// The object an Event is about, and its version when the diagnostic was made.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Regarding {
    api_version: &'static str,
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    resource_version: Option<String>,
}

/// What the Event says, which with the object identifies its series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKind {
    /// `Warning` or `Normal`.
    type_: &'static str,
    reason: &'static str,
    note: String,
}

/// The Events the latest compile's diagnostics call for, on objects the snapshot holds.
pub fn pending(snapshot: &Snapshot, diagnostics: &[Diagnostic]) -> Vec<Pending> {
    diagnostics
        .iter()
        .filter_map(|diagnostic| {
            let regarding = regarding(snapshot, &diagnostic.object.to_string())?;
            Some(Pending {
                regarding,
                kind: event_kind(diagnostic),
            })
        })
        .collect()
}

/// `Ingress ns/name`, `Service ns/name`, `Secret ns/name` or `IngressClass name`, found in
/// the snapshot (an object that is not there cannot carry an Event).
fn regarding(snapshot: &Snapshot, object: &str) -> Option<Regarding> {
    let (kind, rest) = object.split_once(' ')?;
    let key = |rest: &str| {
        let (namespace, name) = rest.split_once('/')?;
        Some(ObjectKey::new(namespace, name))
    };
    let (api_version, kind, metadata) = match kind {
        "Ingress" => (
            "networking.k8s.io/v1",
            "Ingress",
            &snapshot.ingresses.get(&key(rest)?)?.metadata,
        ),
        "Service" => (
            "v1",
            "Service",
            &snapshot.services.get(&key(rest)?)?.metadata,
        ),
        "Secret" => ("v1", "Secret", &snapshot.secrets.get(&key(rest)?)?.metadata),
        "IngressClass" => (
            "networking.k8s.io/v1",
            "IngressClass",
            &snapshot.ingress_classes.get(rest)?.metadata,
        ),
        _ => return None,
    };
    Some(Regarding {
        api_version,
        kind,
        namespace: metadata.namespace.clone(),
        name: metadata.name.clone()?,
        uid: metadata.uid.clone(),
        resource_version: metadata.resource_version.clone(),
    })
}

/// Type, reason and note of a diagnostic's Event.
fn event_kind(diagnostic: &Diagnostic) -> EventKind {
    let (type_, reason) = match diagnostic.severity {
        Severity::Error => ("Warning", "InvalidConfiguration"),
        Severity::Warning => ("Warning", "IgnoredConfiguration"),
        Severity::Info => ("Normal", "ConfigurationNote"),
    };
    let mut note = match diagnostic.field.is_empty() {
        true => diagnostic.message.clone(),
        false => format!("{}: {}", diagnostic.field, diagnostic.message),
    };
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    EventKind {
        type_,
        reason,
        note,
    }
}

/// An Event written, and the object version it was last written for.
struct Written {
    name: String,
    namespace: String,
    count: i32,
    resource_version: Option<String>,
    event: Event,
}

/// The series key: the object, and what the Event says.
type SeriesKey = (String, &'static str, Option<String>, String, EventKind);

/// Writes the Events the latest compile calls for, while this replica leads. A diagnostic
/// already written for the same version of its object is not written again; for a newer
/// version its Event's series count goes up.
pub async fn run_event_writer(
    client: Client,
    instance: String,
    mut work: watch::Receiver<Vec<Pending>>,
    mut leader: watch::Receiver<bool>,
) {
    let mut written: HashMap<SeriesKey, Written> = HashMap::new();
    // Without leader election the sender is gone from the start and the value stays.
    let mut leadership_may_change = true;
    loop {
        if *leader.borrow_and_update() {
            let pending = work.borrow_and_update().clone();
            for item in pending {
                write_one(&client, &instance, &mut written, item).await;
            }
        }
        tokio::select! {
            changed = work.changed() => if changed.is_err() { return },
            changed = leader.changed(), if leadership_may_change => {
                leadership_may_change = changed.is_ok();
            }
        }
    }
}

async fn write_one(
    client: &Client,
    instance: &str,
    written: &mut HashMap<SeriesKey, Written>,
    item: Pending,
) {
    let Pending { regarding, kind } = item;
    let key: SeriesKey = (
        regarding.api_version.to_owned(),
        regarding.kind,
        regarding.namespace.clone(),
        regarding.name.clone(),
        kind.clone(),
    );
    let now = MicroTime(Timestamp::now());
    match written.get_mut(&key) {
        Some(entry) if entry.resource_version == regarding.resource_version => {}
        Some(entry) => {
            entry.count += 1;
            entry.resource_version = regarding.resource_version.clone();
            let series = EventSeries {
                count: entry.count,
                last_observed_time: now,
            };
            entry.event.series = Some(series.clone());
            let patch = serde_json::json!({ "series": series });
            let events: Api<Event> = Api::namespaced(client.clone(), &entry.namespace);
            if let Err(error) = events
                .patch(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(%error, event = %entry.name, "cannot update an Event's series");
            }
        }
        None => {
            let event = new_event(&regarding, &kind, instance, now);
            let namespace = regarding
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned());
            let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
            match events.create(&PostParams::default(), &event).await {
                Ok(created) => {
                    let name = created.metadata.name.clone().unwrap_or_default();
                    written.insert(
                        key,
                        Written {
                            name,
                            namespace,
                            count: 1,
                            resource_version: regarding.resource_version.clone(),
                            event: created,
                        },
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, object = %regarding.name, reason = kind.reason, "cannot write an Event");
                }
            }
        }
    }
}

fn new_event(regarding: &Regarding, kind: &EventKind, instance: &str, now: MicroTime) -> Event {
    let nanos = now.0.as_nanosecond();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}", regarding.name)),
            namespace: regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        event_time: Some(now),
        action: Some("Compile".to_owned()),
        reason: Some(kind.reason.to_owned()),
        note: Some(kind.note.clone()),
        type_: Some(kind.type_.to_owned()),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        regarding: Some(ObjectReference {
            api_version: Some(regarding.api_version.to_owned()),
            kind: Some(regarding.kind.to_owned()),
            namespace: regarding.namespace.clone(),
            name: Some(regarding.name.clone()),
            uid: regarding.uid.clone(),
            resource_version: regarding.resource_version.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::ObjectRef;

    #[test]
    fn a_diagnostic_on_a_known_ingress_becomes_a_warning_event() {
        let mut snapshot = Snapshot::default();
        let mut ingress = k8s_openapi::api::networking::v1::Ingress::default();
        ingress.metadata.name = Some("web".into());
        ingress.metadata.namespace = Some("shop".into());
        ingress.metadata.uid = Some("u-1".into());
        ingress.metadata.resource_version = Some("7".into());
        snapshot
            .ingresses
            .insert(ObjectKey::new("shop", "web"), ingress);
        let diagnostics = [
            Diagnostic {
                severity: Severity::Warning,
                object: ObjectRef::new("Ingress", Some("shop"), "web"),
                field: "metadata.annotations[x]".into(),
                message: "ignored".into(),
            },
            Diagnostic {
                severity: Severity::Error,
                object: ObjectRef::new("Ingress", Some("shop"), "gone"),
                field: String::new(),
                message: "not in the snapshot".into(),
            },
        ];
        let pending = pending(&snapshot, &diagnostics);
        assert_eq!(pending.len(), 1, "only objects that exist carry Events");
        let event = new_event(
            &pending[0].regarding,
            &pending[0].kind,
            "sluice-0",
            MicroTime(Timestamp::now()),
        );
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reason.as_deref(), Some("IgnoredConfiguration"));
        assert_eq!(
            event.note.as_deref(),
            Some("metadata.annotations[x]: ignored")
        );
        let regarding = event.regarding.unwrap_or_default();
        assert_eq!(regarding.uid.as_deref(), Some("u-1"));
        assert_eq!(regarding.kind.as_deref(), Some("Ingress"));
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let diagnostic = Diagnostic {
            severity: Severity::Info,
            object: ObjectRef::new("Ingress", Some("a"), "b"),
            field: String::new(),
            message: "é".repeat(800),
        };
        let kind = event_kind(&diagnostic);
        assert!(kind.note.len() <= MAX_NOTE);
        assert!(kind.note.ends_with("..."));
        assert_eq!(kind.type_, "Normal");
    }
}
