//! Traefik's `Middleware` objects (`traefik.io/v1alpha1`, and the older `traefik.containo.us/v1alpha1`), as plain serde types.
//!
//! A Middleware holds exactly one middleware type. Every type sluice applies is a typed field;
//! any other key of the spec is kept in `other`, so that a route that references such a
//! Middleware fails closed with the type's name rather than lose what it did.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The API groups Traefik's CRDs are served under: `traefik.io` since v2.10, and
/// `traefik.containo.us` before (and still applied in many clusters).
pub const TRAEFIK_GROUPS: [&str; 2] = ["traefik.io", "traefik.containo.us"];

/// The version of the Middleware CRD in both groups.
pub const MIDDLEWARE_VERSION: &str = "v1alpha1";

/// A Traefik Middleware.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Middleware {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MiddlewareSpec,
    /// Why the spec could not be read, when it came from the API server in a shape sluice does
    /// not understand: every route that uses it fails closed.
    #[serde(skip)]
    pub unreadable: Option<String>,
    /// The API group it was read from (`traefik.io` or `traefik.containo.us`).
    #[serde(skip)]
    pub group: String,
}

impl k8s_openapi::Resource for Middleware {
    const API_VERSION: &'static str = "traefik.io/v1alpha1";
    const GROUP: &'static str = "traefik.io";
    const KIND: &'static str = "Middleware";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "middlewares";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Middleware {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The middleware types of a Middleware; one should be set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MiddlewareSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_auth: Option<ForwardAuthSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuthSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_allow_list: Option<IpAllowListSpec>,
    /// The older name of `ipAllowList` (no `rejectStatusCode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_white_list: Option<IpAllowListSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_scheme: Option<RedirectSchemeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_regex: Option<RedirectRegexSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix: Option<StripPrefixSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix_regex: Option<StripPrefixRegexSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_prefix: Option<AddPrefixSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_path: Option<ReplacePathSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_path_regex: Option<ReplacePathRegexSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeadersSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_req: Option<InFlightReqSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffering: Option<BufferingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainSpec>,
    /// Read for its `encodings`; sluice applies its own rules for what is compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<ErrorsSpec>,
    /// Every other key: a middleware type sluice does not apply (`digestAuth`,
    /// `circuitBreaker`, `plugin`, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A number or a string (Kubernetes' IntOrString): Traefik durations take both (`10` is
/// seconds).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i64),
    String(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardAuthSpec {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub trust_forward_header: Option<bool>,
    #[serde(default)]
    pub auth_response_headers: Vec<String>,
    #[serde(default)]
    pub auth_response_headers_regex: Option<String>,
    #[serde(default)]
    pub auth_request_headers: Vec<String>,
    #[serde(default)]
    pub tls: Option<ForwardAuthTlsSpec>,
    #[serde(default)]
    pub add_auth_cookies_to_response: Vec<String>,
    #[serde(default)]
    pub header_field: Option<String>,
    #[serde(default)]
    pub forward_body: bool,
    #[serde(default)]
    pub max_body_size: Option<i64>,
    #[serde(default)]
    pub preserve_location_header: bool,
    #[serde(default)]
    pub preserve_request_method: bool,
    #[serde(default, rename = "authSigninURL")]
    pub auth_signin_url: Option<String>,
    #[serde(default)]
    pub max_response_body_size: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardAuthTlsSpec {
    #[serde(default)]
    pub ca_secret: Option<String>,
    #[serde(default)]
    pub cert_secret: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
    #[serde(default)]
    pub ca_optional: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuthSpec {
    #[serde(default)]
    pub secret: String,
    #[serde(default)]
    pub realm: Option<String>,
    #[serde(default)]
    pub remove_header: bool,
    #[serde(default)]
    pub header_field: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpStrategySpec {
    #[serde(default)]
    pub depth: Option<i64>,
    #[serde(default, rename = "excludedIPs")]
    pub excluded_ips: Vec<String>,
    #[serde(default)]
    pub ipv6_subnet: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpAllowListSpec {
    #[serde(default)]
    pub source_range: Vec<String>,
    #[serde(default)]
    pub ip_strategy: Option<IpStrategySpec>,
    #[serde(default)]
    pub reject_status_code: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RedirectSchemeSpec {
    #[serde(default)]
    pub scheme: String,
    #[serde(default)]
    pub port: Option<String>,
    #[serde(default)]
    pub permanent: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RedirectRegexSpec {
    #[serde(default)]
    pub regex: String,
    #[serde(default)]
    pub replacement: String,
    #[serde(default)]
    pub permanent: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StripPrefixSpec {
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub force_slash: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct StripPrefixRegexSpec {
    #[serde(default)]
    pub regex: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct AddPrefixSpec {
    #[serde(default)]
    pub prefix: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ReplacePathSpec {
    #[serde(default)]
    pub path: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ReplacePathRegexSpec {
    #[serde(default)]
    pub regex: String,
    #[serde(default)]
    pub replacement: String,
}

/// `headers`: custom headers, CORS and the security headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadersSpec {
    #[serde(default)]
    pub custom_request_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub custom_response_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub access_control_allow_credentials: bool,
    #[serde(default)]
    pub access_control_allow_headers: Vec<String>,
    #[serde(default)]
    pub access_control_allow_methods: Vec<String>,
    #[serde(default)]
    pub access_control_allow_origin_list: Vec<String>,
    #[serde(default)]
    pub access_control_allow_origin_list_regex: Vec<String>,
    #[serde(default)]
    pub access_control_expose_headers: Vec<String>,
    #[serde(default)]
    pub access_control_max_age: Option<i64>,
    #[serde(default)]
    pub add_vary_header: bool,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default)]
    pub hosts_proxy_headers: Vec<String>,
    #[serde(default)]
    pub ssl_proxy_headers: BTreeMap<String, String>,
    #[serde(default)]
    pub sts_seconds: Option<i64>,
    #[serde(default)]
    pub sts_include_subdomains: bool,
    #[serde(default)]
    pub sts_preload: bool,
    #[serde(default, rename = "forceSTSHeader")]
    pub force_sts_header: bool,
    #[serde(default)]
    pub frame_deny: bool,
    #[serde(default)]
    pub custom_frame_options_value: Option<String>,
    #[serde(default)]
    pub content_type_nosniff: bool,
    #[serde(default)]
    pub browser_xss_filter: bool,
    #[serde(default, rename = "customBrowserXSSValue")]
    pub custom_browser_xss_value: Option<String>,
    #[serde(default)]
    pub content_security_policy: Option<String>,
    #[serde(default)]
    pub content_security_policy_report_only: Option<String>,
    #[serde(default)]
    pub public_key: Option<String>,
    #[serde(default)]
    pub referrer_policy: Option<String>,
    #[serde(default)]
    pub permissions_policy: Option<String>,
    #[serde(default)]
    pub is_development: bool,
    /// Removed in Traefik v3 (no effect there either).
    #[serde(default)]
    pub feature_policy: Option<String>,
    #[serde(default)]
    pub ssl_redirect: Option<bool>,
    #[serde(default)]
    pub ssl_temporary_redirect: Option<bool>,
    #[serde(default)]
    pub ssl_host: Option<String>,
    #[serde(default)]
    pub ssl_force_host: Option<bool>,
}

/// What a rate or concurrency limit counts by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceCriterionSpec {
    #[serde(default)]
    pub ip_strategy: Option<IpStrategySpec>,
    #[serde(default)]
    pub request_header_name: Option<String>,
    #[serde(default)]
    pub request_host: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitSpec {
    #[serde(default)]
    pub average: Option<i64>,
    #[serde(default)]
    pub period: Option<IntOrString>,
    #[serde(default)]
    pub burst: Option<i64>,
    #[serde(default)]
    pub source_criterion: Option<SourceCriterionSpec>,
    #[serde(default)]
    pub redis: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightReqSpec {
    #[serde(default)]
    pub amount: Option<i64>,
    #[serde(default)]
    pub source_criterion: Option<SourceCriterionSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferingSpec {
    #[serde(default)]
    pub max_request_body_bytes: Option<i64>,
    #[serde(default)]
    pub mem_request_body_bytes: Option<i64>,
    #[serde(default)]
    pub max_response_body_bytes: Option<i64>,
    #[serde(default)]
    pub mem_response_body_bytes: Option<i64>,
    #[serde(default)]
    pub retry_expression: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetrySpec {
    #[serde(default)]
    pub attempts: Option<i64>,
    #[serde(default)]
    pub initial_interval: Option<IntOrString>,
    #[serde(default)]
    pub timeout: Option<IntOrString>,
    #[serde(default)]
    pub status: Vec<String>,
    #[serde(default)]
    pub disable_retry_on_network_error: bool,
    #[serde(default)]
    pub retry_non_idempotent_method: bool,
    #[serde(default)]
    pub max_request_body_bytes: Option<i64>,
}

/// A chain's reference to another Middleware: by name, in its namespace unless one is given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct MiddlewareRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ChainSpec {
    #[serde(default)]
    pub middlewares: Vec<MiddlewareRef>,
}

/// The Service an `errors` middleware asks for its pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorServiceSpec {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub port: Option<IntOrString>,
    #[serde(default)]
    pub kind: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorsSpec {
    #[serde(default)]
    pub status: Vec<String>,
    #[serde(default)]
    pub status_rewrites: BTreeMap<String, i64>,
    #[serde(default)]
    pub service: Option<ErrorServiceSpec>,
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub error_request_headers: Option<Vec<String>>,
}

impl MiddlewareSpec {
    /// The names of the types set, in the spec's spelling.
    pub fn types(&self) -> Vec<&str> {
        let known = [
            ("forwardAuth", self.forward_auth.is_some()),
            ("basicAuth", self.basic_auth.is_some()),
            ("ipAllowList", self.ip_allow_list.is_some()),
            ("ipWhiteList", self.ip_white_list.is_some()),
            ("redirectScheme", self.redirect_scheme.is_some()),
            ("redirectRegex", self.redirect_regex.is_some()),
            ("stripPrefix", self.strip_prefix.is_some()),
            ("stripPrefixRegex", self.strip_prefix_regex.is_some()),
            ("addPrefix", self.add_prefix.is_some()),
            ("replacePath", self.replace_path.is_some()),
            ("replacePathRegex", self.replace_path_regex.is_some()),
            ("headers", self.headers.is_some()),
            ("rateLimit", self.rate_limit.is_some()),
            ("inFlightReq", self.in_flight_req.is_some()),
            ("buffering", self.buffering.is_some()),
            ("retry", self.retry.is_some()),
            ("chain", self.chain.is_some()),
            ("compress", self.compress.is_some()),
            ("errors", self.errors.is_some()),
        ];
        known
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name))
            .chain(self.other.keys().map(String::as_str))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_keeps_types_it_does_not_apply() {
        let spec: MiddlewareSpec = serde_json::from_value(serde_json::json!({
            "circuitBreaker": {"expression": "NetworkErrorRatio() > 0.5"},
            "stripPrefix": {"prefixes": ["/a"]}
        }))
        .unwrap();
        assert_eq!(spec.types(), ["stripPrefix", "circuitBreaker"]);
    }

    #[test]
    fn traefik_field_spellings_are_read() {
        let spec: MiddlewareSpec = serde_json::from_value(serde_json::json!({
            "forwardAuth": {"address": "http://auth", "authSigninURL": "https://login"},
        }))
        .unwrap();
        let auth = spec.forward_auth.unwrap();
        assert_eq!(auth.auth_signin_url.as_deref(), Some("https://login"));
        let headers: HeadersSpec = serde_json::from_value(serde_json::json!({
            "forceSTSHeader": true, "customBrowserXSSValue": "0"
        }))
        .unwrap();
        assert!(headers.force_sts_header);
        assert_eq!(headers.custom_browser_xss_value.as_deref(), Some("0"));
    }
}
