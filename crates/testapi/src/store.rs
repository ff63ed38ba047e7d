//! The object store: one table per resource type, one global resourceVersion, a bounded event log, and the write semantics of the API server.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::error::TestApiError;
use crate::object::{self, FieldPath, UidGenerator};
use crate::resources::{self, ResourceType, NAMESPACES, RESOURCES};
use crate::selector::Selectors;

/// Objects are keyed by (namespace, name); cluster-scoped objects have an empty namespace.
pub(crate) type Key = (String, String);

/// What happened to an object, as a watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change in a table's event log.
#[derive(Debug, Clone)]
pub(crate) struct LoggedEvent {
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change (for a deletion: its last state, stamped with the deletion's
    /// resourceVersion).
    pub object: Arc<Value>,
    /// The object before a modification, so a selector can turn it into ADDED or DELETED.
    pub previous: Option<Arc<Value>>,
    /// When the change happened, for delayed delivery.
    pub at: Instant,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself; `.status` is kept for types with a status subresource.
    Main,
    /// Only `.status`.
    Status,
}

/// How a PATCH body is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json` (see [`object::strategic_merge_patch`]).
    Strategic,
    /// `application/json-patch+json`
    Json,
    /// `application/apply-patch+yaml` (server-side apply), with `force`.
    Apply { force: bool },
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
}

/// Who owns each leaf field: manager → whether it owns the field by server-side apply (such
/// fields are removed when their last owner stops applying them).
type Owners = BTreeMap<FieldPath, BTreeMap<String, bool>>;

/// How a write changes field ownership.
#[derive(Debug, Clone, Copy)]
enum Ownership<'a> {
    /// Not tracked (bulk seeding): the object's ownership is forgotten.
    Untracked,
    /// An update by this manager takes every field it changes.
    Update(&'a str),
    /// A server-side apply by this manager of these fields.
    Apply(&'a str, &'a BTreeSet<FieldPath>),
}

impl<'a> Ownership<'a> {
    fn from_manager(manager: Option<&'a str>) -> Self {
        manager.map_or(Self::Untracked, Self::Update)
    }
}

#[derive(Debug)]
struct Entry {
    object: Arc<Value>,
    owners: Owners,
}

#[derive(Debug, Default)]
struct Table {
    objects: BTreeMap<Key, Entry>,
    log: VecDeque<LoggedEvent>,
    /// Events with resourceVersion ≤ floor are compacted away: watching from a version older
    /// than the floor is answered with 410 Expired.
    floor: u64,
}

/// Every object and event, behind one lock in the server.
#[derive(Debug)]
pub(crate) struct Store {
    rv: u64,
    tables: Vec<Table>,
    ids: UidGenerator,
    log_limit: usize,
}

impl Store {
    /// An empty store holding the namespaces a fresh cluster has.
    pub(crate) fn new(log_limit: usize) -> Self {
        let mut store = Self {
            rv: 0,
            tables: RESOURCES.iter().map(|_| Table::default()).collect(),
            ids: UidGenerator::new(),
            log_limit: log_limit.max(1),
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let namespace =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            // Creating a fresh namespace in an empty store cannot fail.
            let _ = store.create(NAMESPACES, "", namespace, Some("kube-apiserver"), true);
        }
        store
    }

    /// The latest resourceVersion handed out.
    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    fn table(&self, res: usize) -> &Table {
        &self.tables[res]
    }

    fn key(res: usize, namespace: &str, name: &str) -> Key {
        let namespace = if RESOURCES[res].namespaced {
            namespace
        } else {
            ""
        };
        (namespace.to_owned(), name.to_owned())
    }

    /// The object, or 404.
    pub(crate) fn get(
        &self,
        res: usize,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        self.table(res)
            .objects
            .get(&Self::key(res, namespace, name))
            .map(|e| e.object.clone())
            .ok_or_else(|| TestApiError::not_found(r.group, r.plural, name))
    }

    /// One page of the objects in `namespace` (all namespaces when `None`) that match.
    ///
    /// A continued list reports the first page's resourceVersion, as the API server does; its
    /// items are read from the current state (see the crate docs). A continue token older than
    /// the compaction floor is 410 Expired.
    pub(crate) fn list(
        &self,
        res: usize,
        namespace: Option<&str>,
        selectors: &Selectors,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, TestApiError> {
        let table = self.table(res);
        let namespace = namespace.filter(|_| RESOURCES[res].namespaced);
        let (list_rv, start) = match continue_token {
            Some(token) => {
                let (rv, key) = decode_continue(token)?;
                if rv < table.floor {
                    return Err(TestApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Bound::Excluded(key))
            }
            None => (
                self.rv,
                match namespace {
                    Some(ns) => Bound::Included((ns.to_owned(), String::new())),
                    None => Bound::Unbounded,
                },
            ),
        };
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (key, entry) in table.objects.range((start, Bound::Unbounded)) {
            if namespace.is_some_and(|ns| key.0 != ns) {
                break;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            if selectors.matches(&entry.object) {
                items.push(entry.object.clone());
                last_key = Some(key);
            }
        }
        let continue_token = match (more, last_key) {
            (true, Some(key)) => Some(encode_continue(list_rv, key)),
            _ => None,
        };
        Ok(ListPage {
            items,
            resource_version: list_rv,
            continue_token,
        })
    }

    /// Every matching object (sorted by key) and the resourceVersion they are current at.
    pub(crate) fn snapshot(
        &self,
        res: usize,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) -> (Vec<Arc<Value>>, u64) {
        let table = self.table(res);
        let namespace = namespace.filter(|_| RESOURCES[res].namespaced);
        let start = match namespace {
            Some(ns) => Bound::Included((ns.to_owned(), String::new())),
            None => Bound::Unbounded,
        };
        let items = table
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|(key, _)| namespace.is_none_or(|ns| key.0 == ns))
            .filter(|(_, entry)| selectors.matches(&entry.object))
            .map(|(_, entry)| entry.object.clone())
            .collect();
        (items, self.rv)
    }

    /// Whether a watch may resume from `rv`: every event after it is still in the log.
    pub(crate) fn check_watchable(&self, res: usize, rv: u64) -> Result<(), TestApiError> {
        let floor = self.table(res).floor;
        if rv < floor {
            Err(TestApiError::expired(format!(
                "too old resource version: {rv} ({floor})"
            )))
        } else {
            Ok(())
        }
    }

    /// Up to `max` events of one type after `cursor`, and the version the watcher has then seen
    /// everything up to. 410 Expired when events after `cursor` were compacted away.
    pub(crate) fn events_after(
        &self,
        res: usize,
        cursor: u64,
        max: usize,
    ) -> Result<(Vec<LoggedEvent>, u64), TestApiError> {
        self.check_watchable(res, cursor)?;
        let log = &self.table(res).log;
        let start = log.partition_point(|e| e.rv <= cursor);
        let events: Vec<LoggedEvent> = log.range(start..).take(max).cloned().collect();
        let through = if events.len() == max {
            events.last().map_or(self.rv, |e| e.rv)
        } else {
            self.rv.max(cursor)
        };
        Ok((events, through))
    }

    /// Compacts every event log up to now: watches from any older version get 410 Expired.
    pub(crate) fn compact_all(&mut self) {
        for table in &mut self.tables {
            table.log.clear();
            table.floor = self.rv;
        }
    }

    fn log(
        &mut self,
        res: usize,
        kind: EventType,
        object: Arc<Value>,
        previous: Option<Arc<Value>>,
    ) {
        let table = &mut self.tables[res];
        table.log.push_back(LoggedEvent {
            rv: self.rv,
            kind,
            object,
            previous,
            at: Instant::now(),
        });
        while table.log.len() > self.log_limit {
            if let Some(event) = table.log.pop_front() {
                table.floor = event.rv;
            }
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Creates an object (POST). `reset_status` drops a sent `.status` for types with a status
    /// subresource, as the API server does.
    pub(crate) fn create(
        &mut self,
        res: usize,
        namespace: &str,
        body: Value,
        manager: Option<&str>,
        reset_status: bool,
    ) -> Result<Arc<Value>, TestApiError> {
        let ownership = Ownership::from_manager(manager);
        self.create_owned(res, namespace, body, ownership, reset_status)
    }

    fn create_owned(
        &mut self,
        res: usize,
        namespace: &str,
        mut body: Value,
        ownership: Ownership<'_>,
        reset_status: bool,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        check_type(r, &mut body)?;
        let name = match object::meta_str(&body, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => match object::meta_str(&body, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => format!("{prefix}{}", self.ids.name_suffix()),
                None => {
                    return Err(TestApiError::api(
                        422,
                        "Invalid",
                        format!("{} is invalid: metadata.name: Required value: name or generateName is required", r.kind),
                    ))
                }
            },
        };
        check_name(r, &name)?;
        let namespace = self.check_namespace(r, &body, namespace)?;
        if r.namespaced && self.is_terminating(&namespace) {
            return Err(TestApiError::api(
                403,
                "Forbidden",
                format!("{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated", r.plural),
            ));
        }
        let key = Self::key(res, &namespace, &name);
        if self.tables[res].objects.contains_key(&key) {
            return Err(TestApiError::already_exists(r.group, r.plural, &name));
        }
        let rv = self.next_rv();
        let uid = self.ids.next_uid();
        if let Some(meta) = object::metadata_mut(&mut body) {
            meta.insert("name".into(), name.into());
            if r.namespaced {
                meta.insert("namespace".into(), namespace.into());
            } else {
                meta.remove("namespace");
            }
            meta.insert("uid".into(), uid.into());
            meta.insert("resourceVersion".into(), rv.to_string().into());
            meta.insert("creationTimestamp".into(), object::now_rfc3339().into());
            meta.insert("generation".into(), 1.into());
            meta.remove("deletionTimestamp");
            meta.remove("managedFields");
        }
        if let Some(map) = body.as_object_mut() {
            if r.status_subresource && reset_status {
                match r.initial_status() {
                    Some(status) => map.insert("status".into(), status),
                    None => map.remove("status"),
                };
            }
            if res == NAMESPACES {
                map.entry("spec")
                    .or_insert_with(|| json!({"finalizers": ["kubernetes"]}));
            }
        }
        let mut owners = Owners::new();
        record_ownership(&mut owners, &Value::Null, &body, ownership);
        let object = Arc::new(body);
        self.tables[res].objects.insert(
            key,
            Entry {
                object: object.clone(),
                owners,
            },
        );
        self.log(res, EventType::Added, object.clone(), None);
        Ok(object)
    }

    /// Replaces an object (PUT). A set, stale `metadata.resourceVersion` is 409 Conflict.
    pub(crate) fn replace(
        &mut self,
        res: usize,
        namespace: &str,
        name: &str,
        mut body: Value,
        subresource: Subresource,
        manager: Option<&str>,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        check_type(r, &mut body)?;
        match object::meta_str(&body, "name") {
            Some(body_name) if body_name == name => {}
            Some(body_name) => {
                return Err(TestApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )))
            }
            None => {
                return Err(TestApiError::bad_request(
                    "the name of the object must be set in metadata.name",
                ))
            }
        }
        self.check_namespace(r, &body, namespace)?;
        let old = self.get(res, namespace, name)?;
        check_precondition(r, &old, object::meta_str(&body, "resourceVersion"))?;
        let new = match subresource {
            Subresource::Main => body,
            Subresource::Status => {
                let mut new = (*old).clone();
                set_status(&mut new, body.get("status").cloned());
                new
            }
        };
        let ownership = Ownership::from_manager(manager);
        self.commit(res, namespace, name, new, subresource, ownership)
    }

    /// Patches an object (PATCH). Server-side apply creates the object when it is missing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch(
        &mut self,
        res: usize,
        namespace: &str,
        name: &str,
        patch: &Value,
        kind: PatchKind,
        subresource: Subresource,
        manager: Option<&str>,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        if let PatchKind::Apply { force } = kind {
            return self.apply(
                res,
                namespace,
                name,
                patch.clone(),
                subresource,
                manager,
                force,
            );
        }
        if !patch.is_object() && kind != PatchKind::Json {
            return Err(TestApiError::bad_request(
                "a merge patch must be a JSON object",
            ));
        }
        let old = self.get(res, namespace, name)?;
        let mut patched = (*old).clone();
        match kind {
            PatchKind::Merge => object::merge_patch(&mut patched, patch),
            PatchKind::Strategic => object::strategic_merge_patch(&mut patched, patch),
            PatchKind::Json => object::json_patch(&mut patched, patch)?,
            PatchKind::Apply { .. } => {}
        }
        // A resourceVersion in the patch is a precondition.
        let patched_rv = object::meta_str(&patched, "resourceVersion");
        if patched_rv != object::meta_str(&old, "resourceVersion") {
            check_precondition(r, &old, patched_rv.or(Some("")))?;
        }
        let new = match subresource {
            Subresource::Main => patched,
            Subresource::Status => {
                let mut new = (*old).clone();
                set_status(&mut new, patched.get("status").cloned());
                new
            }
        };
        let ownership = Ownership::from_manager(manager);
        self.commit(res, namespace, name, new, subresource, ownership)
    }

    /// Server-side apply, simplified: fields are owned by the manager that last set them, and
    /// applying a different value to a field another manager owns is 409 Conflict unless forced.
    /// Lists are atomic; a field the manager applied before and leaves out now is removed.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        res: usize,
        namespace: &str,
        name: &str,
        mut config: Value,
        subresource: Subresource,
        manager: Option<&str>,
        force: bool,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        let manager = manager.ok_or_else(|| {
            TestApiError::api(
                422,
                "Invalid",
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            )
        })?;
        if config.get("apiVersion").is_none() || config.get("kind").is_none() {
            return Err(TestApiError::bad_request(
                "apply patches must set apiVersion and kind",
            ));
        }
        check_type(r, &mut config)?;
        if object::meta_str(&config, "name").is_some_and(|n| n != name) {
            return Err(TestApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if r.status_subresource {
            if let Some(map) = config.as_object_mut() {
                if subresource == Subresource::Main {
                    map.remove("status");
                }
            }
        }
        let Some(entry) = self.tables[res]
            .objects
            .get(&Self::key(res, namespace, name))
        else {
            if subresource == Subresource::Status {
                return Err(TestApiError::not_found(r.group, r.plural, name));
            }
            if let Some(meta) = object::metadata_mut(&mut config) {
                meta.insert("name".into(), name.into());
            }
            let applied: BTreeSet<FieldPath> = object::leaf_fields(&config)
                .into_iter()
                .map(|(path, _)| path)
                .collect();
            let ownership = Ownership::Apply(manager, &applied);
            return self.create_owned(res, namespace, config, ownership, true);
        };
        let old = entry.object.clone();
        let applied: Vec<(FieldPath, Value)> = object::leaf_fields(&config)
            .into_iter()
            .filter(|(path, _)| {
                subresource == Subresource::Main || path.first().is_some_and(|p| p == "status")
            })
            .map(|(path, value)| (path, value.clone()))
            .collect();
        let mut conflicts: Vec<String> = Vec::new();
        for (path, value) in &applied {
            if object::field_at(&old, path) == Some(value) {
                continue;
            }
            for other in entry.owners.get(path).into_iter().flat_map(|m| m.keys()) {
                if other != manager {
                    conflicts.push(format!(
                        "conflict with \"{other}\": {}",
                        object::display_path(path)
                    ));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(TestApiError::Api {
                code: 409,
                reason: "Conflict",
                message: format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    conflicts.join(", ")
                ),
                details: Some(json!({"name": name, "group": r.group, "kind": r.plural})),
            });
        }
        let mut new = (*old).clone();
        let applied_paths: BTreeSet<FieldPath> =
            applied.into_iter().map(|(path, _)| path).collect();
        for (path, managers) in &entry.owners {
            let sole_applier = managers.len() == 1 && managers.get(manager) == Some(&true);
            if sole_applier && !applied_paths.contains(path) {
                object::remove_field(&mut new, path);
            }
        }
        if subresource == Subresource::Status {
            let mut patched = new.clone();
            object::merge_patch(&mut patched, &config);
            set_status(&mut new, patched.get("status").cloned());
        } else {
            object::merge_patch(&mut new, &config);
        }
        let ownership = Ownership::Apply(manager, &applied_paths);
        self.commit(res, namespace, name, new, subresource, ownership)
    }

    /// Stores a new version of an existing object: keeps identity fields, keeps `.status` for a
    /// main-resource write to a type with a status subresource, bumps generation when anything
    /// but metadata and status changed, and records the event. A write that changes nothing is
    /// a no-op, as in the API server.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        res: usize,
        namespace: &str,
        name: &str,
        mut new: Value,
        subresource: Subresource,
        ownership: Ownership<'_>,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        fold_string_data(r, &mut new);
        let key = Self::key(res, namespace, name);
        let Some(entry) = self.tables[res].objects.get(&key) else {
            return Err(TestApiError::not_found(r.group, r.plural, name));
        };
        let old = entry.object.clone();
        if let (Some(new_map), Some(old_map)) = (new.as_object_mut(), old.as_object()) {
            for field in ["apiVersion", "kind"] {
                if let Some(value) = old_map.get(field) {
                    new_map.insert(field.into(), value.clone());
                }
            }
            if r.status_subresource && subresource == Subresource::Main {
                match old_map.get("status") {
                    Some(status) => new_map.insert("status".into(), status.clone()),
                    None => new_map.remove("status"),
                };
            }
        } else {
            return Err(TestApiError::bad_request(
                "the object must be a JSON object",
            ));
        }
        let old_meta = old.get("metadata").and_then(Value::as_object);
        if let (Some(meta), Some(old_meta)) = (object::metadata_mut(&mut new), old_meta) {
            for field in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "resourceVersion",
                "deletionTimestamp",
            ] {
                match old_meta.get(field) {
                    Some(value) => meta.insert(field.into(), value.clone()),
                    None => meta.remove(field),
                };
            }
            meta.remove("managedFields");
        }
        if new == *old {
            if let Some(entry) = self.tables[res].objects.get_mut(&key) {
                record_ownership(&mut entry.owners, &old, &old, ownership);
            }
            return Ok(old);
        }
        let spec_changed = without_meta_and_status(&new) != without_meta_and_status(&old);
        let rv = self.next_rv();
        if let Some(meta) = object::metadata_mut(&mut new) {
            meta.insert("resourceVersion".into(), rv.to_string().into());
            if spec_changed {
                let generation = meta.get("generation").and_then(Value::as_u64).unwrap_or(0);
                meta.insert("generation".into(), (generation + 1).into());
            }
        }
        let object = Arc::new(new);
        if let Some(entry) = self.tables[res].objects.get_mut(&key) {
            record_ownership(&mut entry.owners, &old, &object, ownership);
            entry.object = object.clone();
        }
        self.log(res, EventType::Modified, object.clone(), Some(old));
        Ok(object)
    }

    /// Deletes an object and returns its final state. `preconditions` are the DeleteOptions'
    /// `uid` and `resourceVersion`. Deleting a namespace deletes everything in it.
    pub(crate) fn delete(
        &mut self,
        res: usize,
        namespace: &str,
        name: &str,
        preconditions: Option<&Value>,
    ) -> Result<Arc<Value>, TestApiError> {
        let r = &RESOURCES[res];
        let old = self.get(res, namespace, name)?;
        check_delete_preconditions(r, &old, preconditions)?;
        if res == NAMESPACES {
            let namespaced = RESOURCES.iter().enumerate().filter(|(_, r)| r.namespaced);
            for (inner, _) in namespaced {
                let names: Vec<String> = self.tables[inner]
                    .objects
                    .range((name.to_owned(), String::new())..)
                    .take_while(|(key, _)| key.0 == name)
                    .map(|(key, _)| key.1.clone())
                    .collect();
                for inner_name in names {
                    self.remove(inner, name, &inner_name);
                }
            }
        }
        self.remove(res, namespace, name)
            .ok_or_else(|| TestApiError::not_found(r.group, r.plural, name))
    }

    /// Marks a namespace Terminating (`deletionTimestamp`, `status.phase`), as the API server
    /// does before the namespace controller removes its contents; creating objects in it is
    /// then 403 Forbidden. A namespace already terminating is returned unchanged.
    pub(crate) fn terminate_namespace(
        &mut self,
        name: &str,
        preconditions: Option<&Value>,
    ) -> Result<Arc<Value>, TestApiError> {
        let old = self.get(NAMESPACES, "", name)?;
        check_delete_preconditions(&RESOURCES[NAMESPACES], &old, preconditions)?;
        if object::meta_str(&old, "deletionTimestamp").is_some() {
            return Ok(old);
        }
        let rv = self.next_rv();
        let mut new = (*old).clone();
        if let Some(meta) = object::metadata_mut(&mut new) {
            meta.insert("deletionTimestamp".into(), object::now_rfc3339().into());
            meta.insert("deletionGracePeriodSeconds".into(), 0.into());
            meta.insert("resourceVersion".into(), rv.to_string().into());
        }
        set_status(&mut new, Some(json!({"phase": "Terminating"})));
        let new = Arc::new(new);
        if let Some(entry) = self.tables[NAMESPACES]
            .objects
            .get_mut(&Self::key(NAMESPACES, "", name))
        {
            entry.object = new.clone();
        }
        self.log(NAMESPACES, EventType::Modified, new.clone(), Some(old));
        Ok(new)
    }

    fn remove(&mut self, res: usize, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let entry = self.tables[res]
            .objects
            .remove(&Self::key(res, namespace, name))?;
        let rv = self.next_rv();
        let mut last = (*entry.object).clone();
        if let Some(meta) = object::metadata_mut(&mut last) {
            meta.insert("resourceVersion".into(), rv.to_string().into());
        }
        let last = Arc::new(last);
        self.log(res, EventType::Deleted, last.clone(), Some(entry.object));
        Some(last)
    }

    /// Deletes every matching object in `namespace` (all when `None`) and returns them.
    pub(crate) fn delete_collection(
        &mut self,
        res: usize,
        namespace: Option<&str>,
        selectors: &Selectors,
    ) -> Vec<Arc<Value>> {
        let (items, _) = self.snapshot(res, namespace, selectors);
        items
            .iter()
            .filter_map(|item| {
                let ns = object::meta_str(item, "namespace").unwrap_or("");
                let name = object::meta_str(item, "name")?;
                self.delete(res, ns, name, None).ok()
            })
            .collect()
    }

    /// Stores objects as given (keeping `.status`), creating or replacing, for fast seeding.
    pub(crate) fn insert_many(&mut self, objects: Vec<Value>) -> Result<usize, TestApiError> {
        let mut count = 0;
        for mut body in objects {
            let res = type_of(&body)?;
            let r = &RESOURCES[res];
            let name = object::meta_str(&body, "name")
                .ok_or_else(|| TestApiError::bad_request("metadata.name is required"))?
                .to_owned();
            let namespace = self.check_namespace(r, &body, "")?;
            let key = Self::key(res, &namespace, &name);
            let rv = self.next_rv();
            let previous = self.tables[res].objects.get(&key).map(|e| e.object.clone());
            let uid = match &previous {
                Some(p) => object::meta_str(p, "uid").map(str::to_owned),
                None => None,
            }
            .unwrap_or_else(|| self.ids.next_uid());
            let created = previous
                .as_ref()
                .and_then(|p| object::meta_str(p, "creationTimestamp").map(str::to_owned))
                .unwrap_or_else(object::now_rfc3339);
            if let Some(meta) = object::metadata_mut(&mut body) {
                if r.namespaced {
                    meta.insert("namespace".into(), namespace.into());
                }
                meta.insert("uid".into(), uid.into());
                meta.insert("resourceVersion".into(), rv.to_string().into());
                meta.entry("creationTimestamp").or_insert(created.into());
                meta.entry("generation").or_insert(1.into());
            }
            let object = Arc::new(body);
            let kind = if previous.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            self.tables[res].objects.insert(
                key,
                Entry {
                    object: object.clone(),
                    owners: Owners::new(),
                },
            );
            self.log(res, kind, object, previous);
            count += 1;
        }
        Ok(count)
    }

    fn is_terminating(&self, namespace: &str) -> bool {
        self.tables[NAMESPACES]
            .objects
            .get(&(String::new(), namespace.to_owned()))
            .is_some_and(|e| object::meta_str(&e.object, "deletionTimestamp").is_some())
    }

    /// How many objects of a type are stored.
    pub(crate) fn count(&self, res: usize) -> usize {
        self.table(res).objects.len()
    }

    fn check_namespace(
        &self,
        r: &ResourceType,
        body: &Value,
        namespace: &str,
    ) -> Result<String, TestApiError> {
        if !r.namespaced {
            return Ok(String::new());
        }
        match object::meta_str(body, "namespace").filter(|ns| !ns.is_empty()) {
            Some(ns) if !namespace.is_empty() && ns != namespace => Err(TestApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
            Some(ns) => Ok(ns.to_owned()),
            None if namespace.is_empty() => Ok("default".to_owned()),
            None => Ok(namespace.to_owned()),
        }
    }
}

/// The resource type of an object from its `apiVersion` and `kind`.
pub(crate) fn type_of(object: &Value) -> Result<usize, TestApiError> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    resources::by_api_version_kind(api_version, kind).ok_or_else(|| {
        TestApiError::bad_request(format!(
            "no resource served for apiVersion {api_version:?} kind {kind:?}"
        ))
    })
}

/// Checks (and fills in when missing) `apiVersion` and `kind` against the URL's type.
fn check_type(r: &ResourceType, body: &mut Value) -> Result<(), TestApiError> {
    let Some(map) = body.as_object_mut() else {
        return Err(TestApiError::bad_request(
            "the object must be a JSON object",
        ));
    };
    let api_version = r.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(TestApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )))
        }
        Some(_) => {}
        None => {
            map.insert("apiVersion".into(), api_version.into());
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(k) if k != r.kind => {
            return Err(TestApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                r.kind
            )))
        }
        Some(_) => {}
        None => {
            map.insert("kind".into(), r.kind.into());
        }
    }
    if !map.get("metadata").is_none_or(Value::is_object) {
        return Err(TestApiError::bad_request("metadata must be an object"));
    }
    fold_string_data(r, body);
    Ok(())
}

/// A Secret's `stringData` merged into `data` (base64, winning over a `data` key of the same
/// name) and dropped, as the API server stores it: `stringData` is write-only.
fn fold_string_data(r: &ResourceType, body: &mut Value) {
    use base64::Engine;
    if r.kind != "Secret" || !r.group.is_empty() {
        return;
    }
    let Some(map) = body.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(data) = data {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, Value::String(encoded));
        }
    }
}

/// A DNS-1123 subdomain check, as for nearly all names.
fn check_name(r: &ResourceType, name: &str) -> Result<(), TestApiError> {
    let ok = name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(TestApiError::api(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                r.kind
            ),
        ))
    }
}

/// 409 Conflict when DeleteOptions' `preconditions` name another uid or resourceVersion.
fn check_delete_preconditions(
    r: &ResourceType,
    old: &Value,
    preconditions: Option<&Value>,
) -> Result<(), TestApiError> {
    let Some(pre) = preconditions else {
        return Ok(());
    };
    if let Some(uid) = pre.get("uid").and_then(Value::as_str) {
        if object::meta_str(old, "uid") != Some(uid) {
            let name = object::meta_str(old, "name").unwrap_or("");
            return Err(TestApiError::conflict(
                r.group,
                r.plural,
                name,
                &format!("Precondition failed: UID in precondition: {uid}"),
            ));
        }
    }
    check_precondition(r, old, pre.get("resourceVersion").and_then(Value::as_str))
}

/// 409 Conflict when `expected` is a set resourceVersion other than the object's.
fn check_precondition(
    r: &ResourceType,
    old: &Value,
    expected: Option<&str>,
) -> Result<(), TestApiError> {
    match expected.filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != object::meta_str(old, "resourceVersion") => {
            let name = object::meta_str(old, "name").unwrap_or("");
            Err(TestApiError::conflict(
                r.group,
                r.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ))
        }
        _ => Ok(()),
    }
}

fn set_status(object: &mut Value, status: Option<Value>) {
    if let Some(map) = object.as_object_mut() {
        match status {
            Some(status) => map.insert("status".into(), status),
            None => map.remove("status"),
        };
    }
}

fn without_meta_and_status(object: &Value) -> Map<String, Value> {
    let mut map = object.as_object().cloned().unwrap_or_default();
    map.remove("metadata");
    map.remove("status");
    map
}

/// Updates field ownership for a write from `old` to `new`: an update takes every field it
/// changes from every other manager; an apply does the same for the fields it changes, shares
/// the fields it sets to their current value, and gives up the fields it no longer applies.
/// Fields that no longer exist have no owners.
fn record_ownership(owners: &mut Owners, old: &Value, new: &Value, ownership: Ownership<'_>) {
    let old_leaves: BTreeMap<FieldPath, &Value> = object::leaf_fields(old).into_iter().collect();
    let new_leaves: BTreeMap<FieldPath, &Value> = object::leaf_fields(new).into_iter().collect();
    match ownership {
        Ownership::Untracked => owners.clear(),
        Ownership::Update(manager) => {
            for (path, value) in &new_leaves {
                if old_leaves.get(path) != Some(value) {
                    let managers = owners.entry(path.clone()).or_default();
                    managers.clear();
                    managers.insert(manager.to_owned(), false);
                }
            }
        }
        Ownership::Apply(manager, applied) => {
            for (path, managers) in owners.iter_mut() {
                if managers.get(manager) == Some(&true) && !applied.contains(path) {
                    managers.remove(manager);
                }
            }
            for path in applied {
                let managers = owners.entry(path.clone()).or_default();
                if old_leaves.get(path) != new_leaves.get(path) {
                    managers.clear();
                }
                managers.insert(manager.to_owned(), true);
            }
        }
    }
    owners.retain(|path, managers| !managers.is_empty() && new_leaves.contains_key(path));
}

fn encode_continue(rv: u64, key: &Key) -> String {
    format!("{rv}.{}.{}", hex(&key.0), hex(&key.1))
}

fn decode_continue(token: &str) -> Result<(u64, Key), TestApiError> {
    let bad = || TestApiError::bad_request(format!("invalid continue token {token:?}"));
    let mut parts = token.split('.');
    let rv = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let namespace = parts.next().and_then(unhex).ok_or_else(bad)?;
    let name = parts.next().and_then(unhex).ok_or_else(bad)?;
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((rv, (namespace, name)))
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = text
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok().filter(|p| p.len() == 2)?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::selector::LabelSelector;

    const SERVICES: usize = 1;
    const INGRESSES: usize = 3;
    const LEASES: usize = 6;

    fn service(namespace: &str, name: &str, app: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"ports": [{"port": 80}]}
        })
    }

    fn names(page: &ListPage) -> Vec<String> {
        page.items
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    object::meta_str(o, "namespace").unwrap(),
                    object::meta_str(o, "name").unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn resource_types_are_where_the_tests_expect_them() {
        assert_eq!(RESOURCES[SERVICES].plural, "services");
        assert_eq!(RESOURCES[INGRESSES].plural, "ingresses");
        assert_eq!(RESOURCES[LEASES].plural, "leases");
    }

    #[test]
    fn paging_walks_every_object_once_in_key_order_with_the_first_pages_version() {
        let mut store = Store::new(1000);
        for ns in ["b", "a", "c"] {
            for i in 0..7 {
                store
                    .create(SERVICES, ns, service(ns, &format!("s{i}"), "x"), None, true)
                    .unwrap();
            }
        }
        let all = Selectors::default();
        let first = store.list(SERVICES, None, &all, Some(5), None).unwrap();
        assert_eq!(names(&first), ["a/s0", "a/s1", "a/s2", "a/s3", "a/s4"]);
        let list_rv = first.resource_version;
        // A change between pages does not change the list's version.
        store
            .create(SERVICES, "z", service("z", "late", "x"), None, true)
            .unwrap();
        let mut seen = names(&first);
        let mut token = first.continue_token.clone();
        while let Some(t) = token {
            let page = store.list(SERVICES, None, &all, Some(5), Some(&t)).unwrap();
            assert_eq!(page.resource_version, list_rv);
            assert!(page.items.len() <= 5);
            seen.extend(names(&page));
            token = page.continue_token;
        }
        assert_eq!(seen.len(), 22);
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(seen, sorted);

        // One namespace, exactly one page: no continue token.
        let page = store
            .list(SERVICES, Some("b"), &all, Some(7), None)
            .unwrap();
        assert_eq!(page.items.len(), 7);
        assert!(names(&page).iter().all(|n| n.starts_with("b/")));
        // An exact fit across namespaces still says there may be more.
        let page = store
            .list(SERVICES, Some("b"), &all, Some(3), None)
            .unwrap();
        let rest = store
            .list(
                SERVICES,
                Some("b"),
                &all,
                Some(10),
                page.continue_token.as_deref(),
            )
            .unwrap();
        assert_eq!(names(&rest), ["b/s3", "b/s4", "b/s5", "b/s6"]);
        assert!(rest.continue_token.is_none());
    }

    #[test]
    fn paging_with_a_label_selector_counts_only_matches() {
        let mut store = Store::new(1000);
        for i in 0..20 {
            let app = if i % 3 == 0 { "web" } else { "db" };
            store
                .create(
                    SERVICES,
                    "ns",
                    service("ns", &format!("s{i:02}"), app),
                    None,
                    true,
                )
                .unwrap();
        }
        let web = Selectors {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Selectors::default()
        };
        let first = store
            .list(SERVICES, Some("ns"), &web, Some(3), None)
            .unwrap();
        assert_eq!(names(&first), ["ns/s00", "ns/s03", "ns/s06"]);
        let second = store
            .list(
                SERVICES,
                Some("ns"),
                &web,
                Some(3),
                first.continue_token.as_deref(),
            )
            .unwrap();
        assert_eq!(names(&second), ["ns/s09", "ns/s12", "ns/s15"]);
    }

    #[test]
    fn bad_and_compacted_continue_tokens() {
        let mut store = Store::new(1000);
        for i in 0..4 {
            store
                .create(
                    SERVICES,
                    "ns",
                    service("ns", &format!("s{i}"), "x"),
                    None,
                    true,
                )
                .unwrap();
        }
        let all = Selectors::default();
        let first = store.list(SERVICES, None, &all, Some(2), None).unwrap();
        let err = store
            .list(SERVICES, None, &all, Some(2), Some("garbage"))
            .unwrap_err();
        assert_eq!(err.code(), 400);
        store
            .create(SERVICES, "ns", service("ns", "later", "x"), None, true)
            .unwrap();
        store.compact_all();
        let err = store
            .list(
                SERVICES,
                None,
                &all,
                Some(2),
                first.continue_token.as_deref(),
            )
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (410, "Expired"));
    }

    #[test]
    fn resource_versions_increase_globally_and_stamp_objects() {
        let mut store = Store::new(1000);
        let start = store.resource_version();
        let a = store
            .create(SERVICES, "ns", service("ns", "a", "x"), None, true)
            .unwrap();
        let b = store
            .create(INGRESSES, "ns", json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "b"}}), None, true)
            .unwrap();
        assert_eq!(
            object::meta_str(&a, "resourceVersion"),
            Some(&*(start + 1).to_string())
        );
        assert_eq!(
            object::meta_str(&b, "resourceVersion"),
            Some(&*(start + 2).to_string())
        );
        assert!(object::meta_str(&a, "uid").is_some());
        assert!(object::meta_str(&a, "creationTimestamp").is_some());
        assert_eq!(a["metadata"]["generation"], 1);
        let deleted = store.delete(SERVICES, "ns", "a", None).unwrap();
        assert_eq!(
            object::meta_str(&deleted, "resourceVersion"),
            Some(&*(start + 3).to_string())
        );
        let (events, through) = store.events_after(SERVICES, start, 10).unwrap();
        let kinds: Vec<EventType> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventType::Added, EventType::Deleted]);
        assert_eq!(through, start + 3);
    }

    #[test]
    fn compaction_expires_older_versions_only() {
        let mut store = Store::new(3);
        let start = store.resource_version();
        for i in 0..5 {
            store
                .create(
                    SERVICES,
                    "ns",
                    service("ns", &format!("s{i}"), "x"),
                    None,
                    true,
                )
                .unwrap();
        }
        // The log keeps 3 events: resuming from start or start+1 is too old.
        assert_eq!(
            store.events_after(SERVICES, start, 10).unwrap_err().code(),
            410
        );
        assert_eq!(
            store
                .events_after(SERVICES, start + 1, 10)
                .unwrap_err()
                .code(),
            410
        );
        let (events, _) = store.events_after(SERVICES, start + 2, 10).unwrap();
        assert_eq!(events.len(), 3);
        store.compact_all();
        let now = store.resource_version();
        assert_eq!(
            store
                .check_watchable(SERVICES, now - 1)
                .unwrap_err()
                .reason(),
            "Expired"
        );
        assert!(store.check_watchable(SERVICES, now).is_ok());
        assert!(store.events_after(SERVICES, now, 10).unwrap().0.is_empty());
    }

    #[test]
    fn create_conflicts_and_missing_objects() {
        let mut store = Store::new(10);
        store
            .create(SERVICES, "ns", service("ns", "a", "x"), None, true)
            .unwrap();
        let err = store
            .create(SERVICES, "ns", service("ns", "a", "x"), None, true)
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "AlreadyExists"));
        let err = store.get(SERVICES, "ns", "nope").unwrap_err();
        assert_eq!((err.code(), err.reason()), (404, "NotFound"));
        let err = store
            .create(SERVICES, "other", service("ns", "b", "x"), None, true)
            .unwrap_err();
        assert_eq!(err.code(), 400);
        let err = store
            .create(
                SERVICES,
                "ns",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}),
                None,
                true,
            )
            .unwrap_err();
        assert_eq!(err.code(), 400);
        let err = store
            .create(SERVICES, "ns", service("ns", "Bad_Name", "x"), None, true)
            .unwrap_err();
        assert_eq!(err.code(), 422);
    }

    #[test]
    fn stale_resource_versions_conflict_and_noop_writes_change_nothing() {
        let mut store = Store::new(10);
        let a = store
            .create(SERVICES, "ns", service("ns", "a", "x"), None, true)
            .unwrap();
        let mut stale = (*a).clone();
        let mut changed = (*a).clone();
        changed["spec"]["ports"][0]["port"] = json!(81);
        let updated = store
            .replace(SERVICES, "ns", "a", changed, Subresource::Main, None)
            .unwrap();
        assert_eq!(updated["metadata"]["generation"], 2);
        stale["spec"]["ports"][0]["port"] = json!(82);
        let err = store
            .replace(SERVICES, "ns", "a", stale, Subresource::Main, None)
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "Conflict"));
        let rv = store.resource_version();
        let same = store
            .replace(
                SERVICES,
                "ns",
                "a",
                (*updated).clone(),
                Subresource::Main,
                None,
            )
            .unwrap();
        assert_eq!(store.resource_version(), rv);
        assert_eq!(same, updated);
        // A resourceVersion in a merge patch is a precondition.
        let err = store
            .patch(
                SERVICES,
                "ns",
                "a",
                &json!({"metadata": {"resourceVersion": "1"}, "spec": {"x": 1}}),
                PatchKind::Merge,
                Subresource::Main,
                None,
            )
            .unwrap_err();
        assert_eq!(err.code(), 409);
    }

    fn ingress() -> Value {
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"ingressClassName": "sluice"},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}
        })
    }

    #[test]
    fn status_subresource_is_isolated_from_the_main_resource() {
        let mut store = Store::new(10);
        let created = store
            .create(INGRESSES, "ns", ingress(), None, true)
            .unwrap();
        assert_eq!(
            created["status"],
            json!({"loadBalancer": {}}),
            "create resets status"
        );

        let mut status = (*created).clone();
        status["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
        status["spec"]["ingressClassName"] = json!("ignored");
        let after_status = store
            .replace(INGRESSES, "ns", "web", status, Subresource::Status, None)
            .unwrap();
        assert_eq!(
            after_status["status"]["loadBalancer"]["ingress"][0]["ip"],
            "10.0.0.1"
        );
        assert_eq!(
            after_status["spec"]["ingressClassName"], "sluice",
            "status write keeps spec"
        );
        assert_eq!(
            after_status["metadata"]["generation"], 1,
            "status writes do not bump generation"
        );

        let mut main = (*after_status).clone();
        main["status"] = json!({"loadBalancer": {}});
        main["spec"]["ingressClassName"] = json!("other");
        let after_main = store
            .replace(INGRESSES, "ns", "web", main, Subresource::Main, None)
            .unwrap();
        assert_eq!(after_main["spec"]["ingressClassName"], "other");
        assert_eq!(
            after_main["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.1",
            "main write keeps status"
        );
        assert_eq!(after_main["metadata"]["generation"], 2);

        let patched = store
            .patch(
                INGRESSES,
                "ns",
                "web",
                &json!({"status": {"loadBalancer": null}, "metadata": {"labels": {"a": "b"}}}),
                PatchKind::Merge,
                Subresource::Main,
                None,
            )
            .unwrap();
        assert_eq!(patched["metadata"]["labels"]["a"], "b");
        assert_eq!(
            patched["status"]["loadBalancer"]["ingress"][0]["ip"],
            "10.0.0.1"
        );

        let patched = store
            .patch(INGRESSES, "ns", "web", &json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb"}]}}, "spec": {"ingressClassName": "nope"}}), PatchKind::Merge, Subresource::Status, None)
            .unwrap();
        assert_eq!(
            patched["status"]["loadBalancer"]["ingress"][0]["hostname"],
            "lb"
        );
        assert_eq!(patched["spec"]["ingressClassName"], "other");
    }

    #[test]
    fn label_changes_reach_the_log_with_the_previous_state() {
        let mut store = Store::new(10);
        let start = store.resource_version();
        store
            .create(SERVICES, "ns", service("ns", "a", "web"), None, true)
            .unwrap();
        store
            .patch(
                SERVICES,
                "ns",
                "a",
                &json!({"metadata": {"labels": {"app": "db"}}}),
                PatchKind::Merge,
                Subresource::Main,
                None,
            )
            .unwrap();
        let (events, _) = store.events_after(SERVICES, start, 10).unwrap();
        let previous = events[1].previous.as_ref().unwrap();
        assert_eq!(previous["metadata"]["labels"]["app"], "web");
        assert_eq!(events[1].object["metadata"]["labels"]["app"], "db");
    }

    fn lease_apply(holder: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}
        })
    }

    #[test]
    fn server_side_apply_conflicts_on_fields_another_manager_set() {
        let mut store = Store::new(10);
        let apply = |force| PatchKind::Apply { force };
        let created = store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("a"),
                apply(false),
                Subresource::Main,
                Some("mgr-a"),
            )
            .unwrap();
        assert_eq!(created["spec"]["holderIdentity"], "a");
        // Same values from another manager: no conflict (shared ownership in the real server).
        store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("a"),
                apply(false),
                Subresource::Main,
                Some("mgr-b"),
            )
            .unwrap();
        let err = store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("b"),
                apply(false),
                Subresource::Main,
                Some("mgr-b"),
            )
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "Conflict"));
        assert!(err.to_string().contains(".spec.holderIdentity"), "{err}");
        // The owner releases the field with a strategic patch; then b may take it.
        store
            .patch(
                LEASES,
                "ns",
                "leader",
                &json!({"spec": {"holderIdentity": null}}),
                PatchKind::Strategic,
                Subresource::Main,
                Some("mgr-a"),
            )
            .unwrap();
        let taken = store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("b"),
                apply(false),
                Subresource::Main,
                Some("mgr-b"),
            )
            .unwrap();
        assert_eq!(taken["spec"]["holderIdentity"], "b");
        // Force takes a field regardless.
        let forced = store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("a"),
                apply(true),
                Subresource::Main,
                Some("mgr-a"),
            )
            .unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "a");
        // Apply needs a field manager.
        let err = store
            .patch(
                LEASES,
                "ns",
                "leader",
                &lease_apply("a"),
                apply(true),
                Subresource::Main,
                None,
            )
            .unwrap_err();
        assert_eq!(err.code(), 422);
    }

    #[test]
    fn server_side_apply_removes_fields_the_manager_stopped_applying() {
        let mut store = Store::new(10);
        let apply = PatchKind::Apply { force: false };
        let mut config = lease_apply("a");
        config["spec"]["leaseTransitions"] = json!(3);
        store
            .patch(
                LEASES,
                "ns",
                "l",
                &config,
                apply,
                Subresource::Main,
                Some("m"),
            )
            .unwrap();
        let after = store
            .patch(
                LEASES,
                "ns",
                "l",
                &lease_apply("a"),
                apply,
                Subresource::Main,
                Some("m"),
            )
            .unwrap();
        assert!(after["spec"].get("leaseTransitions").is_none(), "{after}");
        assert_eq!(after["spec"]["leaseDurationSeconds"], 15);
    }

    #[test]
    fn terminating_namespaces_refuse_new_content_and_deletion_cascades() {
        let mut store = Store::new(100);
        store
            .create(
                NAMESPACES,
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
                None,
                true,
            )
            .unwrap();
        store
            .create(SERVICES, "gone", service("gone", "a", "x"), None, true)
            .unwrap();
        let terminating = store.terminate_namespace("gone", None).unwrap();
        assert_eq!(terminating["status"]["phase"], "Terminating");
        let err = store
            .create(SERVICES, "gone", service("gone", "b", "x"), None, true)
            .unwrap_err();
        assert_eq!(err.code(), 403);
        store.delete(NAMESPACES, "", "gone", None).unwrap();
        assert_eq!(store.get(SERVICES, "gone", "a").unwrap_err().code(), 404);
        // Objects may name namespaces that were never created.
        store
            .create(
                SERVICES,
                "anywhere",
                service("anywhere", "a", "x"),
                None,
                true,
            )
            .unwrap();
    }

    #[test]
    fn bulk_insert_keeps_status_and_identity() {
        let mut store = Store::new(100);
        let count = store
            .insert_many(vec![ingress(), service("ns", "a", "x")])
            .unwrap();
        assert_eq!(count, 2);
        let stored = store.get(INGRESSES, "ns", "web").unwrap();
        assert_eq!(
            stored["status"]["loadBalancer"]["ingress"][0]["ip"],
            "1.2.3.4"
        );
        let uid = object::meta_str(&stored, "uid").unwrap().to_owned();
        store.insert_many(vec![ingress()]).unwrap();
        let again = store.get(INGRESSES, "ns", "web").unwrap();
        assert_eq!(object::meta_str(&again, "uid"), Some(uid.as_str()));
        assert_ne!(
            object::meta_str(&again, "resourceVersion"),
            object::meta_str(&stored, "resourceVersion")
        );
    }
}
