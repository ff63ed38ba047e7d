//! HTTPRoute rule parts in the data plane's terms: matches become [`RequestMatch`]es and filters become [`GatewayFilters`], or the reason the rule cannot be served.

use http::{HeaderName, Method};
use sluice_routing::{
    GatewayFilters, GatewayRedirect, HeaderChanges, PathChange, PathMatch, RequestMatch,
    ValueCondition,
};

use super::types::{
    HeaderModifier, HttpPathMatch, HttpRouteFilter, HttpRouteMatch, PathModifier, ValueMatch,
};

/// Why a rule is dropped: the field and what is wrong with it. The route's parents get
/// `Accepted=False` (or `PartiallyInvalid` when other rules remain), `reason=UnsupportedValue`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unsupported {
    pub field: String,
    pub message: String,
}

impl Unsupported {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The matches of a rule; a rule without any matches every request (`PathPrefix /`).
pub(crate) fn request_matches(
    matches: &[HttpRouteMatch],
    field: &str,
) -> Result<Vec<RequestMatch>, Unsupported> {
    if matches.is_empty() {
        return Ok(vec![RequestMatch {
            path: PathMatch::prefix("/"),
            method: None,
            headers: Vec::new(),
            query: Vec::new(),
        }]);
    }
    matches
        .iter()
        .enumerate()
        .map(|(index, m)| request_match(m, &format!("{field}.matches[{index}]")))
        .collect()
}

fn request_match(m: &HttpRouteMatch, field: &str) -> Result<RequestMatch, Unsupported> {
    let method = match &m.method {
        Some(method) => Some(Method::from_bytes(method.as_bytes()).map_err(|_| {
            Unsupported::new(
                format!("{field}.method"),
                format!("{method:?} is not a method"),
            )
        })?),
        None => None,
    };
    let mut headers: Vec<(HeaderName, ValueCondition)> = Vec::new();
    for (index, header) in m.headers.iter().enumerate() {
        let at = format!("{field}.headers[{index}]");
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
            Unsupported::new(&at, format!("{:?} is not a header name", header.name))
        })?;
        // Only the first match of a name counts, as the spec says.
        if headers.iter().all(|(seen, _)| *seen != name) {
            headers.push((name, value_condition(header, &at)?));
        }
    }
    let mut query: Vec<(String, ValueCondition)> = Vec::new();
    for (index, param) in m.query_params.iter().enumerate() {
        let at = format!("{field}.queryParams[{index}]");
        if query.iter().all(|(seen, _)| *seen != param.name) {
            query.push((param.name.clone(), value_condition(param, &at)?));
        }
    }
    Ok(RequestMatch {
        path: path_match(m.path.as_ref(), &format!("{field}.path"))?,
        method,
        headers,
        query,
    })
}

fn path_match(path: Option<&HttpPathMatch>, field: &str) -> Result<PathMatch, Unsupported> {
    let kind = path
        .and_then(|p| p.match_type.as_deref())
        .unwrap_or("PathPrefix");
    let value = path.and_then(|p| p.value.as_deref()).unwrap_or("/");
    if !value.starts_with('/') && kind != "RegularExpression" {
        return Err(Unsupported::new(
            format!("{field}.value"),
            "must start with /",
        ));
    }
    match kind {
        "Exact" => Ok(PathMatch::exact(value)),
        "PathPrefix" => Ok(PathMatch::prefix(value)),
        "RegularExpression" => PathMatch::whole_regex(value).map_err(|error| {
            Unsupported::new(
                format!("{field}.value"),
                format!("not a regular expression: {error}"),
            )
        }),
        other => Err(Unsupported::new(
            format!("{field}.type"),
            format!("path match type {other:?} is not supported"),
        )),
    }
}

fn value_condition(value: &ValueMatch, field: &str) -> Result<ValueCondition, Unsupported> {
    match value.match_type.as_deref().unwrap_or("Exact") {
        "Exact" => Ok(ValueCondition::Exact(value.value.clone())),
        "RegularExpression" => ValueCondition::regex(&value.value).map_err(|error| {
            Unsupported::new(
                format!("{field}.value"),
                format!("not a regular expression: {error}"),
            )
        }),
        other => Err(Unsupported::new(
            format!("{field}.type"),
            format!("match type {other:?} is not supported"),
        )),
    }
}

/// The filters of a rule or a backendRef, added onto `into` (a backendRef's come after its
/// rule's).
pub(crate) fn add_filters(
    filters: &[HttpRouteFilter],
    field: &str,
    into: &mut GatewayFilters,
) -> Result<(), Unsupported> {
    for (index, filter) in filters.iter().enumerate() {
        let at = format!("{field}.filters[{index}]");
        add_filter(filter, &at, into)?;
    }
    Ok(())
}

fn add_filter(
    filter: &HttpRouteFilter,
    field: &str,
    into: &mut GatewayFilters,
) -> Result<(), Unsupported> {
    let missing = || {
        Unsupported::new(
            field,
            format!("type {} needs its settings", filter.filter_type),
        )
    };
    match filter.filter_type.as_str() {
        "RequestHeaderModifier" => {
            let modifier = filter
                .request_header_modifier
                .as_ref()
                .ok_or_else(missing)?;
            add_header_changes(
                modifier,
                &format!("{field}.requestHeaderModifier"),
                &mut into.request_headers,
            )
        }
        "ResponseHeaderModifier" => {
            let modifier = filter
                .response_header_modifier
                .as_ref()
                .ok_or_else(missing)?;
            add_header_changes(
                modifier,
                &format!("{field}.responseHeaderModifier"),
                &mut into.response_headers,
            )
        }
        "RequestRedirect" => {
            let redirect = filter.request_redirect.as_ref().ok_or_else(missing)?;
            let status = redirect.status_code.unwrap_or(302);
            if ![301, 302, 303, 307, 308].contains(&status) {
                return Err(Unsupported::new(
                    format!("{field}.requestRedirect.statusCode"),
                    format!("{status} is not a redirect status sluice answers with"),
                ));
            }
            let scheme = redirect.scheme.as_deref().map(str::to_ascii_lowercase);
            if scheme
                .as_deref()
                .is_some_and(|s| s != "http" && s != "https")
            {
                return Err(Unsupported::new(
                    format!("{field}.requestRedirect.scheme"),
                    "must be http or https",
                ));
            }
            into.redirect = Some(GatewayRedirect {
                status,
                scheme,
                hostname: redirect.hostname.clone(),
                port: redirect.port,
                path: path_change(
                    redirect.path.as_ref(),
                    &format!("{field}.requestRedirect.path"),
                )?,
            });
            Ok(())
        }
        "URLRewrite" => {
            let rewrite = filter.url_rewrite.as_ref().ok_or_else(missing)?;
            if let Some(host) = &rewrite.hostname {
                into.rewrite_host = Some(host.clone());
            }
            if let Some(path) =
                path_change(rewrite.path.as_ref(), &format!("{field}.urlRewrite.path"))?
            {
                into.rewrite_path = Some(path);
            }
            Ok(())
        }
        "ExtensionRef" => Err(Unsupported::new(
            format!("{field}.extensionRef"),
            "sluice has no extension filters; the rule is not served",
        )),
        other => Err(Unsupported::new(
            format!("{field}.type"),
            format!("filter type {other} is not supported yet; the rule is not served"),
        )),
    }
}

fn add_header_changes(
    modifier: &HeaderModifier,
    field: &str,
    into: &mut HeaderChanges,
) -> Result<(), Unsupported> {
    let checked = |name: &str, value: Option<&str>| -> Result<(), Unsupported> {
        let bad_name = HeaderName::from_bytes(name.as_bytes()).is_err();
        let bad_value = value.is_some_and(|v| http::HeaderValue::from_str(v).is_err());
        if bad_name || bad_value {
            return Err(Unsupported::new(
                field,
                format!("header {name:?} cannot be sent"),
            ));
        }
        Ok(())
    };
    for header in &modifier.set {
        checked(&header.name, Some(&header.value))?;
        into.set.push((header.name.clone(), header.value.clone()));
    }
    for header in &modifier.add {
        checked(&header.name, Some(&header.value))?;
        into.add.push((header.name.clone(), header.value.clone()));
    }
    for name in &modifier.remove {
        checked(name, None)?;
        into.remove.push(name.clone());
    }
    Ok(())
}

fn path_change(
    path: Option<&PathModifier>,
    field: &str,
) -> Result<Option<PathChange>, Unsupported> {
    let Some(path) = path else {
        return Ok(None);
    };
    let change = match path.modifier_type.as_str() {
        "ReplaceFullPath" => path.replace_full_path.clone().map(PathChange::Full),
        "ReplacePrefixMatch" => path.replace_prefix_match.clone().map(PathChange::Prefix),
        other => {
            return Err(Unsupported::new(
                format!("{field}.type"),
                format!("path modifier {other:?} is not supported"),
            ))
        }
    };
    change.map(Some).ok_or_else(|| {
        Unsupported::new(
            field,
            format!("type {} needs its value", path.modifier_type),
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_rule_without_matches_matches_every_path() {
        let matches = request_matches(&[], "spec.rules[0]").unwrap();
        assert_eq!(matches.len(), 1);
        assert!(matches[0].path.matches("/anything"));
    }

    #[test]
    fn only_the_first_match_of_a_header_name_counts() {
        let m = HttpRouteMatch {
            headers: vec![
                ValueMatch {
                    match_type: None,
                    name: "Version".into(),
                    value: "one".into(),
                },
                ValueMatch {
                    match_type: None,
                    name: "version".into(),
                    value: "two".into(),
                },
            ],
            ..HttpRouteMatch::default()
        };
        let built = request_match(&m, "m").unwrap();
        assert_eq!(built.headers.len(), 1);
        assert_eq!(built.headers[0].1, ValueCondition::Exact("one".into()));
    }

    #[test]
    fn extension_filters_and_bad_regexes_name_their_field() {
        let filter = HttpRouteFilter {
            filter_type: "ExtensionRef".into(),
            ..HttpRouteFilter::default()
        };
        let error =
            add_filters(&[filter], "spec.rules[1]", &mut GatewayFilters::default()).unwrap_err();
        assert_eq!(error.field, "spec.rules[1].filters[0].extensionRef");
        let path = HttpPathMatch {
            match_type: Some("RegularExpression".into()),
            value: Some("/(".into()),
        };
        let error = path_match(Some(&path), "p").unwrap_err();
        assert_eq!(error.field, "p.value");
    }
}
