//! The engine end to end on the file connector: the options-quotes statement, queries, sinks, error
//! policies, metadata columns, Confluent framing and follow mode. Reference values come from the
//! quote generator itself, never from the decoder under test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};
use weir::{Engine, EngineOptions};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator};

use crate::common::{rows, write_schema, Collect};

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        write_schema(dir.path());
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn quotes(&self, name: &str, n: u64, seed: u64, framing: Framing) -> PathBuf {
        let p = self.path(name);
        crate::common::write_quotes(&p, n, seed, QuoteFormat::Protobuf, framing);
        p
    }

    fn source(&self, name: &str, columns: &str, path: &Path, extra: &str) -> String {
        format!(
            "CREATE SOURCE {name} {columns} WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'protobuf', \
             'message' = 'stocks.QuoteNBBO', 'location' = '{}'{extra});",
            path.display(),
            self.path("stocks.pb").display()
        )
    }
}

fn engine(partitions: usize) -> Engine {
    Engine::new(EngineOptions {
        partitions,
        batch_size: 1000,
        ..EngineOptions::default()
    })
}

async fn run(engine: &Engine, script: &str) -> Result<Vec<RecordBatch>, String> {
    let mut out = Collect::default();
    engine
        .run_script(script, &mut out)
        .await
        .map_err(|e| e.to_string())?;
    Ok(out.batches)
}

/// The rows of a Parquet file, read whole (a file without its footer fails here).
fn parquet_rows(path: &Path) -> usize {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap()
    .map(|b| b.unwrap().num_rows())
    .sum()
}

/// Per ticker: count, min bid, max ask, sum of bid sizes, straight from the generator.
fn reference(n: u64, seed: u64) -> HashMap<String, (i64, f64, f64, u64)> {
    let mut g = QuoteGenerator::new(seed);
    let mut m: HashMap<String, (i64, f64, f64, u64)> = HashMap::new();
    for _ in 0..n {
        let q = g.next_quote();
        let e = m
            .entry(q.ticker.to_string())
            .or_insert((0, f64::MAX, f64::MIN, 0));
        e.0 += 1;
        e.1 = e.1.min(q.bid_price);
        e.2 = e.2.max(q.ask_price);
        e.3 += u64::from(q.bid_size);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_options_quotes_statement_and_group_by_match_the_generator() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 30_000, 11, Framing::Varint);
    // The options-quotes statement verbatim, with the file connector's 'path' added.
    let script = format!(
        "CREATE SOURCE opra_quotes (
    ticker VARCHAR,
    timestamp TIMESTAMP,
    bid_price DOUBLE,
    ask_price DOUBLE,
    ...
) WITH (
    'connector' = 'file',
    'path' = '{}',
    'encoding'  = 'protobuf',
    'message'   = 'stocks.QuoteNBBO',
    'location'  = '{}'
);
SELECT ticker, count(*) AS n, min(bid_price) AS lo, max(ask_price) AS hi, sum(bid_size) AS size
FROM opra_quotes GROUP BY ticker;",
        data.display(),
        fx.path("stocks.pb").display()
    );
    for partitions in [1, 2, 3] {
        let e = engine(partitions);
        let got = run(&e, &script).await.unwrap();
        let want = reference(30_000, 11);
        assert_eq!(rows(&got), want.len(), "partitions {partitions}");
        for b in &got {
            let t = b.column(0).as_string::<i32>();
            let n = b.column(1).as_primitive::<Int64Type>();
            let lo = b.column(2).as_primitive::<Float64Type>();
            let hi = b.column(3).as_primitive::<Float64Type>();
            let size = b.column(4).as_primitive::<arrow::datatypes::UInt64Type>();
            for i in 0..b.num_rows() {
                let w = want[t.value(i)];
                assert_eq!((n.value(i), lo.value(i), hi.value(i), size.value(i)), w);
            }
        }
        let r = &e.source_reports()[0];
        assert_eq!((r.messages, r.decoded, r.skipped), (30_000, 30_000, 0));
    }
    // The schema: declared columns first (ticker found in base.ticker), then the rest of the
    // message's fields by the default mapping ('...').
    let e = engine(1);
    run(&e, &script).await.unwrap();
    let schema = e
        .session()
        .table("opra_quotes")
        .await
        .unwrap()
        .schema()
        .as_arrow()
        .clone();
    let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "ticker",
            "timestamp",
            "bid_price",
            "ask_price",
            "base",
            "bid_size",
            "bid_exchange",
            "ask_size",
            "ask_exchange",
            "conditions",
            "indicators",
            "tape"
        ]
    );
    assert_eq!(
        schema.field(1).data_type(),
        &DataType::Timestamp(TimeUnit::Nanosecond, None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_use_all_of_datafusion_and_projection_reaches_the_decoder() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 5_000, 5, Framing::U32Be);
    let e = engine(2);
    let script = format!(
        "{}
CREATE TABLE tapes AS VALUES (1, 'A'), (2, 'B'), (3, 'C');
SELECT q.tape, t.column2 AS name, count(*) AS n
  FROM q JOIN tapes t ON q.tape = t.column1
 WHERE q.bid_price > 1.0 GROUP BY q.tape, t.column2 ORDER BY q.tape;
SELECT seq, row_number() OVER (PARTITION BY ticker ORDER BY seq) AS k FROM q ORDER BY seq LIMIT 5;",
        fx.source(
            "q",
            "(ticker VARCHAR, seq BIGINT, bid_price DOUBLE, tape INT UNSIGNED)",
            &data,
            ", 'framing' = 'u32be', 'fields.seq' = 'base.sequence_number'"
        )
    );
    let got = run(&e, &script).await.unwrap();
    // Reference from the generator.
    let mut g = QuoteGenerator::new(5);
    let mut per_tape = [0i64; 4];
    let mut first_seq = Vec::new();
    for _ in 0..5_000 {
        let q = g.next_quote();
        if q.bid_price > 1.0 {
            per_tape[q.tape as usize] += 1;
        }
        if first_seq.len() < 5 {
            first_seq.push(q.sequence_number);
        }
    }
    let joined = &got[..got.len() - 1];
    let counts: Vec<i64> = joined
        .iter()
        .flat_map(|b| b.column(2).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(counts, per_tape[1..].to_vec());
    let last = got.last().unwrap();
    let seqs = last.column(0).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(seqs, first_seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_fail_skip_or_go_to_the_dead_letter_file() {
    let fx = Fixture::new();
    // Three good quotes, one truncated message (a string that runs past its end), one good.
    let mut bytes = Vec::new();
    QuoteGenerator::new(1)
        .write(&mut bytes, 3, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    let bad_at = bytes.len();
    bytes.extend_from_slice(&[3, 0x0a, 0x05, b'x']);
    QuoteGenerator::new(2)
        .write(&mut bytes, 1, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    let data = fx.path("bad.bin");
    std::fs::write(&data, &bytes).unwrap();

    let e = engine(1);
    let err = run(
        &e,
        &format!("{}\nSELECT count(*) FROM q;", fx.source("q", "", &data, "")),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains(&format!("{} at byte {bad_at}", data.display())),
        "{err}"
    );
    assert!(err.contains("runs past the end"), "{err}");
    assert!(err.contains("'on.error'"), "{err}");

    let e = engine(1);
    let got = run(
        &e,
        &format!(
            "{}\nSELECT count(*) FROM q;",
            fx.source("q", "", &data, ", 'on.error' = 'skip'")
        ),
    )
    .await
    .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 4);
    let r = &e.source_reports()[0];
    assert_eq!(
        (r.messages, r.decoded, r.skipped, r.dead_lettered),
        (5, 4, 1, 0)
    );

    let dl = fx.path("dead.jsonl");
    let e = engine(1);
    let got = run(
        &e,
        &format!(
            "{}\nSELECT count(*) FROM q;",
            fx.source(
                "q",
                "",
                &data,
                &format!(
                    ", 'on.error' = 'dead_letter', 'dead_letter.path' = '{}'",
                    dl.display()
                )
            )
        ),
    )
    .await
    .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 4);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&dl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["offset"], bad_at as u64);
    assert_eq!(lines[0]["message_base64"], "CgV4");
    assert!(
        lines[0]["error"].as_str().unwrap().contains("at byte 1"),
        "{}",
        lines[0]
    );
    assert_eq!(e.source_reports()[0].dead_lettered, 1);

    // A file that ends inside a frame is a bad message too.
    std::fs::write(&data, &bytes[..bytes.len() - 3]).unwrap();
    let e = engine(1);
    let got = run(
        &e,
        &format!(
            "{}\nSELECT count(*) FROM q;",
            fx.source("q", "", &data, ", 'on.error' = 'skip'")
        ),
    )
    .await
    .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 3);
    assert_eq!(e.source_reports()[0].skipped, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_columns_confluent_framing_and_timestamp_unit() {
    let fx = Fixture::new();
    // Confluent framing: magic 0, schema id 42, message-index list [0] as a single 0 byte.
    let mut plain = Vec::new();
    QuoteGenerator::new(9)
        .write(&mut plain, 20, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    let mut framed = Vec::new();
    let mut at = 0;
    let mut offsets = Vec::new();
    while at < plain.len() {
        let len = plain[at] as usize; // quotes are < 128 bytes: one-byte varint
        offsets.push(framed.len() as i64);
        framed.push((len + 6) as u8);
        framed.extend_from_slice(&[0, 0, 0, 0, 42, 0]);
        framed.extend_from_slice(&plain[at + 1..at + 1 + len]);
        at += 1 + len;
    }
    let data = fx.path("confluent.bin");
    std::fs::write(&data, &framed).unwrap();
    let e = engine(1);
    let got = run(
        &e,
        &format!(
            "{}\nSELECT ticker, ts, _weir_offset, f FROM q ORDER BY _weir_offset;",
            fx.source(
                "q",
                "(ticker VARCHAR, ts TIMESTAMP) INCLUDE offset INCLUDE file AS f",
                &data,
                ", 'confluent.wire' = 'true', 'fields.ts' = 'base.timestamp', 'timestamp.unit' = 'micros'"
            )
        ),
    )
    .await
    .unwrap();
    let b = arrow::compute::concat_batches(&got[0].schema(), &got).unwrap();
    assert_eq!(b.num_rows(), 20);
    assert_eq!(
        b.schema().field(1).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
    let offs = b.column(2).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(offs, offsets);
    assert!(b
        .column(3)
        .as_string::<i32>()
        .value(0)
        .ends_with("confluent.bin"));
    let mut g = QuoteGenerator::new(9);
    let q = g.next_quote();
    assert_eq!(b.column(0).as_string::<i32>().value(0), q.ticker);
    let ts = b
        .column(1)
        .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    assert_eq!(
        ts.value(0),
        q.timestamp,
        "the raw int64 read in the unit 'timestamp.unit' names"
    );

    // Without 'confluent.wire' the same bytes fail to decode (the header is not protobuf).
    let e = engine(1);
    let err = run(
        &e,
        &format!(
            "{}\nSELECT count(*) FROM q;",
            fx.source("q", "(ticker VARCHAR)", &data, "")
        ),
    )
    .await
    .unwrap_err();
    assert!(err.contains("at byte 0"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_write_parquet_ipc_and_take_inserts() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 3_000, 4, Framing::Varint);
    let pq = fx.path("out/cheap.parquet");
    let ipc = fx.path("all.arrow");
    let e = engine(2);
    let script = format!(
        "{}
CREATE SINK cheap FROM (SELECT ticker, bid_price FROM q WHERE bid_price < 1.0) WITH ('connector' = 'parquet', 'path' = '{}');
CREATE SINK everything WITH ('connector' = 'ipc', 'path' = '{}');
INSERT INTO everything SELECT ticker, bid_size FROM q;
INSERT INTO everything SELECT ticker, bid_size FROM q WHERE tape = 1;",
        fx.source("q", "(ticker VARCHAR, bid_price DOUBLE, bid_size INT UNSIGNED, tape INT UNSIGNED)", &data, ""),
        pq.display(),
        ipc.display()
    );
    run(&e, &script).await.unwrap();
    let reports = e.finish().await.unwrap();
    let mut g = QuoteGenerator::new(4);
    let (mut cheap, mut tape1) = (0u64, 0u64);
    for _ in 0..3_000 {
        let q = g.next_quote();
        cheap += u64::from(q.bid_price < 1.0);
        tape1 += u64::from(q.tape == 1);
    }
    let by_name: HashMap<_, _> = reports.iter().map(|r| (r.name.as_str(), r.rows)).collect();
    assert_eq!(by_name["cheap"], cheap);
    assert_eq!(by_name["everything"], 3_000 + tape1);
    assert_eq!(parquet_rows(&pq) as u64, cheap);
    let read: usize =
        arrow::ipc::reader::FileReader::try_new(std::fs::File::open(&ipc).unwrap(), None)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
    assert_eq!(read as u64, 3_000 + tape1);

    // A second INSERT of another shape is refused.
    let err = run(&e, "INSERT INTO everything SELECT bid_size FROM q;")
        .await
        .unwrap_err();
    assert!(
        err.contains("another shape") || err.contains("opened with"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_stops_with_one_clear_message() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 10, 1, Framing::Varint);
    let cases: Vec<(String, &str)> = vec![
        (fx.source("q", "", &fx.path("missing.bin"), ""), "missing.bin"),
        (fx.source("q", "", &data, "").replace("'protobuf'", "'protobuff'"), "unknown encoding 'protobuff'; registered encodings with a decoder: avro, json, protobuf, raw"),
        (fx.source("q", "", &data, "").replace("stocks.QuoteNBBO", "stocks.Quote"), "message 'stocks.Quote' is not in the schema"),
        (fx.source("q", "(bid_price VARCHAR)", &data, ""), "column 'bid_price': field 'stocks.QuoteNBBO.bid_price' has protobuf type double, which cannot be read as Arrow Utf8"),
        (fx.source("q", "(nope INT)", &data, ""), "no field 'nope'"),
        (fx.source("q", "", &data, ", 'mesage' = 'x'"), "unknown option(s) 'mesage'"),
        (fx.source("q", "", &data, ", 'on.error' = 'ignore'"), "option 'on.error' = 'ignore': expected one of 'fail', 'skip', 'dead_letter'"),
        (fx.source("q", "", &data, ", 'framing' = 'csv'"), "option 'framing' = 'csv': expected one of 'varint', 'u32be', 'lines'"),
        (fx.source("q", "", &data, "").replace("'file'", "'ftp'"), "option 'connector' = 'ftp': expected one of 'file', 'kafka'"),
        (fx.source("q", "", &data, "").replace(&fx.path("stocks.pb").display().to_string(), "/no/such.proto"), "/no/such.proto"),
        ("SELECT 1;\nSELEC 2;".into(), "line 2"),
        ("SELECT 1;\nCREATE SOURCE s (a INT b) WITH ('x' = 'y');".into(), "line 2, column 24"),
        ("SELECT nope FROM nothing;".into(), "nothing"),
    ];
    for (script, want) in cases {
        let e = engine(1);
        let err = run(&e, &script).await.unwrap_err();
        assert!(
            err.contains(want),
            "script: {script}\nerror: {err}\nwanted: {want}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_mode_writes_appended_messages_until_stopped() {
    let fx = Fixture::new();
    let dir = fx.path("incoming");
    std::fs::create_dir(&dir).unwrap();
    let first = dir.join("a.bin");
    let mut bytes = Vec::new();
    QuoteGenerator::new(1)
        .write(&mut bytes, 100, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    // Half of the last message is written now; the rest comes later.
    let cut = bytes.len() - 10;
    std::fs::write(&first, &bytes[..cut]).unwrap();
    let out = fx.path("live.arrows");
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 1,
        batch_size: 10,
        ..EngineOptions::default()
    });
    let script = format!(
        "{}\nCREATE SINK live FROM (SELECT ticker, bid_price FROM q WHERE bid_price >= 0) WITH ('connector' = 'ipc', 'ipc.format' = 'stream', 'path' = '{}');",
        fx.source("q", "(ticker VARCHAR, bid_price DOUBLE)", &dir, ""),
        out.display()
    );
    run(&e, &script).await.unwrap();
    assert!(e.pipelines_running());
    let wait_for = |n: u64| {
        let stats = e.source_stats_handle();
        async move {
            for _ in 0..200 {
                if stats.snapshot()[0].decoded >= n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("never reached {n} messages: {:?}", stats.snapshot());
        }
    };
    wait_for(99).await;
    // Complete the file, then add a second one.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&first)
            .unwrap();
        f.write_all(&bytes[cut..]).unwrap();
    }
    let mut more = Vec::new();
    QuoteGenerator::new(2)
        .write(&mut more, 50, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    std::fs::write(dir.join("b.bin"), &more).unwrap();
    wait_for(150).await;
    e.stop();
    e.wait().await.unwrap();
    let reports = e.finish().await.unwrap();
    assert_eq!(reports[0].rows, 150);
    let batches: Vec<RecordBatch> =
        arrow::ipc::reader::StreamReader::try_new(std::fs::File::open(&out).unwrap(), None)
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
    let mut got: Vec<(String, f64)> = batches
        .iter()
        .flat_map(|b| {
            let t = b.column(0).as_string::<i32>();
            let p = b.column(1).as_primitive::<Float64Type>();
            (0..b.num_rows())
                .map(|i| (t.value(i).to_string(), p.value(i)))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut want = Vec::new();
    for (seed, n) in [(1, 100), (2, 50)] {
        let mut g = QuoteGenerator::new(seed);
        for _ in 0..n {
            let q = g.next_quote();
            want.push((q.ticker.to_string(), q.bid_price));
        }
    }
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    want.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
    assert!(
        missing.is_empty() && got.len() == want.len(),
        "missing {missing:?}, got {} rows",
        got.len()
    );
    let r = &e.source_reports()[0];
    assert_eq!((r.decoded, r.skipped), (150, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_encoding_and_registered_encodings() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 7, 1, Framing::Varint);
    let e = engine(1);
    let got = run(
        &e,
        &format!(
            "CREATE SOURCE r WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'raw');\nSELECT value FROM r;",
            data.display()
        ),
    )
    .await
    .unwrap();
    let total: usize = got
        .iter()
        .flat_map(|b| {
            let v = b.column(0).as_binary::<i32>();
            (0..v.len()).map(|i| v.value(i).len()).collect::<Vec<_>>()
        })
        .sum();
    let file = std::fs::metadata(&data).unwrap().len() as usize;
    assert_eq!(
        total,
        file - 7,
        "every message, without its one-byte length"
    );
    assert!(e.register_encoding("x", None, None).is_err());
    // A user factory under a new name is picked by SQL.
    e.register_encoding("bytes-again", Some(Arc::new(weir_codec::RawFactory)), None)
        .unwrap();
    let got = run(
        &e,
        &format!(
            "CREATE SOURCE r2 WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'bytes-again');\nSELECT count(*) FROM r2;",
            data.display()
        ),
    )
    .await
    .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 7);
    let _ = got[0].column(0).len();
}

/// A sink that fails as it is completed does not keep the sinks after it from being completed:
/// here a full disk (Linux's `/dev/full`) under one sink, and a Parquet file after it that must
/// still get its footer. A failure while the rows are written fails their statement.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_at_the_end_does_not_keep_the_others_unfinished() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 50, 8, Framing::Varint);
    let pq = fx.path("b.parquet");
    let e = engine(1);
    let script = format!(
        "{}
CREATE SINK a_full FROM (SELECT ticker, bid_price FROM q) WITH ('connector' = 'file', 'path' = '/dev/full', 'encoding' = 'json', 'framing' = 'lines');
CREATE SINK b_lake FROM (SELECT ticker, bid_price FROM q) WITH ('connector' = 'parquet', 'path' = '{}');",
        fx.source("q", "(ticker VARCHAR, bid_price DOUBLE)", &data, ""),
        pq.display()
    );
    // 50 short lines stay in the file's buffer until the end, where the disk is found full.
    run(&e, &script).await.unwrap();
    let err = e.finish().await.unwrap_err().to_string();
    assert!(err.contains("a_full") && err.contains("/dev/full"), "{err}");
    assert_eq!(parquet_rows(&pq), 50);

    // More than the file's 1 MiB buffer: the disk is found full while the statement runs, and
    // the statement that wrote the rows fails, naming the sink.
    let many = fx.quotes("many.bin", 40_000, 9, Framing::Varint);
    let e = engine(1);
    let err = run(
        &e,
        &format!(
            "{}
CREATE SINK a_full FROM (SELECT ticker, bid_price FROM m) WITH ('connector' = 'file', 'path' = '/dev/full', 'encoding' = 'json', 'framing' = 'lines');",
            fx.source("m", "(ticker VARCHAR, bid_price DOUBLE)", &many, "")
        ),
    )
    .await
    .unwrap_err();
    assert!(err.contains("a_full") && err.contains("/dev/full"), "{err}");
    e.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sinks_write_messages_with_an_encoder() {
    let fx = Fixture::new();
    let data = fx.quotes("q.bin", 500, 6, Framing::Varint);
    let copy = fx.path("copy.bin");
    let lines = fx.path("quotes.jsonl");
    let e = engine(1);
    let script = format!(
        "CREATE SOURCE r WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'raw');
CREATE SINK copy FROM r WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'raw', 'framing' = 'u32be');
{}
CREATE SINK lines FROM (SELECT ticker, bid_price FROM q) WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'json', 'framing' = 'lines');",
        data.display(),
        copy.display(),
        fx.source("q", "(ticker VARCHAR, bid_price DOUBLE)", &data, ""),
        lines.display()
    );
    run(&e, &script).await.unwrap();
    e.finish().await.unwrap();
    // The raw copy, re-framed with u32be, decodes to the same quotes.
    let e2 = engine(1);
    let got = run(
        &e2,
        &format!(
            "{}\nSELECT count(*), sum(bid_price) FROM c;",
            fx.source("c", "(bid_price DOUBLE)", &copy, ", 'framing' = 'u32be'")
        ),
    )
    .await
    .unwrap();
    let mut g = QuoteGenerator::new(6);
    let mut sum = 0.0;
    let mut want_lines = Vec::new();
    for _ in 0..500 {
        let q = g.next_quote();
        sum += q.bid_price;
        want_lines.push(serde_json::json!({"ticker": q.ticker, "bid_price": q.bid_price}));
    }
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 500);
    assert!((got[0].column(1).as_primitive::<Float64Type>().value(0) - sum).abs() < 1e-6);
    let got_lines: Vec<serde_json::Value> = std::fs::read_to_string(&lines)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got_lines, want_lines);
    // An encoding without an encoder: a clear error naming those there are.
    let err = run(
        &e2,
        "CREATE SINK p WITH ('connector' = 'file', 'path' = '/tmp/x', 'encoding' = 'avro');",
    )
    .await
    .unwrap_err();
    assert!(err.contains("no encoder is registered for encoding 'avro'; encodings with an encoder: json, protobuf, raw"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_sources_match_protobuf_sources() {
    let fx = Fixture::new();
    let pb = fx.quotes("q.bin", 4_000, 8, Framing::Varint);
    let av = fx.path("q.avro.bin");
    let mut f = std::fs::File::create(&av).unwrap();
    QuoteGenerator::new(8)
        .write(&mut f, 4_000, QuoteFormat::Avro, Framing::Varint)
        .unwrap();
    let avsc = fx.path("stocks.avsc");
    std::fs::write(&avsc, weir_testdata::STOCKS_AVSC).unwrap();
    let query = "SELECT ticker, count(*), min(bid_price), max(ask_price), sum(bid_size), max(ts), sum(conditions) FROM q GROUP BY ticker ORDER BY ticker";
    let e = engine(2);
    let from_pb = run(
        &e,
        &format!(
            "{}\n{query};",
            fx.source(
                "q",
                "(ticker VARCHAR, ts TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED, conditions INT)",
                &pb,
                ", 'fields.ts' = 'base.timestamp'"
            )
        ),
    )
    .await
    .unwrap();
    let e = engine(2);
    let source = |extra: &str| {
        format!(
            "CREATE SOURCE q (ticker VARCHAR, ts TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, bid_size BIGINT, conditions INT)
             WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', 'avro.schema.file' = '{}',
                   'fields.ticker' = 'base.ticker', 'fields.ts' = 'base.timestamp'{extra});
             {query};",
            av.display(),
            avsc.display()
        )
    };
    let from_avro = run(&e, &source("")).await.unwrap();
    let fmt = |b: &[RecordBatch]| {
        arrow::util::pretty::pretty_format_batches(b)
            .unwrap()
            .to_string()
    };
    assert_eq!(fmt(&from_pb), fmt(&from_avro));
    assert_eq!(rows(&from_avro), reference(4_000, 8).len());

    // Without a column list: the schema's top-level fields.
    let got = run(
        &engine(1),
        &format!(
            "CREATE SOURCE q WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', 'avro.schema.file' = '{}');
             SELECT count(*), sum(tape), count(DISTINCT base['ticker']) FROM q;",
            av.display(),
            avsc.display()
        ),
    )
    .await
    .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 4_000);

    // A declared type the field cannot widen into: refused at CREATE SOURCE, naming both.
    let err = run(
        &engine(1),
        &format!(
            "CREATE SOURCE q (conditions BOOLEAN) WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', 'avro.schema.file' = '{}');",
            av.display(),
            avsc.display()
        ),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("'conditions'") && err.contains("Avro int"),
        "{err}"
    );
    // A damaged message: the file and byte offset, and the field.
    let bad = fx.path("bad.avro.bin");
    let mut data = std::fs::read(&av).unwrap();
    data.truncate(data.len() - 3);
    std::fs::write(&bad, &data).unwrap();
    let err = run(
        &engine(1),
        &format!(
            "CREATE SOURCE q (tape BIGINT) WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'avro', 'avro.schema.file' = '{}');
             SELECT count(*) FROM q;",
            bad.display(),
            avsc.display()
        ),
    )
    .await
    .unwrap_err();
    assert!(err.contains("bad.avro.bin"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_sources_match_protobuf_sources() {
    let fx = Fixture::new();
    let pb = fx.quotes("q.bin", 4_000, 8, Framing::Varint);
    let js = fx.path("q.jsonl");
    let mut f = std::fs::File::create(&js).unwrap();
    QuoteGenerator::new(8)
        .write(&mut f, 4_000, QuoteFormat::Json, Framing::Lines)
        .unwrap();
    let query = "SELECT ticker, count(*), min(bid_price), max(ask_price), sum(bid_size), max(ts) FROM q GROUP BY ticker ORDER BY ticker";
    let e = engine(2);
    let from_pb = run(
        &e,
        &format!(
            "{}\n{query};",
            fx.source(
                "q",
                "(ticker VARCHAR, ts TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED)",
                &pb,
                ", 'fields.ts' = 'base.timestamp'"
            )
        ),
    )
    .await
    .unwrap();
    let e = engine(2);
    let from_json = run(
        &e,
        &format!(
            "CREATE SOURCE q (ticker VARCHAR, ts TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED)
             WITH ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json',
                   'fields.ticker' = 'base.ticker', 'fields.ts' = 'base.timestamp', 'timestamp.unit.ts' = 'nanos');
             {query};",
            js.display()
        ),
    )
    .await
    .unwrap();
    let fmt = |b: &[RecordBatch]| {
        arrow::util::pretty::pretty_format_batches(b)
            .unwrap()
            .to_string()
    };
    assert_eq!(fmt(&from_pb), fmt(&from_json));
    assert_eq!(rows(&from_json), reference(4_000, 8).len());

    // A string where a number is declared: an error naming the key, or a null when asked.
    let bad = fx.path("bad.jsonl");
    std::fs::write(&bad, "{\"n\": 1}\n{\"n\": \"two\"}\n{\"n\": 3}\n").unwrap();
    let src = |extra: &str| {
        format!(
            "CREATE SOURCE b (n BIGINT) WITH ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json'{extra});\nSELECT count(n), sum(n) FROM b;",
            bad.display()
        )
    };
    let err = run(&engine(1), &src("")).await.unwrap_err();
    assert!(
        err.contains("bad.jsonl at byte 9") && err.contains("'n'"),
        "{err}"
    );
    let got = run(&engine(1), &src(", 'json.on.mismatch' = 'null'"))
        .await
        .unwrap();
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 2);
    assert_eq!(got[0].column(1).as_primitive::<Int64Type>().value(0), 4);
    let err = run(&engine(1), &src(", 'json.on.mismatch' = 'maybe'"))
        .await
        .unwrap_err();
    assert!(err.contains("'json.on.mismatch' = 'maybe'"), "{err}");
}
