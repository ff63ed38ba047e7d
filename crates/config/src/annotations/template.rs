//! nginx variables in annotation values (`https://$host/oauth2/start?rd=$escaped_request_uri`): read into [`Variable`] parts, each unknown variable a warning.

use sluice_routing::Variable;

use super::values::{Found, Report};

/// A value with nginx variables as parts; an unknown variable is a warning and `None`.
pub(crate) fn template(
    found: Found<'_>,
    report: &mut Report<'_>,
    otherwise: &str,
) -> Option<Vec<Variable>> {
    match parse_template(found.value.trim()) {
        Ok(parts) => Some(parts),
        Err(name) => {
            report.warning(found, unknown_variable(&name, otherwise));
            None
        }
    }
}

/// The diagnostic for a variable sluice does not fill in.
pub(crate) fn unknown_variable(name: &str, otherwise: &str) -> String {
    format!("${name} is not an nginx variable sluice fills in ($host, $http_host, $scheme, $pass_access_scheme, $request_uri, $escaped_request_uri, $request_method, $remote_addr, $http_NAME, $cookie_NAME, $arg_NAME); {otherwise}")
}

pub(crate) fn parse_template(value: &str) -> Result<Vec<Variable>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = value;
    while let Some(dollar) = rest.find('$') {
        text.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..end];
        let variable = variable(name).ok_or_else(|| name.to_owned())?;
        if !text.is_empty() {
            parts.push(Variable::Text(std::mem::take(&mut text)));
        }
        parts.push(variable);
        rest = &after[end..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Variable::Text(text));
    }
    Ok(parts)
}

fn variable(name: &str) -> Option<Variable> {
    let named = |prefix: &str| {
        name.strip_prefix(prefix)
            .filter(|rest| !rest.is_empty())
            .map(str::to_owned)
    };
    Some(match name {
        "host" => Variable::Host,
        "http_host" | "best_http_host" => Variable::HttpHost,
        "scheme" => Variable::Scheme,
        "pass_access_scheme" => Variable::PassAccessScheme,
        "request_uri" => Variable::RequestUri,
        "escaped_request_uri" => Variable::EscapedRequestUri,
        "request_method" => Variable::RequestMethod,
        "remote_addr" => Variable::RemoteAddr,
        _ => {
            if let Some(header) = named("http_") {
                Variable::Header(header.replace('_', "-"))
            } else if let Some(cookie) = named("cookie_") {
                Variable::Cookie(cookie)
            } else {
                Variable::Arg(named("arg_")?)
            }
        }
    })
}

/// The template with sample values for its variables, to check what it makes is a URL.
pub(crate) fn sample(parts: &[Variable]) -> String {
    parts
        .iter()
        .map(|part| match part {
            Variable::Text(text) => text.as_str(),
            Variable::Scheme | Variable::PassAccessScheme => "https",
            Variable::Host | Variable::HttpHost => "example.com",
            Variable::RequestUri | Variable::EscapedRequestUri => "/path?query",
            _ => "x",
        })
        .collect()
}

/// Whether the template, with sample values, is an absolute http(s) URL.
pub(crate) fn absolute_url(parts: &[Variable]) -> bool {
    http::Uri::try_from(sample(parts).as_str())
        .is_ok_and(|uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_know_nginx_variables() {
        assert_eq!(
            parse_template("https://$host/oauth2/start?rd=$escaped_request_uri"),
            Ok(vec![
                Variable::Text("https://".into()),
                Variable::Host,
                Variable::Text("/oauth2/start?rd=".into()),
                Variable::EscapedRequestUri,
            ])
        );
        assert_eq!(
            parse_template("$remote_addr$http_authorization$cookie_session"),
            Ok(vec![
                Variable::RemoteAddr,
                Variable::Header("authorization".into()),
                Variable::Cookie("session".into()),
            ])
        );
        assert_eq!(parse_template("https://a.test$uri"), Err("uri".to_owned()));
    }

    #[test]
    fn an_auth_url_must_be_absolute() {
        assert!(absolute_url(
            &parse_template("http://auth.test/verify").unwrap()
        ));
        assert!(absolute_url(
            &parse_template("https://$host/oauth2/auth").unwrap()
        ));
        assert!(!absolute_url(&parse_template("/oauth2/auth").unwrap()));
    }
}
