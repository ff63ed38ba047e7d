//! Password checks for htpasswd hashes (bcrypt, `{SHA}`, APR1-MD5), compared in constant time.

use base64::Engine;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

/// Whether `password` matches `hash` as htpasswd wrote it. An unknown format never matches.
pub(crate) fn verify(password: &[u8], hash: &str) -> bool {
    if hash.starts_with("$2") {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    if let Some(expected) = hash.strip_prefix("{SHA}") {
        let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
        let encoded = base64::engine::general_purpose::STANDARD.encode(digest.as_ref());
        return equal(encoded.as_bytes(), expected.as_bytes());
    }
    for magic in ["$apr1$", "$1$"] {
        if let Some(rest) = hash.strip_prefix(magic) {
            let salt = rest.split('$').next().unwrap_or_default();
            let computed = md5_crypt(password, salt.as_bytes(), magic);
            return equal(computed.as_bytes(), hash.as_bytes());
        }
    }
    false
}

/// Constant-time equality (the lengths are not secret).
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// The lowercase hex MD5 of `parts` joined by `:` (digest auth's `H()`).
pub(crate) fn md5_hex(parts: &[&[u8]]) -> String {
    let mut md5 = Md5::new();
    for (index, part) in parts.iter().enumerate() {
        if index > 0 {
            md5.update(b":");
        }
        md5.update(part);
    }
    md5.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

const APR1_ALPHABET: &[u8; 64] =
    b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's APR1-MD5 crypt (`$apr1$salt$hash`), the MD5-crypt algorithm with its own magic.
#[cfg(test)]
fn apr1(password: &[u8], salt: &[u8]) -> String {
    md5_crypt(password, salt, "$apr1$")
}

/// MD5-crypt with `magic`: `$1$` (glibc's) or `$apr1$` (Apache's), which differ only in it.
fn md5_crypt(password: &[u8], salt: &[u8], magic: &str) -> String {
    let magic_bytes = magic.as_bytes();
    let salt = &salt[..salt.len().min(8)];
    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    let mut context = Md5::new()
        .chain_update(password)
        .chain_update(magic_bytes)
        .chain_update(salt);
    let mut left = password.len();
    while left > 0 {
        let take = left.min(16);
        context.update(&alternate[..take]);
        left -= take;
    }
    let mut bits = password.len();
    while bits > 0 {
        if bits & 1 == 1 {
            context.update([0u8]);
        } else {
            context.update(&password[..password.len().min(1)]);
        }
        bits >>= 1;
    }
    let mut digest = context.finalize();
    for round in 0..1000 {
        let mut step = Md5::new();
        if round & 1 == 1 {
            step.update(password);
        } else {
            step.update(digest);
        }
        if round % 3 != 0 {
            step.update(salt);
        }
        if round % 7 != 0 {
            step.update(password);
        }
        if round & 1 == 1 {
            step.update(digest);
        } else {
            step.update(password);
        }
        digest = step.finalize();
    }
    let d = digest;
    let mut out = String::with_capacity(37);
    out.push_str(magic);
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let groups = [
        (d[0], d[6], d[12]),
        (d[1], d[7], d[13]),
        (d[2], d[8], d[14]),
        (d[3], d[9], d[15]),
        (d[4], d[10], d[5]),
    ];
    for (a, b, c) in groups {
        push_base64(
            &mut out,
            (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c),
            4,
        );
    }
    push_base64(&mut out, u32::from(d[11]), 2);
    out
}

fn push_base64(out: &mut String, mut value: u32, count: usize) {
    for _ in 0..count {
        out.push(char::from(APR1_ALPHABET[(value & 0x3f) as usize]));
        value >>= 6;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apr1_matches_htpasswd() {
        // What `openssl passwd -apr1 -salt Zx7k2p9Q secret` prints.
        let hash = apr1(b"secret", b"Zx7k2p9Q");
        assert_eq!(hash, "$apr1$Zx7k2p9Q$XUAtLBcy5/9fi7YE4vXDH0");
        assert!(verify(b"secret", &hash));
        assert!(!verify(b"Secret", &hash));
    }

    #[test]
    fn md5_crypt_matches_openssl_passwd_1() {
        // What `openssl passwd -1 -salt Zx7k2p9Q secret` prints (Traefik accepts `$1$` too).
        assert!(verify(b"secret", "$1$Zx7k2p9Q$Rmm2rZmwqvyT02Zrxt7Sc1"));
        assert!(!verify(b"secreT", "$1$Zx7k2p9Q$Rmm2rZmwqvyT02Zrxt7Sc1"));
    }

    #[test]
    fn sha_and_bcrypt_and_unknown_formats() {
        // {SHA} of "password" as htpasswd -s writes it.
        assert!(verify(b"password", "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="));
        assert!(!verify(b"passwor", "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="));
        let bcrypt = bcrypt::hash_with_salt(b"pw", 4, [7u8; 16])
            .unwrap()
            .format_for_version(bcrypt::Version::TwoY);
        assert!(verify(b"pw", &bcrypt));
        assert!(!verify(b"px", &bcrypt));
        assert!(!verify(b"pw", "plaintext"));
    }

    #[test]
    fn md5_hex_joins_with_colons() {
        assert_eq!(md5_hex(&[b"a", b"b"]), md5_hex(&[b"a:b"]));
        assert_eq!(md5_hex(&[b""]), "d41d8cd98f00b204e9800998ecf8427e");
    }
}
