//! Loading TLS material and building a rustls client configuration, reusable by any client of
//! weir (the broker connections here; an HTTPS client such as the schema registry's with
//! `ureq`):
//!
//! * [`root_store`]: the CA certificates to trust, from PEM or the system's trust store;
//! * [`load_certificates`]: a certificate chain from PEM;
//! * [`load_private_key`]: a private key from PEM (PKCS#8, PKCS#1, SEC1, or encrypted PKCS#8
//!   with a password);
//! * [`client_config`]: a rustls [`ClientConfig`] from a [`TlsConfig`], with the `ring`
//!   provider.
//!
//! The system's roots come from `rustls-native-certs` (the OS trust store: `/etc/ssl/certs` and
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` on Linux), not from `webpki-roots`' compiled-in copy of
//! Mozilla's list: "the system's roots" is what librdkafka and the Java client trust by
//! default, a corporate CA installed on the machine is honoured, and the list is as current as
//! the OS keeps it.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
    ServerName, UnixTime,
};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{PemSource, Secret, TlsConfig};

/// A TLS material loading error: which option (`ssl.ca.location`, ...) and why (with the
/// file's path). Never quotes a key or a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{key}': {reason}")]
pub struct TlsLoadError {
    /// The option (`ssl.key.location`), or `TLS` for the setup itself.
    pub key: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl From<TlsLoadError> for crate::Error {
    fn from(e: TlsLoadError) -> Self {
        crate::Error::Option {
            key: e.key,
            reason: e.reason,
        }
    }
}

/// `key` and the place (`(path)` for a file) prefixed to `reason`.
fn err(key: &str, reason: impl Into<String>) -> TlsLoadError {
    let (key, place) = match key.split_once(' ') {
        Some((k, place)) => (k, format!("{place} ")),
        None => (key, String::new()),
    };
    TlsLoadError {
        key: key.trim_matches('\'').to_string(),
        reason: format!("{place}{}", reason.into()),
    }
}

/// The `ring` crypto provider every rustls configuration of weir uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(src: &PemSource, option: &str) -> Result<(Vec<u8>, String), TlsLoadError> {
    match src {
        PemSource::File(p) => {
            let what = format!("'{option}' ({})", p.display());
            std::fs::read(p)
                .map(|b| (b, what.clone()))
                .map_err(|e| err(&what, format!("cannot read: {e}")))
        }
        PemSource::Inline(s) => {
            let option = option.replace(".location", ".pem");
            Ok((s.expose().as_bytes().to_vec(), format!("'{option}'")))
        }
    }
}

/// The certificates of a PEM document (the `CERTIFICATE` sections; other sections are
/// skipped). `option` names the source in errors.
pub fn load_certificates(
    src: &PemSource,
    option: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsLoadError> {
    let (pem, what) = read_pem(src, option)?;
    let mut out = Vec::new();
    for item in CertificateDer::pem_slice_iter(&pem) {
        out.push(item.map_err(|e| err(&what, format!("malformed PEM: {e}")))?);
    }
    if out.is_empty() {
        return Err(err(
            &what,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(out)
}

/// The roots to trust: the CA certificates of `ca`, or the system's trust store when `None`.
pub fn root_store(ca: Option<&PemSource>) -> Result<RootCertStore, TlsLoadError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(src) => {
            let certs = load_certificates(src, "ssl.ca.location")?;
            let (added, ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(err(
                    "'ssl.ca.location'",
                    format!("none of its {ignored} certificates can be used as a trust anchor"),
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or("it is empty".to_string(), |e| e.to_string());
                return Err(err(
                    "ssl.ca.location (unset: the system's trust store)",
                    format!(
                        "no CA certificate could be loaded ({why}); install ca-certificates or set 'ssl.ca.location'"
                    ),
                ));
            }
        }
    }
    Ok(roots)
}

/// A private key from PEM: `PRIVATE KEY` (PKCS#8), `RSA PRIVATE KEY` (PKCS#1), `EC PRIVATE
/// KEY` (SEC1), or `ENCRYPTED PRIVATE KEY` (PKCS#8 encrypted with PBES2) opened with
/// `password`. The first key in the document is used.
pub fn load_private_key(
    src: &PemSource,
    password: Option<&Secret>,
) -> Result<PrivateKeyDer<'static>, TlsLoadError> {
    let (pem, what) = read_pem(src, "ssl.key.location")?;
    for item in <(SectionKind, Vec<u8>)>::pem_slice_iter(&pem) {
        let (kind, der) = item.map_err(|e| err(&what, format!("malformed PEM: {e}")))?;
        match kind {
            SectionKind::PrivateKey => return Ok(PrivatePkcs8KeyDer::from(der).into()),
            SectionKind::RsaPrivateKey => {
                if is_legacy_encrypted(&pem) {
                    return Err(err(
                        &what,
                        "the key is encrypted in OpenSSL's legacy format, which is not read: convert it with `openssl pkcs8 -topk8 -v2 aes-256-cbc`",
                    ));
                }
                return Ok(PrivatePkcs1KeyDer::from(der).into());
            }
            SectionKind::EcPrivateKey => return Ok(PrivateSec1KeyDer::from(der).into()),
            _ => {}
        }
    }
    // Encrypted PKCS#8 is not a section rustls-pki-types knows; read it with `pkcs8`.
    let text = String::from_utf8_lossy(&pem);
    if let Some(start) = text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        let Some(password) = password else {
            return Err(err(&what, "the key is encrypted: set 'ssl.key.password'"));
        };
        let end_marker = "-----END ENCRYPTED PRIVATE KEY-----";
        let end = text[start..]
            .find(end_marker)
            .map(|e| start + e + end_marker.len())
            .ok_or_else(|| err(&what, "unterminated ENCRYPTED PRIVATE KEY"))?;
        use pkcs8::der::Decode;
        let (_, doc) = pkcs8::SecretDocument::from_pem(&text[start..end])
            .map_err(|e| err(&what, format!("malformed encrypted key: {e}")))?;
        let info = pkcs8::EncryptedPrivateKeyInfo::from_der(doc.as_bytes())
            .map_err(|e| err(&what, format!("malformed encrypted key: {e}")))?;
        let plain = info.decrypt(password.expose().as_bytes()).map_err(|e| {
            err(
                &what,
                format!("cannot decrypt the key with 'ssl.key.password' (wrong password?): {e}"),
            )
        })?;
        return Ok(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec()).into());
    }
    Err(err(&what, "holds no PEM private key"))
}

fn is_legacy_encrypted(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("Proc-Type: 4,ENCRYPTED")
}

/// A rustls client configuration for `cfg`: its roots, its client certificate when one is
/// set, and host name checking unless `verify_hostname` is off (the chain and its dates are
/// checked either way). TLS 1.2 and 1.3, the `ring` provider.
pub fn client_config(cfg: &TlsConfig) -> Result<Arc<ClientConfig>, TlsLoadError> {
    build(cfg, rustls::DEFAULT_VERSIONS).map(Arc::new)
}

fn build(
    cfg: &TlsConfig,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<ClientConfig, TlsLoadError> {
    let provider = provider();
    let roots = Arc::new(root_store(cfg.ca.as_ref())?);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| err("TLS", e.to_string()))?;
    let builder = if cfg.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| err("'ssl.ca.location'", e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyHostName(inner)))
    };
    let config = match (&cfg.certificate, &cfg.key) {
        (Some(cert), Some(key)) => {
            let chain = load_certificates(cert, "ssl.certificate.location")?;
            let key = load_private_key(key, cfg.key_password.as_ref())?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                err(
                    "'ssl.key.location'",
                    format!("does not go with 'ssl.certificate.location': {e}"),
                )
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// The server name to check a broker's certificate against: the host of `host:port` (an IP
/// address or a DNS name).
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsLoadError> {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| err(&format!("brokers ({addr})"), e.to_string()))
}

/// Checks the chain, dates and signatures like the standard verifier, and accepts any host
/// name (`'ssl.endpoint.identification.algorithm'` = `none`).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Explains a rustls error of a handshake with a broker in words, with the option that
/// changes the outcome.
/// True when `e` refuses the session itself (a certificate, a protocol version, a required
/// client certificate): the same on every retry. In TLS 1.3 the broker's verdict on the client
/// certificate arrives after the client's side of the handshake is done, as an alert on the
/// first read, so this is asked of errors on open connections too. Anything else there (a
/// record that does not decrypt, another alert) is a fault of the stream, worth a reconnect.
pub(crate) fn refuses_session(e: &rustls::Error) -> bool {
    use rustls::AlertDescription as A;
    match e {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => true,
        rustls::Error::AlertReceived(a) => matches!(
            a,
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::DecryptError
                | A::HandshakeFailure
                | A::ProtocolVersion
                | A::InsufficientSecurity
        ),
        _ => false,
    }
}

pub(crate) fn explain(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C};
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => "the broker's certificate is not trusted (its issuer is not among the trusted CAs): set 'ssl.ca.location' to the CA that signed it".into(),
            C::Expired | C::ExpiredContext { .. } => format!("the broker's certificate has expired ({c:?})"),
            C::NotValidYet | C::NotValidYetContext { .. } => format!("the broker's certificate is not valid yet ({c:?})"),
            C::NotValidForName => "the broker's certificate does not name the host connected to ('ssl.endpoint.identification.algorithm' = 'none' skips this check)".into(),
            C::NotValidForNameContext { expected, presented } => format!(
                "the broker's certificate is for {}, not {expected:?} ('ssl.endpoint.identification.algorithm' = 'none' skips this check)",
                if presented.is_empty() { "no name".to_string() } else { presented.join(", ") }
            ),
            C::Revoked => "the broker's certificate is revoked".into(),
            C::BadSignature | C::BadEncoding => format!("the broker's certificate is malformed or badly signed ({c:?})"),
            other => format!("the broker's certificate is refused: {other:?}"),
        },
        rustls::Error::AlertReceived(A::CertificateRequired) => "the broker requires a client certificate: set 'ssl.certificate.location' and 'ssl.key.location'".into(),
        rustls::Error::AlertReceived(a @ (A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::DecryptError)) => format!(
            "the broker refused the client certificate ({a:?}): it must be signed by a CA the broker trusts"
        ),
        rustls::Error::AlertReceived(A::HandshakeFailure) => "the broker refused the handshake (no common protocol version or cipher, or a client certificate is required: 'ssl.certificate.location')".into(),
        rustls::Error::AlertReceived(a) => format!("the broker sent the alert {a:?}"),
        rustls::Error::InvalidMessage(m) => format!("the broker's answer is not TLS ({m:?})"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused session fails at once with its reason; a fault of an open stream is retried
    /// (the consumer reconnects and counts it) instead of ending the run.
    #[test]
    fn session_refusals_are_final_and_stream_faults_are_retried() {
        use rustls::AlertDescription as A;
        assert!(refuses_session(&rustls::Error::AlertReceived(
            A::CertificateRequired
        )));
        assert!(refuses_session(&rustls::Error::InvalidCertificate(
            rustls::CertificateError::Expired
        )));
        assert!(!refuses_session(&rustls::Error::DecryptError));
        assert!(!refuses_session(&rustls::Error::AlertReceived(
            A::BadRecordMac
        )));
        let stream = crate::error::Error::TlsStream {
            broker: "b:9093".into(),
            reason: "a record did not decrypt".into(),
        };
        assert!(stream.is_transient() && !stream.is_security());
        let refused = crate::error::Error::Tls {
            broker: "b:9093".into(),
            reason: "refused".into(),
        };
        assert!(!refused.is_transient() && refused.is_security());
    }
}
