//! The `Date` header an HTTP/1.1 answer gets when it has none, formatted once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT`: always this long.
const DATE_LENGTH: usize = 29;

struct Cached {
    second: u64,
    text: [u8; DATE_LENGTH],
}

thread_local! {
    static CACHED: RefCell<Cached> = const {
        RefCell::new(Cached { second: u64::MAX, text: [b' '; DATE_LENGTH] })
    };
}

/// Appends `date: <now>\r\n` to `out`.
pub(super) fn write_date_line(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.second != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == DATE_LENGTH {
                cached.text.copy_from_slice(text.as_bytes());
                cached.second = second;
            }
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&cached.text);
        out.extend_from_slice(b"\r\n");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_line_is_an_http_date_of_now() {
        let mut out = Vec::new();
        write_date_line(&mut out);
        let line = String::from_utf8(out).unwrap_or_default();
        let value = line
            .strip_prefix("date: ")
            .and_then(|rest| rest.strip_suffix("\r\n"))
            .unwrap_or_default();
        let parsed = httpdate::parse_http_date(value).unwrap_or(UNIX_EPOCH);
        let age = SystemTime::now()
            .duration_since(parsed)
            .unwrap_or_default()
            .as_secs();
        assert!(age <= 2, "{line:?}");
    }
}
