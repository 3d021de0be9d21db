//! Kafka sources in a consumer group (`'group.id'`) writing one Delta table, or one Kafka
//! topic in transactions, from several weir processes, against the real broker of
//! `scripts/kafka.sh` (its consumer protocol drops a silent member after 6 s): members are
//! added, stopped and killed with kill -9 while messages arrive, and every record of the topic
//! must be in the output exactly once. The table is read with delta-rs, as another engine
//! would; the topic at `read_committed`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{Int32Type, Int64Type};
use weir::{Engine, EngineOptions};
use weir_kafka::create_topic;

use crate::common::{interrupt, spawn};

fn bootstrap() -> Option<String> {
    let Ok(addr) = std::env::var("WEIR_KAFKA_BOOTSTRAP") else {
        eprintln!("NOTICE: consumer group test skipped: WEIR_KAFKA_BOOTSTRAP is not set (scripts/test.sh sets it)");
        return None;
    };
    Some(addr)
}

/// Sends `count` generated quotes to `topic` (12 partitions), keyed, as a producer would. The
/// quotes of seed `seed` start at 14:30 and `3 x seed` seconds and come 1,000 an event-time
/// second: 2,000 of them end before the next seed's begin.
fn send(broker: &str, topic: &str, count: u64, seed: u64) {
    let at = 14 * 3600 + 30 * 60 + 3 * seed;
    let start = format!(
        "2026-03-02T{:02}:{:02}:{:02}Z",
        at / 3600,
        at / 60 % 60,
        at % 60
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["gen", "quotes", "--count", &count.to_string()])
        .args(["--start", &start, "--per-second", "1000"])
        .args(["--seed", &seed.to_string(), "--to"])
        .arg(format!("kafka://{broker}/{topic}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "weir gen: {out:?}");
}

/// How often each (partition, offset) is in the table at `dir` (empty before its first commit).
async fn records(dir: &Path) -> BTreeMap<(i32, i64), usize> {
    let mut seen = BTreeMap::new();
    let url = url::Url::from_directory_path(dir).unwrap();
    let Ok(table) = deltalake_core::open_table(url).await else {
        return seen;
    };
    for b in crate::delta::table_batches(&table) {
        let p = b.column_by_name("p").unwrap().as_primitive::<Int32Type>();
        let o = b.column_by_name("o").unwrap().as_primitive::<Int64Type>();
        for (p, o) in p.values().iter().zip(o.values()) {
            *seen.entry((*p, *o)).or_insert(0) += 1;
        }
    }
    seen
}

/// How often each (partition, offset) of the source is in the output topic `out`, read at
/// `read_committed`.
async fn topic_records(broker: &str, out: &str) -> BTreeMap<(i32, i64), usize> {
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        ..EngineOptions::default()
    });
    let got = engine
        .query(&format!(
            "CREATE SOURCE k (p INT, o BIGINT) WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{out}', 'encoding' = 'json', \
             'isolation.level' = 'read_committed');\n\
             SELECT p, o, count(*) AS n FROM k GROUP BY p, o;"
        ))
        .await
        .unwrap();
    let mut seen = BTreeMap::new();
    for b in &got {
        let p = b.column(0).as_primitive::<Int32Type>();
        let o = b.column(1).as_primitive::<Int64Type>();
        let n = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            seen.insert((p.value(i), o.value(i)), n.value(i) as usize);
        }
    }
    seen
}

/// Where the members write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    /// One Delta table, positions as its `txn` versions.
    Delta,
    /// One Kafka topic, in transactions that commit the group's offsets.
    Kafka,
}

/// One weir process of the group; killed if the test ends without stopping it.
struct Member {
    child: Option<Child>,
    stderr: std::path::PathBuf,
}

impl Member {
    fn start(sql: &Path, dir: &Path, name: &str) -> Self {
        Self::start_with(sql, dir, name, &[])
    }

    /// Started with more arguments to `weir run`.
    fn start_with(sql: &Path, dir: &Path, name: &str, more: &[&str]) -> Self {
        let stderr = dir.join(format!("{name}.stderr"));
        let sql = sql.display().to_string();
        let mut args = vec!["run", "--follow", "--log-level", "info"];
        args.extend_from_slice(more);
        args.push(&sql);
        let child = spawn(&args, &stderr);
        Self {
            child: Some(child),
            stderr,
        }
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("a running member")
    }

    /// Sends `sig` (`-STOP`, `-CONT`, `-TERM`).
    fn signal(&mut self, sig: &str) {
        let pid = self.child().id().to_string();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// kill -9.
    fn kill_9(mut self) {
        let mut child = self.child.take().expect("a running member");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Ctrl-C, or SIGTERM with `term`: the member commits its step, leaves and exits 0.
    /// Returns its standard error.
    fn stop(mut self, term: bool) -> String {
        if !term {
            return interrupt(self.child.take().expect("a running member"), &self.stderr);
        }
        self.signal("-TERM");
        let status = self.child.take().expect("a running member").wait().unwrap();
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(
            status.success(),
            "weir failed on SIGTERM ({status}):\n{err}"
        );
        err
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sets its flag when dropped (the producer stops also when the test fails).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Sends quotes to `topic`, 2,000 at a time a few times a second, until `stop` is set;
/// returns how many. With `repeat`, each 2,000 are sent again with the next 2,000, as a
/// producer's retries would: the same keys, later, often to another member.
fn producer(
    broker: String,
    topic: String,
    stop: Arc<AtomicBool>,
    repeat: bool,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut sent = 0;
        let mut seed = 1;
        while !stop.load(Ordering::SeqCst) {
            send(&broker, &topic, 2_000, seed);
            sent += 2_000;
            if repeat && seed > 1 {
                send(&broker, &topic, 2_000, seed - 1);
                sent += 2_000;
            }
            seed += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
        sent
    })
}

/// The (partition, offset) of the first record of each `(ticker, sequence_number)` in `topic`:
/// what a dedup on that key keeps (the key's ticker is the Kafka key, so a key is always in
/// one partition, and its first record is its lowest offset there).
async fn first_of_each_key(broker: &str, topic: &str, pb: &Path) -> BTreeMap<(i32, i64), usize> {
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        ..EngineOptions::default()
    });
    let got = engine
        .query(&format!(
            "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT) \
             INCLUDE partition AS p INCLUDE offset AS o WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'protobuf', \
             'message' = 'stocks.QuoteNBBO', 'location' = '{}');\n\
             SELECT min(p) AS p, max(p) AS p2, min(o) AS o FROM k GROUP BY ticker, sequence_number;",
            pb.display()
        ))
        .await
        .unwrap();
    let mut first = BTreeMap::new();
    for b in &got {
        let p = b.column(0).as_primitive::<Int32Type>();
        let p2 = b.column(1).as_primitive::<Int32Type>();
        let o = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            assert_eq!(p.value(i), p2.value(i), "a key in two partitions");
            first.insert((p.value(i), o.value(i)), 1);
        }
    }
    first
}

/// A directory for a test with the quotes' schema in it, and a new 12-partition topic named
/// from `prefix`.
fn new_topic(broker: &str, prefix: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let pb = crate::common::write_schema(dir.path());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let topic = format!("{prefix}-{}-{nanos}", std::process::id());
    create_topic(&[broker.to_string()], &topic, 12, 1, &[], false).unwrap();
    (dir, pb, topic)
}

/// Members of the pipeline `sql` come and go while the producer runs: three start, then ten
/// are killed with kill -9, two stop cleanly (Ctrl-C, SIGTERM), and one is paused past the
/// session timeout and then resumed (a zombie whose open step must not reach the output), each
/// replaced by a new one. `check` looks at the members and the output every two seconds.
/// Returns the members running at the end and the standard error of those stopped.
fn churn(
    sql: &Path,
    d: &Path,
    check: &mut dyn FnMut(&mut Vec<Member>),
) -> (Vec<Member>, Vec<String>) {
    let mut started = 0;
    let mut next_name = || {
        started += 1;
        format!("m{started}")
    };
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(sql, d, &next_name()))
        .collect();
    let mut kills = 0;
    let mut stopped = Vec::new();
    for round in 0..13 {
        std::thread::sleep(Duration::from_secs(2));
        check(&mut members);
        match round {
            4 | 9 => stopped.push(members.remove(0).stop(round == 9)),
            6 => {
                members.last_mut().unwrap().signal("-STOP");
                std::thread::sleep(Duration::from_secs(9));
                check(&mut members);
                members.last_mut().unwrap().signal("-CONT");
                continue;
            }
            _ => {
                members.remove(0).kill_9();
                kills += 1;
            }
        }
        members.push(Member::start(sql, d, &next_name()));
    }
    assert_eq!(kills, 10);
    (members, stopped)
}

/// Members come and go while records arrive; with `dedup`, half the records repeat earlier
/// ones, the source drops them by `(ticker, sequence_number)`, and a member that takes a
/// partition over must drop the repeats of keys another member saw.
fn group_members_write_each_record_once(protocol: &str, output: Output, dedup: bool) {
    let Some(b) = bootstrap() else {
        return;
    };
    let (dir, pb, topic) = new_topic(&b, &format!("weir-group-{protocol}"));
    let d = dir.path();
    let table = d.join("table");
    let out = format!("{topic}-out");
    if output == Output::Kafka {
        create_topic(std::slice::from_ref(&b), &out, 6, 1, &[], false).unwrap();
    }
    // The pipeline of every member; `group` holds the group options, `app` the sink's app id
    // (or transactional id).
    let pipeline = |group: &str, app: &str| {
        let sink = match output {
            Output::Delta => format!(
                "'connector' = 'delta', 'path' = '{}', 'app.id' = '{app}'",
                table.display()
            ),
            Output::Kafka => format!(
                "'connector' = 'kafka', 'brokers' = '{b}', 'topic' = '{out}', \
                 'encoding' = 'json', 'key' = 'ticker', 'transactional.id' = '{app}'"
            ),
        };
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT) \
             INCLUDE partition AS p INCLUDE offset AS o \
             WITH ('connector' = 'kafka', 'brokers' = '{b}', 'topic' = '{topic}', \
             'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}', \
             {group}'commit.interval' = '300ms');\n\
             CREATE SINK t FROM q WITH ({sink});\n",
            pb.display(),
        )
    };
    let mut group = format!(
        "'group.id' = '{topic}', 'group.protocol' = '{protocol}', \
         'session.timeout.ms' = '6000', 'max.poll.interval.ms' = '20000', "
    );
    if dedup {
        // The keys on the test's object store when it runs (always under CI), by the
        // consumer protocol; else, and by the classic one, in a directory the members share.
        let keys = match (protocol, crate::common::s3()) {
            ("consumer", Some((endpoint, key, secret, bucket))) => format!(
                "'state.dir' = 's3://{bucket}/{topic}/keys', 's3.endpoint' = '{endpoint}', \
                 's3.region' = 'us-east-1', 's3.access.key.id' = '{key}', \
                 's3.secret.access.key' = '{secret}', "
            ),
            _ => format!("'state.dir' = '{}', ", d.join("keys").display()),
        };
        group.push_str(&keys);
        group.push_str("'dedup.key' = 'ticker, sequence_number', ");
    }
    let sql = d.join("p.sql");
    std::fs::write(&sql, pipeline(&group, "quotes-ingest")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let written = || match output {
        Output::Delta => rt.block_on(records(&table)),
        Output::Kafka => rt.block_on(topic_records(&b, &out)),
    };
    let check = |members: &mut Vec<Member>| -> usize {
        for m in members.iter_mut() {
            if let Some(s) = m.child().try_wait().unwrap() {
                panic!(
                    "a member exited ({s}):\n{}",
                    std::fs::read_to_string(&m.stderr).unwrap_or_default()
                );
            }
        }
        let seen = written();
        let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        assert!(doubled.is_empty(), "records doubled: {doubled:?}");
        seen.len()
    };
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let sending = producer(b.clone(), topic.clone(), Arc::clone(&stop.0), dedup);
    let (mut members, stopped) = churn(&sql, d, &mut |m| {
        check(m);
    });
    stop.0.store(true, Ordering::SeqCst);
    let sent = sending.join().unwrap() as usize;
    // What the output must hold: every record, or the first of each key.
    let expected = if dedup {
        let first = rt.block_on(first_of_each_key(&b, &topic, &pb));
        assert!(
            first.len() < sent * 3 / 4,
            "too few repeats: {} keys in {sent}",
            first.len()
        );
        first
    } else {
        BTreeMap::new()
    };
    let sent = if dedup { expected.len() } else { sent };
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let n = check(&mut members);
        if n >= sent {
            assert_eq!(
                n, sent,
                "more records in the output than were sent (or keys)"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{n} of {sent} records in the output 180 s after the last was sent"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // One more member: its metrics say what it holds of the group.
    let addr = format!("127.0.0.1:{}", crate::metrics::free_port());
    let mut watched = Member::start_with(&sql, d, "watched", &["--metrics-addr", &addr]);
    let scrape = crate::metrics::scrape_until(&addr, watched.child(), |s| {
        let q = [("source", "q")];
        crate::metrics::sum(s, "weir_source_group_partitions", &q) > 0.0
            && crate::metrics::sum(s, "weir_source_group_rebalances_total", &q) >= 1.0
            && crate::metrics::sum(s, "weir_source_group_epoch", &q) > 0.0
            && s.iter()
                .any(|x| x.name == "weir_source_group_partition_unowned_seconds")
    });
    let samples = crate::metrics::samples(&scrape);
    let held = crate::metrics::sum(&samples, "weir_source_group_partitions", &[("source", "q")]);
    assert!(held <= 12.0, "{scrape}");
    // The partitions it took up had owners that committed their offsets (stamped with the
    // time): each one's time without an owner is known.
    let unowned: Vec<_> = samples
        .iter()
        .filter(|x| x.name == "weir_source_group_partition_unowned_seconds")
        .collect();
    assert!(
        unowned.iter().all(|x| x.value >= 0.0
            && x.labels
                .iter()
                .any(|(k, v)| k == "partition" && v.parse::<i32>().is_ok())),
        "{scrape}"
    );
    members.push(watched);
    let mut logs = stopped.concat();
    for m in members {
        logs.push_str(&m.stop(false));
    }
    // The members did take partitions over from each other, and said how long each went
    // without an owner.
    assert!(
        logs.matches("reading these partitions").count() >= 4,
        "the members logged too few assignments:\n{logs}"
    );
    assert!(logs.contains("without an owner"), "{logs}");
    let seen = written();
    assert_eq!(seen.len(), sent, "missing after the stop");
    assert!(seen.values().all(|n| *n == 1), "doubled after the stop");
    if dedup {
        // Exactly the first record of each key: no repeat slipped through a takeover.
        let wrong: Vec<_> = seen
            .keys()
            .filter(|k| !expected.contains_key(k))
            .take(5)
            .collect();
        assert!(
            wrong.is_empty(),
            "repeats of keys seen before were written: {wrong:?}"
        );
        assert!(
            logs.contains("restored the partition's dedup keys"),
            "no member restored a partition's keys:\n{logs}"
        );
    }
    if output == Output::Kafka {
        // The members used the transaction protocol the broker offers, and took partitions
        // up at the offsets the group holds.
        assert!(logs.contains("KIP-890"), "{logs}");
        return;
    }

    // A writer of the same app id outside the group, and a member under another app id,
    // would not be fenced by the members' positions: both are refused, and add nothing.
    for (name, text, expect) in [
        ("outside", pipeline("", "quotes-ingest"), "add 'group.id'"),
        (
            "other-app",
            pipeline(&group, "another-app"),
            "Give every member's sink 'app.id' = 'quotes-ingest'",
        ),
    ] {
        let file = d.join(format!("{name}.sql"));
        std::fs::write(&file, text).unwrap();
        let mut m = Member::start(&file, d, name);
        let status = m.child().wait().unwrap();
        let err = std::fs::read_to_string(d.join(format!("{name}.stderr"))).unwrap();
        assert!(
            !status.success() && err.contains(expect),
            "{name}: {status}\n{err}"
        );
    }
    assert_eq!(rt.block_on(records(&table)).len(), sent);
}

/// Kafka 4's consumer group protocol (the coordinator assigns), with dedup keys that move.
#[test]
fn group_members_by_the_consumer_protocol_write_each_record_once() {
    group_members_write_each_record_once("consumer", Output::Delta, true);
}

/// The classic protocol (JoinGroup and SyncGroup, cooperative-sticky), without dedup.
#[test]
fn group_members_by_the_classic_protocol_write_each_record_once() {
    group_members_write_each_record_once("classic", Output::Delta, false);
}

/// Into a Kafka topic, each step one transaction that also commits the group's offsets
/// (KIP-447), by the consumer protocol.
#[test]
fn group_members_by_the_consumer_protocol_write_each_record_once_to_kafka() {
    group_members_write_each_record_once("consumer", Output::Kafka, false);
}

/// Into a Kafka topic by the classic protocol, with dedup keys that move.
#[test]
fn group_members_by_the_classic_protocol_write_each_record_once_to_kafka() {
    group_members_write_each_record_once("classic", Output::Kafka, true);
}

/// One-second bars of each ticker: `(window_start in ns, ticker)` -> `(quotes, lowest and
/// highest sequence number)`.
type Bars = BTreeMap<(i64, String), (i64, i64, i64)>;

/// The event-time watermark delay of the windows test, in nanoseconds.
const BAR_DELAY_NS: i64 = 1_000_000_000;

/// The bars the windowed pipeline must have written once `topic` is read to its end, computed
/// here from the records, as the generator made them: the first record of each
/// `(ticker, sequence_number)` (the dedup), in one-second windows per ticker, of the windows
/// each partition's watermark (its latest event time less the delay) has passed. A ticker is
/// the Kafka key, so its windows are in one partition.
async fn expected_bars(broker: &str, topic: &str, pb: &Path) -> Bars {
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        ..EngineOptions::default()
    });
    let got = engine
        .query(&format!(
            "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT, timestamp BIGINT) \
             INCLUDE partition AS p INCLUDE offset AS o WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'protobuf', \
             'message' = 'stocks.QuoteNBBO', 'location' = '{}');\n\
             SELECT ticker, sequence_number, timestamp, p, o FROM k;",
            pb.display()
        ))
        .await
        .unwrap();
    // (ticker, sequence_number) -> (offset, partition, event time) of its first record.
    let mut first: BTreeMap<(String, i64), (i64, i32, i64)> = BTreeMap::new();
    for b in &got {
        let ticker = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Utf8).unwrap();
        let ticker = ticker.as_string::<i32>();
        let seq = b.column(1).as_primitive::<Int64Type>();
        let ts = b.column(2).as_primitive::<Int64Type>();
        let p = b.column(3).as_primitive::<Int32Type>();
        let o = b.column(4).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let row = (o.value(i), p.value(i), ts.value(i));
            let slot = first
                .entry((ticker.value(i).to_string(), seq.value(i)))
                .or_insert(row);
            assert_eq!(slot.1, row.1, "a key in two partitions");
            if row.0 < slot.0 {
                *slot = row;
            }
        }
    }
    let mut latest: BTreeMap<i32, i64> = BTreeMap::new();
    for (_, p, ts) in first.values() {
        let l = latest.entry(*p).or_insert(i64::MIN);
        *l = (*l).max(*ts);
    }
    let mut bars = Bars::new();
    for ((ticker, seq), (_, p, ts)) in first {
        let start = ts - ts.rem_euclid(1_000_000_000);
        if start + 1_000_000_000 > latest[&p] - BAR_DELAY_NS {
            continue;
        }
        let bar = bars
            .entry((start, ticker))
            .or_insert((0, i64::MAX, i64::MIN));
        bar.0 += 1;
        bar.1 = bar.1.min(seq);
        bar.2 = bar.2.max(seq);
    }
    bars
}

/// The bars in the table at `dir` (empty before its first commit), and how many rows there are
/// (more than bars when a window was written twice).
async fn table_bars(dir: &Path) -> (Bars, usize) {
    let mut bars = Bars::new();
    let mut rows = 0;
    let url = url::Url::from_directory_path(dir).unwrap();
    let Ok(table) = deltalake_core::open_table(url).await else {
        return (bars, 0);
    };
    for b in crate::delta::table_batches(&table) {
        let start = arrow::compute::cast(
            b.column_by_name("window_start").unwrap(),
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None),
        )
        .unwrap();
        let start = arrow::compute::cast(&start, &arrow::datatypes::DataType::Int64).unwrap();
        let start = start.as_primitive::<Int64Type>();
        let ticker = arrow::compute::cast(
            b.column_by_name("ticker").unwrap(),
            &arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let ticker = ticker.as_string::<i32>();
        let n = b.column_by_name("n").unwrap().as_primitive::<Int64Type>();
        let lo = b.column_by_name("lo").unwrap().as_primitive::<Int64Type>();
        let hi = b.column_by_name("hi").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            rows += 1;
            bars.insert(
                (start.value(i), ticker.value(i).to_string()),
                (n.value(i), lo.value(i), hi.value(i)),
            );
        }
    }
    (bars, rows)
}

/// Members come and go while records arrive, half of them repeats, through a dedup and a
/// one-second window per ticker into one Delta table: every window the partitions' watermarks
/// passed is in the table once, with exactly the values computed here from the records, though
/// its partition's open windows moved between members many times.
fn group_members_write_each_window_once(protocol: &str) {
    let Some(b) = bootstrap() else {
        return;
    };
    let (dir, pb, topic) = new_topic(&b, &format!("weir-group-bars-{protocol}"));
    let d = dir.path();
    let table = d.join("bars");
    // The state on the test's object store when it runs (always under CI), by the consumer
    // protocol; else, and by the classic one, in a directory the members share.
    let state = match (protocol, crate::common::s3()) {
        ("consumer", Some((endpoint, key, secret, bucket))) => format!(
            "'state.dir' = 's3://{bucket}/{topic}/state', 's3.endpoint' = '{endpoint}', \
             's3.region' = 'us-east-1', 's3.access.key.id' = '{key}', \
             's3.secret.access.key' = '{secret}'"
        ),
        _ => format!("'state.dir' = '{}'", d.join("state").display()),
    };
    let sql = d.join("bars.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, timestamp TIMESTAMP, \
             WATERMARK FOR timestamp AS timestamp - INTERVAL '1 second') \
             WITH ('connector' = 'kafka', 'brokers' = '{b}', 'topic' = '{topic}', \
             'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}', \
             'group.id' = '{topic}', 'group.protocol' = '{protocol}', \
             'session.timeout.ms' = '6000', 'max.poll.interval.ms' = '20000', {state}, \
             'dedup.key' = 'ticker, sequence_number', 'commit.interval' = '300ms');\n\
             CREATE SINK bars FROM (\
               SELECT window_start, ticker, count(*) AS n, min(sequence_number) AS lo, \
                      max(sequence_number) AS hi \
               FROM TUMBLE(q, timestamp, INTERVAL '1 second') \
               GROUP BY window_start, window_end, ticker \
             ) WITH ('connector' = 'delta', 'path' = '{}', 'app.id' = 'bars');\n",
            pb.display(),
            table.display()
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let check = |members: &mut Vec<Member>| -> (Bars, usize) {
        for m in members.iter_mut() {
            if let Some(s) = m.child().try_wait().unwrap() {
                panic!(
                    "a member exited ({s}):\n{}",
                    std::fs::read_to_string(&m.stderr).unwrap_or_default()
                );
            }
        }
        let (bars, rows) = rt.block_on(table_bars(&table));
        assert_eq!(bars.len(), rows, "a window was written twice");
        (bars, rows)
    };
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let sending = producer(b.clone(), topic.clone(), Arc::clone(&stop.0), true);
    let (members, stopped) = churn(&sql, d, &mut |m| {
        check(m);
    });
    stop.0.store(true, Ordering::SeqCst);
    sending.join().unwrap();
    let mut members = members;
    let expected = rt.block_on(expected_bars(&b, &topic, &pb));
    assert!(expected.len() > 10_000, "too few bars: {}", expected.len());
    let deadline = Instant::now() + Duration::from_secs(180);
    let got = loop {
        let (got, _) = check(&mut members);
        if got.len() >= expected.len() {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} bars in the table 180 s after the last record was sent",
            got.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut logs = stopped.concat();
    for m in members {
        logs.push_str(&m.stop(false));
    }
    let wrong: Vec<_> = got
        .iter()
        .filter(|(k, v)| expected.get(k) != Some(v))
        .take(5)
        .collect();
    assert!(
        wrong.is_empty(),
        "bars not as computed from the records: {wrong:?}"
    );
    let (after, rows) = rt.block_on(table_bars(&table));
    assert_eq!(after.len(), rows, "a window was written twice");
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !after.contains_key(k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "bars missing after the stop: {missing:?}"
    );
    assert_eq!(after.len(), expected.len(), "more bars than computed");
    assert!(
        after.iter().all(|(k, v)| expected.get(k) == Some(v)),
        "bars changed by the stop"
    );
    assert!(
        logs.contains("restored the partition's open windows"),
        "no member restored a partition's windows:\n{logs}"
    );
}

/// Windows that move with their partitions, by Kafka 4's consumer group protocol.
#[test]
fn group_members_by_the_consumer_protocol_write_each_window_once() {
    group_members_write_each_window_once("consumer");
}

/// Windows that move with their partitions, by the classic protocol.
#[test]
fn group_members_by_the_classic_protocol_write_each_window_once() {
    group_members_write_each_window_once("classic");
}

/// What a consumer group cannot do yet, or what contradicts it, is refused with a message
/// naming the option, before any broker is asked (the address here has no broker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_options_that_cannot_work_are_refused_with_their_reason() {
    use weir::{Engine, EngineOptions};
    let source = |extra: &str| {
        format!(
            "CREATE SOURCE q (v VARCHAR) WITH ('connector' = 'kafka', 'brokers' = \
             '127.0.0.1:9', 'topic' = 't', 'encoding' = 'json'{extra});"
        )
    };
    let refused = |engine: Engine, sql: String, expect: &'static [&'static str]| async move {
        let err = engine.query(&sql).await.unwrap_err().to_string();
        for e in expect {
            assert!(err.contains(e), "{e:?} not in: {err}");
        }
    };
    let engine = || {
        Engine::new(EngineOptions {
            follow: true,
            ..EngineOptions::default()
        })
    };
    refused(
        engine(),
        source(", 'group.id' = 'g', 'partitions' = '0-3'"),
        &["'partitions' and 'group.id'"],
    )
    .await;
    refused(
        engine(),
        source(", 'group.protocol' = 'classic'"),
        &["'group.protocol'", "no 'group.id'"],
    )
    .await;
    refused(
        engine(),
        source(", 'group.id' = 'g', 'group.protocol' = 'eager'"),
        &["group.protocol", "eager"],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    // A group's 'state.dir' holds the partitions' dedup keys and a query's windows: a sink of
    // the rows as they are, without a dedup key, has no use for it.
    refused(
        engine(),
        format!(
            "{}\nCREATE SINK s FROM q WITH ('connector' = 'delta', 'path' = '{}');",
            source(&format!(
                ", 'group.id' = 'g', 'state.dir' = '{}'",
                dir.path().display()
            )),
            dir.path().join("table").display()
        ),
        &["'state.dir' and no 'dedup.key'", "give 'dedup.key'"],
    )
    .await;
    // A windowed query over a group's source keeps its windows under 'state.dir'.
    refused(
        engine(),
        format!(
            "CREATE SOURCE q (v VARCHAR, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '1 second') WITH ('connector' = 'kafka', \
             'brokers' = '127.0.0.1:9', 'topic' = 't', 'encoding' = 'json', 'group.id' = 'g');\n\
             CREATE SINK s FROM (SELECT window_start, v, count(*) AS n \
             FROM TUMBLE(q, ts, INTERVAL '1 second') GROUP BY window_start, window_end, v) \
             WITH ('connector' = 'delta', 'path' = '{}');",
            dir.path().join("bars").display()
        ),
        &["continuous query", "give the source 'state.dir'"],
    )
    .await;
    refused(
        engine(),
        source(&format!(
            ", 'group.id' = 'g', 'state.dir' = '{}', 'dedup.key' = 'v', \
             'dedup.block_cache' = '1MiB'",
            dir.path().display()
        )),
        &["'dedup.block_cache'", "outside a consumer group"],
    )
    .await;
    // Object-storage options on a Kafka source are for a group's 'state.dir' URL only.
    refused(
        engine(),
        source(", 's3.region' = 'eu-west-1'"),
        &["'s3.region'", "consumer group's 'state.dir'"],
    )
    .await;
    // A query, a file sink, or a run without --follow cannot follow the group's assignments.
    refused(
        engine(),
        format!("{}\nSELECT * FROM q;", source(", 'group.id' = 'g'")),
        &["consumer group 'g'", "only a `delta` or `kafka` sink"],
    )
    .await;
    let out = dir.path().join("out.jsonl");
    refused(
        engine(),
        format!(
            "{}\nCREATE SINK s FROM q WITH ('connector' = 'file', 'encoding' = 'json', \
             'framing' = 'lines', 'path' = '{}');",
            source(", 'group.id' = 'g'"),
            out.display()
        ),
        &["consumer group 'g'", "only a `delta` or `kafka` sink"],
    )
    .await;
    refused(
        Engine::new(EngineOptions::default()),
        format!(
            "{}\nCREATE SINK s FROM q WITH ('connector' = 'delta', 'path' = '{}');",
            source(", 'group.id' = 'g'"),
            dir.path().join("table").display()
        ),
        &["consumer group 'g'", "--follow"],
    )
    .await;
}

/// A group's Kafka sink whose topic is on another cluster than the group is refused, naming
/// both clusters: a transaction commits a group's offsets only on its own cluster, so every
/// step there would be refused as fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_sink_writing_another_cluster_is_refused() {
    let Some(b) = bootstrap() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_other, o) = crate::common::PrivateBroker::start(dir.path().join("kafka-run"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let topic = format!("weir-group-cluster-{}-{nanos}", std::process::id());
    create_topic(std::slice::from_ref(&b), &topic, 2, 1, &[], false).unwrap();
    create_topic(std::slice::from_ref(&o), "out", 2, 1, &[], false).unwrap();
    let engine = Engine::new(EngineOptions {
        follow: true,
        ..EngineOptions::default()
    });
    let err = engine
        .query(&format!(
            "CREATE SOURCE q (v VARCHAR) WITH ('connector' = 'kafka', 'brokers' = '{b}', \
             'topic' = '{topic}', 'encoding' = 'json', 'group.id' = '{topic}');\n\
             CREATE SINK s FROM q WITH ('connector' = 'kafka', 'brokers' = '{o}', \
             'topic' = 'out', 'encoding' = 'json');"
        ))
        .await
        .unwrap_err()
        .to_string();
    for expect in [
        "topic 'out' is on Kafka cluster",
        &format!("consumer group '{topic}' on cluster"),
        "only on its own cluster",
    ] {
        assert!(err.contains(expect), "{expect:?} not in: {err}");
    }
}
