//! Avro schemas parsed from their JSON text into an arena of nodes (named types resolved to
//! node ids, so recursive records are plain cycles), their Parsing Canonical Form and its
//! 64-bit Rabin fingerprint (the id of the single-object encoding), and the Arrow type each node
//! reads as by default.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, IntervalUnit, TimeUnit};
use serde_json::{Map, Value};

/// An index into [`AvroSchema::nodes`].
pub(crate) type NodeId = usize;

/// A logical type over a primitive, fixed or bytes node (the Avro specification's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logical {
    Decimal { precision: u8, scale: i8 },
    Uuid,
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    LocalTimestampMillis,
    LocalTimestampMicros,
    LocalTimestampNanos,
    Duration,
}

/// A record's field.
#[derive(Debug, Clone)]
pub(crate) struct RecordField {
    pub(crate) name: String,
    /// Other names of the field (a reader's field matches a writer's of any of them).
    pub(crate) aliases: Vec<String>,
    pub(crate) schema: NodeId,
    /// The value a reader gives the field when the writer's record lacks it.
    pub(crate) default: Option<Value>,
}

/// One schema node.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Null,
    Boolean,
    Int(Option<Logical>),
    Long(Option<Logical>),
    Float,
    Double,
    Bytes(Option<Logical>),
    String(Option<Logical>),
    Record {
        name: String,
        fields: Vec<RecordField>,
    },
    Enum {
        name: String,
        symbols: Vec<String>,
        /// The symbol a reader gives a writer's symbol it does not know.
        default: Option<String>,
    },
    Array(NodeId),
    Map(NodeId),
    Fixed {
        name: String,
        size: usize,
        logical: Option<Logical>,
    },
    Union(Vec<NodeId>),
}

/// A parsed Avro schema. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct AvroSchema {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Vec<Node>,
    root: NodeId,
    canonical: String,
    fingerprint: u64,
}

/// An Avro schema that cannot be parsed; the text says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Avro schema: {0}")]
pub struct AvroSchemaError(pub(crate) String);

impl AvroSchema {
    /// Parses a schema from its JSON text.
    pub fn parse(text: &str) -> Result<Self, AvroSchemaError> {
        Self::parse_with_references(text, &[])
    }

    /// Parses a schema whose text may name types that other schemas define: `references`,
    /// the JSON texts of those schemas, are parsed first, in order (a text may use the types of
    /// those before it), and their named types are known to `text`, as a schema registry's
    /// references are resolved by Confluent's deserializer.
    pub fn parse_with_references(text: &str, references: &[&str]) -> Result<Self, AvroSchemaError> {
        let mut p = Parser::default();
        for (i, r) in references.iter().enumerate() {
            let json: Value = serde_json::from_str(r).map_err(|e| {
                AvroSchemaError(format!("referenced schema {} is not JSON: {e}", i + 1))
            })?;
            p.node(&json, "", "its top level")
                .map_err(|e| AvroSchemaError(format!("referenced schema {}: {}", i + 1, e.0)))?;
        }
        let json: Value = serde_json::from_str(text)
            .map_err(|e| AvroSchemaError(format!("the schema is not JSON: {e}")))?;
        let root = p.node(&json, "", "the schema")?;
        let mut canonical = String::new();
        let mut written = vec![false; p.nodes.len()];
        canonical_form(&p.nodes, root, &mut written, &mut canonical);
        let fingerprint = rabin(canonical.as_bytes());
        Ok(Self {
            inner: Arc::new(Inner {
                nodes: p.nodes,
                root,
                canonical,
                fingerprint,
            }),
        })
    }

    pub(crate) fn root(&self) -> NodeId {
        self.inner.root
    }

    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.inner.nodes[id]
    }

    /// The field `name` of record node `record` (none when it is not a record).
    pub(crate) fn field(&self, record: NodeId, name: &str) -> Option<&RecordField> {
        match &self.inner.nodes[record] {
            Node::Record { fields, .. } => fields.iter().find(|f| f.name == name),
            _ => None,
        }
    }

    /// `T` of a `["null", T]` union (the node itself otherwise).
    pub(crate) fn non_null(&self, id: NodeId) -> NodeId {
        match &self.inner.nodes[id] {
            Node::Union(b) => {
                let mut rest = b
                    .iter()
                    .filter(|&&x| !matches!(self.inner.nodes[x], Node::Null));
                match (rest.next(), rest.next()) {
                    (Some(&one), None) => one,
                    _ => id,
                }
            }
            _ => id,
        }
    }

    /// The Parsing Canonical Form (what two schemas must share to read each other's data
    /// without resolution).
    pub fn canonical_form(&self) -> &str {
        &self.inner.canonical
    }

    /// The CRC-64-AVRO (Rabin) fingerprint of the canonical form, as the single-object
    /// encoding carries it.
    pub fn fingerprint(&self) -> u64 {
        self.inner.fingerprint
    }

    /// The schema's type as written in a message (`long`, `record Quote`, `["null","string"]`).
    pub(crate) fn describe(&self, id: NodeId) -> String {
        describe(&self.inner.nodes, id)
    }

    /// The Arrow type a node reads as when no column is declared for it, or why it cannot be
    /// one. `None` for a union: the caller handles `["null", T]`.
    pub(crate) fn arrow_type(&self, id: NodeId, depth: usize) -> Result<DataType, String> {
        if depth > 64 {
            return Err("a recursive record cannot be a column type; declare the columns".into());
        }
        if self.type_size(id) > MAX_INFERRED_TYPE {
            return Err(format!(
                "{} spells out as more than {MAX_INFERRED_TYPE} Arrow types; declare the columns",
                self.describe(id)
            ));
        }
        let n = &self.inner.nodes;
        Ok(match &n[id] {
            Node::Null => DataType::Null,
            Node::Boolean => DataType::Boolean,
            Node::Int(Some(Logical::Date)) => DataType::Date32,
            Node::Int(Some(Logical::TimeMillis)) => DataType::Time32(TimeUnit::Millisecond),
            Node::Int(_) => DataType::Int32,
            Node::Long(Some(Logical::TimeMicros)) => DataType::Time64(TimeUnit::Microsecond),
            Node::Long(Some(l)) => match timestamp(*l) {
                Some((unit, utc)) => DataType::Timestamp(unit, utc.then(|| "UTC".into())),
                None => DataType::Int64,
            },
            Node::Long(None) => DataType::Int64,
            Node::Float => DataType::Float32,
            Node::Double => DataType::Float64,
            Node::Bytes(Some(Logical::Decimal { precision, scale }))
            | Node::Fixed {
                logical: Some(Logical::Decimal { precision, scale }),
                ..
            } => decimal_type(*precision, *scale)?,
            Node::Fixed {
                logical: Some(Logical::Duration),
                ..
            } => DataType::Interval(IntervalUnit::MonthDayNano),
            Node::Bytes(_) | Node::Fixed { .. } => DataType::Binary,
            Node::String(_) | Node::Enum { .. } => DataType::Utf8,
            Node::Record { fields, .. } => {
                let mut out = Vec::with_capacity(fields.len());
                for f in fields {
                    let (t, _) = self
                        .field_type(f.schema, depth + 1)
                        .map_err(|e| format!("field '{}': {e}", f.name))?;
                    out.push(Field::new(&f.name, t, true));
                }
                DataType::Struct(Fields::from(out))
            }
            Node::Array(item) => {
                let (t, _) = self.field_type(*item, depth + 1)?;
                DataType::List(Arc::new(Field::new("item", t, true)))
            }
            Node::Map(value) => {
                let (t, _) = self.field_type(*value, depth + 1)?;
                let entries = DataType::Struct(Fields::from(vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", t, true),
                ]));
                DataType::Map(Arc::new(Field::new("entries", entries, false)), false)
            }
            Node::Union(_) => {
                return Err(format!(
                    "the union {} has several non-null branches, which weir does not read as \
                     one column; declare the columns and leave this field out",
                    self.describe(id)
                ))
            }
        })
    }

    /// The Arrow type of a field or item of schema `id`, unwrapping `["null", T]`; true when
    /// the field may be null.
    pub(crate) fn field_type(&self, id: NodeId, depth: usize) -> Result<(DataType, bool), String> {
        match &self.inner.nodes[id] {
            Node::Union(branches) => {
                let mut rest = branches
                    .iter()
                    .filter(|&&b| !matches!(self.inner.nodes[b], Node::Null));
                match (rest.next(), rest.next()) {
                    (Some(&one), None) => Ok((self.arrow_type(one, depth)?, true)),
                    (None, _) => Ok((DataType::Null, true)),
                    _ => self.arrow_type(id, depth).map(|t| (t, true)),
                }
            }
            _ => Ok((self.arrow_type(id, depth)?, false)),
        }
    }
}

/// The most Arrow types (fields and items, nested) one inferred column may spell out: a schema
/// that uses a record twice in the next, and so on, would otherwise make an exponential type.
const MAX_INFERRED_TYPE: usize = 10_000;

impl AvroSchema {
    /// The Arrow types node `id` spells out as a column, counted up to past
    /// [`MAX_INFERRED_TYPE`] (recursion counts as too many).
    fn type_size(&self, id: NodeId) -> usize {
        fn walk(nodes: &[Node], id: NodeId, seen: &mut usize, depth: usize) {
            *seen += 1;
            if *seen > MAX_INFERRED_TYPE || depth > 64 {
                *seen = MAX_INFERRED_TYPE + 1;
                return;
            }
            match &nodes[id] {
                Node::Record { fields, .. } => {
                    for f in fields {
                        walk(nodes, f.schema, seen, depth + 1);
                    }
                }
                Node::Array(x) | Node::Map(x) => walk(nodes, *x, seen, depth + 1),
                Node::Union(b) => {
                    for &x in b {
                        walk(nodes, x, seen, depth + 1);
                    }
                }
                _ => {}
            }
        }
        let mut seen = 0;
        walk(&self.inner.nodes, id, &mut seen, 0);
        seen
    }
}

/// Decimal128 up to precision 38, Decimal256 up to 76.
pub(crate) fn decimal_type(precision: u8, scale: i8) -> Result<DataType, String> {
    match precision {
        1..=38 => Ok(DataType::Decimal128(precision, scale)),
        39..=76 => Ok(DataType::Decimal256(precision, scale)),
        _ => Err(format!(
            "decimal({precision}, {scale}) does not fit Decimal128 or Decimal256 (precision 1 \
             to 76)"
        )),
    }
}

/// The unit of a timestamp logical type, and whether it is an instant (UTC) rather than a
/// local date-time.
pub(crate) fn timestamp(l: Logical) -> Option<(TimeUnit, bool)> {
    Some(match l {
        Logical::TimestampMillis => (TimeUnit::Millisecond, true),
        Logical::TimestampMicros => (TimeUnit::Microsecond, true),
        Logical::TimestampNanos => (TimeUnit::Nanosecond, true),
        Logical::LocalTimestampMillis => (TimeUnit::Millisecond, false),
        Logical::LocalTimestampMicros => (TimeUnit::Microsecond, false),
        Logical::LocalTimestampNanos => (TimeUnit::Nanosecond, false),
        _ => return None,
    })
}

fn describe(nodes: &[Node], id: NodeId) -> String {
    let logical = |l: &Option<Logical>, base: &str| match l {
        Some(Logical::Decimal { precision, scale }) => {
            format!("{base} (decimal({precision}, {scale}))")
        }
        Some(other) => format!("{base} ({})", logical_name(*other)),
        None => base.to_string(),
    };
    match &nodes[id] {
        Node::Null => "null".into(),
        Node::Boolean => "boolean".into(),
        Node::Int(l) => logical(l, "int"),
        Node::Long(l) => logical(l, "long"),
        Node::Float => "float".into(),
        Node::Double => "double".into(),
        Node::Bytes(l) => logical(l, "bytes"),
        Node::String(l) => logical(l, "string"),
        Node::Record { name, .. } => format!("record {name}"),
        Node::Enum { name, .. } => format!("enum {name}"),
        Node::Array(i) => format!("array of {}", describe(nodes, *i)),
        Node::Map(v) => format!("map of {}", describe(nodes, *v)),
        Node::Fixed {
            name,
            size,
            logical: l,
        } => logical(l, &format!("fixed {name} ({size} bytes)")),
        Node::Union(b) => format!(
            "[{}]",
            b.iter()
                .map(|&x| describe(nodes, x))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn logical_name(l: Logical) -> &'static str {
    match l {
        Logical::Decimal { .. } => "decimal",
        Logical::Uuid => "uuid",
        Logical::Date => "date",
        Logical::TimeMillis => "time-millis",
        Logical::TimeMicros => "time-micros",
        Logical::TimestampMillis => "timestamp-millis",
        Logical::TimestampMicros => "timestamp-micros",
        Logical::TimestampNanos => "timestamp-nanos",
        Logical::LocalTimestampMillis => "local-timestamp-millis",
        Logical::LocalTimestampMicros => "local-timestamp-micros",
        Logical::LocalTimestampNanos => "local-timestamp-nanos",
        Logical::Duration => "duration",
    }
}

/// Builds the node arena. Named types are registered before their fields are parsed, so a
/// record may refer to itself.
#[derive(Default)]
struct Parser {
    nodes: Vec<Node>,
    names: HashMap<String, NodeId>,
}

const PRIMITIVES: &[&str] = &[
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

impl Parser {
    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// Parses `json` in namespace `ns`; `at` says where, for errors.
    fn node(&mut self, json: &Value, ns: &str, at: &str) -> Result<NodeId, AvroSchemaError> {
        match json {
            Value::String(name) => self.named(name, None, ns, at),
            Value::Array(branches) => {
                if branches.is_empty() {
                    return Err(AvroSchemaError(format!("{at}: a union needs a branch")));
                }
                let mut ids = Vec::with_capacity(branches.len());
                for (i, b) in branches.iter().enumerate() {
                    let id = self.node(b, ns, &format!("{at}, union branch {i}"))?;
                    if matches!(self.nodes[id], Node::Union(_)) {
                        return Err(AvroSchemaError(format!(
                            "{at}: a union cannot hold a union (branch {i})"
                        )));
                    }
                    ids.push(id);
                }
                // Two branches of the same unnamed type make the branch of a value ambiguous.
                for (i, &a) in ids.iter().enumerate() {
                    for &b in &ids[..i] {
                        if same_kind(&self.nodes[a], &self.nodes[b]) {
                            return Err(AvroSchemaError(format!(
                                "{at}: a union holds the type {} twice",
                                describe(&self.nodes, a)
                            )));
                        }
                    }
                }
                Ok(self.push(Node::Union(ids)))
            }
            Value::Object(obj) => self.complex(obj, ns, at),
            other => Err(AvroSchemaError(format!(
                "{at}: expected a type name, an object or a union array, found {other}"
            ))),
        }
    }

    fn named(
        &mut self,
        name: &str,
        logical: Option<&Map<String, Value>>,
        ns: &str,
        at: &str,
    ) -> Result<NodeId, AvroSchemaError> {
        let l = logical.and_then(|o| logical_of(o, name));
        let node = match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int(l.filter(|l| matches!(l, Logical::Date | Logical::TimeMillis))),
            "long" => Node::Long(
                l.filter(|l| matches!(l, Logical::TimeMicros) || timestamp(*l).is_some()),
            ),
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes(l.filter(|l| matches!(l, Logical::Decimal { .. }))),
            "string" => Node::String(l.filter(|l| matches!(l, Logical::Uuid))),
            _ => {
                let full = full_name(name, ns);
                return self
                    .names
                    .get(&full)
                    .or_else(|| self.names.get(name))
                    .copied()
                    .ok_or_else(|| {
                        AvroSchemaError(format!(
                            "{at}: unknown type '{name}' (a named type must be defined before \
                             it is used)"
                        ))
                    });
            }
        };
        Ok(self.push(node))
    }

    fn complex(
        &mut self,
        obj: &Map<String, Value>,
        ns: &str,
        at: &str,
    ) -> Result<NodeId, AvroSchemaError> {
        let Some(Value::String(ty)) = obj.get("type") else {
            return match obj.get("type") {
                // {"type": {"type": "array", ...}} and {"type": [...]}: the inner one.
                Some(inner @ (Value::Object(_) | Value::Array(_))) => self.node(inner, ns, at),
                _ => Err(AvroSchemaError(format!(
                    "{at}: an object schema needs \"type\""
                ))),
            };
        };
        match ty.as_str() {
            "record" | "error" | "enum" | "fixed" => {
                let name = str_of(obj, "name")
                    .ok_or_else(|| AvroSchemaError(format!("{at}: a {ty} needs a \"name\"")))?;
                // A dotted name is a full name: its own namespace wins over the attribute.
                let space = match (name.rsplit_once('.'), str_of(obj, "namespace")) {
                    (Some((s, _)), _) => s.to_string(),
                    (None, Some(s)) => s.to_string(),
                    (None, None) => ns.to_string(),
                };
                let full = full_name(name, &space);
                if self.names.contains_key(&full) {
                    return Err(AvroSchemaError(format!(
                        "{at}: the name '{full}' is defined twice"
                    )));
                }
                // A placeholder of the right kind and name until the definition is parsed, so
                // a reference from inside (a recursive record) sees what it refers to.
                let id = self.push(match ty.as_str() {
                    "enum" => Node::Enum {
                        name: full.clone(),
                        symbols: Vec::new(),
                        default: None,
                    },
                    "fixed" => Node::Fixed {
                        name: full.clone(),
                        size: 0,
                        logical: None,
                    },
                    _ => Node::Record {
                        name: full.clone(),
                        fields: Vec::new(),
                    },
                });
                self.names.insert(full.clone(), id);
                let here = format!("{ty} {full}");
                self.nodes[id] = match ty.as_str() {
                    "enum" => {
                        let symbols: Vec<String> = match obj.get("symbols") {
                            Some(Value::Array(s)) => s
                                .iter()
                                .map(|v| v.as_str().map(str::to_string))
                                .collect::<Option<_>>()
                                .ok_or_else(|| {
                                    AvroSchemaError(format!("{here}: symbols must be strings"))
                                })?,
                            _ => {
                                return Err(AvroSchemaError(format!(
                                    "{here}: an enum needs \"symbols\""
                                )))
                            }
                        };
                        Node::Enum {
                            name: full,
                            default: str_of(obj, "default").map(str::to_string),
                            symbols,
                        }
                    }
                    "fixed" => {
                        let size = obj
                            .get("size")
                            .and_then(Value::as_u64)
                            .and_then(|s| usize::try_from(s).ok())
                            .ok_or_else(|| {
                                AvroSchemaError(format!("{here}: a fixed needs a \"size\""))
                            })?;
                        let logical = logical_of(obj, "fixed").filter(|l| match l {
                            Logical::Decimal { precision, .. } => {
                                // The largest precision `size` bytes of two's complement hold.
                                let max = ((8.0 * size as f64 - 1.0) * 2f64.log10()).floor();
                                f64::from(*precision) <= max
                            }
                            Logical::Duration => size == 12,
                            _ => false,
                        });
                        Node::Fixed {
                            name: full,
                            size,
                            logical,
                        }
                    }
                    _ => {
                        let Some(Value::Array(list)) = obj.get("fields") else {
                            return Err(AvroSchemaError(format!(
                                "{here}: a record needs \"fields\""
                            )));
                        };
                        let mut fields = Vec::with_capacity(list.len());
                        for f in list {
                            let Value::Object(fo) = f else {
                                return Err(AvroSchemaError(format!(
                                    "{here}: each field must be an object"
                                )));
                            };
                            let fname = str_of(fo, "name").ok_or_else(|| {
                                AvroSchemaError(format!("{here}: a field needs a \"name\""))
                            })?;
                            if fields.iter().any(|x: &RecordField| x.name == fname) {
                                return Err(AvroSchemaError(format!(
                                    "{here}: field '{fname}' is defined twice"
                                )));
                            }
                            let ft = fo.get("type").ok_or_else(|| {
                                AvroSchemaError(format!(
                                    "{here}, field '{fname}': a field needs a \"type\""
                                ))
                            })?;
                            let schema =
                                self.node(ft, &space, &format!("{here}, field '{fname}'"))?;
                            fields.push(RecordField {
                                name: fname.to_string(),
                                aliases: match fo.get("aliases") {
                                    Some(Value::Array(a)) => a
                                        .iter()
                                        .filter_map(|v| v.as_str().map(str::to_string))
                                        .collect(),
                                    _ => Vec::new(),
                                },
                                schema,
                                default: fo.get("default").cloned(),
                            });
                        }
                        Node::Record { name: full, fields }
                    }
                };
                Ok(id)
            }
            "array" => {
                let items = obj
                    .get("items")
                    .ok_or_else(|| AvroSchemaError(format!("{at}: an array needs \"items\"")))?;
                let item = self.node(items, ns, &format!("{at}, items"))?;
                Ok(self.push(Node::Array(item)))
            }
            "map" => {
                let values = obj
                    .get("values")
                    .ok_or_else(|| AvroSchemaError(format!("{at}: a map needs \"values\"")))?;
                let value = self.node(values, ns, &format!("{at}, values"))?;
                Ok(self.push(Node::Map(value)))
            }
            p if PRIMITIVES.contains(&p) => self.named(p, Some(obj), ns, at),
            other => self.named(other, None, ns, at),
        }
    }
}

fn same_kind(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Record { name: x, .. }, Node::Record { name: y, .. })
        | (Node::Enum { name: x, .. }, Node::Enum { name: y, .. })
        | (Node::Fixed { name: x, .. }, Node::Fixed { name: y, .. }) => x == y,
        _ => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

fn full_name(name: &str, ns: &str) -> String {
    if name.contains('.') || ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}.{name}")
    }
}

/// The logical type an object declares over `base`; an unknown or malformed one is ignored, as
/// the specification says (the value reads as its underlying type).
fn logical_of(obj: &Map<String, Value>, base: &str) -> Option<Logical> {
    let name = str_of(obj, "logicalType")?;
    Some(match name {
        "decimal" if base == "bytes" || base == "fixed" => {
            let precision = obj.get("precision")?.as_u64()?;
            let scale = match obj.get("scale") {
                None => 0,
                Some(s) => s.as_u64()?,
            };
            if precision == 0 || scale > precision || precision > 76 {
                return None;
            }
            Logical::Decimal {
                precision: u8::try_from(precision).ok()?,
                scale: i8::try_from(scale).ok()?,
            }
        }
        "uuid" => Logical::Uuid,
        "date" => Logical::Date,
        "time-millis" => Logical::TimeMillis,
        "time-micros" => Logical::TimeMicros,
        "timestamp-millis" => Logical::TimestampMillis,
        "timestamp-micros" => Logical::TimestampMicros,
        "timestamp-nanos" => Logical::TimestampNanos,
        "local-timestamp-millis" => Logical::LocalTimestampMillis,
        "local-timestamp-micros" => Logical::LocalTimestampMicros,
        "local-timestamp-nanos" => Logical::LocalTimestampNanos,
        "duration" => Logical::Duration,
        _ => return None,
    })
}

/// Writes the Parsing Canonical Form of node `id`: full names, only the attributes that
/// matter for reading, named types spelled out the first time and referred to by name after.
fn canonical_form(nodes: &[Node], id: NodeId, written: &mut [bool], out: &mut String) {
    let quote = |s: &str| Value::String(s.to_string()).to_string();
    match &nodes[id] {
        Node::Null => out.push_str("\"null\""),
        Node::Boolean => out.push_str("\"boolean\""),
        Node::Int(_) => out.push_str("\"int\""),
        Node::Long(_) => out.push_str("\"long\""),
        Node::Float => out.push_str("\"float\""),
        Node::Double => out.push_str("\"double\""),
        Node::Bytes(_) => out.push_str("\"bytes\""),
        Node::String(_) => out.push_str("\"string\""),
        Node::Array(i) => {
            out.push_str("{\"type\":\"array\",\"items\":");
            canonical_form(nodes, *i, written, out);
            out.push('}');
        }
        Node::Map(v) => {
            out.push_str("{\"type\":\"map\",\"values\":");
            canonical_form(nodes, *v, written, out);
            out.push('}');
        }
        Node::Union(b) => {
            out.push('[');
            for (i, &x) in b.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_form(nodes, x, written, out);
            }
            out.push(']');
        }
        Node::Record { name, fields } => {
            if std::mem::replace(&mut written[id], true) {
                out.push_str(&quote(name));
                return;
            }
            out.push_str("{\"name\":");
            out.push_str(&quote(name));
            out.push_str(",\"type\":\"record\",\"fields\":[");
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                out.push_str(&quote(&f.name));
                out.push_str(",\"type\":");
                canonical_form(nodes, f.schema, written, out);
                out.push('}');
            }
            out.push_str("]}");
        }
        Node::Enum { name, symbols, .. } => {
            if std::mem::replace(&mut written[id], true) {
                out.push_str(&quote(name));
                return;
            }
            out.push_str("{\"name\":");
            out.push_str(&quote(name));
            out.push_str(",\"type\":\"enum\",\"symbols\":[");
            for (i, s) in symbols.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&quote(s));
            }
            out.push_str("]}");
        }
        Node::Fixed { name, size, .. } => {
            if std::mem::replace(&mut written[id], true) {
                out.push_str(&quote(name));
                return;
            }
            out.push_str("{\"name\":");
            out.push_str(&quote(name));
            out.push_str(&format!(",\"type\":\"fixed\",\"size\":{size}}}"));
        }
    }
}

/// The CRC-64-AVRO fingerprint of the specification (the Rabin polynomial, empty value
/// `0xc15d213aa4d7a795`).
fn rabin(bytes: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    let mut table = [0u64; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut fp = i as u64;
        for _ in 0..8 {
            fp = (fp >> 1) ^ (EMPTY & 0u64.wrapping_sub(fp & 1));
        }
        *slot = fp;
    }
    let mut fp = EMPTY;
    for &b in bytes {
        fp = (fp >> 8) ^ table[((fp ^ u64::from(b)) & 0xff) as usize];
    }
    fp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_and_fingerprint_follow_the_specification() {
        // The specification's examples: primitives, and a record whose nested named type is
        // referred to by its full name the second time.
        assert_eq!(
            AvroSchema::parse("\"int\"").unwrap().canonical_form(),
            "\"int\""
        );
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"R","namespace":"a.b","doc":"x",
                "fields":[{"name":"f","type":{"type":"fixed","name":"F","size":2},"default":"x"},
                          {"name":"g","type":"F"},{"name":"e","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.canonical_form(),
            r#"{"name":"a.b.R","type":"record","fields":[{"name":"f","type":{"name":"a.b.F","type":"fixed","size":2}},{"name":"g","type":"a.b.F"},{"name":"e","type":["null","long"]}]}"#
        );
        // Fingerprints the Java implementation gives (SchemaNormalization.parsingFingerprint64).
        assert_eq!(
            AvroSchema::parse("\"null\"").unwrap().fingerprint(),
            0x63dd_24e7_cc25_8f8a
        );
        assert_eq!(
            AvroSchema::parse("\"int\"").unwrap().fingerprint(),
            0x7275_d51a_3f39_5c8f
        );
    }

    #[test]
    fn referenced_schemas_lend_their_named_types_in_order() {
        let address = r#"{"type":"record","name":"Address","namespace":"wt",
            "fields":[{"name":"city","type":"string"}]}"#;
        // Uses the type of the reference before it.
        let customer = r#"{"type":"record","name":"wt.Customer",
            "fields":[{"name":"name","type":"string"},{"name":"address","type":"wt.Address"}]}"#;
        let order = r#"{"type":"record","name":"Order","namespace":"wt",
            "fields":[{"name":"id","type":"long"},{"name":"customer","type":"Customer"}]}"#;
        let s = AvroSchema::parse_with_references(order, &[address, customer]).unwrap();
        // The canonical form is the whole schema, the referenced types inlined where first used.
        assert_eq!(
            s.canonical_form(),
            r#"{"name":"wt.Order","type":"record","fields":[{"name":"id","type":"long"},{"name":"customer","type":{"name":"wt.Customer","type":"record","fields":[{"name":"name","type":"string"},{"name":"address","type":{"name":"wt.Address","type":"record","fields":[{"name":"city","type":"string"}]}}]}}]}"#
        );
        let inline = AvroSchema::parse(
            r#"{"type":"record","name":"Order","namespace":"wt","fields":[{"name":"id","type":"long"},
              {"name":"customer","type":{"type":"record","name":"Customer","fields":[
                {"name":"name","type":"string"},{"name":"address","type":{"type":"record",
                "name":"Address","fields":[{"name":"city","type":"string"}]}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(s.fingerprint(), inline.fingerprint());

        // Out of order, or missing, the type is unknown; a type defined twice is refused.
        let e = AvroSchema::parse_with_references(order, &[customer, address]).unwrap_err();
        assert!(
            e.0.contains("referenced schema 1") && e.0.contains("wt.Address"),
            "{e}"
        );
        let e = AvroSchema::parse(order).unwrap_err();
        assert!(e.0.contains("unknown type 'Customer'"), "{e}");
        let e = AvroSchema::parse_with_references(address, &[address]).unwrap_err();
        assert!(e.0.contains("defined twice"), "{e}");
        let e = AvroSchema::parse_with_references(order, &["{"]).unwrap_err();
        assert!(e.0.contains("referenced schema 1 is not JSON"), "{e}");
    }

    #[test]
    fn a_dotted_name_gives_its_own_namespace_to_nested_types() {
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"a.R","namespace":"x","fields":[
                {"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}]}"#,
        )
        .unwrap();
        assert!(
            s.canonical_form().contains(r#""name":"a.E""#),
            "{}",
            s.canonical_form()
        );
    }

    #[test]
    fn bad_schemas_say_where() {
        let e = AvroSchema::parse(
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Nope"}]}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("field 'a'") && e.0.contains("unknown type 'Nope'"),
            "{e}"
        );
        let e = AvroSchema::parse(r#"["int","int"]"#).unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
        assert!(AvroSchema::parse("{").is_err());
        // A recursive record parses: the inner reference is the record itself.
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"L","fields":[{"name":"next","type":["null","L"]}]}"#,
        )
        .unwrap();
        assert!(s.canonical_form().contains(r#"["null","L"]"#));
    }
}
