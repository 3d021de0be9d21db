//! Avro schemas by id from the registry: with `'encoding' = 'avro'` and no local schema, each
//! message's schema id gives its writer's schema, fetched once per id, resolved against the
//! declared columns (or, when none are declared, the columns of the subject's latest schema,
//! fetched when the source is created) and cached, with the latest schema as the reader. Rows
//! of every schema id land in the same columns: a field a version adds is not read unless
//! declared, a declared field a version lacks reads as the reader's default (or null), a
//! narrower number widens (`int` into `BIGINT`), and a type a column cannot hold fails the
//! message under `'on.error'`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use weir_codec::{
    avro_default_columns, AvroDecoderOptions, AvroPlan, AvroPlanSource, AvroSchema, CodecError,
    ColumnSpec, Decoder, DecoderFactory, DecoderRequest, FramedAvroDecoder, OptionError,
    OptionSpec, Options, PreparedDecoder, SchemaIdError, SchemaRef, AVRO_OPTIONS,
};

use super::cache::SchemaCache;
use super::client::{RegisteredSchema, RegistryClient};
use super::{client_of, subject_of, value_of, Error};
use crate::metrics::SourceStats;

/// A source's registry for Avro: the client, the subject, its latest schema, the schemas by id.
pub(crate) struct AvroRegistry {
    client: RegistryClient,
    subject: String,
    latest_id: u32,
    latest: Arc<AvroSchema>,
    schemas: SchemaCache<AvroSchema>,
    stats: Arc<SourceStats>,
    max_depth: usize,
}

impl AvroRegistry {
    /// Connects for source `source` and fetches its subject's latest schema (an unreachable
    /// registry or a missing subject is an error here).
    pub(crate) fn open(
        source: &str,
        options: &Options,
        urls: Vec<String>,
        stats: &Arc<SourceStats>,
    ) -> Result<Self, Error> {
        let what = format!("source {source}");
        let client = client_of(&what, urls, options)?;
        let subject = subject_of(&what, options, None, value_of(options, "topic"))?;
        let max_depth = AVRO_OPTIONS
            .iter()
            .find(|o| o.key == "avro.max.depth")
            .map_or(Ok(Some(100)), |spec| options.count(spec))
            .map_err(|e: OptionError| Error::References {
                what: what.clone(),
                reason: e.to_string(),
            })?
            .map_or(100, |d| usize::try_from(d).unwrap_or(usize::MAX));
        let latest = client.version(&subject, -1)?;
        let latest_id = latest.id.ok_or_else(|| Error::BadAnswer {
            url: latest.from.clone(),
            what: format!("subject '{subject}' version latest"),
            reason: "no 'id'".into(),
        })?;
        let schema = Arc::new(parse(&client, &latest, latest_id, &subject)?);
        stats.schema_ids.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            client,
            schemas: SchemaCache::new(&subject, stats, (latest_id, Arc::clone(&schema))),
            subject,
            latest_id,
            latest: schema,
            stats: Arc::clone(stats),
            max_depth,
        })
    }

    /// The writer's schema of `id`: from the cache, or fetched (with retries) and parsed.
    fn schema(&self, id: u32) -> Result<Arc<AvroSchema>, SchemaIdError> {
        self.schemas.get(id, || {
            self.client
                .schema_by_id(id)
                .and_then(|s| parse(&self.client, &s, id, &self.subject))
        })
    }
}

/// A registered schema as Avro, with the named types of the schemas it refers to.
fn parse(
    client: &RegistryClient,
    schema: &RegisteredSchema,
    id: u32,
    subject: &str,
) -> Result<AvroSchema, Error> {
    let what = format!("schema id {id} (subject '{subject}')");
    if !schema.schema_type.eq_ignore_ascii_case("AVRO") {
        return Err(Error::References {
            what,
            reason: format!(
                "it is a {} schema; the avro encoding needs an AVRO one",
                schema.schema_type
            ),
        });
    }
    let mut texts = Vec::new();
    let mut open = Vec::new();
    referenced(
        client,
        schema,
        &what,
        &mut open,
        &mut Vec::new(),
        &mut texts,
    )?;
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    AvroSchema::parse_with_references(&schema.schema, &texts).map_err(|e| Error::References {
        what,
        reason: e.to_string(),
    })
}

/// The most schemas one schema may refer to, directly or not.
const MAX_REFERENCES: usize = 1000;

/// Appends to `texts` the schemas `schema` refers to (other subjects' versions that define the
/// named types it uses), each after the ones it refers to itself and each once, the order in
/// which their types must be known. `open` holds the references being resolved (a cycle is an
/// error), `done` those already appended.
fn referenced(
    client: &RegistryClient,
    schema: &RegisteredSchema,
    what: &str,
    open: &mut Vec<(String, i64)>,
    done: &mut Vec<(String, i64)>,
    texts: &mut Vec<String>,
) -> Result<(), Error> {
    for r in &schema.references {
        let key = (r.subject.clone(), r.version);
        if done.contains(&key) {
            continue;
        }
        if open.contains(&key) {
            return Err(Error::References {
                what: what.to_string(),
                reason: format!(
                    "its references form a cycle through subject '{}' version {}",
                    r.subject, r.version
                ),
            });
        }
        if done.len() >= MAX_REFERENCES {
            return Err(Error::References {
                what: what.to_string(),
                reason: format!("it refers to more than {MAX_REFERENCES} schemas"),
            });
        }
        let referred = client.version(&r.subject, r.version)?;
        if !referred.schema_type.eq_ignore_ascii_case("AVRO") {
            return Err(Error::References {
                what: what.to_string(),
                reason: format!(
                    "its reference '{}' (subject '{}') is a {} schema, not an AVRO one",
                    r.name, r.subject, referred.schema_type
                ),
            });
        }
        open.push(key.clone());
        referenced(client, &referred, what, open, done, texts)?;
        open.pop();
        done.push(key);
        texts.push(referred.schema);
    }
    Ok(())
}

/// The plans of one preparation (its columns), by schema id.
struct AvroPlans {
    registry: Arc<AvroRegistry>,
    columns: Vec<ColumnSpec>,
    options: AvroDecoderOptions,
    plans: RwLock<HashMap<u32, Result<Arc<AvroPlan>, SchemaIdError>>>,
}

impl AvroPlanSource for AvroPlans {
    fn plan(&self, schema_id: u32) -> Result<Arc<AvroPlan>, SchemaIdError> {
        if let Some(p) = self
            .plans
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&schema_id)
        {
            return p.clone();
        }
        let schema = self.registry.schema(schema_id)?;
        let reader = Some(self.registry.latest.as_ref());
        let plan = AvroPlan::compile(
            &schema,
            reader,
            schema_id,
            &self.columns,
            false,
            self.options,
        )
        .map(Arc::new)
        .map_err(SchemaIdError::from);
        self.registry
            .stats
            .schema_plans
            .fetch_add(1, Ordering::Relaxed);
        self.plans
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(schema_id)
            .or_insert(plan)
            .clone()
    }
}

/// The `avro` encoding with schemas from the registry.
pub(crate) struct AvroRegistryFactory(pub(crate) Arc<AvroRegistry>);

impl DecoderFactory for AvroRegistryFactory {
    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let r = &self.0;
        let options = AvroDecoderOptions {
            batch_size: request.batch_size.max(1),
            max_depth: r.max_depth,
            ..AvroDecoderOptions::default()
        };
        prepared(Arc::clone(r), request.columns.to_vec(), options)
    }

    fn options(&self) -> &[OptionSpec] {
        AVRO_OPTIONS
    }

    fn default_columns(&self, _options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        Ok(avro_default_columns(&self.0.latest)?)
    }
}

/// The decoding of `columns`: checked against the subject's latest schema (every column must
/// be one of its fields, with a type that can hold it), which also gives each partition's
/// decoder its buffers.
fn prepared(
    registry: Arc<AvroRegistry>,
    columns: Vec<ColumnSpec>,
    options: AvroDecoderOptions,
) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
    let reference = AvroPlan::compile(
        &registry.latest,
        None,
        registry.latest_id,
        &columns,
        true,
        options,
    )
    .map_err(|e| CodecError::Other(format!("subject '{}': {e}", registry.subject)))?;
    let reference = Arc::new(reference);
    let plans = AvroPlans {
        plans: RwLock::new(HashMap::from([(
            registry.latest_id,
            Ok(Arc::clone(&reference)),
        )])),
        registry,
        columns,
        options,
    };
    Ok(Arc::new(AvroRegistryPrepared {
        plans: Arc::new(plans),
        reference,
    }))
}

/// The registry's Avro decoding prepared for some columns.
struct AvroRegistryPrepared {
    plans: Arc<AvroPlans>,
    /// The latest schema's plan: the columns' buffers, and the first plan each decoder holds.
    reference: Arc<AvroPlan>,
}

impl PreparedDecoder for AvroRegistryPrepared {
    fn schema(&self) -> SchemaRef {
        self.reference.schema()
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        let source: Arc<dyn AvroPlanSource> = Arc::clone(&self.plans) as Arc<dyn AvroPlanSource>;
        Box::new(FramedAvroDecoder::new(
            source,
            Arc::clone(&self.reference),
            self.plans.options.batch_size,
        ))
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let picked = columns
            .iter()
            .map(|&i| {
                self.plans.columns.get(i).cloned().ok_or_else(|| {
                    CodecError::Other(format!(
                        "column {i} is out of range: the decoder produces {} columns",
                        self.plans.columns.len()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        prepared(Arc::clone(&self.plans.registry), picked, self.plans.options)
    }
}
