//! Fuzzes store specs (`kdirect_commit::StoreSpec::parse`) and their redaction
//! (`kdirect_commit::redact`, used in every message and `Debug` that shows a spec).
//!
//! First input byte even: the rest is an arbitrary spec. Parsing and redacting never panic,
//! and a parse error shows the spec as redacted.
//!
//! First input byte odd: a well-formed URL is built from the rest, split at 0 bytes into user,
//! password, host/path and an optional secret query value: `scheme://user:PASSWORD@host/path`
//! (without `:PASSWORD` when it is empty, without `user@` too when both are) and, with a
//! fourth part, `?ssl=on&NAME=SECRET` for a secret-carrying parameter name. The
//! password and secret are made of characters nothing else in the URL holds (private-use code
//! points) plus the separators that make redaction hard (`@ : / ? & = #` in the password;
//! `@ : / =` in the query value). None of those private characters may appear in `redact`'s
//! output, in the parsed spec's `Debug`, or in a parse error.
#![no_main]

use kdirect_commit::{redact, StoreSpec};
use libfuzzer_sys::fuzz_target;

const SCHEMES: &[&str] = &[
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
    "rediss",
    "sqlite",
    "unknown",
];
const SECRET_PARAMS: &[&str] = &[
    "password",
    "sslpassword",
    "token",
    "PWD",
    "apikey",
    "client_secret",
];

/// A character that only a secret may hold.
fn secret_char(b: u8) -> char {
    char::from_u32(0xE000 + u32::from(b)).unwrap_or('\u{E000}')
}

fn is_secret_char(c: char) -> bool {
    ('\u{E000}'..='\u{E0FF}').contains(&c)
}

fn secret(bytes: &[u8], keep: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if keep.contains(&b) {
                char::from(b)
            } else {
                secret_char(b)
            }
        })
        .collect()
}

fn plain(bytes: &[u8], drop: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|&c| !is_secret_char(c) && !u8::try_from(c).is_ok_and(|b| drop.contains(&b)))
        .collect()
}

fn shown(spec: &str) -> Vec<String> {
    let mut out = vec![redact(spec)];
    match StoreSpec::parse(spec) {
        Ok(s) => out.push(format!("{s:?}")),
        Err(e) => out.push(format!("{e} / {e:?}")),
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let Ok(spec) = std::str::from_utf8(rest) else {
            return;
        };
        let once = redact(spec);
        let _ = shown(spec);
        if let Err(e) = StoreSpec::parse(spec) {
            assert!(
                e.to_string().contains(&once),
                "the parse error does not show the redacted spec"
            );
        }
        return;
    }
    let mut parts = rest.split(|&b| b == 0);
    let user = plain(parts.next().unwrap_or_default(), b":@/?#");
    let password = secret(parts.next().unwrap_or_default(), b"@:/?&=#");
    let host = plain(parts.next().unwrap_or_default(), b"@?#");
    let scheme = SCHEMES[usize::from(mode >> 1) % SCHEMES.len()];
    // No password: `user@host`, or just `host` (then only the query holds a secret).
    let auth = match (user.is_empty(), password.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("{user}@"),
        _ => format!("{user}:{password}@"),
    };
    let mut url = format!("{scheme}://{auth}{host}");
    if let Some(value) = parts.next() {
        let name = SECRET_PARAMS[usize::from(mode >> 4) % SECRET_PARAMS.len()];
        url.push_str(&format!("?ssl=on&{name}={}", secret(value, b"@:/=")));
    }
    for text in shown(&url) {
        assert!(
            !text.chars().any(is_secret_char),
            "a secret leaks from {url:?}: {text:?}"
        );
    }
});
