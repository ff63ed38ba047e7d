//! `enable-cors` and the `cors-*` annotations, with ingress-nginx's defaults.

use sluice_routing::{Cors, CorsRules, OriginPattern};

use super::keys::{PolicyKeys, Setting};
use super::values::{parse_bool, Found, Report};

const DEFAULT_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
const DEFAULT_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
const DEFAULT_MAX_AGE: u64 = 1_728_000;

/// The CORS settings when `enable-cors` is true; the `cors-*` annotations without it say
/// nothing, and get a warning that says so.
pub(crate) fn cors(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<Cors> {
    let enabled = report
        .parse(
            keys.get(Setting::EnableCors),
            "true or false",
            "CORS stays off",
            parse_bool,
        )
        .unwrap_or(false);
    let settings = [
        Setting::CorsAllowOrigin,
        Setting::CorsAllowMethods,
        Setting::CorsAllowHeaders,
        Setting::CorsExposeHeaders,
        Setting::CorsAllowCredentials,
        Setting::CorsMaxAge,
    ];
    if !enabled {
        for found in settings.into_iter().filter_map(|name| keys.get(name)) {
            report.warning(found, "ignored: enable-cors is not \"true\"");
        }
        return None;
    }
    Some(Cors {
        origins: origins(keys.get(Setting::CorsAllowOrigin), report),
        allow_methods: header_list(keys.get(Setting::CorsAllowMethods), DEFAULT_METHODS, report),
        allow_headers: header_list(keys.get(Setting::CorsAllowHeaders), DEFAULT_HEADERS, report),
        expose_headers: keys
            .get(Setting::CorsExposeHeaders)
            .map(|found| header_list(Some(found), "", report))
            .filter(|list| !list.is_empty()),
        allow_credentials: report
            .parse(
                keys.get(Setting::CorsAllowCredentials),
                "true or false",
                "credentials are allowed (ingress-nginx's default)",
                parse_bool,
            )
            .unwrap_or(true),
        max_age: report
            .parse(
                keys.get(Setting::CorsMaxAge),
                "whole seconds",
                "1728000 is used",
                |value| value.parse().ok(),
            )
            .unwrap_or(DEFAULT_MAX_AGE),
        rules: CorsRules::IngressNginx,
    })
}

/// `None` for any origin (`*`, the default); else the listed origins. An entry that is not
/// an origin is a warning and left out; when none is left, no origin gets CORS headers.
fn origins(found: Option<Found<'_>>, report: &mut Report<'_>) -> Option<Vec<OriginPattern>> {
    let found = found?;
    let entries: Vec<&str> = found
        .value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect();
    if entries.is_empty() || entries.contains(&"*") {
        return None;
    }
    let mut patterns = Vec::new();
    for entry in entries {
        match OriginPattern::parse(entry) {
            Some(pattern) => patterns.push(pattern),
            None => {
                let message = format!(
                    "{entry:?} is not an origin (scheme://host[:port], the host may start with *.); it is left out"
                );
                report.warning(found, message);
            }
        }
    }
    Some(patterns)
}

/// A comma-separated list as a header value; an invalid one is a warning and `default`.
fn header_list(found: Option<Found<'_>>, default: &str, report: &mut Report<'_>) -> String {
    report
        .parse(
            found,
            "a comma-separated list",
            &format!("{default:?} is used"),
            |value| {
                let joined = value
                    .split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .collect::<Vec<_>>()
                    .join(", ");
                http::HeaderValue::from_str(&joined).ok().map(|_| joined)
            },
        )
        .unwrap_or_else(|| default.to_owned())
}

#[cfg(test)]
mod tests {
    use sluice_routing::{CorsRules, OriginPattern};

    #[test]
    fn wildcard_origins_match_exactly_one_more_label_with_the_same_scheme_and_port() {
        let nginx = CorsRules::IngressNginx;
        let pattern = OriginPattern::parse("https://*.example.com").unwrap();
        assert!(pattern.matches("https://app.example.com", nginx));
        assert!(!pattern.matches("https://a.b.example.com", nginx));
        assert!(!pattern.matches("https://example.com", nginx));
        assert!(!pattern.matches("http://app.example.com", nginx));
        assert!(!pattern.matches("https://app.example.com:8443", nginx));
        let exact = OriginPattern::parse("http://localhost:3000").unwrap();
        assert!(exact.matches("http://localhost:3000", nginx));
        assert!(!exact.matches("http://localhost:3001", nginx));
        assert!(OriginPattern::parse("example.com").is_none());
        assert!(OriginPattern::parse("https://example.com/path").is_none());
    }

    /// The HTTPRoute CORS spec: a wildcard matches any number of labels left of `*`
    /// (httproute-cors.go allows `https://xpto.www.bar.com` by `https://*.bar.com`).
    #[test]
    fn gateway_api_wildcard_origins_match_one_or_more_labels() {
        let gateway = CorsRules::GatewayApi;
        let pattern = OriginPattern::parse("https://*.bar.com").unwrap();
        assert!(pattern.matches("https://www.bar.com", gateway));
        assert!(pattern.matches("https://xpto.www.bar.com", gateway));
        assert!(!pattern.matches("https://xpto.www.bar.com", CorsRules::IngressNginx));
        assert!(!pattern.matches("https://bar.com", gateway));
        assert!(!pattern.matches("https://foobar.com", gateway));
        assert!(!pattern.matches("https://.bar.com", gateway));
        assert!(!pattern.matches("http://www.bar.com", gateway));
    }
}
