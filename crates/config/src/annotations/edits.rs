//! `temporal-redirect`, `permanent-redirect` (with their codes), `app-root`, `rewrite-target`, `x-forwarded-prefix` and `upstream-vhost`: redirects and request-head changes with ingress-nginx's meaning.

use sluice_routing::{HeaderChanges, PathRewrite, Redirect, RedirectTo, RequestEdits, Variable};

use super::keys::{PolicyKeys, Setting};
use super::template::{parse_template, sample};
use super::values::{Found, Report};

pub(crate) fn request_edits(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> RequestEdits {
    RequestEdits {
        redirect: redirect(keys, report),
        app_root: report.parse(
            keys.get(Setting::AppRoot),
            "a path that starts with / (such as /app1)",
            "requests for / are not redirected",
            |value| valid_path(value).then(|| value.to_owned()),
        ),
        forwarded_prefix: report.parse(
            keys.get(Setting::XForwardedPrefix),
            "a header value (visible ASCII)",
            "no X-Forwarded-Prefix is sent",
            |value| header_safe(value).then(|| value.to_owned()),
        ),
        upstream_host: report.parse(
            keys.get(Setting::UpstreamVhost),
            "a host name, optionally with a port",
            "the client's Host is sent",
            |value| host_like(value).then(|| value.to_owned()),
        ),
        request_headers: HeaderChanges {
            set: header_lines(keys.get(Setting::RequestHeaders), report),
            ..HeaderChanges::default()
        },
        response_headers: HeaderChanges {
            set: header_lines(keys.get(Setting::ResponseHeaders), report),
            ..HeaderChanges::default()
        },
        rewrite: report
            .parse(
                keys.get(Setting::RewriteTarget),
                "a path that starts with /, which may use the regex path's groups as $1 to $9",
                "the path is sent as the client wrote it",
                |value| valid_path(&without_groups(value)).then(|| value.to_owned()),
            )
            .map(PathRewrite::Target),
    }
}

/// A `rewrite-target` with each `$N` group reference replaced by sample text, to check the
/// rest is a path.
fn without_groups(target: &str) -> String {
    let mut sample = String::with_capacity(target.len());
    let mut chars = target.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            chars.next();
            sample.push('x');
        } else {
            sample.push(c);
        }
    }
    sample
}

/// `Name: value` lines (blank lines skipped). A line that is not a valid header is a warning
/// naming it, and only that line is dropped.
fn header_lines(found: Option<Found<'_>>, report: &mut Report<'_>) -> Vec<(String, String)> {
    let Some(found) = found else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    for line in found.value.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parsed = line.split_once(':').and_then(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            let value = value.trim();
            http::HeaderValue::from_str(value).ok()?;
            Some((name.as_str().to_owned(), value.to_owned()))
        });
        match parsed {
            Some(header) => headers.push(header),
            None => {
                let message = format!(
                    "the line {line:?} is not a header (Name: value); it is ignored, the other lines apply"
                );
                report.warning(found, message);
            }
        }
    }
    headers
}

/// `temporal-redirect` wins over `permanent-redirect`, as in ingress-nginx (which reads the
/// temporal one first).
fn redirect(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<Redirect> {
    let temporal = keys.get(Setting::TemporalRedirect);
    let permanent = keys.get(Setting::PermanentRedirect);
    if let (Some(temporal), Some(permanent)) = (temporal, permanent) {
        let message = format!("ignored: {} is also set and takes precedence", temporal.key);
        report.warning(permanent, message);
    }
    let (found, code_key, default) = match (temporal, permanent) {
        (Some(found), _) => (found, Setting::TemporalRedirectCode, 302),
        (None, Some(found)) => (found, Setting::PermanentRedirectCode, 301),
        (None, None) => return None,
    };
    let location = location(found, report)?;
    let code = report
        .parse(
            keys.get(code_key),
            "a redirect status from 300 to 308",
            &format!("{default} is used"),
            |value| {
                value
                    .parse::<u16>()
                    .ok()
                    .filter(|code| (300..=308).contains(code))
            },
        )
        .unwrap_or(default);
    Some(Redirect {
        code,
        to: RedirectTo::Template(location),
    })
}

/// The URL as parts; `None` (with a warning) for an unknown variable or a URL that is neither
/// absolute nor a path.
fn location(found: Found<'_>, report: &mut Report<'_>) -> Option<Vec<Variable>> {
    let unknown = |name: String, report: &mut Report<'_>| {
        let message = format!(
            "the redirect uses {name}, which sluice does not fill in (only $request_uri, $host and $scheme); the redirect is ignored"
        );
        report.warning(found, message);
    };
    let parts = match parse_template(found.value.trim()) {
        Ok(parts) => parts,
        Err(name) => {
            unknown(format!("${name}"), report);
            return None;
        }
    };
    let allowed = |part: &Variable| {
        matches!(
            part,
            Variable::Text(_) | Variable::RequestUri | Variable::Host | Variable::Scheme
        )
    };
    if let Some(other) = parts.iter().find(|part| !allowed(part)) {
        unknown(other.nginx_name(), report);
        return None;
    }
    if !valid_target(&parts) {
        let message = format!(
            "invalid value {:?}: expected an absolute URL (https://example.com/path) or a path, which may use $request_uri, $host and $scheme; the redirect is ignored",
            found.value
        );
        report.warning(found, message);
        return None;
    }
    Some(parts)
}

/// Whether the URL, with sample values for its variables, is an absolute URL or a path that
/// can stand in a `Location` header.
fn valid_target(parts: &[Variable]) -> bool {
    let sample = sample(parts);
    let Ok(uri) = http::Uri::try_from(sample.as_str()) else {
        return false;
    };
    let absolute = uri.scheme().is_some() && uri.host().is_some();
    (absolute || sample.starts_with('/')) && http::HeaderValue::try_from(sample).is_ok()
}

fn valid_path(value: &str) -> bool {
    value.starts_with('/') && http::uri::PathAndQuery::try_from(value).is_ok()
}

fn header_safe(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

fn host_like(value: &str) -> bool {
    !value.is_empty() && http::uri::Authority::try_from(value).is_ok() && !value.contains('@')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::values::read_one;
    use crate::diagnostic::Diagnostic;

    fn parsed(value: &str) -> (Option<Vec<Variable>>, Vec<Diagnostic>) {
        read_one(
            "nginx.ingress.kubernetes.io/permanent-redirect",
            value,
            location,
        )
    }

    #[test]
    fn variables_become_parts_and_text_stays_text() {
        let (parts, _) = parsed("$scheme://www.$host$request_uri");
        assert_eq!(
            parts,
            Some(vec![
                Variable::Scheme,
                Variable::Text("://www.".into()),
                Variable::Host,
                Variable::RequestUri,
            ])
        );
        let (parts, _) = parsed("https://example.com/new");
        assert_eq!(
            parts,
            Some(vec![Variable::Text("https://example.com/new".into())])
        );
    }

    #[test]
    fn a_rewrite_target_may_use_groups_but_must_be_a_path() {
        assert!(valid_path(&without_groups("/$2")));
        assert!(valid_path(&without_groups("/v2/$1/x")));
        assert!(!valid_path(&without_groups("$1")));
        assert!(!valid_path(&without_groups("/a b")));
    }

    #[test]
    fn unknown_variables_and_bad_urls_are_ignored_with_a_warning() {
        for bad in [
            "https://x.test$uri",
            "https://x.test/$remote_addr",
            "not a url",
            "ftp:/broken",
            "example.com/x",
        ] {
            let (parts, diagnostics) = parsed(bad);
            assert_eq!(parts, None, "{bad}");
            assert_eq!(diagnostics.len(), 1, "{bad}");
        }
    }
}
