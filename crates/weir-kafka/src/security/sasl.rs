//! SASL mechanisms: where a mechanism plugs in ([`SaslMechanism`], [`SaslExchange`]) and the
//! built-in ones (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER).
//!
//! The connection runs SaslHandshake (naming [`SaslMechanism::name`]) and then one
//! SaslAuthenticate round trip per message of the exchange: it sends
//! [`SaslExchange::first`], then hands each server answer to [`SaslExchange::next`] until it
//! returns `None`. The same mechanism starts a fresh exchange for every connection and for
//! every re-authentication (KIP-368), so a mechanism with expiring credentials renews them in
//! [`SaslMechanism::begin`].
//!
//! A new mechanism is one type implementing [`SaslMechanism`], given as
//! [`SaslConfig::Custom`](super::SaslConfig::Custom) (or, built in, one more arm of
//! [`mechanism`]). `AWS_MSK_IAM` would be such a type: its `begin` signs a JSON payload with
//! AWS SigV4 (the region, the broker host, the action `kafka-cluster:Connect`, credentials from
//! the usual AWS chain, a timestamp) and returns it as the single client message; the broker's
//! JSON answer ends the exchange. It needs an AWS credentials provider and a SigV4
//! implementation, and cannot be tested against the local broker (it validates with IAM).

use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq as _;

use super::oauth::TokenCache;
use super::{OAuthBearerConfig, SaslConfig, ScramHash, Secret};
pub use crate::error::SaslError;
use crate::error::{Error, Result};

/// A SASL mechanism: its name and how to start an exchange.
pub trait SaslMechanism: Send + Sync {
    /// The name SaslHandshake sends (`PLAIN`, `SCRAM-SHA-256`, `AWS_MSK_IAM`, ...).
    fn name(&self) -> &str;

    /// Who authenticates, for error messages: `user 'alice'`, `principal 'svc'` (never a
    /// secret).
    fn principal(&self) -> String;

    /// A new exchange with the broker at `broker` (`host:port`), for a first authentication or
    /// a re-authentication. Credentials that expire are renewed here.
    fn begin(&self, broker: &str) -> Result<Box<dyn SaslExchange>>;
}

/// One authentication in progress.
pub trait SaslExchange: Send {
    /// The client's first message.
    fn first(&mut self) -> Result<Vec<u8>, SaslError>;

    /// The next client message given the server's answer to the last one; `None` when the
    /// client has nothing more to send (the exchange is complete on the client's side).
    fn next(&mut self, server: &[u8]) -> Result<Option<Vec<u8>>, SaslError>;

    /// When the credentials used expire (ms since the epoch), if known: a session must be
    /// renewed before then.
    fn expires_at_ms(&self) -> Option<i64> {
        None
    }
}

/// The mechanism for a configuration: the one function a built-in mechanism is added to.
pub(crate) fn mechanism(cfg: &SaslConfig) -> Arc<dyn SaslMechanism> {
    match cfg {
        SaslConfig::Plain { username, password } => Arc::new(Plain {
            username: username.clone(),
            password: password.clone(),
        }),
        SaslConfig::Scram {
            hash,
            username,
            password,
        } => Arc::new(Scram {
            hash: *hash,
            username: username.clone(),
            password: password.clone(),
        }),
        SaslConfig::OAuthBearer(o) => Arc::new(OAuthBearer::new(o)),
        SaslConfig::Custom(m) => m.clone(),
    }
}

/// PLAIN (RFC 4616): `authzid NUL authcid NUL password`, one message.
struct Plain {
    username: String,
    password: Secret,
}

impl SaslMechanism for Plain {
    fn name(&self) -> &str {
        "PLAIN"
    }
    fn principal(&self) -> String {
        format!("user '{}'", self.username)
    }
    fn begin(&self, _broker: &str) -> Result<Box<dyn SaslExchange>> {
        let mut msg = Vec::with_capacity(self.username.len() + self.password.expose().len() + 2);
        msg.push(0);
        msg.extend_from_slice(self.username.as_bytes());
        msg.push(0);
        msg.extend_from_slice(self.password.expose().as_bytes());
        Ok(Box::new(OneMessage(Some(msg))))
    }
}

/// An exchange of a single client message.
struct OneMessage(Option<Vec<u8>>);

impl SaslExchange for OneMessage {
    fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        self.0.take().ok_or(SaslError::AlreadyStarted)
    }
    fn next(&mut self, _server: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        Ok(None)
    }
}

/// SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677).
struct Scram {
    hash: ScramHash,
    username: String,
    password: Secret,
}

impl SaslMechanism for Scram {
    fn name(&self) -> &str {
        match self.hash {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }
    fn principal(&self) -> String {
        format!("user '{}'", self.username)
    }
    fn begin(&self, _broker: &str) -> Result<Box<dyn SaslExchange>> {
        let mut raw = [0u8; 24];
        super::tls::provider()
            .secure_random
            .fill(&mut raw)
            .map_err(|_| Error::Config("no secure random numbers for the SCRAM nonce".into()))?;
        let nonce = base64::engine::general_purpose::STANDARD_NO_PAD.encode(raw);
        Ok(Box::new(ScramExchange::new(
            self.hash,
            &self.username,
            self.password.clone(),
            nonce,
        )))
    }
}

/// The client side of one SCRAM exchange.
pub(crate) struct ScramExchange {
    hash: ScramHash,
    password: Secret,
    client_first_bare: String,
    nonce: String,
    /// The server signature expected in the final message.
    server_signature: Option<Vec<u8>>,
}

/// `saslname` escaping of RFC 5802: `=` and `,` in a user name.
fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn hmac(hash: ScramHash, key: &[u8], data: &[u8]) -> Vec<u8> {
    match hash {
        ScramHash::Sha256 => {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        ScramHash::Sha512 => {
            let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes any key");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
    }
}

fn digest(hash: ScramHash, data: &[u8]) -> Vec<u8> {
    match hash {
        ScramHash::Sha256 => Sha256::digest(data).to_vec(),
        ScramHash::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// The iteration counts a SCRAM server may ask for: Kafka's own bounds (`ScramMechanism`'s
/// minimum and maximum, which `kafka-configs` enforces when credentials are stored).
pub(crate) const SCRAM_ITERATIONS: std::ops::RangeInclusive<u32> = 4096..=16384;

fn salted_password(hash: ScramHash, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    match hash {
        ScramHash::Sha256 => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
            out.to_vec()
        }
        ScramHash::Sha512 => {
            let mut out = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
            out.to_vec()
        }
    }
}

impl ScramExchange {
    pub(crate) fn new(hash: ScramHash, user: &str, password: Secret, nonce: String) -> Self {
        Self {
            hash,
            password,
            client_first_bare: format!("n={},r={nonce}", saslname(user)),
            nonce,
            server_signature: None,
        }
    }
}

impl SaslExchange for ScramExchange {
    fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        Ok(format!("n,,{}", self.client_first_bare).into_bytes())
    }

    fn next(&mut self, server: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        use SaslError::Malformed;
        let text = std::str::from_utf8(server).map_err(|_| Malformed("not UTF-8"))?;
        if let Some(expected) = self.server_signature.take() {
            // server-final-message: v=signature, or e=error.
            if let Some(e) = text.strip_prefix("e=") {
                return Err(SaslError::Reported(e.to_string()));
            }
            let v = text
                .split(',')
                .find_map(|a| a.strip_prefix("v="))
                .ok_or(Malformed("the final message has no signature"))?;
            let got = base64::engine::general_purpose::STANDARD
                .decode(v)
                .map_err(|_| Malformed("the signature is not base64"))?;
            // Constant time: a comparison that stops at the first differing byte tells a man in
            // the middle how much of a forged signature was right.
            if !bool::from(got.as_slice().ct_eq(expected.as_slice())) {
                return Err(SaslError::ServerSignature);
            }
            return Ok(None);
        }
        // server-first-message: r=nonce,s=salt,i=iterations
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attr in text.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            } else if let Some(v) = attr.strip_prefix("s=") {
                salt = Some(v);
            } else if let Some(v) = attr.strip_prefix("i=") {
                iterations = v.parse::<u32>().ok();
            } else if let Some(e) = attr.strip_prefix("e=") {
                return Err(SaslError::Reported(e.to_string()));
            }
        }
        let nonce = nonce.ok_or(Malformed("the first message has no nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err(SaslError::ForeignNonce);
        }
        let salt = base64::engine::general_purpose::STANDARD
            .decode(salt.ok_or(Malformed("the first message has no salt"))?)
            .map_err(|_| Malformed("the salt is not base64"))?;
        let iterations = iterations.ok_or(Malformed("the first message has no iteration count"))?;
        if !SCRAM_ITERATIONS.contains(&iterations) {
            // Few iterations make the proof cheap to crack for whoever asked for them (a man in
            // the middle over SASL_PLAINTEXT); very many burn the client's CPU.
            return Err(SaslError::Iterations {
                asked: iterations,
                min: *SCRAM_ITERATIONS.start(),
                max: *SCRAM_ITERATIONS.end(),
            });
        }
        let h = self.hash;
        let salted = salted_password(h, self.password.expose().as_bytes(), &salt, iterations);
        let client_key = hmac(h, &salted, b"Client Key");
        let stored_key = digest(h, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_signature = hmac(h, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(h, &salted, b"Server Key");
        self.server_signature = Some(hmac(h, &server_key, auth_message.as_bytes()));
        let proof = base64::engine::general_purpose::STANDARD.encode(proof);
        Ok(Some(format!("{without_proof},p={proof}").into_bytes()))
    }
}

/// OAUTHBEARER (RFC 7628, KIP-255): the token and extensions in one message; a refusal comes
/// back as a JSON challenge, answered with a lone `0x01` so the broker ends the exchange with
/// its error.
struct OAuthBearer {
    tokens: TokenCache,
    extensions: Vec<(String, String)>,
}

impl OAuthBearer {
    fn new(cfg: &OAuthBearerConfig) -> Self {
        Self {
            tokens: TokenCache::new(cfg.token.clone()),
            extensions: cfg.extensions.clone(),
        }
    }
}

impl SaslMechanism for OAuthBearer {
    fn name(&self) -> &str {
        "OAUTHBEARER"
    }
    fn principal(&self) -> String {
        match self.tokens.principal() {
            Some(p) => format!("principal '{p}'"),
            None => self.tokens.describe_source(),
        }
    }
    fn begin(&self, _broker: &str) -> Result<Box<dyn SaslExchange>> {
        let token = self.tokens.token()?;
        let mut msg = format!("n,,\x01auth=Bearer {}\x01", token.value.expose());
        for (k, v) in &self.extensions {
            msg.push_str(k);
            msg.push('=');
            msg.push_str(v);
            msg.push('\x01');
        }
        msg.push('\x01');
        Ok(Box::new(OAuthExchange {
            first: Some(msg.into_bytes()),
            expires_at_ms: token.expires_at_ms,
            refused: None,
        }))
    }
}

struct OAuthExchange {
    first: Option<Vec<u8>>,
    expires_at_ms: Option<i64>,
    /// The broker's JSON challenge, once it refused the token.
    refused: Option<String>,
}

impl SaslExchange for OAuthExchange {
    fn first(&mut self) -> Result<Vec<u8>, SaslError> {
        self.first.take().ok_or(SaslError::AlreadyStarted)
    }
    fn next(&mut self, server: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        if server.is_empty() {
            return Ok(None);
        }
        if let Some(challenge) = self.refused.take() {
            return Err(SaslError::TokenRefused(challenge));
        }
        // A JSON error such as {"status":"invalid_token"}: acknowledge so the broker fails the
        // exchange with its own message.
        self.refused = Some(String::from_utf8_lossy(server).into_owned());
        Ok(Some(vec![0x01]))
    }
    fn expires_at_ms(&self) -> Option<i64> {
        self.expires_at_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, and RFC 5802's attribute grammar.
    #[test]
    fn scram_sha256_matches_rfc7677() {
        let mut x = ScramExchange::new(
            ScramHash::Sha256,
            "user",
            Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(x.first().unwrap(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let final_msg = x.next(server_first).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(final_msg).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            x.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
                .unwrap(),
            None
        );
    }

    #[test]
    fn scram_refuses_a_wrong_server_signature_and_a_foreign_nonce() {
        let mut x = ScramExchange::new(
            ScramHash::Sha256,
            "user",
            Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        x.first().unwrap();
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        x.next(server_first).unwrap();
        assert!(matches!(
            x.next(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(SaslError::ServerSignature)
        ));
        let mut y = ScramExchange::new(ScramHash::Sha512, "a=b,c", Secret::new("p"), "abc".into());
        assert_eq!(y.first().unwrap(), b"n,,n=a=3Db=2Cc,r=abc");
        assert!(matches!(
            y.next(b"r=xyz123,s=AAAA,i=4096"),
            Err(SaslError::ForeignNonce)
        ));
        assert!(matches!(
            y.next(b"r=abc123,s=AAAA,i=0"),
            Err(SaslError::Iterations { asked: 0, .. })
        ));
    }

    /// A man in the middle asking for one iteration (a cheap proof to crack) or a hostile
    /// broker asking for ten million (CPU burnt) is refused before any hashing; Kafka's own
    /// bounds pass.
    #[test]
    fn scram_refuses_iteration_counts_outside_kafkas_bounds() {
        for (i, ok) in [
            ("1", false),
            ("4095", false),
            ("4096", true),
            ("16384", true),
            ("16385", false),
            ("10000000", false),
            ("", false),
        ] {
            let mut x = ScramExchange::new(ScramHash::Sha256, "u", Secret::new("p"), "abc".into());
            x.first().unwrap();
            let answer = x.next(format!("r=abc123,s=AAAA,i={i}").as_bytes());
            assert_eq!(answer.is_ok(), ok, "iterations {i:?}: {answer:?}");
        }
    }

    #[test]
    fn plain_and_oauthbearer_messages() {
        let m = mechanism(&SaslConfig::Plain {
            username: "alice".into(),
            password: Secret::new("pw"),
        });
        let mut x = m.begin("b:1").unwrap();
        assert_eq!(x.first().unwrap(), b"\0alice\0pw");
        assert_eq!(x.next(b"").unwrap(), None);
        let m = mechanism(&SaslConfig::OAuthBearer(OAuthBearerConfig {
            token: super::super::TokenSource::Static(Secret::new("tok")),
            extensions: vec![("logicalCluster".into(), "lkc-1".into())],
        }));
        let mut x = m.begin("b:1").unwrap();
        assert_eq!(
            x.first().unwrap(),
            b"n,,\x01auth=Bearer tok\x01logicalCluster=lkc-1\x01\x01"
        );
        assert_eq!(
            x.next(b"{\"status\":\"invalid_token\"}").unwrap(),
            Some(vec![1])
        );
        assert!(matches!(
            x.next(b"x"),
            Err(SaslError::TokenRefused(challenge)) if challenge.contains("invalid_token")
        ));
    }
}
