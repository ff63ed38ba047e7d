//! JSON object helpers: metadata access, timestamps, uids, and the three PATCH formats.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::error::TestApiError;

/// `metadata.<field>` as a string, if set.
pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// `metadata` of an object (a JSON map), created empty when missing or not a map.
pub(crate) fn metadata_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

/// The object's labels as (key, value) pairs.
pub(crate) fn labels(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata")?.get("labels")?.as_object()
}

/// The current time as an RFC 3339 timestamp with second precision, like `creationTimestamp`.
pub(crate) fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `time` as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp written by [`rfc3339`].
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let days = days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Howard Hinnant's civil-to-days algorithm.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Generates UUID-shaped, unique-per-process ids.
#[derive(Debug)]
pub(crate) struct UidGenerator {
    seed: u64,
    counter: u64,
}

impl UidGenerator {
    pub(crate) fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self {
            seed: splitmix(nanos ^ u64::from(std::process::id()).rotate_left(32)),
            counter: 0,
        }
    }

    /// The next uid, e.g. `3f2c9a1e-7b4d-4c1a-9e0f-1a2b3c4d5e6f`.
    pub(crate) fn next_uid(&mut self) -> String {
        self.counter += 1;
        let a = splitmix(self.seed ^ self.counter);
        let b = splitmix(a ^ self.counter.rotate_left(17));
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    /// A 5-character suffix for `generateName`.
    pub(crate) fn name_suffix(&mut self) -> String {
        self.counter += 1;
        let mut x = splitmix(self.seed ^ self.counter.rotate_left(7));
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| {
                let c = ALPHABET[(x % ALPHABET.len() as u64) as usize];
                x /= ALPHABET.len() as u64;
                c as char
            })
            .collect()
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Applies an RFC 7386 JSON merge patch to `target`.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Applies a strategic merge patch as kubectl writes them.
///
/// This is JSON merge patch plus the directives kubectl's patches carry: `$patch: replace` and
/// `$patch: delete` in maps, `$retainKeys`, and lists that carry a `$setElementOrder/<field>`
/// directive, which are merged element by element on the merge key the directive names (with
/// `$patch: delete` elements removed). Lists without that directive are replaced, as they would
/// be for fields with no patch strategy. `$deleteFromPrimitiveList/<field>` removes values.
pub(crate) fn strategic_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replacement = Value::Object(patch.clone());
            strip_directives(&mut replacement);
            *target = replacement;
            return;
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    if let Some(Value::Array(retain)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        target.retain(|key, _| keep.contains(&key.as_str()));
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(remove)) = (target.get_mut(field), value)
            {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            target.remove(key);
            continue;
        }
        let order = patch.get(&format!("$setElementOrder/{key}"));
        match (value, order) {
            (Value::Array(items), Some(Value::Array(order))) => {
                let current = target.remove(key).unwrap_or(Value::Null);
                target.insert(key.clone(), merge_list(current, items, order));
            }
            (Value::Object(_), _) => {
                let slot = target.entry(key.clone()).or_insert(Value::Null);
                strategic_merge_patch(slot, value);
                if slot.is_null() {
                    target.remove(key);
                }
            }
            _ => {
                let mut value = value.clone();
                strip_directives(&mut value);
                target.insert(key.clone(), value);
            }
        }
    }
}

/// Merges a list by the key named in its `$setElementOrder` directive.
fn merge_list(current: Value, patch_items: &[Value], order: &[Value]) -> Value {
    let merge_key = order
        .iter()
        .find_map(|item| item.as_object()?.keys().next().cloned());
    let Some(merge_key) = merge_key else {
        // A list of primitives: the order directive is the full list.
        return Value::Array(order.to_vec());
    };
    let mut elements: Vec<Value> = match current {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    for item in patch_items {
        let key = item.get(&merge_key);
        let position = elements
            .iter()
            .position(|e| key.is_some() && e.get(&merge_key) == key);
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(at), true) => {
                elements.remove(at);
            }
            (None, true) => {}
            (Some(at), false) => strategic_merge_patch(&mut elements[at], item),
            (None, false) => {
                let mut item = item.clone();
                strip_directives(&mut item);
                elements.push(item);
            }
        }
    }
    let rank = |element: &Value| {
        order
            .iter()
            .position(|o| o.get(&merge_key) == element.get(&merge_key))
            .unwrap_or(usize::MAX)
    };
    elements.sort_by_key(rank);
    Value::Array(elements)
}

/// Removes `$`-prefixed directive keys from a value taken over whole.
fn strip_directives(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, _| !key.starts_with('$'));
            map.values_mut().for_each(strip_directives);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Applies an RFC 6902 JSON patch to `target`.
pub(crate) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), TestApiError> {
    let Value::Array(operations) = patch else {
        return Err(TestApiError::bad_request(
            "a JSON patch must be an array of operations",
        ));
    };
    for operation in operations {
        let op = operation.get("op").and_then(Value::as_str).unwrap_or("");
        let path = operation
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| TestApiError::bad_request("JSON patch operation without a path"))?;
        let value = operation.get("value");
        let need_value = || {
            value
                .cloned()
                .ok_or_else(|| TestApiError::bad_request(format!("{op} {path}: no value")))
        };
        match op {
            "add" => pointer_insert(target, path, need_value()?)?,
            "replace" => {
                pointer_remove(target, path)?;
                pointer_insert(target, path, need_value()?)?;
            }
            "remove" => {
                pointer_remove(target, path)?;
            }
            "test" => {
                if target.pointer(path) != value {
                    return Err(TestApiError::api(
                        422,
                        "Invalid",
                        format!("JSON patch test failed at {path}"),
                    ));
                }
            }
            "move" | "copy" => {
                let from = operation
                    .get("from")
                    .and_then(Value::as_str)
                    .ok_or_else(|| TestApiError::bad_request(format!("{op} without from")))?;
                let moved = if op == "move" {
                    pointer_remove(target, from)?
                } else {
                    target.pointer(from).cloned().ok_or_else(|| {
                        TestApiError::bad_request(format!("copy from missing {from}"))
                    })?
                };
                pointer_insert(target, path, moved)?;
            }
            other => {
                return Err(TestApiError::bad_request(format!(
                    "unknown JSON patch operation {other:?}"
                )))
            }
        }
    }
    Ok(())
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(String, String), TestApiError> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| TestApiError::bad_request(format!("bad JSON pointer {path:?}")))?;
    Ok((parent.to_owned(), unescape(last)))
}

fn pointer_insert(target: &mut Value, path: &str, value: Value) -> Result<(), TestApiError> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    let missing = || TestApiError::api(422, "Invalid", format!("JSON patch path {path} not found"));
    match target.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(map) => {
            map.insert(last, value);
        }
        Value::Array(items) => {
            if last == "-" {
                items.push(value);
            } else {
                let at: usize = last.parse().map_err(|_| missing())?;
                if at > items.len() {
                    return Err(missing());
                }
                items.insert(at, value);
            }
        }
        _ => return Err(missing()),
    }
    Ok(())
}

fn pointer_remove(target: &mut Value, path: &str) -> Result<Value, TestApiError> {
    let (parent, last) = split_pointer(path)?;
    let missing = || TestApiError::api(422, "Invalid", format!("JSON patch path {path} not found"));
    match target.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(map) => map.remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let at: usize = last.parse().map_err(|_| missing())?;
            if at >= items.len() {
                return Err(missing());
            }
            Ok(items.remove(at))
        }
        _ => Err(missing()),
    }
}

/// The path of one leaf field, e.g. `["spec", "holderIdentity"]`.
pub(crate) type FieldPath = Vec<String>;

/// Every leaf field of an object that server-side apply tracks ownership of, with its value.
///
/// Leaves are scalars, lists (lists are atomic here) and empty maps. Identity and bookkeeping
/// fields (`apiVersion`, `kind`, name, namespace, uid, resourceVersion, generation,
/// creationTimestamp, managedFields) are not tracked.
pub(crate) fn leaf_fields(object: &Value) -> Vec<(FieldPath, &Value)> {
    let mut out = Vec::new();
    if let Value::Object(map) = object {
        for (key, value) in map {
            if key == "apiVersion" || key == "kind" {
                continue;
            }
            let mut path = vec![key.clone()];
            if key == "metadata" {
                if let Value::Object(meta) = value {
                    for (mkey, mvalue) in meta {
                        if matches!(
                            mkey.as_str(),
                            "labels" | "annotations" | "finalizers" | "ownerReferences"
                        ) {
                            path.push(mkey.clone());
                            collect_leaves(mvalue, &mut path, &mut out);
                            path.pop();
                        }
                    }
                }
                continue;
            }
            collect_leaves(value, &mut path, &mut out);
        }
    }
    out
}

fn collect_leaves<'a>(
    value: &'a Value,
    path: &mut FieldPath,
    out: &mut Vec<(FieldPath, &'a Value)>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                path.push(key.clone());
                collect_leaves(child, path, out);
                path.pop();
            }
        }
        _ => out.push((path.clone(), value)),
    }
}

/// The value at a field path, if present.
pub(crate) fn field_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(object, |value, key| value.get(key))
}

/// Removes the field at `path`, if present.
pub(crate) fn remove_field(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut value = object;
    for key in parents {
        match value.get_mut(key) {
            Some(child) => value = child,
            None => return,
        }
    }
    if let Value::Object(map) = value {
        map.remove(last);
    }
}

/// `.spec.holderIdentity` for messages.
pub(crate) fn display_path(path: &[String]) -> String {
    path.iter().map(|p| format!(".{p}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_764_417_600);
        let text = rfc3339(t);
        assert_eq!(text, "2025-11-29T12:00:00Z");
        assert_eq!(parse_rfc3339(&text), Some(1_764_417_600));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn uids_are_unique_and_uuid_shaped() {
        let mut ids = UidGenerator::new();
        let a = ids.next_uid();
        let b = ids.next_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
    }

    #[test]
    fn merge_patch_sets_and_removes() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1, 2]});
        merge_patch(&mut target, &json!({"a": {"b": null, "e": 3}, "d": [3]}));
        assert_eq!(target, json!({"a": {"c": 2, "e": 3}, "d": [3]}));
    }

    #[test]
    fn strategic_patch_merges_lists_with_element_order_by_key() {
        let mut target = json!({"spec": {"ports": [
            {"port": 80, "name": "http"}, {"port": 443, "name": "https"}, {"port": 8080, "name": "alt"}
        ]}});
        let patch = json!({"spec": {
            "$setElementOrder/ports": [{"port": 443}, {"port": 80}, {"port": 9090}],
            "ports": [
                {"port": 80, "name": "web"},
                {"port": 8080, "$patch": "delete"},
                {"port": 9090, "name": "new"}
            ]
        }});
        strategic_merge_patch(&mut target, &patch);
        assert_eq!(
            target,
            json!({"spec": {"ports": [
                {"port": 443, "name": "https"}, {"port": 80, "name": "web"}, {"port": 9090, "name": "new"}
            ]}})
        );
    }

    #[test]
    fn strategic_patch_replaces_plain_lists_and_drops_directives() {
        let mut target = json!({"spec": {"rules": [{"host": "a"}], "x": 1}});
        strategic_merge_patch(
            &mut target,
            &json!({"spec": {"rules": [{"host": "b"}], "x": null}, "metadata": {"labels": {"l": "v"}}}),
        );
        assert_eq!(
            target,
            json!({"spec": {"rules": [{"host": "b"}]}, "metadata": {"labels": {"l": "v"}}})
        );
    }

    #[test]
    fn json_patch_operations() {
        let mut target = json!({"a": [1, 2], "b": {"c": 1}});
        json_patch(
            &mut target,
            &json!([
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "replace", "path": "/b/c", "value": 2},
                {"op": "remove", "path": "/a/0"},
                {"op": "test", "path": "/b/c", "value": 2},
                {"op": "copy", "from": "/b", "path": "/d"}
            ]),
        )
        .unwrap();
        assert_eq!(target, json!({"a": [2, 3], "b": {"c": 2}, "d": {"c": 2}}));
        let failed = json_patch(
            &mut target,
            &json!([{"op": "test", "path": "/b/c", "value": 9}]),
        );
        assert_eq!(failed.unwrap_err().code(), 422);
    }

    #[test]
    fn leaf_fields_skip_identity_metadata() {
        let object = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "a", "uid": "u", "labels": {"x": "y"}},
            "spec": {"ports": [{"port": 80}], "selector": {}}
        });
        let leaves: Vec<String> = leaf_fields(&object)
            .iter()
            .map(|(p, _)| display_path(p))
            .collect();
        assert_eq!(
            leaves,
            vec![".metadata.labels.x", ".spec.ports", ".spec.selector"]
        );
    }
}
