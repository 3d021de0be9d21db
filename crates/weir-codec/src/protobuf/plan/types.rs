//! The type mapping: which Arrow types a protobuf field can be read into, the default one, and
//! the wire type and storage each implies.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, TimeUnit};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor, Syntax};

use super::{Op, VarintConv};
use crate::columns::{Bits, Values};
use crate::error::PlanError;
use crate::protobuf::wire::{WT_I32, WT_I64, WT_LEN, WT_SGROUP, WT_VARINT};

pub(super) fn is_special_message(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.Timestamp"
            | "google.protobuf.Duration"
            | "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.Any"
    ) || wrapper_inner(m).is_some()
}

/// For google.protobuf wrapper types, the Arrow type of the wrapped value.
pub(super) fn wrapper_inner(m: &MessageDescriptor) -> Option<DataType> {
    Some(match m.full_name() {
        "google.protobuf.DoubleValue" => DataType::Float64,
        "google.protobuf.FloatValue" => DataType::Float32,
        "google.protobuf.Int64Value" => DataType::Int64,
        "google.protobuf.UInt64Value" => DataType::UInt64,
        "google.protobuf.Int32Value" => DataType::Int32,
        "google.protobuf.UInt32Value" => DataType::UInt32,
        "google.protobuf.BoolValue" => DataType::Boolean,
        "google.protobuf.StringValue" => DataType::Utf8,
        "google.protobuf.BytesValue" => DataType::Binary,
        _ => return None,
    })
}

pub(super) fn is_json_message(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.Any"
    )
}

/// The protobuf type of a field as a .proto file spells it.
pub(super) fn proto_type_name(fd: &FieldDescriptor) -> String {
    let base = |k: &Kind| match k {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    };
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            return format!(
                "map<{}, {}>",
                base(&entry.map_entry_key_field().kind()),
                base(&entry.map_entry_value_field().kind())
            );
        }
    }
    if fd.is_list() {
        return format!("repeated {}", base(&fd.kind()));
    }
    base(&fd.kind())
}

/// The Arrow type a field gets when the caller does not declare one.
pub(crate) fn default_type(fd: &FieldDescriptor, ancestors: &mut Vec<String>) -> DataType {
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            let k = entry.map_entry_key_field();
            let v = entry.map_entry_value_field();
            let kt = default_kind_type(&k.kind(), ancestors);
            let vt = default_kind_type(&v.kind(), ancestors);
            let entries = Field::new(
                "entries",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", kt, false),
                    Field::new("value", vt, true),
                ])),
                false,
            );
            return DataType::Map(Arc::new(entries), false);
        }
    }
    let t = default_kind_type(&fd.kind(), ancestors);
    if fd.is_list() {
        DataType::List(Arc::new(Field::new("item", t, true)))
    } else {
        t
    }
}

pub(super) fn default_kind_type(kind: &Kind, ancestors: &mut Vec<String>) -> DataType {
    match kind {
        Kind::Double => DataType::Float64,
        Kind::Float => DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => DataType::Int64,
        Kind::Uint32 | Kind::Fixed32 => DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => DataType::UInt64,
        Kind::Bool => DataType::Boolean,
        Kind::String | Kind::Enum(_) => DataType::Utf8,
        Kind::Bytes => DataType::Binary,
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Timestamp" => {
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
            }
            "google.protobuf.Duration" => DataType::Duration(TimeUnit::Nanosecond),
            _ => {
                if let Some(t) = wrapper_inner(m) {
                    return t;
                }
                if is_json_message(m) || ancestors.iter().any(|a| a == m.full_name()) {
                    return DataType::Utf8;
                }
                ancestors.push(m.full_name().to_string());
                let children: Vec<Field> = m
                    .fields()
                    .map(|f| Field::new(f.name(), default_type(&f, ancestors), true))
                    .collect();
                ancestors.pop();
                DataType::Struct(Fields::from(children))
            }
        },
    }
}

pub(super) fn type_mismatch(column: &str, fd: &FieldDescriptor, dt: &DataType) -> PlanError {
    let mut ancestors = vec![fd.parent_message().full_name().to_string()];
    let suggested = default_type(fd, &mut ancestors);
    PlanError::TypeMismatch {
        column: column.to_string(),
        field: fd.full_name().to_string(),
        field_type: proto_type_name(fd),
        column_type: dt.to_string(),
        hint: format!("; declare it as {suggested}"),
    }
}

/// Can a singular or repeated scalar of this kind be read into this Arrow type?
pub(super) fn scalar_fits(kind: &Kind, dt: &DataType) -> bool {
    match kind {
        Kind::Double => *dt == DataType::Float64,
        Kind::Float => *dt == DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => *dt == DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            matches!(dt, DataType::Int64 | DataType::Timestamp(_, _))
        }
        Kind::Uint32 | Kind::Fixed32 => *dt == DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => *dt == DataType::UInt64,
        Kind::Bool => *dt == DataType::Boolean,
        Kind::String => *dt == DataType::Utf8,
        Kind::Bytes => *dt == DataType::Binary,
        Kind::Enum(_) => matches!(dt, DataType::Utf8 | DataType::Int32),
        Kind::Message(_) => false,
    }
}

/// (op for a singular field, wire type) of a scalar kind.
pub(super) fn scalar_op(kind: &Kind) -> (Op, u8) {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => (Op::Fixed64, WT_I64),
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => (Op::Fixed32, WT_I32),
        Kind::Sint32 => (Op::Varint(VarintConv::Zigzag32), WT_VARINT),
        Kind::Sint64 => (Op::Varint(VarintConv::Zigzag64), WT_VARINT),
        Kind::String => (Op::Str, WT_LEN),
        Kind::Bytes => (Op::Bytes, WT_LEN),
        _ => (Op::Varint(VarintConv::Raw), WT_VARINT),
    }
}

pub(super) fn repeated_op(kind: &Kind, enum_name: bool) -> (Op, u8) {
    match scalar_op(kind) {
        (Op::Fixed64, w) => (Op::RepFixed64, w),
        (Op::Fixed32, w) => (Op::RepFixed32, w),
        (Op::Varint(_), w) if enum_name => (Op::RepEnumName, w),
        (Op::Varint(c), w) => (Op::RepVarint(c), w),
        (Op::Str, w) => (Op::RepStr, w),
        (_, w) => (Op::RepBytes, w),
    }
}

pub(super) fn storage_for(dt: &DataType) -> Option<Values> {
    Some(match dt {
        DataType::Boolean => Values::Bool(Bits::default()),
        DataType::Int32 => Values::I32(Vec::new()),
        DataType::Int64 | DataType::Timestamp(_, _) | DataType::Duration(_) => {
            Values::I64(Vec::new())
        }
        DataType::UInt32 => Values::U32(Vec::new()),
        DataType::UInt64 => Values::U64(Vec::new()),
        DataType::Float32 => Values::F32(Vec::new()),
        DataType::Float64 => Values::F64(Vec::new()),
        DataType::Utf8 | DataType::Binary => Values::bytes(),
        _ => return None,
    })
}

/// The wire type a message field arrives with: start-group for a proto2 group, else LEN.
pub(super) fn message_wire(fd: &FieldDescriptor) -> u8 {
    if fd.is_group() {
        WT_SGROUP
    } else {
        WT_LEN
    }
}

/// Does the field have explicit presence (null when absent)?
pub(super) fn has_presence(fd: &FieldDescriptor) -> bool {
    !fd.is_list() && !fd.is_map() && fd.supports_presence()
}

pub(super) fn declared_default(fd: &FieldDescriptor) -> bool {
    fd.parent_file().syntax() == Syntax::Proto2
        && fd.field_descriptor_proto().default_value.is_some()
}
