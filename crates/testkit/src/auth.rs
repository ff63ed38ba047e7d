//! Auth services on loopback: one that behaves as oauth2-proxy does for nginx's `auth_request` (`/oauth2/auth` answers 202 with the user for a signed-in session cookie, 401 without one and 403 for a banned user; `/oauth2/start` signs in and redirects back), and one that behaves as Authelia does for Traefik's `forwardAuth`.

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

/// The session cookie of the forwardAuth server.
pub const FORWARD_AUTH_COOKIE: &str = "authelia_session";

/// Starts a forwardAuth server on `ip` as Authelia answers Traefik: with a session cookie
/// (`authelia_session=USER`), 200 with `Remote-User`, `Remote-Groups`, `Remote-Email` and
/// `Remote-Name`, and a refreshed session cookie; without one, a browser (`Accept: text/html`)
/// gets 302 to the sign-in page with the URL it asked for (rebuilt from `X-Forwarded-Proto`,
/// `-Host` and `-Uri`), anything else 401 with a body and headers of its own. Every request is
/// recorded byte for byte.
pub async fn start_forward_auth_server(ip: std::net::IpAddr) -> std::io::Result<RawBackend> {
    let options = RawBackendOptions {
        answer: Some(forward_auth_answer),
        ..RawBackendOptions::default()
    };
    RawBackend::start_with(std::net::SocketAddr::new(ip, 0), options).await
}

fn forward_auth_answer(request: &RawRequest) -> String {
    let session = cookie(request, FORWARD_AUTH_COOKIE);
    if let Some(user) = session.filter(|user| !user.is_empty()) {
        return response(
            "200 OK",
            &[
                ("remote-user", user.clone()),
                ("remote-groups", "admins,dev".to_owned()),
                ("remote-email", format!("{user}@example.com")),
                ("remote-name", format!("User {user}")),
                (
                    "set-cookie",
                    format!("{FORWARD_AUTH_COOKIE}={user}; Path=/; HttpOnly"),
                ),
                ("set-cookie", "tracking=1; Path=/".to_owned()),
            ],
            "",
        );
    }
    let browser = request
        .header_values("accept")
        .iter()
        .any(|accept| accept.contains("text/html"));
    if browser {
        let header = |name| request.header(name).unwrap_or_default().to_owned();
        let wanted = format!(
            "{}://{}{}",
            header("x-forwarded-proto"),
            header("x-forwarded-host"),
            header("x-forwarded-uri")
        );
        return response(
            "302 Found",
            &[("location", format!("https://auth.example.com/?rd={wanted}"))],
            "<a href=\"https://auth.example.com/\">Found</a>.",
        );
    }
    response(
        "401 Unauthorized",
        &[
            ("content-type", "text/plain; charset=utf-8".to_owned()),
            ("x-auth-reason", "no session".to_owned()),
            ("set-cookie", "authelia_flow=1; Path=/".to_owned()),
        ],
        "401 Unauthorized by the test forwardAuth server",
    )
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie(request: &RawRequest, name: &str) -> Option<String> {
    request
        .header_values("cookie")
        .iter()
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// The answer oauth2-proxy would give `request`.
fn oauth2_proxy_answer(request: &RawRequest) -> String {
    let target = request.request_line().split(' ').nth(1).unwrap_or_default();
    let session = cookie(request, SESSION_COOKIE);
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
