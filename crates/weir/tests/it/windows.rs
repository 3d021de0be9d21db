//! Continuous SQL on the file connector: window table functions, watermarks, late rows, the
//! same rows bounded and in follow mode, and refusals of what cannot run continuously. Expected
//! rows are computed from the quote generator itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use weir::{Engine, EngineOptions};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator};

use crate::common::write_schema;

/// One window of one ticker: count, min bid, max ask, first bid, last bid (by time).
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub count: i64,
    pub min_bid: f64,
    pub max_ask: f64,
    pub first_bid: f64,
    pub last_bid: f64,
}

/// 1-second bars by (window start in ns, ticker), straight from the generator.
pub fn reference(
    n: u64,
    seed: u64,
    start: i64,
    max_gap: u64,
    size: i64,
) -> BTreeMap<(i64, String), Bar> {
    let mut g = QuoteGenerator::new(seed).with_event_time(start, max_gap);
    let mut out: BTreeMap<(i64, String), Bar> = BTreeMap::new();
    for _ in 0..n {
        let q = g.next_quote();
        let w = q.timestamp.div_euclid(size) * size;
        let e = out.entry((w, q.ticker.to_string())).or_insert(Bar {
            count: 0,
            min_bid: f64::MAX,
            max_ask: f64::MIN,
            first_bid: q.bid_price,
            last_bid: q.bid_price,
        });
        e.count += 1;
        e.min_bid = e.min_bid.min(q.bid_price);
        e.max_ask = e.max_ask.max(q.ask_price);
        e.last_bid = q.bid_price;
    }
    out
}

/// Reads bars back from query rows `(window_start, ticker, count, min, max, first, last)`.
pub fn bars(batches: &[RecordBatch]) -> BTreeMap<(i64, String), Bar> {
    let mut out = BTreeMap::new();
    for b in batches {
        let start = cast(b.column(0), &DataType::Int64).unwrap();
        let start = start.as_primitive::<Int64Type>();
        let ticker = b.column(1).as_string::<i32>();
        let count = b.column(2).as_primitive::<Int64Type>();
        let f = |i: usize| b.column(i).as_primitive::<Float64Type>().clone();
        let (min, max, first, last) = (f(3), f(4), f(5), f(6));
        for r in 0..b.num_rows() {
            let prev = out.insert(
                (start.value(r), ticker.value(r).to_string()),
                Bar {
                    count: count.value(r),
                    min_bid: min.value(r),
                    max_ask: max.value(r),
                    first_bid: first.value(r),
                    last_bid: last.value(r),
                },
            );
            assert!(prev.is_none(), "a window was emitted twice");
        }
    }
    out
}

pub const START: i64 = 1_800_000_000_000_000_000;

fn fixture(n: u64, seed: u64, max_gap: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let pb = write_schema(dir.path());
    let data = dir.path().join("q.bin");
    let mut f = std::fs::File::create(&data).unwrap();
    QuoteGenerator::new(seed)
        .with_event_time(START, max_gap)
        .write(&mut f, n, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    (dir, data, pb)
}

fn source(data: &Path, pb: &Path, extra: &str) -> String {
    format!(
        "CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, \
         WATERMARK FOR timestamp AS timestamp - INTERVAL '100 milliseconds') \
         WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'protobuf', \
         'message' = 'stocks.QuoteNBBO', 'location' = '{}'{extra});",
        data.display(),
        pb.display()
    )
}

pub const BARS: &str =
    "SELECT window_start, ticker, count(*) AS n, min(bid_price), max(ask_price), \
     first_value(bid_price ORDER BY timestamp), last_value(bid_price ORDER BY timestamp) \
     FROM TUMBLE(q, timestamp, INTERVAL '1 second') GROUP BY window_start, window_end, ticker";

fn engine(partitions: usize) -> Engine {
    Engine::new(EngineOptions {
        partitions,
        batch_size: 1000,
        ..EngineOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tumbling_bars_match_the_generator_on_any_number_of_readers() {
    // 40,000 quotes about 0.5 ms apart: 20 seconds, 20 one-second windows.
    let (_dir, data, pb) = fixture(40_000, 17, 1_000_000);
    let want = reference(40_000, 17, START, 1_000_000, 1_000_000_000);
    // 9 readers merge the windows on 3 threads by group (one for every 4 readers).
    for (partitions, shards) in [(1, 0), (2, 0), (3, 0), (9, 3)] {
        let e = engine(partitions);
        let rows = e
            .query(&format!(
                "{}\n{BARS} EMIT ON WINDOW CLOSE;",
                source(&data, &pb, "")
            ))
            .await
            .unwrap();
        assert_eq!(bars(&rows), want, "{partitions} readers");
        // The merge thread's busy time is counted for the run's summary.
        let report = &e.source_reports()[0];
        assert!(
            !report.window_merge.is_zero(),
            "{partitions} readers: no merge time"
        );
        assert_eq!(report.window_shards, shards, "{partitions} readers");
        assert_eq!(
            report.window_shards_busy.is_zero(),
            shards == 0,
            "{partitions} readers: the merge threads' time"
        );
    }
    // The bounded GROUP BY date_bin(...) over the plain source gives the same rows.
    let e = engine(2);
    let rows = e
        .query(&format!(
            "{}\nSELECT date_bin(INTERVAL '1 second', timestamp, TIMESTAMP '1970-01-01') AS w, ticker, \
             count(*), min(bid_price), max(ask_price), first_value(bid_price ORDER BY timestamp), \
             last_value(bid_price ORDER BY timestamp) FROM q GROUP BY w, ticker;",
            source(&data, &pb, "")
        ))
        .await
        .unwrap();
    assert_eq!(bars(&rows), want);
}

/// Reads an Arrow IPC stream file written so far (a sink in follow mode flushes each batch).
pub fn read_stream(path: &Path) -> Vec<RecordBatch> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    match arrow::ipc::reader::StreamReader::try_new(f, None) {
        Ok(r) => r.map_while(Result::ok).collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_mode_emits_each_window_once_as_the_watermark_passes_it() {
    // 20,000 quotes about 0.5 ms apart: 10 seconds of event time.
    let n = 20_000;
    let (dir, data, pb) = fixture(n, 5, 1_000_000);
    let want = reference(n, 5, START, 1_000_000, 1_000_000_000);
    let last = {
        let mut g = QuoteGenerator::new(5).with_event_time(START, 1_000_000);
        (0..n).map(|_| g.next_quote().timestamp).max().unwrap()
    };
    // The watermark ends at the last time minus the delay: windows ending at or before it close.
    let watermark = last - 100_000_000;
    let closed: BTreeMap<_, _> = want
        .iter()
        .filter(|((w, _), _)| w + 1_000_000_000 <= watermark)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(closed.len() < want.len() && !closed.is_empty());
    // 6 readers merge on 2 threads, whose closed windows come out before the stop.
    for partitions in [2, 6] {
        let out = dir.path().join(format!("bars-{partitions}.arrows"));
        let e = Engine::new(EngineOptions {
            follow: true,
            partitions,
            batch_size: 1000,
            ..EngineOptions::default()
        });
        e.run_script(
            &format!(
                "{}\nCREATE SINK bars FROM ({BARS}) WITH ('connector' = 'ipc', 'ipc.format' = 'stream', 'path' = '{}');",
                source(&data, &pb, ""),
                out.display()
            ),
            &mut crate::common::Collect::default(),
        )
        .await
        .unwrap();
        // Wait until every window the watermark passed has come out.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while bars(&read_stream(&out)).len() < closed.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "windows did not close"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        e.stop();
        e.wait().await.unwrap();
        e.finish().await.unwrap();
        assert_eq!(bars(&read_stream(&out)), closed);
        let r = &e.source_reports()[0];
        assert_eq!(r.messages, n);
        assert_eq!(r.late, 0);
        // The windows still open at the stop are dropped and counted (one window: the last second).
        assert_eq!(r.windows_dropped, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_are_dropped_counted_and_the_rest_is_exact() {
    // In-order quotes, then quotes from 2 seconds earlier: far behind a 100 ms watermark.
    let dir = tempfile::tempdir().unwrap();
    let pb = write_schema(dir.path());
    let data = dir.path().join("q.bin");
    let mut bytes = Vec::new();
    QuoteGenerator::new(1)
        .with_event_time(START, 1_000_000)
        .write(&mut bytes, 10_000, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    QuoteGenerator::new(2)
        .with_event_time(START, 100_000)
        .write(&mut bytes, 500, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    std::fs::write(&data, &bytes).unwrap();
    let e = engine(1);
    let rows = e
        .query(&format!("{}\n{BARS};", source(&data, &pb, "")))
        .await
        .unwrap();
    let want = reference(10_000, 1, START, 1_000_000, 1_000_000_000);
    assert_eq!(bars(&rows), want);
    assert_eq!(e.source_reports()[0].late, 500);
    // With a dead-letter file, each late row is written with its file and byte offset.
    let dl = dir.path().join("late.jsonl");
    let e = engine(2);
    let rows = e
        .query(&format!(
            "{}\n{BARS};",
            source(
                &data,
                &pb,
                &format!(
                    ", 'on.error' = 'dead_letter', 'dead_letter.path' = '{}'",
                    dl.display()
                )
            )
        ))
        .await
        .unwrap();
    assert_eq!(bars(&rows), want);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&dl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 500);
    let first_late_offset = {
        let mut b = Vec::new();
        QuoteGenerator::new(1)
            .with_event_time(START, 1_000_000)
            .write(&mut b, 10_000, QuoteFormat::Protobuf, Framing::Varint)
            .unwrap();
        b.len() as i64
    };
    assert_eq!(lines[0]["offset"], first_late_offset, "{}", lines[0]);
    assert!(lines[0]["file"].as_str().unwrap().ends_with("q.bin"));
    assert!(lines[0]["error"].as_str().unwrap().starts_with("late"));
    assert!(lines[0]["row"]["ticker"].is_string(), "{}", lines[0]);
}

/// Rows of a query as text lines, sorted (for comparing two queries' rows).
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out: Vec<String> = arrow::util::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string()
        .lines()
        .filter(|l| l.starts_with("| "))
        .skip(1)
        .map(str::to_string)
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_windows_count_each_row_in_every_window_that_holds_it() {
    let (_dir, data, pb) = fixture(6_000, 3, 1_000_000);
    // 6 readers: merged on 2 threads, each window (no group keys) whole on one of them.
    let e = engine(6);
    let rows = e
        .query(&format!(
            "{}\nSELECT window_start, window_end, count(*) AS n FROM HOP(q, timestamp, INTERVAL '500 milliseconds', INTERVAL '2 seconds') \
             GROUP BY window_start, window_end ORDER BY window_start;",
            source(&data, &pb, "")
        ))
        .await
        .unwrap();
    let mut want: BTreeMap<i64, i64> = BTreeMap::new();
    let mut g = QuoteGenerator::new(3).with_event_time(START, 1_000_000);
    for _ in 0..6_000 {
        let t = g.next_quote().timestamp;
        let mut s = t.div_euclid(500_000_000) * 500_000_000;
        while s + 2_000_000_000 > t {
            *want.entry(s).or_default() += 1;
            s -= 500_000_000;
        }
    }
    let mut got = BTreeMap::new();
    for b in &rows {
        let s = cast(b.column(0), &DataType::Int64).unwrap();
        let e = cast(b.column(1), &DataType::Int64).unwrap();
        let (s, e) = (s.as_primitive::<Int64Type>(), e.as_primitive::<Int64Type>());
        let n = b.column(2).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            assert_eq!(e.value(r) - s.value(r), 2_000_000_000);
            got.insert(s.value(r), n.value(r));
        }
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_windows_split_a_key_where_its_rows_are_a_gap_apart() {
    // Three tickers' quotes, written as JSON lines with chosen times (ms): sessions of 1 s gap.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.jsonl");
    let rows = [
        ("A", 0, 1.0),
        ("A", 500, 2.0),
        ("B", 600, 5.0),
        ("A", 1400, 3.0), // 900 ms after 500: same session [0, 2400)
        ("B", 3000, 6.0), // 2.4 s after B's first: a new session
        ("A", 5000, 4.0),
        ("A", 3000, 9.0), // bridges A's [0, 2400) and [5000, 6000)? no: 3000 >= 2400, 5000-3000 > 1000
        ("C", 9000, 7.0),
    ];
    let text: String = rows
        .iter()
        .map(|(t, ms, p)| format!("{{\"ticker\": \"{t}\", \"ts\": {}, \"price\": {p}}}\n", ms))
        .collect();
    std::fs::write(&data, text).unwrap();
    let e = engine(1);
    let out = e
        .query(&format!(
            "CREATE SOURCE s (ticker VARCHAR, ts TIMESTAMP(3), price DOUBLE, WATERMARK FOR ts AS ts - INTERVAL '10 seconds') \
             WITH ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json');\n\
             SELECT ticker, CAST(window_start AS BIGINT) AS s, CAST(window_end AS BIGINT) AS e, count(*) AS n, sum(price) AS p \
             FROM SESSION(s, ts, INTERVAL '1 second') GROUP BY window_start, window_end, ticker ORDER BY ticker, s;",
            data.display()
        ))
        .await
        .unwrap();
    assert_eq!(
        lines(&out),
        [
            "| A      | 0    | 2400  | 3 | 6.0 |",
            "| A      | 3000 | 4000  | 1 | 9.0 |",
            "| A      | 5000 | 6000  | 1 | 4.0 |",
            "| B      | 3000 | 4000  | 1 | 6.0 |",
            "| B      | 600  | 1600  | 1 | 5.0 |",
            "| C      | 9000 | 10000 | 1 | 7.0 |",
        ]
    );
    // A row between two sessions of its key merges them.
    std::fs::write(
        &data,
        "{\"ticker\": \"A\", \"ts\": 0, \"price\": 1}\n{\"ticker\": \"A\", \"ts\": 1800, \"price\": 2}\n{\"ticker\": \"A\", \"ts\": 900, \"price\": 4}\n",
    )
    .unwrap();
    let e = engine(1);
    let out = e
        .query(&format!(
            "CREATE SOURCE s (ticker VARCHAR, ts TIMESTAMP(3), price DOUBLE, WATERMARK FOR ts AS ts - INTERVAL '10 seconds') \
             WITH ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json');\n\
             SELECT ticker, CAST(window_start AS BIGINT) AS s, CAST(window_end AS BIGINT) AS e, count(*) AS n, sum(price) AS p \
             FROM SESSION(s, ts, INTERVAL '1 second') GROUP BY window_start, window_end, ticker;",
            data.display()
        ))
        .await
        .unwrap();
    assert_eq!(lines(&out), ["| A      | 0 | 2800 | 3 | 7.0 |"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_aggregate_having_expressions_and_a_join_with_a_static_table() {
    let (dir, data, pb) = fixture(20_000, 9, 1_000_000);
    // A static table of the tickers' underlying symbols, from a file read once.
    let names = dir.path().join("names.jsonl");
    let mut g = QuoteGenerator::new(9).with_event_time(START, 1_000_000);
    let mut seen = std::collections::BTreeSet::new();
    let mut text = String::new();
    for _ in 0..20_000 {
        let q = g.next_quote();
        if seen.insert(q.ticker.to_string()) {
            // O:<underlying><yymmdd><C|P><strike>: the letters after "O:".
            let underlying: String = q.ticker[2..]
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            text.push_str(&format!(
                "{{\"ticker\": \"{}\", \"underlying\": \"{underlying}\"}}\n",
                q.ticker
            ));
        }
    }
    std::fs::write(&names, text).unwrap();
    let windowed = format!(
        "{}\nCREATE SOURCE names (ticker VARCHAR, underlying VARCHAR) WITH ('connector' = 'file', \
         'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', 'scan.bounded' = 'true');\n\
         SELECT window_start, n.underlying, count(*) AS quotes, approx_distinct(t.ticker) AS tickers, \
           round(stddev(bid_price), 6) AS sd, median(ask_price) AS p50, \
           approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY ask_price) AS ap50, \
           max(ask_price) - min(bid_price) AS range \
         FROM TUMBLE(q, timestamp, INTERVAL '5 seconds') AS t JOIN names n ON t.ticker = n.ticker \
         WHERE bid_price > 0.05 \
         GROUP BY window_start, window_end, n.underlying HAVING count(*) > 10",
        source(&data, &pb, ""),
        names.display()
    );
    // 8 readers: the states (a sketch, a digest, lists of values) split by group over 2 merge
    // threads.
    let e = engine(8);
    let got = e.query(&format!("{windowed};")).await.unwrap();
    // The same aggregation written over the plain source with date_bin, in DataFusion.
    let e = engine(2);
    let bounded = e
        .query(&format!(
            "{}\nCREATE SOURCE names (ticker VARCHAR, underlying VARCHAR) WITH ('connector' = 'file', \
             'path' = '{}', 'framing' = 'lines', 'encoding' = 'json');\n\
             SELECT date_bin(INTERVAL '5 seconds', timestamp, TIMESTAMP '1970-01-01') AS w, n.underlying, count(*) AS quotes, \
               approx_distinct(q.ticker) AS tickers, round(stddev(bid_price), 6) AS sd, \
               median(ask_price) AS p50, approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY ask_price) AS ap50, \
               max(ask_price) - min(bid_price) AS range \
             FROM q JOIN names n ON q.ticker = n.ticker WHERE bid_price > 0.05 \
             GROUP BY w, n.underlying HAVING count(*) > 10;",
            source(&data, &pb, ""),
            names.display()
        ))
        .await
        .unwrap();
    // Exact aggregates must be equal; stddev's last digits depend on the order partial states
    // are merged in, and the t-digest's estimate too (checked against the exact median).
    let rows = |batches: &[RecordBatch]| {
        let mut m = BTreeMap::new();
        for b in batches {
            let w = cast(b.column(0), &DataType::Int64).unwrap();
            let w = w.as_primitive::<Int64Type>();
            let u = b.column(1).as_string::<i32>();
            let n = b.column(2).as_primitive::<Int64Type>();
            let d = cast(b.column(3), &DataType::Int64).unwrap();
            let d = d.as_primitive::<Int64Type>();
            let f = |i: usize| b.column(i).as_primitive::<Float64Type>().clone();
            let (sd, p50, ap50, range) = (f(4), f(5), f(6), f(7));
            for r in 0..b.num_rows() {
                // The t-digest's estimate is near the exact median.
                let (e, a) = (p50.value(r), ap50.value(r));
                assert!((a - e).abs() <= 0.25 * e.abs().max(1.0), "{e} ~ {a}");
                m.insert(
                    (w.value(r), u.value(r).to_string()),
                    (n.value(r), d.value(r), sd.value(r), e, range.value(r)),
                );
            }
        }
        m
    };
    let (got, bounded) = (rows(&got), rows(&bounded));
    assert!(got.len() > 20, "{got:?}");
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        bounded.keys().collect::<Vec<_>>()
    );
    for (k, a) in &got {
        let b = &bounded[k];
        assert_eq!((a.0, a.1, a.3, a.4), (b.0, b.1, b.3, b.4), "{k:?}");
        assert!((a.2 - b.2).abs() < 1e-6, "{k:?}: {a:?} {b:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_that_cannot_run_continuously_get_one_line() {
    let (_dir, data, pb) = fixture(100, 1, 1_000_000);
    let cases = [
        ("SELECT ticker, count(*) FROM q GROUP BY ticker", "GROUP BY window_start, window_end of TUMBLE"),
        ("SELECT * FROM q ORDER BY bid_price", "a global ORDER BY waits for the end"),
        (
            "SELECT window_start, count(*) AS n FROM TUMBLE(q, timestamp, INTERVAL '1 second') GROUP BY window_start, window_end ORDER BY n",
            "a global ORDER BY waits for the end",
        ),
        ("SELECT a.ticker FROM q a JOIN q b ON a.ticker = b.ticker", "a join of two unbounded sources"),
        ("SELECT ticker, row_number() OVER (ORDER BY bid_price) FROM q", "window function (OVER)"),
        (
            "SELECT window_start, count(DISTINCT ticker) FROM TUMBLE(q, timestamp, INTERVAL '1 second') GROUP BY window_start, window_end",
            "use approx_distinct(x)",
        ),
    ];
    for (query, want) in cases {
        let e = Engine::new(EngineOptions {
            follow: true,
            partitions: 1,
            ..EngineOptions::default()
        });
        let err = e
            .run_script(
                &format!(
                    "{}\nCREATE SINK s FROM ({query}) WITH ('connector' = 'stdout');",
                    source(&data, &pb, "")
                ),
                &mut crate::common::Collect::default(),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{query}\n{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("AggregateExec"), "{err}");
    }
    // Windows over a source without a watermark cannot close in follow mode.
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 1,
        ..EngineOptions::default()
    });
    let err = e
        .run_script(
            &format!(
                "{}\nCREATE SINK s FROM (SELECT window_start, count(*) FROM TUMBLE(q, timestamp, INTERVAL '1 second') GROUP BY window_start, window_end) WITH ('connector' = 'stdout');",
                source(&data, &pb, "").replace(", WATERMARK FOR timestamp AS timestamp - INTERVAL '100 milliseconds'", "")
            ),
            &mut crate::common::Collect::default(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("declares no watermark") && err.contains("WATERMARK FOR timestamp"),
        "{err}"
    );
}

/// Every bar in the Parquet step files of `dir`.
fn parquet_bars(dir: &Path) -> BTreeMap<(i64, String), Bar> {
    let mut batches = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".parquet") || name.starts_with('.') {
            continue;
        }
        let f = std::fs::File::open(&path).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(f, 1024).unwrap();
        batches.extend(reader.map(Result::unwrap));
    }
    bars(&batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_state_a_stop_keeps_the_open_windows_for_the_next_run() {
    // 30,000 quotes about 0.5 ms apart (15 seconds); the first run sees 12,000 of them.
    let (n, first) = (30_000, 12_000);
    let (dir, data, pb) = fixture(first, 9, 1_000_000);
    let want = reference(n, 9, START, 1_000_000, 1_000_000_000);
    let state = dir.path().join("state");
    let out = dir.path().join("out");
    let script = format!(
        "{}\nCREATE SINK bars FROM ({BARS}) WITH ('connector' = 'parquet', 'path' = '{}');",
        source(
            &data,
            &pb,
            &format!(
                ", 'state.dir' = '{}', 'commit.interval' = '50ms, 2000 rows'",
                state.display()
            )
        ),
        out.display()
    );
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 2,
        batch_size: 1000,
        ..EngineOptions::default()
    });
    e.run_script(&script, &mut crate::common::Collect::default())
        .await
        .unwrap();
    // Wait until all 12,000 quotes are committed: the state holds the position of their end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while e.source_reports()[0].messages < first || parquet_bars(&out).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing was committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    e.stop();
    e.wait().await.unwrap();
    e.finish().await.unwrap();
    let r = &e.source_reports()[0];
    // With state, a stop drops nothing: the open windows are in the last commit.
    assert_eq!(r.windows_dropped, 0);
    let early = parquet_bars(&out);
    assert!(!early.is_empty() && early.len() < want.len());
    for (k, v) in &early {
        assert_eq!(want.get(k), Some(v), "window {k:?} of the first run");
    }

    // The rest of the quotes arrive (the generator's first 12,000 are the same bytes), and a
    // bounded run closes every window: each comes out once, with the values of the whole input.
    let mut f = std::fs::File::create(&data).unwrap();
    QuoteGenerator::new(9)
        .with_event_time(START, 1_000_000)
        .write(&mut f, n, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    drop(f);
    let e = engine(2);
    e.run_script(&script, &mut crate::common::Collect::default())
        .await
        .unwrap();
    e.wait().await.unwrap();
    e.finish().await.unwrap();
    assert_eq!(e.source_reports()[0].messages, n - first);
    assert_eq!(e.source_reports()[0].late, 0);
    assert_eq!(parquet_bars(&out), want);
    // What `weir stats` shows: every window emitted, none open, the watermark where the data
    // put it (the last event time less the delay), not moved to the end of time.
    let (checkpoint, _, _) = weir_dedup::StateStore::inspect(&state).unwrap();
    let w = weir::WindowStateReport::from_state(&checkpoint.state).unwrap();
    let last = {
        let mut g = QuoteGenerator::new(9).with_event_time(START, 1_000_000);
        (0..n).map(|_| g.next_quote().timestamp).max().unwrap()
    };
    assert_eq!(w.open_windows, 0);
    assert_eq!(w.late_rows, 0);
    assert_eq!(w.watermark, last - 100_000_000);
    assert_eq!(
        w.closed_through,
        want.keys().map(|k| k.0).max().unwrap() + 1_000_000_000
    );
}
