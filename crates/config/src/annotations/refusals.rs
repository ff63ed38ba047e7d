//! Fail closed: the ingress-nginx annotations that restrict access which sluice cannot honour (snippets, WAF switches), each an error that makes the Ingress's routes answer 503.
//!
//! ingress-nginx with `allow-snippet-annotations: false` (its default since 1.9) serves no
//! Ingress that carries a snippet; a WAF switch that is on stands for rules the user relies
//! on. Serving such an Ingress without them would open what it was meant to protect, so every
//! route of it answers 503 instead, until the annotation goes or the operator, having checked
//! that it protects nothing, sets `sluice.dev/ignore-snippets: "true"` (then each is a
//! warning).

use super::keys::{PolicyKeys, Setting};
use super::values::{parse_bool, Found, Report};
use super::Annotations;

/// The opt-out: an operator's word that the Ingress's snippets and WAF switches protect
/// nothing, so it may be served without them.
pub const IGNORE_SNIPPETS: &str = "sluice.dev/ignore-snippets";

/// The prefixes ingress-nginx's own annotations are read under.
const NGINX_PREFIXES: [&str; 2] = ["nginx.ingress.kubernetes.io/", "ingress.kubernetes.io/"];

/// What one annotation is, for the fail-closed rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Raw nginx configuration (`*-snippet`).
    Snippet,
    /// A WAF switched on (`enable-modsecurity: "true"`, `lua-resty-waf: active`, ...).
    WafOn(&'static str),
    /// A WAF setting that turns nothing on by itself.
    WafSetting,
}

/// Whether `key` is one of the annotations this module reads (so the unknown-annotation
/// report leaves it alone).
pub(crate) fn is_refusal_key(key: &str) -> bool {
    nginx_name(key).is_some_and(|name| {
        name.ends_with("-snippet")
            || name.contains("modsecurity")
            || name == "enable-owasp-core-rules"
            || name.starts_with("lua-resty-waf")
    })
}

fn nginx_name(key: &str) -> Option<&str> {
    NGINX_PREFIXES
        .iter()
        .find_map(|prefix| key.strip_prefix(prefix))
}

fn kind_of(name: &str, value: &str) -> Kind {
    let on = parse_bool(value).unwrap_or(false);
    if name.ends_with("-snippet") {
        return Kind::Snippet;
    }
    match name {
        "enable-modsecurity" if on => Kind::WafOn("ModSecurity"),
        "enable-owasp-core-rules" if on => Kind::WafOn("the OWASP ModSecurity Core Rule Set"),
        "lua-resty-waf" if value.trim().eq_ignore_ascii_case("active") => {
            Kind::WafOn("lua-resty-waf")
        }
        _ => Kind::WafSetting,
    }
}

/// Reports every snippet and WAF annotation of an Ingress. Returns the keys that make the
/// Ingress's routes answer 503 (none when the operator opted out).
pub(crate) fn refused_annotations<'a>(
    annotations: &'a Annotations,
    keys: &PolicyKeys<'_>,
    report: &mut Report<'_>,
) -> Vec<&'a str> {
    let opted_out = report
        .parse(
            keys.get(Setting::IgnoreSnippets),
            "\"true\" or \"false\"",
            "treated as false: snippets and WAF switches make the Ingress answer 503",
            parse_bool,
        )
        .unwrap_or(false);
    let mut refused: Vec<&str> = Vec::new();
    for (key, value) in annotations {
        let Some(name) = nginx_name(key).filter(|_| is_refusal_key(key)) else {
            continue;
        };
        let found = Found { key, value };
        match kind_of(name, value) {
            Kind::WafSetting => report.warning(
                found,
                "not honoured: sluice has no WAF module (ModSecurity and lua-resty-waf are nginx modules); put a WAF in front of sluice or in the pod",
            ),
            Kind::Snippet if opted_out => report.warning(
                found,
                format!("ignored ({IGNORE_SNIPPETS} is \"true\"): raw nginx configuration is not run, and the Ingress is served without it"),
            ),
            Kind::WafOn(waf) if opted_out => report.warning(
                found,
                format!("ignored ({IGNORE_SNIPPETS} is \"true\"): sluice has no {waf}, and the Ingress is served without a WAF"),
            ),
            Kind::Snippet => {
                report.error(
                    found,
                    format!("raw nginx configuration is not run by sluice, so whatever it restricts (deny rules, auth, headers) would be lost: every route of this Ingress answers 503, as ingress-nginx with allow-snippet-annotations: false serves none of it (snippets also opened CVE-2021-25742 and CVE-2025-1974). Express what the snippet does with sluice's annotations or in the application; or, once you have checked that it protects nothing, set {IGNORE_SNIPPETS}: \"true\""),
                );
                refused.push(key);
            }
            Kind::WafOn(waf) => {
                report.error(
                    found,
                    format!("turns on {waf}, a WAF sluice does not have: every route of this Ingress answers 503 rather than serve it unprotected. Put a WAF in front of sluice or in the pod; or, to serve it without one, set {IGNORE_SNIPPETS}: \"true\""),
                );
                refused.push(key);
            }
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::{Diagnostics, ObjectRef, Severity};

    fn refused(pairs: &[(&str, &str)]) -> (Option<String>, Vec<Severity>) {
        let annotations: Annotations = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let object = ObjectRef::new("Ingress", Some("default"), "web");
        let mut diagnostics = Diagnostics::default();
        let mut report = Report {
            object: &object,
            diagnostics: &mut diagnostics,
        };
        let keys = PolicyKeys::scan_quietly(&annotations);
        let refused = refused_annotations(&annotations, &keys, &mut report);
        let refused = (!refused.is_empty()).then(|| refused.join(", "));
        let severities = diagnostics.into_vec().iter().map(|d| d.severity).collect();
        (refused, severities)
    }

    #[test]
    fn a_snippet_refuses_the_ingress_unless_the_operator_opts_out() {
        let snippet = (
            "nginx.ingress.kubernetes.io/server-snippet",
            "location /x { deny all; }",
        );
        let (reason, severities) = refused(&[snippet]);
        assert_eq!(
            reason.as_deref(),
            Some("nginx.ingress.kubernetes.io/server-snippet")
        );
        assert_eq!(severities, [Severity::Error]);
        let (reason, severities) = refused(&[snippet, (IGNORE_SNIPPETS, "true")]);
        assert_eq!(reason, None);
        assert_eq!(severities, [Severity::Warning]);
    }

    #[test]
    fn a_waf_refuses_only_when_switched_on() {
        let (reason, _) = refused(&[("nginx.ingress.kubernetes.io/enable-modsecurity", "false")]);
        assert_eq!(reason, None);
        for on in [
            ("nginx.ingress.kubernetes.io/enable-modsecurity", "true"),
            (
                "nginx.ingress.kubernetes.io/enable-owasp-core-rules",
                "true",
            ),
            ("nginx.ingress.kubernetes.io/lua-resty-waf", "active"),
            (
                "ingress.kubernetes.io/modsecurity-snippet",
                "SecRuleEngine On",
            ),
        ] {
            let (reason, severities) = refused(&[on]);
            assert!(reason.is_some(), "{on:?}");
            assert_eq!(severities, [Severity::Error], "{on:?}");
        }
        let (reason, severities) = refused(&[
            ("nginx.ingress.kubernetes.io/lua-resty-waf", "simulate"),
            (
                "nginx.ingress.kubernetes.io/modsecurity-transaction-id",
                "$request_id",
            ),
        ]);
        assert_eq!(reason, None);
        assert_eq!(severities, [Severity::Warning, Severity::Warning]);
    }
}
