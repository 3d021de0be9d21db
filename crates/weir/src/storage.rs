//! Object storage: the store behind a `'path'` URL (`s3://`, `gs://`, `az://`, `abfss://`), for
//! sinks and for the file source alike, opened through the `object_store` crate DataFusion
//! already builds. Credentials and endpoints come from the declared `s3.*`, `gcs.*` and
//! `azure.*` options and, when those are not given, from each cloud's standard environment
//! variables and credential chain (object_store's `from_env`).

use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{ObjectStore, RetryConfig};
use url::Url;
use weir_codec::{OptionError, OptionKind, OptionSpec, Options};

/// The object-storage options of every `'path'` that takes a URL: a sink's, the file source's.
pub(crate) const STORAGE_OPTIONS: &[OptionSpec] = &[
    S3_ENDPOINT,
    S3_REGION,
    S3_ACCESS_KEY_ID,
    S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN,
    S3_ALLOW_HTTP,
    S3_VIRTUAL_HOSTED_STYLE,
    GCS_SERVICE_ACCOUNT_PATH,
    GCS_SERVICE_ACCOUNT_KEY,
    AZURE_ACCOUNT_NAME,
    AZURE_ACCOUNT_KEY,
    AZURE_CLIENT_ID,
    AZURE_CLIENT_SECRET,
    AZURE_TENANT_ID,
    STORAGE_RETRIES,
    STORAGE_TIMEOUT,
];

const S3_ENDPOINT: OptionSpec = OptionSpec::new(
    "s3.endpoint",
    OptionKind::Text,
    "s3: the endpoint of an S3-compatible store (`https://host:port`); AWS's regional endpoint \
     when absent (or `AWS_ENDPOINT_URL`)",
);
const S3_REGION: OptionSpec = OptionSpec::new(
    "s3.region",
    OptionKind::Text,
    "s3: the region (or `AWS_REGION`, `AWS_DEFAULT_REGION`)",
);
const S3_ACCESS_KEY_ID: OptionSpec = OptionSpec::new(
    "s3.access.key.id",
    OptionKind::Text,
    "s3: the access key id; without it, the AWS environment and credential chain",
);
const S3_SECRET_ACCESS_KEY: OptionSpec = OptionSpec::new(
    "s3.secret.access.key",
    OptionKind::Text,
    "s3: the secret access key (write `${env:NAME}` or `${file:PATH}`)",
)
.secret();
const S3_SESSION_TOKEN: OptionSpec = OptionSpec::new(
    "s3.session.token",
    OptionKind::Text,
    "s3: a session token for temporary credentials",
)
.secret();
const S3_ALLOW_HTTP: OptionSpec = OptionSpec::new(
    "s3.allow.http",
    OptionKind::Bool,
    "s3: allow an `http://` endpoint on a host other than loopback (credentials and data then \
     travel unencrypted); loopback endpoints are always allowed",
)
.default_value("false");
const S3_VIRTUAL_HOSTED_STYLE: OptionSpec = OptionSpec::new(
    "s3.virtual.hosted.style",
    OptionKind::Bool,
    "s3: address the bucket as `bucket.host` rather than `host/bucket`",
)
.default_value("false");
const GCS_SERVICE_ACCOUNT_PATH: OptionSpec = OptionSpec::new(
    "gcs.service.account.path",
    OptionKind::Path,
    "gs: a service account JSON file; without it, `GOOGLE_APPLICATION_CREDENTIALS` or the \
     instance's credentials",
);
const GCS_SERVICE_ACCOUNT_KEY: OptionSpec = OptionSpec::new(
    "gcs.service.account.key",
    OptionKind::Text,
    "gs: the service account JSON itself",
)
.secret();
const AZURE_ACCOUNT_NAME: OptionSpec = OptionSpec::new(
    "azure.storage.account.name",
    OptionKind::Text,
    "az/abfss: the storage account (or `AZURE_STORAGE_ACCOUNT_NAME`)",
);
const AZURE_ACCOUNT_KEY: OptionSpec = OptionSpec::new(
    "azure.storage.account.key",
    OptionKind::Text,
    "az/abfss: the storage account's access key",
)
.secret();
const AZURE_CLIENT_ID: OptionSpec = OptionSpec::new(
    "azure.client.id",
    OptionKind::Text,
    "az/abfss: a service principal's client id",
);
const AZURE_CLIENT_SECRET: OptionSpec = OptionSpec::new(
    "azure.client.secret",
    OptionKind::Text,
    "az/abfss: the service principal's secret",
)
.secret();
const AZURE_TENANT_ID: OptionSpec = OptionSpec::new(
    "azure.tenant.id",
    OptionKind::Text,
    "az/abfss: the service principal's tenant",
);
const STORAGE_RETRIES: OptionSpec = OptionSpec::new(
    "storage.max.retries",
    OptionKind::Count,
    "object storage: retries of a failed or throttled request (with exponential backoff) \
     before the source or sink fails",
)
.default_value("10");
const STORAGE_TIMEOUT: OptionSpec = OptionSpec::new(
    "storage.retry.timeout",
    OptionKind::Duration,
    "object storage: the longest a request is retried before the source or sink fails",
)
.default_value("3m");

/// Why an object store could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StorageError {
    /// A storage option is wrong.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The URL or the credentials cannot make a store.
    #[error("{url}: {reason}")]
    Open {
        /// The URL, as the user wrote it.
        url: String,
        /// Why.
        reason: String,
    },
}

/// The store holding the object-storage URL `url` (not a `file://` one), rooted at its bucket,
/// with `options`' credentials, endpoint and retries.
pub(crate) fn open_store(
    url: &Url,
    options: &Options,
) -> Result<Arc<dyn ObjectStore>, StorageError> {
    let bad = |reason: String| StorageError::Open {
        url: url.to_string(),
        reason,
    };
    let retry = retry_config(options)?;
    Ok(match url.scheme() {
        "s3" | "s3a" => Arc::new(s3(url, options, retry).map_err(bad)?),
        "gs" => Arc::new(gcs(url, options, retry).map_err(bad)?),
        "az" | "abfs" | "abfss" | "azure" => Arc::new(azure(url, options, retry).map_err(bad)?),
        other => {
            return Err(bad(format!(
                "'{other}://' is not a storage weir reads or writes; use a local path or an \
                 s3://, gs://, az://, abfss:// or file:// URL"
            )))
        }
    })
}

/// The storage options given in `options` (their keys): a local path takes none.
pub(crate) fn given_storage_options(options: &Options) -> Vec<&'static str> {
    STORAGE_OPTIONS
        .iter()
        .filter(|spec| options.given(spec).is_some())
        .map(|spec| spec.key)
        .collect()
}

/// Runs `work` on the runtime that serves object-storage requests made from code that may not
/// wait on a future (a file reader on a query thread), and waits for its result. The runtime
/// is weir's own, with two threads: waiting here never blocks the requests it waits for,
/// whichever thread waits.
pub(crate) fn wait_for<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-storage")
            .enable_all()
            .build()
            .ok()
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime.as_ref()?.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv().ok()
}

fn retry_config(options: &Options) -> Result<RetryConfig, OptionError> {
    let mut retry = RetryConfig::default();
    if let Some(n) = options.count(&STORAGE_RETRIES)? {
        retry.max_retries = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(t) = options.duration(&STORAGE_TIMEOUT)? {
        retry.retry_timeout = t;
    }
    Ok(retry)
}

/// True when `host` is a loopback name or address.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn s3(url: &Url, options: &Options, retry: RetryConfig) -> Result<impl ObjectStore, String> {
    let mut b = AmazonS3Builder::from_env()
        .with_url(url.as_str())
        .with_retry(retry);
    let endpoint = options
        .text(&S3_ENDPOINT)
        .map(str::to_string)
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    if let Some(endpoint) = endpoint.filter(|e| !e.is_empty()) {
        let parsed = Url::parse(&endpoint)
            .map_err(|e| format!("'s3.endpoint' = '{endpoint}' is not a URL: {e}"))?;
        if parsed.scheme() == "http" {
            let loopback = parsed.host_str().is_some_and(is_loopback);
            let allowed = options.flag(&S3_ALLOW_HTTP).map_err(|e| e.to_string())?;
            if !loopback && !allowed {
                return Err(format!(
                    "the endpoint {endpoint} is plain http on a host other than loopback: \
                     credentials and data would travel unencrypted; use https, or set \
                     's3.allow.http' = 'true' if that is meant"
                ));
            }
            b = b.with_allow_http(true);
        }
        b = b.with_endpoint(endpoint);
    }
    if let Some(region) = options.text(&S3_REGION) {
        b = b.with_region(region);
    }
    if let Some(id) = options.text(&S3_ACCESS_KEY_ID) {
        b = b.with_access_key_id(id);
    }
    if let Some(secret) = options.text(&S3_SECRET_ACCESS_KEY) {
        b = b.with_secret_access_key(secret);
    }
    if let Some(token) = options.text(&S3_SESSION_TOKEN) {
        b = b.with_token(token);
    }
    let virtual_hosted = options
        .flag(&S3_VIRTUAL_HOSTED_STYLE)
        .map_err(|e| e.to_string())?;
    b = b.with_virtual_hosted_style_request(virtual_hosted);
    // The Delta log commits with a conditional put (If-None-Match: *), which object_store sends
    // for S3 by default; a store without it fails the first commit with its own error.
    b.build().map_err(|e| e.to_string())
}

fn gcs(url: &Url, options: &Options, retry: RetryConfig) -> Result<impl ObjectStore, String> {
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_url(url.as_str())
        .with_retry(retry);
    if let Some(p) = options.text(&GCS_SERVICE_ACCOUNT_PATH) {
        b = b.with_config(GoogleConfigKey::ServiceAccount, p);
    }
    if let Some(k) = options.text(&GCS_SERVICE_ACCOUNT_KEY) {
        b = b.with_config(GoogleConfigKey::ServiceAccountKey, k);
    }
    b.build().map_err(|e| e.to_string())
}

fn azure(url: &Url, options: &Options, retry: RetryConfig) -> Result<impl ObjectStore, String> {
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_url(url.as_str())
        .with_retry(retry);
    for (spec, key) in [
        (&AZURE_ACCOUNT_NAME, AzureConfigKey::AccountName),
        (&AZURE_ACCOUNT_KEY, AzureConfigKey::AccessKey),
        (&AZURE_CLIENT_ID, AzureConfigKey::ClientId),
        (&AZURE_CLIENT_SECRET, AzureConfigKey::ClientSecret),
        (&AZURE_TENANT_ID, AzureConfigKey::AuthorityId),
    ] {
        if let Some(v) = options.text(spec) {
            b = b.with_config(key, v);
        }
    }
    b.build().map_err(|e| e.to_string())
}

/// The object-store schemes weir reads and writes (a `file://` URL is a local path).
const REMOTE_SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "abfs", "abfss", "azure"];

/// True when `path` is an object-storage URL (not a local path or a `file://` URL).
pub(crate) fn is_remote(path: &str) -> bool {
    Url::parse(path).is_ok_and(|u| REMOTE_SCHEMES.contains(&u.scheme()))
}

/// The local path of `path`: itself, or the path of a `file://` URL.
pub(crate) fn local_path(path: &str) -> std::path::PathBuf {
    match Url::parse(path) {
        Ok(u) if u.scheme() == "file" => u
            .to_file_path()
            .unwrap_or_else(|()| std::path::PathBuf::from(path)),
        _ => std::path::PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_store_urls_are_remote_and_file_urls_local() {
        assert!(is_remote("s3://bucket/dir"));
        assert!(is_remote(
            "abfss://container@account.dfs.core.windows.net/dir"
        ));
        assert!(!is_remote("file:///tmp/out"));
        assert!(!is_remote("out/steps"));
        assert!(!is_remote("/tmp/out.parquet"));
        assert_eq!(
            local_path("file:///tmp/out"),
            std::path::Path::new("/tmp/out")
        );
        assert_eq!(local_path("out/steps"), std::path::Path::new("out/steps"));
    }

    #[test]
    fn the_storage_options_given_are_named() {
        let options = Options::new([
            ("s3.region".to_string(), "eu-west-1".to_string()),
            ("path".to_string(), "x".to_string()),
        ]);
        assert_eq!(given_storage_options(&options), ["s3.region"]);
        assert!(given_storage_options(&Options::default()).is_empty());
    }

    #[test]
    fn waiting_works_inside_a_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = rt.block_on(async { wait_for(async { 7 }) });
        assert_eq!(got, Some(7));
    }
}
