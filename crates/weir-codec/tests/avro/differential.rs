//! fastavro (Python) writes random schemas and records; weir decodes them, and every value is
//! compared with what was written. The schemas nest records, arrays, maps, enums, fixed,
//! `["null", T]` unions in both orders and every logical type fastavro writes. Avro's Java
//! implementation then writes the same records again, its own way (sized blocks, its container
//! files), and weir decodes those too.

use std::path::{Path, PathBuf};
use std::process::Command;

use weir_codec::{
    avro_default_columns, block_head, AvroDecoder, AvroDecoderOptions, AvroSchema, ColumnSpec,
    ContainerCodec, ContainerHeader, Decoder, Frame, Framing,
};

use super::row_json;

/// The Python of the test command, with fastavro; `None` (and a notice) outside CI when it is
/// not set. In CI a missing fastavro fails the test: the check must not vanish quietly.
fn python() -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Ok(python) = std::env::var("WEIR_TEST_PYTHON") else {
        assert!(
            !ci,
            "WEIR_TEST_PYTHON must be set in CI (scripts/test.sh sets it)"
        );
        eprintln!(
            "NOTICE: the fastavro differential test skipped: WEIR_TEST_PYTHON is not set \
             (scripts/test.sh sets it)"
        );
        return None;
    };
    let ok = Command::new(&python)
        .args(["-c", "import fastavro, cramjam, zstandard"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{python} cannot import fastavro, cramjam and zstandard (scripts/test.sh installs them)"
    );
    Some(python)
}

/// Runs the generator into a fresh directory.
fn cases(python: &str, seed: u64, schemas: usize, records: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-avro-cases-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/avro/fastavro_cases.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(&dir)
        .args([seed.to_string(), schemas.to_string(), records.to_string()])
        .output()
        .expect("run fastavro_cases.py");
    assert!(
        out.status.success(),
        "fastavro_cases.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The length-prefixed messages of `i.bin`.
fn messages(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        out.push(&data[at + 4..at + 4 + n]);
        at += 4 + n;
    }
    out
}

fn decode_all(d: &mut AvroDecoder, msgs: &[&[u8]], what: &str) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    let mut take = |b: weir_codec::RecordBatch| {
        for r in 0..b.num_rows() {
            rows.push(row_json(&b, r));
        }
    };
    for (n, m) in msgs.iter().enumerate() {
        d.decode(m)
            .unwrap_or_else(|e| panic!("{what}: record {n} does not decode: {e}"));
        if let Some(b) = d.take_full_batch() {
            take(b);
        }
    }
    if let Some(b) = d.flush() {
        take(b);
    }
    rows
}

/// Every row of a container file, decoded with the plan of its header's schema; and its
/// number of blocks.
fn decode_container(
    file: &[u8],
    columns: &[ColumnSpec],
    what: &str,
) -> (Vec<serde_json::Value>, usize) {
    let header = ContainerHeader::parse(file)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .unwrap_or_else(|| panic!("{what}: the header is cut"));
    let options = AvroDecoderOptions {
        batch_size: 1 << 20,
        ..AvroDecoderOptions::default()
    };
    let mut d = AvroDecoder::new(&header.schema, columns, options).unwrap();
    let (mut at, mut blocks, mut data) = (header.len, 0, Vec::new());
    while at < file.len() {
        let Frame::Message { start, end, next } = Framing::AvroContainer.frame(file, at, true)
        else {
            panic!("{what}: no whole block at byte {at}");
        };
        assert_eq!(file[end..next], header.sync, "{what}: sync marker");
        let count = block_head(file, at).unwrap().unwrap().count;
        let block = match header.codec {
            ContainerCodec::Null => &file[start..end],
            codec => {
                codec
                    .uncompress(&file[start..end], &mut data, 1 << 30)
                    .unwrap_or_else(|e| panic!("{what} ({}): {e}", codec.name()));
                &data[..]
            }
        };
        let mut pos = 0;
        for v in 0..count {
            pos += d
                .decode_prefix(&block[pos..])
                .unwrap_or_else(|e| panic!("{what}: block {blocks}, value {v}: {e}"));
        }
        assert_eq!(pos, block.len(), "{what}: block {blocks} has bytes left");
        blocks += 1;
        at = next;
    }
    let mut rows = Vec::new();
    if let Some(b) = d.flush() {
        for r in 0..b.num_rows() {
            rows.push(row_json(&b, r));
        }
    }
    (rows, blocks)
}

/// Decodes `msgs` with every other of `columns` only (the others skipped): each column read
/// holds what `expected` says.
fn every_other_column_reads_the_same(
    schema: &AvroSchema,
    columns: &[ColumnSpec],
    msgs: &[&[u8]],
    expected: &[serde_json::Value],
    what: &str,
) {
    let options = AvroDecoderOptions {
        batch_size: 7,
        ..AvroDecoderOptions::default()
    };
    let some: Vec<ColumnSpec> = columns.iter().step_by(2).cloned().collect();
    let mut d = AvroDecoder::new(schema, &some, options).unwrap();
    let got = decode_all(&mut d, msgs, &format!("{what}, every other column"));
    for (r, (g, e)) in got.iter().zip(expected).enumerate() {
        for c in &some {
            assert_eq!(
                g[&c.name], e[&c.name],
                "{what}, column {}, record {r}",
                c.name
            );
        }
    }
}

/// The records of case `i` as the generator wrote them down (`i.jsonl`).
fn expected_rows(dir: &Path, i: usize) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{i}.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn fastavro_records_decode_value_for_value() {
    let Some(python) = python() else { return };
    const SCHEMAS: usize = 60;
    let dir = cases(&python, 20261127, SCHEMAS, 80);
    let mut values = 0usize;
    let mut blocks = 0usize;
    for i in 0..SCHEMAS {
        let text = std::fs::read_to_string(dir.join(format!("{i}.avsc"))).unwrap();
        let schema = AvroSchema::parse(&text).unwrap_or_else(|e| panic!("schema {i}: {e}"));
        // The canonical form and its fingerprint agree with fastavro's.
        let meta = std::fs::read_to_string(dir.join(format!("{i}.meta"))).unwrap();
        let mut lines = meta.lines();
        assert_eq!(schema.canonical_form(), lines.next().unwrap(), "schema {i}");
        assert_eq!(
            super::hex(&schema.fingerprint().to_le_bytes()),
            lines.next().unwrap(),
            "fingerprint of schema {i}"
        );

        let data = std::fs::read(dir.join(format!("{i}.bin"))).unwrap();
        let msgs = messages(&data);
        let expected = expected_rows(&dir, i);
        let columns = avro_default_columns(&schema).unwrap_or_else(|e| panic!("schema {i}: {e}"));
        // Small batches, so rows cross batch boundaries.
        let options = AvroDecoderOptions {
            batch_size: 7,
            ..AvroDecoderOptions::default()
        };
        let mut d = AvroDecoder::new(&schema, &columns, options)
            .unwrap_or_else(|e| panic!("schema {i}: {e}"));
        let got = decode_all(&mut d, &msgs, &format!("schema {i}"));
        assert_eq!(got.len(), expected.len());
        for (r, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "schema {i} ({text}), record {r}");
        }
        values += got.len() * columns.len();

        // The same records in a container file written by fastavro, split into values by the
        // decoder, block after block.
        let file = std::fs::read(dir.join(format!("{i}.avro"))).unwrap();
        let (got, file_blocks) = decode_container(&file, &columns, &format!("schema {i}"));
        assert_eq!(got.len(), expected.len(), "schema {i}: container rows");
        for (r, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "schema {i} container file, record {r}");
        }
        blocks += file_blocks;

        // Every other column only: the others are skipped, the rest reads the same.
        every_other_column_reads_the_same(
            &schema,
            &columns,
            &msgs,
            &expected,
            &format!("schema {i}"),
        );
    }
    eprintln!(
        "{SCHEMAS} schemas, {values} top-level values compared with fastavro's; {blocks} \
         container blocks"
    );
    assert!(
        blocks > 2 * SCHEMAS,
        "the container files have {blocks} blocks"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The class path of Avro's Java implementation (`scripts/avro_java.sh` fetches it); `None` (and a
/// notice) outside CI when it is not set. In CI a missing one fails the test.
fn avro_java() -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Ok(lib) = std::env::var("WEIR_TEST_AVRO_JAVA") else {
        assert!(
            !ci,
            "WEIR_TEST_AVRO_JAVA must be set in CI (scripts/test.sh sets it)"
        );
        eprintln!(
            "NOTICE: the Java Avro differential test skipped: WEIR_TEST_AVRO_JAVA is not set \
             (scripts/avro_java.sh fetches it)"
        );
        return None;
    };
    Some(format!("{lib}/*"))
}

#[test]
fn java_avro_rewrites_decode_value_for_value() {
    let Some(python) = python() else { return };
    let Some(classpath) = avro_java() else { return };
    const SCHEMAS: usize = 40;
    let dir = cases(&python, 20261128, SCHEMAS, 60);
    // Java reads fastavro's container files and writes every record again, as a container file
    // of its own and with its blocking encoder.
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/avro-java/AvroJava.java");
    let out = Command::new("java")
        .args(["-cp", &classpath])
        .arg(&program)
        .arg("rewrite")
        .arg(&dir)
        .arg(SCHEMAS.to_string())
        .output()
        .expect("run java (Java 17 or later runs AvroJava.java)");
    assert!(
        out.status.success(),
        "AvroJava.java failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut values, mut blocks, mut reencoded) = (0usize, 0usize, 0usize);
    for i in 0..SCHEMAS {
        let text = std::fs::read_to_string(dir.join(format!("{i}.avsc"))).unwrap();
        let schema = AvroSchema::parse(&text).unwrap_or_else(|e| panic!("schema {i}: {e}"));
        let expected = expected_rows(&dir, i);
        let columns = avro_default_columns(&schema).unwrap_or_else(|e| panic!("schema {i}: {e}"));

        // Java's records alone: arrays and maps in blocks with byte sizes.
        let fastavro_bin = std::fs::read(dir.join(format!("{i}.bin"))).unwrap();
        let java_bin = std::fs::read(dir.join(format!("{i}.java.bin"))).unwrap();
        let msgs = messages(&java_bin);
        reencoded += msgs
            .iter()
            .zip(messages(&fastavro_bin))
            .filter(|(j, f)| **j != *f)
            .count();
        let options = AvroDecoderOptions {
            batch_size: 7,
            ..AvroDecoderOptions::default()
        };
        let mut d = AvroDecoder::new(&schema, &columns, options).unwrap();
        let got = decode_all(&mut d, &msgs, &format!("schema {i}, Java's encoding"));
        assert_eq!(got.len(), expected.len(), "schema {i}: Java's records");
        for (r, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "schema {i} ({text}), Java's record {r}");
        }
        values += got.len() * columns.len();
        // Skipping every other column passes over the same blocks.
        every_other_column_reads_the_same(
            &schema,
            &columns,
            &msgs,
            &expected,
            &format!("schema {i}, Java's"),
        );

        // Java's container file, with its header's schema (as Java wrote it back).
        let file = std::fs::read(dir.join(format!("{i}.java.avro"))).unwrap();
        let (got, file_blocks) = decode_container(&file, &columns, &format!("schema {i}, Java"));
        assert_eq!(
            got.len(),
            expected.len(),
            "schema {i}: Java's container rows"
        );
        for (r, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "schema {i}, Java's container file, record {r}");
        }
        blocks += file_blocks;
    }
    eprintln!(
        "{SCHEMAS} schemas, {values} top-level values compared; {reencoded} records Java encoded \
         otherwise than fastavro; {blocks} blocks in Java's container files"
    );
    // The blocking encoder must have exercised the sized blocks, and the files many blocks.
    assert!(
        reencoded > SCHEMAS,
        "only {reencoded} records encoded otherwise"
    );
    assert!(
        blocks > 4 * SCHEMAS,
        "Java's container files have {blocks} blocks"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
