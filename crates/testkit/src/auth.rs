//! An auth service that behaves as oauth2-proxy does for nginx's `auth_request`: `/oauth2/auth` answers 202 with the user for a signed-in session cookie, 401 without one and 403 for a banned user; `/oauth2/start` signs in and redirects back.

use crate::raw::{RawBackend, RawBackendOptions, RawRequest};

/// The session cookie oauth2-proxy sets.
pub const SESSION_COOKIE: &str = "_oauth2_proxy";

/// Starts the auth service on `ip`, recording every request byte for byte.
pub async fn start_auth_service(ip: std::net::IpAddr) -> std::io::Result<RawBackend> {
    let options = RawBackendOptions {
        answer: Some(oauth2_proxy_answer),
        ..RawBackendOptions::default()
    };
    RawBackend::start_with(std::net::SocketAddr::new(ip, 0), options).await
}

/// The answer oauth2-proxy would give `request`.
fn oauth2_proxy_answer(request: &RawRequest) -> String {
    let target = request.request_line().split(' ').nth(1).unwrap_or_default();
    let session = request
        .header_values("cookie")
        .iter()
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned());
    if target.starts_with("/oauth2/auth") {
        return match session.as_deref() {
            Some("banned") => response("403 Forbidden", &[], "forbidden"),
            Some(user) if !user.is_empty() => response(
                "202 Accepted",
                &[
                    ("x-auth-request-user", user.to_owned()),
                    ("x-auth-request-email", format!("{user}@example.test")),
                    (
                        "set-cookie",
                        format!("{SESSION_COOKIE}={user}; Path=/; HttpOnly"),
                    ),
                ],
                "",
            ),
            _ => response(
                "401 Unauthorized",
                &[
                    ("www-authenticate", "Bearer realm=\"oauth2\"".to_owned()),
                    ("set-cookie", "_oauth2_proxy_csrf=token; Path=/".to_owned()),
                ],
                "unauthorized",
            ),
        };
    }
    if let Some(query) = target.strip_prefix("/oauth2/start?") {
        let back = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(name, _)| *name == "rd")
            .map(|(_, value)| percent_decode(value))
            .unwrap_or_else(|| "/".to_owned());
        return response(
            "302 Found",
            &[
                ("location", back),
                (
                    "set-cookie",
                    format!("{SESSION_COOKIE}=ana; Path=/; HttpOnly"),
                ),
            ],
            "",
        );
    }
    response("404 Not Found", &[], "not found")
}

fn response(status: &str, headers: &[(&str, String)], body: &str) -> String {
    let mut text = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    text
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| text.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                index += 3;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
