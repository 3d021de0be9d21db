//! Errors of schema loading, plan building and decoding.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::options::OptionError;

/// An encoding could not be set up: a missing or bad option, an unreadable schema, or columns
/// that do not fit.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// An option is missing or has a value the encoding does not accept.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The schema file could not be loaded.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The columns do not fit the message.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The encoding cannot do what was asked (for example infer columns).
    #[error("{0}")]
    Unsupported(String),
    /// An encoder cannot write one row of a batch (a value its format cannot hold); the other
    /// rows may be fine. The sink's `'on.error'` decides what becomes of it.
    #[error("row {row}: {reason}")]
    Row {
        /// The row's index in the batch.
        row: usize,
        /// What is wrong with it, naming the column.
        reason: String,
    },
    /// Anything else a user encoding reports.
    #[error("{0}")]
    Other(String),
}

/// A schema file could not be read or compiled.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The file could not be read.
    #[error("cannot read schema file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `protox` rejected the `.proto` file (syntax error, missing import, ...).
    #[error("cannot compile {path}: {message} (check the file and the include paths)")]
    Compile {
        /// The file.
        path: PathBuf,
        /// What protox said.
        message: String,
    },
    /// The bytes are not a valid `FileDescriptorSet`.
    #[error("{origin} is not a valid protobuf FileDescriptorSet: {message}")]
    DescriptorSet {
        /// Where the bytes came from (a path, or "descriptor bytes").
        origin: String,
        /// What prost-reflect said.
        message: String,
    },
}

/// The requested columns cannot be read from the message: found when the plan is built.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The message name is not in the schema.
    #[error("message '{message}' is not in the schema; known messages include: {known}")]
    UnknownMessage {
        /// The requested name.
        message: String,
        /// A few names that are in the schema.
        known: String,
    },
    /// No field has the column's name (or path).
    #[error("column '{column}': message '{message}' has no field '{field}'")]
    UnknownField {
        /// The column.
        column: String,
        /// The message searched.
        message: String,
        /// The missing field name.
        field: String,
    },
    /// The column's name matches several nested fields.
    #[error("column '{column}' is ambiguous: it matches {candidates}; bind it to one with an explicit path")]
    AmbiguousField {
        /// The column.
        column: String,
        /// The matching paths, comma separated.
        candidates: String,
    },
    /// The declared column type does not fit the field type.
    #[error("column '{column}': field '{field}' has protobuf type {field_type}, which cannot be read as Arrow {column_type}{hint}")]
    TypeMismatch {
        /// The column (dotted for struct children).
        column: String,
        /// The field's full name.
        field: String,
        /// The protobuf type, as written in a .proto file.
        field_type: String,
        /// The declared Arrow type.
        column_type: String,
        /// Advice, starting with "; " when present.
        hint: String,
    },
    /// The declared column type cannot hold the Avro field's values.
    #[error("column '{column}': field '{field}' {reason}")]
    AvroTypeMismatch {
        /// The column (dotted for struct children).
        column: String,
        /// The field's path in the record.
        field: String,
        /// Its Avro type, the column's Arrow type and advice (`is Avro long, which cannot be
        /// read as Arrow Int32; declare BIGINT`).
        reason: String,
    },
    /// The path goes through a repeated field or a scalar.
    #[error("column '{column}': path '{path}' cannot pass through field '{field}' ({reason})")]
    BadPath {
        /// The column.
        column: String,
        /// The path.
        path: String,
        /// The offending field.
        field: String,
        /// Why.
        reason: String,
    },
    /// Something in the schema weir does not read (for example proto2 groups as columns).
    #[error("column '{column}': {what} is not supported")]
    Unsupported {
        /// The column.
        column: String,
        /// What is not supported.
        what: String,
    },
    /// Two columns read the same repeated field, or a column name is used twice.
    #[error("column '{column}': {reason}")]
    Conflict {
        /// The column.
        column: String,
        /// Why.
        reason: String,
    },
    /// The options are not usable.
    #[error("invalid decoder options: {0}")]
    Options(String),
}

/// A schema's change that the declared columns cannot follow.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EvolutionError {
    /// A column's field changed to a type that does not widen into the column.
    #[error(
        "column '{column}': schema id {old_id} has {old_type}, schema id {new_id} has \
         {new_type}, which cannot be read as {column_type}"
    )]
    Incompatible {
        /// The column.
        column: String,
        /// The schema the columns were declared against.
        old_id: u32,
        /// The field's type there.
        old_type: String,
        /// The schema of the message.
        new_id: u32,
        /// The field's type there.
        new_type: String,
        /// The column's Arrow type.
        column_type: String,
    },
    /// The schema does not give the columns (no such message, a column that cannot bind).
    #[error("schema id {schema_id}: {source}")]
    Plan {
        /// The schema id.
        schema_id: u32,
        /// Why.
        #[source]
        source: Arc<PlanError>,
    },
}

/// Why a schema id met in a registry-framed message has no plan (see
/// [`crate::registry::PlanSource`]). Every message with that id carries a copy, so the cause is
/// shared, not cloned.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SchemaIdError {
    /// The schema could not be had: the registry did not give it, it does not compile, or the
    /// message-index list names no message in it.
    #[error("schema id {schema_id} ({context}): {}", shortened(cause.as_ref()))]
    Unavailable {
        /// The schema id.
        schema_id: u32,
        /// Where it was looked up (`source subject 'quotes-value'`).
        context: String,
        /// Why.
        #[source]
        cause: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The schema's message does not give the declared columns.
    #[error(transparent)]
    Evolution(#[from] EvolutionError),
}

impl SchemaIdError {
    /// Schema id `schema_id`, looked up in `context`, could not be had because of `cause`.
    pub fn unavailable(
        schema_id: u32,
        context: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Unavailable {
            schema_id,
            context: context.into(),
            cause: Arc::from(cause.into()),
        }
    }
}

/// The longest cause text a [`SchemaIdError`] shows, in bytes: every message with the id
/// carries it (into logs and dead-letter files), and a compiler's or a registry's text can be
/// long.
const MAX_CAUSE_TEXT: usize = 400;

/// `cause`'s text, cut at a character boundary to at most [`MAX_CAUSE_TEXT`] bytes.
fn shortened(cause: &(dyn std::error::Error + Send + Sync)) -> String {
    let mut text = cause.to_string();
    if text.len() > MAX_CAUSE_TEXT {
        let mut cut = MAX_CAUSE_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// Two errors are equal when they say the same (a cause is an error of any type).
impl PartialEq for SchemaIdError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for SchemaIdError {}

/// What was wrong with a message's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// A varint ran past the end of its buffer.
    TruncatedVarint,
    /// A varint had more than 10 bytes.
    VarintTooLong,
    /// A 10-byte varint whose value does not fit in 64 bits.
    VarintOverflow,
    /// A fixed32/fixed64 value ran past the end of its buffer.
    TruncatedField,
    /// A length-delimited field claims more bytes than remain.
    LengthPastEnd {
        /// The declared length.
        length: u64,
        /// The bytes that remain.
        remaining: usize,
    },
    /// Wire type 6 or 7.
    InvalidWireType(u8),
    /// A field number of 0.
    FieldNumberZero,
    /// A tag that does not fit in 32 bits (field numbers end at 2^29 - 1).
    FieldNumberTooLarge,
    /// An end-group tag with no matching start-group.
    UnexpectedEndGroup(u32),
    /// An end-group tag whose field number differs from its start-group.
    EndGroupMismatch {
        /// The start-group's field number.
        expected: u32,
        /// The end-group's field number.
        found: u32,
    },
    /// A group that never ends.
    UnterminatedGroup(u32),
    /// A known field arrived with a wire type its type cannot have.
    WireTypeMismatch {
        /// The field's full name.
        field: String,
        /// The wire type on the wire.
        found: u8,
        /// The wire type the field needs.
        expected: u8,
    },
    /// A string field is not valid UTF-8.
    InvalidUtf8 {
        /// The field's full name.
        field: String,
    },
    /// Messages or groups nested deeper than the limit.
    TooDeep(usize),
    /// A packed field's payload is not a whole number of elements.
    BadPackedLength {
        /// The field's full name.
        field: String,
    },
    /// A message is larger than 4 GiB.
    TooLarge,
    /// A sub-message that must become JSON text could not be rendered.
    Json(String),
    /// Anything a decoder outside weir-codec reports.
    Other(String),
    /// The Confluent schema-registry framing is missing or malformed.
    Confluent(String),
    /// The message's schema id has no plan (its cause is the error's source).
    /// Boxed: the per-message `Result` carries a `DecodeError`, and a schema's evolution error
    /// (four names and two ids) would triple its size.
    SchemaId(Box<SchemaIdError>),
    /// Avro binary data that does not follow its schema.
    Avro {
        /// The field's path in the record ("" for the record itself).
        field: String,
        /// What was wrong.
        problem: String,
    },
    /// A value does not fit its column (for example a Timestamp past the year 2262 in
    /// nanoseconds).
    OutOfRange {
        /// The field's full name.
        field: String,
    },
    /// The bytes are not valid JSON (RFC 8259); the text says what was wrong or expected.
    JsonSyntax(&'static str),
    /// The message is valid JSON but not an object (an array, a string, a number, ...).
    JsonNotAnObject {
        /// The JSON type found ("array", "string", ...).
        found: &'static str,
    },
    /// A JSON value has a type its column cannot hold (a string for an Int64 column, ...).
    JsonTypeMismatch {
        /// The key path of the column (`order.customer.id`, `items[].price`).
        key: String,
        /// What the column needs (its Arrow type, or "an object" on a path).
        expected: String,
        /// The JSON type found ("string", "number with a fraction", ...).
        found: &'static str,
    },
    /// A JSON value has the right type but does not fit the column (an integer overflow, a
    /// decimal with too many digits, a date that does not exist).
    JsonOutOfRange {
        /// The key path of the column.
        key: String,
        /// The column's Arrow type.
        expected: String,
    },
}

/// A message that could not be decoded. Its partial row has been rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset in the message where the problem starts.
    pub offset: usize,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    pub(crate) fn new(offset: usize, kind: DecodeErrorKind) -> Self {
        Self { offset, kind }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeErrorKind::*;
        match &self.kind {
            TruncatedVarint => write!(f, "truncated varint"),
            VarintTooLong => write!(f, "varint longer than 10 bytes"),
            VarintOverflow => write!(f, "varint overflows 64 bits"),
            TruncatedField => write!(f, "truncated fixed-width value"),
            LengthPastEnd { length, remaining } => write!(
                f,
                "length {length} runs past the end ({remaining} bytes remain)"
            ),
            InvalidWireType(t) => write!(f, "invalid wire type {t}"),
            FieldNumberZero => write!(f, "field number 0"),
            FieldNumberTooLarge => write!(f, "field number above 536870911"),
            UnexpectedEndGroup(n) => write!(f, "end-group for field {n} without a start-group"),
            EndGroupMismatch { expected, found } => write!(
                f,
                "end-group for field {found} closes a group started by field {expected}"
            ),
            UnterminatedGroup(n) => write!(f, "group of field {n} never ends"),
            WireTypeMismatch {
                field,
                found,
                expected,
            } => write!(
                f,
                "field {field} has wire type {found}, expected {expected}"
            ),
            InvalidUtf8 { field } => write!(f, "string field {field} is not valid UTF-8"),
            TooDeep(limit) => write!(f, "nesting deeper than {limit}"),
            BadPackedLength { field } => {
                write!(
                    f,
                    "packed field {field} has a length that is not a whole number of elements"
                )
            }
            TooLarge => write!(f, "message larger than 4 GiB"),
            Json(msg) => write!(f, "cannot render sub-message as JSON: {msg}"),
            Confluent(msg) => write!(f, "bad Confluent framing: {msg}"),
            SchemaId(e) => write!(f, "{e}"),
            Avro { field, problem } if field.is_empty() => write!(f, "Avro: {problem}"),
            Avro { field, problem } => write!(f, "Avro field '{field}': {problem}"),
            Other(msg) => f.write_str(msg),
            OutOfRange { field } => write!(f, "value of {field} does not fit its column type"),
            JsonSyntax(what) => write!(f, "invalid JSON: {what}"),
            JsonNotAnObject { found } => write!(
                f,
                "the message is a JSON {found}, but each message must be one JSON object \
                 (top-level arrays are not split into rows)"
            ),
            JsonTypeMismatch {
                key,
                expected,
                found,
            } => write!(f, "key '{key}': expected {expected}, found a JSON {found}"),
            JsonOutOfRange { key, expected } => {
                write!(f, "key '{key}': the value does not fit {expected}")
            }
        }?;
        write!(f, " at byte {}", self.offset)
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            DecodeErrorKind::SchemaId(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_error_stays_small() {
        // Every decoder returns `Result<(), DecodeError>` per message; a schema id error held
        // inline (104 bytes) made it at least 112.
        assert!(
            size_of::<DecodeError>() <= 72,
            "{}",
            size_of::<DecodeError>()
        );
    }

    #[test]
    fn a_long_cause_is_cut_at_a_character_boundary() {
        // 399 ASCII bytes, then 'é' (2 bytes) straddles the limit.
        let long = format!("{}é{}", "x".repeat(399), "y".repeat(1000));
        let e = SchemaIdError::unavailable(7, "source subject 'q-value'", long);
        let text = e.to_string();
        assert!(
            text.starts_with("schema id 7 (source subject 'q-value'): xxx"),
            "{text}"
        );
        assert!(text.ends_with(&format!("{}...", "x".repeat(10))), "{text}");
        let short = SchemaIdError::unavailable(7, "here", "not registered");
        assert_eq!(short.to_string(), "schema id 7 (here): not registered");
    }
}
