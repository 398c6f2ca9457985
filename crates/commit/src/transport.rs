//! Whether a store is reached in clear text, and the one warning that says so.
//!
//! Every networked store can run over TLS (PostgreSQL's `sslmode`, MySQL's `ssl-mode`,
//! `rediss://`, `hbases://`); what crosses the network without it — sink rows, offsets,
//! passwords — can be read by anyone on the path. A store reached in clear on a host that is
//! not loopback logs one `tracing` warning per store and process, naming the store (its spec
//! through [`redact`](crate::redact)) and the setting that turns TLS on. Loopback
//! (`localhost`, 127.0.0.0/8, `::1`) and Unix sockets never leave the machine and stay quiet.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;

/// The host of `spec` (`scheme://[user[:password]@]host[:port][/path][?query]`), without
/// brackets for an IPv6 address; `None` when it has no `://` or no host (a Unix socket).
pub(crate) fn host_of(spec: &str) -> Option<&str> {
    let (_, rest) = spec.split_once("://")?;
    // As the drivers' URL parser reads it (WHATWG): the authority ends at the first '/', '?'
    // or '#', and the host follows its last '@'.
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    // A list of hosts (`h1:1,h2:2`): the first stands for all.
    let authority = authority.split(',').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    (!host.is_empty()).then_some(host)
}

/// `localhost` (and `*.localhost`, RFC 6761), 127.0.0.0/8 and `::1`.
pub(crate) fn is_loopback(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost"
        || h.ends_with(".localhost")
        || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The warning for `store` (`"postgres"`, `"redis"`, …) reached in clear text at `spec`, or
/// `None` when its host is loopback (or it has none). `how` says how to turn TLS on.
pub(crate) fn clear_text_warning(store: &str, spec: &str, how: &str) -> Option<String> {
    let host = host_of(spec)?;
    if is_loopback(host) {
        return None;
    }
    Some(format!(
        "the {store} store {} is reached without TLS: offsets, sink rows and credentials \
         cross the network in clear text; {how}",
        crate::redact(spec)
    ))
}

/// Logs [`clear_text_warning`] once per store spec and process (a store reconnects, commands
/// connect more than once; the warning stays one line). True when it logged.
pub(crate) fn warn_clear_text(store: &str, spec: &str, how: &str) -> bool {
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let Some(message) = clear_text_warning(store, spec, how) else {
        return false;
    };
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned
        .get_or_insert_with(HashSet::new)
        .insert(crate::redact(spec))
    {
        return false;
    }
    tracing::warn!("{message}");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_from_every_spec_shape() {
        for (spec, host) in [
            (
                "postgres://u:p@db.example.com:5432/x?sslmode=disable",
                Some("db.example.com"),
            ),
            (
                "postgres://u:p%40ss@10.1.2.3/x?password=a@b",
                Some("10.1.2.3"),
            ),
            ("mysql://u@[fe80::1]:3306/x", Some("fe80::1")),
            ("redis://127.0.0.1:6379/0", Some("127.0.0.1")),
            ("rediss://cache.internal/0", Some("cache.internal")),
            ("hbase://gw:8080/table", Some("gw")),
            ("postgres://h1:1,h2:2/db", Some("h1")),
            ("postgres:///db?host=/run/postgresql", None),
            ("sqlite:/tmp/x.db", None),
        ] {
            assert_eq!(host_of(spec), host, "{spec}");
        }
    }

    #[test]
    fn loopback_is_quiet_and_other_hosts_warn_without_the_password() {
        for host in [
            "localhost",
            "LOCALHOST.",
            "db.localhost",
            "127.0.0.1",
            "127.9.9.9",
            "::1",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "10.0.0.1",
            "db.example.com",
            "localhost.example.com",
            "::2",
            "0.0.0.0",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
        assert_eq!(
            clear_text_warning("redis", "redis://:pw@127.0.0.1:6379/0", "use rediss://"),
            None
        );
        assert_eq!(
            clear_text_warning("redis", "redis://[::1]/0", "use rediss://"),
            None
        );
        let w = clear_text_warning(
            "redis",
            "redis://:S3CRETPW@10.0.0.7:6379/0",
            "use rediss://",
        )
        .unwrap();
        assert!(!w.contains("S3CRETPW"), "{w}");
        assert!(
            w.contains("redis store redis://:***@10.0.0.7:6379/0"),
            "{w}"
        );
        assert!(w.ends_with("use rediss://"), "{w}");
    }

    #[test]
    fn warns_once_per_store() {
        let spec = "hbase://once.example.com:8080";
        assert!(warn_clear_text("hbase", spec, "use hbases://"));
        assert!(!warn_clear_text("hbase", spec, "use hbases://"));
        assert!(!warn_clear_text(
            "hbase",
            "hbase://127.0.0.1:8080",
            "use hbases://"
        ));
    }
}
