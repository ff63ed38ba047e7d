//! Label selectors (`a=b,c!=d,e in (f,g),!h`) and field selectors on `metadata.name` / `metadata.namespace`.

use serde_json::Value;

use crate::error::TestApiError;
use crate::object;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    pub fn parse(text: &str) -> Result<Self, TestApiError> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(term)?);
        }
        Ok(Self(requirements))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object::labels(object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_requirement(term: &str) -> Result<LabelRequirement, TestApiError> {
    let bad = || TestApiError::bad_request(format!("unable to parse requirement: {term:?}"));
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(valid_key(key.trim(), term)?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            valid_key(key.trim(), term)?,
            value.trim().to_owned(),
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            valid_key(key.trim(), term)?,
            value.trim().to_owned(),
        ));
    }
    for (operator, negated) in [(" notin ", true), (" in ", false)] {
        if let Some((key, values)) = term.split_once(operator) {
            let values = values
                .trim()
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = values
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = valid_key(key.trim(), term)?;
            return Ok(if negated {
                LabelRequirement::NotIn(key, values)
            } else {
                LabelRequirement::In(key, values)
            });
        }
    }
    Ok(LabelRequirement::Exists(valid_key(term, term)?))
}

fn valid_key(key: &str, term: &str) -> Result<String, TestApiError> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_owned())
    } else {
        Err(TestApiError::bad_request(format!(
            "unable to parse requirement: {term:?}: invalid label key {key:?}"
        )))
    }
}

/// A parsed `fieldSelector` on `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(FieldKey, bool, String)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKey {
    Name,
    Namespace,
}

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; any other field is a 400, as for the
    /// resource types served here.
    pub fn parse(text: &str) -> Result<Self, TestApiError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(TestApiError::bad_request(format!(
                    "invalid selector: {term:?}; can't understand"
                )));
            };
            let key = match field.trim() {
                "metadata.name" => FieldKey::Name,
                "metadata.namespace" => FieldKey::Namespace,
                other => {
                    return Err(TestApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )))
                }
            };
            terms.push((key, equal, value.trim().to_owned()));
        }
        Ok(Self(terms))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(key, equal, value)| {
            let actual = match key {
                FieldKey::Name => object::meta_str(object, "name"),
                FieldKey::Namespace => object::meta_str(object, "namespace"),
            }
            .unwrap_or("");
            (actual == value) == *equal
        })
    }
}

/// A label selector and a field selector together.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn equality_selectors_need_every_term() {
        let s = LabelSelector::parse("app=web,tier==front").unwrap();
        assert!(s.matches(&labelled(json!({"app": "web", "tier": "front", "x": "y"}))));
        assert!(!s.matches(&labelled(json!({"app": "web"}))));
        assert!(!s.matches(&labelled(json!({"app": "db", "tier": "front"}))));
        assert!(!s.matches(&json!({"metadata": {"name": "a"}})));
    }

    #[test]
    fn inequality_existence_and_sets() {
        let s = LabelSelector::parse(
            "app!=db,kubernetes.io/service-name,!skip,env in (a, b),zone notin (z)",
        )
        .unwrap();
        assert!(s.matches(&labelled(
            json!({"kubernetes.io/service-name": "s", "env": "b"})
        )));
        assert!(!s.matches(&labelled(
            json!({"kubernetes.io/service-name": "s", "env": "c"})
        )));
        assert!(!s.matches(&labelled(
            json!({"kubernetes.io/service-name": "s", "env": "a", "skip": "1"})
        )));
        assert!(!s.matches(&labelled(json!({"env": "a"}))));
        assert!(!s.matches(&labelled(
            json!({"kubernetes.io/service-name": "s", "env": "a", "zone": "z"})
        )));
        assert!(!s.matches(&labelled(
            json!({"kubernetes.io/service-name": "s", "env": "a", "app": "db"})
        )));
    }

    #[test]
    fn empty_selector_matches_all_and_bad_keys_fail() {
        assert!(LabelSelector::parse("").unwrap().matches(&json!({})));
        assert_eq!(LabelSelector::parse("a b=c").unwrap_err().code(), 400);
    }

    #[test]
    fn field_selectors_on_name_and_namespace() {
        let s = FieldSelector::parse("metadata.name=a,metadata.namespace!=other").unwrap();
        assert!(s.matches(&labelled(json!({}))));
        let s = FieldSelector::parse("metadata.namespace==other").unwrap();
        assert!(!s.matches(&labelled(json!({}))));
        let err = FieldSelector::parse("spec.type=ClusterIP").unwrap_err();
        assert_eq!((err.code(), err.reason()), (400, "BadRequest"));
    }
}
