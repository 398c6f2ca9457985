//! SaslHandshake v0–v1 and SaslAuthenticate v0–v2 (KIP-43, KIP-152, KIP-368) for the PLAIN
//! mechanism (RFC 4616) with the users the test configured.
//!
//! As a Kafka SASL listener: before authentication only ApiVersions, SaslHandshake and
//! SaslAuthenticate are served, and any other request closes the connection; a mechanism that
//! is not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed; a
//! wrong password SASL_AUTHENTICATION_FAILED with Kafka's message, then closed. With a session
//! lifetime, SaslAuthenticate v1+ announces it and a request that arrives after the session
//! ended closes the connection (a new SaslHandshake re-authenticates in place). On a listener
//! without SASL, both APIs are answered ILLEGAL_SASL_STATE, as Kafka does.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use crate::codes;

/// The one mechanism the fake broker implements.
pub(crate) const PLAIN: &str = "PLAIN";

/// A listener's SASL PLAIN users and session lifetime.
#[derive(Debug, Clone, Default)]
pub(crate) struct SaslConfig {
    pub users: BTreeMap<String, String>,
    pub session_lifetime: Option<Duration>,
}

/// Where one connection is in its SASL exchange.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// SaslHandshake named PLAIN; SaslAuthenticate comes next.
    mechanism_chosen: bool,
    /// When the last authentication succeeded.
    authenticated_at: Option<Instant>,
    /// The authenticated user.
    pub user: Option<String>,
}

/// What a request may do on this connection, before it is handled.
pub(crate) enum Gate {
    Serve,
    /// Not authenticated yet: Kafka closes the connection.
    Unauthenticated,
    /// The session's lifetime has passed (KIP-368): Kafka closes the connection.
    Expired,
}

impl Session {
    /// Whether a request other than ApiVersions/SaslHandshake/SaslAuthenticate may be served.
    pub fn gate(&self, config: &SaslConfig, now: Instant) -> Gate {
        match self.authenticated_at {
            None => Gate::Unauthenticated,
            Some(at) => match config.session_lifetime {
                Some(life) if now.saturating_duration_since(at) > life => Gate::Expired,
                _ => Gate::Serve,
            },
        }
    }
}

/// The answer, and whether the connection closes after it.
pub(crate) struct Answer<R> {
    pub response: R,
    pub close: bool,
}

pub(crate) fn handshake(
    config: Option<&SaslConfig>,
    session: &mut Session,
    req: &SaslHandshakeRequest,
) -> Answer<SaslHandshakeResponse> {
    let enabled = vec![StrBytes::from_static_str(PLAIN)];
    if config.is_none() {
        return Answer {
            response: SaslHandshakeResponse::default()
                .with_error_code(codes::ILLEGAL_SASL_STATE)
                .with_mechanisms(Vec::new()),
            close: true,
        };
    }
    if req.mechanism.as_str() != PLAIN {
        return Answer {
            response: SaslHandshakeResponse::default()
                .with_error_code(codes::UNSUPPORTED_SASL_MECHANISM)
                .with_mechanisms(enabled),
            close: true,
        };
    }
    session.mechanism_chosen = true;
    Answer {
        response: SaslHandshakeResponse::default()
            .with_error_code(codes::NONE)
            .with_mechanisms(enabled),
        close: false,
    }
}

fn refused(code: i16, message: &str) -> Answer<SaslAuthenticateResponse> {
    Answer {
        response: SaslAuthenticateResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message.to_owned()))),
        close: true,
    }
}

pub(crate) fn authenticate(
    config: Option<&SaslConfig>,
    session: &mut Session,
    req: &SaslAuthenticateRequest,
    version: i16,
    now: Instant,
) -> Answer<SaslAuthenticateResponse> {
    let Some(config) = config else {
        return refused(
            codes::ILLEGAL_SASL_STATE,
            "SASL is not enabled on this listener",
        );
    };
    if !std::mem::take(&mut session.mechanism_chosen) {
        return refused(
            codes::ILLEGAL_SASL_STATE,
            "Unexpected SaslAuthenticate request before SaslHandshake",
        );
    }
    // authzid NUL authcid NUL passwd (RFC 4616).
    let token = &req.auth_bytes;
    let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
    let [authzid, user, password] = parts.as_slice() else {
        return refused(
            codes::SASL_AUTHENTICATION_FAILED,
            &format!(
                "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
                parts.len()
            ),
        );
    };
    let (Ok(authzid), Ok(user), Ok(password)) = (
        std::str::from_utf8(authzid),
        std::str::from_utf8(user),
        std::str::from_utf8(password),
    ) else {
        return refused(
            codes::SASL_AUTHENTICATION_FAILED,
            "Invalid SASL/PLAIN response: not UTF-8",
        );
    };
    if user.is_empty() {
        return refused(
            codes::SASL_AUTHENTICATION_FAILED,
            "Authentication failed: username not specified",
        );
    }
    if !authzid.is_empty() && authzid != user {
        return refused(
            codes::SASL_AUTHENTICATION_FAILED,
            "Authentication failed: Client requested an authorization id that is different \
             from username",
        );
    }
    if config.users.get(user).map(String::as_str) != Some(password) {
        return refused(
            codes::SASL_AUTHENTICATION_FAILED,
            "Authentication failed: Invalid username or password",
        );
    }
    session.authenticated_at = Some(now);
    session.user = Some(user.to_owned());
    let lifetime_ms = match (version, config.session_lifetime) {
        (1.., Some(life)) => i64::try_from(life.as_millis()).unwrap_or(i64::MAX),
        _ => 0,
    };
    Answer {
        response: SaslAuthenticateResponse::default()
            .with_error_code(codes::NONE)
            .with_auth_bytes(Bytes::new())
            .with_session_lifetime_ms(lifetime_ms),
        close: false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    fn config() -> SaslConfig {
        SaslConfig {
            users: [("alice".to_owned(), "alice-secret".to_owned())].into(),
            session_lifetime: Some(Duration::from_secs(10)),
        }
    }

    fn plain(token: &'static [u8]) -> SaslAuthenticateRequest {
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(token))
    }

    fn chosen(c: &SaslConfig) -> Session {
        let mut s = Session::default();
        let a = handshake(
            Some(c),
            &mut s,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        assert_eq!(a.response.error_code, codes::NONE);
        assert!(!a.close);
        s
    }

    #[test]
    fn plain_authenticates_configured_users_only() {
        let c = config();
        let now = Instant::now();
        let mut s = chosen(&c);
        assert!(matches!(s.gate(&c, now), Gate::Unauthenticated));
        let a = authenticate(Some(&c), &mut s, &plain(b"\0alice\0alice-secret"), 1, now);
        assert_eq!(a.response.error_code, codes::NONE);
        assert_eq!(a.response.session_lifetime_ms, 10_000);
        assert!(matches!(s.gate(&c, now), Gate::Serve));
        assert!(matches!(
            s.gate(&c, now + Duration::from_secs(11)),
            Gate::Expired
        ));

        for token in [
            &b"\0alice\0wrong"[..],
            b"\0mallory\0alice-secret",
            b"bob\0alice\0alice-secret",
            b"alice-secret",
            b"\0\0alice-secret",
        ] {
            let mut s = chosen(&c);
            let a = authenticate(
                Some(&c),
                &mut s,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
                1,
                now,
            );
            assert_eq!(a.response.error_code, codes::SASL_AUTHENTICATION_FAILED);
            assert!(a.close);
            let message = a.response.error_message.unwrap();
            assert!(message.contains("Authentication failed") || message.contains("Invalid"));
            assert!(!message.contains("alice-secret"), "{message}");
            assert!(matches!(s.gate(&c, now), Gate::Unauthenticated));
        }
    }

    #[test]
    fn other_mechanisms_and_out_of_order_requests_are_refused() {
        let c = config();
        let mut s = Session::default();
        let a = handshake(
            Some(&c),
            &mut s,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512")),
        );
        assert_eq!(a.response.error_code, codes::UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(a.response.mechanisms, [StrBytes::from_static_str("PLAIN")]);
        assert!(a.close);
        let a = authenticate(
            Some(&c),
            &mut Session::default(),
            &plain(b"\0alice\0alice-secret"),
            1,
            Instant::now(),
        );
        assert_eq!(a.response.error_code, codes::ILLEGAL_SASL_STATE);
        // A listener without SASL.
        let a = handshake(
            None,
            &mut Session::default(),
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        );
        assert_eq!(a.response.error_code, codes::ILLEGAL_SASL_STATE);
        // v0 announces no lifetime.
        let mut s = chosen(&c);
        let a = authenticate(
            Some(&c),
            &mut s,
            &plain(b"\0alice\0alice-secret"),
            0,
            Instant::now(),
        );
        assert_eq!(a.response.session_lifetime_ms, 0);
    }
}
