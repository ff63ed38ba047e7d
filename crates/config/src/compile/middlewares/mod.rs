//! Traefik's `router.middlewares`: each reference resolved to its Middleware object (chains flattened, Secrets and Services read) and compiled into the route policy, or the routes fail closed with an error naming the middleware and why.

use std::sync::Arc;

use sluice_routing::middleware::{Middleware as Applied, Step};
use sluice_routing::{RetryPolicy, RoutePolicy};

use super::ingress::IngressCompiler;
use super::version::Version;
use crate::diagnostic::ObjectRef;
use crate::snapshot::ObjectKey;
use crate::traefik::{Middleware, MiddlewareRef};

mod objects;
mod specs;

/// The provider suffix of a Middleware object's name in Traefik (`NAMESPACE-NAME@kubernetescrd`).
const CRD_PROVIDER: &str = "kubernetescrd";

/// How deep chains may nest before the compile stops (a loop is found sooner).
const MAX_CHAIN_DEPTH: usize = 16;

/// What a route's middlewares add to its policy.
#[derive(Default)]
struct Compiled {
    steps: Vec<Applied>,
    max_body_size: Option<u64>,
    retry: Option<RetryPolicy>,
    compression: Option<sluice_routing::Codings>,
}

/// Where a middleware reference sits, for diagnostics: the object that lists it and the field.
struct Referrer<'a> {
    object: &'a ObjectRef,
    field: &'a str,
    /// The namespace whose Middlewares may be used without `--allow-cross-namespace-middlewares`.
    namespace: &'a str,
}

/// Why a middleware cannot be applied.
type Refusal = String;

/// What a compiled middleware tells the user besides its step: the route still works, with a
/// difference worth knowing (info) or a field sluice does not apply (warning).
enum Note {
    Info(String),
    Warning(String),
}

/// Traefik's `provider.Normalize`: every run of characters that are not letters or digits
/// becomes one `-`, and none is left at either end.
pub(super) fn normalize_id(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

impl IngressCompiler<'_, '_> {
    /// Applies a `router.middlewares` (or a Service's `service.middlewares`) list to `policy`.
    /// Any middleware that cannot be applied is an error, and `policy` then refuses every
    /// request (503): a route never serves without the protection it lists.
    pub(super) fn apply_middlewares(
        &mut self,
        list: &str,
        (object, field, namespace): (&ObjectRef, &str, &str),
        policy: &mut RoutePolicy,
    ) {
        self.note_middlewares_read();
        let referrer = Referrer {
            object,
            field,
            namespace,
        };
        let mut compiled = Compiled::default();
        let mut refused = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let mut visiting = Vec::new();
            if let Err(why) = self.add_reference(entry, &referrer, &mut visiting, &mut compiled) {
                let message = format!("middleware {entry}: {why}; every route of this {} answers 503 rather than serve without it", object_kind(object));
                self.diagnostics.error(object, field, message);
                refused.push(entry.to_owned());
            }
        }
        if !refused.is_empty() {
            let reason = format!("Traefik middleware {}", refused.join(", "));
            policy.refused = Some(match policy.refused.take() {
                Some(earlier) => format!("{earlier}, {reason}"),
                None => reason,
            });
        }
        policy.middlewares.extend(compiled.steps);
        if let Some(limit) = compiled.max_body_size {
            policy.max_body_size = Some(match policy.max_body_size {
                Some(earlier) if earlier != 0 => earlier.min(limit),
                _ => limit,
            });
        }
        if let Some(retry) = compiled.retry {
            policy.retry = retry;
        }
        if let Some(codings) = compiled.compression {
            policy.compression = sluice_routing::Compression::Codings(codings);
        }
    }

    /// Records every Middleware of the snapshot as an input of this Ingress's compile: a new,
    /// changed or deleted one may change what its references resolve to.
    fn note_middlewares_read(&mut self) {
        if self.fragment.middlewares.is_some() {
            return;
        }
        let seen = self
            .middlewares
            .iter()
            .map(|(key, middleware)| (key.clone(), Version::of(middleware)))
            .collect();
        self.fragment.middlewares = Some(seen);
    }

    /// Resolves one reference, as an Ingress writes it (`NAMESPACE-NAME@kubernetescrd`).
    fn add_reference(
        &mut self,
        entry: &str,
        referrer: &Referrer<'_>,
        visiting: &mut Vec<ObjectKey>,
        compiled: &mut Compiled,
    ) -> Result<(), Refusal> {
        let (name, provider) = match entry.split_once('@') {
            Some((name, provider)) => (name, provider),
            None => return Err(format!("names no provider: Traefik reads it as {entry}@kubernetes, which no Middleware is; write NAMESPACE-NAME@{CRD_PROVIDER}")),
        };
        if provider != CRD_PROVIDER {
            return Err(format!("is a middleware of Traefik's {provider} provider (its file or Docker configuration), which sluice does not read; only Middleware objects ({CRD_PROVIDER}) are applied"));
        }
        let key = self.find_middleware(name, referrer.namespace).ok_or_else(|| {
            format!("no Middleware object is named so (Traefik names a Middleware NAMESPACE-NAME; sluice also takes NAME in the namespace {}); it may not exist, or its apiVersion is neither traefik.io/v1alpha1 nor traefik.containo.us/v1alpha1", referrer.namespace)
        })?;
        self.add_middleware(&key, referrer, visiting, compiled)
    }

    /// The Middleware an Ingress's reference `name` means: the one whose `namespace-name`
    /// normalises to it, as Traefik names them, else the one called `name` in `namespace`.
    fn find_middleware(&self, name: &str, namespace: &str) -> Option<ObjectKey> {
        let wanted = normalize_id(name);
        self.middlewares
            .keys()
            .find(|key| normalize_id(&format!("{}-{}", key.namespace, key.name)) == wanted)
            .or_else(|| {
                self.middlewares
                    .keys()
                    .find(|key| key.namespace == namespace && key.name == name)
            })
            .cloned()
    }

    fn add_middleware(
        &mut self,
        key: &ObjectKey,
        referrer: &Referrer<'_>,
        visiting: &mut Vec<ObjectKey>,
        compiled: &mut Compiled,
    ) -> Result<(), Refusal> {
        let where_ = format!("Middleware {}/{}", key.namespace, key.name);
        if key.namespace != referrer.namespace && !self.options.allow_cross_namespace_middlewares {
            return Err(format!("{where_} is in another namespace than the {} ({}); sluice applies middlewares of other namespaces only with --allow-cross-namespace-middlewares", object_kind(referrer.object), referrer.namespace));
        }
        if visiting.contains(key) || visiting.len() >= MAX_CHAIN_DEPTH {
            return Err(format!(
                "{where_} is part of a chain that loops back to itself"
            ));
        }
        let middlewares = self.middlewares;
        let middleware = middlewares
            .get(key)
            .ok_or_else(|| format!("{where_} does not exist"))?;
        if let Some(why) = &middleware.unreadable {
            return Err(format!("the spec of {where_} cannot be read: {why}"));
        }
        let types = middleware.spec.types();
        let kind = match types.as_slice() {
            [] => return Err(format!("{where_} sets no middleware type")),
            [one] => *one,
            several => return Err(format!("{where_} sets several middleware types ({}); Traefik refuses a Middleware with more than one", several.join(", "))),
        };
        let name: Arc<str> = normalize_id(&format!("{}-{}", key.namespace, key.name)).into();
        let context = StepContext {
            key,
            where_: &where_,
            name: &name,
        };
        visiting.push(key.clone());
        let result = self.compile_step(kind, middleware, &context, referrer, visiting, compiled);
        visiting.pop();
        result
    }

    /// Compiles the one type a Middleware sets into the route's steps or its policy.
    fn compile_step(
        &mut self,
        kind: &str,
        middleware: &Middleware,
        context: &StepContext<'_>,
        referrer: &Referrer<'_>,
        visiting: &mut Vec<ObjectKey>,
        compiled: &mut Compiled,
    ) -> Result<(), Refusal> {
        let spec = &middleware.spec;
        let (step, notes) = match kind {
            "forwardAuth" => {
                let auth = required(spec.forward_auth.as_ref())?;
                (
                    Step::ForwardAuth(Arc::new(self.forward_auth(auth, context)?)),
                    Vec::new(),
                )
            }
            "basicAuth" => {
                let auth = required(spec.basic_auth.as_ref())?;
                (
                    Step::BasicAuth(Arc::new(self.basic_auth(auth, context)?)),
                    Vec::new(),
                )
            }
            "errors" => {
                let page = self.error_page(required(spec.errors.as_ref())?, context)?;
                (Step::Errors(Arc::new(page)), Vec::new())
            }
            "chain" => {
                for link in &required(spec.chain.as_ref())?.middlewares {
                    self.add_link(link, context.key, referrer, visiting, compiled)?;
                }
                return Ok(());
            }
            "buffering" => {
                let (limit, notes) = specs::buffering(required(spec.buffering.as_ref())?, context);
                if let Some(limit) = limit {
                    compiled.max_body_size =
                        Some(compiled.max_body_size.map_or(limit, |m| m.min(limit)));
                }
                self.note(referrer, notes);
                return Ok(());
            }
            "retry" => {
                let (retry, notes) = specs::retry(required(spec.retry.as_ref())?, context)?;
                compiled.retry = Some(retry);
                self.note(referrer, notes);
                return Ok(());
            }
            "compress" => {
                let (codings, notes) = specs::compress(required(spec.compress.as_ref())?, context);
                compiled.compression = Some(codings);
                self.note(referrer, notes);
                return Ok(());
            }
            kind => specs::spec_step(kind, spec, context)?,
        };
        self.note(referrer, notes);
        compiled.steps.push(Applied {
            name: context.name.clone(),
            step,
        });
        Ok(())
    }

    /// Reports a middleware's notes on the object and field that list it.
    fn note(&mut self, referrer: &Referrer<'_>, notes: Vec<Note>) {
        for note in notes {
            match note {
                Note::Info(text) => self.diagnostics.info(referrer.object, referrer.field, text),
                Note::Warning(text) => {
                    self.diagnostics
                        .warning(referrer.object, referrer.field, text);
                }
            }
        }
    }

    /// One link of a chain: a Middleware by name, in the chain's namespace unless it names
    /// another, or a `name@provider` reference.
    fn add_link(
        &mut self,
        link: &MiddlewareRef,
        chain: &ObjectKey,
        referrer: &Referrer<'_>,
        visiting: &mut Vec<ObjectKey>,
        compiled: &mut Compiled,
    ) -> Result<(), Refusal> {
        let chain_name = format!("the chain Middleware {}/{}", chain.namespace, chain.name);
        if link.name.contains('@') {
            return self
                .add_reference(&link.name, referrer, visiting, compiled)
                .map_err(|why| format!("{chain_name} lists {}: {why}", link.name));
        }
        let namespace = link.namespace.as_deref().unwrap_or(&chain.namespace);
        let key = ObjectKey::new(namespace, &link.name);
        if !self.middlewares.contains_key(&key) {
            return Err(format!(
                "{chain_name} lists Middleware {namespace}/{}, which does not exist",
                link.name
            ));
        }
        self.add_middleware(&key, referrer, visiting, compiled)
    }
}

/// The Middleware being compiled, for its problems' messages.
struct StepContext<'a> {
    key: &'a ObjectKey,
    /// `Middleware namespace/name`.
    where_: &'a str,
    /// Traefik's name for it, `namespace-name`.
    name: &'a Arc<str>,
}

impl StepContext<'_> {
    /// A problem with one field of the Middleware: `Middleware ns/name FIELD WHAT`.
    fn problem(&self, field: &str, what: &str) -> Refusal {
        format!("{} {field} {what}", self.where_)
    }
}

fn object_kind(object: &ObjectRef) -> &str {
    object.as_str().split(' ').next().unwrap_or("object")
}

/// The spec part of the type the Middleware was found to set.
fn required<T>(part: Option<T>) -> Result<T, Refusal> {
    part.ok_or_else(|| "the middleware's spec is missing".to_owned())
}

#[cfg(test)]
mod tests {
    use super::normalize_id;

    #[test]
    fn ids_normalise_as_traefik_names_middlewares() {
        assert_eq!(
            normalize_id("default-forwardauth-authelia"),
            "default-forwardauth-authelia"
        );
        assert_eq!(normalize_id("my_ns-my.mw"), "my-ns-my-mw");
        assert_eq!(normalize_id("--a--b"), "a-b");
    }
}
