//! OAUTHBEARER tokens: a fixed token, a token file read again for every authentication, or the
//! OIDC client-credentials flow (a token from the endpoint, fetched again once 80% of its
//! lifetime has passed). One cache per consumer or producer, shared by its connections.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

use super::{OidcConfig, Secret, TokenSource};
use crate::error::{Error, Result};

/// A token and what is known of it.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub value: Secret,
    /// The `exp` claim (or the endpoint's `expires_in`), ms since the epoch.
    pub expires_at_ms: Option<i64>,
    /// The `sub` claim: the principal the broker will see.
    pub principal: Option<String>,
    /// When this token should be replaced (OIDC), ms since the epoch.
    refresh_at_ms: Option<i64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn token_error(reason: impl Into<String>) -> Error {
    Error::Token {
        reason: reason.into(),
    }
}

/// The `sub` and `exp` claims of a JWT (`header.payload.signature`, base64url), if it is one.
/// The signature is not checked: the broker does that.
pub(crate) fn jwt_claims(token: &str) -> (Option<String>, Option<i64>) {
    let mut parts = token.split('.');
    let (Some(_), Some(payload)) = (parts.next(), parts.next()) else {
        return (None, None);
    };
    let Ok(json) =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('='))
    else {
        return (None, None);
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&json) else {
        return (None, None);
    };
    let sub = v.get("sub").and_then(|s| s.as_str()).map(str::to_string);
    let exp = v
        .get("exp")
        .and_then(serde_json::Value::as_f64)
        .map(|s| (s * 1000.0) as i64);
    (sub, exp)
}

/// Where tokens come from, and the last one while it is fresh.
pub(crate) struct TokenCache {
    source: TokenSource,
    last: Mutex<Option<Token>>,
}

impl TokenCache {
    pub fn new(source: TokenSource) -> Self {
        Self {
            source,
            last: Mutex::new(None),
        }
    }

    /// Who the last token names, if known.
    pub fn principal(&self) -> Option<String> {
        self.last
            .lock()
            .ok()
            .and_then(|t| t.as_ref().and_then(|t| t.principal.clone()))
    }

    /// The token source in words (never the token).
    pub fn describe_source(&self) -> String {
        match &self.source {
            TokenSource::Static(_) => "the token of 'sasl.oauthbearer.token'".into(),
            TokenSource::File(p) => format!("the token in {}", p.display()),
            TokenSource::Oidc(o) => format!("client '{}'", o.client_id),
        }
    }

    /// A token to authenticate with now.
    pub fn token(&self) -> Result<Token> {
        let now = now_ms();
        let mut last = self
            .last
            .lock()
            .map_err(|_| token_error("token cache poisoned"))?;
        let token = match &self.source {
            TokenSource::Static(t) => {
                let (principal, expires_at_ms) = jwt_claims(t.expose());
                if let Some(exp) = expires_at_ms.filter(|&e| e <= now) {
                    return Err(token_error(format!(
                        "the token of 'sasl.oauthbearer.token' expired {} s ago and cannot be renewed; use 'sasl.oauthbearer.token.file' or 'sasl.oauthbearer.method' = 'oidc'",
                        now.saturating_sub(exp) / 1000
                    )));
                }
                Token {
                    value: t.clone(),
                    expires_at_ms,
                    principal,
                    refresh_at_ms: None,
                }
            }
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    token_error(format!(
                        "cannot read 'sasl.oauthbearer.token.file' ({}): {e}",
                        path.display()
                    ))
                })?;
                let value = text.trim().to_string();
                if value.is_empty() {
                    return Err(token_error(format!(
                        "'sasl.oauthbearer.token.file' ({}) is empty",
                        path.display()
                    )));
                }
                let (principal, expires_at_ms) = jwt_claims(&value);
                if let Some(exp) = expires_at_ms.filter(|&e| e <= now) {
                    return Err(token_error(format!(
                        "the token in {} expired {} s ago; whatever renews the file has not",
                        path.display(),
                        now.saturating_sub(exp) / 1000
                    )));
                }
                Token {
                    value: Secret::new(value),
                    expires_at_ms,
                    principal,
                    refresh_at_ms: None,
                }
            }
            TokenSource::Oidc(cfg) => {
                if let Some(t) = last
                    .as_ref()
                    .filter(|t| t.refresh_at_ms.is_some_and(|r| now < r))
                {
                    return Ok(t.clone());
                }
                fetch_oidc(cfg, now)?
            }
        };
        *last = Some(token.clone());
        Ok(token)
    }
}

/// One client-credentials request to the token endpoint.
fn fetch_oidc(cfg: &OidcConfig, now: i64) -> Result<Token> {
    let endpoint = &cfg.token_endpoint;
    let fail = |why: String| token_error(format!("token endpoint {endpoint}: {why}"));
    let tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(super::tls::provider())
        .root_certs(system_roots_for_ureq())
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .into();
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        form_encode(&cfg.client_id),
        form_encode(cfg.client_secret.expose())
    ));
    let mut form = vec![("grant_type", "client_credentials")];
    if let Some(scope) = &cfg.scope {
        form.push(("scope", scope.as_str()));
    }
    let mut resp = agent
        .post(endpoint)
        .header("Authorization", &format!("Basic {basic}"))
        .header("Accept", "application/json")
        .send_form(form)
        .map_err(|e| fail(e.to_string()))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .map_err(|e| fail(format!("cannot read the answer: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(&body).map_err(|_| {
        fail(format!(
            "HTTP {status}, and the answer is not JSON ({} bytes)",
            body.len()
        ))
    })?;
    if status != 200 {
        let error = json.get("error").and_then(|e| e.as_str()).unwrap_or("?");
        let description = json
            .get("error_description")
            .and_then(|e| e.as_str())
            .unwrap_or("");
        return Err(fail(format!(
            "HTTP {status}: {error} {description} (client '{}')",
            cfg.client_id
        )));
    }
    let value = json
        .get("access_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| fail("the answer has no access_token".into()))?
        .to_string();
    let (principal, exp) = jwt_claims(&value);
    let expires_at_ms = json
        .get("expires_in")
        .and_then(serde_json::Value::as_f64)
        .map(|s| now.saturating_add((s * 1000.0) as i64))
        .or(exp);
    // Fetch a new one once 80% of the lifetime has passed (an hour when it is not known), and
    // never hand out one with less than 10 s left: a session opened with it would have to be
    // renewed at once.
    let refresh_at_ms = Some(match expires_at_ms {
        Some(e) => now
            .saturating_add(e.saturating_sub(now) / 5 * 4)
            .min(e.saturating_sub(10_000)),
        None => now + 3_600_000,
    });
    Ok(Token {
        value: Secret::new(value),
        expires_at_ms,
        principal,
        refresh_at_ms,
    })
}

/// `application/x-www-form-urlencoded` escaping (RFC 6749 section 2.3.1 asks for it in the
/// Basic credentials).
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The system's roots as ureq certificates (an `http://` endpoint needs none).
fn system_roots_for_ureq() -> ureq::tls::RootCerts {
    let found = rustls_native_certs::load_native_certs();
    let certs: Vec<ureq::tls::Certificate<'static>> = found
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    ureq::tls::RootCerts::from(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsecured_jwt(sub: &str, exp_s: i64) -> String {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!(
            "{}.{}.",
            enc(r#"{"alg":"none"}"#),
            enc(&format!(r#"{{"sub":"{sub}","iat":1,"exp":{exp_s}}}"#))
        )
    }

    #[test]
    fn claims_and_expiry() {
        let t = unsecured_jwt("alice", 4_000_000_000);
        assert_eq!(
            jwt_claims(&t),
            (Some("alice".into()), Some(4_000_000_000_000))
        );
        assert_eq!(jwt_claims("opaque-token"), (None, None));
        let c = TokenCache::new(TokenSource::Static(Secret::new(unsecured_jwt("bob", 1))));
        let e = c.token().unwrap_err().to_string();
        assert!(e.contains("expired") && !e.contains("eyJ"), "{e}");
        assert_eq!(form_encode("a b+c/é"), "a+b%2Bc%2F%C3%A9");
    }

    #[test]
    fn token_file_is_read_again_each_time() {
        let dir = std::env::temp_dir().join(format!("weir-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, unsecured_jwt("first", 4_000_000_000)).unwrap();
        let c = TokenCache::new(TokenSource::File(path.clone()));
        assert_eq!(c.token().unwrap().principal.as_deref(), Some("first"));
        std::fs::write(
            &path,
            format!("{}\n", unsecured_jwt("second", 4_000_000_000)),
        )
        .unwrap();
        assert_eq!(c.token().unwrap().principal.as_deref(), Some("second"));
        std::fs::write(&path, "").unwrap();
        assert!(c.token().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
