//! Traefik's `router.middlewares`: each reference resolved to its Middleware object (chains flattened, Secrets and Services read) and compiled into the route policy, or the routes fail closed with an error naming the middleware and why.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{IngressServiceBackend, ServiceBackendPort};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sluice_routing::middleware::{
    BasicAuthStep, ClientCertificate, ErrorPage, ForwardAuth, Headers, InFlightReq, IpAllowList,
    IpStrategy, Middleware as Applied, Pattern, RateLimit, RedirectRegex, RedirectScheme,
    SecurityHeaders, SourceCriterion, Step, StripPrefix, TraefikCors,
};
use sluice_routing::{RetryOn, RetryPolicy, RoutePolicy};

use super::backend::{resolve, BackendField, BackendSink, ServiceReference};
use super::incremental::Version;
use super::tls::secret_value;
use super::Compiler;
use crate::diagnostic::ObjectRef;
use crate::snapshot::ObjectKey;
use crate::traefik::{
    BasicAuthSpec, ErrorsSpec, ForwardAuthSpec, HeadersSpec, InFlightReqSpec, IntOrString,
    IpAllowListSpec, IpStrategySpec, Middleware, RateLimitSpec, RetrySpec, SourceCriterionSpec,
};

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

/// Traefik's `provider.Normalize`: every run of characters that are not letters or digits
/// becomes one `-`, and none is left at either end.
pub(super) fn normalize_id(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

impl Compiler<'_, '_> {
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

    /// Compiles the one type a Middleware sets.
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
        let mut push = |step: Step| {
            compiled.steps.push(Applied {
                name: context.name.clone(),
                step,
            });
        };
        match kind {
            "forwardAuth" => {
                let auth = spec
                    .forward_auth
                    .as_ref()
                    .map(|s| self.forward_auth(s, context));
                push(Step::ForwardAuth(Arc::new(required(auth)??)));
            }
            "basicAuth" => {
                let auth = spec
                    .basic_auth
                    .as_ref()
                    .map(|s| self.basic_auth(s, context));
                push(Step::BasicAuth(Arc::new(required(auth)??)));
            }
            "ipAllowList" | "ipWhiteList" => {
                let list = spec.ip_allow_list.as_ref().or(spec.ip_white_list.as_ref());
                let list = ip_allow_list(required(list)?, kind == "ipAllowList", context)?;
                push(Step::IpAllowList(Arc::new(list)));
            }
            "redirectScheme" => {
                let redirect = required(spec.redirect_scheme.as_ref())?;
                if redirect.scheme.trim().is_empty() {
                    return Err(context.problem("spec.redirectScheme.scheme", "is empty"));
                }
                let port = redirect.port.clone().filter(|port| !port.is_empty());
                push(Step::RedirectScheme(Arc::new(RedirectScheme {
                    scheme: redirect.scheme.trim().to_owned(),
                    port,
                    permanent: redirect.permanent,
                })));
            }
            "redirectRegex" => {
                let redirect = required(spec.redirect_regex.as_ref())?;
                let regex = pattern(&redirect.regex, "spec.redirectRegex.regex", context)?;
                push(Step::RedirectRegex(Arc::new(RedirectRegex {
                    regex,
                    replacement: redirect.replacement.trim().to_owned(),
                    permanent: redirect.permanent,
                })));
            }
            "stripPrefix" => {
                let strip = required(spec.strip_prefix.as_ref())?;
                if strip.force_slash.is_some() {
                    self.diagnostics.info(
                        referrer.object,
                        referrer.field,
                        format!(
                            "{}: forceSlash is deprecated in Traefik; it is applied as written",
                            context.where_
                        ),
                    );
                }
                push(Step::StripPrefix(Arc::new(StripPrefix {
                    prefixes: strip.prefixes.iter().map(|p| p.trim().to_owned()).collect(),
                    force_slash: strip.force_slash.unwrap_or(false),
                })));
            }
            "stripPrefixRegex" => {
                let strip = required(spec.strip_prefix_regex.as_ref())?;
                let regex = strip
                    .regex
                    .iter()
                    .map(|text| pattern(text, "spec.stripPrefixRegex.regex", context))
                    .collect::<Result<Vec<_>, _>>()?;
                push(Step::StripPrefixRegex { regex });
            }
            "addPrefix" => {
                let prefix = required(spec.add_prefix.as_ref())?.prefix.trim().to_owned();
                if prefix.is_empty() {
                    return Err(context.problem("spec.addPrefix.prefix", "is empty"));
                }
                push(Step::AddPrefix { prefix });
            }
            "replacePath" => {
                let path = required(spec.replace_path.as_ref())?.path.clone();
                push(Step::ReplacePath { path });
            }
            "replacePathRegex" => {
                let replace = required(spec.replace_path_regex.as_ref())?;
                let regex = pattern(&replace.regex, "spec.replacePathRegex.regex", context)?;
                push(Step::ReplacePathRegex {
                    regex,
                    replacement: replace.replacement.trim().to_owned(),
                });
            }
            "headers" => {
                let headers = headers(required(spec.headers.as_ref())?, context)?;
                for note in headers.1 {
                    self.diagnostics
                        .warning(referrer.object, referrer.field, note);
                }
                push(Step::Headers(Arc::new(headers.0)));
            }
            "rateLimit" => {
                let limit = required(spec.rate_limit.as_ref())?;
                if limit.redis.is_some() {
                    self.diagnostics.warning(referrer.object, referrer.field, format!("{}: redis is not used; each sluice replica counts its own requests, so N replicas admit up to N times the rate", context.where_));
                }
                push(Step::RateLimit(Arc::new(rate_limit(limit, context)?)));
            }
            "inFlightReq" => {
                let limit = required(spec.in_flight_req.as_ref())?;
                push(Step::InFlightReq(Arc::new(in_flight(limit, context)?)));
            }
            "buffering" => {
                let buffering = required(spec.buffering.as_ref())?;
                if let Some(max) = buffering.max_request_body_bytes.filter(|max| *max > 0) {
                    let max = u64::try_from(max).unwrap_or(u64::MAX);
                    compiled.max_body_size =
                        Some(compiled.max_body_size.map_or(max, |m| m.min(max)));
                }
                let notes = [
                    (
                        buffering
                            .max_response_body_bytes
                            .filter(|m| *m > 0)
                            .is_some(),
                        "maxResponseBodyBytes is not enforced: responses stream to the client",
                    ),
                    (
                        buffering.retry_expression.is_some(),
                        "retryExpression is not evaluated: sluice's retry rules apply",
                    ),
                ];
                for (_, note) in notes.iter().filter(|(set, _)| *set) {
                    self.diagnostics.warning(
                        referrer.object,
                        referrer.field,
                        format!("{}: {note}", context.where_),
                    );
                }
            }
            "retry" => {
                let (retry, notes) = retry(required(spec.retry.as_ref())?, context)?;
                for note in notes {
                    self.diagnostics
                        .warning(referrer.object, referrer.field, note);
                }
                compiled.retry = Some(retry);
            }
            "chain" => {
                let chain = required(spec.chain.as_ref())?;
                for link in &chain.middlewares {
                    self.add_link(link, context.key, referrer, visiting, compiled)?;
                }
            }
            "compress" => {
                self.diagnostics.info(referrer.object, referrer.field, format!("{}: compress is accepted, but sluice does not compress responses yet: they go out as the pod sent them", context.where_));
            }
            "errors" => {
                let page = self.error_page(required(spec.errors.as_ref())?, context, referrer)?;
                push(Step::Errors(Arc::new(page)));
            }
            other => {
                return Err(format!("{} is of type {other}, which sluice does not apply (it applies forwardAuth, basicAuth, ipAllowList, ipWhiteList, redirectScheme, redirectRegex, stripPrefix, stripPrefixRegex, addPrefix, replacePath, replacePathRegex, headers, rateLimit, inFlightReq, buffering, retry, chain, compress and errors)", context.where_));
            }
        }
        Ok(())
    }

    /// One link of a chain: a Middleware by name, in the chain's namespace unless it names
    /// another, or a `name@provider` reference.
    fn add_link(
        &mut self,
        link: &crate::traefik::MiddlewareRef,
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

    fn forward_auth(
        &mut self,
        spec: &ForwardAuthSpec,
        context: &StepContext<'_>,
    ) -> Result<ForwardAuth, Refusal> {
        let address = spec.address.trim();
        let uri: Option<http::Uri> = address.parse().ok();
        let valid = uri.as_ref().is_some_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some()
        });
        if !valid {
            return Err(context.problem(
                "spec.forwardAuth.address",
                &format!("{address:?} is not an http:// or https:// URL"),
            ));
        }
        if spec.forward_body {
            return Err(context.problem("spec.forwardAuth.forwardBody", "is true, and sluice does not send the request body to the auth server, whose decision may depend on it"));
        }
        let response_headers_regex = match spec.auth_response_headers_regex.as_deref() {
            Some(text) if !text.is_empty() => Some(pattern(
                text,
                "spec.forwardAuth.authResponseHeadersRegex",
                context,
            )?),
            _ => None,
        };
        let tls = spec.tls.clone().unwrap_or_default();
        let roots = match tls.ca_secret.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => Some(self.ca_roots(name, context)?),
            None => None,
        };
        let client_certificate = match tls.cert_secret.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => Some(self.client_certificate(name, context)?),
            None => None,
        };
        Ok(ForwardAuth {
            address: address.to_owned(),
            trust_forward_header: spec.trust_forward_header,
            request_headers: spec.auth_request_headers.clone(),
            response_headers: spec.auth_response_headers.clone(),
            response_headers_regex,
            add_auth_cookies: spec.add_auth_cookies_to_response.clone(),
            preserve_location: spec.preserve_location_header,
            preserve_method: spec.preserve_request_method,
            signin_url: spec.auth_signin_url.clone().filter(|url| !url.is_empty()),
            max_response_body: spec
                .max_response_body_size
                .and_then(|size| u64::try_from(size).ok()),
            insecure_skip_verify: tls.insecure_skip_verify,
            roots,
            client_certificate,
        })
    }

    /// A Secret of the Middleware's namespace, recorded as an input of the compile.
    fn middleware_secret(
        &mut self,
        name: &str,
        context: &StepContext<'_>,
    ) -> Result<&Secret, Refusal> {
        let key = ObjectKey::new(&context.key.namespace, name);
        let secret = self.secrets.get(&key);
        self.fragment
            .secrets
            .push((key.clone(), secret.map(Version::of)));
        secret.ok_or_else(|| {
            format!(
                "{} names Secret {}/{name}, which does not exist",
                context.where_, key.namespace
            )
        })
    }

    /// `tls.caSecret`: `tls.ca`, else `ca.crt`, else the Secret's only key.
    fn ca_roots(
        &mut self,
        name: &str,
        context: &StepContext<'_>,
    ) -> Result<Vec<CertificateDer<'static>>, Refusal> {
        let secret = self.middleware_secret(name, context)?;
        let only_key = secret
            .data
            .as_ref()
            .filter(|data| data.len() == 1)
            .and_then(|data| data.keys().next().cloned());
        let pem = secret_value(secret, "tls.ca")
            .or_else(|| secret_value(secret, "ca.crt"))
            .or_else(|| only_key.and_then(|key| secret_value(secret, &key)))
            .ok_or_else(|| {
                context.problem(
                    "spec.forwardAuth.tls.caSecret",
                    &format!("Secret {name} has no tls.ca or ca.crt"),
                )
            })?;
        let roots = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|roots| !roots.is_empty())
            .ok_or_else(|| {
                context.problem(
                    "spec.forwardAuth.tls.caSecret",
                    &format!("Secret {name} holds no PEM certificate"),
                )
            })?;
        Ok(roots)
    }

    /// `tls.certSecret`: `tls.crt` and `tls.key`.
    fn client_certificate(
        &mut self,
        name: &str,
        context: &StepContext<'_>,
    ) -> Result<ClientCertificate, Refusal> {
        let secret = self.middleware_secret(name, context)?;
        let (Some(chain), Some(key)) = (
            secret_value(secret, "tls.crt"),
            secret_value(secret, "tls.key"),
        ) else {
            return Err(context.problem(
                "spec.forwardAuth.tls.certSecret",
                &format!("Secret {name} needs tls.crt and tls.key"),
            ));
        };
        Ok(ClientCertificate {
            chain_pem: chain.to_vec(),
            key_pem: key.to_vec(),
        })
    }

    /// `basicAuth`: a `kubernetes.io/basic-auth` Secret's `username` and `password`, or the
    /// htpasswd lines of a Secret's only key.
    fn basic_auth(
        &mut self,
        spec: &BasicAuthSpec,
        context: &StepContext<'_>,
    ) -> Result<BasicAuthStep, Refusal> {
        let name = spec.secret.trim();
        if name.is_empty() {
            return Err(context.problem("spec.basicAuth.secret", "is not set"));
        }
        let secret = self.middleware_secret(name, context)?;
        let users = basic_auth_users(secret).map_err(|why| {
            context.problem("spec.basicAuth.secret", &format!("Secret {name}: {why}"))
        })?;
        Ok(BasicAuthStep {
            realm: spec
                .realm
                .clone()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "traefik".to_owned()),
            users,
            remove_header: spec.remove_header,
            header_field: spec.header_field.clone().filter(|f| !f.is_empty()),
        })
    }

    /// `errors`: the statuses caught and the Service the pages come from.
    fn error_page(
        &mut self,
        spec: &ErrorsSpec,
        context: &StepContext<'_>,
        referrer: &Referrer<'_>,
    ) -> Result<ErrorPage, Refusal> {
        let ranges = |texts: &mut dyn Iterator<Item = &str>| -> Result<Vec<(u16, u16)>, Refusal> {
            texts
                .map(|text| {
                    status_range(text).ok_or_else(|| {
                        context.problem(
                            "spec.errors.status",
                            &format!("{text:?} is not a status or a range such as 500-599"),
                        )
                    })
                })
                .collect()
        };
        let statuses = ranges(&mut spec.status.iter().map(String::as_str))?;
        let mut rewrites = Vec::new();
        for (range, to) in &spec.status_rewrites {
            let range = ranges(&mut std::iter::once(range.as_str()))?;
            let to = u16::try_from(*to)
                .ok()
                .filter(|to| (100..600).contains(to))
                .ok_or_else(|| {
                    context.problem(
                        "spec.errors.statusRewrites",
                        &format!("{to} is not a status"),
                    )
                })?;
            rewrites.extend(range.into_iter().map(|range| (range, to)));
        }
        let service = spec
            .service
            .as_ref()
            .filter(|s| !s.name.is_empty())
            .ok_or_else(|| context.problem("spec.errors.service", "names no Service"))?;
        if service
            .kind
            .as_deref()
            .is_some_and(|kind| kind != "Service")
        {
            return Err(context.problem(
                "spec.errors.service.kind",
                "is a TraefikService, which sluice does not read",
            ));
        }
        let namespace = service
            .namespace
            .as_deref()
            .unwrap_or(&context.key.namespace);
        if namespace != context.key.namespace && !self.options.allow_cross_namespace_middlewares {
            return Err(context.problem(
                "spec.errors.service.namespace",
                "names another namespace, which needs --allow-cross-namespace-middlewares",
            ));
        }
        let port = match &service.port {
            Some(IntOrString::Int(number)) => ServiceBackendPort {
                number: i32::try_from(*number).ok(),
                name: None,
            },
            Some(IntOrString::String(name)) => ServiceBackendPort {
                number: name.parse().ok(),
                name: name.parse::<i32>().is_err().then(|| name.clone()),
            },
            None => {
                return Err(context.problem(
                    "spec.errors.service.port",
                    "is not set (Traefik requires it)",
                ))
            }
        };
        let backend = IngressServiceBackend {
            name: service.name.clone(),
            port: Some(port),
        };
        let id = self.middleware_backend(namespace, &backend, context.key, referrer)?;
        let query = spec.query.clone().unwrap_or_default();
        let query = if query.starts_with('/') {
            query
        } else {
            format!("/{query}")
        };
        Ok(ErrorPage {
            statuses,
            rewrites,
            backend: id,
            query,
            request_headers: spec.error_request_headers.clone(),
        })
    }

    /// Resolves a Service a Middleware names into a backend of the table.
    fn middleware_backend(
        &mut self,
        namespace: &str,
        service: &IngressServiceBackend,
        middleware: &ObjectKey,
        _referrer: &Referrer<'_>,
    ) -> Result<sluice_routing::BackendId, Refusal> {
        let reference = ServiceReference {
            namespace,
            service,
            field: BackendField::MiddlewareService,
            ingress: middleware,
            owner_kind: "Middleware",
            service_upstream: false,
        };
        let found = self.services.get(namespace, &service.name);
        self.fragment.services.push((
            ObjectKey::new(namespace, &service.name),
            found.map(Version::of),
        ));
        let sink = BackendSink {
            builder: &mut self.backends,
            endpoint_sources: &mut self.endpoint_sources,
            diagnostics: &mut self.diagnostics,
        };
        resolve(self.services, &self.endpoints, &reference, sink)
            .map(|resolved| resolved.id)
            .ok_or_else(|| {
                format!(
                    "Middleware {}/{}: spec.errors.service names no port",
                    middleware.namespace, middleware.name
                )
            })
    }
}

/// The Middleware being compiled.
struct StepContext<'a> {
    key: &'a ObjectKey,
    /// `Middleware namespace/name`.
    where_: &'a str,
    /// Traefik's name for it, `namespace-name`.
    name: &'a Arc<str>,
}

impl StepContext<'_> {
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

fn pattern(text: &str, field: &str, context: &StepContext<'_>) -> Result<Pattern, Refusal> {
    Pattern::new(text.trim()).map_err(|error| {
        context.problem(
            field,
            &format!("{text:?} is not a regular expression sluice can run: {error}"),
        )
    })
}

/// `404` or `500-599`.
fn status_range(text: &str) -> Option<(u16, u16)> {
    let text = text.trim();
    let (low, high) = text.split_once('-').unwrap_or((text, text));
    let (low, high): (u16, u16) = (low.trim().parse().ok()?, high.trim().parse().ok()?);
    (low <= high && low >= 100 && high < 600).then_some((low, high))
}

/// A source range entry: a CIDR, or an address standing for itself.
fn ip_net(text: &str) -> Option<ipnet::IpNet> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>().ok().or_else(|| {
        text.parse::<std::net::IpAddr>()
            .ok()
            .map(ipnet::IpNet::from)
    })
}

fn ip_strategy(
    spec: Option<&IpStrategySpec>,
    field: &str,
    context: &StepContext<'_>,
) -> Result<IpStrategy, Refusal> {
    let Some(spec) = spec else {
        return Ok(IpStrategy::default());
    };
    let excluded = spec
        .excluded_ips
        .iter()
        .map(|text| {
            ip_net(text).ok_or_else(|| {
                context.problem(
                    &format!("{field}.excludedIPs"),
                    &format!("{text:?} is not an IP address or CIDR"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ipv6_subnet = match spec.ipv6_subnet {
        None => None,
        Some(bits) => Some(
            u8::try_from(bits)
                .ok()
                .filter(|b| (1..=128).contains(b))
                .ok_or_else(|| {
                    context.problem(&format!("{field}.ipv6Subnet"), "must be from 1 to 128")
                })?,
        ),
    };
    Ok(IpStrategy {
        depth: spec
            .depth
            .and_then(|d| usize::try_from(d).ok())
            .unwrap_or(0),
        excluded,
        ipv6_subnet,
    })
}

fn ip_allow_list(
    spec: &IpAllowListSpec,
    allow_list: bool,
    context: &StepContext<'_>,
) -> Result<IpAllowList, Refusal> {
    let kind = if allow_list {
        "ipAllowList"
    } else {
        "ipWhiteList"
    };
    let ranges = spec
        .source_range
        .iter()
        .map(|text| {
            ip_net(text).ok_or_else(|| {
                context.problem(
                    &format!("spec.{kind}.sourceRange"),
                    &format!("{text:?} is not an IP address or CIDR"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ranges.is_empty() {
        return Err(context.problem(&format!("spec.{kind}.sourceRange"), "is empty"));
    }
    let reject_status = match spec.reject_status_code.filter(|_| allow_list) {
        None | Some(0) => 403,
        Some(code) => u16::try_from(code)
            .ok()
            .filter(|code| {
                http::StatusCode::from_u16(*code).is_ok_and(|s| s.canonical_reason().is_some())
            })
            .ok_or_else(|| {
                context.problem(
                    "spec.ipAllowList.rejectStatusCode",
                    &format!("{code} is not a status"),
                )
            })?,
    };
    Ok(IpAllowList {
        ranges,
        strategy: ip_strategy(
            spec.ip_strategy.as_ref(),
            &format!("spec.{kind}.ipStrategy"),
            context,
        )?,
        reject_status,
    })
}

/// A Traefik duration: a bare number is seconds, else Go's syntax (`1m30s`, `500ms`).
fn duration(value: &IntOrString) -> Option<Duration> {
    match value {
        IntOrString::Int(seconds) => u64::try_from(*seconds).ok().map(Duration::from_secs),
        IntOrString::String(text) => {
            let text = text.trim();
            match text.parse::<u64>() {
                Ok(seconds) => Some(Duration::from_secs(seconds)),
                Err(_) => humantime::parse_duration(text).ok(),
            }
        }
    }
}

fn source_criterion(
    spec: Option<&SourceCriterionSpec>,
    default: SourceCriterion,
    field: &str,
    context: &StepContext<'_>,
) -> Result<SourceCriterion, Refusal> {
    let Some(spec) = spec else {
        return Ok(default);
    };
    let header = spec
        .request_header_name
        .as_deref()
        .filter(|h| !h.is_empty());
    let host = spec.request_host.unwrap_or(false);
    match (&spec.ip_strategy, header, host) {
        (None, None, false) => Ok(default),
        (Some(strategy), None, false) => Ok(SourceCriterion::ClientAddress(ip_strategy(
            Some(strategy),
            &format!("{field}.ipStrategy"),
            context,
        )?)),
        (None, Some(header), false) => Ok(SourceCriterion::Header(header.to_ascii_lowercase())),
        (None, None, true) => Ok(SourceCriterion::Host),
        _ => Err(context.problem(
            field,
            "sets more than one of ipStrategy, requestHeaderName and requestHost",
        )),
    }
}

fn rate_limit(spec: &RateLimitSpec, context: &StepContext<'_>) -> Result<RateLimit, Refusal> {
    let period = match &spec.period {
        None => Duration::from_secs(1),
        Some(value) => duration(value)
            .ok_or_else(|| context.problem("spec.rateLimit.period", "is not a duration"))?,
    };
    let period = if period.is_zero() {
        Duration::from_secs(1)
    } else {
        period
    };
    let average = spec.average.unwrap_or(0);
    if average < 0 {
        return Err(context.problem("spec.rateLimit.average", "is negative"));
    }
    #[allow(clippy::cast_precision_loss)]
    let per_second = (average > 0).then(|| average as f64 / period.as_secs_f64());
    let burst = spec.burst.unwrap_or(1).max(1);
    let source = source_criterion(
        spec.source_criterion.as_ref(),
        SourceCriterion::ClientAddress(IpStrategy::default()),
        "spec.rateLimit.sourceCriterion",
        context,
    )?;
    Ok(RateLimit {
        per_second,
        burst: u32::try_from(burst).unwrap_or(u32::MAX),
        source,
    })
}

fn in_flight(spec: &InFlightReqSpec, context: &StepContext<'_>) -> Result<InFlightReq, Refusal> {
    let amount = u64::try_from(spec.amount.unwrap_or(0))
        .map_err(|_| context.problem("spec.inFlightReq.amount", "is negative"))?;
    let source = source_criterion(
        spec.source_criterion.as_ref(),
        SourceCriterion::Host,
        "spec.inFlightReq.sourceCriterion",
        context,
    )?;
    Ok(InFlightReq { amount, source })
}

/// `retry` as the route's retry policy: `attempts` tries; without `status`, only a connection
/// that failed before anything was sent is tried again (any method, as Traefik does); with
/// `status`, answers of those statuses too, for idempotent requests.
fn retry(
    spec: &RetrySpec,
    context: &StepContext<'_>,
) -> Result<(RetryPolicy, Vec<String>), Refusal> {
    let attempts = spec
        .attempts
        .and_then(|a| u32::try_from(a).ok())
        .filter(|a| *a > 0)
        .ok_or_else(|| context.problem("spec.retry.attempts", "must be more than 0"))?;
    let mut notes = Vec::new();
    let mut on = RetryOn::none();
    for text in &spec.status {
        let Some((low, high)) = status_range(text) else {
            return Err(context.problem(
                "spec.retry.status",
                &format!("{text:?} is not a status or a range"),
            ));
        };
        let mut any = false;
        for status in low..=high {
            let flag = match status {
                500 => &mut on.http_500,
                502 => &mut on.http_502,
                503 => &mut on.http_503,
                504 => &mut on.http_504,
                429 => &mut on.http_429,
                _ => continue,
            };
            *flag = true;
            any = true;
        }
        if !any || low != high && (low..=high).any(|s| ![429, 500, 502, 503, 504].contains(&s)) {
            notes.push(format!("{}: spec.retry.status {text:?}: sluice retries on 429, 500, 502, 503 and 504 only; other statuses are answered as they come", context.where_));
        }
    }
    on.non_idempotent = spec.retry_non_idempotent_method;
    let timeout = spec
        .timeout
        .as_ref()
        .and_then(duration)
        .filter(|t| !t.is_zero());
    let backoff = spec
        .initial_interval
        .as_ref()
        .and_then(duration)
        .filter(|t| !t.is_zero());
    Ok((
        RetryPolicy {
            on,
            tries: attempts,
            timeout,
            backoff,
            ..RetryPolicy::default()
        },
        notes,
    ))
}

/// The users of a basicAuth Secret, as Traefik reads them.
fn basic_auth_users(secret: &Secret) -> Result<Vec<(String, String)>, String> {
    if secret.type_.as_deref() == Some("kubernetes.io/basic-auth") {
        let (Some(user), Some(password)) = (
            secret_value(secret, "username"),
            secret_value(secret, "password"),
        ) else {
            return Err("a kubernetes.io/basic-auth Secret needs username and password".to_owned());
        };
        let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
        let hash = format!(
            "{{SHA}}{}",
            base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
        );
        return Ok(vec![(String::from_utf8_lossy(user).into_owned(), hash)]);
    }
    let data: BTreeMap<&str, &[u8]> = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.as_str(), value.0.as_slice()))
        .chain(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(key, value)| (key.as_str(), value.as_bytes())),
        )
        .collect();
    let [(_, lines)] = data.into_iter().collect::<Vec<_>>()[..] else {
        return Err("it must hold exactly one key (the users, one name:hash per line)".to_owned());
    };
    let mut users = Vec::new();
    for line in String::from_utf8_lossy(lines)
        .lines()
        .map(|l| l.trim_end_matches('\r'))
    {
        if line.is_empty() {
            continue;
        }
        match line.split(':').collect::<Vec<_>>()[..] {
            [name, hash] => users.push((name.to_owned(), hash.to_owned())),
            _ => return Err(format!("{line:?} is not a name:hash line")),
        }
    }
    if users.is_empty() {
        return Err("it holds no users".to_owned());
    }
    Ok(users)
}

/// `headers`: the custom headers, CORS and the security headers, with a note for each field
/// Traefik v3 no longer applies.
fn headers(
    spec: &HeadersSpec,
    context: &StepContext<'_>,
) -> Result<(Headers, Vec<String>), Refusal> {
    let header_list = |map: &BTreeMap<String, String>,
                       field: &str|
     -> Result<Vec<(String, Option<String>)>, Refusal> {
        map.iter()
            .map(|(name, value)| {
                let valid = http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && http::HeaderValue::from_str(value).is_ok();
                if !valid {
                    return Err(
                        context.problem(field, &format!("{name:?}: {value:?} is not a header"))
                    );
                }
                Ok((
                    name.to_ascii_lowercase(),
                    Some(value.clone()).filter(|v| !v.is_empty()),
                ))
            })
            .collect()
    };
    let cors_set = spec.access_control_allow_credentials
        || !spec.access_control_allow_headers.is_empty()
        || !spec.access_control_allow_methods.is_empty()
        || !spec.access_control_allow_origin_list.is_empty()
        || !spec.access_control_allow_origin_list_regex.is_empty()
        || !spec.access_control_expose_headers.is_empty()
        || spec.access_control_max_age.is_some()
        || spec.add_vary_header;
    let cors = match cors_set {
        false => None,
        true => Some(TraefikCors {
            origins: spec.access_control_allow_origin_list.clone(),
            origin_patterns: spec
                .access_control_allow_origin_list_regex
                .iter()
                .map(|text| {
                    pattern(
                        text,
                        "spec.headers.accessControlAllowOriginListRegex",
                        context,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?,
            methods: spec.access_control_allow_methods.clone(),
            headers: spec.access_control_allow_headers.clone(),
            expose_headers: spec.access_control_expose_headers.clone(),
            credentials: spec.access_control_allow_credentials,
            max_age: spec.access_control_max_age,
            add_vary: spec.add_vary_header,
        }),
    };
    let mut always = Vec::new();
    let frame = spec
        .custom_frame_options_value
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| spec.frame_deny.then(|| "DENY".to_owned()));
    let xss = spec
        .custom_browser_xss_value
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| spec.browser_xss_filter.then(|| "1; mode=block".to_owned()));
    let fields = [
        ("x-frame-options", frame),
        (
            "x-content-type-options",
            spec.content_type_nosniff.then(|| "nosniff".to_owned()),
        ),
        ("x-xss-protection", xss),
        (
            "content-security-policy",
            spec.content_security_policy.clone(),
        ),
        (
            "content-security-policy-report-only",
            spec.content_security_policy_report_only.clone(),
        ),
        ("referrer-policy", spec.referrer_policy.clone()),
        ("permissions-policy", spec.permissions_policy.clone()),
    ];
    for (name, value) in fields {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            if http::HeaderValue::from_str(&value).is_err() {
                return Err(context.problem(
                    "spec.headers",
                    &format!("the {name} value {value:?} is not a header value"),
                ));
            }
            always.push((name.to_owned(), value));
        }
    }
    let sts = spec.sts_seconds.filter(|s| *s > 0).map(|seconds| {
        let mut value = format!("max-age={seconds}");
        if spec.sts_include_subdomains {
            value.push_str("; includeSubDomains");
        }
        if spec.sts_preload {
            value.push_str("; preload");
        }
        value
    });
    let security = SecurityHeaders {
        allowed_hosts: spec.allowed_hosts.clone(),
        hosts_proxy_headers: spec
            .hosts_proxy_headers
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        ssl_proxy_headers: spec
            .ssl_proxy_headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect(),
        sts,
        force_sts: spec.force_sts_header,
        always,
        public_key: spec.public_key.clone().filter(|v| !v.is_empty()),
        is_development: spec.is_development,
    };
    let mut notes = Vec::new();
    let removed = [
        ("sslRedirect", spec.ssl_redirect.is_some()),
        (
            "sslTemporaryRedirect",
            spec.ssl_temporary_redirect.is_some(),
        ),
        ("sslHost", spec.ssl_host.is_some()),
        ("sslForceHost", spec.ssl_force_host.is_some()),
        ("featurePolicy", spec.feature_policy.is_some()),
    ];
    for (field, _) in removed.iter().filter(|(_, set)| *set) {
        notes.push(format!("{}: spec.headers.{field} was removed in Traefik v3 and has no effect there or in sluice (use a redirectScheme middleware, or permissionsPolicy)", context.where_));
    }
    let csp_nonce = [
        &spec.content_security_policy,
        &spec.content_security_policy_report_only,
    ]
    .into_iter()
    .flatten()
    .any(|v| v.contains("$NONCE"));
    if csp_nonce {
        notes.push(format!("{}: $NONCE in a Content-Security-Policy is sent as written, not replaced by a fresh nonce", context.where_));
    }
    let headers = Headers {
        request: header_list(
            &spec.custom_request_headers,
            "spec.headers.customRequestHeaders",
        )?,
        response: header_list(
            &spec.custom_response_headers,
            "spec.headers.customResponseHeaders",
        )?,
        cors,
        security,
    };
    Ok((headers, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_normalise_as_traefik_names_middlewares() {
        assert_eq!(
            normalize_id("default-forwardauth-authelia"),
            "default-forwardauth-authelia"
        );
        assert_eq!(normalize_id("my_ns-my.mw"), "my-ns-my-mw");
        assert_eq!(normalize_id("--a--b"), "a-b");
    }

    #[test]
    fn status_ranges_are_inclusive_and_checked() {
        assert_eq!(status_range("500-599"), Some((500, 599)));
        assert_eq!(status_range("404"), Some((404, 404)));
        assert_eq!(status_range("500,502"), None);
        assert_eq!(status_range("600"), None);
    }

    #[test]
    fn durations_read_seconds_and_go_syntax() {
        assert_eq!(
            duration(&IntOrString::Int(10)),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            duration(&IntOrString::String("1m".into())),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            duration(&IntOrString::String("250ms".into())),
            Some(Duration::from_millis(250))
        );
    }
}
