//! Schemas from a Confluent-compatible schema registry (`'schema.registry.url'`).
//!
//! With the `protobuf` encoding and no `'location'`, each message's schema id selects its
//! schema: fetched once per id (`GET /schemas/ids/{id}`, its references resolved recursively
//! from their subjects), compiled with the well-known types, and turned into a plan onto the
//! declared columns ([`weir_codec::registry`]), cached by id and shared by every partition. A
//! partition's decoder keeps the previous message's plan and asks [`Plans`] only when a
//! message's schema id changes, so the hot path makes no request and no lookup. The columns may
//! be left out: they come from the latest schema of the subject (`'<topic>-value'`, or as
//! `'schema.registry.subject'` and the subject name strategy say), fetched when the source is
//! created (an unreachable registry is an error then). Declared columns the latest schema lacks
//! follow `'on.error'`: `fail` refuses the source, `skip` and `dead_letter` bind them to the
//! newest version that has them; messages of the latest schema are then read as any other
//! schema id is (a field it lacks reads as null, a field whose type changed fails the message).
//!
//! With the `avro` encoding and no `'avro.schema'`, the same holds for Avro writers' schemas
//! (see [`avro`]).
//!
//! With the `json` encoding (or a local `'location'` or `'avro.schema'`), the registry framing
//! is stripped and the registry is not asked anything.
//!
//! A new schema id met while the registry is unreachable is retried with backoff; the message
//! then fails under `'on.error'`, and other messages with that id fail at once for the next
//! [`RETRY_AFTER`] before the registry is asked again. Ids already cached need no registry.

mod avro;
mod cache;
pub(crate) mod client;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use weir_codec::registry::{
    indexes_for_message, message_for_indexes, registry_prefix, FramedProtoDecoder, PlanSource,
    RegistryFraming, SchemaIdError, SchemaPlan, TargetColumns,
};
use weir_codec::{
    default_columns, CodecError, ColumnSpec, Decoder, DecoderFactory, DecoderRequest, OptionError,
    OptionKind, OptionSpec, Options, PreparedDecoder, ProtoDecoderOptions, ProtoSchema, SchemaRef,
    SourceText, PROTOBUF_OPTIONS,
};
use weir_kafka::{PemSource, Secret};

pub(crate) use self::avro::{AvroRegistry, AvroRegistryFactory};
use self::cache::SchemaCache;
pub use self::client::SchemaType;
use self::client::{Auth, ClientSettings, RegisteredSchema, RegistryClient, RegistryTls};
use crate::metrics::SourceStats;

pub(crate) use self::client::RegistryError as Error;

/// How long a schema id that could not be fetched fails at once before it is asked again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The schema registry options (every source accepts them).
pub(crate) const REGISTRY_OPTIONS: &[OptionSpec] = &[
    URL,
    SUBJECT,
    STRATEGY,
    BASIC_AUTH,
    BEARER_TOKEN,
    ALLOW_HTTP,
    CA_LOCATION,
    CERTIFICATE_LOCATION,
    KEY_LOCATION,
    KEY_PASSWORD,
    TIMEOUT,
    RETRIES,
    BACKOFF,
];

pub(crate) const URL: OptionSpec = OptionSpec::new(
    "schema.registry.url",
    OptionKind::List,
    "a Confluent-compatible schema registry (`http(s)://host:port[/path]`, several tried in \
     order): protobuf without 'location' and avro without 'avro.schema' take each message's \
     schema from its schema id; the registry framing is stripped (protobuf, avro and JSON)",
);
const SUBJECT: OptionSpec = OptionSpec::new(
    "schema.registry.subject",
    OptionKind::Text,
    "the subject whose latest schema gives the columns (default: by the name strategy; \
     required with the file connector)",
);
const STRATEGY: OptionSpec = OptionSpec::new(
    "schema.registry.subject.name.strategy",
    OptionKind::Choice(&[
        "TopicNameStrategy",
        "RecordNameStrategy",
        "TopicRecordNameStrategy",
    ]),
    "the subject's name: `<topic>-value`, the message's full name (needs 'message'), or \
     `<topic>-<message>`",
)
.default_value("TopicNameStrategy");
const BASIC_AUTH: OptionSpec = OptionSpec::new(
    "schema.registry.basic.auth.user.info",
    OptionKind::Text,
    "HTTP basic authentication to the registry, `user:password`",
)
.secret();
const BEARER_TOKEN: OptionSpec = OptionSpec::new(
    "schema.registry.bearer.auth.token",
    OptionKind::Text,
    "a bearer token sent to the registry",
)
.secret();
const ALLOW_HTTP: OptionSpec = OptionSpec::new(
    "schema.registry.allow.http",
    OptionKind::Bool,
    "send credentials to an `http://` registry on a host other than loopback (they then travel \
     unencrypted); loopback registries are always allowed",
)
.default_value("false");
const CA_LOCATION: OptionSpec = OptionSpec::new(
    "schema.registry.ssl.ca.location",
    OptionKind::Path,
    "PEM file of the CA certificates the registry's certificate is checked against; default: \
     the system's trust store",
);
const CERTIFICATE_LOCATION: OptionSpec = OptionSpec::new(
    "schema.registry.ssl.certificate.location",
    OptionKind::Path,
    "mutual TLS to the registry: PEM file of the client's certificate (chain)",
);
const KEY_LOCATION: OptionSpec = OptionSpec::new(
    "schema.registry.ssl.key.location",
    OptionKind::Path,
    "mutual TLS to the registry: PEM file of the client's private key (PKCS#8, PKCS#1, SEC1, \
     or encrypted PKCS#8)",
);
const KEY_PASSWORD: OptionSpec = OptionSpec::new(
    "schema.registry.ssl.key.password",
    OptionKind::Text,
    "the password of an encrypted registry client key",
)
.secret();
const TIMEOUT: OptionSpec = OptionSpec::new(
    "schema.registry.request.timeout",
    OptionKind::Duration,
    "the time one registry request may take",
)
.default_value("10s");
const RETRIES: OptionSpec = OptionSpec::new(
    "schema.registry.retries",
    OptionKind::Count,
    "attempts after the first when the registry cannot be reached",
)
.default_value("3");
const BACKOFF: OptionSpec = OptionSpec::new(
    "schema.registry.retry.backoff",
    OptionKind::Duration,
    "the wait before the first retry; it doubles with each",
)
.default_value("200ms");

/// A schema fetched by id and compiled.
struct Compiled {
    schema: ProtoSchema,
    /// The registered schema's own file in `schema` (its references are the others).
    file: String,
}

/// A source's registry: the client, the subject, the schemas compiled by id, the counters.
pub(crate) struct Registry {
    client: RegistryClient,
    subject: String,
    /// `'message'`, when given: the message type of every schema id.
    message: Option<String>,
    /// The subject's latest schema when the source was created (the columns' reference).
    latest_id: u32,
    latest_message: String,
    latest: Arc<Compiled>,
    schemas: SchemaCache<Compiled>,
    /// The older schema (id, version) the declared columns were bound to because the latest
    /// lacks them, under an `'on.error'` that tolerates messages that do not fit.
    bound: Mutex<Option<(u32, i64)>>,
    stats: Arc<SourceStats>,
    max_depth: usize,
}

/// Credentials (basic or bearer auth, or user info in a URL) go over plain http only to a
/// loopback registry, unless `'schema.registry.allow.http'` says so.
fn refuse_clear_text_credentials(
    urls: &[String],
    auth: bool,
    options: &Options,
) -> Result<(), OptionError> {
    if options.flag(&ALLOW_HTTP)? {
        return Ok(());
    }
    for u in urls {
        let Ok(url) = url::Url::parse(u) else {
            continue;
        };
        let credentials = auth || !url.username().is_empty() || url.password().is_some();
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if url.scheme() == "http" && credentials && !loopback {
            return Err(OptionError::Conflict(format!(
                "the registry at http://{}{} would receive credentials unencrypted; use https, \
                 or set 'schema.registry.allow.http' = 'true' if that is meant",
                url.host_str().unwrap_or(""),
                url.port().map(|p| format!(":{p}")).unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// What `'schema.registry.url'` does to a source.
pub(crate) enum Use {
    /// No registry.
    None,
    /// Strip the framing only (JSON, or protobuf with a local `'location'`).
    Framing,
    /// Protobuf schemas by id from the registry.
    Decode(Arc<Registry>),
    /// Avro writers' schemas by id from the registry.
    Avro(Arc<AvroRegistry>),
}

impl Use {
    /// Reads the registry options of source `source` for `encoding`; with the protobuf
    /// encoding and no `'location'` (or the avro encoding and no `'avro.schema'`), connects to
    /// the registry and fetches the subject's latest schema (an unreachable registry or a
    /// missing subject is an error here).
    pub(crate) fn open(
        source: &str,
        options: &Options,
        encoding: &str,
        stats: &Arc<SourceStats>,
    ) -> Result<Self, Error> {
        let urls = options.list(&URL);
        if urls.is_empty() {
            return Ok(Self::None);
        }
        let local = options
            .iter()
            .any(|(k, _)| matches!(k, "location" | "avro.schema" | "avro.schema.file"));
        if encoding == "avro" && !local {
            return Ok(Self::Avro(Arc::new(AvroRegistry::open(
                source, options, urls, stats,
            )?)));
        }
        if encoding != "protobuf" || local {
            return Ok(Self::Framing);
        }
        let what = format!("source {source}");
        let client = client_of(&what, urls, options)?;
        let message = value_of(options, "message").map(str::to_string);
        let topic = value_of(options, "topic");
        let subject = subject_of(&what, options, message.as_deref(), topic)?;
        let option = |e: OptionError| Error::References {
            what: what.clone(),
            reason: e.to_string(),
        };
        let max_depth = PROTOBUF_OPTIONS
            .iter()
            .find(|o| o.key == "protobuf.max.depth")
            .map_or(Ok(Some(100)), |spec| options.count(spec))
            .map_err(option)?
            .map_or(usize::MAX, |d| usize::try_from(d).unwrap_or(usize::MAX));
        let latest = client.version(&subject, -1)?;
        let latest_id = latest.id.ok_or_else(|| Error::BadAnswer {
            url: latest.from.clone(),
            what: format!("subject '{subject}' version latest"),
            reason: "no 'id'".into(),
        })?;
        let compiled = Arc::new(compile(&client, &latest, latest_id, &subject)?);
        let latest_message = match &message {
            Some(m) => m.clone(),
            None => message_for_indexes(&compiled.schema, &compiled.file, &[0]).map_err(|e| {
                Error::References {
                    what: format!("schema id {latest_id} (subject '{subject}')"),
                    reason: e,
                }
            })?,
        };
        stats.schema_ids.fetch_add(1, Ordering::Relaxed);
        let subject_name = subject.clone();
        Ok(Self::Decode(Arc::new(Registry {
            client,
            subject,
            message,
            latest_id,
            latest_message,
            latest: Arc::clone(&compiled),
            schemas: SchemaCache::new(&subject_name, stats, (latest_id, compiled)),
            bound: Mutex::default(),
            stats: Arc::clone(stats),
            max_depth,
        })))
    }
}

/// Registers `schema` (of `kind`) under `subject` with the registry that `options` name
/// (`'schema.registry.url'` and the other `'schema.registry.*'` options: authentication, TLS,
/// timeouts) and returns its id. A schema the subject already holds keeps its id. `weir gen`
/// writes its values in the registry's framing with it.
pub fn register_schema(
    options: &Options,
    subject: &str,
    kind: SchemaType,
    schema: &str,
) -> Result<u32, Error> {
    let what = format!("subject '{subject}'");
    let urls = options.list(&URL);
    if urls.is_empty() {
        return Err(Error::References {
            what,
            reason: "no 'schema.registry.url' given".into(),
        });
    }
    Ok(client_of(&what, urls, options)?
        .register(subject, kind, schema, &[])?
        .0)
}

/// The registry client of `what` (a source or sink, for messages) for `urls` and the
/// registry options: authentication, TLS, timeouts and retries.
fn client_of(what: &str, urls: Vec<String>, options: &Options) -> Result<RegistryClient, Error> {
    let option = |e: OptionError| Error::References {
        what: what.to_string(),
        reason: e.to_string(),
    };
    let duration = |spec: &OptionSpec| -> Result<Duration, Error> {
        options.duration(spec).map_err(option)?.ok_or_else(|| {
            option(OptionError::Missing {
                key: spec.key.to_string(),
                doc: spec.doc,
            })
        })
    };
    let secret = |spec: &OptionSpec| options.text(spec).map(Secret::new);
    let path = |spec: &OptionSpec| options.text(spec).map(|p| PemSource::File(p.into()));
    let auth = match (secret(&BASIC_AUTH), secret(&BEARER_TOKEN)) {
        (Some(_), Some(_)) => {
            return Err(option(OptionError::Conflict(
                "give 'schema.registry.basic.auth.user.info' or \
                     'schema.registry.bearer.auth.token', not both"
                    .into(),
            )))
        }
        (Some(b), None) => Auth::Basic(b),
        (None, Some(t)) => Auth::Bearer(t),
        (None, None) => Auth::None,
    };
    refuse_clear_text_credentials(&urls, !matches!(auth, Auth::None), options).map_err(option)?;
    let tls = RegistryTls {
        ca: path(&CA_LOCATION),
        certificate: path(&CERTIFICATE_LOCATION),
        key: path(&KEY_LOCATION),
        key_password: secret(&KEY_PASSWORD),
    };
    if tls.certificate.is_some() != tls.key.is_some() {
        return Err(option(OptionError::Conflict(
            "'schema.registry.ssl.certificate.location' and \
                 'schema.registry.ssl.key.location' go together"
                .into(),
        )));
    }
    let client = RegistryClient::new(ClientSettings {
        urls,
        auth,
        tls,
        timeout: duration(&TIMEOUT)?,
        retries: options
            .count(&RETRIES)
            .map_err(option)?
            // At most 100: with doubling backoff capped at 10 s that is already 15 minutes.
            .map_or(3, |r| u32::try_from(r.min(100)).unwrap_or(100)),
        backoff: duration(&BACKOFF)?,
    })?;
    Ok(client)
}

/// The value of `key`, an option another declaration owns (the connector's `'topic'`, the
/// encoding's `'message'`), which the registry reads too.
fn value_of<'a>(options: &'a Options, key: &str) -> Option<&'a str> {
    options.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The subject of `what`'s values: `'schema.registry.subject'`, or as the subject name strategy
/// makes it from the topic and the message type.
fn subject_of(
    what: &str,
    options: &Options,
    message: Option<&str>,
    topic: Option<&str>,
) -> Result<String, Error> {
    let option = |e: OptionError| Error::References {
        what: what.to_string(),
        reason: e.to_string(),
    };
    let subject = match options.text(&SUBJECT) {
        Some(s) => s.to_string(),
        None => {
            let strategy = options.choice(&STRATEGY).map_err(option)?;
            let need = |what: &str| {
                option(OptionError::Conflict(format!(
                    "'schema.registry.subject' is not given and the subject name strategy \
                         needs {what}"
                )))
            };
            match strategy.unwrap_or("TopicNameStrategy") {
                "RecordNameStrategy" => message
                    .map(str::to_string)
                    .ok_or_else(|| need("'message'"))?,
                "TopicRecordNameStrategy" => format!(
                    "{}-{}",
                    topic.ok_or_else(|| need("'topic'"))?,
                    message.ok_or_else(|| need("'message'"))?
                ),
                _ => format!("{}-value", topic.ok_or_else(|| need("'topic'"))?),
            }
        }
    };
    Ok(subject)
}

/// A sink's values in the schema registry's framing: the subject's latest schema, compiled,
/// and the bytes written before each message.
pub(crate) struct SinkSchema {
    /// The registered schema with its references.
    pub(crate) schema: ProtoSchema,
    /// The full name of the message type written.
    pub(crate) message: String,
    /// The schema's id.
    pub(crate) id: u32,
    /// The subject it is the latest version of.
    pub(crate) subject: String,
    /// The Confluent framing: magic byte 0, the id (4 bytes, big-endian), the message indexes.
    pub(crate) prefix: Vec<u8>,
}

impl std::fmt::Debug for SinkSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SinkSchema({} of subject '{}', id {})",
            self.message, self.subject, self.id
        )
    }
}

/// A `.proto` file to register (`'auto.register.schemas'`), with the files it imports other
/// than the well-known types.
pub(crate) struct ProtoFiles {
    /// The file's text.
    pub(crate) text: String,
    /// The names it imports them by.
    pub(crate) imports: Vec<String>,
    /// The imported files, each before the files that import it: its import name (also the
    /// subject it is registered under, as Confluent's serializers name referenced subjects),
    /// its text, and the names it imports in turn.
    pub(crate) imported: Vec<(String, String, Vec<String>)>,
}

impl ProtoFiles {
    /// Registers every imported file under its import name, then the file itself under
    /// `subject`, each with references to what it imports; returns the file's id.
    fn register(&self, client: &RegistryClient, sink: &str, subject: &str) -> Result<u32, Error> {
        let mut versions: HashMap<&str, i64> = HashMap::new();
        // Each import is registered before the files that import it, so its version is known.
        let references =
            |imports: &[String], versions: &HashMap<&str, i64>| {
                imports
                    .iter()
                    .map(|name| {
                        let version = versions.get(name.as_str()).copied().ok_or_else(|| {
                            Error::References {
                                what: format!("sink {sink}: subject '{subject}'"),
                                reason: format!(
                                    "'{name}' is imported before it is registered; this is a bug \
                                 in weir"
                                ),
                            }
                        })?;
                        Ok(client::Reference {
                            name: name.clone(),
                            subject: name.clone(),
                            version,
                        })
                    })
                    .collect::<Result<Vec<_>, Error>>()
            };
        for (name, text, imports) in &self.imported {
            let refs = references(imports, &versions)?;
            let (id, version) = client.register(name, SchemaType::Protobuf, text, &refs)?;
            tracing::info!(sink, subject = %name, schema_id = id, version, "registered an import of the sink's schema");
            versions.insert(name, version);
        }
        let refs = references(&self.imports, &versions)?;
        let (id, _) = client.register(subject, SchemaType::Protobuf, &self.text, &refs)?;
        tracing::info!(sink, subject = %subject, schema_id = id, "registered the sink's schema");
        Ok(id)
    }
}

impl SinkSchema {
    /// For a sink with `'schema.registry.url'` (`None` without): the latest schema of the
    /// subject (`'<topic>-value'` by default), as with Confluent's `use.latest.version=true`,
    /// or with `register` (`'auto.register.schemas'`) that `.proto` file, registered under the
    /// subject after its imports; and the message `'message'` names (the schema's first
    /// without it).
    pub(crate) fn open(
        sink: &str,
        options: &Options,
        register: Option<&ProtoFiles>,
    ) -> Result<Option<Self>, Error> {
        let urls = options.list(&URL);
        if urls.is_empty() {
            return Ok(None);
        }
        let what = format!("sink {sink}");
        let client = client_of(&what, urls, options)?;
        let message = value_of(options, "message").map(|m| m.trim_start_matches('.').to_string());
        let topic = value_of(options, "topic");
        let subject = subject_of(&what, options, message.as_deref(), topic)?;
        let registered = match register {
            Some(files) => client.schema_by_id(files.register(&client, sink, &subject)?)?,
            None => client.version(&subject, -1)?,
        };
        let id = registered.id.ok_or_else(|| Error::BadAnswer {
            url: registered.from.clone(),
            what: format!("subject '{subject}' version latest"),
            reason: "no 'id'".into(),
        })?;
        let compiled = compile(&client, &registered, id, &subject)?;
        let in_schema = |reason: String| Error::References {
            what: format!("schema id {id} (subject '{subject}')"),
            reason,
        };
        let message = match message {
            Some(m) => m,
            None => {
                message_for_indexes(&compiled.schema, &compiled.file, &[0]).map_err(in_schema)?
            }
        };
        let indexes =
            indexes_for_message(&compiled.schema, &compiled.file, &message).ok_or_else(|| {
                in_schema(format!(
                    "message {message} is not a message of the registered schema's own file"
                ))
            })?;
        let prefix = registry_prefix(id, &indexes);
        Ok(Some(Self {
            schema: compiled.schema,
            message,
            id,
            subject,
            prefix,
        }))
    }
}

/// Compiles a registered protobuf schema with its references.
fn compile(
    client: &RegistryClient,
    schema: &RegisteredSchema,
    id: u32,
    subject: &str,
) -> Result<Compiled, Error> {
    let what = format!("schema id {id} (subject '{subject}')");
    if !schema.schema_type.eq_ignore_ascii_case("PROTOBUF") {
        return Err(Error::References {
            what,
            reason: format!(
                "it is a {} schema; the protobuf encoding needs a PROTOBUF one",
                schema.schema_type
            ),
        });
    }
    let file = format!("weir-registry-schema-{id}.proto");
    let sources = client.with_references(schema, &file, &what)?;
    let descriptors: Vec<Option<Vec<u8>>> = sources.iter().map(|(_, t)| descriptor(t)).collect();
    let files: Vec<(&str, SourceText<'_>)> = sources
        .iter()
        .zip(&descriptors)
        .map(|((n, t), d)| {
            let text = match d {
                Some(bytes) => SourceText::Descriptor(bytes),
                None => SourceText::Proto(t),
            };
            (n.as_str(), text)
        })
        .collect();
    let schema = ProtoSchema::from_files(&files, &file).map_err(|e| Error::References {
        what,
        reason: e.to_string(),
    })?;
    Ok(Compiled { schema, file })
}

/// The bytes of a schema registered as a base64-encoded `FileDescriptorProto` (as Confluent's
/// Python and Go serializers register them; Confluent's registry hands back `.proto` text, a
/// registry that keeps what it was given hands back the base64), or `None` for `.proto` text.
fn descriptor(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let text = text.trim();
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    <prost_types::FileDescriptorProto as prost::Message>::decode(bytes.as_slice()).ok()?;
    Some(bytes)
}

impl Registry {
    /// The schema of `id`, compiled: from the cache, or fetched (with retries) and compiled.
    fn schema(&self, id: u32) -> Result<Arc<Compiled>, SchemaIdError> {
        self.schemas.get(id, || {
            self.client
                .schema_by_id(id)
                .and_then(|s| compile(&self.client, &s, id, &self.subject))
        })
    }

    /// The message type of schema `c` for the message-index list `indexes`.
    fn message(&self, id: u32, c: &Compiled, indexes: &[u8]) -> Result<String, SchemaIdError> {
        if let Some(m) = &self.message {
            return Ok(m.clone());
        }
        let path = RegistryFraming {
            schema_id: id,
            indexes,
            payload_at: 0,
        }
        .index_path();
        message_for_indexes(&c.schema, &c.file, &path).map_err(|e| {
            SchemaIdError::unavailable(id, format!("source subject '{}'", self.subject), e)
        })
    }
}

/// A schema id and a message-index list (as on the wire).
type PlanKey = (u32, Vec<u8>);

/// The plans of one preparation (the declared columns, or a projection of them), by schema id
/// and message-index list.
pub(crate) struct Plans {
    registry: Arc<Registry>,
    target: TargetColumns,
    plans: RwLock<HashMap<PlanKey, Result<Arc<SchemaPlan>, SchemaIdError>>>,
}

impl PlanSource for Plans {
    fn plan(&self, schema_id: u32, indexes: &[u8]) -> Result<Arc<SchemaPlan>, SchemaIdError> {
        let key = (schema_id, indexes.to_vec());
        if let Some(p) = self
            .plans
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return p.clone();
        }
        let compiled = self.registry.schema(schema_id)?;
        let message = self.registry.message(schema_id, &compiled, indexes)?;
        let plan = SchemaPlan::compile(&self.target, schema_id, &compiled.schema, &message)
            .map(Arc::new)
            .map_err(SchemaIdError::from);
        self.registry
            .stats
            .schema_plans
            .fetch_add(1, Ordering::Relaxed);
        self.plans
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert(plan)
            .clone()
    }
}

/// The `protobuf` encoding with schemas from the registry.
pub(crate) struct RegistryFactory(pub(crate) Arc<Registry>);

impl DecoderFactory for RegistryFactory {
    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let r = &self.0;
        let options = ProtoDecoderOptions {
            batch_size: request.batch_size.max(1),
            max_depth: r.max_depth,
        };
        let latest = target_in(
            request,
            r.latest_id,
            &r.latest,
            &r.latest_message,
            r,
            options,
        );
        let target = match latest {
            Ok(target) => target,
            Err(e) if tolerates_misfits(request.options) => {
                match self.newest_fitting(request, options)? {
                    Some(target) => target,
                    None => {
                        return Err(CodecError::Other(format!(
                            "{e}; no earlier version of subject '{}' has them either",
                            r.subject
                        )))
                    }
                }
            }
            Err(e) => {
                return Err(CodecError::Other(format!(
                    "{e} (with 'on.error' = 'skip' or 'dead_letter' the source reads by the \
                     newest version of the subject that has them, and sets aside the messages \
                     that do not fit)"
                )))
            }
        };
        Ok(Arc::new(RegistryPrepared::new(
            Arc::clone(r),
            target,
            request.batch_size,
        )))
    }

    fn options(&self) -> &[OptionSpec] {
        PROTOBUF_OPTIONS
    }

    fn default_columns(&self, _options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        let r = &self.0;
        Ok(default_columns(&r.latest.schema, &r.latest_message)?)
    }

    fn confluent_message_indexes(&self) -> bool {
        true
    }
}

impl RegistryFactory {
    /// The declared columns bound to the newest version of the subject that has them, when the
    /// latest does not (a producer registered an incompatible schema). Messages of the latest
    /// schema then fail one by one under `'on.error'`, as they would mid-stream, instead of the
    /// source refusing to start. Logged once per version chosen.
    fn newest_fitting(
        &self,
        request: &DecoderRequest<'_>,
        options: ProtoDecoderOptions,
    ) -> Result<Option<TargetColumns>, CodecError> {
        let r = &self.0;
        let remembered = *r.bound.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((id, _)) = remembered {
            if let Some(t) = r.cached(id).and_then(|c| r.fit(request, id, &c, options)) {
                return Ok(Some(t));
            }
        }
        let fail = |e: Error| CodecError::Other(format!("subject '{}': {e}", r.subject));
        for version in r.client.versions(&r.subject).map_err(fail)? {
            let registered = r.client.version(&r.subject, version).map_err(fail)?;
            let Some(id) = registered.id.filter(|&id| id != r.latest_id) else {
                continue;
            };
            let compiled = match r.cached(id) {
                Some(c) => c,
                // A version that does not compile cannot be read by: try the one before.
                None => match compile(&r.client, &registered, id, &r.subject) {
                    Ok(c) => {
                        let c = Arc::new(c);
                        r.schemas.insert(id, Arc::clone(&c));
                        c
                    }
                    Err(_) => continue,
                },
            };
            if let Some(t) = r.fit(request, id, &compiled, options) {
                let mut bound = r.bound.lock().unwrap_or_else(|e| e.into_inner());
                if *bound != Some((id, version)) {
                    tracing::warn!(
                        source = request.source,
                        subject = %r.subject,
                        latest_id = r.latest_id,
                        schema_id = id,
                        version,
                        "the latest schema of subject '{}' (id {}) does not have the declared columns; reading by version {version} (schema id {id}), the newest that has them. Messages of other schemas read a field their schema lacks as null; one whose type changed follows 'on.error'",
                        r.subject,
                        r.latest_id
                    );
                    *bound = Some((id, version));
                }
                return Ok(Some(t));
            }
        }
        Ok(None)
    }
}

impl Registry {
    /// Schema `id`, when compiled already.
    fn cached(&self, id: u32) -> Option<Arc<Compiled>> {
        self.schemas.cached(id)
    }

    /// The request's columns read from schema `id`, if it has them.
    fn fit(
        &self,
        request: &DecoderRequest<'_>,
        id: u32,
        compiled: &Compiled,
        options: ProtoDecoderOptions,
    ) -> Option<TargetColumns> {
        let first = match &self.message {
            Some(m) => m.clone(),
            None => message_for_indexes(&compiled.schema, &compiled.file, &[0]).ok()?,
        };
        target_in(request, id, compiled, &first, self, options).ok()
    }
}

/// `'on.error'` sets aside messages that do not fit the columns (`skip`, `dead_letter`).
fn tolerates_misfits(options: &Options) -> bool {
    // Read as the source reads the option: case and spaces aside.
    options.iter().any(|(k, v)| {
        k == "on.error"
            && ["skip", "dead_letter"]
                .iter()
                .any(|p| v.trim().eq_ignore_ascii_case(p))
    })
}

/// The request's columns read from schema `id` (`compiled`): from `first`, its message of
/// index 0 or the `'message'` named; without `'message'`, from the first top-level message of
/// the schema's file that has them all (a schema file often holds other messages first). The
/// error names the subject and the message closest to the columns.
fn target_in(
    request: &DecoderRequest<'_>,
    id: u32,
    compiled: &Compiled,
    first: &str,
    r: &Registry,
    options: ProtoDecoderOptions,
) -> Result<TargetColumns, String> {
    let on =
        |message: &str| TargetColumns::new(request.columns, id, &compiled.schema, message, options);
    let mut target = on(first);
    if target.is_err() && r.message.is_none() {
        let others: Vec<String> = compiled
            .schema
            .pool()
            .get_file_by_name(&compiled.file)
            .map(|f| f.messages().map(|m| m.full_name().to_string()).collect())
            .unwrap_or_default();
        if let Some(t) = others.iter().find_map(|m| on(m).ok()) {
            target = Ok(t);
        } else if let Some(best) = others.iter().max_by_key(|m| {
            // For the error: the message with the most fields named like the columns.
            compiled
                .schema
                .pool()
                .get_message_by_name(m)
                .map_or(0, |d| {
                    request
                        .columns
                        .iter()
                        .filter(|c| d.get_field_by_name(&c.name).is_some())
                        .count()
                })
        }) {
            target = on(best);
        }
    }
    target.map_err(|e| {
        format!(
            "subject '{}' (schema id {id}): {e}{}",
            r.subject,
            if r.message.is_none() {
                "; no message of the schema has these columns (name one with 'message')"
            } else {
                ""
            }
        )
    })
}

/// The registry's protobuf decoding prepared for some columns.
struct RegistryPrepared {
    plans: Arc<Plans>,
    schema: SchemaRef,
    batch_size: usize,
}

impl RegistryPrepared {
    fn new(registry: Arc<Registry>, target: TargetColumns, batch_size: usize) -> Self {
        let schema = target.schema();
        Self {
            plans: Arc::new(Plans {
                registry,
                target,
                plans: RwLock::default(),
            }),
            schema,
            batch_size,
        }
    }
}

impl PreparedDecoder for RegistryPrepared {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        let source: Arc<dyn PlanSource> = Arc::clone(&self.plans) as Arc<dyn PlanSource>;
        Box::new(FramedProtoDecoder::new(
            source,
            Arc::clone(&self.schema),
            self.batch_size,
        ))
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let target = self.plans.target.project(columns).ok_or_else(|| {
            CodecError::Other(format!(
                "a projection of columns {columns:?} is out of range: the decoder produces {}",
                self.schema.fields().len()
            ))
        })?;
        Ok(Arc::new(RegistryPrepared::new(
            Arc::clone(&self.plans.registry),
            target,
            self.batch_size,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Options {
        Options::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    /// Credentials go over plain http to loopback only, unless allowed in so many words.
    #[test]
    fn credentials_over_plain_http_are_refused_off_loopback() {
        let remote = vec!["http://registry.example.com:8081".to_string()];
        let e = refuse_clear_text_credentials(&remote, true, &Options::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema.registry.allow.http"), "{e}");
        // User info in the URL is a credential too, and is not shown.
        let with_user = vec!["http://u:hunter2@registry.example.com".to_string()];
        let e = refuse_clear_text_credentials(&with_user, false, &Options::default())
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        refuse_clear_text_credentials(&remote, false, &Options::default()).unwrap();
        refuse_clear_text_credentials(
            &remote,
            true,
            &options(&[("schema.registry.allow.http", "true")]),
        )
        .unwrap();
        for local in [
            "http://127.0.0.1:8081",
            "http://localhost:1",
            "http://[::1]:2",
        ] {
            refuse_clear_text_credentials(&[local.to_string()], true, &Options::default()).unwrap();
        }
        refuse_clear_text_credentials(
            &["https://registry.example.com".to_string()],
            true,
            &Options::default(),
        )
        .unwrap();
    }
}
