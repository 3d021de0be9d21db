//! Where a sink writes: a local directory or an object-store URL (`s3://`, `gs://`, `az://`,
//! `abfss://`, `file://`), opened through the `object_store` crate DataFusion already builds.
//! Credentials and endpoints come from the declared `s3.*`, `gcs.*` and `azure.*` options and,
//! when those are not given, from each cloud's standard environment variables and credential
//! chain (object_store's `from_env`).

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, ObjectStoreExt as _, RetryConfig};
use url::Url;
use weir_codec::{OptionKind, OptionSpec, Options};

use super::SinkError;

/// The object-storage options every sink with a `'path'` URL takes.
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
     before the sink fails",
)
.default_value("10");
const STORAGE_TIMEOUT: OptionSpec = OptionSpec::new(
    "storage.retry.timeout",
    OptionKind::Duration,
    "object storage: the longest a request is retried before the sink fails",
)
.default_value("3m");

/// A sink's place (a Delta table, or a directory of files): its URL (a directory URL, ending
/// in `/`) and the store it is in, rooted at the bucket (or the filesystem root).
pub(crate) struct Location {
    /// The table's URL, as delta-rs and the log name it.
    pub(crate) url: Url,
    /// The store, "/" being the bucket's (or the filesystem's) root.
    pub(crate) store: Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL carries no credentials (they are options); the store's Debug could.
        write!(f, "Location({})", self.url)
    }
}

/// Opens `path` (a local path or a URL) with `options`' credentials. A local path is made
/// absolute and created.
pub(crate) fn open_location(path: &str, options: &Options) -> Result<Location, SinkError> {
    let bad = |why: String| SinkError::Storage {
        path: path.to_string(),
        reason: why,
    };
    let url = match Url::parse(path) {
        Ok(u) if u.scheme().len() > 1 => u,
        // Not a URL (or a Windows drive letter): a local path.
        _ => {
            let dir = std::path::absolute(path).map_err(|e| SinkError::io(path.as_ref(), e))?;
            std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
            Url::from_directory_path(&dir)
                .map_err(|()| bad("cannot be written as a file:// URL".into()))?
        }
    };
    let url = with_trailing_slash(url);
    let retry = retry_config(options)?;
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "file" => {
            let dir = url
                .to_file_path()
                .map_err(|()| bad("is not a local path".into()))?;
            std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
            Arc::new(LocalFileSystem::new())
        }
        "s3" | "s3a" => Arc::new(s3(&url, options, retry).map_err(bad)?),
        "gs" => Arc::new(gcs(&url, options, retry).map_err(bad)?),
        "az" | "abfs" | "abfss" | "azure" => Arc::new(azure(&url, options, retry).map_err(bad)?),
        other => {
            return Err(bad(format!(
                "'{other}://' is not a storage weir writes; use a local path or an s3://, gs://, \
                 az://, abfss:// or file:// URL"
            )))
        }
    };
    Ok(Location { url, store })
}

fn with_trailing_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let p = format!("{}/", url.path());
        url.set_path(&p);
    }
    url
}

fn retry_config(options: &Options) -> Result<RetryConfig, SinkError> {
    let mut retry = RetryConfig::default();
    if let Some(n) = options.count(&STORAGE_RETRIES)? {
        retry.max_retries = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(t) = options.text(&STORAGE_TIMEOUT) {
        retry.retry_timeout = weir_dedup::parse_duration(t).map_err(|why| {
            weir_codec::OptionError::invalid(&STORAGE_TIMEOUT, STORAGE_TIMEOUT.key, t, why)
        })?;
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

/// The object-store schemes weir writes (a `file://` URL is a local path).
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

/// A local directory where a sink's output waits for its upload:
/// `<temp dir>/weir-spool/<sink>-<hash of the URL>`. It is emptied when opened (what a killed
/// run left there was never uploaded, and a crash must not fill the disk) and removed when
/// dropped.
pub(crate) struct Spool {
    dir: std::path::PathBuf,
}

impl Spool {
    /// The spool of the sink `sink` writing to `url`.
    pub(crate) fn open(sink: &str, url: &Url) -> Result<Self, SinkError> {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        url.as_str().hash(&mut h);
        let safe: String = sink
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = std::env::temp_dir()
            .join("weir-spool")
            .join(format!("{safe}-{:016x}", h.finish()));
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SinkError::io(&dir, e)),
        }
        std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
        Ok(Self { dir })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Bytes a part of a multipart upload holds, and parts in flight at once: an upload holds at
/// most their product in memory, whatever the file's size.
const PART_BYTES: usize = 8 << 20;
const PARTS_IN_FLIGHT: usize = 4;

impl Location {
    fn storage_error(&self, e: impl std::fmt::Display) -> SinkError {
        SinkError::Storage {
            path: self.url.to_string(),
            reason: e.to_string(),
        }
    }

    /// The object `name` in this location (a directory).
    fn object(&self, name: &str) -> Result<object_store::path::Path, SinkError> {
        let dir = object_store::path::Path::from_url_path(self.url.path())
            .map_err(|e| self.storage_error(e))?;
        Ok(dir.join(name))
    }

    /// Uploads the local file `local` as the object `name`, in parts of 8 MiB with at most 4 in
    /// flight. The object appears whole when the upload completes, or not at all: a failed
    /// upload is aborted. Returns the bytes uploaded.
    pub(crate) async fn upload(
        &self,
        local: &std::path::Path,
        name: &str,
    ) -> Result<u64, SinkError> {
        use std::io::Read as _;
        let target = self.object(name)?;
        let upload =
            self.store.put_multipart(&target).await.map_err(|e| {
                self.storage_error(format!("cannot begin the upload of {name}: {e}"))
            })?;
        let mut parts = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut file = std::fs::File::open(local).map_err(|e| SinkError::io(local, e))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let failed = loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => n,
                Err(e) => break Some(SinkError::io(local, e)),
            };
            if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
                break Some(self.storage_error(format!("cannot upload {name}: {e}")));
            }
            parts.write(&buf[..n]);
            total += n as u64;
        };
        if let Some(e) = failed {
            // Nothing of an aborted upload is ever visible.
            let _ = parts.abort().await;
            return Err(e);
        }
        parts.finish().await.map_err(|e| {
            self.storage_error(format!("cannot complete the upload of {name}: {e}"))
        })?;
        Ok(total)
    }

    /// The names of the objects directly in this location.
    pub(crate) async fn list_names(&self) -> Result<Vec<String>, SinkError> {
        let dir = object_store::path::Path::from_url_path(self.url.path())
            .map_err(|e| self.storage_error(e))?;
        let listing = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| self.storage_error(e))?;
        Ok(listing
            .objects
            .iter()
            .filter_map(|o| o.location.filename().map(str::to_string))
            .collect())
    }

    /// Deletes the object `name`.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), SinkError> {
        let target = self.object(name)?;
        self.store
            .delete(&target)
            .await
            .map_err(|e| self.storage_error(format!("cannot delete {name}: {e}")))
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

    fn options(pairs: &[(&str, &str)]) -> Options {
        Options::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn local_paths_become_directory_urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let loc = open_location(path.to_str().unwrap(), &Options::default()).unwrap();
        assert_eq!(loc.url.scheme(), "file");
        assert!(loc.url.path().ends_with("/t/"), "{}", loc.url);
        assert!(path.is_dir());
    }

    #[test]
    fn plain_http_is_refused_off_loopback_and_secrets_are_not_shown() {
        let e = open_location(
            "s3://bucket/t",
            &options(&[
                ("s3.endpoint", "http://storage.example.com:9000"),
                ("s3.region", "us-east-1"),
                ("s3.access.key.id", "AKID"),
                ("s3.secret.access.key", "very-secret-key"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("s3.allow.http"), "{e}");
        assert!(!e.contains("very-secret-key"), "{e}");
        for endpoint in [
            "http://127.0.0.1:9000",
            "http://localhost:9000",
            "http://[::1]:9000",
        ] {
            open_location(
                "s3://bucket/t",
                &options(&[("s3.endpoint", endpoint), ("s3.region", "us-east-1")]),
            )
            .unwrap();
        }
        open_location(
            "s3://bucket/t",
            &options(&[
                ("s3.endpoint", "http://storage.example.com:9000"),
                ("s3.allow.http", "true"),
                ("s3.region", "us-east-1"),
            ]),
        )
        .unwrap();
    }

    #[test]
    fn unknown_schemes_are_named() {
        let e = open_location("ftp://host/t", &Options::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("'ftp://'"), "{e}");
    }
}
