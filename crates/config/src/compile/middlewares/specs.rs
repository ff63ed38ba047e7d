//! The middlewares that are their spec alone, compiled into data-plane steps (or into the route's body limit and retry policy), each problem naming the Middleware's field.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_routing::middleware::{
    Headers, InFlightReq, IpAllowList, IpStrategy, Pattern, RateLimit, RedirectRegex,
    RedirectScheme, SecurityHeaders, SourceCriterion, Step, StripPrefix, TraefikCors,
};
use sluice_routing::{RetryOn, RetryPolicy};

use super::{required, Note, Refusal, StepContext};
use crate::annotations::ip_range;
use crate::traefik::{
    BufferingSpec, HeadersSpec, InFlightReqSpec, IntOrString, IpAllowListSpec, IpStrategySpec,
    MiddlewareSpec, RateLimitSpec, RetrySpec, SourceCriterionSpec,
};

/// The step of a Middleware of `kind` that its spec alone makes, with notes on what differs;
/// a kind sluice does not apply is a refusal.
pub(super) fn spec_step(
    kind: &str,
    spec: &MiddlewareSpec,
    context: &StepContext<'_>,
) -> Result<(Step, Vec<Note>), Refusal> {
    let mut notes = Vec::new();
    let step = match kind {
        "ipAllowList" | "ipWhiteList" => {
            let list = spec.ip_allow_list.as_ref().or(spec.ip_white_list.as_ref());
            let list = ip_allow_list(required(list)?, kind == "ipAllowList", context)?;
            Step::IpAllowList(std::sync::Arc::new(list))
        }
        "redirectScheme" => {
            let redirect = required(spec.redirect_scheme.as_ref())?;
            if redirect.scheme.trim().is_empty() {
                return Err(context.problem("spec.redirectScheme.scheme", "is empty"));
            }
            Step::RedirectScheme(std::sync::Arc::new(RedirectScheme {
                scheme: redirect.scheme.trim().to_owned(),
                port: redirect.port.clone().filter(|port| !port.is_empty()),
                permanent: redirect.permanent,
            }))
        }
        "redirectRegex" => {
            let redirect = required(spec.redirect_regex.as_ref())?;
            Step::RedirectRegex(std::sync::Arc::new(RedirectRegex {
                regex: pattern(&redirect.regex, "spec.redirectRegex.regex", context)?,
                replacement: redirect.replacement.trim().to_owned(),
                permanent: redirect.permanent,
            }))
        }
        "stripPrefix" => {
            let strip = required(spec.strip_prefix.as_ref())?;
            if strip.force_slash.is_some() {
                notes.push(Note::Info(format!(
                    "{}: forceSlash is deprecated in Traefik; it is applied as written",
                    context.where_
                )));
            }
            Step::StripPrefix(std::sync::Arc::new(StripPrefix {
                prefixes: strip.prefixes.iter().map(|p| p.trim().to_owned()).collect(),
                force_slash: strip.force_slash.unwrap_or(false),
            }))
        }
        "stripPrefixRegex" => {
            let strip = required(spec.strip_prefix_regex.as_ref())?;
            let regex = strip
                .regex
                .iter()
                .map(|text| pattern(text, "spec.stripPrefixRegex.regex", context))
                .collect::<Result<Vec<_>, _>>()?;
            Step::StripPrefixRegex { regex }
        }
        "addPrefix" => {
            let prefix = required(spec.add_prefix.as_ref())?.prefix.trim().to_owned();
            if prefix.is_empty() {
                return Err(context.problem("spec.addPrefix.prefix", "is empty"));
            }
            Step::AddPrefix { prefix }
        }
        "replacePath" => Step::ReplacePath {
            path: required(spec.replace_path.as_ref())?.path.clone(),
        },
        "replacePathRegex" => {
            let replace = required(spec.replace_path_regex.as_ref())?;
            Step::ReplacePathRegex {
                regex: pattern(&replace.regex, "spec.replacePathRegex.regex", context)?,
                replacement: replace.replacement.trim().to_owned(),
            }
        }
        "headers" => {
            let (headers, warnings) = headers(required(spec.headers.as_ref())?, context)?;
            notes.extend(warnings.into_iter().map(Note::Warning));
            Step::Headers(std::sync::Arc::new(headers))
        }
        "rateLimit" => {
            let limit = required(spec.rate_limit.as_ref())?;
            if limit.redis.is_some() {
                notes.push(Note::Warning(format!("{}: redis is not used; each sluice replica counts its own requests, so N replicas admit up to N times the rate", context.where_)));
            }
            Step::RateLimit(std::sync::Arc::new(rate_limit(limit, context)?))
        }
        "inFlightReq" => {
            let limit = required(spec.in_flight_req.as_ref())?;
            Step::InFlightReq(std::sync::Arc::new(in_flight(limit, context)?))
        }
        other => {
            return Err(format!("{} is of type {other}, which sluice does not apply (it applies forwardAuth, basicAuth, ipAllowList, ipWhiteList, redirectScheme, redirectRegex, stripPrefix, stripPrefixRegex, addPrefix, replacePath, replacePathRegex, headers, rateLimit, inFlightReq, buffering, retry, chain, compress and errors)", context.where_));
        }
    };
    Ok((step, notes))
}

/// `buffering`: the body limit it sets, and notes on the fields sluice does not apply.
pub(super) fn buffering(
    spec: &BufferingSpec,
    context: &StepContext<'_>,
) -> (Option<u64>, Vec<Note>) {
    let limit = spec
        .max_request_body_bytes
        .filter(|max| *max > 0)
        .map(|max| u64::try_from(max).unwrap_or(u64::MAX));
    let unapplied = [
        (
            spec.max_response_body_bytes.filter(|m| *m > 0).is_some(),
            "maxResponseBodyBytes is not enforced: responses stream to the client",
        ),
        (
            spec.retry_expression.is_some(),
            "retryExpression is not evaluated: sluice's retry rules apply",
        ),
    ];
    let notes = unapplied
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, note)| Note::Warning(format!("{}: {note}", context.where_)))
        .collect();
    (limit, notes)
}

pub(super) fn pattern(
    text: &str,
    field: &str,
    context: &StepContext<'_>,
) -> Result<Pattern, Refusal> {
    Pattern::new(text.trim()).map_err(|error| {
        context.problem(
            field,
            &format!("{text:?} is not a regular expression sluice can run: {error}"),
        )
    })
}

/// `404` or `500-599`.
pub(super) fn status_range(text: &str) -> Option<(u16, u16)> {
    let text = text.trim();
    let (low, high) = text.split_once('-').unwrap_or((text, text));
    let (low, high): (u16, u16) = (low.trim().parse().ok()?, high.trim().parse().ok()?);
    (low <= high && low >= 100 && high < 600).then_some((low, high))
}

/// Entries of an address list (`sourceRange`, `excludedIPs`), each a CIDR or an address.
fn ip_nets(
    texts: &[String],
    field: &str,
    context: &StepContext<'_>,
) -> Result<Vec<ipnet::IpNet>, Refusal> {
    texts
        .iter()
        .map(|text| {
            ip_range(text).ok_or_else(|| {
                context.problem(field, &format!("{text:?} is not an IP address or CIDR"))
            })
        })
        .collect()
}

fn ip_strategy(
    spec: Option<&IpStrategySpec>,
    field: &str,
    context: &StepContext<'_>,
) -> Result<IpStrategy, Refusal> {
    let Some(spec) = spec else {
        return Ok(IpStrategy::default());
    };
    let excluded = ip_nets(&spec.excluded_ips, &format!("{field}.excludedIPs"), context)?;
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
    let ranges = ip_nets(
        &spec.source_range,
        &format!("spec.{kind}.sourceRange"),
        context,
    )?;
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
pub(super) fn retry(
    spec: &RetrySpec,
    context: &StepContext<'_>,
) -> Result<(RetryPolicy, Vec<Note>), Refusal> {
    let attempts = spec
        .attempts
        .and_then(|a| u32::try_from(a).ok())
        .filter(|a| *a > 0)
        .ok_or_else(|| context.problem("spec.retry.attempts", "must be more than 0"))?;
    let mut notes = Vec::new();
    // Traefik retries when the server does not reply (a network error, the request sent or
    // not); statuses only as `status` lists them.
    let mut on = RetryOn {
        error: true,
        ..RetryOn::none()
    };
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
            notes.push(Note::Warning(format!("{}: spec.retry.status {text:?}: sluice retries on 429, 500, 502, 503 and 504 only; other statuses are answered as they come", context.where_)));
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
            // Traefik's retry goes through the load balancer again, which may pick the
            // server that failed (the only one, with one pod).
            revisit: true,
            timeout,
            backoff,
            ..RetryPolicy::default()
        },
        notes,
    ))
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

/// `compress`: the codings of `encodings` (Traefik's default: zstd, Brotli and gzip), with
/// sluice's own rules for what is compressed. Settings sluice reads differently are noted.
pub(super) fn compress(
    spec: &serde_json::Value,
    context: &StepContext<'_>,
) -> (sluice_routing::Codings, Vec<Note>) {
    use sluice_routing::Codings;
    let mut notes = Vec::new();
    let codings = match spec.get("encodings").and_then(serde_json::Value::as_array) {
        None => Codings::ALL,
        Some(list) => {
            let mut codings = Codings::NONE;
            for entry in list {
                let text = entry.as_str().unwrap_or_default();
                match Codings::parse(text) {
                    Ok(parsed) if !parsed.is_empty() => {
                        for coding in parsed.iter() {
                            codings = codings.with(coding);
                        }
                    }
                    _ => notes.push(Note::Warning(format!(
                        "{}: spec.compress.encodings: {entry} is not a coding sluice compresses with (gzip, br, zstd); left out",
                        context.where_
                    ))),
                }
            }
            codings
        }
    };
    let own_rules = [
        "excludedContentTypes",
        "includedContentTypes",
        "minResponseBodyBytes",
        "defaultEncoding",
    ];
    for field in own_rules.iter().filter(|field| spec.get(**field).is_some()) {
        notes.push(Note::Info(format!(
            "{}: spec.compress.{field} is not read: sluice compresses text, JSON, JavaScript, XML, SVG and WebAssembly answers of 1024 bytes or more (or of no stated length) for clients that accept a coding",
            context.where_
        )));
    }
    (codings, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
