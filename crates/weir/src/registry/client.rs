//! The HTTP client of a Confluent-compatible schema registry: `GET /schemas/ids/{id}`,
//! `GET /subjects/{subject}/versions/{version}`, with basic or bearer authentication and TLS
//! (the CA, client certificate and key loaders of `weir_kafka::tls`, handed to `ureq`).
//! Requests that fail on the way (no connection, a timeout, a 5xx answer) are retried with a
//! doubling backoff; an answer of the registry (404, 401, ...) is final.

use std::time::Duration;

use weir_kafka::{PemSource, Secret};

/// A registry request that failed. Never shows a password or a token.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer from any URL (connection refused, DNS, TLS, timeout), after every attempt.
    #[error(
        "the schema registry at {url} is unreachable ({attempts} attempts) for {what}: {source}"
    )]
    Unreachable {
        /// The URL last tried.
        url: String,
        /// What was asked (`schema id 42`, `subject quotes-value`).
        what: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The registry does not know what was asked.
    #[error("{what} is not in the schema registry at {url} ({message})")]
    NotFound {
        /// The URL.
        url: String,
        /// What was asked.
        what: String,
        /// The registry's own message.
        message: String,
    },
    /// Any other answer than 200.
    #[error("the schema registry at {url} answered HTTP {status} for {what}: {message}")]
    Status {
        /// The URL.
        url: String,
        /// What was asked.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The registry's own message.
        message: String,
    },
    /// An answer that is not the JSON a registry sends.
    #[error("the schema registry at {url} sent an answer weir cannot read for {what}: {reason}")]
    BadAnswer {
        /// The URL.
        url: String,
        /// What was asked.
        what: String,
        /// Why.
        reason: String,
    },
    /// A `'schema.registry.url'` that is not a URL.
    #[error("'schema.registry.url' = '{url}' is not a URL: {reason}")]
    BadUrl {
        /// The URL, without user info.
        url: String,
        /// Why.
        reason: String,
    },
    /// The TLS material could not be loaded.
    #[error("schema registry TLS: {0}")]
    Tls(#[from] weir_kafka::tls::TlsLoadError),
    /// A schema's references do not resolve (a cycle, or too many).
    #[error("{what}: {reason}")]
    References {
        /// The schema.
        what: String,
        /// Why.
        reason: String,
    },
}

/// A schema as the registry returns it.
#[derive(Debug, Clone)]
pub(crate) struct RegisteredSchema {
    /// Its id (absent in `/schemas/ids/{id}` answers: the caller knows it).
    pub(crate) id: Option<u32>,
    /// `PROTOBUF`, `JSON` or `AVRO` (`AVRO` when the registry leaves it out, as Confluent's does).
    pub(crate) schema_type: String,
    /// The schema text (a `.proto` file's text for protobuf).
    pub(crate) schema: String,
    /// Its references: other subjects' schemas it imports, by the name it imports them by.
    pub(crate) references: Vec<Reference>,
    /// The registry (its URL, without user info) that answered.
    pub(crate) from: String,
}

/// A reference from a schema to another subject's schema.
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    /// The name the schema imports it by (`stocks/base.proto`).
    pub(crate) name: String,
    /// Its subject.
    pub(crate) subject: String,
    /// Its version (`-1`: the latest).
    pub(crate) version: i64,
}

/// How to authenticate to the registry.
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    /// None.
    None,
    /// HTTP basic: `user:password`.
    Basic(Secret),
    /// A bearer token.
    Bearer(Secret),
}

/// TLS settings for an `https://` registry.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegistryTls {
    pub(crate) ca: Option<PemSource>,
    pub(crate) certificate: Option<PemSource>,
    pub(crate) key: Option<PemSource>,
    pub(crate) key_password: Option<Secret>,
}

/// What a registered schema is written in, as the registry's `schemaType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// A `.proto` file's text.
    Protobuf,
    /// An Avro schema's JSON.
    Avro,
}

/// What [`RegistryClient::new`] takes.
#[derive(Clone)]
pub(crate) struct ClientSettings {
    /// Base URLs, tried in order (`http://host:8081`, or with a path prefix).
    pub(crate) urls: Vec<String>,
    pub(crate) auth: Auth,
    pub(crate) tls: RegistryTls,
    /// Per request.
    pub(crate) timeout: Duration,
    /// Attempts after the first, for a registry that cannot be reached.
    pub(crate) retries: u32,
    /// The first wait between attempts; it doubles.
    pub(crate) backoff: Duration,
}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A URL's user info is a password; `Auth` and the TLS key password show no secret.
        let urls: Vec<String> = self.urls.iter().map(|u| display_url(u)).collect();
        f.debug_struct("ClientSettings")
            .field("urls", &urls)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// One of the registry's URLs, as requests go to it: without user info, which becomes the
/// `Authorization` header instead (as Confluent's clients read `user:password@` in a URL), so
/// that no error of the HTTP client can show it.
struct Target {
    /// The URL without user info.
    url: String,
    /// Basic credentials from its user info, used when no other authentication is set.
    user_info: Option<Secret>,
}

impl Target {
    fn of(url: &str) -> Result<Self, RegistryError> {
        let mut parsed = url::Url::parse(url).map_err(|e| RegistryError::BadUrl {
            url: display_url(url),
            reason: e.to_string(),
        })?;
        if parsed.username().is_empty() && parsed.password().is_none() {
            return Ok(Self {
                url: url.to_string(),
                user_info: None,
            });
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let user_info = Secret::new(format!(
            "{}:{}",
            decode(parsed.username()),
            decode(parsed.password().unwrap_or(""))
        ));
        // Both succeed on a URL with a host, which one with user info has.
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        Ok(Self {
            url: parsed.to_string(),
            user_info: Some(user_info),
        })
    }
}

/// A blocking client of one registry.
pub(crate) struct RegistryClient {
    settings: ClientSettings,
    agent: ureq::Agent,
    /// The URLs requests go to, in order, each with its `Authorization` header's value.
    targets: Vec<(String, Option<Secret>)>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.settings.urls.iter().map(|u| display_url(u)).collect();
        f.debug_struct("RegistryClient")
            .field("urls", &urls)
            .finish()
    }
}

impl RegistryClient {
    /// A client; loads the TLS material (an error names the option and the file).
    pub(crate) fn new(settings: ClientSettings) -> Result<Self, RegistryError> {
        let roots = match &settings.tls.ca {
            Some(ca) => weir_kafka::tls::load_certificates(ca, "schema.registry.ssl.ca.location")?
                .iter()
                .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
                .collect(),
            None => rustls_native_certs::load_native_certs()
                .certs
                .iter()
                .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
                .collect::<Vec<_>>(),
        };
        // rustls's own checks first (the CA is usable, the key goes with the certificate):
        // ureq would panic on a certificate rustls refuses.
        weir_kafka::tls::client_config(&weir_kafka::TlsConfig {
            ca: settings.tls.ca.clone(),
            certificate: settings.tls.certificate.clone(),
            key: settings.tls.key.clone(),
            key_password: settings.tls.key_password.clone(),
            verify_hostname: true,
        })
        .map_err(|e| weir_kafka::tls::TlsLoadError {
            key: format!(
                "schema.registry.{}",
                e.key.trim_start_matches("schema.registry.")
            ),
            reason: e.reason,
        })?;
        let client_cert = match (&settings.tls.certificate, &settings.tls.key) {
            (Some(cert), Some(key)) => {
                let chain: Vec<ureq::tls::Certificate<'static>> =
                    weir_kafka::tls::load_certificates(
                        cert,
                        "schema.registry.ssl.certificate.location",
                    )?
                    .iter()
                    .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
                    .collect();
                let key =
                    weir_kafka::tls::load_private_key(key, settings.tls.key_password.as_ref())
                        .map_err(|e| weir_kafka::tls::TlsLoadError {
                            key: format!("schema.registry.{}", e.key),
                            reason: e.reason,
                        })?;
                // ureq takes a key as DER of a kind it does not export, or as PEM: the key
                // (decrypted when it was encrypted) goes back to PEM of its own kind.
                use base64::Engine as _;
                use rustls_pki_types::PrivateKeyDer;
                let label = match &key {
                    PrivateKeyDer::Pkcs1(_) => "RSA PRIVATE KEY",
                    PrivateKeyDer::Sec1(_) => "EC PRIVATE KEY",
                    _ => "PRIVATE KEY",
                };
                let body = base64::engine::general_purpose::STANDARD.encode(key.secret_der());
                let mut pem = format!("-----BEGIN {label}-----\n");
                for line in body.as_bytes().chunks(64) {
                    pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                    pem.push('\n');
                }
                pem.push_str(&format!("-----END {label}-----\n"));
                let key = ureq::tls::PrivateKey::from_pem(pem.as_bytes()).map_err(|e| {
                    weir_kafka::tls::TlsLoadError {
                        key: "schema.registry.ssl.key.location".into(),
                        reason: format!("cannot be used: {e}"),
                    }
                })?;
                Some(ureq::tls::ClientCert::new_with_certs(&chain, key))
            }
            _ => None,
        };
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(weir_kafka::tls::provider())
            .root_certs(ureq::tls::RootCerts::from(roots))
            .client_cert(client_cert)
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(settings.timeout))
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into();
        let basic = |info: &Secret| {
            use base64::Engine as _;
            Secret::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(info.expose())
            ))
        };
        let authorization = match &settings.auth {
            Auth::None => None,
            Auth::Basic(info) => Some(basic(info)),
            Auth::Bearer(token) => Some(Secret::new(format!("Bearer {}", token.expose()))),
        };
        let targets = settings
            .urls
            .iter()
            .map(|u| {
                let t = Target::of(u)?;
                let header = authorization
                    .clone()
                    .or_else(|| t.user_info.as_ref().map(basic));
                Ok((t.url, header))
            })
            .collect::<Result<_, RegistryError>>()?;
        Ok(Self {
            settings,
            agent,
            targets,
        })
    }

    /// `GET /schemas/ids/{id}`.
    pub(crate) fn schema_by_id(&self, id: u32) -> Result<RegisteredSchema, RegistryError> {
        let what = format!("schema id {id}");
        let answer = self.get(&format!("/schemas/ids/{id}"), &what)?;
        let mut s = schema_of(&answer, &what)?;
        s.id = Some(id);
        Ok(s)
    }

    /// `GET /subjects/{subject}/versions/{version}` (`latest` for -1).
    pub(crate) fn version(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<RegisteredSchema, RegistryError> {
        let v = if version < 0 {
            "latest".to_string()
        } else {
            version.to_string()
        };
        let what = format!("subject '{subject}' version {v}");
        let answer = self.get(
            &format!("/subjects/{}/versions/{v}", path_escape(subject)),
            &what,
        )?;
        schema_of(&answer, &what)
    }

    /// `GET /subjects/{subject}/versions`: the subject's version numbers, newest first.
    pub(crate) fn versions(&self, subject: &str) -> Result<Vec<i64>, RegistryError> {
        let what = format!("the versions of subject '{subject}'");
        let answer = self.get(
            &format!("/subjects/{}/versions", path_escape(subject)),
            &what,
        )?;
        let mut versions = answer
            .json
            .as_array()
            .and_then(|a| {
                a.iter()
                    .map(serde_json::Value::as_i64)
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| RegistryError::BadAnswer {
                url: answer.from.clone(),
                what,
                reason: "not a list of version numbers".into(),
            })?;
        versions.sort_unstable_by(|a, b| b.cmp(a));
        Ok(versions)
    }

    /// The schema and every schema it references, recursively, as (import name, text) pairs,
    /// the schema itself last under `root_name`.
    pub(crate) fn with_references(
        &self,
        schema: &RegisteredSchema,
        root_name: &str,
        what: &str,
    ) -> Result<Vec<(String, String)>, RegistryError> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut todo: Vec<Reference> = schema.references.clone();
        while let Some(r) = todo.pop() {
            if out.iter().any(|(n, _)| *n == r.name) {
                continue;
            }
            if out.len() > 1000 {
                return Err(RegistryError::References {
                    what: what.to_string(),
                    reason: "more than 1000 references".into(),
                });
            }
            let s = self.version(&r.subject, r.version)?;
            todo.extend(s.references.iter().cloned());
            out.push((r.name, s.schema));
        }
        out.push((root_name.to_string(), schema.schema.clone()));
        Ok(out)
    }

    /// One GET on each URL in turn, with retries for a registry that cannot be reached.
    fn get(&self, path: &str, what: &str) -> Result<Answer, RegistryError> {
        self.request(path, what, None)
    }

    /// `POST /subjects/{subject}/versions`: registers a schema of `kind` (`.proto` text, or an
    /// Avro schema's JSON) that imports `references` under `subject`, and returns its id and
    /// version. A schema the subject already holds keeps its id and version, so a retry or a
    /// restart registers nothing new.
    pub(crate) fn register(
        &self,
        subject: &str,
        kind: SchemaType,
        schema: &str,
        references: &[Reference],
    ) -> Result<(u32, i64), RegistryError> {
        let what = format!("registering a schema under subject '{subject}'");
        let kind = match kind {
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Avro => "AVRO",
        };
        let refs: Vec<serde_json::Value> = references
            .iter()
            .map(
                |r| serde_json::json!({"name": r.name, "subject": r.subject, "version": r.version}),
            )
            .collect();
        let mut body = serde_json::json!({ "schemaType": kind, "schema": schema });
        if !refs.is_empty() {
            body["references"] = serde_json::Value::Array(refs.clone());
        }
        let path = format!("/subjects/{}", path_escape(subject));
        let answer = self.request(&format!("{path}/versions"), &what, Some(&body.to_string()))?;
        let id = answer
            .json
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| RegistryError::BadAnswer {
                url: answer.from.clone(),
                what: what.clone(),
                reason: "no 'id'".into(),
            })?;
        // The register answer holds the id only; the subject's lookup gives the version.
        let what = format!("looking up the version of schema id {id} under subject '{subject}'");
        let answer = self.request(&path, &what, Some(&body.to_string()))?;
        let version = answer
            .json
            .get("version")
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| RegistryError::BadAnswer {
                url: answer.from.clone(),
                what,
                reason: "no 'version'".into(),
            })?;
        Ok((id, version))
    }

    /// One request (a GET, or a POST of `body`) on each URL in turn, with retries for a
    /// registry that cannot be reached.
    fn request(&self, path: &str, what: &str, body: Option<&str>) -> Result<Answer, RegistryError> {
        let mut wait = self.settings.backoff;
        let mut attempts = 0;
        loop {
            let mut last = None;
            for (base, authorization) in &self.targets {
                attempts += 1;
                match self.request_once(base, authorization.as_ref(), path, what, body) {
                    Ok(json) => {
                        return Ok(Answer {
                            json,
                            from: display_url(base),
                        })
                    }
                    Err(e @ RegistryError::Unreachable { .. }) => last = Some(e),
                    Err(e) => return Err(e),
                }
            }
            let Some(RegistryError::Unreachable { url, source, .. }) = last else {
                unreachable!("every URL was tried and failed");
            };
            if attempts
                > self
                    .settings
                    .retries
                    .saturating_mul(self.settings.urls.len() as u32)
            {
                return Err(RegistryError::Unreachable {
                    url,
                    what: what.to_string(),
                    attempts,
                    source,
                });
            }
            std::thread::sleep(wait);
            wait = wait.saturating_mul(2).min(Duration::from_secs(10));
        }
    }

    fn request_once(
        &self,
        base: &str,
        authorization: Option<&Secret>,
        path: &str,
        what: &str,
        body: Option<&str>,
    ) -> Result<serde_json::Value, RegistryError> {
        const ACCEPT: &str = "application/vnd.schemaregistry.v1+json, application/json";
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let shown = display_url(base);
        let unreachable =
            |e: Box<dyn std::error::Error + Send + Sync>| RegistryError::Unreachable {
                url: shown.clone(),
                what: what.to_string(),
                attempts: 1,
                source: e,
            };
        let answer = match body {
            None => {
                let mut req = self.agent.get(&url).header("Accept", ACCEPT);
                if let Some(a) = authorization {
                    req = req.header("Authorization", a.expose());
                }
                req.call()
            }
            Some(body) => {
                let mut req = self
                    .agent
                    .post(&url)
                    .header("Accept", ACCEPT)
                    .header("Content-Type", "application/vnd.schemaregistry.v1+json");
                if let Some(a) = authorization {
                    req = req.header("Authorization", a.expose());
                }
                req.send(body)
            }
        };
        let mut resp = answer.map_err(|e| unreachable(Box::new(e)))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| unreachable(Box::new(e)))?;
        let json: Option<serde_json::Value> = serde_json::from_str(&body).ok();
        // The registry's own message, shortened: every message with a schema id that failed
        // carries it.
        let message = || {
            json.as_ref()
                .and_then(|j| j.get("message"))
                .and_then(|m| m.as_str())
                .map_or_else(|| format!("{} bytes of answer", body.len()), shorten)
        };
        match status {
            200 => {}
            404 => {
                return Err(RegistryError::NotFound {
                    url: shown,
                    what: what.to_string(),
                    message: message(),
                })
            }
            // A registry that is starting, overloaded or behind a proxy without a backend:
            // worth another attempt.
            502..=504 => {
                return Err(unreachable(
                    std::io::Error::other(format!("HTTP {status}: {}", message())).into(),
                ));
            }
            _ => {
                return Err(RegistryError::Status {
                    url: shown,
                    what: what.to_string(),
                    status,
                    message: message(),
                })
            }
        }
        json.ok_or_else(|| RegistryError::BadAnswer {
            url: shown,
            what: what.to_string(),
            reason: "not JSON".into(),
        })
    }
}

/// A registry's JSON answer, and the URL (without user info) of the registry that gave it.
struct Answer {
    json: serde_json::Value,
    from: String,
}

/// The schema in a registry's answer (to `what`, for messages).
fn schema_of(answer: &Answer, what: &str) -> Result<RegisteredSchema, RegistryError> {
    let json = &answer.json;
    let bad = |reason: &str| RegistryError::BadAnswer {
        url: answer.from.clone(),
        what: what.to_string(),
        reason: reason.to_string(),
    };
    let schema = json
        .get("schema")
        .and_then(|s| s.as_str())
        .ok_or_else(|| bad("no 'schema'"))?
        .to_string();
    let references = match json.get("references").and_then(|r| r.as_array()) {
        None => Vec::new(),
        Some(refs) => refs
            .iter()
            .map(|r| {
                Some(Reference {
                    name: r.get("name")?.as_str()?.to_string(),
                    subject: r.get("subject")?.as_str()?.to_string(),
                    version: r.get("version")?.as_i64()?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a reference without name, subject or version"))?,
    };
    Ok(RegisteredSchema {
        id: json
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .and_then(|i| u32::try_from(i).ok()),
        schema_type: json
            .get("schemaType")
            .and_then(|s| s.as_str())
            .unwrap_or("AVRO")
            .to_string(),
        schema,
        references,
        from: answer.from.clone(),
    })
}

/// A URL without the `user:password@` part some write into it.
pub(crate) fn display_url(url: &str) -> String {
    let Some(s) = url.find("://") else {
        return url.to_string();
    };
    // Cut at the last '@': a password may itself hold '@' or '/', and a base URL's path rarely
    // holds an '@' (cutting one hides a little of the path, never shows a secret).
    match url[s + 3..].rfind('@') {
        Some(at) => format!("{}{}", &url[..s + 3], &url[s + 3 + at + 1..]),
        None => url.to_string(),
    }
}

/// Percent-escapes a subject for a URL path (`stocks/base.proto` -> `stocks%2Fbase.proto`).
fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The longest registry message kept in an error, in bytes.
const MAX_MESSAGE: usize = 300;

/// `message`, cut at a character boundary to at most [`MAX_MESSAGE`] bytes and marked so.
fn shorten(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut cut = MAX_MESSAGE;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", message.get(..cut).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_message_is_shortened_at_a_character_boundary() {
        assert_eq!(shorten("schema not found"), "schema not found");
        // 299 ASCII bytes, then 'é' (2 bytes) across the limit.
        let long = format!("{}é{}", "m".repeat(299), "n".repeat(500));
        assert_eq!(shorten(&long), format!("{}...", "m".repeat(299)));
    }

    fn client_of(url: &str, auth: Auth) -> RegistryClient {
        RegistryClient::new(ClientSettings {
            urls: vec![url.into()],
            auth,
            tls: RegistryTls::default(),
            timeout: Duration::from_secs(1),
            retries: 0,
            backoff: Duration::from_millis(1),
        })
        .unwrap()
    }

    fn client(auth: Auth) -> RegistryClient {
        client_of("http://127.0.0.1:1", auth)
    }

    fn header(c: &RegistryClient) -> Option<&str> {
        c.targets[0].1.as_ref().map(Secret::expose)
    }

    #[test]
    fn basic_and_bearer_authorization_headers() {
        let basic = client(Auth::Basic(Secret::new("weir:s3cret")));
        assert_eq!(header(&basic), Some("Basic d2VpcjpzM2NyZXQ="));
        let bearer = client(Auth::Bearer(Secret::new("tok")));
        assert_eq!(header(&bearer), Some("Bearer tok"));
        assert!(header(&client(Auth::None)).is_none());
        // Neither shows in the client's debug output.
        assert!(!format!("{basic:?}").contains("s3cret"));
    }

    /// User info in a URL becomes the Authorization header (unless another authentication
    /// is set) and leaves the URL requests go to, so that no error of the HTTP client shows it.
    #[test]
    fn a_urls_user_info_becomes_the_authorization_header() {
        let c = client_of("http://weir:s3cr%40t@127.0.0.1:1/api", Auth::None);
        assert_eq!(c.targets[0].0, "http://127.0.0.1:1/api");
        // base64("weir:s3cr@t")
        assert_eq!(header(&c), Some("Basic d2VpcjpzM2NyQHQ="));
        let e = c.schema_by_id(1).unwrap_err();
        let shown = format!("{e} {e:?} {c:?} {:?}", c.settings);
        assert!(!shown.contains("s3cr"), "{shown}");
        let explicit = client_of("http://a:b@127.0.0.1:1", Auth::Bearer(Secret::new("tok")));
        assert_eq!(header(&explicit), Some("Bearer tok"));
        let Err(e) = RegistryClient::new(ClientSettings {
            urls: vec!["http://weir:s3cr@t@[bad".into()],
            ..c.settings.clone()
        }) else {
            panic!("a bad URL was taken");
        };
        assert!(!e.to_string().contains("s3cr"), "{e}");
    }

    #[test]
    fn urls_lose_their_credentials_and_subjects_are_escaped() {
        assert_eq!(display_url("https://u:p@reg:8081/x"), "https://reg:8081/x");
        assert_eq!(display_url("http://reg:8081"), "http://reg:8081");
        assert_eq!(display_url("https://u:p@ss@reg/x"), "https://reg/x");
        assert_eq!(display_url("https://u:p/w@reg:8081"), "https://reg:8081");
        assert_eq!(path_escape("stocks/base.proto"), "stocks%2Fbase.proto");
    }
}
