//! HTTPRoute rule parts in the data plane's terms: matches become [`RequestMatch`]es and filters become the policy's primitives ([`RequestEdits`], CORS, mirrors), or the reason the rule cannot be served.

use http::{HeaderName, Method};
use sluice_routing::{
    Cors, CorsRules, HeaderChanges, OriginPattern, PathChange, PathMatch, PathRewrite, Redirect,
    RedirectTo, RequestEdits, RequestMatch, RetryPolicy, SessionAffinity, StickyCookie,
    UpstreamTimeouts, ValueCondition,
};

use super::types::{
    BackendObjectReference, HeaderModifier, HttpPathMatch, HttpRouteFilter, HttpRouteMatch,
    HttpRouteRetry, HttpRouteTimeouts, PathModifier, SessionPersistence, ValueMatch,
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

/// A `RequestMirror` filter before its backendRef is resolved.
#[derive(Clone)]
pub(crate) struct MirrorRef<'r> {
    pub backend: &'r BackendObjectReference,
    pub field: String,
    pub numerator: u32,
    pub denominator: u32,
}

/// What the filters of a rule or backendRef add up to: the filters sluice applies, and the
/// mirrors whose backends the compiler resolves.
#[derive(Clone, Default)]
pub(crate) struct FilterSet<'r> {
    /// The head changes and redirect, as the policy's primitives.
    pub filters: RequestEdits,
    pub mirrors: Vec<MirrorRef<'r>>,
    /// A `CORS` filter.
    pub cors: Option<Cors>,
}

/// The filters of a rule or a backendRef, added onto `into` (a backendRef's come after its
/// rule's).
pub(crate) fn add_filters<'r>(
    filters: &'r [HttpRouteFilter],
    field: &str,
    into: &mut FilterSet<'r>,
) -> Result<(), Unsupported> {
    for (index, filter) in filters.iter().enumerate() {
        let at = format!("{field}.filters[{index}]");
        if filter.filter_type == "RequestMirror" {
            into.mirrors.push(mirror_ref(filter, at)?);
            continue;
        }
        if filter.filter_type == "CORS" {
            let settings = filter
                .cors
                .as_ref()
                .ok_or_else(|| Unsupported::new(&at, "type CORS needs its settings"))?;
            into.cors = Some(cors(settings, &format!("{at}.cors"))?);
            continue;
        }
        add_filter(filter, &at, &mut into.filters)?;
    }
    Ok(())
}

/// A `RequestMirror` filter: its backend and share (`percent`, or `fraction`; all by default).
fn mirror_ref(filter: &HttpRouteFilter, field: String) -> Result<MirrorRef<'_>, Unsupported> {
    let Some(mirror) = &filter.request_mirror else {
        return Err(Unsupported::new(
            field,
            "type RequestMirror needs its settings",
        ));
    };
    let (numerator, denominator) = match (&mirror.percent, &mirror.fraction) {
        (Some(percent), _) => (*percent, 100),
        (None, Some(fraction)) => (fraction.numerator, fraction.denominator.unwrap_or(100)),
        (None, None) => (1, 1),
    };
    if denominator == 0 || numerator > denominator {
        return Err(Unsupported::new(
            format!("{field}.requestMirror"),
            "the mirrored share must be between 0 and 100 %",
        ));
    }
    Ok(MirrorRef {
        backend: &mirror.backend_ref,
        field: format!("{field}.requestMirror.backendRef"),
        numerator,
        denominator,
    })
}

fn add_filter(
    filter: &HttpRouteFilter,
    field: &str,
    into: &mut RequestEdits,
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
            into.redirect = Some(Redirect {
                code: status,
                to: RedirectTo::Parts {
                    scheme,
                    hostname: redirect.hostname.clone(),
                    port: redirect.port,
                    path: path_change(
                        redirect.path.as_ref(),
                        &format!("{field}.requestRedirect.path"),
                    )?,
                },
            });
            Ok(())
        }
        "URLRewrite" => {
            let rewrite = filter.url_rewrite.as_ref().ok_or_else(missing)?;
            if let Some(host) = &rewrite.hostname {
                into.upstream_host = Some(host.clone());
            }
            if let Some(path) =
                path_change(rewrite.path.as_ref(), &format!("{field}.urlRewrite.path"))?
            {
                into.rewrite = Some(PathRewrite::Replace(path));
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

/// A `CORS` filter in the terms of sluice's CORS filter: `*` among the origins allows any
/// origin; the lists are sent comma-separated; `maxAge` defaults to 5 seconds, as the spec says.
fn cors(settings: &super::types::Cors, field: &str) -> Result<Cors, Unsupported> {
    let any = settings.allow_origins.iter().any(|o| o == "*");
    let origins = match any {
        true => None,
        false => Some(
            settings
                .allow_origins
                .iter()
                .map(|origin| {
                    OriginPattern::parse(origin).ok_or_else(|| {
                        Unsupported::new(
                            format!("{field}.allowOrigins"),
                            format!("{origin:?} is not an origin"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let list = |items: &[String], default: &str| match items.is_empty() {
        true => default.to_owned(),
        false => items.join(", "),
    };
    Ok(Cors {
        origins,
        allow_methods: list(&settings.allow_methods, "GET, HEAD, POST"),
        allow_headers: list(&settings.allow_headers, ""),
        expose_headers: (!settings.expose_headers.is_empty())
            .then(|| settings.expose_headers.join(", ")),
        allow_credentials: settings.allow_credentials.unwrap_or(false),
        max_age: u64::from(settings.max_age.unwrap_or(5)),
        rules: CorsRules::GatewayApi,
    })
}

/// What a rule's own fields set on its policy: timeouts, retries, session persistence.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleSettings {
    pub retry: RetryPolicy,
    pub timeouts: UpstreamTimeouts,
    /// `sessionPersistence`: the session's token in a cookie or a header.
    pub session: Option<SessionAffinity>,
}

/// Reads `timeouts`, `retry` and `sessionPersistence`. Without them a rule keeps sluice's
/// defaults, safe retries on another endpoint included.
pub(crate) fn rule_settings(
    timeouts: Option<&HttpRouteTimeouts>,
    retry: Option<&HttpRouteRetry>,
    session: Option<&SessionPersistence>,
    field: &str,
) -> Result<RuleSettings, Unsupported> {
    let mut settings = RuleSettings::default();
    if let Some(timeouts) = timeouts {
        let request = duration(
            timeouts.request.as_deref(),
            &format!("{field}.timeouts.request"),
        )?;
        let backend = duration(
            timeouts.backend_request.as_deref(),
            &format!("{field}.timeouts.backendRequest"),
        )?;
        // The whole exchange: no response head (and no next attempt) past it.
        settings.timeouts.request = request;
        settings.timeouts.read = request;
        settings.retry.timeout = request;
        // Each attempt to a backend.
        settings.retry.per_try_timeout = backend;
    }
    if let Some(retry) = retry {
        apply_retry(retry, &mut settings.retry, &format!("{field}.retry"))?;
    }
    if let Some(session) = session {
        apply_session(
            session,
            &mut settings,
            &format!("{field}.sessionPersistence"),
        )?;
    }
    Ok(settings)
}

/// A Gateway API duration (`1h`, `10s`, `500ms`); `0s` turns the timeout off.
fn duration(text: Option<&str>, field: &str) -> Result<Option<std::time::Duration>, Unsupported> {
    let Some(text) = text else {
        return Ok(None);
    };
    let parsed = humantime::parse_duration(text)
        .map_err(|_| Unsupported::new(field, format!("{text:?} is not a duration")))?;
    Ok((!parsed.is_zero()).then_some(parsed))
}

/// `retry`: the statuses retried (as sluice's retry conditions), `attempts` retries after
/// the first try (the spec's "maximum number of times ... retried"), wherever they land: with
/// every endpoint tried, a retry goes back to one (the one tried longest ago), so a Service of
/// one pod is retried too; and the `backoff` before each. Connection failures stay retried.
fn apply_retry(
    retry: &HttpRouteRetry,
    policy: &mut RetryPolicy,
    field: &str,
) -> Result<(), Unsupported> {
    if !retry.codes.is_empty() {
        let on = &mut policy.on;
        (
            on.http_500,
            on.http_502,
            on.http_503,
            on.http_504,
            on.http_429,
        ) = (false, false, false, false, false);
        for code in &retry.codes {
            match code {
                500 => on.http_500 = true,
                502 => on.http_502 = true,
                503 => on.http_503 = true,
                504 => on.http_504 = true,
                429 => on.http_429 = true,
                other => {
                    return Err(Unsupported::new(
                        format!("{field}.codes"),
                        format!(
                        "retrying status {other} is not supported (500, 502, 503, 504 and 429 are)"
                    ),
                    ))
                }
            }
        }
    }
    if let Some(attempts) = retry.attempts {
        policy.tries = attempts.saturating_add(1);
    }
    policy.revisit = true;
    policy.backoff = duration(retry.backoff.as_deref(), &format!("{field}.backoff"))?;
    Ok(())
}

/// `sessionPersistence`: a cookie (sluice's sticky cookie, named `sessionName`), or a header
/// of that name that sluice sends with answers and reads back from the client, as Envoy's
/// stateful header sessions do.
fn apply_session(
    session: &SessionPersistence,
    settings: &mut RuleSettings,
    field: &str,
) -> Result<(), Unsupported> {
    let name = session
        .session_name
        .clone()
        .unwrap_or_else(|| "sluice-session".to_owned());
    match session.persistence_type.as_deref().unwrap_or("Cookie") {
        "Cookie" => {
            let mut cookie = StickyCookie::named(name);
            let permanent = session
                .cookie_config
                .as_ref()
                .and_then(|c| c.lifetime_type.as_deref())
                == Some("Permanent");
            if permanent {
                let lifetime = duration(
                    session.absolute_timeout.as_deref(),
                    &format!("{field}.absoluteTimeout"),
                )?;
                cookie.max_age = lifetime.map(|d| d.as_secs());
            }
            settings.session = Some(SessionAffinity::Cookie(cookie));
        }
        "Header" => {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                Unsupported::new(
                    format!("{field}.sessionName"),
                    format!("{name:?} is not a header name"),
                )
            })?;
            settings.session = Some(SessionAffinity::Header(header.as_str().to_owned()));
        }
        other => {
            return Err(Unsupported::new(
                format!("{field}.type"),
                format!("session persistence type {other} is not supported"),
            ))
        }
    }
    Ok(())
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
        let filters = [filter];
        let mut set = FilterSet::default();
        let error = add_filters(&filters, "spec.rules[1]", &mut set).unwrap_err();
        assert_eq!(error.field, "spec.rules[1].filters[0].extensionRef");
        let path = HttpPathMatch {
            match_type: Some("RegularExpression".into()),
            value: Some("/(".into()),
        };
        let error = path_match(Some(&path), "p").unwrap_err();
        assert_eq!(error.field, "p.value");
    }
}
