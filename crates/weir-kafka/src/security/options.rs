//! The security options by name: the list of keys, the one parser of key/value pairs, and the
//! parser of Java `.properties` text.

use std::path::PathBuf;

use super::{
    OAuthBearerConfig, OidcConfig, PemSource, SaslConfig, ScramHash, Secret, SecurityConfig,
    SecurityProtocol, TlsConfig, TokenSource,
};
use crate::error::{Error, Result};

/// What values a security option takes (for the engine's option declarations and its README
/// table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityValues {
    /// Any text.
    Text,
    /// A path to a file.
    Path,
    /// A URL.
    Url,
    /// One of these words (matched without regard to case).
    Choice(&'static [&'static str]),
}

/// One option [`SecurityConfig::from_properties`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityOption {
    /// The key, as librdkafka names it.
    pub key: &'static str,
    /// Its values.
    pub values: SecurityValues,
    /// The value used when it is absent, `None` when there is none.
    pub default: Option<&'static str>,
    /// One line saying what it does.
    pub doc: &'static str,
    /// Passwords, tokens and keys: the value never appears in a message.
    pub secret: bool,
}

const fn opt(
    key: &'static str,
    values: SecurityValues,
    default: Option<&'static str>,
    doc: &'static str,
    secret: bool,
) -> SecurityOption {
    SecurityOption {
        key,
        values,
        default,
        doc,
        secret,
    }
}

use SecurityValues::{Choice, Path, Text, Url};

/// Every key [`SecurityConfig::from_properties`] reads, in the order a README table shows them.
pub const SECURITY_OPTIONS: &[SecurityOption] = &[
    opt("security.protocol", Choice(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]), Some("PLAINTEXT"),
        "how broker connections are made: TCP or TLS, with or without SASL authentication", false),
    opt("sasl.mechanism", Choice(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]), None,
        "the SASL mechanism (required with SASL_PLAINTEXT and SASL_SSL); 'sasl.mechanisms' is accepted too", false),
    opt("sasl.username", Text, None, "PLAIN and SCRAM: the user name", false),
    opt("sasl.password", Text, None, "PLAIN and SCRAM: the password", true),
    opt("sasl.jaas.config", Text, None,
        "PLAIN and SCRAM: a Java client's JAAS line; its username and password are used when 'sasl.username' and 'sasl.password' are not given", true),
    opt("sasl.oauthbearer.method", Choice(&["default", "oidc"]), Some("default"),
        "OAUTHBEARER: `default` takes the token from 'sasl.oauthbearer.token' or 'sasl.oauthbearer.token.file'; `oidc` fetches it from the token endpoint", false),
    opt("sasl.oauthbearer.token", Text, None,
        "OAUTHBEARER: a fixed token (JWT); it cannot be renewed when it expires", true),
    opt("sasl.oauthbearer.token.file", Path, None,
        "OAUTHBEARER: a file holding the token, read again at every authentication and re-authentication", false),
    opt("sasl.oauthbearer.client.id", Text, None, "OIDC: the client id", false),
    opt("sasl.oauthbearer.client.secret", Text, None, "OIDC: the client secret", true),
    opt("sasl.oauthbearer.token.endpoint.url", Url, None,
        "OIDC: the token endpoint (client-credentials grant)", false),
    opt("sasl.oauthbearer.token.endpoint.allow.http", Choice(&["true", "false"]), Some("false"),
        "OIDC: allow an `http://` token endpoint on a host other than loopback (the client secret then travels unencrypted)", false),
    opt("sasl.oauthbearer.scope", Text, None, "OIDC: the scope(s) asked for, space-separated", false),
    opt("sasl.oauthbearer.extensions", Text, None,
        "OAUTHBEARER: SASL extensions sent with the token, `key=value,key=value`", false),
    opt("ssl.ca.location", Path, None,
        "TLS: PEM file of the CA certificates to trust; default: the system's trust store", false),
    opt("ssl.ca.pem", Text, None, "TLS: the same CA certificates as PEM text", false),
    opt("ssl.certificate.location", Path, None,
        "mutual TLS: PEM file of the client's certificate (chain)", false),
    opt("ssl.certificate.pem", Text, None, "mutual TLS: the client's certificate as PEM text", false),
    opt("ssl.key.location", Path, None,
        "mutual TLS: PEM file of the client's private key (PKCS#8, PKCS#1, SEC1, or encrypted PKCS#8)", false),
    opt("ssl.key.pem", Text, None, "mutual TLS: the client's private key as PEM text", true),
    opt("ssl.key.password", Text, None, "mutual TLS: the password of an encrypted private key", true),
    opt("ssl.endpoint.identification.algorithm", Choice(&["https", "none"]), Some("https"),
        "TLS: `https` checks that the broker's certificate names the host connected to; `none` checks only the chain", false),
];

/// The Java client's JAAS line, read for PLAIN and SCRAM credentials.
const JAAS_CONFIG: &str = "sasl.jaas.config";
/// librdkafka's plural name of 'sasl.mechanism', accepted as well.
const MECHANISMS_ALIAS: &str = "sasl.mechanisms";

fn invalid(key: &str, reason: impl Into<String>) -> Error {
    Error::Option {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Parses Java `.properties` text (what `--kafka-config FILE` and Kafka's `--command-config`
/// take): `key=value`, `key: value` or `key value` per line, `#` and `!` comment lines, blank
/// lines skipped, keys and values trimmed, a line ending in `\` continued on the next. Escapes
/// `\t`, `\n`, `\r`, `\\`, `\=`, `\:`, `\uXXXX` and `\` before any other character are
/// understood. Returns the pairs in file order.
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        // Join continuation lines (an odd number of trailing backslashes).
        let mut logical = trimmed.to_string();
        while ends_with_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical);
        let key = unescape(key).map_err(|e| invalid(&format!("line {}", n + 1), e))?;
        let value = unescape(value).map_err(|e| invalid(&key, e))?;
        out.push((key, value));
    }
    Ok(out)
}

fn ends_with_continuation(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace.
fn split_key_value(line: &str) -> (&str, &str) {
    // Character positions from char_indices, so every slice falls on a character boundary
    // whatever follows a backslash.
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '=' | ':' => return (line[..i].trim_end(), line[i + 1..].trim()),
            ' ' | '\t' | '\x0c' => {
                let key = &line[..i];
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix('=')
                    .or_else(|| rest.strip_prefix(':'))
                    .unwrap_or(rest);
                return (key, rest.trim());
            }
            _ => {}
        }
    }
    (line.trim_end(), "")
}

fn unescape(s: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)
                    .and_then(char::from_u32)
                    .ok_or_else(|| "malformed \\uXXXX escape".to_string())?;
                out.push(code);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

/// The values read, by key (the last of a repeated key wins).
#[derive(Default)]
struct Values {
    pairs: Vec<(String, String)>,
}

impl Values {
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        self.get(key).map(PathBuf::from)
    }

    fn secret(&self, key: &str) -> Option<Secret> {
        self.get(key).map(Secret::new)
    }

    fn pem(&self, location: &str, inline: &str) -> Result<Option<PemSource>> {
        match (self.path(location), self.get(inline)) {
            (Some(_), Some(_)) => Err(invalid(
                inline,
                format!("give either '{location}' or '{inline}', not both"),
            )),
            (Some(p), None) => Ok(Some(PemSource::File(p))),
            // Inline PEM is held as a secret, whether or not it is a key.
            (None, Some(text)) => Ok(Some(PemSource::Inline(Secret::new(text)))),
            (None, None) => Ok(None),
        }
    }

    fn choice<'a>(&self, key: &str, words: &[&'a str]) -> Result<Option<&'a str>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(v.trim()))
            .copied()
            .map(Some)
            .ok_or_else(|| {
                invalid(
                    key,
                    format!("'{}' is not one of {}", v.trim(), words.join(", ")),
                )
            })
    }
}

pub(super) fn from_properties<K, V>(
    pairs: impl IntoIterator<Item = (K, V)>,
) -> Result<SecurityConfig>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut values = Values::default();
    for (k, v) in pairs {
        let key = k.as_ref().trim();
        let ours =
            key.starts_with("security.") || key.starts_with("sasl.") || key.starts_with("ssl.");
        if !ours {
            continue;
        }
        let known = SECURITY_OPTIONS.iter().any(|o| o.key == key) || key == MECHANISMS_ALIAS;
        if !known {
            return Err(invalid(key, unknown_key_reason(key)));
        }
        values.pairs.push((key.to_string(), v.as_ref().to_string()));
    }
    let protocol = match values.get("security.protocol") {
        None => SecurityProtocol::Plaintext,
        Some(v) => v
            .parse()
            .map_err(|e: String| invalid("security.protocol", format!("'{}': {e}", v.trim())))?,
    };
    let verify_hostname =
        values.choice("ssl.endpoint.identification.algorithm", &["https", "none"])? != Some("none");
    let tls = TlsConfig {
        ca: values.pem("ssl.ca.location", "ssl.ca.pem")?,
        certificate: values.pem("ssl.certificate.location", "ssl.certificate.pem")?,
        key: values.pem("ssl.key.location", "ssl.key.pem")?,
        key_password: values.secret("ssl.key.password"),
        verify_hostname,
    };
    let mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];
    let mechanism = match values.choice("sasl.mechanism", &mechanisms)? {
        Some(m) => Some(m),
        None => values.choice(MECHANISMS_ALIAS, &mechanisms)?,
    };
    let sasl = match mechanism {
        None => None,
        Some(m) => Some(sasl_config(&values, m)?),
    };
    let config = SecurityConfig {
        protocol,
        tls,
        sasl,
    };
    validate(&config)?;
    Ok(config)
}

fn unknown_key_reason(key: &str) -> String {
    let hint = match key {
        "ssl.truststore.location" | "ssl.truststore.password" | "ssl.truststore.type" => {
            " (Java keystores are not read: give the CA as PEM with 'ssl.ca.location')"
        }
        "ssl.keystore.location" | "ssl.keystore.password" | "ssl.keystore.type" => {
            " (Java keystores are not read: give 'ssl.certificate.location' and 'ssl.key.location' as PEM)"
        }
        _ => "",
    };
    format!(
        "not a security option weir knows{hint}; the options are: {}",
        SECURITY_OPTIONS
            .iter()
            .map(|o| o.key)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The username and password of a PLAIN or SCRAM login, from `'sasl.username'` and
/// `'sasl.password'` or else from a Java client's `'sasl.jaas.config'`.
fn credentials(values: &Values, mechanism: &str) -> Result<(String, Secret)> {
    let jaas = values.get(JAAS_CONFIG).map(parse_jaas).transpose()?;
    let from_jaas = |name: &str| {
        jaas.as_ref()
            .and_then(|j| j.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    };
    let username = values
        .get("sasl.username")
        .map(str::to_string)
        .or_else(|| from_jaas("username"))
        .ok_or_else(|| invalid("sasl.username", format!("is required for {mechanism}")))?;
    let password = values
        .secret("sasl.password")
        .or_else(|| from_jaas("password").map(Secret::new))
        .ok_or_else(|| invalid("sasl.password", format!("is required for {mechanism}")))?;
    Ok((username, password))
}

/// The `key="value"` options of a JAAS login line such as
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`.
fn parse_jaas(text: &str) -> Result<Vec<(String, String)>> {
    let bad = |why: &str| invalid(JAAS_CONFIG, why.to_string());
    let body = text.trim().trim_end_matches(';');
    let mut words = body.splitn(3, char::is_whitespace);
    let _module = words.next().ok_or_else(|| bad("empty"))?;
    let _flag = words.next().unwrap_or("");
    let rest = words.next().unwrap_or("");
    // Walked by characters, never by byte index: a value is outside data and may hold any
    // character after a backslash (a byte index there once panicked with the password in the
    // message).
    let mut out = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        loop {
            match chars.next() {
                None => return Err(bad("expected key=\"value\" options after the login module")),
                Some('=') => break,
                Some(c) => key.push(c),
            }
        }
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err(bad("unterminated quoted value")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(bad("unterminated quoted value")),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                value.push(c);
            }
        }
        out.push((key.trim().to_string(), value));
    }
    Ok(out)
}

fn sasl_config(values: &Values, mechanism: &str) -> Result<SaslConfig> {
    match mechanism {
        "PLAIN" => {
            let (username, password) = credentials(values, mechanism)?;
            Ok(SaslConfig::Plain { username, password })
        }
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
            let (username, password) = credentials(values, mechanism)?;
            let hash = if mechanism == "SCRAM-SHA-256" {
                ScramHash::Sha256
            } else {
                ScramHash::Sha512
            };
            Ok(SaslConfig::Scram {
                hash,
                username,
                password,
            })
        }
        _ => oauthbearer(values).map(SaslConfig::OAuthBearer),
    }
}

fn oauthbearer(values: &Values) -> Result<OAuthBearerConfig> {
    let method = values.choice("sasl.oauthbearer.method", &["default", "oidc"])?;
    let token = if method == Some("oidc") {
        let need = |key: &str| {
            values
                .get(key)
                .map(str::to_string)
                .ok_or_else(|| invalid(key, "is required with 'sasl.oauthbearer.method' = 'oidc'"))
        };
        let token_endpoint = need("sasl.oauthbearer.token.endpoint.url")?;
        if !(token_endpoint.starts_with("https://") || token_endpoint.starts_with("http://")) {
            return Err(invalid(
                "sasl.oauthbearer.token.endpoint.url",
                "is not an http(s) URL",
            ));
        }
        // User info in the URL would be a credential in every message naming the endpoint.
        let authority = token_endpoint.split_once("://").map_or("", |(_, rest)| {
            rest.split(['/', '?', '#']).next().unwrap_or("")
        });
        if authority.contains('@') {
            return Err(invalid(
                "sasl.oauthbearer.token.endpoint.url",
                "holds user info ('user:password@'); give the client's credentials in \
                 'sasl.oauthbearer.client.id' and 'sasl.oauthbearer.client.secret' instead",
            ));
        }
        let allow_http = values.choice(
            "sasl.oauthbearer.token.endpoint.allow.http",
            &["true", "false"],
        )? == Some("true");
        if token_endpoint.starts_with("http://") && !allow_http {
            let host = url_host(&token_endpoint);
            if !is_loopback(host) {
                return Err(invalid(
                    "sasl.oauthbearer.token.endpoint.url",
                    format!(
                        "is plain http on {host}, not loopback: the client secret would travel unencrypted; use https, or set 'sasl.oauthbearer.token.endpoint.allow.http' = 'true' if that is meant"
                    ),
                ));
            }
        }
        TokenSource::Oidc(OidcConfig {
            token_endpoint,
            client_id: need("sasl.oauthbearer.client.id")?,
            client_secret: values
                .secret("sasl.oauthbearer.client.secret")
                .ok_or_else(|| {
                    invalid(
                        "sasl.oauthbearer.client.secret",
                        "is required with 'sasl.oauthbearer.method' = 'oidc'",
                    )
                })?,
            scope: values.get("sasl.oauthbearer.scope").map(str::to_string),
        })
    } else {
        match (
            values.secret("sasl.oauthbearer.token"),
            values.path("sasl.oauthbearer.token.file"),
        ) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "sasl.oauthbearer.token.file",
                    "give either 'sasl.oauthbearer.token' or 'sasl.oauthbearer.token.file', not both",
                ))
            }
            (Some(t), None) => TokenSource::Static(t),
            (None, Some(p)) => TokenSource::File(p),
            (None, None) => {
                return Err(invalid(
                    "sasl.oauthbearer.token",
                    "OAUTHBEARER needs a token: 'sasl.oauthbearer.token', 'sasl.oauthbearer.token.file', or 'sasl.oauthbearer.method' = 'oidc' with its endpoint and client",
                ))
            }
        }
    };
    let mut extensions = Vec::new();
    if let Some(list) = values.get("sasl.oauthbearer.extensions") {
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (k, v) = entry.split_once('=').ok_or_else(|| {
                invalid(
                    "sasl.oauthbearer.extensions",
                    format!("'{entry}' is not key=value"),
                )
            })?;
            let k = k.trim();
            // RFC 7628: keys are letters; "auth" is reserved for the token itself.
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphabetic()) || k == "auth" {
                return Err(invalid(
                    "sasl.oauthbearer.extensions",
                    format!("'{k}' is not a valid extension name (letters only, not 'auth')"),
                ));
            }
            extensions.push((k.to_string(), v.trim().to_string()));
        }
    }
    Ok(OAuthBearerConfig { token, extensions })
}

/// The host of an `http(s)://[user@]host[:port]/...` URL (no user info, no port).
pub(crate) fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = host_port.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    host_port.split(':').next().unwrap_or("")
}

/// True for `localhost` and loopback addresses: credentials may go there in clear text.
pub(crate) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn validate(c: &SecurityConfig) -> Result<()> {
    match (c.protocol.sasl(), &c.sasl) {
        (true, None) => {
            return Err(invalid(
                "sasl.mechanism",
                format!(
                    "is required with 'security.protocol' = '{}'",
                    c.protocol.name()
                ),
            ))
        }
        (false, Some(s)) => {
            return Err(invalid(
                "security.protocol",
                format!(
                    "'{}' does not authenticate with SASL, but 'sasl.mechanism' = '{}' is set: use SASL_SSL or SASL_PLAINTEXT",
                    c.protocol.name(),
                    s.mechanism_name()
                ),
            ))
        }
        _ => {}
    }
    if c.tls.certificate.is_some() != c.tls.key.is_some() {
        let missing = if c.tls.key.is_none() {
            "ssl.key.location"
        } else {
            "ssl.certificate.location"
        };
        return Err(invalid(
            missing,
            "mutual TLS needs both the client certificate and its private key",
        ));
    }
    if c.protocol.sasl() && !c.protocol.tls() {
        if let Some(SaslConfig::Plain { .. } | SaslConfig::OAuthBearer(_)) = &c.sasl {
            // Once per process: SCRAM sends only a proof, but PLAIN sends the password and
            // OAUTHBEARER the token as they are.
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                log::warn!(
                    "kafka: SASL {} over SASL_PLAINTEXT sends the credentials unencrypted; use SASL_SSL",
                    c.sasl.as_ref().map(|s| s.mechanism_name()).unwrap_or_default()
                )
            });
        }
    }
    if !c.protocol.tls() && (c.tls.certificate.is_some() || c.tls.ca.is_some()) {
        log::warn!(
            "kafka: TLS settings are given but 'security.protocol' = '{}' does not use TLS",
            c.protocol.name()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<SecurityConfig> {
        SecurityConfig::from_properties(pairs.iter().copied())
    }

    #[test]
    fn properties_text() {
        let text = "# a comment\n! another\n\nbootstrap.servers = b1:9092,b2:9092\n\
                    security.protocol:SASL_SSL\n  sasl.mechanism   SCRAM-SHA-512\n\
                    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n  \
                    required username=\"alice\" password=\"p=ss:w\\\"d\";\n\
                    key\\=with\\:escapes = a\\tb\\u0041\nempty=\n";
        let pairs = parse_properties(text).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("bootstrap.servers".into(), "b1:9092,b2:9092".into()),
                ("security.protocol".into(), "SASL_SSL".into()),
                ("sasl.mechanism".into(), "SCRAM-SHA-512".into()),
                (
                    "sasl.jaas.config".into(),
                    "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"p=ss:w\"d\";".into()
                ),
                ("key=with:escapes".into(), "a\tbA".into()),
                ("empty".into(), "".into()),
            ]
        );
        // The JAAS line's escaped quote survives the properties unescaping as a plain quote;
        // written with a doubled backslash it reaches the JAAS parser escaped.
        let text = "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
                    sasl.jaas.config=x.ScramLoginModule required username=\"alice\" password=\"p=ss:w\\\\\"d\";\n";
        let c = SecurityConfig::from_properties(parse_properties(text).unwrap()).unwrap();
        match c.sasl {
            Some(SaslConfig::Scram {
                hash: ScramHash::Sha512,
                username,
                password,
            }) => {
                assert_eq!(username, "alice");
                assert_eq!(password.expose(), "p=ss:w\"d");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_listed_key_is_accepted_and_unknown_ones_named() {
        for o in SECURITY_OPTIONS {
            let value = match o.values {
                Choice(words) => words[0],
                _ => "x",
            };
            let r = parse(&[(o.key, value)]);
            // Some keys need company; none may be refused as unknown.
            if let Err(Error::Option { key, reason }) = &r {
                assert!(
                    !reason.starts_with("not a security option"),
                    "{key}: {reason}"
                );
            }
        }
        let e = parse(&[("ssl.truststore.location", "/x.jks")]).unwrap_err();
        assert!(e.to_string().contains("'ssl.truststore.location'"), "{e}");
        assert!(e.to_string().contains("PEM"), "{e}");
        let e = parse(&[("sasl.pasword", "hunter2")]).unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        // Other keys belong to the caller.
        assert_eq!(
            parse(&[("bootstrap.servers", "x"), ("topic", "t")]).unwrap(),
            SecurityConfig::default()
        );
    }

    #[test]
    fn mechanisms_and_their_requirements() {
        let c = parse(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanisms", "plain"),
            ("sasl.username", "u"),
            ("sasl.password", "hunter2"),
            ("ssl.ca.location", "/ca.pem"),
            ("ssl.endpoint.identification.algorithm", "none"),
        ])
        .unwrap();
        assert_eq!(c.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(c.tls.ca, Some(PemSource::File("/ca.pem".into())));
        assert!(!c.tls.verify_hostname);
        assert_eq!(c.sasl.as_ref().unwrap().mechanism_name(), "PLAIN");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("Secret(***)"), "{shown}");

        let e = parse(&[("security.protocol", "SASL_SSL")]).unwrap_err();
        assert!(e.to_string().contains("'sasl.mechanism'"), "{e}");
        let e = parse(&[
            ("security.protocol", "SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("'security.protocol'"), "{e}");
        let e = parse(&[("security.protocol", "TLS")]).unwrap_err();
        assert!(e.to_string().contains("SASL_SSL"), "{e}");
        let e = parse(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "u"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("'sasl.password'"), "{e}");
        let e = parse(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "GSSAPI"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("OAUTHBEARER"), "{e}");
        let e = parse(&[
            ("security.protocol", "SSL"),
            ("ssl.certificate.location", "/c.pem"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("'ssl.key.location'"), "{e}");
        let e = parse(&[
            ("security.protocol", "SSL"),
            ("ssl.key.location", "/k.pem"),
            ("ssl.key.pem", "-----BEGIN PRIVATE KEY-----secret"),
        ])
        .unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn oauthbearer_sources() {
        let base = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        let c = with(&[
            ("sasl.oauthbearer.token", "eyJ.secret-token."),
            (
                "sasl.oauthbearer.extensions",
                "logicalCluster=lkc-1, identityPoolId=pool-2",
            ),
        ])
        .unwrap();
        let Some(SaslConfig::OAuthBearer(o)) = &c.sasl else {
            panic!("{c:?}")
        };
        assert_eq!(
            o.token,
            TokenSource::Static(Secret::new("eyJ.secret-token."))
        );
        assert_eq!(
            o.extensions,
            vec![
                ("logicalCluster".into(), "lkc-1".into()),
                ("identityPoolId".into(), "pool-2".into())
            ]
        );
        assert!(!format!("{c:?}").contains("secret-token"));
        let c = with(&[
            ("sasl.oauthbearer.method", "OIDC"),
            ("sasl.oauthbearer.client.id", "weir"),
            ("sasl.oauthbearer.client.secret", "s3cr3t"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
            ("sasl.oauthbearer.scope", "kafka"),
        ])
        .unwrap();
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let e = with(&[
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.client.id", "weir"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("'sasl.oauthbearer.client.secret'"),
            "{e}"
        );
        let e = with(&[]).unwrap_err();
        assert!(e.to_string().contains("token"), "{e}");
        let e = with(&[
            ("sasl.oauthbearer.token", "t"),
            ("sasl.oauthbearer.extensions", "auth=x"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("'auth'"), "{e}");
    }

    /// A small deterministic generator of text over an alphabet rich in what the parsers treat
    /// specially (escapes, quotes, separators, multi-byte characters).
    struct Junk(u64);

    impl Junk {
        const ALPHABET: &'static [char] = &[
            'a',
            'Z',
            '0',
            'u',
            '=',
            ':',
            ' ',
            '\t',
            '\\',
            '"',
            ';',
            '#',
            '!',
            '\u{0}',
            'é',
            '€',
            '\u{1F600}',
            '\u{0301}',
        ];

        fn text(&mut self, len: usize, newlines: bool) -> String {
            (0..len)
                .map(|_| {
                    self.0 ^= self.0 << 13;
                    self.0 ^= self.0 >> 7;
                    self.0 ^= self.0 << 17;
                    if newlines && self.0 % 11 == 0 {
                        '\n'
                    } else {
                        Self::ALPHABET[(self.0 % Self::ALPHABET.len() as u64) as usize]
                    }
                })
                .collect()
        }
    }

    /// Credentials over plain http go to loopback only, unless allowed in so many words.
    #[test]
    fn an_oidc_endpoint_over_plain_http_is_refused_off_loopback() {
        let oidc = |url: &str, allow: Option<&str>| {
            let mut pairs = vec![
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "OAUTHBEARER"),
                ("sasl.oauthbearer.method", "oidc"),
                ("sasl.oauthbearer.client.id", "weir"),
                ("sasl.oauthbearer.client.secret", "s3cr3t"),
                ("sasl.oauthbearer.token.endpoint.url", url),
            ];
            if let Some(a) = allow {
                pairs.push(("sasl.oauthbearer.token.endpoint.allow.http", a));
            }
            parse(&pairs)
        };
        let e = oidc("http://idp.example.com/token", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("allow.http") && !e.contains("s3cr3t"), "{e}");
        // User info is refused over https too, and the error does not repeat the URL.
        for url in [
            "http://user:pw-MARK@idp.example.com:8080/token",
            "https://user:pw-MARK@idp.example.com/token",
        ] {
            let e = oidc(url, Some("true")).unwrap_err().to_string();
            assert!(e.contains("user info") && !e.contains("pw-MARK"), "{e}");
        }
        oidc("http://idp.example.com/token", Some("true")).unwrap();
        for ok in [
            "http://127.0.0.1:8080/t",
            "http://localhost/t",
            "http://[::1]:9/t",
            "https://idp/t",
        ] {
            oidc(ok, None).unwrap();
        }
        assert_eq!(url_host("https://u:p@h.example:443/x"), "h.example");
        assert_eq!(url_host("http://[::1]:80/x"), "::1");
    }

    /// Arbitrary text never panics the properties or JAAS parsers, and a password around
    /// arbitrary characters never shows in an error or in `Debug` (a backslash before a
    /// multi-byte character once panicked with the configuration in the message).
    #[test]
    fn arbitrary_input_neither_panics_nor_shows_the_password() {
        const MARK: &str = "hunter2-MARK";
        let mut junk = Junk(0x9E37_79B9_7F4A_7C15);
        for round in 0..20_000 {
            let len = round % 40;
            let _ = parse_properties(&junk.text(len, true));
            let _ = parse_jaas(&junk.text(len, false));
            let (a, b) = (junk.text(round % 7, false), junk.text(round % 5, false));
            let jaas = format!(
                "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"{a}{MARK}{b}\";"
            );
            let direct = parse(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.jaas.config", &jaas),
            ]);
            let text = format!(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
            );
            let from_text = parse_properties(&text).and_then(SecurityConfig::from_properties);
            for outcome in [direct, from_text] {
                let shown = match outcome {
                    Ok(c) => format!("{c:?}"),
                    Err(e) => format!("{e} {e:?}"),
                };
                assert!(
                    !shown.contains(MARK),
                    "{jaas:?} shows the password: {shown}"
                );
            }
        }
        // The case found: a backslash before a multi-byte character.
        let e = parse(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                "m required username=\"u\" password=\"pw\\é\";",
            ),
        ])
        .unwrap();
        match e.sasl {
            Some(SaslConfig::Plain { password, .. }) => assert_eq!(password.expose(), "pwé"),
            other => panic!("{other:?}"),
        }
    }
}
