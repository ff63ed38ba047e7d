//! `canary` and its `canary-by-header`, `-value`, `-pattern`, `canary-by-cookie`, `canary-weight` and `canary-weight-total`: a second Ingress taking some of a main Ingress's requests.

use std::sync::Arc;

use sluice_routing::CanaryRule;

use super::keys::{PolicyKeys, Setting};
use super::values::{parse_bool, Report};

/// The canary settings, which mean nothing without `canary: "true"`.
const SETTINGS: [Setting; 6] = [
    Setting::CanaryByHeader,
    Setting::CanaryByHeaderValue,
    Setting::CanaryByHeaderPattern,
    Setting::CanaryByCookie,
    Setting::CanaryWeight,
    Setting::CanaryWeightTotal,
];

/// The rule of a canary Ingress, or `None` when it is not one (its canary settings then get
/// a warning each).
pub(crate) fn canary_rule(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Option<CanaryRule> {
    let on = report
        .parse(
            keys.get(Setting::Canary),
            "true or false",
            "the Ingress is not a canary",
            parse_bool,
        )
        .unwrap_or(false);
    if !on {
        for found in SETTINGS.into_iter().filter_map(|name| keys.get(name)) {
            report.warning(
                found,
                "ignored: the Ingress is not a canary (canary: \"true\" is not set)",
            );
        }
        return None;
    }
    let header = report.parse(
        keys.get(Setting::CanaryByHeader),
        "a header name",
        "no header decides",
        |value| {
            http::HeaderName::from_bytes(value.as_bytes())
                .ok()
                .map(|n| n.as_str().to_owned())
        },
    );
    let header_pattern = report.parse(
        keys.get(Setting::CanaryByHeaderPattern),
        "a regular expression",
        "the pattern is not used",
        |value| regex::Regex::new(value).ok().map(Arc::new),
    );
    let weight_total = report
        .parse(
            keys.get(Setting::CanaryWeightTotal),
            "a whole number of 100 or more (ingress-nginx uses 100 for anything less)",
            "100 is used",
            |value| value.parse::<u32>().ok().filter(|total| *total >= 100),
        )
        .unwrap_or(100);
    let weight = report
        .parse(
            keys.get(Setting::CanaryWeight),
            "a whole number from 0 to the weight total",
            "0 is used (no request is sent to the canary by weight)",
            |value| value.parse::<u32>().ok().filter(|w| *w <= weight_total),
        )
        .unwrap_or(0);
    Some(CanaryRule {
        header,
        header_value: keys
            .get(Setting::CanaryByHeaderValue)
            .map(|found| found.value.to_owned()),
        header_pattern,
        cookie: keys
            .get(Setting::CanaryByCookie)
            .map(|found| found.value.trim().to_owned())
            .filter(|name| !name.is_empty()),
        weight,
        weight_total,
    })
}
