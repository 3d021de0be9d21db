//! The JSON fuzz harness, shared by the stable mutation fuzzer (`tests/fuzz/json.rs`, part of the
//! test suite) and the coverage-guided cargo-fuzz target (`fuzz/fuzz_targets/json.rs`, nightly).
//! Seeds are the files of `fuzz/corpus/json/` (one JSON object each).
//!
//! For every input the harness checks what the decoder promises: no panic; a rejected message
//! leaves no row behind; a known-good message decoded before and after it comes out identical to
//! a reference decode; every batch is valid Arrow (full validation); and the decoder that reads
//! only Utf8 columns (so it can never see a type mismatch) accepts exactly the inputs serde_json
//! accepts as an object (numbers beyond f64, which serde_json's `Value` cannot hold, aside).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use weir_codec::{ColumnSpec, Decoder, EpochUnit, JsonDecoder, JsonDecoderOptions, JsonMismatch};

/// One decoder under test and the reference row of its anchor seed.
pub struct FuzzTarget {
    pub name: String,
    pub decoder: JsonDecoder,
    anchor: Vec<u8>,
    reference: RecordBatch,
    anchor_rows: Vec<bool>,
    /// Whether acceptance must equal serde_json's.
    validity_only: bool,
}

/// The weir-codec crate directory (the harness is compiled both from it and from `fuzz/`).
fn root() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string()),
    );
    if dir.ends_with("fuzz") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    }
}

/// The seed corpus, in file-name order.
pub fn seeds() -> Vec<Vec<u8>> {
    let dir = root().join("fuzz/corpus/json");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).expect("seed file"))
        .collect()
}

fn list(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

fn struct_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("tags", list(DataType::Utf8), true),
    ]))
}

fn all_types() -> Vec<ColumnSpec> {
    let map = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Float64, true),
            ])),
            false,
        )),
        false,
    );
    vec![
        ColumnSpec::new("i8", DataType::Int8),
        ColumnSpec::new("i16", DataType::Int16),
        ColumnSpec::new("i32", DataType::Int32),
        ColumnSpec::new("i64", DataType::Int64),
        ColumnSpec::new("u8", DataType::UInt8),
        ColumnSpec::new("u16", DataType::UInt16),
        ColumnSpec::new("u32", DataType::UInt32),
        ColumnSpec::new("u64", DataType::UInt64),
        ColumnSpec::new("f32", DataType::Float32),
        ColumnSpec::new("f64", DataType::Float64),
        ColumnSpec::new("dec", DataType::Decimal128(20, 4)),
        ColumnSpec::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None)),
        ColumnSpec::new("ts_ms", DataType::Timestamp(TimeUnit::Microsecond, None)),
        ColumnSpec::new("date", DataType::Date32),
        ColumnSpec::new("b", DataType::Boolean),
        ColumnSpec::new("s", DataType::Utf8),
        ColumnSpec::new("raw", DataType::Utf8),
        ColumnSpec::new("st", struct_type()),
        ColumnSpec::new("l", list(struct_type())),
        ColumnSpec::new("m", map),
    ]
}

fn target(
    name: &str,
    cols: &[ColumnSpec],
    mismatch: JsonMismatch,
    anchor: &[u8],
    validity_only: bool,
) -> FuzzTarget {
    let options = JsonDecoderOptions {
        batch_size: 64,
        mismatch,
        timestamp_units: if cols.iter().any(|c| c.name == "ts_ms") {
            vec![("ts_ms".into(), EpochUnit::Millis)]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let mut decoder = JsonDecoder::new(cols, options).expect("plan");
    decoder.decode(anchor).expect("anchor decodes");
    let reference = decoder.flush().expect("reference row");
    FuzzTarget {
        name: name.to_string(),
        decoder,
        anchor: anchor.to_vec(),
        reference,
        anchor_rows: Vec::new(),
        validity_only,
    }
}

/// The decoders the fuzzer drives: every type (strict and lenient), the quote with nested paths,
/// a projection through nested objects, and a Utf8-only decoder checked against serde_json.
pub fn targets() -> Vec<FuzzTarget> {
    let seeds = seeds();
    let quote = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("ask_size", DataType::UInt32),
        ColumnSpec::new("conditions", DataType::Int32),
    ];
    let projection = vec![
        ColumnSpec::new("customer", DataType::Int64).with_path("order.customer.id"),
        ColumnSpec::new(
            "items",
            list(DataType::Struct(Fields::from(vec![
                Field::new("sku", DataType::Utf8, true),
                Field::new("price", DataType::Decimal128(10, 2), true),
            ]))),
        )
        .with_path("order.items"),
        ColumnSpec::new("tags", list(DataType::Utf8)),
    ];
    let text = vec![
        ColumnSpec::new("s", DataType::Utf8),
        ColumnSpec::new("raw", DataType::Utf8),
        ColumnSpec::new("name", DataType::Utf8).with_path("order.customer.name"),
    ];
    vec![
        target(
            "all_types",
            &all_types(),
            JsonMismatch::Error,
            &seeds[1],
            false,
        ),
        target(
            "all_types_null",
            &all_types(),
            JsonMismatch::Null,
            &seeds[1],
            false,
        ),
        target("quote", &quote, JsonMismatch::Error, &seeds[0], false),
        target(
            "projection",
            &projection,
            JsonMismatch::Error,
            &seeds[2],
            false,
        ),
        target("text", &text, JsonMismatch::Error, &seeds[2], true),
    ]
}

/// Runs one input through one target and checks the decoder's promises. Panics on a violation.
/// Returns whether the decoder accepted the input.
pub fn check(t: &mut FuzzTarget, input: &[u8]) -> bool {
    let anchor = t.anchor.clone();
    let before = t.decoder.buffered_rows();
    t.decoder.decode(&anchor).expect("anchor decodes");
    t.anchor_rows.push(true);
    let result = t.decoder.decode(input);
    let accepted = match &result {
        Ok(()) => {
            t.anchor_rows.push(false);
            assert_eq!(t.decoder.buffered_rows(), before + 2);
            true
        }
        Err(e) => {
            assert_eq!(
                t.decoder.buffered_rows(),
                before + 1,
                "{}: rejected message left a row",
                t.name
            );
            assert!(
                e.offset <= input.len(),
                "{}: error offset {} past the input ({} bytes): {e}",
                t.name,
                e.offset,
                input.len()
            );
            false
        }
    };
    if t.validity_only {
        let reference = serde_json::from_slice::<serde_json::Value>(input);
        let agrees = match &reference {
            Ok(v) => v.is_object() == accepted,
            Err(e) => !accepted || e.to_string().contains("number out of range"),
        };
        assert!(
            agrees,
            "{}: serde_json says {reference:?}, weir says {result:?} for {:?}",
            t.name,
            String::from_utf8_lossy(input)
        );
    }
    t.decoder.decode(&anchor).expect("anchor decodes");
    t.anchor_rows.push(true);
    if t.decoder.buffered_rows() >= 60 {
        verify_batch(t);
    }
    accepted
}

/// Flushes and checks every buffered row: valid Arrow, anchors equal to the reference.
pub fn verify_batch(t: &mut FuzzTarget) {
    let Some(batch) = t.decoder.flush() else {
        return;
    };
    assert_eq!(batch.num_rows(), t.anchor_rows.len());
    for col in batch.columns() {
        col.to_data().validate_full().expect("valid arrow data");
    }
    for (row, &is_anchor) in t.anchor_rows.iter().enumerate() {
        if !is_anchor {
            continue;
        }
        for (c, col) in batch.columns().iter().enumerate() {
            let got = col.slice(row, 1);
            let want = t.reference.column(c);
            assert!(
                got.as_ref() == want.as_ref(),
                "{}: anchor row {row} column {} differs after fuzz input",
                t.name,
                batch.schema().field(c).name()
            );
        }
    }
    t.anchor_rows.clear();
}

pub use weir_testdata::Rng;

/// Bytes and snippets that hit the scanner's edge cases.
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
    b"\\uD83D\\uDE00",
    b"0",
    b"-",
    b".",
    b"e",
    b"E+",
    b"01",
    b"1e999",
    b"-1e-999",
    b"1.5",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"null",
    b"true",
    b"fals",
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
    b"\"\":",
    b"\"i64\":",
    b"\"st\":{",
    b"\"order\":",
    b"[[[[[[[[",
    b"\"2026-02-30T00:00:00Z\"",
    b"\"2024-02-29\"",
];

/// Mutates `input` in place: bit flips, structural tokens, deletions, duplications, splices with
/// another seed and truncation.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let rounds = 1 + rng.index(3);
    for _ in 0..rounds {
        let len = input.len();
        match rng.index(7) {
            0 if len > 0 => {
                let i = rng.index(len);
                input[i] ^= 1 << rng.index(8);
            }
            1 if len > 0 => {
                let i = rng.index(len);
                let t = TOKENS[rng.index(TOKENS.len())];
                input[i] = t[rng.index(t.len())];
            }
            2 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(8)).min(len);
                input.drain(a..b);
            }
            3 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(24)).min(len);
                let chunk = input[a..b].to_vec();
                let at = rng.index(input.len() + 1);
                input.splice(at..at, chunk);
            }
            4 => {
                let other = &seeds[rng.index(seeds.len())];
                if !other.is_empty() {
                    let a = rng.index(other.len());
                    let b = (a + 1 + rng.index(48)).min(other.len());
                    let at = rng.index(len + 1);
                    input.splice(at..at, other[a..b].iter().copied());
                }
            }
            5 if len > 0 => input.truncate(rng.index(len)),
            _ => {
                let t = TOKENS[rng.index(TOKENS.len())];
                let at = rng.index(len + 1);
                input.splice(at..at, t.iter().copied());
            }
        }
    }
}
