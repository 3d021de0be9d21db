//! Loading a protobuf schema at run time: a `.proto` file compiled with `protox`, or a
//! `FileDescriptorSet` (`protoc --descriptor_set_out`, `buf build -o`).

use std::path::{Path, PathBuf};

use prost_reflect::DescriptorPool;

use crate::error::SchemaError;

/// A set of protobuf message types, loaded once at start-up.
#[derive(Debug, Clone)]
pub struct ProtoSchema {
    pool: DescriptorPool,
}

impl ProtoSchema {
    /// Loads `path`: a `.proto` file is compiled (imports resolved from `include_paths`, then
    /// from the file's own directory; the well-known types are built in); any other file is
    /// read as a `FileDescriptorSet`.
    pub fn load(path: impl AsRef<Path>, include_paths: &[PathBuf]) -> Result<Self, SchemaError> {
        let path = path.as_ref();
        if path.extension().is_some_and(|e| e == "proto") {
            Self::from_proto_file(path, include_paths)
        } else {
            Self::from_descriptor_set_file(path)
        }
    }

    /// Compiles a `.proto` file with `protox` (no `protoc` needed).
    pub fn from_proto_file(
        path: impl AsRef<Path>,
        include_paths: &[PathBuf],
    ) -> Result<Self, SchemaError> {
        let path = path.as_ref();
        // protox wants the file named relative to an include path; make sure its own directory
        // is one, after the caller's (so the caller's paths win, as with protoc -I).
        std::fs::metadata(path).map_err(|source| SchemaError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut includes: Vec<PathBuf> = include_paths.to_vec();
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        includes.push(parent);
        let compile_err = |e: protox::Error| SchemaError::Compile {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut compiler = protox::Compiler::new(&includes).map_err(compile_err)?;
        compiler.include_imports(true).include_source_info(false);
        compiler.open_file(path).map_err(compile_err)?;
        Ok(Self {
            pool: compiler.descriptor_pool(),
        })
    }

    /// Compiles `.proto` sources held in memory, as a schema registry hands them out: `files`
    /// are (import name, text) pairs (the name is what `import` statements spell, like
    /// `"stocks/base.proto"`), and `root` names the file whose types are wanted. Imports are
    /// resolved among `files`, then from the well-known types built in
    /// (`google/protobuf/timestamp.proto` and the others); nothing is read from disk.
    ///
    /// ```
    /// # use weir_codec::ProtoSchema;
    /// let base = "syntax = \"proto3\"; package ex; message Base { string id = 1; }";
    /// let quote = "syntax = \"proto3\"; package ex; import \"base.proto\";
    ///              message Quote { Base base = 1; double price = 2; }";
    /// let schema = ProtoSchema::from_sources(&[("base.proto", base), ("quote.proto", quote)],
    ///                                        "quote.proto")?;
    /// assert!(schema.pool().get_message_by_name("ex.Quote").is_some());
    /// # Ok::<(), weir_codec::SchemaError>(())
    /// ```
    pub fn from_sources(files: &[(&str, &str)], root: &str) -> Result<Self, SchemaError> {
        let files: Vec<(&str, SourceText<'_>)> = files
            .iter()
            .map(|(n, t)| (*n, SourceText::Proto(t)))
            .collect();
        Self::from_files(&files, root)
    }

    /// [`ProtoSchema::from_sources`] for files that may also come as an encoded
    /// `FileDescriptorProto` (how Confluent's Python and Go serializers register a schema, and
    /// how a registry that keeps what it was given, such as Apicurio, hands it back). A
    /// descriptor takes the import name it is given here, whatever name it holds.
    pub fn from_files(files: &[(&str, SourceText<'_>)], root: &str) -> Result<Self, SchemaError> {
        let compile_err = |e: protox::Error| SchemaError::Compile {
            path: PathBuf::from(root),
            message: e.to_string(),
        };
        let mut sources = Vec::with_capacity(files.len());
        for (name, text) in files {
            sources.push((
                (*name).to_string(),
                match text {
                    SourceText::Proto(t) => Source::Text((*t).to_string()),
                    SourceText::Descriptor(bytes) => {
                        let mut fd =
                            <prost_types::FileDescriptorProto as prost::Message>::decode(*bytes)
                                .map_err(|e| SchemaError::DescriptorSet {
                                    origin: (*name).to_string(),
                                    message: e.to_string(),
                                })?;
                        fd.name = Some((*name).to_string());
                        Source::Descriptor(Box::new(fd))
                    }
                },
            ));
        }
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(Sources(sources));
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true).include_source_info(false);
        compiler.open_file(root).map_err(compile_err)?;
        Ok(Self {
            pool: compiler.descriptor_pool(),
        })
    }

    /// Reads a `FileDescriptorSet` file.
    pub fn from_descriptor_set_file(path: impl AsRef<Path>) -> Result<Self, SchemaError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| SchemaError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::decode_set(&bytes, &path.display().to_string())
    }

    /// Reads an encoded `FileDescriptorSet`.
    pub fn from_descriptor_set_bytes(bytes: &[u8]) -> Result<Self, SchemaError> {
        Self::decode_set(bytes, "descriptor bytes")
    }

    /// Wraps a descriptor pool built elsewhere.
    pub fn from_pool(pool: DescriptorPool) -> Self {
        Self { pool }
    }

    fn decode_set(bytes: &[u8], origin: &str) -> Result<Self, SchemaError> {
        let pool = DescriptorPool::decode(bytes).map_err(|e| SchemaError::DescriptorSet {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok(Self { pool })
    }

    /// The schema as an encoded `FileDescriptorSet` (what `protoc --descriptor_set_out` writes,
    /// with imports included).
    pub fn descriptor_set_bytes(&self) -> Vec<u8> {
        self.pool.encode_to_vec()
    }

    /// The descriptors.
    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// The schema's files other than the well-known types (`google/protobuf/*.proto`), each
    /// after the files it imports: its name (as imports spell it) and the names of the files
    /// it imports, the well-known types left out. What registering a schema with its imports
    /// walks.
    pub fn own_files(&self) -> Vec<(String, Vec<String>)> {
        let own = |name: &str| !name.starts_with("google/protobuf/");
        self.pool
            .files()
            .filter(|f| own(f.name()))
            .map(|f| {
                let imports = f
                    .dependencies()
                    .map(|d| d.name().to_string())
                    .filter(|n| own(n))
                    .collect();
                (f.name().to_string(), imports)
            })
            .collect()
    }
}

/// One file of a schema held in memory (for [`ProtoSchema::from_files`]).
#[derive(Debug, Clone, Copy)]
pub enum SourceText<'a> {
    /// `.proto` text.
    Proto(&'a str),
    /// An encoded `FileDescriptorProto`.
    Descriptor(&'a [u8]),
}

/// A file of [`Sources`].
enum Source {
    Text(String),
    Descriptor(Box<prost_types::FileDescriptorProto>),
}

/// Schema files held in memory, by import name (for [`ProtoSchema::from_files`]).
struct Sources(Vec<(String, Source)>);

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match self.0.iter().find(|(n, _)| n == name) {
            Some((n, Source::Text(text))) => protox::file::File::from_source(n, text),
            Some((_, Source::Descriptor(fd))) => Ok(
                protox::file::File::from_file_descriptor_proto((**fd).clone()),
            ),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}
