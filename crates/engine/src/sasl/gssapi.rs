//! SASL `GSSAPI` (Kerberos V5), RFC 4752, over Kafka's SaslAuthenticate (KIP-43, KIP-152).
//!
//! The exchange, as the Java client's `GssKrb5Client` and Cyrus SASL (librdkafka) run it:
//!
//! 1. **Context establishment.** `gss_init_sec_context` for the broker's service principal
//!    `service@host` (`sasl.kerberos.service.name` and the host kdirect connects to, a
//!    host-based service name), asking for mutual authentication: the first token is the
//!    Kerberos AP-REQ; the broker answers with the AP-REP, which completes the context and
//!    proves that the broker holds the service's key. Any output token of the last call is
//!    sent (an empty one when there is none).
//! 2. **Security layer.** The broker's next token, unwrapped (`gss_unwrap`), is exactly 4
//!    bytes: a bit mask of the layers it offers (1: none, 2: integrity, 4: confidentiality)
//!    and the largest message it takes (3 bytes, big-endian). kdirect chooses "no security
//!    layer" (TLS is how kdirect protects the data: `SASL_SSL`), so the answer is
//!    `[0x01, 0, 0, 0]` (the size is 0 without a layer) followed by the authorization id,
//!    wrapped without confidentiality (`gss_wrap`). The authorization id is empty: act as
//!    the authenticated principal (Kafka's broker accepts nothing else).
//! 3. The broker's last answer ends the exchange.
//!
//! The state machine here is pure: the GSS-API calls sit behind `Mechanism`, which
//! `system.rs` implements with the system's GSSAPI library (feature `gssapi`) and the unit
//! tests with a fake. Every token from the broker is bounded ([`MAX_TOKEN`]) before any GSS
//! call sees it, and so is the number of context-establishment rounds.
// Without the feature, only the unit tests drive the exchange.
#![cfg_attr(not(feature = "gssapi"), allow(dead_code))]

use super::Step;
use crate::error::{KerberosFailure, KerberosProblem, SaslProblem};

#[cfg(feature = "gssapi")]
mod system;

/// The exchange for `service@host` with the system's GSSAPI library, as `principal` (with
/// `keytab`, or from the ticket cache).
#[cfg(feature = "gssapi")]
pub(crate) fn system(
    service: &str,
    host: &str,
    principal: Option<&str>,
    keytab: Option<&std::path::Path>,
) -> Exchange {
    Exchange::new(Box::new(system::System::new(
        service, host, principal, keytab,
    )))
}

/// The largest token accepted from a broker. A Kerberos AP-REP and a wrapped 4-byte offer
/// are a few hundred bytes; 64 KiB is far above any real one (even an Active Directory
/// ticket with a large PAC travels the other way, client to broker).
pub const MAX_TOKEN: usize = 64 * 1024;

/// What a broker's refusal of a Kerberos ticket usually means. Kafka answers every failure of
/// its acceptor with the same words ("invalid credentials"); the reason is in the broker's
/// log. A client whose clock is off but whose ticket cache already holds the broker's service
/// ticket never asks the KDC, so the broker is the first to see the skew.
pub const REFUSED_HINT: &str = "the broker refused the Kerberos ticket: this host's clock may \
     differ from the broker's by more than its allowed skew (5 minutes by default), or the \
     broker's keytab may not hold the current key of its service principal; the broker's log \
     says which";

/// The most `gss_init_sec_context` calls one exchange makes: Kerberos with mutual
/// authentication takes two (AP-REQ out, AP-REP in).
const MAX_CONTEXT_CALLS: u32 = 4;

/// RFC 4752's security-layer bits.
const LAYER_NONE: u8 = 0x01;

/// What `gss_init_sec_context` gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Init {
    /// The token to send (may be empty).
    pub token: Vec<u8>,
    /// `GSS_S_COMPLETE` (else `GSS_S_CONTINUE_NEEDED`).
    pub complete: bool,
    /// The context has mutual authentication (`GSS_C_MUTUAL_FLAG` in the returned flags).
    pub mutual: bool,
}

/// The GSS-API calls the exchange makes, on one security context.
pub(crate) trait Mechanism: Send {
    /// `gss_init_sec_context` with the broker's last token (`None` on the first call, which
    /// also acquires the credentials).
    fn init(&mut self, input: Option<&[u8]>) -> Result<Init, KerberosProblem>;
    /// `gss_unwrap`.
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, KerberosProblem>;
    /// `gss_wrap` without confidentiality (integrity only).
    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, KerberosProblem>;
    /// The service principal asked for (`kafka@host`), for errors and `Debug`.
    fn service(&self) -> &str;
}

/// A problem of kdirect's own (not the library's) in the exchange with the broker.
pub(crate) fn protocol(step: &'static str, service: &str, status: String) -> SaslProblem {
    SaslProblem::Kerberos(KerberosProblem {
        failure: KerberosFailure::Protocol,
        step,
        principal: Some(service.to_owned()),
        major: 0,
        minor: 0,
        status,
    })
}

/// MIT Kerberos' `krb5_error_code`s (`krb5_err.et`, base -1765328384) and GSSAPI krb5
/// mechanism codes (`gssapi_err_krb5.et`, base 39756032) that say what went wrong, as the
/// minor status carries them.
mod code {
    const KRB5: i32 = -1_765_328_384;
    const K5G: i32 = 39_756_032;
    pub const C_PRINCIPAL_UNKNOWN: i32 = KRB5 + 6;
    pub const S_PRINCIPAL_UNKNOWN: i32 = KRB5 + 7;
    pub const NAME_EXP: i32 = KRB5 + 1;
    pub const KEY_EXP: i32 = KRB5 + 23;
    pub const PREAUTH_FAILED: i32 = KRB5 + 24;
    pub const BAD_INTEGRITY: i32 = KRB5 + 31;
    pub const TKT_EXPIRED: i32 = KRB5 + 32;
    pub const TKT_NYV: i32 = KRB5 + 33;
    pub const SKEW: i32 = KRB5 + 37;
    pub const CC_NOTFOUND: i32 = KRB5 + 141;
    pub const CC_END: i32 = KRB5 + 142;
    pub const KDCREP_SKEW: i32 = KRB5 + 148;
    pub const REALM_UNKNOWN: i32 = KRB5 + 154;
    pub const KDC_UNREACH: i32 = KRB5 + 156;
    pub const KT_NOTFOUND: i32 = KRB5 + 181;
    pub const FCC_NOFILE: i32 = KRB5 + 195;
    pub const NO_KDC_ADDRESS: i32 = KRB5 + 220;
    pub const NO_DEFAULT_REALM: i32 = KRB5 + 224;
    pub const KT_KVNONOTFOUND: i32 = KRB5 + 230;
    pub const KG_CCACHE_NOMATCH: i32 = K5G;
    pub const KG_KEYTAB_NOMATCH: i32 = K5G + 1;
    pub const KG_TGT_MISSING: i32 = K5G + 2;
    pub const KG_EMPTY_CCACHE: i32 = K5G + 12;
}

/// What a failed call's statuses most likely mean: the minor status (MIT's codes) first, the
/// major's routine error (RFC 2744) when the minor says nothing known.
pub(crate) fn classify(major: u32, minor: u32) -> KerberosFailure {
    use code::*;
    use KerberosFailure as F;
    match minor as i32 {
        C_PRINCIPAL_UNKNOWN => return F::UnknownClient,
        S_PRINCIPAL_UNKNOWN => return F::UnknownService,
        TKT_EXPIRED | NAME_EXP | KEY_EXP => return F::Expired,
        SKEW | KDCREP_SKEW | TKT_NYV => return F::ClockSkew,
        PREAUTH_FAILED | BAD_INTEGRITY => return F::WrongKey,
        KT_NOTFOUND | KT_KVNONOTFOUND | KG_KEYTAB_NOMATCH => return F::Keytab,
        CC_NOTFOUND | CC_END | FCC_NOFILE | KG_CCACHE_NOMATCH | KG_TGT_MISSING
        | KG_EMPTY_CCACHE => return F::NoCredentials,
        KDC_UNREACH | REALM_UNKNOWN | NO_KDC_ADDRESS | NO_DEFAULT_REALM => {
            return F::KdcUnreachable
        }
        _ => {}
    }
    match (major >> 16) & 0xff {
        // GSS_S_NO_CRED
        7 => F::NoCredentials,
        // GSS_S_CREDENTIALS_EXPIRED, GSS_S_CONTEXT_EXPIRED
        11 | 12 => F::Expired,
        // GSS_S_DEFECTIVE_TOKEN, GSS_S_BAD_SIG
        9 | 6 => F::Protocol,
        _ => F::Other,
    }
}

/// The broker's security-layer offer (RFC 4752 section 3.1): exactly 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offer {
    /// The layers the broker offers (1: none, 2: integrity, 4: confidentiality).
    pub layers: u8,
    /// The largest message the broker takes (meaningful with a layer only).
    pub max_message: u32,
}

/// Reads the unwrapped offer; `Err` says what is wrong with it.
pub(crate) fn parse_offer(plain: &[u8]) -> Result<Offer, String> {
    let &[layers, a, b, c] = plain else {
        return Err(format!(
            "the broker's security-layer offer is {} bytes, RFC 4752 says 4",
            plain.len()
        ));
    };
    if layers & LAYER_NONE == 0 {
        return Err(format!(
            "the broker offers only SASL security layers (mask 0x{layers:02x}: integrity or \
             confidentiality, its sasl qop), not 'none'; kdirect protects data with TLS \
             instead: use security.protocol=SASL_SSL and let the broker offer qop 'auth'"
        ));
    }
    Ok(Offer {
        layers,
        max_message: u32::from_be_bytes([0, a, b, c]),
    })
}

/// The client's answer before wrapping: no security layer, size 0, then the authorization id.
pub(crate) fn answer(authzid: &str) -> Vec<u8> {
    let mut out = vec![LAYER_NONE, 0, 0, 0];
    out.extend_from_slice(authzid.as_bytes());
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing sent yet.
    Start,
    /// Context tokens are being exchanged; `calls` made so far.
    Context { calls: u32 },
    /// The context is complete; the next token is the security-layer offer.
    Offer,
    /// The answer was sent; the broker's next reply ends it.
    Answered,
}

/// One GSSAPI exchange.
pub(crate) struct Exchange {
    mech: Box<dyn Mechanism>,
    phase: Phase,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gssapi")
            .field("service", &self.mech.service())
            .field("phase", &self.phase)
            .finish()
    }
}

impl Exchange {
    pub(crate) fn new(mech: Box<dyn Mechanism>) -> Exchange {
        Exchange {
            mech,
            phase: Phase::Start,
        }
    }

    /// The first token (the AP-REQ).
    pub(crate) fn start(&mut self) -> Result<Vec<u8>, SaslProblem> {
        if self.phase != Phase::Start {
            return Err(protocol(
                "start",
                self.mech.service(),
                "the exchange was already started".to_owned(),
            ));
        }
        let init = self.mech.init(None).map_err(SaslProblem::Kerberos)?;
        self.after_init(init, 1)
    }

    fn after_init(&mut self, init: Init, calls: u32) -> Result<Vec<u8>, SaslProblem> {
        if !init.complete {
            self.phase = Phase::Context { calls };
            return Ok(init.token);
        }
        if !init.mutual {
            return Err(protocol(
                "gss_init_sec_context",
                self.mech.service(),
                "the security context completed without mutual authentication: the broker \
                 did not prove that it holds the service's key"
                    .to_owned(),
            ));
        }
        self.phase = Phase::Offer;
        Ok(init.token)
    }

    /// Takes the broker's answer to the last token.
    pub(crate) fn next(&mut self, answer: &[u8]) -> Result<Step, SaslProblem> {
        let service = self.mech.service().to_owned();
        if answer.len() > MAX_TOKEN {
            return Err(protocol(
                "SaslAuthenticate",
                &service,
                format!(
                    "the broker sent a {}-byte GSSAPI token; at most {MAX_TOKEN} are taken",
                    answer.len()
                ),
            ));
        }
        match self.phase {
            Phase::Start => Err(protocol(
                "SaslAuthenticate",
                &service,
                "a token from the broker before the exchange started".to_owned(),
            )),
            Phase::Context { calls } => {
                if calls >= MAX_CONTEXT_CALLS {
                    return Err(protocol(
                        "gss_init_sec_context",
                        &service,
                        format!("the security context is not established after {calls} rounds"),
                    ));
                }
                let init = self
                    .mech
                    .init(Some(answer))
                    .map_err(SaslProblem::Kerberos)?;
                self.after_init(init, calls + 1).map(Step::Send)
            }
            Phase::Offer => {
                if answer.is_empty() {
                    return Err(protocol(
                        "gss_unwrap",
                        &service,
                        "the broker sent no security-layer offer after the context was \
                         established"
                            .to_owned(),
                    ));
                }
                let plain = self.mech.unwrap(answer).map_err(SaslProblem::Kerberos)?;
                parse_offer(&plain).map_err(|m| protocol("security layer", &service, m))?;
                let wrapped = self
                    .mech
                    .wrap(&answer_bytes())
                    .map_err(SaslProblem::Kerberos)?;
                self.phase = Phase::Answered;
                Ok(Step::Send(wrapped))
            }
            Phase::Answered => Ok(Step::Done),
        }
    }
}

/// For the fuzz target `gssapi_exchange` (not an API): runs one exchange against a mechanism
/// whose context completes (mutually) after `rounds` calls of `gss_init_sec_context`, whose
/// `gss_unwrap` hands the broker's token back as the plaintext (so the input chooses the
/// security-layer offer) and whose `gss_wrap` adds a prefix, feeding it `tokens` as the
/// broker's answers. Returns how many tokens it sent and whether it finished, or the error
/// that ended it. Checks what the exchange promises: at most [`MAX_CONTEXT_CALLS`] context
/// calls, a token over [`MAX_TOKEN`] refused before any GSS call sees it, and an answer only
/// to an offer of 4 bytes with the "none" layer.
#[doc(hidden)]
pub fn fuzz_exchange(rounds: u8, tokens: &[&[u8]]) -> Result<(usize, bool), String> {
    struct Fuzzed {
        rounds: u32,
        calls: u32,
        unwrapped: Option<Vec<u8>>,
    }
    impl Mechanism for Fuzzed {
        fn init(&mut self, input: Option<&[u8]>) -> Result<Init, KerberosProblem> {
            assert!(
                input.is_none_or(|t| t.len() <= MAX_TOKEN),
                "an oversized token reached the library"
            );
            self.calls += 1;
            assert!(
                self.calls <= MAX_CONTEXT_CALLS,
                "more context calls than the bound"
            );
            Ok(Init {
                token: vec![self.calls as u8],
                complete: self.calls >= self.rounds,
                mutual: true,
            })
        }
        fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
            assert!(
                token.len() <= MAX_TOKEN,
                "an oversized token reached the library"
            );
            self.unwrapped = Some(token.to_vec());
            Ok(token.to_vec())
        }
        fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
            let offer = self.unwrapped.as_deref().unwrap_or_default();
            assert!(
                offer.len() == 4 && offer[0] & LAYER_NONE != 0,
                "answered an offer that is not 4 bytes with the 'none' layer: {offer:?}"
            );
            Ok([b"W".as_slice(), message].concat())
        }
        fn service(&self) -> &str {
            "kafka@fuzz"
        }
    }
    let mut x = Exchange::new(Box::new(Fuzzed {
        rounds: u32::from(rounds.max(1)),
        calls: 0,
        unwrapped: None,
    }));
    let mut sent = 1;
    x.start().map_err(|e| e.to_string())?;
    for t in tokens {
        match x.next(t) {
            Ok(Step::Send(_)) => sent += 1,
            // Finished: what comes after is not the exchange's (the connection moves on).
            Ok(Step::Done) => return Ok((sent, true)),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((sent, false))
}

/// The answer kdirect sends: no layer, empty authorization id.
fn answer_bytes() -> Vec<u8> {
    answer("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offer_is_four_bytes_with_no_layer_among_its_bits() {
        // What Kafka's broker (Java's GssKrb5Server, qop "auth") sends: no layer, 64 KiB.
        assert_eq!(
            parse_offer(&[0x01, 0x01, 0x00, 0x00]),
            Ok(Offer {
                layers: 1,
                max_message: 65_536
            })
        );
        // All three layers offered: "none" is among them.
        assert_eq!(
            parse_offer(&[0x07, 0xff, 0xff, 0xff]).unwrap().max_message,
            0xff_ffff
        );
        assert_eq!(parse_offer(&[0x01, 0, 0, 0]).unwrap().max_message, 0);
        for bad in [
            &[][..],
            &[0x01],
            &[0x01, 0, 0],
            &[0x01, 0, 0, 0, 0],
            &[0u8; 100],
        ] {
            let e = parse_offer(bad).unwrap_err();
            assert!(e.contains(&format!("{} bytes", bad.len())), "{e}");
        }
        for only_layers in [0x02u8, 0x04, 0x06, 0x00] {
            let e = parse_offer(&[only_layers, 0, 0x10, 0]).unwrap_err();
            assert!(e.contains("SASL_SSL") && e.contains("not 'none'"), "{e}");
        }
    }

    /// MIT's codes, as `krb5_get_error_message` names them (read from Debian 12's
    /// libkrb5 1.20: "Clock skew too great" is -1765328347, and so on).
    #[test]
    fn statuses_are_classified_by_mits_codes() {
        use KerberosFailure as F;
        let failure = 13 << 16; // GSS_S_FAILURE
        for (minor, want) in [
            (-1_765_328_378, F::UnknownClient), // Client not found in Kerberos database
            (-1_765_328_377, F::UnknownService), // Server not found in Kerberos database
            (-1_765_328_352, F::Expired),       // Ticket expired
            (-1_765_328_347, F::ClockSkew),     // Clock skew too great
            (-1_765_328_236, F::ClockSkew),     // Clock skew too great in KDC reply
            (-1_765_328_351, F::ClockSkew),     // Ticket not yet valid
            (-1_765_328_360, F::WrongKey),      // Preauthentication failed
            (-1_765_328_203, F::Keytab),        // Key table entry not found
            (39_756_033, F::Keytab),            // No principal in keytab matches desired name
            (-1_765_328_189, F::NoCredentials), // No credentials cache found
            (-1_765_328_243, F::NoCredentials), // Matching credential not found
            (39_756_044, F::NoCredentials),     // Credential cache is empty
            (-1_765_328_228, F::KdcUnreachable), // Cannot contact any KDC for requested realm
            (-1_765_328_230, F::KdcUnreachable), // Cannot find KDC for requested realm
            (2, F::Other),                      // ENOENT, from a file
        ] {
            assert_eq!(classify(failure, minor as u32), want, "{minor}");
        }
        assert_eq!(classify(7 << 16, 0), F::NoCredentials);
        assert_eq!(classify(11 << 16, 0), F::Expired);
        assert_eq!(classify(9 << 16, 0), F::Protocol);
        assert_eq!(classify(13 << 16, 0), F::Other);
    }

    #[test]
    fn the_answer_chooses_no_layer_and_size_zero() {
        assert_eq!(answer(""), [1, 0, 0, 0]);
        assert_eq!(answer("alice@EXAMPLE.COM"), b"\x01\0\0\0alice@EXAMPLE.COM");
    }

    /// A fake context: `init` answers from a script; wrap and unwrap put and check a
    /// 2-byte marker, so a token that was not wrapped is refused as a real unwrap would.
    struct Fake {
        inits: Vec<Result<Init, KerberosProblem>>,
        seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Mechanism for Fake {
        fn init(&mut self, input: Option<&[u8]>) -> Result<Init, KerberosProblem> {
            self.seen.lock().unwrap().push(format!("init {input:?}"));
            if self.inits.is_empty() {
                panic!("init called more often than scripted");
            }
            self.inits.remove(0)
        }
        fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
            self.seen.lock().unwrap().push(format!("unwrap {token:?}"));
            token
                .strip_prefix(b"W:")
                .map(<[u8]>::to_vec)
                .ok_or(KerberosProblem {
                    failure: KerberosFailure::Other,
                    step: "gss_unwrap",
                    principal: None,
                    major: 9 << 16,
                    minor: 0,
                    status: "Invalid token was supplied".to_owned(),
                })
        }
        fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, KerberosProblem> {
            self.seen.lock().unwrap().push(format!("wrap {message:?}"));
            Ok([b"W:".as_slice(), message].concat())
        }
        fn service(&self) -> &str {
            "kafka@broker"
        }
    }

    type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

    fn exchange(inits: Vec<Result<Init, KerberosProblem>>) -> (Exchange, Log) {
        let seen = Log::default();
        let fake = Fake {
            inits,
            seen: seen.clone(),
        };
        (Exchange::new(Box::new(fake)), seen)
    }

    fn step(token: &[u8], complete: bool) -> Result<Init, KerberosProblem> {
        Ok(Init {
            token: token.to_vec(),
            complete,
            mutual: true,
        })
    }

    fn kerberos(e: SaslProblem) -> KerberosProblem {
        match e {
            SaslProblem::Kerberos(k) => k,
            other => panic!("not a Kerberos problem: {other:?}"),
        }
    }

    fn send(n: Result<Step, SaslProblem>) -> Vec<u8> {
        match n {
            Ok(Step::Send(t)) => t,
            Ok(Step::Done) => panic!("done too early"),
            Err(e) => panic!("{e}"),
        }
    }

    /// The exchange a Kafka broker runs: AP-REQ, AP-REP, an empty token, the wrapped offer,
    /// the wrapped answer, done.
    #[test]
    fn the_exchange_kafka_runs() {
        let (mut x, seen) = exchange(vec![step(b"AP-REQ", false), step(b"", true)]);
        assert_eq!(x.start().unwrap(), b"AP-REQ");
        assert_eq!(send(x.next(b"AP-REP")), b"");
        let answer = send(x.next(b"W:\x01\x01\x00\x00"));
        assert_eq!(answer, b"W:\x01\x00\x00\x00");
        assert!(matches!(x.next(b""), Ok(Step::Done)));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "init None",
                "init Some([65, 80, 45, 82, 69, 80])",
                "unwrap [87, 58, 1, 1, 0, 0]",
                "wrap [1, 0, 0, 0]",
            ]
        );
        let d = format!("{x:?}");
        assert!(d.contains("kafka@broker") && d.contains("Answered"), "{d}");
    }

    #[test]
    fn a_context_without_mutual_authentication_is_refused() {
        let (mut x, _) = exchange(vec![Ok(Init {
            token: b"AP-REQ".to_vec(),
            complete: true,
            mutual: false,
        })]);
        let e = kerberos(x.start().unwrap_err());
        assert_eq!(e.failure, KerberosFailure::Protocol);
        assert!(e.status.contains("mutual authentication"), "{e}");
        assert_eq!(e.principal.as_deref(), Some("kafka@broker"));
    }

    #[test]
    fn the_librarys_failure_is_passed_on_whole() {
        let skew = KerberosProblem {
            failure: KerberosFailure::ClockSkew,
            step: "gss_init_sec_context",
            principal: Some("kafka@broker".to_owned()),
            major: 13 << 16,
            minor: -1_765_328_347_i32 as u32,
            status: "Unspecified GSS failure; Clock skew too great".to_owned(),
        };
        let (mut x, _) = exchange(vec![Err(skew.clone())]);
        assert_eq!(x.start(), Err(SaslProblem::Kerberos(skew.clone())));
        let (mut x, _) = exchange(vec![step(b"AP-REQ", false), Err(skew.clone())]);
        x.start().unwrap();
        assert_eq!(kerberos(x.next(b"KRB-ERROR").unwrap_err()), skew);
        let text = skew.to_string();
        assert!(
            text.contains("synchronise the clocks")
                && text.contains("minor -1765328347")
                && text.contains("Clock skew too great"),
            "{text}"
        );
    }

    /// Hostile or broken brokers: every bad token is a typed error, never a panic, and no GSS
    /// call sees a token over the bound.
    #[test]
    fn bad_tokens_from_the_broker_are_errors() {
        // Too large, at each phase.
        let big = vec![0u8; MAX_TOKEN + 1];
        let (mut x, seen) = exchange(vec![step(b"AP-REQ", false)]);
        x.start().unwrap();
        let e = kerberos(x.next(&big).unwrap_err());
        assert!(e.status.contains("65537-byte"), "{e}");
        assert_eq!(seen.lock().unwrap().len(), 1, "no GSS call saw it");
        let (mut x, _) = exchange(vec![step(b"AP-REQ", false), step(b"", true)]);
        x.start().unwrap();
        send(x.next(b"AP-REP"));
        assert!(x.next(&big).is_err());

        // An offer that is not wrapped, is empty, or has the wrong length.
        for (offer, says) in [
            (&b"\x01\x01\x00\x00"[..], "Invalid token"),
            (b"", "no security-layer offer"),
            (b"W:\x01\x01\x00", "3 bytes"),
            (b"W:\x01\x01\x00\x00\x00", "5 bytes"),
            (b"W:\x04\x01\x00\x00", "SASL_SSL"),
        ] {
            let (mut x, _) = exchange(vec![step(b"AP-REQ", false), step(b"", true)]);
            x.start().unwrap();
            send(x.next(b"AP-REP"));
            let e = x.next(offer).unwrap_err().to_string();
            assert!(e.contains(says), "{offer:?}: {e}");
        }

        // A context that never completes stops after MAX_CONTEXT_CALLS.
        let (mut x, _) = exchange(
            (0..MAX_CONTEXT_CALLS)
                .map(|_| step(b"more", false))
                .collect(),
        );
        x.start().unwrap();
        for _ in 1..MAX_CONTEXT_CALLS {
            send(x.next(b"again"));
        }
        let e = kerberos(x.next(b"again").unwrap_err());
        assert!(e.status.contains("not established after 4 rounds"), "{e}");

        // start twice; a token before start.
        let (mut x, _) = exchange(vec![step(b"AP-REQ", false)]);
        assert!(x.next(b"early").is_err());
        x.start().unwrap();
        assert!(x.start().is_err());
    }

    #[test]
    fn the_fuzz_harness_runs_kafkas_exchange_and_refuses_a_layers_only_offer() {
        let ok = fuzz_exchange(2, &[b"AP-REP", &[7, 0, 0x10, 0], b""]);
        assert_eq!(ok, Ok((3, true)));
        let refused = fuzz_exchange(1, &[&[6, 0, 0x10, 0]]).unwrap_err();
        assert!(refused.contains("not 'none'"), "{refused}");
        let big = vec![0; MAX_TOKEN + 1];
        assert!(fuzz_exchange(2, &[&big]).is_err());
        let stuck = fuzz_exchange(9, &[b"a", b"b", b"c", b"d", b"e"]).unwrap_err();
        assert!(stuck.contains("not established"), "{stuck}");
    }
}
