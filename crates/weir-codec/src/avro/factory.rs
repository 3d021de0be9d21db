//! The built-in `avro` encoding as a [`DecoderFactory`]: the writer's schema from an option,
//! parsed and planned once per source.

use std::sync::{Arc, Mutex};

use arrow_schema::SchemaRef;

use super::container::ContainerHeader;
use super::{avro_default_columns, AvroDecoder, AvroDecoderOptions, AvroFraming, AvroSchema};
use crate::error::CodecError;
use crate::factory::{DecoderFactory, DecoderRequest, PreparedDecoder};
use crate::options::{OptionError, OptionKind, OptionSpec, Options};
use crate::{ColumnSpec, Decoder};

/// The built-in `avro` encoding: an [`AvroDecoder`] for the declared columns (or, when none are
/// declared, one column per top-level field).
///
/// Options: `'avro.schema'` (the writer's schema as JSON text) or `'avro.schema.file'` (a file
/// holding it), `'avro.framing'` = `'plain'` (default) or `'single-object'`, and
/// `'avro.max.depth'` (100). Confluent-framed messages: add `'confluent.wire'` = `'true'`.
#[derive(Debug, Default, Clone, Copy)]
pub struct AvroFactory;

/// The `avro` encoding's options.
pub const AVRO_OPTIONS: &[OptionSpec] =
    &[AVRO_SCHEMA, AVRO_SCHEMA_FILE, AVRO_FRAMING, AVRO_MAX_DEPTH];

const AVRO_SCHEMA: OptionSpec = OptionSpec::new(
    "avro.schema",
    OptionKind::Text,
    "avro: the writer's schema as JSON text (this or 'avro.schema.file' is required)",
);
const AVRO_SCHEMA_FILE: OptionSpec = OptionSpec::new(
    "avro.schema.file",
    OptionKind::Path,
    "avro: a file holding the writer's schema (`.avsc`)",
);
const AVRO_FRAMING: OptionSpec = OptionSpec::new(
    "avro.framing",
    OptionKind::Choice(&["plain", "single-object"]),
    "avro: each message is the binary datum alone, or Avro's single-object encoding \
     (C3 01, the schema's fingerprint, the datum)",
)
.default_value("plain");
const AVRO_MAX_DEPTH: OptionSpec = OptionSpec::new(
    "avro.max.depth",
    OptionKind::Count,
    "avro: the deepest nesting of records, arrays, maps and unions accepted",
)
.default_value("100");

impl AvroFactory {
    fn schema(options: &Options) -> Result<(AvroSchema, String), CodecError> {
        let text = match (options.text(&AVRO_SCHEMA), options.text(&AVRO_SCHEMA_FILE)) {
            (Some(t), None) => t.to_string(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                CodecError::Other(format!(
                    "cannot read the Avro schema file '{path}' ('avro.schema.file'): {e}"
                ))
            })?,
            (Some(_), Some(_)) => {
                return Err(OptionError::Conflict(
                    "give the Avro schema once: 'avro.schema' or 'avro.schema.file', not both"
                        .into(),
                )
                .into())
            }
            (None, None) => {
                return Err(OptionError::Missing {
                    key: AVRO_SCHEMA.key.to_string(),
                    doc: AVRO_SCHEMA.doc,
                }
                .into())
            }
        };
        let schema = AvroSchema::parse(&text).map_err(|e| CodecError::Other(e.to_string()))?;
        Ok((schema, text))
    }
}

impl DecoderFactory for AvroFactory {
    fn options(&self) -> &[OptionSpec] {
        AVRO_OPTIONS
    }

    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let (schema, text) = Self::schema(request.options)?;
        let o = request.options;
        let options = AvroDecoderOptions {
            batch_size: request.batch_size,
            max_depth: o
                .count(&AVRO_MAX_DEPTH)?
                .map_or(100, |d| usize::try_from(d).unwrap_or(usize::MAX)),
            framing: match o.choice(&AVRO_FRAMING)? {
                Some("single-object") => AvroFraming::SingleObject,
                _ => AvroFraming::Plain,
            },
        };
        let decoder = AvroDecoder::new(&schema, request.columns, options)?;
        Ok(Arc::new(PreparedAvro {
            schema,
            text: text.into(),
            columns: request.columns.to_vec(),
            options,
            decoder,
            writers: Mutex::default(),
        }))
    }

    fn default_columns(&self, options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        Ok(avro_default_columns(&Self::schema(options)?.0)?)
    }
}

/// The `avro` encoding prepared: the schema parsed and the plan compiled once.
struct PreparedAvro {
    schema: AvroSchema,
    /// The schema's text: a container file whose header holds the same text needs no
    /// resolution.
    text: Arc<str>,
    columns: Vec<ColumnSpec>,
    options: AvroDecoderOptions,
    decoder: AvroDecoder,
    /// The plans of container files' writer schemas met so far, by their text (each reader of
    /// each file asks; a plan is compiled once).
    writers: Mutex<Vec<(String, Arc<PreparedAvro>)>>,
}

impl PreparedDecoder for PreparedAvro {
    fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(self.decoder.fresh())
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let columns = crate::factory::pick(&self.columns, columns)?;
        // Fields no longer read become skips: a narrower plan, the schema already parsed.
        let decoder = AvroDecoder::new(&self.schema, &columns, self.options)?;
        Ok(Arc::new(PreparedAvro {
            schema: self.schema.clone(),
            text: Arc::clone(&self.text),
            columns,
            options: self.options,
            decoder,
            writers: Mutex::default(),
        }))
    }

    fn for_container(
        &self,
        header: &ContainerHeader,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        if self.options.framing != AvroFraming::Plain {
            return Err(CodecError::Unsupported(
                "'avro.framing' = 'single-object' reads single-object messages, not \
                 container files; leave it out"
                    .into(),
            ));
        }
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = writers.iter().find(|(t, _)| *t == header.schema_text) {
            return Ok(Arc::clone(p) as Arc<dyn PreparedDecoder>);
        }
        // The file was written with this very schema: the exact plan. Otherwise the header's
        // schema is resolved against this one.
        let decoder = if header.schema_text == *self.text {
            self.decoder.fresh()
        } else {
            AvroDecoder::resolving(&header.schema, &self.schema, &self.columns, self.options)?
        };
        let prepared = Arc::new(PreparedAvro {
            schema: self.schema.clone(),
            text: Arc::clone(&self.text),
            columns: self.columns.clone(),
            options: self.options,
            decoder,
            writers: Mutex::default(),
        });
        writers.push((header.schema_text.clone(), Arc::clone(&prepared)));
        Ok(prepared)
    }
}
