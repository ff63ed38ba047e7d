//! Templates with nginx variables (`https://$host$request_uri`), as ingress-nginx's redirect, auth and mirror annotations write them.

use serde::Serialize;

/// A piece of a template that may use nginx variables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variable {
    Text(String),
    /// `$host`: the request's host, lowercase, without a port.
    Host,
    /// `$http_host`: the Host header as the client sent it.
    HttpHost,
    /// `$scheme`: `http` or `https`, the client's connection.
    Scheme,
    /// ingress-nginx's `$pass_access_scheme`: `https` also when a trusted proxy in front says
    /// the client used it (`X-Forwarded-Proto`).
    PassAccessScheme,
    /// `$request_uri`: the request's path and query as the client sent them.
    RequestUri,
    /// `$escaped_request_uri`: the request URI, URL-encoded.
    EscapedRequestUri,
    /// `$request_method`.
    RequestMethod,
    /// `$remote_addr`: the client's address after trusted-proxy resolution.
    RemoteAddr,
    /// `$http_<name>`: a request header (lowercase name, `-` for `_`).
    Header(String),
    /// `$cookie_<name>`.
    Cookie(String),
    /// `$arg_<name>`: a query parameter.
    Arg(String),
}

impl Variable {
    /// The variable as nginx spells it, with its `$` (text as it is).
    pub fn nginx_name(&self) -> String {
        let name = match self {
            Self::Text(text) => return text.clone(),
            Self::Host => "host",
            Self::HttpHost => "http_host",
            Self::Scheme => "scheme",
            Self::PassAccessScheme => "pass_access_scheme",
            Self::RequestUri => "request_uri",
            Self::EscapedRequestUri => "escaped_request_uri",
            Self::RequestMethod => "request_method",
            Self::RemoteAddr => "remote_addr",
            Self::Header(name) => return format!("$http_{}", name.replace('-', "_")),
            Self::Cookie(name) => return format!("$cookie_{name}"),
            Self::Arg(name) => return format!("$arg_{name}"),
        };
        format!("${name}")
    }
}
