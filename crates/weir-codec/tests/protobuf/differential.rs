//! Differential tests: random `DynamicMessage`s for the test schemas are encoded with prost and
//! decoded with weir; every cell of every row is compared with the value the documented mapping
//! gives for the `DynamicMessage` (see `common`).

use std::collections::HashMap;

use prost::Message;
use prost_reflect::{
    Cardinality, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    Value,
};
use weir_codec::{
    default_columns, ColumnSpec, DataType, Decoder, Encoder, Field, ProtoDecoder,
    ProtoDecoderOptions, ProtoEncoder, ProtoSchema, RecordBatch,
};

use crate::common::*;

/// Messages nested deeper than this (below the root) are not generated.
const MAX_GEN_DEPTH: usize = 4;

// ---------------------------------------------------------------------------------------------
// Random message generator
// ---------------------------------------------------------------------------------------------

const SPECIAL_F64: &[u64] = &[
    0x0000_0000_0000_0000, // 0.0
    0x8000_0000_0000_0000, // -0.0
    0x3ff0_0000_0000_0000, // 1.0
    0xbff8_0000_0000_0000, // -1.5
    0x7fef_ffff_ffff_ffff, // MAX
    0xffef_ffff_ffff_ffff, // MIN
    0x0010_0000_0000_0000, // MIN_POSITIVE
    0x0000_0000_0000_0001, // smallest subnormal
    0x7ff0_0000_0000_0000, // inf
    0xfff0_0000_0000_0000, // -inf
    0x7ff8_0000_0000_0000, // NaN
    0x7ff0_0000_0000_0001, // signalling NaN
    0xfff8_0000_dead_beef, // negative NaN with payload
];

const SPECIAL_F32: &[u32] = &[
    0x0000_0000,
    0x8000_0000,
    0x3f80_0000,
    0xbfc0_0000,
    0x7f7f_ffff,
    0xff7f_ffff,
    0x0080_0000,
    0x0000_0001,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0x7f80_0001,
    0xffc0_beef,
];

const STRINGS: &[&str] = &[
    "",
    "a",
    "hello world",
    "héllo wörld",
    "日本語のテキスト",
    "emoji 🦀🎉 mixed",
    "\u{0}nul\u{0}inside",
    "tab\tnew\nline\r",
    "quote\" back\\slash",
    "\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}",
    "COLOR_UNSPECIFIED",
];

struct Gen {
    rng: Rng,
}

impl Gen {
    fn new(seed: u64) -> Self {
        Gen {
            rng: Rng::new(seed),
        }
    }

    fn i64v(&mut self) -> i64 {
        match self.rng.below(10) {
            0..=1 => *self.rng.pick(&[
                0,
                1,
                -1,
                i64::MIN,
                i64::MAX,
                i64::MIN + 1,
                1 << 31,
                -(1 << 31) - 1,
            ]),
            2..=4 => self.rng.range_i64(-1000, 1000),
            5..=6 => self.rng.next_u64() as i64,
            _ => {
                let shift = self.rng.below(64);
                let v = (self.rng.next_u64() >> shift) as i64;
                if self.rng.below(2) < 1 {
                    v.wrapping_neg()
                } else {
                    v
                }
            }
        }
    }

    fn i32v(&mut self) -> i32 {
        match self.rng.below(10) {
            0..=1 => *self
                .rng
                .pick(&[0, 1, -1, i32::MIN, i32::MAX, i32::MIN + 1, 127, 128, -128]),
            2..=4 => self.rng.range_i64(-1000, 1000) as i32,
            5..=6 => self.rng.next_u64() as i32,
            _ => {
                let shift = self.rng.below(32);
                let v = ((self.rng.next_u64() as u32) >> shift) as i32;
                if self.rng.below(2) < 1 {
                    v.wrapping_neg()
                } else {
                    v
                }
            }
        }
    }

    fn u64v(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=1 => *self.rng.pick(&[
                0,
                1,
                u64::MAX,
                u64::MAX - 1,
                1 << 63,
                (1 << 63) - 1,
                127,
                128,
                u32::MAX as u64 + 1,
            ]),
            2..=4 => self.rng.below(1000),
            5..=6 => self.rng.next_u64(),
            _ => self.rng.next_u64() >> self.rng.below(64),
        }
    }

    fn u32v(&mut self) -> u32 {
        match self.rng.below(10) {
            0..=1 => *self
                .rng
                .pick(&[0, 1, u32::MAX, u32::MAX - 1, 1 << 31, 127, 128, 16384]),
            2..=4 => self.rng.below(1000) as u32,
            5..=6 => self.rng.next_u64() as u32,
            _ => (self.rng.next_u64() as u32) >> self.rng.below(32),
        }
    }

    fn f64v(&mut self) -> f64 {
        match self.rng.below(10) {
            0..=2 => f64::from_bits(*self.rng.pick(SPECIAL_F64)),
            3..=5 => f64::from_bits(self.rng.next_u64()),
            _ => self.rng.range_i64(-1_000_000, 1_000_000) as f64 / 64.0,
        }
    }

    fn f32v(&mut self) -> f32 {
        match self.rng.below(10) {
            0..=2 => f32::from_bits(*self.rng.pick(SPECIAL_F32)),
            3..=5 => f32::from_bits(self.rng.next_u64() as u32),
            _ => self.rng.range_i64(-100_000, 100_000) as f32 / 8.0,
        }
    }

    fn string(&mut self) -> String {
        match self.rng.below(10) {
            0..=4 => self.rng.pick(STRINGS).to_string(),
            5..=7 => {
                let n = self.rng.below(12);
                (0..n).map(|_| self.char()).collect()
            }
            8 => {
                let n = self.rng.below(300);
                (0..n)
                    .map(|_| (b'a' + self.rng.below(26) as u8) as char)
                    .collect()
            }
            _ => String::new(),
        }
    }

    fn char(&mut self) -> char {
        loop {
            let cp = match self.rng.below(4) {
                0 => 0x20 + self.rng.below(0x5f),
                1 => 0xa0 + self.rng.below(0x760),
                2 => 0x800 + self.rng.below(0xd800 - 0x800),
                _ => 0x10000 + self.rng.below(0x10ffff - 0x10000),
            };
            if let Some(c) = char::from_u32(cp as u32) {
                return c;
            }
        }
    }

    fn bytes(&mut self) -> Vec<u8> {
        let n = match self.rng.below(10) {
            0..=1 => 0,
            2..=8 => self.rng.below(12),
            _ => self.rng.below(400),
        };
        (0..n).map(|_| self.rng.next_u64() as u8).collect()
    }

    fn enum_number(&mut self, e: &EnumDescriptor) -> i32 {
        // Unknown numbers for open (proto3) and closed (proto2) enums alike: prost-reflect, the
        // reference, keeps both as numbers, and the mapping renders them as decimal text.
        if self.rng.below(6) < 1 {
            loop {
                let n = self.i32v();
                if e.get_value(n).is_none() {
                    return n;
                }
            }
        }
        let values: Vec<i32> = e.values().map(|v| v.number()).collect();
        *self.rng.pick(&values)
    }

    fn scalar(&mut self, kind: &Kind) -> Value {
        match kind {
            Kind::Double => Value::F64(self.f64v()),
            Kind::Float => Value::F32(self.f32v()),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(self.i32v()),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(self.i64v()),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(self.u32v()),
            Kind::Uint64 | Kind::Fixed64 => Value::U64(self.u64v()),
            Kind::Bool => Value::Bool(self.rng.below(2) < 1),
            Kind::String => Value::String(self.string()),
            Kind::Bytes => Value::Bytes(self.bytes().into()),
            Kind::Enum(e) => Value::EnumNumber(self.enum_number(e)),
            Kind::Message(_) => unreachable!(),
        }
    }

    fn value(&mut self, kind: &Kind, depth: usize) -> Value {
        match kind {
            Kind::Message(m) => Value::Message(self.message(m, depth)),
            k => self.scalar(k),
        }
    }

    fn map_key(&mut self, kind: &Kind) -> MapKey {
        match kind {
            Kind::String => MapKey::String(self.string()),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(self.i32v()),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(self.i64v()),
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(self.u32v()),
            Kind::Uint64 | Kind::Fixed64 => MapKey::U64(self.u64v()),
            Kind::Bool => MapKey::Bool(self.rng.below(2) < 1),
            k => panic!("not a map key kind: {k:?}"),
        }
    }

    /// Whether a value of this kind would nest another (non-leaf) message.
    fn nests(kind: &Kind) -> bool {
        match kind {
            Kind::Message(m) => !matches!(
                m.full_name(),
                "google.protobuf.Timestamp"
                    | "google.protobuf.Duration"
                    | "google.protobuf.DoubleValue"
                    | "google.protobuf.FloatValue"
                    | "google.protobuf.Int64Value"
                    | "google.protobuf.UInt64Value"
                    | "google.protobuf.Int32Value"
                    | "google.protobuf.UInt32Value"
                    | "google.protobuf.BoolValue"
                    | "google.protobuf.StringValue"
                    | "google.protobuf.BytesValue"
            ),
            _ => false,
        }
    }

    fn field_value(&mut self, field: &FieldDescriptor, depth: usize) -> Option<Value> {
        let kind = field.kind();
        let too_deep = depth >= MAX_GEN_DEPTH;
        if field.is_map() {
            let Kind::Message(entry) = &kind else {
                unreachable!()
            };
            let kf = entry.map_entry_key_field();
            let vf = entry.map_entry_value_field();
            let n = if too_deep && Self::nests(&vf.kind()) {
                0
            } else {
                self.rng.below(6)
            };
            let mut map = HashMap::new();
            for _ in 0..n {
                let k = self.map_key(&kf.kind());
                let v = self.value(&vf.kind(), depth + 1);
                map.entry(k).or_insert(v);
            }
            return Some(Value::Map(map));
        }
        if field.is_list() {
            let n = if too_deep && Self::nests(&kind) {
                0
            } else {
                self.rng.below(6)
            };
            let items = (0..n).map(|_| self.value(&kind, depth + 1)).collect();
            return Some(Value::List(items));
        }
        if too_deep && Self::nests(&kind) && field.cardinality() != Cardinality::Required {
            return None;
        }
        let v = self.value(&kind, depth + 1);
        // prost-reflect treats -0.0 as the default of a field without presence and does not
        // write it, so the reference must hold what is on the wire: +0.0. (A -0.0 that is on
        // the wire is checked by the adversarial tests.)
        let v = match v {
            Value::F64(x) if !field.supports_presence() && x == 0.0 => Value::F64(0.0),
            Value::F32(x) if !field.supports_presence() && x == 0.0 => Value::F32(0.0),
            v => v,
        };
        Some(v)
    }

    fn message(&mut self, desc: &MessageDescriptor, depth: usize) -> DynamicMessage {
        match desc.full_name() {
            "google.protobuf.Timestamp" => return self.timestamp(desc),
            "google.protobuf.Duration" => return self.duration(desc),
            "google.protobuf.Struct" => {
                let s = self.pb_struct(depth);
                return transcode(desc, &s);
            }
            "google.protobuf.Value" => {
                let v = self.pb_value(depth);
                return transcode(desc, &v);
            }
            "google.protobuf.ListValue" => {
                let l = self.pb_list(depth);
                return transcode(desc, &l);
            }
            "google.protobuf.Any" => return self.any(desc, depth),
            _ => {}
        }
        let mut msg = DynamicMessage::new(desc.clone());
        for oneof in desc.oneofs().filter(|o| !o.is_synthetic()) {
            if self.rng.below(3) < 2 {
                let members: Vec<FieldDescriptor> = oneof.fields().collect();
                let f = self.rng.pick(&members).clone();
                if let Some(v) = self.field_value(&f, depth) {
                    msg.set_field(&f, v);
                }
            }
        }
        for field in desc.fields() {
            if field.containing_oneof().is_some_and(|o| !o.is_synthetic()) {
                continue;
            }
            let required = field.cardinality() == Cardinality::Required;
            if !required && self.rng.below(5) >= 3 {
                continue;
            }
            if let Some(v) = self.field_value(&field, depth) {
                msg.set_field(&field, v);
            }
        }
        msg
    }

    fn seconds_nanos(&mut self, signed_nanos: bool) -> (i64, i32) {
        let secs = match self.rng.below(4) {
            0 => *self.rng.pick(&[0, 1, -1, 9_000_000_000, -9_000_000_000]),
            1 => self.rng.range_i64(-100, 100),
            _ => self.rng.range_i64(-9_000_000_000, 9_000_000_000),
        };
        let mut nanos = match self.rng.below(3) {
            0 => *self.rng.pick(&[0, 1, 999_999_999, 500_000_000]),
            _ => self.rng.below(1_000_000_000) as i32,
        };
        if signed_nanos && (secs < 0 || (secs == 0 && self.rng.below(2) < 1)) {
            nanos = -nanos;
        }
        (secs, nanos)
    }

    fn timestamp(&mut self, desc: &MessageDescriptor) -> DynamicMessage {
        let (seconds, nanos) = self.seconds_nanos(false);
        transcode(desc, &prost_types::Timestamp { seconds, nanos })
    }

    fn duration(&mut self, desc: &MessageDescriptor) -> DynamicMessage {
        let (seconds, nanos) = self.seconds_nanos(true);
        transcode(desc, &prost_types::Duration { seconds, nanos })
    }

    fn pb_value(&mut self, depth: usize) -> prost_types::Value {
        use prost_types::value::Kind as K;
        let leaf_only = depth >= MAX_GEN_DEPTH;
        let kind = match self.rng.below(if leaf_only { 5 } else { 7 }) {
            0 => None,
            1 => Some(K::NullValue(0)),
            2 => Some(K::NumberValue(self.json_number())),
            3 => Some(K::StringValue(self.string())),
            4 => Some(K::BoolValue(self.rng.below(2) < 1)),
            5 => Some(K::StructValue(self.pb_struct(depth + 1))),
            _ => Some(K::ListValue(self.pb_list(depth + 1))),
        };
        prost_types::Value { kind }
    }

    fn json_number(&mut self) -> f64 {
        match self.rng.below(4) {
            0 => *self.rng.pick(&[
                0.0,
                -0.0,
                1.0,
                -2.5,
                0.1,
                1e300,
                -1e-300,
                123456789.0,
                2f64.powi(53),
            ]),
            1 => self.rng.range_i64(-1000, 1000) as f64,
            2 => self.rng.range_i64(-1_000_000, 1_000_000) as f64 / 1000.0,
            _ => loop {
                let f = f64::from_bits(self.rng.next_u64());
                if f.is_finite() {
                    break f;
                }
            },
        }
    }

    fn pb_struct(&mut self, depth: usize) -> prost_types::Struct {
        let n = if depth >= MAX_GEN_DEPTH {
            0
        } else {
            self.rng.below(5)
        };
        let mut fields = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = self.string();
            let v = self.pb_value(depth + 1);
            fields.insert(k, v);
        }
        prost_types::Struct { fields }
    }

    fn pb_list(&mut self, depth: usize) -> prost_types::ListValue {
        let n = if depth >= MAX_GEN_DEPTH {
            0
        } else {
            self.rng.below(5)
        };
        prost_types::ListValue {
            values: (0..n).map(|_| self.pb_value(depth + 1)).collect(),
        }
    }

    fn any(&mut self, desc: &MessageDescriptor, depth: usize) -> DynamicMessage {
        let pool = desc.parent_pool();
        let candidates = [
            "test.Leaf",
            "test.Inner",
            "google.protobuf.Timestamp",
            "google.protobuf.Duration",
            "google.protobuf.Int64Value",
        ];
        let name = *self.rng.pick(&candidates);
        let payload_desc = pool
            .get_message_by_name(name)
            .unwrap_or_else(|| panic!("{name} not in the pool"));
        let payload = self.message(&payload_desc, depth + 1);
        transcode(
            desc,
            &prost_types::Any {
                type_url: format!("type.googleapis.com/{name}"),
                value: payload.encode_to_vec(),
            },
        )
    }
}

fn transcode<T: Message>(desc: &MessageDescriptor, value: &T) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    m.transcode_from(value).expect("transcode");
    m
}

/// `n` random messages of `root` with their encodings.
fn generate(
    schema: &ProtoSchema,
    root: &str,
    seed: u64,
    n: usize,
) -> Vec<(DynamicMessage, Vec<u8>)> {
    let desc = message_desc(schema, root);
    let mut g = Gen::new(seed);
    (0..n)
        .map(|_| {
            let m = g.message(&desc, 0);
            let bytes = m.encode_to_vec();
            (m, bytes)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Decoding and checking
// ---------------------------------------------------------------------------------------------

fn options(batch_size: usize) -> ProtoDecoderOptions {
    ProtoDecoderOptions {
        batch_size,
        ..ProtoDecoderOptions::default()
    }
}

/// Decodes every message, taking full batches as they fill, then flushing the rest.
fn decode_all(
    schema: &ProtoSchema,
    root: &str,
    cols: &[ColumnSpec],
    batch_size: usize,
    msgs: &[(DynamicMessage, Vec<u8>)],
) -> Vec<RecordBatch> {
    let mut dec = ProtoDecoder::new(schema, root, cols, options(batch_size))
        .unwrap_or_else(|e| panic!("plan for {root} failed: {e}"));
    let dec_schema = dec.schema();
    let names: Vec<&str> = dec_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let want: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, want, "decoder schema columns");
    // weir decides nullability itself, so types are compared ignoring it.
    for (f, c) in dec_schema.fields().iter().zip(cols) {
        if let Some(d) = type_diff(&c.data_type, f.data_type(), &c.name) {
            panic!("decoder schema differs from the requested column: {d}");
        }
    }
    let mut out = Vec::new();
    for (i, (_, bytes)) in msgs.iter().enumerate() {
        if let Err(e) = dec.decode(bytes) {
            panic!(
                "message {i} of {root} failed to decode: {e} ({e:?})\nbytes: {}",
                hex(bytes)
            );
        }
        if let Some(b) = dec.take_full_batch() {
            out.push(b);
        }
    }
    if let Some(b) = dec.flush() {
        out.push(b);
    }
    assert_eq!(dec.buffered_rows(), 0);
    assert!(dec.flush().is_none(), "a second flush has no rows");
    for b in &out {
        assert_eq!(b.schema(), dec_schema, "batch schema equals decoder schema");
    }
    out
}

/// Checks every row of `batches` against `msgs`, in order.
fn check_rows(batches: &[RecordBatch], msgs: &[(DynamicMessage, Vec<u8>)], what: &str) {
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(total, msgs.len(), "{what}: row count");
    let mut i = 0;
    let mut failures = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let (m, bytes) = &msgs[i];
            let d = row_diffs(b, r, m);
            if !d.is_empty() && failures.len() < 5 {
                failures.push(format!(
                    "message {i} ({} differences):\n    {}\n  bytes: {}",
                    d.len(),
                    d.join("\n    "),
                    hex(bytes)
                ));
            }
            i += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{what}: rows differ from the reference (first {} shown):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn default_cols(schema: &ProtoSchema, root: &str) -> Vec<ColumnSpec> {
    default_columns(schema, root).unwrap_or_else(|e| panic!("default_columns({root}): {e}"))
}

fn check_default_columns(schema: &ProtoSchema, root: &str) {
    let desc = message_desc(schema, root);
    let cols = default_cols(schema, root);
    let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
    let fields: Vec<String> = desc.fields().map(|f| f.name().to_string()).collect();
    assert_eq!(
        names, fields,
        "default_columns({root}) names every top-level field in order"
    );
    let mut problems = Vec::new();
    for (c, f) in cols.iter().zip(desc.fields()) {
        assert_eq!(c.path, None, "default column {} has no path", c.name);
        let want = expected_field_type(&desc, &f);
        if let Some(d) = type_diff(&want, &c.data_type, &c.name) {
            problems.push(d);
        }
    }
    assert!(
        problems.is_empty(),
        "default_columns({root}) types differ from the mapping:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn default_columns_follow_the_mapping() {
    let s = load_schema("all_types.proto");
    for root in [
        "test.AllTypes",
        "test.Inner",
        "test.Node",
        "test.TreeA",
        "test.Leaf",
    ] {
        check_default_columns(&s, root);
    }
    let s2 = load_schema("proto2.proto");
    for root in ["test2.P2", "test2.Sub"] {
        check_default_columns(&s2, root);
    }
}

#[test]
fn all_types_one_batch() {
    let s = load_schema("all_types.proto");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0001, 3000);
    let cols = default_cols(&s, "test.AllTypes");
    let batches = decode_all(&s, "test.AllTypes", &cols, 8192, &msgs);
    assert_eq!(batches.len(), 1);
    check_rows(&batches, &msgs, "AllTypes, one batch");
}

#[test]
fn all_types_small_batches() {
    let s = load_schema("all_types.proto");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0002, 1000);
    let cols = default_cols(&s, "test.AllTypes");
    let batches = decode_all(&s, "test.AllTypes", &cols, 97, &msgs);
    assert_eq!(batches.len(), 1000usize.div_ceil(97), "batch count");
    for b in &batches[..batches.len() - 1] {
        assert_eq!(b.num_rows(), 97);
    }
    check_rows(&batches, &msgs, "AllTypes, batches of 97");
}

#[test]
fn all_types_batch_size_one() {
    let s = load_schema("all_types.proto");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0003, 150);
    let cols = default_cols(&s, "test.AllTypes");
    let batches = decode_all(&s, "test.AllTypes", &cols, 1, &msgs);
    assert_eq!(batches.len(), 150);
    check_rows(&batches, &msgs, "AllTypes, batches of 1");
}

#[test]
fn all_types_random_projections() {
    let s = load_schema("all_types.proto");
    let desc = message_desc(&s, "test.AllTypes");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0004, 300);
    let all = default_cols(&s, "test.AllTypes");
    let mut rng = Rng::new(0x9e0_1ec7);
    for round in 0..30 {
        let mut cols: Vec<ColumnSpec> = all.iter().filter(|_| rng.below(4) < 1).cloned().collect();
        if cols.is_empty() {
            cols.push(all[rng.below(all.len() as u64) as usize].clone());
        }
        rng.shuffle(&mut cols);
        // Singular enum columns may be declared Int32 to get the number.
        for c in cols.iter_mut() {
            let f = desc.get_field_by_name(&c.name).unwrap();
            if matches!(f.kind(), Kind::Enum(_)) && !f.is_list() && rng.below(2) < 1 {
                c.data_type = DataType::Int32;
            }
        }
        let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
        let batch_size = 1 + rng.below(120) as usize;
        let batches = decode_all(&s, "test.AllTypes", &cols, batch_size, &msgs);
        check_rows(
            &batches,
            &msgs,
            &format!("projection round {round} (batch {batch_size}) {names:?}"),
        );
    }
}

#[test]
fn enum_columns_declared_int32_get_numbers() {
    let s = load_schema("all_types.proto");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0005, 500);
    let cols = vec![
        ColumnSpec::new("f_enum", DataType::Int32),
        ColumnSpec::new("o_enum", DataType::Int32),
        ColumnSpec::new("c_enum", DataType::Int32),
        ColumnSpec::new("f_int32", DataType::Int32),
    ];
    let batches = decode_all(&s, "test.AllTypes", &cols, 8192, &msgs);
    check_rows(&batches, &msgs, "enums as Int32");
    let s2 = load_schema("proto2.proto");
    let msgs2 = generate(&s2, "test2.P2", 0x5eed_0006, 300);
    let cols2 = vec![
        ColumnSpec::new("o_enum", DataType::Int32),
        ColumnSpec::new("d_enum", DataType::Int32),
    ];
    let batches2 = decode_all(&s2, "test2.P2", &cols2, 8192, &msgs2);
    check_rows(&batches2, &msgs2, "proto2 enums as Int32");
}

#[test]
fn proto2_presence_defaults_and_packing() {
    let s = load_schema("proto2.proto");
    let msgs = generate(&s, "test2.P2", 0x5eed_0007, 2000);
    let cols = default_cols(&s, "test2.P2");
    let batches = decode_all(&s, "test2.P2", &cols, 333, &msgs);
    assert!(batches.len() > 1);
    check_rows(&batches, &msgs, "proto2 P2");
}

#[test]
fn proto2_absent_fields_take_declared_defaults() {
    // An explicit check of the mapping (independent of the generic reference): the smallest
    // valid P2 (required fields only) has nulls and declared defaults.
    let s = load_schema("proto2.proto");
    let desc = message_desc(&s, "test2.P2");
    let sub_desc = message_desc(&s, "test2.Sub");
    let mut sub = DynamicMessage::new(sub_desc);
    sub.set_field_by_name("must", Value::Bool(true));
    let mut m = DynamicMessage::new(desc);
    m.set_field_by_name("req_int", Value::I64(7));
    m.set_field_by_name("req_str", Value::String("r".into()));
    m.set_field_by_name("req_sub", Value::Message(sub));
    let bytes = m.encode_to_vec();
    let cols = default_cols(&s, "test2.P2");
    let batches = decode_all(&s, "test2.P2", &cols, 8192, &[(m.clone(), bytes.clone())]);
    let b = &batches[0];
    assert_row(b, 0, &m, &bytes, "minimal P2");
    for name in [
        "o_int", "o_str", "o_enum", "o_double", "o_bool", "o_bytes", "farther",
    ] {
        assert_cell(b, name, 0, Exp::Null);
    }
    assert_cell(b, "d_int", 0, Exp::I32(-42));
    assert_cell(b, "d_str", 0, Exp::Str("hello \"world\"".into()));
    assert_cell(b, "d_enum", 0, Exp::Str("MID".into()));
    assert_cell(b, "d_double", 0, Exp::F64(2.5));
    assert_cell(b, "d_bool", 0, Exp::Bool(true));
    assert_cell(b, "d_bytes", 0, Exp::Bin(vec![1, 2, b'z']));
    assert_cell(b, "d_int64", 0, Exp::I64(-9_000_000_000));
    assert_cell(b, "d_uint32", 0, Exp::U32(4_000_000_000));
    assert_cell(b, "d_float", 0, Exp::F32(-0.5));
    assert_cell(b, "far", 0, Exp::Str("far away".into()));
    assert_cell(b, "r_unpacked", 0, Exp::List(vec![]));
    assert_cell(b, "m_sub", 0, Exp::Map(vec![]));
    // The absent optional sub-message is a null struct whose children keep their own rules:
    // `y` has a declared default, `x` and `must` are null, `zs` is empty.
    assert_cell(
        b,
        "sub",
        0,
        Exp::Struct {
            valid: false,
            fields: vec![
                ("x".into(), Exp::Null),
                ("y".into(), Exp::Str("why".into())),
                ("zs".into(), Exp::List(vec![])),
                ("must".into(), Exp::Null),
            ],
        },
    );
}

#[test]
fn proto3_absent_fields_defaults_and_nulls() {
    let s = load_schema("all_types.proto");
    let desc = message_desc(&s, "test.AllTypes");
    let m = DynamicMessage::new(desc);
    let bytes = m.encode_to_vec();
    assert!(bytes.is_empty());
    let cols = default_cols(&s, "test.AllTypes");
    let batches = decode_all(
        &s,
        "test.AllTypes",
        &cols,
        8192,
        &[(m.clone(), bytes.clone())],
    );
    let b = &batches[0];
    assert_row(b, 0, &m, &bytes, "empty AllTypes");
    assert_cell(b, "f_int32", 0, Exp::I32(0));
    assert_cell(b, "f_double", 0, Exp::F64(0.0));
    assert_cell(b, "f_string", 0, Exp::Str(String::new()));
    assert_cell(b, "f_bytes", 0, Exp::Bin(vec![]));
    assert_cell(b, "f_bool", 0, Exp::Bool(false));
    assert_cell(b, "f_enum", 0, Exp::Str("COLOR_UNSPECIFIED".into()));
    for name in [
        "o_int32", "o_string", "o_enum", "c_int", "c_str", "c_leaf", "ts", "dur", "w_int32",
        "w_string", "j_struct", "j_value", "j_any",
    ] {
        let c = cell(b, name, 0);
        let null = match &c {
            Exp::Null => true,
            Exp::Struct { valid, .. } => !valid,
            _ => false,
        };
        assert!(null, "{name} should be null when absent, got {c:?}");
    }
    assert_cell(b, "r_int32", 0, Exp::List(vec![]));
    assert_cell(b, "m_str_i64", 0, Exp::Map(vec![]));
}

#[test]
fn recursive_and_other_roots() {
    let s = load_schema("all_types.proto");
    for (i, root) in ["test.Node", "test.TreeA", "test.Inner", "test.Leaf"]
        .into_iter()
        .enumerate()
    {
        let msgs = generate(&s, root, 0x5eed_0100 + i as u64, 500);
        let cols = default_cols(&s, root);
        let batches = decode_all(&s, root, &cols, 128, &msgs);
        check_rows(&batches, &msgs, root);
    }
}

#[test]
fn schema_from_descriptor_set_bytes_decodes_the_same() {
    let s = load_schema("all_types.proto");
    let bytes = s.pool().encode_to_vec();
    let s2 = ProtoSchema::from_descriptor_set_bytes(&bytes).expect("descriptor set loads");
    let msgs = generate(&s2, "test.AllTypes", 0x5eed_0008, 200);
    let cols = default_cols(&s2, "test.AllTypes");
    let batches = decode_all(&s2, "test.AllTypes", &cols, 8192, &msgs);
    check_rows(&batches, &msgs, "AllTypes from descriptor bytes");
}

#[test]
fn generator_covers_the_schema() {
    // Guards the generator itself: over a few hundred messages every field of AllTypes is set
    // at least once and left unset at least once.
    let s = load_schema("all_types.proto");
    let desc = message_desc(&s, "test.AllTypes");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0001, 400);
    for f in desc.fields() {
        let set = msgs.iter().filter(|(m, _)| m.has_field(&f)).count();
        assert!(set > 0, "field {} never set", f.name());
        assert!(set < msgs.len(), "field {} always set", f.name());
    }
}

#[test]
fn decoder_schema_nullability_follows_presence() {
    let s = load_schema("all_types.proto");
    let s2 = load_schema("proto2.proto");
    let mut problems = Vec::new();
    for (schema, root) in [(&s, "test.AllTypes"), (&s, "test.Node"), (&s2, "test2.P2")] {
        let cols = default_cols(schema, root);
        let dec = ProtoDecoder::new(schema, root, &cols, options(8192)).unwrap();
        let desc = message_desc(schema, root);
        problems.extend(nullability_diffs(
            &desc,
            dec.schema().fields(),
            &format!("{root}: "),
        ));
    }
    assert!(
        problems.is_empty(),
        "decoder schema nullability differs from the presence rules:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn comparison_harness_detects_differences() {
    // Guards the harness: a row compared with another message's reference must differ, and
    // floats compare by bits (NaN payloads, signed zeros).
    let s = load_schema("all_types.proto");
    let msgs = generate(&s, "test.AllTypes", 0x5eed_0009, 50);
    let cols = default_cols(&s, "test.AllTypes");
    let batches = decode_all(&s, "test.AllTypes", &cols, 8192, &msgs);
    let b = &batches[0];
    for i in 0..49 {
        assert!(row_diffs(b, i, &msgs[i].0).is_empty());
        assert!(
            !row_diffs(b, i, &msgs[i + 1].0).is_empty(),
            "rows {i} and {} compare equal",
            i + 1
        );
    }
    let mut out = Vec::new();
    diff(&Exp::F64(0.0), &Exp::F64(-0.0), "z", &mut out);
    diff(
        &Exp::F64(f64::NAN),
        &Exp::F64(f64::from_bits(0x7ff8_0000_0000_0001)),
        "nan",
        &mut out,
    );
    diff(
        &Exp::F32(f32::NAN),
        &Exp::F32(f32::NAN),
        "same nan",
        &mut out,
    );
    diff(
        &Exp::Struct {
            valid: false,
            fields: vec![],
        },
        &Exp::Struct {
            valid: true,
            fields: vec![],
        },
        "validity",
        &mut out,
    );
    assert_eq!(out.len(), 3, "{out:?}");
}

/// Two encodings back to back are one message to protobuf (the merge rule): singular fields
/// take the later value, sub-messages merge, repeated fields append, and a map keeps the later
/// entry of a repeated key. A message followed by itself repeats every map key.
#[test]
fn concatenated_messages_merge_as_google_does() {
    for (file, root, seed) in [
        ("all_types.proto", "test.AllTypes", 0xc0_ca7),
        ("proto2.proto", "test2.P2", 0xc0_ca8),
    ] {
        let schema = load_schema(file);
        let desc = message_desc(&schema, root);
        let single = generate(&schema, root, seed, 200);
        let msgs: Vec<(DynamicMessage, Vec<u8>)> = single
            .iter()
            .enumerate()
            .map(|(i, (_, a))| {
                // Even rows: the message twice; odd rows: it and the next one.
                let b = if i % 2 == 0 {
                    a
                } else {
                    &single[(i + 1) % single.len()].1
                };
                let bytes = [a.as_slice(), b.as_slice()].concat();
                let merged = DynamicMessage::decode(desc.clone(), bytes.as_slice())
                    .expect("prost-reflect reads the concatenation");
                (merged, bytes)
            })
            .collect();
        let cols = default_cols(&schema, root);
        let batches = decode_all(&schema, root, &cols, 64, &msgs);
        check_rows(&batches, &msgs, &format!("{root} concatenated"));
    }
}

// ---------------------------------------------------------------------------------------------
// The encoder, against the decoder and prost-reflect
// ---------------------------------------------------------------------------------------------

/// Random messages are decoded into Arrow, the rows encoded again by `ProtoEncoder`, and what it
/// wrote parsed by prost-reflect and decoded again: every column the encoder takes holds, for
/// every row, what the original message held.
#[test]
fn the_encoder_writes_back_what_the_decoder_read() {
    let schema = load_schema("all_types.proto");
    let root = "test.AllTypes";
    let desc = message_desc(&schema, root);
    let msgs = generate(&schema, root, 77, 500);
    let field = |c: &ColumnSpec| Field::new(&c.name, c.data_type.clone(), true);
    let (cols, refused): (Vec<ColumnSpec>, Vec<ColumnSpec>) = default_cols(&schema, root)
        .into_iter()
        .partition(|c| ProtoEncoder::new(&desc, &vec![field(c)].into()).is_ok());
    let names = |cs: &[ColumnSpec]| cs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    // Scalars of every kind, their optional and repeated forms, text and bytes, enums by name,
    // a nested message, a timestamp, wrappers, repeated messages and maps.
    for want in [
        "f_sint64",
        "o_fixed32",
        "r_float",
        "r_sfixed64",
        "r_string",
        "r_bytes",
        "f_enum",
        "r_enum",
        "c_leaf",
        "ts",
        "w_int64",
        "w_bytes",
        "r_inner",
        "r_leaf",
        "m_str_i64",
        "m_i32_inner",
        "m_str_str",
        "m_u64_enum",
        "m_bool_bytes",
        "m_s64_leaf",
        "r_ts",
    ] {
        assert!(
            names(&cols).iter().any(|n| n == want),
            "{want} not encoded: {:?}",
            names(&cols)
        );
    }
    assert!(
        cols.len() >= 60,
        "only {:?} taken; refused {:?}",
        names(&cols),
        names(&refused)
    );
    let batches = decode_all(&schema, root, &cols, 128, &msgs);
    let mut encoder = ProtoEncoder::new(&desc, batches[0].schema().fields()).unwrap();
    let mut again = Vec::new();
    for b in &batches {
        let (mut out, mut ends) = (vec![7u8; 3], Vec::new());
        encoder.encode_batch(b, &mut out, &mut ends).unwrap();
        assert_eq!(ends.len(), b.num_rows());
        // Messages follow what `out` held before.
        let mut start = 3;
        for end in ends {
            let bytes = out[start..end].to_vec();
            let parsed = DynamicMessage::decode(desc.clone(), bytes.as_slice())
                .unwrap_or_else(|e| panic!("prost-reflect cannot parse {}: {e}", hex(&bytes)));
            again.push((parsed, bytes));
            start = end;
        }
    }
    let round = decode_all(&schema, root, &cols, 128, &again);
    check_rows(&round, &msgs, "encoded and decoded again");
}

/// A column without a field, or of a type its field cannot take, is refused when the encoder
/// is made, naming both.
#[test]
fn the_encoder_refuses_columns_that_do_not_fit_their_fields() {
    let schema = load_schema("all_types.proto");
    let desc = message_desc(&schema, "test.AllTypes");
    let refuse = |name: &str, t: DataType| {
        ProtoEncoder::new(&desc, &vec![Field::new(name, t, true)].into())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = refuse("no_such_field", DataType::Int64);
    assert!(
        e.contains("no_such_field") && e.contains("test.AllTypes"),
        "{e}"
    );
    let e = refuse("f_int32", DataType::Utf8);
    assert!(e.contains("f_int32") && e.contains("Utf8"), "{e}");
    let e = refuse("f_double", DataType::Int64);
    assert!(e.contains("f_double"), "{e}");
    // An enum name the schema does not have fails the batch, naming the column and row.
    let column = Field::new("f_enum", DataType::Utf8, true);
    let mut encoder = ProtoEncoder::new(&desc, &vec![column.clone()].into()).unwrap();
    let batch = RecordBatch::try_new(
        std::sync::Arc::new(weir_codec::Schema::new(vec![column])),
        vec![std::sync::Arc::new(arrow_array::StringArray::from(vec![
            "RED", "PURPLE",
        ]))],
    )
    .unwrap();
    let e = encoder
        .encode_batch(&batch, &mut Vec::new(), &mut Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("f_enum") && e.contains("row 1") && e.contains("PURPLE"),
        "{e}"
    );
}
