//! Fuzzes path normalisation: it never panics, and what it returns starts with `/`, holds no dot-segment and normalises to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_routing::normalize_path;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(normalized) = normalize_path(path) else {
        return;
    };
    assert!(normalized.starts_with('/'), "{path:?} -> {normalized:?}");
    let again = normalize_path(&normalized).expect("a normalised path normalises");
    assert_eq!(again, normalized, "{path:?} is not idempotent");
    for segment in normalized[1..].split('/') {
        let decoded = segment.replace("%2e", ".").replace("%2E", ".");
        assert!(decoded != "." && decoded != "..", "{path:?} -> {normalized:?}");
    }
});
