//! `proxy-next-upstream` and its tries and timeouts, plus `sluice.dev/per-try-timeout` and `sluice.dev/response-retry-buffer`: when a failed attempt goes to another endpoint.

use sluice_routing::{RetryOn, RetryPolicy};

use super::keys::{PolicyKeys, Setting};
use super::values::{parse_duration, parse_size, Found, Report};

/// What `proxy-next-upstream-tries: 0` (unlimited in ingress-nginx) becomes: attempts in all.
pub const UNLIMITED_TRIES: u32 = 10;

/// The retry policy the annotations ask for; an absent annotation keeps the default.
pub(crate) fn retry_policy(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> RetryPolicy {
    let on = keys
        .get(Setting::ProxyNextUpstream)
        .map_or_else(RetryOn::default, |found| retry_on(found, report));
    let tries = report.parse(
        keys.get(Setting::ProxyNextUpstreamTries),
        "a whole number of attempts (0: up to 10)",
        "3 are used",
        parse_tries,
    );
    let timeout = report.parse(
        keys.get(Setting::ProxyNextUpstreamTimeout),
        "seconds or a duration such as 5s (0: no limit)",
        "no limit",
        |value| parse_duration(value).map(|d| Some(d).filter(|d| !d.is_zero())),
    );
    let per_try_timeout = report.parse(
        keys.get(Setting::PerTryTimeout),
        "a duration above 0 such as 5s or 500ms",
        "the proxy's --response-header-timeout applies",
        |value| parse_duration(value).filter(|d| !d.is_zero()),
    );
    let response_buffer = report.parse(
        keys.get(Setting::ResponseRetryBuffer),
        "a size such as 64k, 1m or 0 (hold no response)",
        "the proxy's --response-retry-buffer applies",
        parse_size,
    );
    RetryPolicy {
        on,
        tries: tries.unwrap_or(RetryPolicy::DEFAULT_TRIES),
        revisit: false,
        timeout: timeout.flatten(),
        per_try_timeout,
        response_buffer,
        backoff: None,
    }
}

fn parse_tries(value: &str) -> Option<u32> {
    match value.parse::<u32>().ok()? {
        0 => Some(UNLIMITED_TRIES),
        tries => Some(tries),
    }
}

/// What one `proxy-next-upstream` token is to sluice.
enum Token {
    Supported,
    /// Known to ingress-nginx, not done by sluice.
    Unsupported,
    Unknown,
}

/// The conditions of a `proxy-next-upstream` list, starting from none. A list with no token
/// sluice recognises keeps the default, with a warning.
fn retry_on(found: Found<'_>, report: &mut Report<'_>) -> RetryOn {
    let mut on = RetryOn::none();
    let mut recognised = false;
    for token in found.value.split_ascii_whitespace() {
        match apply(&mut on, token) {
            Token::Supported => recognised = true,
            Token::Unsupported => {
                recognised = true;
                report.warning(
                    found,
                    format!("{token:?} is not supported by sluice and is ignored"),
                );
            }
            Token::Unknown => {
                report.warning(found, format!("unknown condition {token:?}; ignored"));
            }
        }
    }
    if !recognised {
        report.warning(
            found,
            format!(
                "invalid value {:?}: no condition sluice knows; the default (error timeout http_502 http_503 http_504) is used",
                found.value
            ),
        );
        return RetryOn::default();
    }
    let only_off = RetryOn {
        off: true,
        ..RetryOn::none()
    };
    if on.off && on != only_off {
        report.warning(
            found,
            "\"off\" turns retries off; the other conditions do nothing",
        );
    }
    on
}

fn apply(on: &mut RetryOn, token: &str) -> Token {
    let flag = match token {
        "error" => &mut on.error,
        "timeout" => &mut on.timeout,
        "http_500" => &mut on.http_500,
        "http_502" => &mut on.http_502,
        "http_503" => &mut on.http_503,
        "http_504" => &mut on.http_504,
        "http_429" => &mut on.http_429,
        "non_idempotent" => &mut on.non_idempotent,
        "off" => &mut on.off,
        "invalid_header" | "http_403" | "http_404" => return Token::Unsupported,
        _ => return Token::Unknown,
    };
    *flag = true;
    Token::Supported
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::values::read_one;

    fn parse(value: &str) -> (RetryOn, usize) {
        let (on, diagnostics) = read_one(
            "nginx.ingress.kubernetes.io/proxy-next-upstream",
            value,
            retry_on,
        );
        (on, diagnostics.len())
    }

    #[test]
    fn a_list_starts_from_no_condition() {
        let (on, warnings) = parse("error http_500 non_idempotent");
        let expected = RetryOn {
            error: true,
            http_500: true,
            non_idempotent: true,
            ..RetryOn::none()
        };
        assert_eq!((on, warnings), (expected, 0));
    }

    #[test]
    fn unsupported_and_unknown_tokens_warn_once_each() {
        let (on, warnings) = parse("timeout http_404 invalid_header bogus");
        let expected = RetryOn {
            timeout: true,
            ..RetryOn::none()
        };
        assert_eq!((on, warnings), (expected, 3));
    }

    #[test]
    fn nothing_recognised_keeps_the_default() {
        assert_eq!(parse("bogus").0, RetryOn::default());
        assert_eq!(parse("").0, RetryOn::default());
    }

    #[test]
    fn zero_tries_is_capped() {
        assert_eq!(parse_tries("0"), Some(UNLIMITED_TRIES));
        assert_eq!(parse_tries("5"), Some(5));
        assert_eq!(parse_tries("-1"), None);
    }
}
