//! Shared helpers for the protobuf decoder's correctness tests: schema loading, a small RNG, a
//! hand-rolled wire encoder, and an independent implementation of the documented
//! protobuf -> Arrow mapping (expected values computed from a prost-reflect `DynamicMessage`,
//! actual values read back from Arrow arrays, and a comparison that reports every difference).
//!
//! Not every test binary uses every helper.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    DurationNanosecondType, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampNanosecondType, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Syntax, Value,
};
use weir_codec::{DataType, Field, ProtoSchema, TimeUnit};

// ---------------------------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------------------------

/// `tests/proto` of this crate.
pub fn proto_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string()),
    )
    .join("tests")
    .join("proto")
}

/// Compiles `tests/proto/<file>` (well-known types resolve through protox).
pub fn load_schema(file: &str) -> ProtoSchema {
    let dir = proto_dir();
    let path = dir.join(file);
    match ProtoSchema::from_proto_file(&path, std::slice::from_ref(&dir)) {
        Ok(s) => s,
        Err(e) => panic!("cannot load {}: {e}", path.display()),
    }
}

/// The descriptor of `name` in `schema`.
pub fn message_desc(schema: &ProtoSchema, name: &str) -> MessageDescriptor {
    schema
        .pool()
        .get_message_by_name(name)
        .unwrap_or_else(|| panic!("message {name} not in the schema"))
}

// ---------------------------------------------------------------------------------------------
// RNG
// ---------------------------------------------------------------------------------------------

pub use weir_testdata::Rng;

// ---------------------------------------------------------------------------------------------
// Wire encoder
// ---------------------------------------------------------------------------------------------

pub const WT_VARINT: u8 = 0;
pub const WT_I64: u8 = 1;
pub const WT_LEN: u8 = 2;
pub const WT_SGROUP: u8 = 3;
pub const WT_EGROUP: u8 = 4;
pub const WT_I32: u8 = 5;

/// Appends protobuf wire primitives to a byte buffer; `pos()` gives offsets for error checks.
#[derive(Debug, Default, Clone)]
pub struct Wire {
    pub buf: Vec<u8>,
}

impl Wire {
    pub fn new() -> Self {
        Self::default()
    }

    /// Current length: the offset of whatever is appended next.
    pub fn pos(&self) -> usize {
        self.buf.len()
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.buf.clone()
    }

    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    pub fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }

    /// `v` encoded in exactly `n` bytes (padding with continuation bits), `n <= 10`.
    pub fn varint_overlong(&mut self, v: u64, n: usize) -> &mut Self {
        assert!((1..=10).contains(&n));
        let mut v = v;
        for i in 0..n {
            let mut b = (v & 0x7f) as u8;
            v >>= 7;
            if i + 1 < n {
                b |= 0x80;
            }
            self.buf.push(b);
        }
        assert_eq!(v, 0, "value does not fit in {n} bytes");
        self
    }

    pub fn tag(&mut self, field: u32, wt: u8) -> &mut Self {
        self.varint(((field as u64) << 3) | wt as u64)
    }

    pub fn field_varint(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, WT_VARINT).varint(v)
    }

    /// An int32/int64/enum value: negative numbers are sign-extended to 10 bytes.
    pub fn field_int(&mut self, field: u32, v: i64) -> &mut Self {
        self.field_varint(field, v as u64)
    }

    pub fn field_sint32(&mut self, field: u32, v: i32) -> &mut Self {
        self.field_varint(field, zigzag32(v) as u64)
    }

    pub fn field_fixed32(&mut self, field: u32, v: u32) -> &mut Self {
        self.tag(field, WT_I32).raw(&v.to_le_bytes())
    }

    pub fn field_fixed64(&mut self, field: u32, v: u64) -> &mut Self {
        self.tag(field, WT_I64).raw(&v.to_le_bytes())
    }

    pub fn field_double(&mut self, field: u32, v: f64) -> &mut Self {
        self.field_fixed64(field, v.to_bits())
    }

    pub fn field_bytes(&mut self, field: u32, payload: &[u8]) -> &mut Self {
        self.tag(field, WT_LEN)
            .varint(payload.len() as u64)
            .raw(payload)
    }

    pub fn field_str(&mut self, field: u32, s: &str) -> &mut Self {
        self.field_bytes(field, s.as_bytes())
    }

    /// A length-delimited field holding another encoder's bytes (a sub-message).
    pub fn field_msg(&mut self, field: u32, sub: &Wire) -> &mut Self {
        self.field_bytes(field, &sub.buf)
    }

    /// A packed repeated varint field.
    pub fn field_packed_varints(&mut self, field: u32, values: &[u64]) -> &mut Self {
        let mut p = Wire::new();
        for &v in values {
            p.varint(v);
        }
        self.field_bytes(field, &p.buf)
    }
}

pub fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

pub fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// The documented mapping, re-implemented independently
// ---------------------------------------------------------------------------------------------

/// A cell value: what the mapping says a column should hold, or what Arrow holds.
#[derive(Clone)]
pub enum Exp {
    Null,
    Bool(bool),
    I32(i32),
    I64(i64),
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
    Str(String),
    Bin(Vec<u8>),
    /// Expected only: a Utf8 cell holding this JSON (compared parsed).
    Json(serde_json::Value),
    /// Timestamp(Nanosecond, "UTC").
    Ts(i64),
    /// Duration(Nanosecond).
    Dur(i64),
    /// A struct cell: its own validity plus every child (children are compared even when the
    /// struct is null: they must follow their own presence rules).
    Struct {
        valid: bool,
        fields: Vec<(String, Exp)>,
    },
    List(Vec<Exp>),
    Map(Vec<(Exp, Exp)>),
}

impl fmt::Debug for Exp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exp::Null => write!(f, "null"),
            Exp::Bool(v) => write!(f, "{v}"),
            Exp::I32(v) => write!(f, "{v}i32"),
            Exp::I64(v) => write!(f, "{v}i64"),
            Exp::U32(v) => write!(f, "{v}u32"),
            Exp::U64(v) => write!(f, "{v}u64"),
            Exp::F32(v) => write!(f, "{v:?}f32(bits {:#010x})", v.to_bits()),
            Exp::F64(v) => write!(f, "{v:?}f64(bits {:#018x})", v.to_bits()),
            Exp::Str(s) => write!(f, "{s:?}"),
            Exp::Bin(b) => write!(f, "b[{}]", hex(b)),
            Exp::Json(j) => write!(f, "json {j}"),
            Exp::Ts(v) => write!(f, "ts {v}ns"),
            Exp::Dur(v) => write!(f, "dur {v}ns"),
            Exp::Struct { valid, fields } => {
                write!(f, "{}{{", if *valid { "" } else { "NULL" })?;
                for (i, (n, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{n}: {v:?}")?;
                }
                write!(f, "}}")
            }
            Exp::List(items) => f.debug_list().entries(items).finish(),
            Exp::Map(entries) => {
                write!(f, "map{{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{k:?} => {v:?}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// How a message type is mapped.
enum MsgMapping {
    Timestamp,
    Duration,
    /// A wrapper: the primitive of its `value` field.
    Wrapper(FieldDescriptor),
    /// Canonical proto3 JSON text (Struct/Value/ListValue/Any, or a recursive type).
    Json,
    /// A struct of its fields.
    Struct,
}

fn classify(m: &MessageDescriptor, path: &[String]) -> MsgMapping {
    match m.full_name() {
        "google.protobuf.Timestamp" => MsgMapping::Timestamp,
        "google.protobuf.Duration" => MsgMapping::Duration,
        "google.protobuf.DoubleValue"
        | "google.protobuf.FloatValue"
        | "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value"
        | "google.protobuf.BoolValue"
        | "google.protobuf.StringValue"
        | "google.protobuf.BytesValue" => {
            MsgMapping::Wrapper(m.get_field_by_name("value").expect("wrapper has value"))
        }
        "google.protobuf.Struct"
        | "google.protobuf.Value"
        | "google.protobuf.ListValue"
        | "google.protobuf.Any" => MsgMapping::Json,
        name if path.iter().any(|p| p == name) => MsgMapping::Json,
        _ => MsgMapping::Struct,
    }
}

fn scalar_type(kind: &Kind) -> DataType {
    match kind {
        Kind::Double => DataType::Float64,
        Kind::Float => DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => DataType::Int64,
        Kind::Uint32 | Kind::Fixed32 => DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => DataType::UInt64,
        Kind::Bool => DataType::Boolean,
        Kind::String => DataType::Utf8,
        Kind::Bytes => DataType::Binary,
        Kind::Enum(_) => DataType::Utf8,
        Kind::Message(_) => unreachable!("not a scalar"),
    }
}

fn kind_type(kind: &Kind, path: &mut Vec<String>) -> DataType {
    match kind {
        Kind::Message(m) => match classify(m, path) {
            MsgMapping::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            MsgMapping::Duration => DataType::Duration(TimeUnit::Nanosecond),
            MsgMapping::Wrapper(v) => scalar_type(&v.kind()),
            MsgMapping::Json => DataType::Utf8,
            MsgMapping::Struct => {
                path.push(m.full_name().to_string());
                let fields: Vec<Field> = m
                    .fields()
                    .map(|f| Field::new(f.name(), field_type_in(&f, path), true))
                    .collect();
                path.pop();
                DataType::Struct(fields.into())
            }
        },
        k => scalar_type(k),
    }
}

fn field_type_in(field: &FieldDescriptor, path: &mut Vec<String>) -> DataType {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            unreachable!()
        };
        let key = kind_type(&entry.map_entry_key_field().kind(), path);
        let value = kind_type(&entry.map_entry_value_field().kind(), path);
        let entries = Field::new(
            "entries",
            DataType::Struct(
                vec![
                    Field::new("key", key, false),
                    Field::new("value", value, true),
                ]
                .into(),
            ),
            false,
        );
        DataType::Map(Arc::new(entries), false)
    } else if field.is_list() {
        DataType::List(Arc::new(Field::new(
            "item",
            kind_type(&field.kind(), path),
            true,
        )))
    } else {
        kind_type(&field.kind(), path)
    }
}

/// The Arrow type the mapping gives a top-level field of `root`.
pub fn expected_field_type(root: &MessageDescriptor, field: &FieldDescriptor) -> DataType {
    let mut path = vec![root.full_name().to_string()];
    field_type_in(field, &mut path)
}

/// Compares two types structurally, ignoring nullability and the map entries' own name.
/// Returns a description of the first difference.
pub fn type_diff(expected: &DataType, actual: &DataType, at: &str) -> Option<String> {
    match (expected, actual) {
        (DataType::Struct(ef), DataType::Struct(af)) => {
            let en: Vec<&str> = ef.iter().map(|f| f.name().as_str()).collect();
            let an: Vec<&str> = af.iter().map(|f| f.name().as_str()).collect();
            if en != an {
                return Some(format!("{at}: struct children {an:?}, expected {en:?}"));
            }
            ef.iter().zip(af.iter()).find_map(|(e, a)| {
                type_diff(e.data_type(), a.data_type(), &format!("{at}.{}", e.name()))
            })
        }
        (DataType::List(e), DataType::List(a)) => {
            if a.name() != "item" {
                return Some(format!(
                    "{at}: list item named {:?}, expected \"item\"",
                    a.name()
                ));
            }
            type_diff(e.data_type(), a.data_type(), &format!("{at}[]"))
        }
        (DataType::Map(e, es), DataType::Map(a, as_)) => {
            if es != as_ {
                return Some(format!("{at}: map sorted flag {as_}, expected {es}"));
            }
            type_diff(e.data_type(), a.data_type(), &format!("{at}{{}}"))
        }
        (e, a) if e == a => None,
        (e, a) => Some(format!("{at}: type {a}, expected {e}")),
    }
}

fn enum_text(kind: &Kind, n: i32) -> Exp {
    let Kind::Enum(e) = kind else { unreachable!() };
    match e.get_value(n) {
        Some(v) => Exp::Str(v.name().to_string()),
        None => Exp::Str(n.to_string()),
    }
}

fn scalar_exp(kind: &Kind, v: &Value, enum_as_number: bool) -> Exp {
    match (kind, v) {
        (Kind::Enum(_), Value::EnumNumber(n)) if enum_as_number => Exp::I32(*n),
        (Kind::Enum(_), Value::EnumNumber(n)) => enum_text(kind, *n),
        (_, Value::Bool(b)) => Exp::Bool(*b),
        (_, Value::I32(x)) => Exp::I32(*x),
        (_, Value::I64(x)) => Exp::I64(*x),
        (_, Value::U32(x)) => Exp::U32(*x),
        (_, Value::U64(x)) => Exp::U64(*x),
        (_, Value::F32(x)) => Exp::F32(*x),
        (_, Value::F64(x)) => Exp::F64(*x),
        (_, Value::String(s)) => Exp::Str(s.clone()),
        (_, Value::Bytes(b)) => Exp::Bin(b.to_vec()),
        (k, v) => panic!("unexpected value {v:?} for kind {k:?}"),
    }
}

fn map_key_exp(kind: &Kind, k: &MapKey) -> Exp {
    let v = match k {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(x) => Value::I32(*x),
        MapKey::I64(x) => Value::I64(*x),
        MapKey::U32(x) => Value::U32(*x),
        MapKey::U64(x) => Value::U64(*x),
        MapKey::String(s) => Value::String(s.clone()),
    };
    scalar_exp(kind, &v, false)
}

/// The JSON prost-reflect writes for `msg` with `SerializeOptions::default()`, parsed back from
/// its text (so that float parsing is identical on both sides of the comparison).
pub fn json_of(msg: &DynamicMessage) -> serde_json::Value {
    let text = serde_json::to_string(msg)
        .unwrap_or_else(|e| panic!("reference JSON serialisation failed: {e} for {}", show(msg)));
    serde_json::from_str(&text).expect("reference JSON parses")
}

/// Seconds and nanos of a Timestamp/Duration message as nanoseconds.
fn nanos_of(msg: &DynamicMessage) -> i64 {
    let secs = msg
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .expect("seconds");
    let nanos = msg
        .get_field_by_name("nanos")
        .and_then(|v| v.as_i32())
        .expect("nanos");
    secs.checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(nanos as i64))
        .expect("generator keeps timestamps within i64 nanoseconds")
}

/// The value of a present message (a list item, a map value, or a set singular field).
fn present_message_exp(m: &MessageDescriptor, sub: &DynamicMessage, path: &mut Vec<String>) -> Exp {
    match classify(m, path) {
        MsgMapping::Timestamp => Exp::Ts(nanos_of(sub)),
        MsgMapping::Duration => Exp::Dur(nanos_of(sub)),
        MsgMapping::Wrapper(vf) => scalar_exp(&vf.kind(), &sub.get_field(&vf), false),
        MsgMapping::Json => Exp::Json(json_of(sub)),
        MsgMapping::Struct => message_struct(m, Some(sub), path),
    }
}

/// A struct cell for message `m`: `sub` is `None` when the message is absent.
fn message_struct(
    m: &MessageDescriptor,
    sub: Option<&DynamicMessage>,
    path: &mut Vec<String>,
) -> Exp {
    path.push(m.full_name().to_string());
    let default;
    let msg = match sub {
        Some(s) => s,
        None => {
            default = DynamicMessage::new(m.clone());
            &default
        }
    };
    let fields = m
        .fields()
        .map(|f| (f.name().to_string(), field_exp(msg, &f, path, false)))
        .collect();
    path.pop();
    Exp::Struct {
        valid: sub.is_some(),
        fields,
    }
}

fn value_exp(kind: &Kind, v: &Value, path: &mut Vec<String>) -> Exp {
    match (kind, v) {
        (Kind::Message(m), Value::Message(sub)) => present_message_exp(m, sub, path),
        (k, v) => scalar_exp(k, v, false),
    }
}

/// Whether a proto2 field declares `[default = ...]`.
fn has_declared_default(field: &FieldDescriptor) -> bool {
    field.field_descriptor_proto().default_value.is_some()
}

/// The cell of `field` in a row decoded from `msg`; `path` holds the message types from the root
/// down to (excluding) `msg`'s own type.
fn field_exp(
    msg: &DynamicMessage,
    field: &FieldDescriptor,
    path: &mut Vec<String>,
    enum_as_number: bool,
) -> Exp {
    let kind = field.kind();
    if field.is_map() {
        let Kind::Message(entry) = &kind else {
            unreachable!()
        };
        let kf = entry.map_entry_key_field();
        let vf = entry.map_entry_value_field();
        let value = msg.get_field(field);
        let map = value.as_map().expect("map value");
        let entries = map
            .iter()
            .map(|(k, v)| (map_key_exp(&kf.kind(), k), value_exp(&vf.kind(), v, path)))
            .collect();
        return Exp::Map(entries);
    }
    if field.is_list() {
        let value = msg.get_field(field);
        let items = value.as_list().expect("list value");
        return Exp::List(items.iter().map(|v| value_exp(&kind, v, path)).collect());
    }
    match &kind {
        Kind::Message(m) => {
            let has = msg.has_field(field);
            let value = msg.get_field(field);
            match classify(m, path) {
                MsgMapping::Struct => {
                    message_struct(m, has.then(|| value.as_message().unwrap()), path)
                }
                _ if !has => Exp::Null,
                _ => present_message_exp(m, value.as_message().unwrap(), path),
            }
        }
        _ => {
            if field.supports_presence() && !msg.has_field(field) && !has_declared_default(field) {
                Exp::Null
            } else {
                scalar_exp(&kind, &msg.get_field(field), enum_as_number)
            }
        }
    }
}

/// The expected cell of the top-level column reading `field` (`enum_as_number`: the column was
/// declared Int32 for an enum field).
pub fn expected_cell(msg: &DynamicMessage, field: &FieldDescriptor, enum_as_number: bool) -> Exp {
    let mut path = vec![msg.descriptor().full_name().to_string()];
    field_exp(msg, field, &mut path, enum_as_number)
}

/// Reads cell `i` of an Arrow array generically, by its data type.
pub fn actual_cell(arr: &dyn Array, i: usize) -> Exp {
    let dt = arr.data_type();
    if let DataType::Struct(fields) = dt {
        let sa = arr.as_struct();
        return Exp::Struct {
            valid: sa.is_valid(i),
            fields: fields
                .iter()
                .zip(sa.columns())
                .map(|(f, c)| (f.name().clone(), actual_cell(c.as_ref(), i)))
                .collect(),
        };
    }
    if arr.is_null(i) {
        return Exp::Null;
    }
    match dt {
        DataType::Boolean => Exp::Bool(arr.as_boolean().value(i)),
        DataType::Int32 => Exp::I32(arr.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => Exp::I64(arr.as_primitive::<Int64Type>().value(i)),
        DataType::UInt32 => Exp::U32(arr.as_primitive::<UInt32Type>().value(i)),
        DataType::UInt64 => Exp::U64(arr.as_primitive::<UInt64Type>().value(i)),
        DataType::Float32 => Exp::F32(arr.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => Exp::F64(arr.as_primitive::<Float64Type>().value(i)),
        DataType::Utf8 => Exp::Str(arr.as_string::<i32>().value(i).to_string()),
        DataType::Binary => Exp::Bin(arr.as_binary::<i32>().value(i).to_vec()),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            Exp::Ts(arr.as_primitive::<TimestampNanosecondType>().value(i))
        }
        DataType::Duration(TimeUnit::Nanosecond) => {
            Exp::Dur(arr.as_primitive::<DurationNanosecondType>().value(i))
        }
        DataType::List(_) => {
            let la = arr.as_list::<i32>();
            let offsets = la.value_offsets();
            let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
            let values = la.values();
            Exp::List(
                (start..end)
                    .map(|j| actual_cell(values.as_ref(), j))
                    .collect(),
            )
        }
        DataType::Map(_, _) => {
            let ma = arr.as_map();
            let offsets = ma.value_offsets();
            let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
            let (keys, values) = (ma.keys(), ma.values());
            Exp::Map(
                (start..end)
                    .map(|j| {
                        (
                            actual_cell(keys.as_ref(), j),
                            actual_cell(values.as_ref(), j),
                        )
                    })
                    .collect(),
            )
        }
        other => panic!("actual_cell: unexpected Arrow type {other}"),
    }
}

/// Appends every difference between `exp` and `act` to `out`.
pub fn diff(exp: &Exp, act: &Exp, at: &str, out: &mut Vec<String>) {
    match (exp, act) {
        (Exp::Json(j), Exp::Str(s)) => match serde_json::from_str::<serde_json::Value>(s) {
            Ok(parsed) if &parsed == j => {}
            Ok(parsed) => out.push(format!("{at}: JSON {parsed}, expected {j}")),
            Err(e) => out.push(format!("{at}: not JSON ({e}): {s:?}, expected {j}")),
        },
        (
            Exp::Struct {
                valid: ev,
                fields: ef,
            },
            Exp::Struct {
                valid: av,
                fields: af,
            },
        ) => {
            if ev != av {
                out.push(format!(
                    "{at}: struct validity {av}, expected {ev} (struct {act:?})"
                ));
            }
            let actual: BTreeMap<&str, &Exp> = af.iter().map(|(n, v)| (n.as_str(), v)).collect();
            for (name, e) in ef {
                match actual.get(name.as_str()) {
                    Some(a) => diff(e, a, &format!("{at}.{name}"), out),
                    None => out.push(format!("{at}: no child {name:?}")),
                }
            }
            for (name, _) in af {
                if !ef.iter().any(|(n, _)| n == name) {
                    out.push(format!("{at}: unexpected child {name:?}"));
                }
            }
        }
        (Exp::List(e), Exp::List(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{at}: list of {} items, expected {}: got {act:?}, expected {exp:?}",
                    a.len(),
                    e.len()
                ));
                return;
            }
            for (i, (x, y)) in e.iter().zip(a).enumerate() {
                diff(x, y, &format!("{at}[{i}]"), out);
            }
        }
        (Exp::Map(e), Exp::Map(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{at}: map of {} entries, expected {}: got {act:?}, expected {exp:?}",
                    a.len(),
                    e.len()
                ));
                return;
            }
            // A map's order means nothing (prost-reflect keeps a hash map; weir keeps wire
            // order, the last entry of a repeated key in its place): entries match by key, and
            // each key must appear once.
            for (ek, ev) in e {
                let key = format!("{ek:?}");
                let found: Vec<&(Exp, Exp)> = a
                    .iter()
                    .filter(|(ak, _)| format!("{ak:?}") == key)
                    .collect();
                match found.as_slice() {
                    [(_, av)] => diff(ev, av, &format!("{at}{{{key}}}"), out),
                    [] => out.push(format!("{at}: no entry for key {key}: got {act:?}")),
                    _ => out.push(format!("{at}: key {key} appears {} times", found.len())),
                }
            }
        }
        _ => {
            let same = match (exp, act) {
                (Exp::Null, Exp::Null) => true,
                (Exp::Bool(x), Exp::Bool(y)) => x == y,
                (Exp::I32(x), Exp::I32(y)) => x == y,
                (Exp::I64(x), Exp::I64(y)) => x == y,
                (Exp::U32(x), Exp::U32(y)) => x == y,
                (Exp::U64(x), Exp::U64(y)) => x == y,
                (Exp::F32(x), Exp::F32(y)) => x.to_bits() == y.to_bits(),
                (Exp::F64(x), Exp::F64(y)) => x.to_bits() == y.to_bits(),
                (Exp::Str(x), Exp::Str(y)) => x == y,
                (Exp::Bin(x), Exp::Bin(y)) => x == y,
                (Exp::Ts(x), Exp::Ts(y)) => x == y,
                (Exp::Dur(x), Exp::Dur(y)) => x == y,
                _ => false,
            };
            if !same {
                out.push(format!("{at}: got {act:?}, expected {exp:?}"));
            }
        }
    }
}

/// Compares every column of `row` in `batch` with what the mapping gives for `msg`. Columns
/// are matched to top-level fields by name; a column typed Int32 over an enum field expects the
/// number. Returns the differences.
pub fn row_diffs(batch: &RecordBatch, row: usize, msg: &DynamicMessage) -> Vec<String> {
    let desc = msg.descriptor();
    let mut out = Vec::new();
    for (col, field) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(fd) = desc.get_field_by_name(col.name()) else {
            out.push(format!(
                "column {:?} is not a field of {}",
                col.name(),
                desc.full_name()
            ));
            continue;
        };
        let enum_as_number = matches!(fd.kind(), Kind::Enum(_))
            && !fd.is_list()
            && *col.data_type() == DataType::Int32;
        let exp = expected_cell(msg, &fd, enum_as_number);
        let act = actual_cell(field.as_ref(), row);
        diff(&exp, &act, col.name(), &mut out);
    }
    out
}

/// Panics with a readable report if `row` of `batch` differs from `msg`.
pub fn assert_row(batch: &RecordBatch, row: usize, msg: &DynamicMessage, bytes: &[u8], what: &str) {
    let diffs = row_diffs(batch, row, msg);
    if !diffs.is_empty() {
        panic!(
            "{what}: row {row} differs from the reference ({} differences):\n  {}\nmessage bytes ({}): {}\nreference: {}",
            diffs.len(),
            diffs.join("\n  "),
            bytes.len(),
            hex(bytes),
            show(msg)
        );
    }
}

/// A readable rendering of a message for failure reports. (Not `Debug`: prost-reflect's
/// descriptor `Debug` recurses forever on recursive message types.)
pub fn show(msg: &DynamicMessage) -> String {
    match serde_json::to_string(msg) {
        Ok(j) => format!("{} {j}", msg.descriptor().full_name()),
        Err(e) => format!("{} (no JSON: {e})", msg.descriptor().full_name()),
    }
}

/// The cell of column `name` at `row`.
pub fn cell(batch: &RecordBatch, name: &str, row: usize) -> Exp {
    let col = batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    actual_cell(col.as_ref(), row)
}

/// Asserts that a cell equals an expected value (using the same comparison as the rows).
pub fn assert_cell(batch: &RecordBatch, name: &str, row: usize, exp: Exp) {
    let act = cell(batch, name, row);
    let mut out = Vec::new();
    diff(&exp, &act, name, &mut out);
    assert!(out.is_empty(), "row {row}: {}", out.join("; "));
}

/// Whether a message descriptor comes from a proto2 file (closed enums, declared defaults).
pub fn is_proto2(m: &MessageDescriptor) -> bool {
    m.parent_file().syntax() == Syntax::Proto2
}

/// Whether the mapping makes a field's cell nullable: fields with presence (and no declared
/// default) are; implicit scalars, repeated fields and maps are not.
pub fn expected_nullable(field: &FieldDescriptor) -> bool {
    if field.is_list() || field.is_map() {
        return false;
    }
    match field.kind() {
        Kind::Message(_) => true,
        _ => field.supports_presence() && !has_declared_default(field),
    }
}

/// Compares the nullability of every field of `fields` (and of struct children, recursively,
/// through lists and map values) with the presence rules. List items and map entries are not
/// checked (their nullability is Arrow's convention, not a presence rule), except that map keys
/// must not be nullable.
pub fn nullability_diffs(
    msg: &MessageDescriptor,
    fields: &arrow_schema::Fields,
    at: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields.iter() {
        let name = format!("{at}{}", f.name());
        let Some(fd) = msg.get_field_by_name(f.name()) else {
            out.push(format!("{name}: no such field"));
            continue;
        };
        let want = expected_nullable(&fd);
        if f.is_nullable() != want {
            out.push(format!(
                "{name}: nullable {}, expected {want}",
                f.is_nullable()
            ));
        }
        out.extend(nested_nullability(&fd.kind(), f.data_type(), &name));
    }
    out
}

fn nested_nullability(kind: &Kind, dt: &DataType, at: &str) -> Vec<String> {
    let Kind::Message(m) = kind else {
        return Vec::new();
    };
    match dt {
        DataType::Struct(children) => nullability_diffs(m, children, &format!("{at}.")),
        DataType::List(item) => nested_nullability(kind, item.data_type(), &format!("{at}[]")),
        DataType::Map(entries, _) if m.is_map_entry() => {
            let DataType::Struct(kv) = entries.data_type() else {
                return vec![format!("{at}: map entries are not a struct")];
            };
            let mut out = Vec::new();
            if kv[0].is_nullable() {
                out.push(format!("{at}: map keys are nullable"));
            }
            out.extend(nested_nullability(
                &m.map_entry_value_field().kind(),
                kv[1].data_type(),
                &format!("{at}{{}}"),
            ));
            out
        }
        _ => Vec::new(),
    }
}
