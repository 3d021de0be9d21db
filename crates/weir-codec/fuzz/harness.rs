//! The protobuf fuzz harness, shared by the stable mutation fuzzer (`tests/fuzz/protobuf.rs`,
//! part of the test suite) and the coverage-guided cargo-fuzz target
//! (`fuzz/fuzz_targets/protobuf.rs`, nightly). Each target is a decoder over one test schema plus a seeded corpus
//! (`fuzz/corpus/<message>/`: `.json` files are proto3 JSON encoded at start-up, `.bin` files
//! are raw wire bytes).
//!
//! For every input the harness checks what the decoder promises: no panic; a rejected message
//! leaves no row behind; the known-good message decoded before and after it comes out identical
//! to a reference decode; every batch is valid Arrow (full validation).

use std::path::{Path, PathBuf};

use arrow_array::{Array, RecordBatch};
use prost::Message as _;
use prost_reflect::DynamicMessage;
use weir_codec::{
    default_columns, ColumnSpec, DataType, Decoder, ProtoDecoder, ProtoDecoderOptions, ProtoSchema,
};

/// One decoder under test, its corpus, and the reference row of its first seed.
pub struct FuzzTarget {
    pub name: String,
    pub decoder: ProtoDecoder,
    pub seeds: Vec<Vec<u8>>,
    reference: RecordBatch,
    anchor_rows: Vec<bool>,
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

fn load_seeds(schema: &ProtoSchema, message: &str) -> Vec<Vec<u8>> {
    let desc = schema.pool().get_message_by_name(message).expect("message");
    let dir = root().join("fuzz/corpus").join(message);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| seed_bytes(&desc, f))
        .collect::<Vec<_>>()
}

fn seed_bytes(desc: &prost_reflect::MessageDescriptor, f: &Path) -> Vec<u8> {
    let text = std::fs::read(f).expect("seed file");
    if f.extension().is_some_and(|e| e == "json") {
        let mut de = serde_json::Deserializer::from_slice(&text);
        let msg = DynamicMessage::deserialize(desc.clone(), &mut de)
            .unwrap_or_else(|e| panic!("seed {}: {e}", f.display()));
        msg.encode_to_vec()
    } else {
        text
    }
}

fn target(name: &str, schema: &ProtoSchema, message: &str, cols: Vec<ColumnSpec>) -> FuzzTarget {
    let opts = ProtoDecoderOptions {
        batch_size: 64,
        ..Default::default()
    };
    let mut decoder = ProtoDecoder::new(schema, message, &cols, opts).expect("plan");
    let seeds = load_seeds(schema, message);
    decoder.decode(&seeds[0]).expect("first seed decodes");
    let reference = decoder.flush().expect("reference row");
    FuzzTarget {
        name: name.to_string(),
        decoder,
        seeds,
        reference,
        anchor_rows: Vec::new(),
    }
}

/// The decoders the fuzzer drives: every column of the all-types schema, the options quote with
/// nested paths, a small schema with every column, and a 3-column projection of it.
pub fn targets() -> Vec<FuzzTarget> {
    let tests = root().join("tests/proto");
    let all = ProtoSchema::from_proto_file(tests.join("all_types.proto"), &[]).expect("schema");
    let wire = ProtoSchema::from_proto_file(tests.join("wire.proto"), &[]).expect("schema");
    let stocks = ProtoSchema::from_sources(
        &[("stocks.proto", weir_testdata::STOCKS_PROTO)],
        "stocks.proto",
    )
    .expect("schema");
    let quote_cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("ask_size", DataType::UInt32),
        ColumnSpec::new("conditions", DataType::Int32),
    ];
    let projection = vec![
        ColumnSpec::new("s", DataType::Utf8),
        ColumnSpec::new("x", DataType::Int64).with_path("inner.leaf.x"),
        ColumnSpec::new("far", DataType::Int32),
    ];
    vec![
        target(
            "all_types",
            &all,
            "test.AllTypes",
            default_columns(&all, "test.AllTypes").expect("columns"),
        ),
        target("quote", &stocks, "stocks.QuoteNBBO", quote_cols),
        target(
            "wire",
            &wire,
            "wire.Msg",
            default_columns(&wire, "wire.Msg").expect("columns"),
        ),
        target("wire_projection", &wire, "wire.Msg", projection),
    ]
}

/// Runs one input through one target and checks the decoder's promises. Panics on a violation.
/// Returns whether the decoder accepted the input.
pub fn check(t: &mut FuzzTarget, input: &[u8]) -> bool {
    let anchor = t.seeds[0].clone();
    let before = t.decoder.buffered_rows();
    t.decoder.decode(&anchor).expect("anchor decodes");
    t.anchor_rows.push(true);
    let accepted = match t.decoder.decode(input) {
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

const INTERESTING: [u8; 10] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x7f, 0x80, 0xff];

/// Mutates `input` in place: bit flips, interesting bytes, inserted tags and varints, deletions,
/// duplications, splices with another seed and truncation.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let rounds = 1 + rng.index(4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.index(9) {
            0 if len > 0 => {
                let i = rng.index(len);
                input[i] ^= 1 << rng.index(8);
            }
            1 if len > 0 => {
                let i = rng.index(len);
                input[i] = INTERESTING[rng.index(INTERESTING.len())];
            }
            2 => {
                // A tag with a random field number and wire type.
                let field = [1u64, 2, 3, 9, 15, 50, 100000, 536870911][rng.index(8)];
                let tag = (field << 3) | rng.index(8) as u64;
                let mut enc = Vec::new();
                let mut v = tag;
                while v >= 0x80 {
                    enc.push((v as u8) | 0x80);
                    v >>= 7;
                }
                enc.push(v as u8);
                let at = rng.index(len + 1);
                input.splice(at..at, enc);
            }
            3 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(8)).min(len);
                input.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.index(len);
                let b = (a + 1 + rng.index(16)).min(len);
                let chunk = input[a..b].to_vec();
                let at = rng.index(input.len() + 1);
                input.splice(at..at, chunk);
            }
            5 => {
                let other = &seeds[rng.index(seeds.len())];
                if !other.is_empty() {
                    let a = rng.index(other.len());
                    let b = (a + 1 + rng.index(32)).min(other.len());
                    let at = rng.index(len + 1);
                    input.splice(at..at, other[a..b].iter().copied());
                }
            }
            6 if len > 0 => input.truncate(rng.index(len)),
            7 => {
                // A run of continuation bytes: overlong and unterminated varints.
                let at = rng.index(len + 1);
                let n = 1 + rng.index(11);
                input.splice(at..at, std::iter::repeat_n(0x80u8, n));
            }
            _ => {
                let at = rng.index(len + 1);
                input.insert(at, rng.next_u64() as u8);
            }
        }
    }
}
