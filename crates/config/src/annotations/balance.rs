//! `load-balance` and `upstream-hash-by`: how an Ingress's routes choose the next endpoint.

use http::HeaderName;
use sluice_routing::{Balancer, HashKey};

use super::keys::{PolicyKeys, Setting};
use super::values::Report;

/// The balancer the annotations ask for: a valid `upstream-hash-by` wins over `load-balance`,
/// as in ingress-nginx.
pub(crate) fn balancer(keys: &PolicyKeys<'_>, report: &mut Report<'_>) -> Balancer {
    let load_balance = keys.get(Setting::LoadBalance);
    let chosen = report.parse(
        load_balance,
        "round_robin, least_request (or its ingress-nginx name least_conn) or ewma",
        "round_robin is used",
        parse_load_balance,
    );
    let Some(hash_by) = keys.get(Setting::UpstreamHashBy) else {
        return chosen.unwrap_or_default();
    };
    let Some(key) = parse_hash_key(hash_by.value.trim()) else {
        let message = format!(
            "unsupported value {:?}: expected one nginx variable, $remote_addr, $binary_remote_addr, $http_<name>, $cookie_<name>, $request_uri, $uri or $host (no combinations); ignored",
            hash_by.value
        );
        report.warning(hash_by, message);
        return chosen.unwrap_or_default();
    };
    if let Some(load_balance) = load_balance {
        report.info(
            load_balance,
            format!(
                "ignored: {} is also set and hashing takes precedence, as in ingress-nginx",
                hash_by.key
            ),
        );
    }
    Balancer::Hash(key)
}

fn parse_load_balance(value: &str) -> Option<Balancer> {
    [
        ("round_robin", Balancer::RoundRobin),
        ("least_request", Balancer::LeastRequest),
        ("least_conn", Balancer::LeastRequest),
        ("ewma", Balancer::Ewma),
    ]
    .into_iter()
    .find(|(name, _)| value.eq_ignore_ascii_case(name))
    .map(|(_, balancer)| balancer)
}

/// One nginx variable as a hash key; combinations such as `$host$uri` are not supported.
fn parse_hash_key(value: &str) -> Option<HashKey> {
    let variable = value.strip_prefix('$')?;
    match variable {
        "remote_addr" | "binary_remote_addr" => Some(HashKey::ClientAddress),
        "request_uri" => Some(HashKey::RequestUri),
        "uri" => Some(HashKey::Path),
        "host" => Some(HashKey::Host),
        _ => {
            if let Some(name) = variable.strip_prefix("http_") {
                header_key(name)
            } else {
                cookie_key(variable.strip_prefix("cookie_")?)
            }
        }
    }
}

/// The characters of an nginx variable name.
fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `$http_x_user` hashes the `x-user` header.
fn header_key(name: &str) -> Option<HashKey> {
    if !is_variable_name(name) {
        return None;
    }
    let header = name.replace('_', "-").to_ascii_lowercase();
    HeaderName::from_bytes(header.as_bytes())
        .ok()
        .map(HashKey::Header)
}

fn cookie_key(name: &str) -> Option<HashKey> {
    is_variable_name(name).then(|| HashKey::Cookie(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_variables_become_hash_keys() {
        assert_eq!(
            parse_hash_key("$binary_remote_addr"),
            Some(HashKey::ClientAddress)
        );
        assert_eq!(
            parse_hash_key("$http_X_User_Id"),
            Some(HashKey::Header(HeaderName::from_static("x-user-id")))
        );
        assert_eq!(
            parse_hash_key("$cookie_session"),
            Some(HashKey::Cookie("session".to_owned()))
        );
        assert_eq!(parse_hash_key("$uri"), Some(HashKey::Path));
    }

    #[test]
    fn combinations_and_other_variables_are_not_hash_keys() {
        for value in [
            "$host$uri",
            "$http_x$uri",
            "$http_",
            "$cookie_",
            "$args",
            "remote_addr",
            "",
        ] {
            assert_eq!(parse_hash_key(value), None, "{value}");
        }
    }

    #[test]
    fn least_conn_is_least_request() {
        assert_eq!(
            parse_load_balance("least_conn"),
            Some(Balancer::LeastRequest)
        );
        assert_eq!(parse_load_balance("EWMA"), Some(Balancer::Ewma));
        assert_eq!(parse_load_balance("random"), None);
    }
}
