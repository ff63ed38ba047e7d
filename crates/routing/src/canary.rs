//! ingress-nginx's canary rule: which requests a canary Ingress takes from the main Ingress's route, by header, then cookie, then weight.

use std::sync::Arc;

use serde::Serialize;

/// How a canary Ingress picks requests, as ingress-nginx's balancer decides it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CanaryRule {
    /// `canary-by-header`: the header that decides first.
    pub header: Option<String>,
    /// `canary-by-header-value`: the header sends to the canary when it equals this.
    pub header_value: Option<String>,
    /// `canary-by-header-pattern` (when no value is set): the header sends to the canary when
    /// this regular expression finds a match in it.
    #[serde(serialize_with = "pattern_text")]
    pub header_pattern: Option<Arc<regex::Regex>>,
    /// `canary-by-cookie`: a cookie whose value `always` or `never` decides second.
    pub cookie: Option<String>,
    /// `canary-weight` out of `weight_total`: the share of the other requests.
    pub weight: u32,
    pub weight_total: u32,
}

/// What a header or cookie says about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Say {
    Canary,
    Main,
    Undecided,
}

impl CanaryRule {
    /// Whether the request goes to the canary: the header's word first (its value or pattern
    /// when set, else `always`/`never`), then the cookie's (`always`/`never`), then a roll of
    /// `1..=weight_total` against the weight. A value or pattern that does not match leaves
    /// the decision to the cookie and weight, as in ingress-nginx.
    pub fn chooses(
        &self,
        header: Option<&[u8]>,
        cookie: Option<&str>,
        roll: impl FnOnce(u32) -> u32,
    ) -> bool {
        let said = match self.header_says(header) {
            Say::Undecided => Self::word(cookie.map(str::as_bytes)),
            said => said,
        };
        match said {
            Say::Canary => true,
            Say::Main => false,
            Say::Undecided => self.weight > 0 && roll(self.weight_total) <= self.weight,
        }
    }

    fn header_says(&self, header: Option<&[u8]>) -> Say {
        let Some(value) = header.filter(|_| self.header.is_some()) else {
            return Say::Undecided;
        };
        if let Some(expected) = self.header_value.as_deref().filter(|v| !v.is_empty()) {
            return if value == expected.as_bytes() {
                Say::Canary
            } else {
                Say::Undecided
            };
        }
        if let Some(pattern) = &self.header_pattern {
            let text = std::str::from_utf8(value).unwrap_or_default();
            return if pattern.is_match(text) {
                Say::Canary
            } else {
                Say::Undecided
            };
        }
        Self::word(Some(value))
    }

    fn word(value: Option<&[u8]>) -> Say {
        match value {
            Some(b"always") => Say::Canary,
            Some(b"never") => Say::Main,
            _ => Say::Undecided,
        }
    }
}

impl PartialEq for CanaryRule {
    fn eq(&self, other: &Self) -> bool {
        let pattern = |rule: &Self| rule.header_pattern.as_ref().map(|p| p.as_str().to_owned());
        self.header == other.header
            && self.header_value == other.header_value
            && pattern(self) == pattern(other)
            && self.cookie == other.cookie
            && self.weight == other.weight
            && self.weight_total == other.weight_total
    }
}

impl Eq for CanaryRule {}

fn pattern_text<S: serde::Serializer>(
    pattern: &Option<Arc<regex::Regex>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_some(&pattern.as_ref().map(|p| p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> CanaryRule {
        CanaryRule {
            header: Some("x-canary".into()),
            cookie: Some("canary".into()),
            weight: 0,
            weight_total: 100,
            ..CanaryRule::default()
        }
    }

    #[test]
    fn header_then_cookie_then_weight() {
        let rule = rule();
        let never_rolled = |_| panic!("the weight is not consulted");
        assert!(rule.chooses(Some(b"always"), Some("never"), never_rolled));
        assert!(!rule.chooses(Some(b"never"), Some("always"), never_rolled));
        assert!(rule.chooses(Some(b"other"), Some("always"), never_rolled));
        assert!(!rule.chooses(None, Some("never"), never_rolled));
        let weighted = CanaryRule { weight: 30, ..rule };
        assert!(weighted.chooses(None, None, |_| 30));
        assert!(!weighted.chooses(None, None, |_| 31));
    }

    #[test]
    fn a_header_value_or_pattern_that_does_not_match_falls_through() {
        let by_value = CanaryRule {
            header_value: Some("v2".into()),
            ..rule()
        };
        assert!(by_value.chooses(Some(b"v2"), None, |_| 100));
        assert!(!by_value.chooses(Some(b"always"), None, |_| 100));
        assert!(by_value.chooses(Some(b"v1"), Some("always"), |_| 100));
        let by_pattern = CanaryRule {
            header_pattern: Some(Arc::new(regex::Regex::new("^(beta|v2)").unwrap())),
            ..rule()
        };
        assert!(by_pattern.chooses(Some(b"beta-user"), None, |_| 100));
        assert!(!by_pattern.chooses(Some(b"stable"), None, |_| 100));
    }

    #[test]
    fn weight_zero_never_rolls_in() {
        assert!(!rule().chooses(None, None, |_| 1));
    }
}
