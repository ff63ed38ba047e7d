//! `allowlist-source-range` (and its older name `whitelist-source-range`) and `denylist-source-range`: the client addresses a route admits.

use ipnet::IpNet;
use sluice_routing::{RateLimits, SourceRanges};

use super::keys::{PolicyKeys, Setting};
use super::values::{Found, Report};

/// The source ranges of an Ingress's routes. A range that does not parse is an error, and the
/// routes then answer 503, as ingress-nginx denies a location whose annotations it cannot read:
/// a typo in an allowlist must not open the route to everyone.
pub(crate) fn source_ranges(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> SourceRanges {
    let allow = match (
        keys.get(Setting::AllowlistSourceRange),
        keys.get(Setting::WhitelistSourceRange),
    ) {
        (Some(allow), Some(old)) => {
            let message = format!("ignored: {} is also set and takes precedence", allow.key);
            report.warning(old, message);
            Some(allow)
        }
        (allow, old) => allow.or(old),
    };
    let mut ranges = SourceRanges::default();
    if let Some(found) = allow {
        match parse_ranges(found.value) {
            Ok(allow) => ranges.allow = allow,
            Err(bad) => ranges.unreadable = unreadable(found, &bad, report),
        }
    }
    if let Some(found) = keys.get(Setting::DenylistSourceRange) {
        match parse_ranges(found.value) {
            Ok(deny) => ranges.deny = deny,
            Err(bad) => ranges.unreadable = unreadable(found, &bad, report),
        }
    }
    ranges
}

/// `limit-rps`, `limit-rpm`, `limit-connections`, with `limit-burst-multiplier`,
/// `limit-allowlist` (or its older name `limit-whitelist`) and `sluice.dev/limit-status-code`.
/// An invalid value is a warning and that limit is off.
pub(crate) fn rate_limits(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<RateLimits> {
    let mut positive = |name, what: &str| {
        report.parse(
            keys.get(name),
            "a whole number greater than 0",
            &format!("no {what} limit"),
            |value| value.parse::<u32>().ok().filter(|n| *n > 0),
        )
    };
    let per_second = positive(Setting::LimitRps, "requests-per-second");
    let per_minute = positive(Setting::LimitRpm, "requests-per-minute");
    let connections = positive(Setting::LimitConnections, "connections");
    let burst_multiplier = positive(Setting::LimitBurstMultiplier, "other burst").unwrap_or(5);
    if per_second.is_none() && per_minute.is_none() && connections.is_none() {
        return None;
    }
    let exempt_found = keys
        .get(Setting::LimitAllowlist)
        .or(keys.get(Setting::LimitWhitelist));
    let exempt = match exempt_found.map(|found| (found, parse_ranges(found.value))) {
        Some((found, Err(bad))) => {
            let message = format!("{bad:?} is not an IPv4 or IPv6 address or CIDR range; no client is exempt from the limits");
            report.warning(found, message);
            Vec::new()
        }
        Some((_, Ok(ranges))) => ranges,
        None => Vec::new(),
    };
    let status = report
        .parse(
            keys.get(Setting::LimitStatusCode),
            "a status from 400 to 599, such as 429",
            "503 is used, as in ingress-nginx",
            |value| {
                value
                    .parse::<u16>()
                    .ok()
                    .filter(|code| (400..600).contains(code))
            },
        )
        .unwrap_or(503);
    Some(RateLimits {
        per_second,
        per_minute,
        connections,
        burst_multiplier,
        exempt,
        status,
    })
}

fn unreadable(found: Found<'_>, bad: &str, report: &mut Report<'_>) -> bool {
    let message = format!(
        "{bad:?} is not an IPv4 or IPv6 address or CIDR range; the Ingress's routes answer 503 until it is fixed, as ingress-nginx denies the location (an unreadable range must not admit everyone)"
    );
    report.error(found, message);
    true
}

/// Comma-separated CIDRs or single addresses (IPv4 and IPv6); empty entries are skipped.
/// `Err` names the first entry that does not parse.
fn parse_ranges(value: &str) -> Result<Vec<IpNet>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| ip_range(entry).ok_or_else(|| entry.to_owned()))
        .collect()
}

/// One range entry: a CIDR (its host bits cleared), or an address standing for itself.
pub(crate) fn ip_range(entry: &str) -> Option<IpNet> {
    let entry = entry.trim();
    entry
        .parse::<IpNet>()
        .or_else(|_| entry.parse::<std::net::IpAddr>().map(IpNet::from))
        .ok()
        .map(|range| range.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cidrs_or_single_addresses_of_either_family() {
        let ranges = parse_ranges(" 10.0.0.0/8, 192.168.1.7 ,2001:db8::/32,,::1").unwrap();
        let text: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["10.0.0.0/8", "192.168.1.7/32", "2001:db8::/32", "::1/128"]
        );
    }

    #[test]
    fn host_bits_are_dropped_and_a_bad_entry_is_named() {
        assert_eq!(
            parse_ranges("10.1.2.3/8").unwrap()[0].to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            parse_ranges("10.0.0.0/8, 300.1.1.1"),
            Err("300.1.1.1".into())
        );
        assert_eq!(parse_ranges("10.0.0.0/33"), Err("10.0.0.0/33".into()));
    }
}
