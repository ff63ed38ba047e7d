//! The middlewares that read other objects: forwardAuth's TLS Secrets, basicAuth's users and the errors middleware's Service, each recorded as an input of the Ingress's compile.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{IngressServiceBackend, ServiceBackendPort};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sluice_routing::middleware::{BasicAuthStep, ClientCertificate, ErrorPage, ForwardAuth};

use super::specs::{pattern, status_range};
use super::{Refusal, StepContext};
use crate::compile::backend::{resolve, BackendField, BackendSink, ServiceReference};
use crate::compile::ingress::IngressCompiler;
use crate::compile::tls::secret_value;
use crate::compile::version::Version;
use crate::snapshot::ObjectKey;
use crate::traefik::{BasicAuthSpec, ErrorsSpec, ForwardAuthSpec, IntOrString};

impl IngressCompiler<'_, '_> {
    pub(super) fn forward_auth(
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
    pub(super) fn basic_auth(
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
    pub(super) fn error_page(
        &mut self,
        spec: &ErrorsSpec,
        context: &StepContext<'_>,
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
        let id = self.middleware_backend(namespace, &backend, context.key)?;
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
