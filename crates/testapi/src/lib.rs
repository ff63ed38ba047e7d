//! A test-only Kubernetes API server on loopback: the subset of the API that kube-rs watchers, reflectors and kubectl use, with fault controls.
//!
//! No real API server can run on the test machines, so this one follows the API conventions for
//! what it serves:
//!
//! - **Types**: core/v1 `namespaces` (cluster-scoped; `default`, `kube-system`, `kube-public` and
//!   `kube-node-lease` exist from the start, and objects may name any namespace), `services`,
//!   `secrets`; networking.k8s.io/v1 `ingresses` (with `status`) and `ingressclasses`;
//!   discovery.k8s.io/v1 `endpointslices`; coordination.k8s.io/v1 `leases`; events.k8s.io/v1
//!   `events`. Objects are JSON values keyed by namespace/name in `BTreeMap`s.
//! - **Discovery**: `/version`, `/api`, `/apis`, `/apis/{group}`, `/api/v1`, `/apis/{g}/{v}`,
//!   and a minimal `/openapi/v3` whose per-group documents tag each operation with its kind and
//!   list the `fieldValidation` parameter, so kubectl leaves validation to the server (which
//!   accepts any fields) and computes patches from its compiled-in types.
//! - **Reads**: get; list per namespace or across namespaces with `limit`/`continue` (O(page)),
//!   `labelSelector` (equality, inequality, `in`, `notin`, existence) and `fieldSelector` on
//!   `metadata.name`/`metadata.namespace`; `as=Table` for kubectl's printing.
//! - **Watch**: JSON lines resumed from `resourceVersion` out of a bounded per-type event log,
//!   then live; BOOKMARKs every second (first right away) with `allowWatchBookmarks`;
//!   `timeoutSeconds`; streaming lists (`sendInitialEvents=true`). A resourceVersion older than
//!   the compacted log is an `ERROR` event holding a 410 `Expired` Status over HTTP 200, then
//!   the stream ends. A change that moves an object into or out of a selector is ADDED/DELETED.
//! - **Writes**: create (POST; 409 AlreadyExists), replace (PUT; 409 Conflict on a stale
//!   resourceVersion), delete (reads DeleteOptions, honours its preconditions, returns the
//!   object; deleting a namespace deletes its contents), deletecollection, PATCH as JSON merge
//!   patch, strategic merge patch (merge patch plus kubectl's directives; see
//!   `object::strategic_merge_patch`), JSON patch, and server-side apply (simplified field
//!   ownership: conflicts on fields another manager set, lists atomic). The `status`
//!   subresource changes only `.status`, and main-resource writes never change it. Writes that
//!   change nothing are no-ops. One global resourceVersion increases with every change.
//! - **Faults** (Rust API and `POST /__testapi/...`): drop every watch, expire every
//!   resourceVersion, refuse connections for a while (the listener is really closed), delay
//!   event delivery.
//!
//! Known differences from a real API server: continued list pages are read from the current
//! state (with the first page's resourceVersion) rather than a snapshot, so an object changed
//! between pages shows its newer state (the watch that follows replays the change); lists
//! ignore `resourceVersion`/`resourceVersionMatch` and always serve the latest state; there is
//! no schema validation, defaulting, admission, garbage collection, authentication, `dryRun`,
//! or `managedFields` in responses; only JSON is spoken (no protobuf, no YAML bodies).

mod body;
mod discovery;
mod error;
mod http;
mod object;
mod resources;
mod selector;
mod server;
mod state;
mod store;
mod watch;

pub use error::TestApiError;
pub use resources::ResourceType;
pub use server::TestApiServer;
pub use state::{Options, RecordedRequest, Stats};
