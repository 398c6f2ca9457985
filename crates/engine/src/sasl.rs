//! SASL mechanisms as sans-IO state machines: each turns the broker's last token into the
//! next one to send. The connection (`conn.rs`) carries the tokens in SaslAuthenticate
//! requests after a SaslHandshake v1 (KIP-43, KIP-152).
//!
//! - `PLAIN` (RFC 4616): one message, `\0user\0password`.
//! - `SCRAM-SHA-256` / `SCRAM-SHA-512` (RFC 5802, RFC 7677; Kafka's KIP-84): client-first,
//!   server-first (nonce, salt, iterations), client-final with the proof, server-final with
//!   the server's signature, which is verified: a broker that does not hold the password
//!   cannot forge it.
//! - `OAUTHBEARER` (RFC 7628, KIP-255): one message with a static bearer token.
//! - `GSSAPI` (Kerberos V5, RFC 4752; feature `gssapi`): the security-context tokens, then
//!   the security-layer offer and answer ([`gssapi`]). Its steps call the system's GSSAPI
//!   library, which may talk to the KDC: [`Authenticator::may_block`] says so, and the
//!   connection runs them on a thread of their own.
//!
//! Nothing here reads a clock or a socket (GSSAPI's library does, behind its trait); the
//! nonce comes in from the caller (random in production, fixed in the RFC test vector).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::error::SaslProblem;
use crate::security::{SaslMechanism, Security};

pub mod gssapi;

/// The most PBKDF2 iterations accepted from a broker: Kafka's own limit
/// (`ScramMechanism.maxIterations`), so a hostile server cannot make the client spin.
pub const MAX_SCRAM_ITERATIONS: u32 = 16_384;
/// The fewest accepted (RFC 7677's minimum for SCRAM-SHA-256, and Kafka's).
pub const MIN_SCRAM_ITERATIONS: u32 = 4096;

/// What a mechanism does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this token and give the answer to [`Authenticator::next`].
    Send(Vec<u8>),
    /// Authenticated; the broker's answer was checked.
    Done,
}

/// One authentication exchange. Its `Debug` shows no credential: not PLAIN's password, not
/// the OAUTHBEARER token (both in the one message it holds), not SCRAM's password.
#[derive(Debug)]
pub struct Authenticator {
    state: State,
}

enum State {
    /// PLAIN or OAUTHBEARER: one message, then done.
    Single(Option<Vec<u8>>),
    Scram(Scram),
    /// GSSAPI: tickets, no secret of its own in memory (the library holds the keys).
    Gssapi(gssapi::Exchange),
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Single(m) => f
                .debug_tuple("Single")
                .field(&m.as_ref().map(|_| "<redacted>"))
                .finish(),
            State::Scram(s) => f.debug_tuple("Scram").field(s).finish(),
            State::Gssapi(g) => g.fmt(f),
        }
    }
}

impl Authenticator {
    /// The exchange for `security`'s mechanism (which [`Security::check`] validated) with the
    /// broker at `host` (GSSAPI's service principal is `sasl.kerberos.service.name@host`),
    /// with `nonce` for SCRAM (printable ASCII without commas; see [`random_nonce`]).
    pub fn new(
        security: &Security,
        nonce: String,
        host: &str,
    ) -> Result<Authenticator, SaslProblem> {
        let missing = |what: &str| SaslProblem::Protocol(format!("{what} is not set"));
        let mechanism = security
            .sasl_mechanism
            .ok_or_else(|| missing("sasl.mechanism"))?;
        let user = || {
            security
                .sasl_username
                .as_deref()
                .ok_or_else(|| missing("sasl.username"))
        };
        let password = || {
            security
                .sasl_password
                .as_ref()
                .map(|p| p.expose())
                .ok_or_else(|| missing("sasl.password"))
        };
        let state = match mechanism {
            SaslMechanism::Plain => {
                let mut msg = Vec::new();
                msg.push(0);
                msg.extend_from_slice(user()?.as_bytes());
                msg.push(0);
                msg.extend_from_slice(password()?.as_bytes());
                State::Single(Some(msg))
            }
            SaslMechanism::OAuthBearer => {
                let token = security
                    .sasl_oauthbearer_token
                    .as_ref()
                    .ok_or_else(|| missing("sasl.oauthbearer.token"))?;
                let msg = format!("n,,\x01auth=Bearer {}\x01\x01", token.expose());
                State::Single(Some(msg.into_bytes()))
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let hash = if mechanism == SaslMechanism::ScramSha256 {
                    Hash::Sha256
                } else {
                    Hash::Sha512
                };
                State::Scram(Scram::new(hash, user()?, password()?, nonce))
            }
            SaslMechanism::Gssapi => {
                let service = security
                    .sasl_kerberos_service_name
                    .as_deref()
                    .ok_or_else(|| missing("sasl.kerberos.service.name"))?;
                State::Gssapi(gssapi_exchange(security, service, host)?)
            }
        };
        Ok(Authenticator { state })
    }

    /// An exchange that is over (sends nothing more): what stands in for one while a step
    /// of it runs elsewhere.
    pub(crate) fn done() -> Authenticator {
        Authenticator {
            state: State::Single(None),
        }
    }

    /// Whether [`start`](Self::start) and [`next`](Self::next) may block the thread: GSSAPI's
    /// library reads files and may ask the KDC for tickets.
    pub fn may_block(&self) -> bool {
        matches!(self.state, State::Gssapi(_))
    }

    /// The first token to send.
    pub fn start(&mut self) -> Result<Vec<u8>, SaslProblem> {
        Ok(match &mut self.state {
            State::Single(msg) => msg.take().unwrap_or_default(),
            State::Scram(s) => s.client_first(),
            State::Gssapi(g) => g.start()?,
        })
    }

    /// Takes the broker's answer to the last token: the next token, or done.
    pub fn next(&mut self, answer: &[u8]) -> Result<Step, SaslProblem> {
        match &mut self.state {
            State::Single(_) => Ok(Step::Done),
            State::Scram(s) => s.next(answer),
            State::Gssapi(g) => g.next(answer),
        }
    }
}

/// GSSAPI with the system's library.
#[cfg(feature = "gssapi")]
fn gssapi_exchange(
    security: &Security,
    service: &str,
    host: &str,
) -> Result<gssapi::Exchange, SaslProblem> {
    Ok(gssapi::system(
        service,
        host,
        security.sasl_kerberos_principal.as_deref(),
        security.sasl_kerberos_keytab.as_deref(),
    ))
}

/// A build without the `gssapi` feature (which [`Security::check`] already refuses).
#[cfg(not(feature = "gssapi"))]
fn gssapi_exchange(_: &Security, _: &str, _: &str) -> Result<gssapi::Exchange, SaslProblem> {
    Err(SaslProblem::Protocol(
        "sasl.mechanism=GSSAPI: kdirect was built without the `gssapi` feature".to_owned(),
    ))
}

/// 24 random bytes as base64: a SCRAM client nonce.
pub fn random_nonce() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    B64.encode(bytes)
}

#[derive(Debug, Clone, Copy)]
enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Hash::Sha512 => {
                let mut m = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    /// Whether `tag` is the HMAC of `data` under `key`, compared in constant time (hmac's
    /// `verify_slice`): how long the check takes says nothing of how much of `tag` was right.
    fn verify(self, key: &[u8], data: &[u8], tag: &[u8]) -> bool {
        match self {
            Hash::Sha256 => Hmac::<Sha256>::new_from_slice(key)
                .expect("HMAC takes any key")
                .chain_update(data)
                .verify_slice(tag)
                .is_ok(),
            Hash::Sha512 => Hmac::<Sha512>::new_from_slice(key)
                .expect("HMAC takes any key")
                .chain_update(data)
                .verify_slice(tag)
                .is_ok(),
        }
    }

    fn h(self, data: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(data).to_vec(),
            Hash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with this HMAC.
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Hash::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            Hash::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }
}

/// A SCRAM client (RFC 5802 section 3), without channel binding (`n,,`), as Kafka's.
struct Scram {
    hash: Hash,
    user: String,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// The server key and the auth message whose HMAC the server's signature must be, once
    /// the client-final message was sent.
    expected_server_signature: Option<(Vec<u8>, String)>,
}

impl std::fmt::Debug for Scram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scram")
            .field("hash", &self.hash)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// RFC 5802's `saslname`: `=` and `,` escaped.
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

impl Scram {
    fn new(hash: Hash, user: &str, password: &str, nonce: String) -> Scram {
        Scram {
            hash,
            user: user.to_owned(),
            password: password.to_owned(),
            nonce,
            client_first_bare: String::new(),
            expected_server_signature: None,
        }
    }

    fn client_first(&mut self) -> Vec<u8> {
        self.client_first_bare = format!("n={},r={}", sasl_name(&self.user), self.nonce);
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    fn next(&mut self, answer: &[u8]) -> Result<Step, SaslProblem> {
        let bad = |m: String| SaslProblem::Protocol(m);
        let text = std::str::from_utf8(answer)
            .map_err(|_| bad("a SCRAM message from the broker is not UTF-8".to_owned()))?;
        let attr = |name: char| {
            text.split(',')
                .find_map(|a| a.strip_prefix(name).and_then(|a| a.strip_prefix('=')))
        };
        if let Some((server_key, auth_message)) = self.expected_server_signature.take() {
            // server-final-message: v=signature, or e=error.
            if let Some(e) = attr('e') {
                return Err(SaslProblem::Refused(format!("the broker says: {e}")));
            }
            let v = attr('v').ok_or_else(|| {
                bad(format!(
                    "the broker's SCRAM server-final message has no signature ({} bytes)",
                    text.len()
                ))
            })?;
            let got = B64
                .decode(v)
                .map_err(|_| bad("the broker's SCRAM signature is not base64".to_owned()))?;
            return if self.hash.verify(&server_key, auth_message.as_bytes(), &got) {
                Ok(Step::Done)
            } else {
                Err(SaslProblem::ServerSignature)
            };
        }
        // server-first-message: r=nonce,s=salt,i=iterations.
        if text.starts_with("m=") {
            return Err(bad(
                "the broker asks for a SCRAM extension kdirect does not know".into(),
            ));
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (attr('r'), attr('s'), attr('i')) else {
            return Err(bad(format!(
                "the broker's SCRAM server-first message lacks r=, s= or i= ({} bytes)",
                text.len()
            )));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(bad(
                "the broker's SCRAM nonce does not extend the client's".to_owned()
            ));
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| bad("the broker's SCRAM salt is not base64".to_owned()))?;
        let iterations: u32 = iterations.parse().map_err(|_| {
            bad(format!(
                "SCRAM iteration count '{iterations}' is not a number"
            ))
        })?;
        if !(MIN_SCRAM_ITERATIONS..=MAX_SCRAM_ITERATIONS).contains(&iterations) {
            return Err(SaslProblem::ScramIterations { iterations });
        }
        let h = self.hash;
        let salted = h.hi(self.password.as_bytes(), &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.h(&client_key);
        // c= is base64("n,,"): no channel binding.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some((server_key, auth_message));
        Ok(Step::Send(
            format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(mechanism: &str, user: &str, password: &str) -> Security {
        let mut s = Security::default();
        s.set("security.protocol", "SASL_PLAINTEXT").unwrap();
        s.set("sasl.mechanism", mechanism).unwrap();
        s.set("sasl.username", user).unwrap();
        s.set("sasl.password", password).unwrap();
        s
    }

    /// RFC 7677 section 3, the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let s = security("SCRAM-SHA-256", "user", "pencil");
        let mut a = Authenticator::new(&s, "rOprNGfwEbeRWgbNEkqO".to_owned(), "broker").unwrap();
        assert_eq!(a.start().unwrap(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let Step::Send(client_final) = a.next(server_first).unwrap() else {
            panic!("expected the client-final message")
        };
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            a.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            Step::Done
        );
    }

    /// The server's signature is checked by `Hash::verify` alone, which is hmac's
    /// `verify_slice` (a constant-time comparison, `subtle`'s): every wrong tag is refused
    /// whichever byte is wrong and whatever its length, and the right one is accepted, for
    /// both hashes (`scram_sha_256_matches_rfc_7677` and
    /// `scram_refuses_a_forged_signature_and_hostile_parameters` go through it). Timing itself is not measured (no timed tests); what this
    /// pins is that the one comparison is the constant-time one, not `==` on the bytes.
    #[test]
    fn the_server_signature_is_compared_whole_by_the_constant_time_check() {
        let (key, data) = (b"server key".as_slice(), b"auth message".as_slice());
        for hash in [Hash::Sha256, Hash::Sha512] {
            let right = hash.hmac(key, data);
            assert!(hash.verify(key, data, &right));
            for i in 0..right.len() {
                let mut wrong = right.clone();
                wrong[i] ^= 0x01;
                assert!(!hash.verify(key, data, &wrong), "byte {i} wrong");
            }
            for len in [0, 1, right.len() - 1, right.len() + 1] {
                let mut other = right.clone();
                other.resize(len, 0);
                assert!(!hash.verify(key, data, &other), "{len} bytes");
            }
        }
    }

    #[test]
    fn scram_refuses_a_forged_signature_and_hostile_parameters() {
        let s = security("SCRAM-SHA-256", "user", "pencil");
        let mut a = Authenticator::new(&s, "rOprNGfwEbeRWgbNEkqO".to_owned(), "broker").unwrap();
        a.start().unwrap();
        a.next(b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        let wrong = B64.encode([0u8; 32]);
        assert_eq!(
            a.next(format!("v={wrong}").as_bytes()),
            Err(SaslProblem::ServerSignature)
        );

        for hostile in [
            &b"r=someone-elses-nonce,s=AAAA,i=4096"[..],
            b"r=rOprNGfwEbeRWgbNEkqO,s=AAAA,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=!!!,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,i=4096",
            b"\xff\xfe",
            b"m=ext,r=x,s=AAAA,i=4096",
            b"",
        ] {
            let mut a =
                Authenticator::new(&s, "rOprNGfwEbeRWgbNEkqO".to_owned(), "broker").unwrap();
            a.start().unwrap();
            let e = a.next(hostile).unwrap_err();
            assert!(matches!(e, SaslProblem::Protocol(_)), "{hostile:?}: {e:?}");
        }
    }

    /// Kafka's bounds on the iteration count (4096..=16384), as a typed error: 1,000,000 was
    /// accepted (a broker could make every connection spin through a million rounds), and the
    /// bounds' edges are accepted.
    #[test]
    fn scram_iteration_counts_outside_kafkas_bounds_are_a_typed_error() {
        let s = security("SCRAM-SHA-256", "user", "pencil");
        let first = |i: &str| {
            let mut a =
                Authenticator::new(&s, "rOprNGfwEbeRWgbNEkqO".to_owned(), "broker").unwrap();
            a.start().unwrap();
            a.next(format!("r=rOprNGfwEbeRWgbNEkqOx,s=AAAA,i={i}").as_bytes())
        };
        for i in [16_385u32, 1_000_000, u32::MAX, 4095, 1] {
            let e = first(&i.to_string()).unwrap_err();
            assert_eq!(e, SaslProblem::ScramIterations { iterations: i });
            assert!(e.to_string().contains("4096..=16384"), "{e}");
        }
        for i in ["4096", "16384"] {
            assert!(matches!(first(i), Ok(Step::Send(_))), "{i}");
        }
    }

    /// No credential in `Debug`: PLAIN's password and the OAUTHBEARER token were printed
    /// (as the bytes of the one message the exchange holds).
    #[test]
    fn debug_shows_no_credentials() {
        let plain = Authenticator::new(
            &security("PLAIN", "alice", "hunter2"),
            String::new(),
            "broker",
        )
        .unwrap();
        let mut s = Security::default();
        s.set("sasl.mechanism", "OAUTHBEARER").unwrap();
        s.set("sasl.oauthbearer.token", "tok3n.s3cret").unwrap();
        let oauth = Authenticator::new(&s, String::new(), "broker").unwrap();
        let scram = Authenticator::new(
            &security("SCRAM-SHA-512", "alice", "hunter2"),
            "nonce".to_owned(),
            "broker",
        )
        .unwrap();
        for a in [plain, oauth, scram] {
            let d = format!("{a:?}");
            let bytes = |t: &str| format!("{:?}", t.as_bytes());
            for secret in ["hunter2", "tok3n", "s3cret"] {
                assert!(!d.contains(secret), "{d}");
                let b = bytes(secret);
                assert!(!d.contains(&b[1..b.len() - 1]), "{d}");
            }
            assert!(d.contains("<redacted>"), "{d}");
        }
    }

    /// SCRAM-SHA-512 against a server side written from RFC 5802's formulas here.
    #[test]
    fn scram_sha_512_proof_verifies_on_the_server_side() {
        let s = security("SCRAM-SHA-512", "a=b,c", "secret");
        let mut a = Authenticator::new(&s, "clientnonce".to_owned(), "broker").unwrap();
        let first = String::from_utf8(a.start().unwrap()).unwrap();
        assert_eq!(first, "n,,n=a=3Db=2Cc,r=clientnonce");
        let salt = b"0123456789abcdef";
        let server_first = format!("r=clientnonceSERVER,s={},i=4096", B64.encode(salt));
        let Step::Send(fin) = a.next(server_first.as_bytes()).unwrap() else {
            panic!()
        };
        let fin = String::from_utf8(fin).unwrap();
        let (without_proof, proof) = fin.rsplit_once(",p=").unwrap();
        // The server: StoredKey from the password, then ClientKey = proof XOR signature.
        let h = Hash::Sha512;
        let salted = h.hi(b"secret", salt, 4096);
        let stored = h.h(&h.hmac(&salted, b"Client Key"));
        let auth = format!("{},{server_first},{without_proof}", &first[3..]);
        let sig = h.hmac(&stored, auth.as_bytes());
        let client_key: Vec<u8> = B64
            .decode(proof)
            .unwrap()
            .iter()
            .zip(&sig)
            .map(|(p, s)| p ^ s)
            .collect();
        assert_eq!(h.h(&client_key), stored, "the proof holds the client key");
        let server_sig = h.hmac(&h.hmac(&salted, b"Server Key"), auth.as_bytes());
        let done = a.next(format!("v={}", B64.encode(server_sig)).as_bytes());
        assert_eq!(done, Ok(Step::Done));
    }

    #[test]
    fn plain_and_oauthbearer_are_one_message() {
        let mut a =
            Authenticator::new(&security("PLAIN", "alice", "pw"), String::new(), "broker").unwrap();
        assert_eq!(a.start().unwrap(), b"\0alice\0pw");
        assert_eq!(a.next(b""), Ok(Step::Done));
        let mut s = Security::default();
        s.set("sasl.mechanism", "OAUTHBEARER").unwrap();
        s.set("sasl.oauthbearer.token", "t.o.k").unwrap();
        let mut a = Authenticator::new(&s, String::new(), "broker").unwrap();
        assert_eq!(a.start().unwrap(), b"n,,\x01auth=Bearer t.o.k\x01\x01");
    }

    #[test]
    fn nonces_differ_and_have_no_commas() {
        let (a, b) = (random_nonce(), random_nonce());
        assert_ne!(a, b);
        assert!(a.len() >= 24 && !a.contains(','));
    }
}
