//! Where a sink writes: a local directory or an object-store URL (`s3://`, `gs://`, `az://`,
//! `abfss://`, `file://`), its spool of files waiting for their upload, and the uploads.

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, ObjectStoreExt as _};
use url::Url;
use weir_codec::Options;

pub(crate) use crate::storage::{is_remote, local_path, STORAGE_OPTIONS};
use crate::storage::{open_store, StorageError};

use super::SinkError;

impl From<StorageError> for SinkError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Option(e) => SinkError::Option(e),
            StorageError::Open { url, reason } => SinkError::Storage { path: url, reason },
        }
    }
}

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
    let url = match Url::parse(path) {
        Ok(u) if u.scheme().len() > 1 => u,
        // Not a URL (or a Windows drive letter): a local path.
        _ => {
            let dir = std::path::absolute(path).map_err(|e| SinkError::io(path.as_ref(), e))?;
            std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
            Url::from_directory_path(&dir).map_err(|()| SinkError::Storage {
                path: path.to_string(),
                reason: "cannot be written as a file:// URL".into(),
            })?
        }
    };
    let url = with_trailing_slash(url);
    let store: Arc<dyn ObjectStore> = if url.scheme() == "file" {
        let dir = url.to_file_path().map_err(|()| SinkError::Storage {
            path: path.to_string(),
            reason: "is not a local path".into(),
        })?;
        refuse_storage_options(path, options)?;
        std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
        Arc::new(LocalFileSystem::new())
    } else {
        open_store(&url, options).map_err(|e| match e {
            StorageError::Open { reason, .. } => SinkError::Storage {
                path: path.to_string(),
                reason,
            },
            e => e.into(),
        })?
    };
    Ok(Location { url, store })
}

/// A local path takes no object-storage options: one given is a mistake (a URL meant, or
/// options copied from another sink), not something to ignore.
fn refuse_storage_options(path: &str, options: &Options) -> Result<(), SinkError> {
    let given = crate::storage::given_storage_options(options);
    if given.is_empty() {
        return Ok(());
    }
    Err(SinkError::Storage {
        path: path.to_string(),
        reason: format!(
            "is a local path, which takes no object-storage options, but {} given; remove \
             them, or write the path as an s3://, gs:// or az:// URL",
            quoted_list(&given)
        ),
    })
}

fn quoted_list(keys: &[&str]) -> String {
    let quoted: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
    match quoted.len() {
        1 => format!("{} is", quoted[0]),
        _ => format!("{} are", quoted.join(", ")),
    }
}

fn with_trailing_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let p = format!("{}/", url.path());
        url.set_path(&p);
    }
    url
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
        let target = self.object(name)?;
        let upload =
            self.store.put_multipart(&target).await.map_err(|e| {
                self.storage_error(format!("cannot begin the upload of {name}: {e}"))
            })?;
        let mut parts = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        // The spool file is read on a blocking thread (a read may wait on the disk), a MiB at
        // a time, at most two chunks ahead of the upload.
        let (tx, mut chunks) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(2);
        let path = local.to_path_buf();
        let reader = tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => return drop(tx.blocking_send(Err(e))),
            };
            loop {
                let mut chunk = vec![0u8; 1 << 20];
                match file.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(n) => {
                        chunk.truncate(n);
                        if tx.blocking_send(Ok(chunk)).is_err() {
                            return;
                        }
                    }
                    Err(e) => return drop(tx.blocking_send(Err(e))),
                }
            }
        });
        let mut total = 0u64;
        let failed = loop {
            let chunk = match chunks.recv().await {
                None => break None,
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => break Some(SinkError::io(local, e)),
            };
            if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
                break Some(self.storage_error(format!("cannot upload {name}: {e}")));
            }
            total += chunk.len() as u64;
            parts.put(chunk.into());
        };
        drop(chunks);
        if let Err(e) = reader.await {
            // The reader panicked: what was read cannot be trusted to be the whole file.
            let _ = parts.abort().await;
            return Err(SinkError::io(local, std::io::Error::other(e)));
        }
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

    #[test]
    fn a_local_path_refuses_storage_options() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let e = open_location(
            path.to_str().unwrap(),
            &options(&[("s3.region", "eu-west-1"), ("s3.secret.access.key", "hush")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("'s3.region', 's3.secret.access.key' are given"),
            "{e}"
        );
        assert!(!e.contains("hush"), "{e}");
    }
}
