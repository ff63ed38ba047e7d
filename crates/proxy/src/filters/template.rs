//! nginx variables filled in per request: the templates of the redirect, auth and mirror annotations (`$host`, `$request_uri`, `$escaped_request_uri`...).

use http::request::Parts;
use sluice_routing::Variable;

use crate::filters::contract::RequestContext;
use crate::headers::host_without_port;
use crate::headers::request_cookie;

/// A template with the request's values for its nginx variables.
pub(crate) fn fill(template: &[Variable], context: &RequestContext<'_>, request: &Parts) -> String {
    let mut out = String::new();
    for part in template {
        match part {
            Variable::Text(text) => out.push_str(text),
            Variable::Host => out.push_str(&host(context)),
            Variable::HttpHost => out.push_str(http_host(context)),
            Variable::Scheme => out.push_str(scheme(context)),
            Variable::PassAccessScheme => out.push_str(pass_access_scheme(context)),
            Variable::RequestUri => out.push_str(request_uri(request)),
            Variable::EscapedRequestUri => out.push_str(&escape(request_uri(request))),
            Variable::RequestMethod => out.push_str(request.method.as_str()),
            Variable::RemoteAddr => out.push_str(&context.real_client.to_string()),
            Variable::Header(name) => out.push_str(
                request
                    .headers
                    .get(name.as_str())
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default(),
            ),
            Variable::Cookie(name) => {
                out.push_str(request_cookie(&request.headers, name).unwrap_or_default());
            }
            Variable::Arg(name) => out.push_str(argument(request, name).unwrap_or_default()),
        }
    }
    out
}

/// nginx's `$request_uri`: the target as the client sent it.
pub(crate) fn request_uri(request: &Parts) -> &str {
    request.uri.path_and_query().map_or("/", |t| t.as_str())
}

/// nginx's `$host`: the request's host, lowercase, without a port.
fn host(context: &RequestContext<'_>) -> String {
    host_without_port(http_host(context)).to_ascii_lowercase()
}

/// nginx's `$http_host`: the Host as the client sent it.
pub(crate) fn http_host<'c>(context: &'c RequestContext<'_>) -> &'c str {
    context.host.to_str().unwrap_or_default()
}

/// nginx's `$scheme`: the client's connection.
pub(crate) fn scheme(context: &RequestContext<'_>) -> &'static str {
    if context.connection.over_tls {
        "https"
    } else {
        "http"
    }
}

/// ingress-nginx's `$pass_access_scheme`: `https` also when a trusted proxy in front says the
/// client used it.
pub(crate) fn pass_access_scheme(context: &RequestContext<'_>) -> &'static str {
    if context.forwarded_https {
        "https"
    } else {
        scheme(context)
    }
}

/// The prefix the request's route matched, for a Gateway API `ReplacePrefixMatch`.
pub(crate) fn matched_prefix<'c>(context: &'c RequestContext<'_>) -> Option<&'c str> {
    let path = context.target.as_ref()?.path?;
    (path.kind() == sluice_routing::PathKind::Prefix).then(|| path.path())
}

fn argument<'r>(request: &'r Parts, name: &str) -> Option<&'r str> {
    request
        .uri
        .query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Percent-encodes all but RFC 3986's unreserved characters, as ingress-nginx's
/// `$escaped_request_uri` (`set_escape_uri`) does.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_only_unreserved_characters() {
        assert_eq!(escape("/a b/c?d=1&e=~"), "%2Fa%20b%2Fc%3Fd%3D1%26e%3D~");
    }
}
