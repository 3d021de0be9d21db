//! How every broker connection is secured: TLS, mutual TLS and SASL, configured with
//! librdkafka's option names so users paste the client settings they already have.
//!
//! [`SecurityConfig`] is the one typed configuration the consumer, the producer and
//! [`create_topic_with`](crate::create_topic_with) share (a field of [`ConsumerConfig`] and of
//! [`ProducerConfig`]). The engine builds it with [`SecurityConfig::from_properties`] from
//! key/value pairs: SQL `WITH` options, or a Java `.properties` file read with
//! [`parse_properties`] (what Kafka's own tools take as `--command-config`).
//! [`SECURITY_OPTIONS`] lists the keys it understands, one line of documentation each.
//!
//! | `'security.protocol'` | transport | authentication |
//! |---|---|---|
//! | `PLAINTEXT` (default) | TCP | none |
//! | `SSL` | TLS | the broker's certificate; the client's too with `'ssl.certificate.location'` |
//! | `SASL_PLAINTEXT` | TCP | SASL (`'sasl.mechanism'`) |
//! | `SASL_SSL` | TLS | SASL over TLS |
//!
//! Secrets (passwords, tokens, the client secret, a private key given inline) are held as
//! [`Secret`]: `Debug` and `Display` print a placeholder, and no error of this crate quotes one.
//!
//! [`ConsumerConfig`]: crate::ConsumerConfig
//! [`ProducerConfig`]: crate::ProducerConfig

pub(crate) mod oauth;
mod options;
pub(crate) mod sasl;
pub mod tls;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

pub use options::{parse_properties, SecurityOption, SecurityValues, SECURITY_OPTIONS};
pub use sasl::{SaslError, SaslExchange, SaslMechanism};

/// A password, token or key: compared and cloned like a string, never shown, and zeroed in
/// memory when dropped.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the code that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// `'security.protocol'`: the transport and whether SASL runs on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// TCP, no authentication.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// The name librdkafka and the Java client use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// True for `SSL` and `SASL_SSL`.
    pub fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// True for `SASL_PLAINTEXT` and `SASL_SSL`.
    pub fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(Self::Plaintext),
            "SSL" => Ok(Self::Ssl),
            "SASL_PLAINTEXT" => Ok(Self::SaslPlaintext),
            "SASL_SSL" => Ok(Self::SaslSsl),
            _ => Err("expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL".into()),
        }
    }
}

/// Where a PEM document comes from: a file (`'ssl.*.location'`) or the text itself
/// (`'ssl.*.pem'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file holding PEM.
    File(PathBuf),
    /// PEM text (a secret for a private key: it is never shown).
    Inline(Secret),
}

/// The TLS settings (used when `'security.protocol'` is `SSL` or `SASL_SSL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// CA certificates to trust (`'ssl.ca.location'` / `'ssl.ca.pem'`); `None`: the system's
    /// roots.
    pub ca: Option<PemSource>,
    /// The client's certificate chain for mutual TLS (`'ssl.certificate.location'` /
    /// `'ssl.certificate.pem'`).
    pub certificate: Option<PemSource>,
    /// The client's private key (`'ssl.key.location'` / `'ssl.key.pem'`): PKCS#8, PKCS#1 or
    /// SEC1, or encrypted PKCS#8 with `key_password`.
    pub key: Option<PemSource>,
    /// The password of an encrypted private key (`'ssl.key.password'`).
    pub key_password: Option<Secret>,
    /// Check that the broker's certificate names the host connected to
    /// (`'ssl.endpoint.identification.algorithm'` = `https`, the default); `false` (`none`)
    /// still checks the chain and its dates.
    pub verify_hostname: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            ca: None,
            certificate: None,
            key: None,
            key_password: None,
            verify_hostname: true,
        }
    }
}

/// The SCRAM hash (`SCRAM-SHA-256` or `SCRAM-SHA-512`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    /// SCRAM-SHA-256 (RFC 7677).
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

/// Where OAUTHBEARER tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A fixed token (`'sasl.oauthbearer.token'`); it cannot be renewed, so a run outlives it
    /// only if the broker does not limit sessions to the token's lifetime.
    Static(Secret),
    /// A file holding the token, read again for every authentication
    /// (`'sasl.oauthbearer.token.file'`): whatever renews the file renews weir's sessions.
    File(PathBuf),
    /// The OIDC client-credentials flow (`'sasl.oauthbearer.method'` = `oidc`): a token from
    /// the endpoint, fetched again once 80% of its lifetime has passed.
    Oidc(OidcConfig),
}

/// The OIDC client-credentials grant (RFC 6749 section 4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// `'sasl.oauthbearer.token.endpoint.url'` (`https://...`; `http://` for a local endpoint).
    pub token_endpoint: String,
    /// `'sasl.oauthbearer.client.id'`.
    pub client_id: String,
    /// `'sasl.oauthbearer.client.secret'`.
    pub client_secret: Secret,
    /// `'sasl.oauthbearer.scope'` (space-separated scopes), if any.
    pub scope: Option<String>,
}

/// OAUTHBEARER settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthBearerConfig {
    /// Where tokens come from.
    pub token: TokenSource,
    /// SASL extensions sent with the token (`'sasl.oauthbearer.extensions'` =
    /// `key=value,key=value`), such as Confluent Cloud's `logicalCluster` and `identityPoolId`.
    pub extensions: Vec<(String, String)>,
}

/// The SASL mechanism and its credentials.
#[derive(Clone)]
pub enum SaslConfig {
    /// `PLAIN`: username and password (send it over TLS only).
    Plain {
        /// `'sasl.username'`.
        username: String,
        /// `'sasl.password'`.
        password: Secret,
    },
    /// `SCRAM-SHA-256` / `SCRAM-SHA-512`: a salted challenge-response; the password never
    /// crosses the wire.
    Scram {
        /// The hash.
        hash: ScramHash,
        /// `'sasl.username'`.
        username: String,
        /// `'sasl.password'`.
        password: Secret,
    },
    /// `OAUTHBEARER` (KIP-255, RFC 7628).
    OAuthBearer(OAuthBearerConfig),
    /// A mechanism implemented outside this crate (see [`SaslMechanism`]; `AWS_MSK_IAM` would
    /// plug in here).
    Custom(Arc<dyn SaslMechanism>),
}

impl fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain { username, password } => f
                .debug_struct("Plain")
                .field("username", username)
                .field("password", password)
                .finish(),
            Self::Scram {
                hash,
                username,
                password,
            } => f
                .debug_struct("Scram")
                .field("hash", hash)
                .field("username", username)
                .field("password", password)
                .finish(),
            Self::OAuthBearer(o) => f.debug_tuple("OAuthBearer").field(o).finish(),
            Self::Custom(m) => f.debug_tuple("Custom").field(&m.name()).finish(),
        }
    }
}

impl PartialEq for SaslConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Self::Plain {
                    username: a,
                    password: p,
                },
                Self::Plain {
                    username: b,
                    password: q,
                },
            ) => a == b && p == q,
            (
                Self::Scram {
                    hash: h,
                    username: a,
                    password: p,
                },
                Self::Scram {
                    hash: i,
                    username: b,
                    password: q,
                },
            ) => h == i && a == b && p == q,
            (Self::OAuthBearer(a), Self::OAuthBearer(b)) => a == b,
            (Self::Custom(a), Self::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl SaslConfig {
    /// The mechanism's name as SaslHandshake sends it (`PLAIN`, `SCRAM-SHA-256`, ...).
    pub fn mechanism_name(&self) -> String {
        match self {
            Self::Plain { .. } => "PLAIN".into(),
            Self::Scram {
                hash: ScramHash::Sha256,
                ..
            } => "SCRAM-SHA-256".into(),
            Self::Scram {
                hash: ScramHash::Sha512,
                ..
            } => "SCRAM-SHA-512".into(),
            Self::OAuthBearer(_) => "OAUTHBEARER".into(),
            Self::Custom(m) => m.name().to_string(),
        }
    }
}

/// How to reach the brokers securely: one configuration for the consumer, the producer and
/// topic creation alike. The default is plaintext TCP with no authentication.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SecurityConfig {
    /// `'security.protocol'`.
    pub protocol: SecurityProtocol,
    /// TLS settings (read when the protocol is `SSL` or `SASL_SSL`).
    pub tls: TlsConfig,
    /// SASL settings (required when the protocol is `SASL_PLAINTEXT` or `SASL_SSL`).
    pub sasl: Option<SaslConfig>,
}

impl SecurityConfig {
    /// Builds the configuration from key/value pairs with librdkafka's names (see
    /// [`SECURITY_OPTIONS`]; `'sasl.jaas.config'` of a Java client file is read too). Keys
    /// outside `security.`, `sasl.` and `ssl.` are left to the caller and ignored here; an
    /// unknown key inside them is an error, as is a setting that cannot work. Errors name the
    /// key, never a secret's value.
    pub fn from_properties<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> crate::Result<Self>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        options::from_properties(pairs)
    }

    /// The same check [`from_properties`](Self::from_properties) makes, for a configuration
    /// built in code: the protocol and the SASL settings agree.
    pub fn validate(&self) -> crate::Result<()> {
        options::validate(self)
    }
}
