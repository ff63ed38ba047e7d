//! `GatewayClass.status.supportedFeatures` against docs/gateway-api.md: sluice lists exactly the features of the conformance tests the page says pass, so the suite runs every test that passes and none that does not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use sluice_config::SUPPORTED_FEATURES;

const PAGE: &str = include_str!("../../../docs/gateway-api.md");

/// The cells of a Markdown table row.
fn cells(row: &str) -> Vec<&str> {
    row.trim()
        .trim_matches('|')
        .split(" | ")
        .map(str::trim)
        .collect()
}

/// Every feature name of the page's Features table.
fn known_features() -> BTreeSet<&'static str> {
    let section = PAGE
        .split("\n## Features\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Features section");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| cells(line)[0].trim_matches('`'))
        .collect()
}

/// Each catalogued test's features and status, from the tables of the Tests section.
fn test_rows() -> Vec<(BTreeSet<&'static str>, &'static str)> {
    let known = known_features();
    let section = PAGE.split("\n## Tests\n").nth(1).expect("a Tests section");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells = cells(line);
            let features = cells[1]
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter_map(|word| known.get(word).copied())
                .collect();
            (features, *cells.last().unwrap())
        })
        .collect()
}

#[test]
fn the_supported_features_are_those_of_the_passing_tests() {
    let rows = test_rows();
    assert!(rows.len() >= 70, "{} test rows read", rows.len());
    let passing: BTreeSet<&str> = rows
        .iter()
        .filter(|(_, status)| status.starts_with("pass"))
        .flat_map(|(features, _)| features.iter().copied())
        .collect();
    assert!(
        SUPPORTED_FEATURES.windows(2).all(|pair| pair[0] < pair[1]),
        "supportedFeatures must be sorted in ascending order by name"
    );
    let listed: BTreeSet<&str> = SUPPORTED_FEATURES.iter().copied().collect();
    let unlisted: Vec<_> = passing.difference(&listed).collect();
    let unearned: Vec<_> = listed.difference(&passing).collect();
    assert!(
        unlisted.is_empty(),
        "features of passing tests that supportedFeatures omits: {unlisted:?}"
    );
    assert!(
        unearned.is_empty(),
        "features listed without a passing test on the page: {unearned:?}"
    );
}

/// The profiles' core features, which an implementation lists whatever it fails: a test that
/// does not pass and needs only these is a known failure the page must explain.
const CORE: [&str; 4] = ["Gateway", "HTTPRoute", "ReferenceGrant", "GRPCRoute"];

#[test]
fn no_listed_extended_feature_has_a_test_that_does_not_pass() {
    let listed: BTreeSet<&str> = SUPPORTED_FEATURES.iter().copied().collect();
    for (features, status) in test_rows() {
        if !status.starts_with("pass") {
            assert!(
                status.starts_with("not yet: "),
                "a status says why: {status:?}"
            );
            let claimed: Vec<_> = features
                .intersection(&listed)
                .filter(|feature| !CORE.contains(feature))
                .collect();
            assert!(
                claimed.is_empty(),
                "a test of {claimed:?} is {status:?}: the suite would run and fail it"
            );
        }
    }
}
