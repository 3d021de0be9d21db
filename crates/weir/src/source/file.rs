//! The file connector's declaration: its options, and the files (or objects) its path names.
//! Reading them is the pipeline's (`pipeline::reader::file_feed`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;
use weir_codec::Framing;
use weir_codec::{OptionKind, OptionSpec, Options};

use crate::error::{FileError, SourceError, SourceErrorKind};
use crate::storage::{self, StorageError};

/// The file connector's options.
pub(crate) const FILE_OPTIONS: &[OptionSpec] = &[PATH, FRAMING, MAX_MESSAGE_BYTES];

const PATH: OptionSpec = OptionSpec::new(
    "path",
    OptionKind::Path,
    "file connector: a file, a directory, or a glob (`data/*.bin`), read in name order; a \
     local path or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL (required)",
);
pub(crate) const FRAMING: OptionSpec = OptionSpec::new(
    "framing",
    OptionKind::Choice(&["varint", "u32be", "lines", "avro-container"]),
    "a protobuf varint length before each message, a 4-byte big-endian length, one message per \
     line (`\\r\\n` accepted, blank lines skipped), or Avro object container files (each file's \
     header gives its schema; the default for 'encoding' = 'avro' when the first file is one)",
)
.default_value("varint");
const MAX_MESSAGE_BYTES: OptionSpec = OptionSpec::new(
    "max.message.bytes",
    OptionKind::Count,
    "file connector: a larger frame is a bad message (the rest of that file is skipped)",
)
.default_value("67108864");

/// A file (or object) that a file source's path names, as listed.
pub(crate) struct ListedFile {
    /// Where its bytes are.
    pub(crate) place: FilePlace,
    /// The path as positions and errors name it.
    pub(crate) name: Arc<str>,
    /// Its size when it was listed (objects), or 0 (a local file's size is taken when a read
    /// begins).
    pub(crate) size: u64,
}

/// Where a file's bytes are: on the local filesystem, or an object in a store.
pub(crate) enum FilePlace {
    /// A local file.
    Local(PathBuf),
    /// An object, read in ranges with GET requests.
    Object {
        /// The store (its bucket).
        store: Arc<dyn ObjectStore>,
        /// The object's key.
        key: object_store::path::Path,
    },
}

/// What the start of an Avro container file holds.
pub(crate) enum HeaderRead {
    /// The header, whole.
    Header(weir_codec::ContainerHeader),
    /// Nothing: an empty file (as Spark's `_SUCCESS`) holds no rows.
    Empty,
    /// The file ends before its header does (it may still be being written).
    Short,
    /// The file does not begin with the container magic: why.
    NotContainer(String),
    /// The magic is there, but the header cannot be read: why.
    Bad(String),
}

impl FilePlace {
    /// The Avro container header at the start of the file (`size`: an object's listed size).
    /// Reads 64 KiB, and more only for a larger header.
    pub(crate) fn container_header(&self, name: &str, size: u64) -> Result<HeaderRead, FileError> {
        let mut want = 64usize << 10;
        loop {
            let bytes = self.read_start(name, want, size)?;
            match weir_codec::ContainerHeader::parse(&bytes) {
                Ok(Some(h)) => return Ok(HeaderRead::Header(h)),
                Ok(None) if bytes.is_empty() => return Ok(HeaderRead::Empty),
                Err(e @ weir_codec::ContainerError::NotContainer(_)) => {
                    return Ok(HeaderRead::NotContainer(e.to_string()))
                }
                Err(e) => return Ok(HeaderRead::Bad(e.to_string())),
                Ok(None) if bytes.len() < want => return Ok(HeaderRead::Short),
                Ok(None) if want >= weir_codec::MAX_CONTAINER_HEADER_BYTES => {
                    return Ok(HeaderRead::Bad(format!(
                        "its header is larger than {} bytes",
                        weir_codec::MAX_CONTAINER_HEADER_BYTES
                    )))
                }
                Ok(None) => want *= 4,
            }
        }
    }

    /// Up to `len` bytes from the start of the file (fewer when it is shorter).
    fn read_start(&self, name: &str, len: usize, size: u64) -> Result<Vec<u8>, FileError> {
        match self {
            Self::Local(path) => {
                use std::io::Read as _;
                let mut out = Vec::new();
                File::open(path)
                    .and_then(|f| f.take(len as u64).read_to_end(&mut out))
                    .map_err(|source| FileError::Io {
                        path: path.clone(),
                        source,
                    })?;
                Ok(out)
            }
            Self::Object { store, key } => {
                let end = size.min(len as u64);
                if end == 0 {
                    return Ok(Vec::new());
                }
                let (store, key) = (Arc::clone(store), key.clone());
                let failed = |reason: String| FileError::Storage {
                    path: name.to_string(),
                    reason,
                };
                let got = storage::wait_for(async move {
                    use object_store::ObjectStoreExt as _;
                    store.get_range(&key, 0..end).await
                })
                .ok_or_else(|| failed("the object-storage runtime stopped".into()))?
                .map_err(|e| failed(format!("cannot read its header: {e}")))?;
                Ok(got.to_vec())
            }
        }
    }
}

/// The file connector's settings.
#[derive(Debug, Clone)]
pub(crate) struct FileSettings {
    /// A file, a directory or a glob (a local path, or an object-storage URL).
    pub(crate) path: String,
    /// Where the files are.
    pub(crate) store: FileStore,
    /// How messages are delimited.
    pub(crate) framing: Framing,
    /// Largest message accepted.
    pub(crate) max_message_bytes: u64,
}

/// Where a file source's files are.
#[derive(Clone)]
pub(crate) enum FileStore {
    /// The local filesystem.
    Local,
    /// An object store (its bucket), with the credentials of the source's options.
    Object(Arc<dyn ObjectStore>),
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A store's own Debug may show its credentials.
        f.write_str(match self {
            Self::Local => "Local",
            Self::Object(_) => "Object",
        })
    }
}

impl FileSettings {
    /// Reads the file connector's options and checks that the path names a file.
    pub(crate) fn parse(source: &str, options: &Options) -> Result<Self, SourceError> {
        let err = |e| SourceError::new(source, SourceErrorKind::Option(e));
        let spec = options.require(&PATH).map_err(err)?.to_string();
        let framing = parse_framing(options).map_err(err)?;
        let max_message_bytes = options.count(&MAX_MESSAGE_BYTES).map_err(err)?.unwrap_or(0);
        let (path, store) = if storage::is_remote(&spec) {
            let url = url::Url::parse(&spec).map_err(|e| FileError::Storage {
                path: spec.clone(),
                reason: format!("is not a URL: {e}"),
            });
            let url = url.map_err(|e| SourceError::new(source, e))?;
            let store = storage::open_store(&url, options).map_err(|e| match e {
                StorageError::Option(e) => err(e),
                StorageError::Open { reason, .. } => SourceError::new(
                    source,
                    FileError::Storage {
                        path: spec.clone(),
                        reason,
                    },
                ),
            })?;
            (spec, FileStore::Object(store))
        } else {
            let given = storage::given_storage_options(options);
            if let Some(key) = given.first() {
                return Err(SourceError::new(
                    source,
                    FileError::Storage {
                        path: spec,
                        reason: format!(
                            "is a local path, which takes no object-storage options, but \
                             '{key}' is given; remove it, or write the path as an s3://, gs:// \
                             or az:// URL"
                        ),
                    },
                ));
            }
            let local = storage::local_path(&spec).display().to_string();
            (local, FileStore::Local)
        };
        let settings = Self {
            path,
            store,
            framing,
            max_message_bytes,
        };
        // Fail now, not at the first query, when the path names nothing.
        settings
            .list_files()
            .map_err(|e| SourceError::new(source, e))?;
        Ok(settings)
    }

    /// The Avro container header of the first file the path names that is not empty, and
    /// that file's name (`None`: every file is empty).
    pub(crate) fn first_container_header(
        &self,
    ) -> Result<Option<(Arc<str>, HeaderRead)>, FileError> {
        for file in self.list_files()? {
            match file.place.container_header(&file.name, file.size)? {
                HeaderRead::Empty => continue,
                read => return Ok(Some((file.name, read))),
            }
        }
        Ok(None)
    }

    /// The files the path names now, with their sizes (objects) or not (local files, whose
    /// size a feed takes when it begins).
    pub(crate) fn list_files(&self) -> Result<Vec<ListedFile>, FileError> {
        match &self.store {
            FileStore::Local => Ok(expand_path(&self.path)?
                .into_iter()
                .map(|path| ListedFile {
                    name: Arc::from(path.display().to_string()),
                    place: FilePlace::Local(path),
                    size: 0,
                })
                .collect()),
            FileStore::Object(store) => list_objects(&self.path, store),
        }
    }
}

/// The objects `spec` (an object-storage URL) names, in key order: the object itself, the
/// objects directly under it as a directory (not hidden), or the matches of a glob in its key.
fn list_objects(spec: &str, store: &Arc<dyn ObjectStore>) -> Result<Vec<ListedFile>, FileError> {
    use futures::TryStreamExt as _;
    use object_store::path::Path as Key;
    let failed = |reason: String| FileError::Storage {
        path: spec.to_string(),
        reason,
    };
    // The key is taken from the text, not the parsed URL: a `?` of a glob is no query here.
    let (scheme, rest) = spec
        .split_once("://")
        .ok_or_else(|| failed("is not a URL".into()))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    let lister = Arc::clone(store);
    let glob = key.contains(['*', '?', '[']);
    let pattern = if glob {
        Some(glob::Pattern::new(key).map_err(|e| FileError::BadGlob {
            path: spec.into(),
            reason: e.to_string(),
        })?)
    } else {
        None
    };
    // The listing starts at the directory above the first glob character.
    let literal = match key.find(['*', '?', '[']) {
        Some(at) => key.get(..at).and_then(|k| k.rfind('/').map(|s| &key[..s])),
        None => Some(key.trim_end_matches('/')),
    };
    let prefix = match literal.filter(|k| !k.is_empty()) {
        Some(k) => Some(Key::parse(k).map_err(|e| failed(format!("is not an object key: {e}")))?),
        None => None,
    };
    let listed = storage::wait_for(async move {
        if let Some(pattern) = pattern {
            let all: Vec<_> = lister.list(prefix.as_ref()).try_collect().await?;
            return Ok::<_, object_store::Error>(
                all.into_iter()
                    .filter(|o| pattern.matches_with(o.location.as_ref(), GLOB_MATCH))
                    .collect::<Vec<_>>(),
            );
        }
        if let Some(key) = &prefix {
            let head = object_store::GetOptions {
                head: true,
                ..Default::default()
            };
            match lister.get_opts(key, head).await {
                Ok(found) => return Ok(vec![found.meta]),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let listing = lister.list_with_delimiter(prefix.as_ref()).await?;
        Ok(listing
            .objects
            .into_iter()
            .filter(|o| o.location.filename().is_some_and(|n| !n.starts_with('.')))
            .collect())
    })
    .ok_or_else(|| failed("the object-storage runtime stopped".into()))?
    .map_err(|e| failed(format!("cannot list it: {e}")))?;
    let mut objects: Vec<ListedFile> = listed
        .into_iter()
        .map(|o| ListedFile {
            name: Arc::from(format!("{scheme}://{bucket}/{}", o.location)),
            size: o.size,
            place: FilePlace::Object {
                store: Arc::clone(store),
                key: o.location,
            },
        })
        .collect();
    objects.sort_by(|a, b| a.name.cmp(&b.name));
    if objects.is_empty() {
        return Err(FileError::NoFiles(spec.into()));
    }
    Ok(objects)
}

/// `'framing'` of a source or a `file` sink.
pub(crate) fn parse_framing(options: &Options) -> Result<Framing, weir_codec::OptionError> {
    Ok(match options.choice(&FRAMING)? {
        Some("u32be") => Framing::U32Be,
        Some("lines") => Framing::Lines,
        Some("avro-container") => Framing::AvroContainer,
        _ => Framing::Varint,
    })
}

/// How a glob in a `'path'` matches, as a shell's does: `*` stays within a directory and does
/// not match a hidden name's leading dot (a directory's hidden files are not read either).
const GLOB_MATCH: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

/// The files a `'path'` names: itself, the regular files of a directory (not hidden, sorted),
/// or the matches of a glob (sorted).
pub(crate) fn expand_path(spec: &str) -> Result<Vec<PathBuf>, FileError> {
    let path = Path::new(spec);
    let mut files = Vec::new();
    if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        for e in entries {
            let e = e.map_err(|source| FileError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            if !hidden && e.path().is_file() {
                files.push(e.path());
            }
        }
    } else if spec.contains(['*', '?', '[']) {
        let paths = glob::glob_with(spec, GLOB_MATCH).map_err(|e| FileError::BadGlob {
            path: spec.into(),
            reason: e.to_string(),
        })?;
        files.extend(paths.flatten().filter(|p| p.is_file()));
    } else if path.is_file() {
        files.push(path.to_path_buf());
    } else if let Err(source) = File::open(path) {
        return Err(FileError::Io {
            path: path.to_path_buf(),
            source,
        });
    }
    files.sort();
    if files.is_empty() {
        return Err(FileError::NoFiles(spec.into()));
    }
    Ok(files)
}
