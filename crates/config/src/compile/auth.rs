//! The users of basic and digest auth, read from the Secret `auth-secret` names: an htpasswd or htdigest file under `auth`, or an `auth-map`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use sluice_routing::BasicAuth;

use super::tls::{secret_value, SecretRead};
use super::version::Version;
use crate::annotations::AuthSecret;
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::ObjectKey;

/// The users of `auth`'s Secret, and the Secret read (for the fragment's inputs). `None` when
/// the Secret cannot be used: the route then refuses every request, as ingress-nginx does.
pub(super) fn basic_auth(
    key: &ObjectKey,
    auth: &AuthSecret,
    secrets: &BTreeMap<ObjectKey, Secret>,
    diagnostics: &mut Diagnostics,
) -> (Option<BasicAuth>, SecretRead) {
    let object = ObjectRef::ingress(key);
    let secret_key = ObjectKey::new(&auth.namespace, &auth.name);
    let secret = secrets.get(&secret_key);
    let read = (secret_key, secret.map(Version::of));
    let refuse = |diagnostics: &mut Diagnostics, problem: &str| {
        let message = format!(
            "Secret {}/{}: {problem}; every request to the Ingress is refused (503) until it is fixed",
            auth.namespace, auth.name
        );
        diagnostics.error(&object, auth.field.clone(), message);
    };
    let Some(secret) = secret else {
        refuse(diagnostics, "the Secret does not exist");
        return (None, read);
    };
    let entries: Vec<(String, String)> = if auth.map {
        secret_keys(secret)
            .into_iter()
            .filter_map(|user| {
                let hash = secret_value(secret, &user)?;
                Some((user, String::from_utf8_lossy(hash).trim().to_owned()))
            })
            .collect()
    } else {
        let Some(file) = secret_value(secret, "auth") else {
            refuse(diagnostics, "it has no key \"auth\" (an htpasswd file)");
            return (None, read);
        };
        String::from_utf8_lossy(file)
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter_map(|line| line.split_once(':'))
            .map(|(user, hash)| (user.to_owned(), hash.to_owned()))
            .collect()
    };
    let mut users = Vec::new();
    for (user, hash) in entries {
        match usable_hash(&hash, auth) {
            Some(hash) => users.push((user, hash)),
            None => {
                let what = if auth.digest {
                    format!(
                        "an htdigest line for realm {:?} (user:realm:md5)",
                        auth.realm
                    )
                } else {
                    "a bcrypt ($2y$), SHA1 ({SHA}) or APR1 ($apr1$) hash".to_owned()
                };
                let message = format!(
                    "Secret {}/{}: user {user:?} has no {what}; that user cannot sign in",
                    auth.namespace, auth.name
                );
                diagnostics.warning(&object, auth.field.clone(), message);
            }
        }
    }
    if users.is_empty() {
        refuse(diagnostics, "it holds no usable user");
        return (None, read);
    }
    let basic = BasicAuth {
        realm: auth.realm.clone(),
        digest: auth.digest,
        users,
    };
    (Some(basic), read)
}

/// The keys of a Secret, from `data` and `stringData`.
fn secret_keys(secret: &Secret) -> Vec<String> {
    let data = secret.data.iter().flat_map(|data| data.keys());
    let string_data = secret.string_data.iter().flat_map(|data| data.keys());
    let mut keys: Vec<String> = data.chain(string_data).cloned().collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The hash to check passwords against, when it is one sluice can check: for digest, the
/// `HA1` of an htdigest line of the realm; for basic, bcrypt, `{SHA}` or `$apr1$`.
fn usable_hash(hash: &str, auth: &AuthSecret) -> Option<String> {
    if auth.digest {
        let (realm, ha1) = hash.rsplit_once(':')?;
        let hex = ha1.len() == 32 && ha1.bytes().all(|b| b.is_ascii_hexdigit());
        return (realm == auth.realm && hex).then(|| ha1.to_ascii_lowercase());
    }
    let known = ["$2y$", "$2a$", "$2b$", "{SHA}", "$apr1$"]
        .iter()
        .any(|prefix| hash.starts_with(prefix));
    known.then(|| hash.to_owned())
}
