//! Random documents against `serde_json`: values decoded by weir equal the values serde_json
//! reads from the same text (whatever the whitespace, key order, escapes and unrequested keys),
//! and mutated documents are accepted by weir exactly when serde_json accepts them.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Fields};
use serde_json::Value;
use weir_codec::{ColumnSpec, Decoder, JsonDecoder, JsonDecoderOptions};

use weir_testdata::Rng;

const CHARS: &[char] = &[
    'a',
    'b',
    'z',
    'A',
    '0',
    '9',
    ' ',
    '"',
    '\\',
    '/',
    '\n',
    '\r',
    '\t',
    '\u{0}',
    '\u{1f}',
    '\u{7f}',
    '\u{80}',
    '\u{e9}',
    '\u{7ff}',
    '\u{800}',
    '\u{4e16}',
    '\u{ffff}',
    '\u{10000}',
    '\u{1F600}',
    '\u{10FFFF}',
    '{',
    '}',
    '[',
    ']',
    ',',
    ':',
];

fn random_string(rng: &mut Rng) -> String {
    let longest = if rng.percent(10) { 40 } else { 12 };
    let n = rng.index(longest);
    (0..n).map(|_| CHARS[rng.index(CHARS.len())]).collect()
}

fn random_f64(rng: &mut Rng) -> f64 {
    loop {
        let v = match rng.index(4) {
            0 => f64::from_bits(rng.next_u64()),
            1 => (rng.next_u64() as i64 as f64) / 1e6,
            2 => rng.index(100_000) as f64 / 100.0,
            _ => (rng.next_u64() % 1000) as f64 * 10f64.powi(rng.index(40) as i32 - 20),
        };
        if v.is_finite() {
            return v;
        }
    }
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let pick = if depth == 0 {
        rng.index(6)
    } else {
        rng.index(8)
    };
    match pick {
        0 => Value::Null,
        1 => Value::Bool(rng.percent(50)),
        2 => Value::from(rng.next_u64() as i64 >> rng.index(64)),
        3 => Value::from(random_f64(rng)),
        4 | 5 => Value::String(random_string(rng)),
        6 => Value::Array(
            (0..rng.index(5))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.index(5))
                .map(|_| (random_string(rng), random_value(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// Writes JSON with random whitespace, and strings either as serde_json writes them or with
/// every non-ASCII character (and some ASCII ones) as `\u` escapes, surrogate pairs included.
struct Writer<'r> {
    rng: &'r mut Rng,
    out: String,
}

impl Writer<'_> {
    fn ws(&mut self) {
        if self.rng.percent(20) {
            for _ in 0..1 + self.rng.index(3) {
                self.out.push([' ', '\t', '\n', '\r'][self.rng.index(4)]);
            }
        }
    }

    fn string(&mut self, s: &str) {
        if self.rng.percent(50) {
            self.out.push_str(&serde_json::to_string(s).unwrap());
            return;
        }
        self.out.push('"');
        for c in s.chars() {
            if !c.is_ascii() || c < ' ' || c == '"' || c == '\\' || self.rng.percent(5) {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    if self.rng.percent(50) {
                        self.out.push_str(&format!("\\u{u:04x}"));
                    } else {
                        self.out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            } else {
                self.out.push(c);
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, v: &Value) {
        self.ws();
        match v {
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.ws();
                self.out.push(']');
            }
            Value::Object(map) => {
                let entries: Vec<(String, Value)> =
                    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                self.object(&entries);
            }
            other => self.out.push_str(&other.to_string()),
        }
        self.ws();
    }

    fn object(&mut self, entries: &[(String, Value)]) {
        self.out.push('{');
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.ws();
            self.string(k);
            self.ws();
            self.out.push(':');
            self.value(v);
        }
        self.ws();
        self.out.push('}');
    }
}

fn struct_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

fn columns() -> Vec<ColumnSpec> {
    vec![
        ColumnSpec::new("i", DataType::Int64),
        ColumnSpec::new("f", DataType::Float64),
        ColumnSpec::new("s", DataType::Utf8),
        ColumnSpec::new("b", DataType::Boolean),
        ColumnSpec::new("raw", DataType::Utf8),
        ColumnSpec::new(
            "l",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
        ),
        ColumnSpec::new("st", struct_type()),
        ColumnSpec::new("deep", DataType::Utf8).with_path("p.q.r"),
    ]
}

/// A document with the requested keys (typed values or null, sometimes absent, sometimes twice)
/// among random unrequested keys, in random order.
fn document(rng: &mut Rng) -> Vec<(String, Value)> {
    let mut entries: Vec<(String, Value)> = Vec::new();
    let nullable = |rng: &mut Rng, v: Value| if rng.percent(10) { Value::Null } else { v };
    let typed = |rng: &mut Rng, key: &str| -> Value {
        match key {
            "i" => Value::from(rng.next_u64() as i64 >> rng.index(64)),
            "f" => Value::from(random_f64(rng)),
            "s" => Value::String(random_string(rng)),
            "b" => Value::Bool(rng.percent(50)),
            "raw" => random_value(rng, 3),
            "l" => Value::Array(
                (0..rng.index(4))
                    .map(|_| {
                        if rng.percent(10) {
                            Value::Null
                        } else {
                            Value::from(rng.next_u64() as i64)
                        }
                    })
                    .collect(),
            ),
            "st" => {
                let mut m = serde_json::Map::new();
                if rng.percent(80) {
                    m.insert("x".into(), Value::from(rng.index(1000) as i64));
                }
                if rng.percent(80) {
                    m.insert("s".into(), Value::String(random_string(rng)));
                }
                m.insert(random_string(rng), random_value(rng, 2));
                Value::Object(m)
            }
            _ => {
                let mut r = serde_json::Map::new();
                r.insert("r".into(), random_value(rng, 2));
                let mut q = serde_json::Map::new();
                q.insert("q".into(), Value::Object(r));
                Value::Object(q)
            }
        }
    };
    for key in ["i", "f", "s", "b", "raw", "l", "st", "p"] {
        for _ in 0..[0, 1, 1, 1, 1, 1, 1, 2][rng.index(8)] {
            let v = typed(rng, key);
            entries.push((key.to_string(), nullable(rng, v)));
        }
    }
    for _ in 0..rng.index(6) {
        let k = random_string(rng);
        if !["i", "f", "s", "b", "raw", "l", "st", "p"].contains(&k.as_str()) {
            entries.push((k, random_value(rng, 3)));
        }
    }
    // Fisher-Yates, keeping the relative order of repeated keys irrelevant: the expected value
    // is computed from the final order.
    for i in (1..entries.len()).rev() {
        let j = rng.index(i + 1);
        entries.swap(i, j);
    }
    entries
}

fn last<'a>(entries: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Whether raw JSON text holds `v`: both go through serde_json's reader from the same number
/// text (the writer prints numbers as serde_json does), so its float rounding cancels out.
fn same_json(raw: &str, v: &Value) -> Result<bool, String> {
    let got: Value = serde_json::from_str(raw).map_err(|e| format!("{raw}: {e}"))?;
    let want: Value = serde_json::from_str(&v.to_string()).map_err(|e| e.to_string())?;
    Ok(got == want)
}

fn check_row(batch: &RecordBatch, row: usize, entries: &[(String, Value)], text: &str) {
    let ctx = || format!("row {row}: {text}");
    fn null_or(v: Option<&Value>) -> Option<&Value> {
        v.filter(|v| !v.is_null())
    }
    let col = |i: usize| batch.column(i);

    match null_or(last(entries, "i")) {
        Some(v) => assert_eq!(
            col(0).as_primitive::<Int64Type>().value(row),
            v.as_i64().unwrap(),
            "{}",
            ctx()
        ),
        None => assert!(col(0).is_null(row), "{}", ctx()),
    }
    match null_or(last(entries, "f")) {
        Some(v) => assert_eq!(
            col(1).as_primitive::<Float64Type>().value(row).to_bits(),
            v.as_f64().unwrap().to_bits(),
            "{}",
            ctx()
        ),
        None => assert!(col(1).is_null(row), "{}", ctx()),
    }
    match null_or(last(entries, "s")) {
        Some(v) => assert_eq!(
            col(2).as_string::<i32>().value(row),
            v.as_str().unwrap(),
            "{}",
            ctx()
        ),
        None => assert!(col(2).is_null(row), "{}", ctx()),
    }
    match null_or(last(entries, "b")) {
        Some(v) => assert_eq!(
            col(3).as_boolean().value(row),
            v.as_bool().unwrap(),
            "{}",
            ctx()
        ),
        None => assert!(col(3).is_null(row), "{}", ctx()),
    }
    match null_or(last(entries, "raw")) {
        Some(Value::String(s)) => assert_eq!(col(4).as_string::<i32>().value(row), s, "{}", ctx()),
        Some(v) => {
            let raw = col(4).as_string::<i32>().value(row);
            assert_eq!(same_json(raw, v), Ok(true), "{}", ctx());
        }
        None => assert!(col(4).is_null(row), "{}", ctx()),
    }
    match null_or(last(entries, "l")) {
        Some(Value::Array(items)) => {
            let l = col(5).as_list::<i32>().value(row);
            let l = l.as_primitive::<Int64Type>();
            assert_eq!(l.len(), items.len(), "{}", ctx());
            for (j, item) in items.iter().enumerate() {
                match item.as_i64() {
                    Some(x) => assert_eq!(l.value(j), x, "{}", ctx()),
                    None => assert!(l.is_null(j), "{}", ctx()),
                }
            }
        }
        _ => assert!(col(5).is_null(row), "{}", ctx()),
    }
    let st = col(6).as_struct();
    match null_or(last(entries, "st")) {
        Some(Value::Object(m)) => {
            assert!(st.is_valid(row), "{}", ctx());
            match m.get("x").and_then(Value::as_i64) {
                Some(x) => assert_eq!(st.column(0).as_primitive::<Int64Type>().value(row), x),
                None => assert!(st.column(0).is_null(row), "{}", ctx()),
            }
            match m.get("s").and_then(Value::as_str) {
                Some(s) => assert_eq!(st.column(1).as_string::<i32>().value(row), s),
                None => assert!(st.column(1).is_null(row), "{}", ctx()),
            }
        }
        _ => assert!(st.is_null(row), "{}", ctx()),
    }
    let deep = last(entries, "p")
        .and_then(|p| p.pointer("/q/r"))
        .filter(|v| !v.is_null());
    match deep {
        Some(v) => {
            let raw = col(7).as_string::<i32>().value(row);
            match v {
                Value::String(s) => assert_eq!(raw, s, "{}", ctx()),
                _ => assert_eq!(same_json(raw, v), Ok(true), "{}", ctx()),
            }
        }
        None => assert!(col(7).is_null(row), "{}", ctx()),
    }
}

fn iterations() -> usize {
    std::env::var("WEIR_JSON_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

#[test]
fn random_documents_decode_like_serde_json() {
    let mut rng = Rng::new(0x15_0d0c);
    let mut dec = JsonDecoder::new(&columns(), JsonDecoderOptions::default()).unwrap();
    let mut pending: Vec<(Vec<(String, Value)>, String)> = Vec::new();
    let n = iterations();
    for i in 0..n {
        let entries = document(&mut rng);
        let mut w = Writer {
            rng: &mut rng,
            out: String::new(),
        };
        w.ws();
        w.object(&entries);
        w.ws();
        let text = w.out;
        // Sanity: the writer produces JSON serde_json reads. (Its values are not compared: without
        // the `float_roundtrip` feature serde_json may read a float 1 ulp off; the expected
        // values are the generated ones, whose text is their shortest round-trip form.)
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        dec.decode(text.as_bytes())
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        pending.push((entries, text));
        if pending.len() == 97 || i + 1 == n {
            let batch = dec.flush().unwrap();
            for c in batch.columns() {
                c.to_data().validate_full().unwrap();
            }
            for (row, (entries, text)) in pending.iter().enumerate() {
                check_row(&batch, row, entries, text);
            }
            pending.clear();
        }
    }
}

const TOKENS: &[&[u8]] = &[
    b",",
    b"]",
    b"}",
    b"[",
    b"{",
    b"\"",
    b":",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"0",
    b"-",
    b".",
    b"e",
    b"+",
    b"01",
    b"1e999",
    b"null",
    b"tru",
    b"NaN",
    b"\x00",
    b"\x1f",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98",
    b" ",
    b"\n",
    b"{}",
    b"[]",
];

#[test]
fn mutated_documents_are_accepted_exactly_when_serde_json_accepts_them() {
    let mut rng = Rng::new(0xbad_5eed);
    // Utf8 columns take any value, so acceptance depends on validity alone.
    let cols = vec![
        ColumnSpec::new("s", DataType::Utf8),
        ColumnSpec::new("raw", DataType::Utf8),
        ColumnSpec::new("deep", DataType::Utf8).with_path("p.q.r"),
    ];
    let mut dec = JsonDecoder::new(&cols, JsonDecoderOptions::default()).unwrap();
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..iterations() * 2 {
        let entries = document(&mut rng);
        let mut w = Writer {
            rng: &mut rng,
            out: String::new(),
        };
        w.object(&entries);
        let mut bytes = w.out.into_bytes();
        for _ in 0..1 + rng.index(2) {
            let at = rng.index(bytes.len() + 1);
            match rng.index(4) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 if at < bytes.len() => bytes[at] = TOKENS[rng.index(TOKENS.len())][0],
                2 => bytes.truncate(at),
                _ => {
                    let t = TOKENS[rng.index(TOKENS.len())];
                    bytes.splice(at..at, t.iter().copied());
                }
            }
        }
        let reference = serde_json::from_slice::<Value>(&bytes);
        let before = dec.buffered_rows();
        let ours = dec.decode(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        match (&reference, &ours) {
            (Ok(v), Ok(())) if v.is_object() => accepted += 1,
            (Ok(v), Err(_)) if !v.is_object() => rejected += 1,
            (Err(_), Err(_)) => rejected += 1,
            // serde_json's Value cannot hold numbers beyond f64; they are valid JSON.
            (Err(e), Ok(())) if e.to_string().contains("number out of range") => accepted += 1,
            _ => panic!("serde_json: {reference:?}, weir: {ours:?}, input: {text}"),
        }
        if ours.is_err() {
            assert_eq!(dec.buffered_rows(), before);
        }
        if dec.buffered_rows() > 500 {
            dec.flush();
        }
    }
    assert!(
        accepted > 100 && rejected > 100,
        "{accepted} accepted, {rejected} rejected"
    );
}
