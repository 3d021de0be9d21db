//! Avro object container files on the file connector, written by fastavro: each file's header
//! gives its writer's schema (resolved against the source's), blocks in every codec, several
//! readers on one file, bad blocks under `'on.error'`, a source with state resuming after
//! blocks appended to a file it read, and `weir gen`'s container files read by fastavro and by
//! Avro's Java implementation.

use std::path::Path;
use std::process::Command;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use weir::{Engine, EngineOptions};

/// The Python of the test command, with fastavro; `None` (and a notice) outside CI when it is
/// not set. In CI a missing one fails the test.
fn python() -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Ok(python) = std::env::var("WEIR_TEST_PYTHON") else {
        assert!(
            !ci,
            "WEIR_TEST_PYTHON must be set in CI (scripts/test.sh sets it)"
        );
        eprintln!(
            "NOTICE: the Avro container file tests skipped: WEIR_TEST_PYTHON is not set \
             (scripts/test.sh sets it)"
        );
        return None;
    };
    Some(python)
}

/// `AvroJava.java quotes <path>` (Avro's Java implementation reading a file of quotes): its
/// output, or `None` (and a notice) outside CI when `WEIR_TEST_AVRO_JAVA` is not set.
fn java_quotes(path: &Path) -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Ok(lib) = std::env::var("WEIR_TEST_AVRO_JAVA") else {
        assert!(
            !ci,
            "WEIR_TEST_AVRO_JAVA must be set in CI (scripts/test.sh sets it)"
        );
        eprintln!(
            "NOTICE: Java's read skipped: WEIR_TEST_AVRO_JAVA is not set (scripts/avro_java.sh)"
        );
        return None;
    };
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/avro-java/AvroJava.java");
    let out = Command::new("java")
        .args(["-cp", &format!("{lib}/*")])
        .arg(&program)
        .arg("quotes")
        .arg(path)
        .output()
        .expect("run java (Java 17 or later runs AvroJava.java)");
    assert!(
        out.status.success(),
        "AvroJava.java quotes {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Runs `avro_files.py` with `args`.
fn fastavro(python: &str, args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/avro_files.py");
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .expect("run avro_files.py");
    assert!(
        out.status.success(),
        "avro_files.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write(python: &str, path: &Path, schema: &str, codec: &str, first: u64, count: u64) {
    let (first, count) = (first.to_string(), count.to_string());
    let path = path.to_str().unwrap();
    fastavro(python, &["write", path, schema, codec, &first, &count]);
}

/// What the records `first..first + count` of `avro_files.py` add up to: rows, sum of ids, sum
/// of amounts, rows of kind A.
fn expected(ranges: &[(u64, u64)]) -> (i64, i64, f64, i64) {
    let ids = || ranges.iter().flat_map(|&(f, n)| f..f + n);
    (
        ids().count() as i64,
        ids().sum::<u64>() as i64,
        ids().map(|i| i as f64 / 2.0).sum(),
        ids().filter(|i| i % 3 == 0).count() as i64,
    )
}

const TOTALS: &str = "SELECT count(*), sum(id), sum(amount), \
                      sum(CASE WHEN kind = 'A' THEN 1 ELSE 0 END) FROM t;";

fn totals(b: &[RecordBatch]) -> (i64, i64, f64, i64) {
    let b = &b[0];
    (
        b.column(0).as_primitive::<Int64Type>().value(0),
        b.column(1).as_primitive::<Int64Type>().value(0),
        b.column(2).as_primitive::<Float64Type>().value(0),
        b.column(3).as_primitive::<Int64Type>().value(0),
    )
}

fn engine(partitions: usize) -> Engine {
    Engine::new(EngineOptions {
        partitions,
        ..EngineOptions::default()
    })
}

/// Four files of three writer schemas, one per codec; the last is large enough (about 2 MiB)
/// to be read in several ranges by several readers.
fn files(python: &str, dir: &Path) -> Vec<(u64, u64)> {
    write(python, &dir.join("1.avro"), "v1", "null", 0, 3000);
    write(python, &dir.join("2.avro"), "v2", "deflate", 3000, 3000);
    write(python, &dir.join("3.avro"), "v0", "snappy", 6000, 3000);
    write(
        python,
        &dir.join("4.avro"),
        "v1",
        "zstandard",
        9000,
        200_000,
    );
    vec![(0, 3000), (3000, 3000), (6000, 3000), (9000, 200_000)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_files_read_each_with_its_header_schema() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ranges = files(&python, dir.path());
    let (rows, ids, amounts, a) = expected(&ranges);
    let glob = format!("{}/*.avro", dir.path().display());

    // No schema and no columns: 'encoding' = 'avro' finds container files, and the first
    // file's header gives the columns. The v2 file's extra field is skipped; the v0 file's
    // int, float and enum of another symbol order resolve into them.
    for partitions in [1, 4] {
        let got = engine(partitions)
            .query(&format!(
                "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{glob}', \
                 'encoding' = 'avro'); {TOTALS}"
            ))
            .await
            .unwrap();
        assert_eq!(
            totals(&got),
            (rows, ids, amounts, a),
            "{partitions} readers"
        );
    }

    // The directory, with an empty file first and an empty `_SUCCESS` (as Spark leaves): the
    // first file with a header gives the columns, and empty files hold no rows.
    std::fs::write(dir.path().join("0-empty.avro"), b"").unwrap();
    std::fs::write(dir.path().join("_SUCCESS"), b"").unwrap();
    let got = engine(2)
        .query(&format!(
            "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro'); \
             {TOTALS}",
            dir.path().display()
        ))
        .await
        .unwrap();
    assert_eq!(totals(&got), (rows, ids, amounts, a), "the directory");

    // The v2 schema as the reader's: the v1 and v0 files lack `note`, which reads as its
    // default (null); only the v2 file's odd ids have one.
    let v2 = r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "note", "type": ["null", "string"], "default": null}]}"#;
    let got = engine(2)
        .query(&format!(
            "CREATE SOURCE t (id BIGINT, note VARCHAR) WITH ('connector' = 'file', \
             'path' = '{glob}', 'framing' = 'avro-container', 'encoding' = 'avro', \
             'avro.schema' = '{v2}');
             SELECT count(*), count(note), min(note) FROM t;"
        ))
        .await
        .unwrap();
    let b = &got[0];
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), rows);
    assert_eq!(b.column(1).as_primitive::<Int64Type>().value(0), 1500);
    assert_eq!(b.column(2).as_string::<i32>().value(0), "note3001");

    // A file whose schema the columns cannot be read from (a double into REAL; the query
    // reads `amount`, so the scan does): each of its blocks is a bad message under
    // 'on.error'; the other file reads.
    let v0 = r#"{"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "int"}, {"name": "amount", "type": "float"}]}"#;
    let got = engine(2)
        .query(&format!(
            "CREATE SOURCE t (id BIGINT, amount REAL) WITH ('connector' = 'file', \
             'path' = '{}/[34].avro', 'encoding' = 'avro', 'avro.schema' = '{v0}', \
             'on.error' = 'skip');
             SELECT count(*), sum(id), sum(amount) FROM t;",
            dir.path().display()
        ))
        .await
        .unwrap();
    let b = &got[0];
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 3000);
    assert_eq!(
        b.column(1).as_primitive::<Int64Type>().value(0),
        (6000..9000).sum::<i64>()
    );

    // A file that is no container file: a clear error at CREATE SOURCE.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("x.avro"), b"not avro at all").unwrap();
    let err = engine(1)
        .query(&format!(
            "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{}', \
             'framing' = 'avro-container', 'encoding' = 'avro');",
            other.display()
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("x.avro") && err.contains("container magic"),
        "{err}"
    );
    let err = engine(1)
        .query(&format!(
            "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{glob}', \
             'framing' = 'avro-container', 'encoding' = 'json');"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs 'encoding' = 'avro'"), "{err}");
}

/// The byte ranges of a container file's blocks: (block start, data start, data end, count).
fn blocks(file: &[u8]) -> Vec<(usize, usize, usize, u64)> {
    let header = weir_codec::ContainerHeader::parse(file).unwrap().unwrap();
    let mut at = header.len;
    let mut out = Vec::new();
    while at < file.len() {
        let weir_codec::Frame::Message { start, end, next } =
            weir_codec::Framing::AvroContainer.frame(file, at, true)
        else {
            panic!("no block at {at}");
        };
        let count = weir_codec::block_head(file, at).unwrap().unwrap().count;
        out.push((at, start, end, count));
        at = next;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_container_block_is_one_bad_message_and_the_rest_reads() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.avro");
    write(&python, &path, "v1", "null", 0, 3000);
    let mut file = std::fs::read(&path).unwrap();
    let b = blocks(&file);
    assert!(b.len() > 4, "{} blocks", b.len());
    // Block 1: its sync marker is wrong. Block 3: its first value's id is a varint of 11 bytes.
    file[b[1].2] ^= 0xFF;
    file[b[3].1..b[3].1 + 11].fill(0xFF);
    std::fs::write(&path, &file).unwrap();
    let dead = dir.path().join("dead.jsonl");
    let source = |policy: &str| {
        let letters = match policy {
            "dead_letter" => format!(", 'dead_letter.path' = '{}'", dead.display()),
            _ => String::new(),
        };
        format!(
            "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', \
             'on.error' = '{policy}'{letters}); {TOTALS}",
            path.display()
        )
    };
    let err = engine(1)
        .query(&source("fail"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1.avro") && err.contains(&format!("byte {}", b[1].0)),
        "{err}"
    );
    assert!(err.contains("sync marker"), "{err}");

    // Skipped: every row but those of the two bad blocks.
    let kept: Vec<(u64, u64)> = {
        let mut first = 0;
        let mut kept = Vec::new();
        for (i, &(_, _, _, count)) in b.iter().enumerate() {
            if i != 1 && i != 3 {
                kept.push((first, count));
            }
            first += count;
        }
        kept
    };
    let got = engine(2).query(&source("skip")).await.unwrap();
    assert_eq!(totals(&got), expected(&kept));

    // Dead letters: one per bad block, naming the value that failed.
    engine(1).query(&source("dead_letter")).await.unwrap();
    let dead = std::fs::read_to_string(&dead).unwrap();
    let lines: Vec<&str> = dead.lines().collect();
    assert_eq!(lines.len(), 2, "{dead}");
    assert!(lines[0].contains("sync marker"), "{}", lines[0]);
    assert!(
        lines[1].contains(&format!("\"offset\":{}", b[3].0))
            && lines[1].contains("value 0 of the block's")
            && lines[1].contains("varint"),
        "{}",
        lines[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_with_state_resumes_after_blocks_appended_to_a_container_file() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.avro");
    let state = dir.path().join("state");
    write(&python, &path, "v2", "deflate", 0, 5000);
    let script = format!(
        "CREATE SOURCE t WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', \
         'state.dir' = '{}'); {TOTALS}",
        path.display(),
        state.display()
    );
    let got = engine(2).query(&script).await.unwrap();
    assert_eq!(totals(&got), expected(&[(0, 5000)]));
    // Blocks appended (ids 4000..6000, some seen before: no dedup here, so they count): the
    // second run starts at the first new block, neither at the header nor inside a block.
    fastavro(&python, &["append", path.to_str().unwrap(), "4000", "2000"]);
    let got = engine(2).query(&script).await.unwrap();
    assert_eq!(totals(&got), expected(&[(4000, 2000)]));
    // Nothing new: nothing read.
    let got = engine(2).query(&script).await.unwrap();
    assert_eq!(totals(&got).0, 0);
}

/// `weir gen --framing avro-container --compression C` writes files that fastavro and Avro's
/// Java implementation read with the codec named in their header, holding the same quotes
/// whatever the codec, and weir reads them back to the same totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gen_writes_container_files_in_every_codec_that_fastavro_reads() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/avro_files.py");
    let mut sizes = Vec::new();
    let mut seen = None;
    for (compression, codec) in [
        ("none", "null"),
        ("deflate", "deflate"),
        ("snappy", "snappy"),
        ("zstd", "zstandard"),
    ] {
        let path = dir.path().join(format!("q-{compression}.avro"));
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args([
                "gen",
                "quotes",
                "--format",
                "avro",
                "--framing",
                "avro-container",
            ])
            .args([
                "--count",
                "30000",
                "--seed",
                "7",
                "--compression",
                compression,
            ])
            .arg("--out")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "weir gen: {out:?}");
        sizes.push(std::fs::metadata(&path).unwrap().len());
        let read = Command::new(&python)
            .arg(&script)
            .arg("quotes")
            .arg(&path)
            .output()
            .unwrap();
        assert!(read.status.success(), "{read:?}");
        let text = String::from_utf8(read.stdout).unwrap();
        let fields: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(fields[0], codec, "{text}");
        assert_eq!(fields[1], "30000", "{text}");
        let sums = (
            fields[2].parse::<i64>().unwrap(),
            fields[3].parse::<i64>().unwrap(),
        );
        assert_eq!(
            *seen.get_or_insert(sums),
            sums,
            "{compression}: other quotes"
        );
        // Avro's Java implementation reads the same file to the same codec, count and sums.
        if let Some(java) = java_quotes(&path) {
            assert_eq!(
                java.trim(),
                text.trim(),
                "{compression}: Java read otherwise"
            );
        }
        let got = engine(2)
            .query(&format!(
                "CREATE SOURCE q WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro'); \
                 SELECT count(*), sum(base['sequence_number']), sum(bid_size) FROM q;",
                path.display()
            ))
            .await
            .unwrap();
        let col = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0);
        assert_eq!((col(0), (col(1), col(2))), (30000, sums), "{compression}");
    }
    // Each codec makes the file smaller than the uncompressed one.
    assert!(
        sizes[1..].iter().all(|&s| s < sizes[0] * 3 / 4),
        "{sizes:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "gen",
            "quotes",
            "--count",
            "10",
            "--compression",
            "zstd",
            "--out",
        ])
        .arg(dir.path().join("x.bin"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("--framing avro-container"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_files_on_object_storage_read_as_local_ones() {
    use object_store::{ObjectStoreExt as _, PutPayload};
    let Some(python) = python() else { return };
    let Some((endpoint, key, secret, bucket)) = crate::common::s3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ranges = files(&python, dir.path());
    let store = crate::common::s3_store(&endpoint, &key, &secret, &bucket);
    let prefix = format!("avro-files-{}", std::process::id());
    for name in ["1.avro", "2.avro", "3.avro", "4.avro"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        store
            .put(
                &object_store::path::Path::from(format!("{prefix}/{name}")),
                PutPayload::from(bytes),
            )
            .await
            .unwrap();
    }
    let got = engine(2)
        .query(&format!(
            "CREATE SOURCE t WITH ('connector' = 'file', \
             'path' = 's3://{bucket}/{prefix}/*.avro', 'encoding' = 'avro', \
             's3.endpoint' = '{endpoint}', 's3.region' = 'us-east-1', \
             's3.access.key.id' = '{key}', 's3.secret.access.key' = '{secret}'); {TOTALS}"
        ))
        .await
        .unwrap();
    assert_eq!(totals(&got), expected(&ranges));
}
