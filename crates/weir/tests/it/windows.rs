//! Continuous SQL on the file connector: window table functions, watermarks, late rows, the
//! same rows bounded and in follow mode, and refusals of what cannot run continuously. Expected
//! rows are computed from the quote generator itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use weir::{Engine, EngineOptions};
use weir_testdata::{Framing, QuoteFormat, QuoteGenerator};

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

const START: i64 = 1_800_000_000_000_000_000;

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

const BARS: &str = "SELECT window_start, ticker, count(*) AS n, min(bid_price), max(ask_price), \
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
    for partitions in [1, 2, 3] {
        let e = engine(partitions);
        let rows = e
            .query(&format!(
                "{}\n{BARS} EMIT ON WINDOW CLOSE;",
                source(&data, &pb, "")
            ))
            .await
            .unwrap();
        assert_eq!(bars(&rows), want, "{partitions} readers");
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
fn read_stream(path: &Path) -> Vec<RecordBatch> {
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
    let out = dir.path().join("bars.arrows");
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 2,
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
}
