//! `'connector' = 'kafka'` against a real broker (started by `scripts/test.sh`, which exports
//! `WEIR_KAFKA_BOOTSTRAP`). Without the variable the test is skipped with a notice; with it set
//! and the broker unreachable, it fails.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type};
use weir::{Engine, EngineOptions};
use weir_kafka::{create_topic, Producer, ProducerConfig};
use weir_testdata::{QuoteGenerator, STOCKS_PROTO};

fn bootstrap() -> Option<String> {
    let Ok(addr) = std::env::var("WEIR_KAFKA_BOOTSTRAP") else {
        eprintln!("NOTICE: kafka engine test skipped: WEIR_KAFKA_BOOTSTRAP is not set (scripts/test.sh sets it)");
        return None;
    };
    let sock = addr.parse().expect("WEIR_KAFKA_BOOTSTRAP is host:port");
    TcpStream::connect_timeout(&sock, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("WEIR_KAFKA_BOOTSTRAP={addr} is set but unreachable: {e}"));
    Some(addr)
}

fn topic(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{name}-{}-{nanos}", std::process::id())
}

fn rows(b: &[RecordBatch]) -> usize {
    b.iter().map(|b| b.num_rows()).sum()
}

#[test]
fn kafka_sources_decode_in_place_with_metadata_and_error_policy() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("stocks.proto");
    std::fs::write(&proto, STOCKS_PROTO).unwrap();
    let topic = topic("weir-engine-quotes");
    create_topic(std::slice::from_ref(&broker), &topic, 3, 1, &[], false).unwrap();
    let mut producer = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    // 3,000 quotes keyed by ticker, then one record that is not a quote, on partition 1.
    let mut g = QuoteGenerator::new(21);
    let mut want: HashMap<String, (i64, f64)> = HashMap::new();
    let mut msg = Vec::new();
    for _ in 0..3_000 {
        let q = g.next_quote();
        msg.clear();
        q.encode_protobuf(&mut msg);
        producer
            .send(None, Some(q.ticker.as_bytes()), &msg)
            .unwrap();
        let e = want.entry(q.ticker.to_string()).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += q.bid_price;
    }
    producer
        .send(Some(1), Some(b"bad"), &[0x0a, 0x05, b'x'])
        .unwrap();
    producer.flush().unwrap();

    let source = |extra: &str| {
        format!(
            "CREATE SOURCE q (ticker VARCHAR, bid_price DOUBLE)
               INCLUDE topic INCLUDE partition AS p INCLUDE offset AS o INCLUDE key AS k INCLUDE timestamp AS ts
             WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}',
                   'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}'{extra});",
            proto.display()
        )
    };
    // on.error = fail names topic, partition and offset.
    let engine = Engine::new(EngineOptions {
        partitions: 2,
        ..EngineOptions::default()
    });
    let err = rt
        .block_on(engine.query(&format!("{}\nSELECT count(*) FROM q;", source(""))))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("topic {topic} partition 1 offset")),
        "{err}"
    );
    assert!(err.contains("runs past the end"), "{err}");

    // skip: every good quote, grouped as the generator says, with its metadata.
    let engine = Engine::new(EngineOptions {
        partitions: 2,
        ..EngineOptions::default()
    });
    let got = rt
        .block_on(engine.query(&format!(
            "{}\nSELECT ticker, count(*), sum(bid_price), min(p), max(p), count(DISTINCT _weir_topic), sum(CASE WHEN CAST(k AS VARCHAR) = ticker THEN 1 ELSE 0 END), min(ts) FROM q GROUP BY ticker;",
            source(", 'on.error' = 'skip'")
        )))
        .unwrap();
    assert_eq!(rows(&got), want.len());
    let mut partitions_seen = std::collections::HashSet::new();
    for b in &got {
        let t = b.column(0).as_string::<i32>();
        let n = b.column(1).as_primitive::<Int64Type>();
        let sum = b.column(2).as_primitive::<Float64Type>();
        let lo = b.column(3).as_primitive::<Int32Type>();
        let keyed = b.column(6).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let (count, s) = want[t.value(i)];
            assert_eq!(n.value(i), count);
            assert!((sum.value(i) - s).abs() < 1e-6);
            assert_eq!(
                keyed.value(i),
                count,
                "the key column holds each record's key"
            );
            partitions_seen.insert(lo.value(i));
        }
        assert!(b.column(7).null_count() == 0);
    }
    assert!(
        partitions_seen.len() > 1,
        "quotes spread over partitions by key"
    );
    let r = &engine.source_reports()[0];
    assert_eq!((r.messages, r.decoded, r.skipped), (3_001, 3_000, 1));

    // Offsets are per partition and dense: 0..count on each.
    let engine = Engine::new(EngineOptions {
        partitions: 3,
        ..EngineOptions::default()
    });
    let got = rt
        .block_on(engine.query(&format!(
            "{}\nSELECT p, count(*), min(o), max(o) FROM q GROUP BY p ORDER BY p;",
            source(", 'on.error' = 'skip', 'partitions' = '0-2'")
        )))
        .unwrap();
    let b = arrow::compute::concat_batches(&got[0].schema(), &got).unwrap();
    let mut total = 0;
    for i in 0..b.num_rows() {
        let n = b.column(1).as_primitive::<Int64Type>().value(i);
        let lo = b.column(2).as_primitive::<Int64Type>().value(i);
        let hi = b.column(3).as_primitive::<Int64Type>().value(i);
        assert_eq!(lo, 0);
        let p = b.column(0).as_primitive::<Int32Type>().value(i);
        // Partition 1's bad record came last, so the good ones are still 0..n.
        assert_eq!(hi, n - 1, "partition {p}");
        total += n;
    }
    assert_eq!(total, 3_000);
    let r = &engine.source_reports()[0];
    assert_eq!(r.skipped, 1);
}

#[test]
fn gen_and_produce_load_a_topic_that_a_query_reads_back() {
    let Some(broker) = bootstrap() else { return };
    let dir = tempfile::tempdir().unwrap();
    let topic = topic("weir-cli");
    let url = format!("kafka://{broker}/{topic}");
    let weir = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let schema = dir.path().join("s");
    let file = dir.path().join("q.bin");
    weir(&[
        "gen",
        "quotes",
        "--count",
        "3000",
        "--to",
        &url,
        "--compression",
        "lz4",
        "--topic-partitions",
        "2",
        "--schema-dir",
        schema.to_str().unwrap(),
    ]);
    weir(&[
        "gen",
        "quotes",
        "--count",
        "500",
        "--seed",
        "9",
        "--out",
        file.to_str().unwrap(),
    ]);
    weir(&[
        "produce",
        "--input",
        file.to_str().unwrap(),
        "--to",
        &url,
        "--compression",
        "gzip",
    ]);
    let sql = dir.path().join("k.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE k (ticker VARCHAR) WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
             'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}');\nSELECT count(*) AS n FROM k;",
            schema.join("stocks.pb").display()
        ),
    )
    .unwrap();
    let out = dir.path().join("n.jsonl");
    weir(&[
        "run",
        "--quiet",
        sql.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        "{\"n\":3500}"
    );
}

#[test]
fn headers_and_tombstones() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let topic = topic("weir-headers");
    create_topic(std::slice::from_ref(&broker), &topic, 1, 1, &[], false).unwrap();
    let mut producer = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    let h1: [(&[u8], Option<&[u8]>); 2] = [(b"trace", Some(b"t1")), (b"n", None)];
    producer
        .send_with(Some(0), None, Some(b"a"), &h1, Some(1_000))
        .unwrap();
    producer
        .send_with(Some(0), None, Some(b"b"), &[], Some(2_000))
        .unwrap();
    producer
        .send_with(Some(0), Some(b"gone"), None, &[], Some(3_000))
        .unwrap();
    producer
        .send_with(
            Some(0),
            None,
            Some(b"c"),
            &[(b"k", Some(b"v"))],
            Some(4_000),
        )
        .unwrap();
    producer.flush().unwrap();
    let engine = Engine::new(EngineOptions::default());
    let got = rt
        .block_on(engine.query(&format!(
            "CREATE SOURCE r INCLUDE offset AS o INCLUDE headers AS h INCLUDE timestamp AS ts
             WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'raw', 'on.error' = 'skip');
             SELECT o, h, CAST(ts AS BIGINT) AS ms FROM r ORDER BY o;"
        )))
        .unwrap();
    let b = arrow::compute::concat_batches(&got[0].schema(), &got).unwrap();
    assert_eq!(
        b.column(0).as_primitive::<Int64Type>().values().to_vec(),
        [0, 1, 3]
    );
    let maps = b.column(1).as_map();
    let entries = |i: usize| {
        let m = maps.value(i);
        let keys = m.column(0).as_string::<i32>();
        let vals = m.column(1).as_binary::<i32>();
        (0..m.len())
            .map(|j| {
                let v = (!vals.is_null(j)).then(|| vals.value(j).to_vec());
                (keys.value(j).to_string(), v)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        entries(0),
        [
            ("trace".to_string(), Some(b"t1".to_vec())),
            ("n".to_string(), None)
        ]
    );
    assert_eq!(entries(1), []);
    assert_eq!(entries(2), [("k".to_string(), Some(b"v".to_vec()))]);
    let ms = b.column(2).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(ms, [1_000, 2_000, 4_000]);
    let r = &engine.source_reports()[0];
    assert_eq!(
        (r.decoded, r.skipped),
        (3, 1),
        "the tombstone is a bad message, skipped"
    );
}

#[test]
fn follow_mode_streams_new_records_into_a_sink_until_stopped() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topic = topic("weir-follow");
    create_topic(std::slice::from_ref(&broker), &topic, 2, 1, &[], false).unwrap();
    let mut producer = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    let send = |producer: &mut Producer, from: u32, to: u32| {
        for i in from..to {
            producer
                .send(None, Some(&i.to_be_bytes()), format!("m{i}").as_bytes())
                .unwrap();
        }
        producer.flush().unwrap();
    };
    send(&mut producer, 0, 100);
    let out = dir.path().join("live.jsonl");
    let engine = Engine::new(EngineOptions {
        follow: true,
        partitions: 2,
        ..EngineOptions::default()
    });
    rt.block_on(engine.query(&format!(
        "CREATE SOURCE r WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'raw');
         CREATE SINK live FROM (SELECT CAST(value AS VARCHAR) AS v FROM r WHERE octet_length(CAST(value AS VARCHAR)) > 0)
           WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'json', 'framing' = 'lines');",
        out.display()
    )))
    .unwrap();
    let wait_for = |n: u64| {
        for _ in 0..200 {
            if engine.source_reports()[0].decoded >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("never reached {n}: {:?}", engine.source_reports());
    };
    wait_for(100);
    send(&mut producer, 100, 150);
    wait_for(150);
    engine.stop();
    rt.block_on(engine.wait()).unwrap();
    rt.block_on(engine.finish()).unwrap();
    let mut got: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["v"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    got.sort();
    let mut want: Vec<String> = (0..150).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(got, want, "every record once: no gap, no duplicate");
}

/// The secure listeners of the test broker (`scripts/kafka.sh start --secure`): the SASL_SSL
/// address, the CA, the SCRAM user and password.
fn secure() -> Option<(String, String, String, String)> {
    let var = |n: &str| std::env::var(n).ok();
    match (
        var("WEIR_KAFKA_SASL_SSL"),
        var("WEIR_KAFKA_CA"),
        var("WEIR_KAFKA_SASL_USER"),
        var("WEIR_KAFKA_SASL_PASSWORD"),
    ) {
        (Some(a), Some(ca), Some(u), Some(p)) => Some((a, ca, u, p)),
        _ => {
            eprintln!("NOTICE: secure kafka engine test skipped: WEIR_KAFKA_SASL_SSL is not set (scripts/test.sh sets it)");
            None
        }
    }
}

#[test]
fn sources_gen_and_produce_reach_a_sasl_ssl_listener_without_a_secret_in_the_sql() {
    let Some((addr, ca, user, password)) = secure() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let topic = topic("weir-secure");
    let url = format!("kafka://{addr}/{topic}");
    // A Java properties file as Kafka's tools take it; the password comes from the
    // environment, not from the file.
    let config = dir.path().join("client.properties");
    std::fs::write(
        &config,
        format!(
            "# the broker's SASL_SSL listener\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.username={user}\nsasl.password=${{env:WEIR_TEST_KAFKA_PASSWORD}}\nssl.ca.location={ca}\n"
        ),
    )
    .unwrap();
    let weir = |args: &[&str], env_password: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .env("WEIR_TEST_KAFKA_PASSWORD", env_password)
            .output()
            .unwrap()
    };
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let schema = dir.path().join("s");
    let kc = config.to_str().unwrap();
    ok(weir(
        &[
            "gen",
            "quotes",
            "--count",
            "2000",
            "--to",
            &url,
            "--topic-partitions",
            "2",
            "--schema-dir",
            schema.to_str().unwrap(),
            "--kafka-config",
            kc,
        ],
        &password,
    ));
    let file = dir.path().join("q.bin");
    ok(weir(
        &[
            "gen",
            "quotes",
            "--count",
            "300",
            "--seed",
            "4",
            "--out",
            file.to_str().unwrap(),
        ],
        &password,
    ));
    ok(weir(
        &[
            "produce",
            "--input",
            file.to_str().unwrap(),
            "--to",
            &url,
            "--kafka-config",
            kc,
        ],
        &password,
    ));
    // A SQL source with its own security options, the secret as a reference.
    let sql = dir.path().join("k.sql");
    let write_sql = |mechanism: &str| {
        std::fs::write(
            &sql,
            format!(
                "CREATE SOURCE k (ticker VARCHAR) WITH ('connector' = 'kafka', 'brokers' = '{addr}', \
                 'topic' = '{topic}', 'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', \
                 'location' = '{}', 'security.protocol' = 'SASL_SSL', 'sasl.mechanism' = '{mechanism}', \
                 'sasl.username' = '{user}', 'sasl.password' = '${{env:WEIR_TEST_KAFKA_PASSWORD}}', \
                 'ssl.ca.location' = '{ca}');\nSELECT count(*) AS n FROM k;",
                schema.join("stocks.pb").display()
            ),
        )
        .unwrap()
    };
    write_sql("SCRAM-SHA-256");
    let out = dir.path().join("n.jsonl");
    let run = |password: &str| {
        weir(
            &[
                "run",
                "--quiet",
                sql.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
            ],
            password,
        )
    };
    ok(run(&password));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        "{\"n\":2300}"
    );
    // --kafka-config gives the defaults of every source: the same query without the options.
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE k (ticker VARCHAR) WITH ('connector' = 'kafka', 'brokers' = '{addr}', \
             'topic' = '{topic}', 'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', \
             'location' = '{}');\nSELECT count(*) AS n FROM k;",
            schema.join("stocks.pb").display()
        ),
    )
    .unwrap();
    ok(weir(
        &[
            "run",
            "--quiet",
            sql.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--kafka-config",
            kc,
        ],
        &password,
    ));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        "{\"n\":2300}"
    );
    // A wrong password: one line naming the user, the mechanism and the broker, never the
    // password itself.
    write_sql("SCRAM-SHA-256");
    let wrong = "not-the-password-4711";
    let o = run(wrong);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("authentication failed")
            && err.contains(&user)
            && err.contains("SCRAM-SHA-256")
            && err.contains(&addr),
        "{err}"
    );
    assert!(!err.contains(wrong), "the password leaked: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // An unset variable is named, with the option that refers to it.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--quiet", sql.to_str().unwrap()])
        .env_remove("WEIR_TEST_KAFKA_PASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'sasl.password'") && err.contains("WEIR_TEST_KAFKA_PASSWORD"),
        "{err}"
    );
}

#[test]
fn windows_over_kafka_partitions_close_on_the_slowest_partition_and_match_the_generator() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pb = crate::common::write_schema(dir.path());
    let topic = topic("weir-windows");
    create_topic(std::slice::from_ref(&broker), &topic, 3, 1, &[], false).unwrap();
    let mut producer = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    let start = crate::windows::START;
    let n = 30_000;
    let mut g = QuoteGenerator::new(8).with_event_time(start, 1_000_000);
    let mut msg = Vec::new();
    for _ in 0..n {
        msg.clear();
        let q = g.next_quote();
        q.encode_protobuf(&mut msg);
        producer
            .send(None, Some(q.ticker.as_bytes()), &msg)
            .unwrap();
    }
    producer.flush().unwrap();
    let want = crate::windows::reference(n, 8, start, 1_000_000, 1_000_000_000);
    let source = format!(
        "CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, \
         WATERMARK FOR timestamp AS timestamp - INTERVAL '100 milliseconds') \
         WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'protobuf', \
         'message' = 'stocks.QuoteNBBO', 'location' = '{}');",
        pb.display()
    );
    // Bounded: the end of every partition closes every window.
    for partitions in [1, 3] {
        let e = Engine::new(EngineOptions {
            partitions,
            ..EngineOptions::default()
        });
        let rows = rt
            .block_on(e.query(&format!("{source}\n{};", crate::windows::BARS)))
            .unwrap();
        assert_eq!(crate::windows::bars(&rows), want, "{partitions} readers");
    }
    // Follow: the windows the watermark has passed on every partition come out once; the last
    // ones stay open until the stop, which drops them.
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 2,
        ..EngineOptions::default()
    });
    let out = dir.path().join("bars.arrows");
    rt.block_on(e.run_script(
        &format!(
            "{source}\nCREATE SINK bars FROM ({}) WITH ('connector' = 'ipc', 'ipc.format' = 'stream', 'path' = '{}');",
            crate::windows::BARS,
            out.display()
        ),
        &mut crate::common::Collect::default(),
    ))
    .unwrap();
    // The watermark is the smallest over the partitions of (largest time - 100 ms): every
    // partition has quotes in the last tenth of a second, so it is within 0.2 s of the end.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let emitted = loop {
        let got = crate::windows::bars(&crate::windows::read_stream(&out));
        if got.len() + 2_000 >= want.len() && !got.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
            break crate::windows::bars(&crate::windows::read_stream(&out));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "windows did not close: {}",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    e.stop();
    rt.block_on(e.wait()).unwrap();
    rt.block_on(e.finish()).unwrap();
    // Every emitted window is exactly the bounded answer; the missing ones are the newest.
    assert!(!emitted.is_empty());
    let newest_emitted = emitted.keys().map(|(w, _)| *w).max().unwrap();
    for (k, v) in &want {
        match emitted.get(k) {
            Some(got) => assert_eq!(got, v, "{k:?}"),
            None => assert!(
                k.0 > newest_emitted - 1_000_000_000,
                "window {k:?} is missing"
            ),
        }
    }
    assert!(e.source_reports()[0].windows_dropped >= 1);
}

/// The `kafka` sink: rows of a file source land in a topic as JSON values keyed by ticker,
/// each key on the partition the Java client's murmur2 gives it, and read back by weir's Kafka
/// source they are the rows that went in. A key column that is missing and a topic that does
/// not exist are errors naming them.
#[test]
fn a_kafka_sink_writes_each_row_once_keyed_as_the_java_client_places_keys() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("q.jsonl");
    crate::common::write_quotes(
        &data,
        2_000,
        5,
        weir_testdata::QuoteFormat::Json,
        weir_codec::Framing::Lines,
    );
    let topic = topic("weir-sink-quotes");
    create_topic(std::slice::from_ref(&broker), &topic, 3, 1, &[], false).unwrap();
    let file_source = format!(
        "CREATE SOURCE f (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE) WITH \
         ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
         'fields.ticker' = 'base.ticker', 'fields.sequence_number' = 'base.sequence_number');",
        data.display()
    );
    let sink = |topic: &str, key: &str| {
        format!(
            "{file_source}\nCREATE SINK out FROM f WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'json', \
             'key' = '{key}', 'compression' = 'lz4');"
        )
    };
    let engine = Engine::new(EngineOptions {
        partitions: 2,
        ..EngineOptions::default()
    });
    rt.block_on(engine.query(&sink(&topic, "ticker"))).unwrap();
    let reports = rt.block_on(engine.finish()).unwrap();
    assert_eq!(reports[0].rows, 2_000);

    // What went in, by ticker.
    let by_ticker = "SELECT ticker, count(*), sum(sequence_number) FROM {} GROUP BY ticker";
    let query = |sql: String| {
        let engine = Engine::new(EngineOptions {
            partitions: 2,
            ..EngineOptions::default()
        });
        let got = rt.block_on(engine.query(&sql)).unwrap();
        let mut out = std::collections::BTreeMap::new();
        for b in &got {
            for i in 0..b.num_rows() {
                let t = b.column(0).as_string::<i32>().value(i).to_string();
                let rest: Vec<i64> = (1..b.num_columns())
                    .map(|c| b.column(c).as_primitive::<Int64Type>().value(i))
                    .collect();
                out.insert(t, rest);
            }
        }
        out
    };
    let sent = query(format!("{file_source}\n{};", by_ticker.replace("{}", "f")));
    // Read back: the same rows, each key on one partition (murmur2 of the key, as the Java
    // client), the key being the ticker.
    let read = query(format!(
        "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE) \
         INCLUDE partition AS p INCLUDE key AS kk WITH ('connector' = 'kafka', \
         'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'json');\n\
         SELECT ticker, count(*), sum(sequence_number), CAST(min(p) AS BIGINT), CAST(max(p) AS BIGINT), \
         sum(CASE WHEN CAST(kk AS VARCHAR) = ticker THEN 1 ELSE 0 END) FROM k GROUP BY ticker;"
    ));
    assert_eq!(read.len(), sent.len());
    assert!(sent.len() > 100 && !sent.contains_key(""), "{sent:?}");
    for (ticker, got) in &read {
        assert_eq!(&got[..2], &sent[ticker][..], "{ticker}");
        let want = i64::from((weir_kafka::murmur2(ticker.as_bytes()) & 0x7fff_ffff) % 3);
        assert_eq!((got[2], got[3]), (want, want), "{ticker}'s partition");
        assert_eq!(got[4], got[0], "{ticker}'s records are keyed by it");
    }

    // librdkafka's partitioner (CRC-32 of the key) and record timestamps from a column.
    let topic2 = format!("{topic}-crc");
    create_topic(std::slice::from_ref(&broker), &topic2, 3, 1, &[], false).unwrap();
    let engine = Engine::new(EngineOptions::default());
    let g_source = format!(
        "CREATE SOURCE g (ticker VARCHAR, ts TIMESTAMP) WITH ('connector' = 'file', \
         'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
         'fields.ticker' = 'base.ticker', 'fields.ts' = 'base.timestamp');",
        data.display()
    );
    rt.block_on(engine.query(&format!(
        "{g_source}\n\
         CREATE SINK out FROM g WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{topic2}', 'encoding' = 'json', 'key' = 'ticker', \
         'partitioner' = 'crc32', 'timestamp.column' = 'ts');"
    )))
    .unwrap();
    rt.block_on(engine.finish()).unwrap();
    let latest = query(format!(
        "{g_source}\nSELECT ticker, max(CAST(ts AS BIGINT)) / 1000000 FROM g GROUP BY ticker;"
    ));
    let read = query(format!(
        "CREATE SOURCE k (ticker VARCHAR) INCLUDE partition AS p INCLUDE timestamp AS rts \
         WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic2}', \
         'encoding' = 'json');\n\
         SELECT ticker, count(*), CAST(min(p) AS BIGINT), CAST(max(p) AS BIGINT), \
         max(CAST(rts AS BIGINT)) FROM k GROUP BY ticker;"
    ));
    assert_eq!(read.len(), sent.len());
    for (ticker, got) in &read {
        assert_eq!(got[0], sent[ticker][0], "{ticker}'s records");
        let want = i64::from(crc32fast::hash(ticker.as_bytes()) % 3);
        assert_eq!((got[1], got[2]), (want, want), "{ticker}'s partition");
        assert_eq!(
            got[3], latest[ticker][0],
            "{ticker}'s latest record time (ms)"
        );
    }

    // A key column the rows lack, and a topic that does not exist: one error each, naming it.
    for (topic, key, expect) in [
        (topic.as_str(), "symbol", "'key' = 'symbol'"),
        ("no-such-topic-weir", "ticker", "no-such-topic-weir"),
    ] {
        let engine = Engine::new(EngineOptions::default());
        let err = match rt.block_on(engine.query(&sink(topic, key))) {
            Err(e) => e.to_string(),
            Ok(_) => rt.block_on(engine.finish()).unwrap_err().to_string(),
        };
        assert!(err.contains(expect) && err.contains("sink out"), "{err}");
    }
}

/// Fed by a source with state, the kafka sink writes one transaction a step: a
/// `read_committed` reader finds every row once, a second run over the same input adds
/// nothing, and `'transactional.id'` on a sink without steps is refused.
#[test]
fn a_kafka_sink_fed_by_a_source_with_state_writes_one_transaction_a_step() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("q.jsonl");
    crate::common::write_quotes(
        &data,
        3_000,
        9,
        weir_testdata::QuoteFormat::Json,
        weir_codec::Framing::Lines,
    );
    let topic = topic("weir-sink-txn");
    create_topic(std::slice::from_ref(&broker), &topic, 3, 1, &[], false).unwrap();
    let source = |state: bool| {
        format!(
            "CREATE SOURCE f (ticker VARCHAR, sequence_number BIGINT) WITH \
             ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
             'fields.ticker' = 'base.ticker', 'fields.sequence_number' = 'base.sequence_number'{});",
            data.display(),
            if state {
                format!(
                    ", 'state.dir' = '{}', 'commit.interval' = '700 rows'",
                    dir.path().join("state").display()
                )
            } else {
                String::new()
            }
        )
    };
    let sink = format!(
        "CREATE SINK out FROM f WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{topic}', 'encoding' = 'json', 'key' = 'ticker', \
         'transactional.id' = '{topic}-writer');"
    );
    let run = |sql: String| {
        let engine = Engine::new(EngineOptions {
            partitions: 2,
            ..EngineOptions::default()
        });
        rt.block_on(engine.query(&sql))?;
        rt.block_on(engine.finish())
    };
    let reports = run(format!("{}\n{sink}", source(true))).unwrap();
    assert_eq!(reports[0].rows, 3_000);
    // Nothing new to read: no row is written again.
    let reports = run(format!("{}\n{sink}", source(true))).unwrap();
    assert_eq!(reports[0].rows, 0);

    let read = |isolation: &str| -> (usize, usize) {
        let engine = Engine::new(EngineOptions {
            partitions: 2,
            ..EngineOptions::default()
        });
        let got = rt
            .block_on(engine.query(&format!(
                "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT) WITH \
                 ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
                 'encoding' = 'json', 'isolation.level' = '{isolation}');\n\
                 SELECT count(*), count(DISTINCT (ticker, sequence_number)) FROM k;"
            )))
            .unwrap();
        let col = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0) as usize;
        (col(0), col(1))
    };
    let (rows, distinct) = read("read_committed");
    assert_eq!((rows, distinct), (3_000, 3_000));

    let e = run(format!("{}\n{sink}", source(false)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'transactional.id'") && e.contains("'state.dir'"),
        "{e}"
    );
    let e = run(format!(
        "{}\nCREATE SINK out FROM f WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{topic}', 'encoding' = 'json', 'on.transaction.timeout' = 'continue');",
        source(false)
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("'on.transaction.timeout'") && e.contains("'state.dir'"),
        "{e}"
    );
}

/// A start after a stop between a step's state commit and its transaction's commit, later than
/// the transaction's timeout: the coordinator has aborted the transaction, so its rows are not
/// in the topic although the state counts them. The start stops and names the step, rather
/// than taking the transaction for committed; `'on.transaction.timeout' = 'continue'` goes on.
#[test]
fn a_transaction_its_coordinator_aborted_stops_the_next_start() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("q.jsonl");
    let state = dir.path().join("state");
    crate::common::write_quotes(
        &data,
        1_000,
        5,
        weir_testdata::QuoteFormat::Json,
        weir_codec::Framing::Lines,
    );
    let topic = topic("weir-sink-lost-txn");
    create_topic(std::slice::from_ref(&broker), &topic, 1, 1, &[], false).unwrap();
    let id = format!("{topic}-writer");
    let script = |extra: &str| {
        format!(
            "CREATE SOURCE f (ticker VARCHAR, sequence_number BIGINT) WITH \
             ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
             'fields.ticker' = 'base.ticker', 'fields.sequence_number' = 'base.sequence_number', \
             'state.dir' = '{}', 'commit.interval' = '300 rows');\n\
             CREATE SINK out FROM f WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
             'topic' = '{topic}', 'encoding' = 'json', 'transactional.id' = '{id}'{extra});",
            data.display(),
            state.display()
        )
    };
    let run = |sql: String| {
        let engine = Engine::new(EngineOptions::default());
        rt.block_on(engine.query(&sql))?;
        rt.block_on(engine.finish())
    };
    assert_eq!(run(script("")).unwrap()[0].rows, 1_000);

    // What a stop between the two commits of one more step leaves: the state records that
    // step's transaction (here one row, written by the test as the sink's id), and it stays
    // open past its timeout, so its coordinator aborts it.
    let producer = ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        transactional_id: Some(id.clone()),
        transaction_timeout: Duration::from_secs(2),
        ..ProducerConfig::default()
    };
    let mut p = Producer::connect(&producer).unwrap();
    p.begin_transaction().unwrap();
    p.send(None, None, br#"{"ticker": "LOST", "sequence_number": -1}"#)
        .unwrap();
    p.flush().unwrap();
    let (pid, epoch) = p.producer_identity();
    drop(p);
    let mut store =
        weir_dedup::StateStore::open(&state, weir_dedup::StateOptions::default()).unwrap();
    let mut step = store.checkpoint().clone();
    step.files = vec![format!("kafka-transaction:{id}:{pid}:{epoch}")];
    store.commit(step).unwrap();
    store.finish().unwrap();
    let lost_step = store.checkpoint().step;
    drop(store);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while weir_kafka::describe_transaction(&producer)
        .unwrap()
        .is_none_or(|s| s.state != "CompleteAbort")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the coordinator did not abort the open transaction within a minute"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every start stops until the user decides (a supervisor restarting weir included).
    for _ in 0..2 {
        let e = run(script("")).unwrap_err().to_string();
        assert!(
            e.contains(&format!("the transaction of step {lost_step} "))
                && e.contains("aborted by its coordinator")
                && e.contains("timeout (2000 ms)")
                && e.contains(&format!("not in topic '{topic}'"))
                && e.contains("'on.transaction.timeout' = 'continue'"),
            "{e}"
        );
    }
    // Going on without the step's rows is the user's choice.
    let reports = run(script(", 'on.transaction.timeout' = 'continue'")).unwrap();
    assert_eq!(reports[0].rows, 0);
    let engine = Engine::new(EngineOptions::default());
    let got = rt
        .block_on(engine.query(&format!(
            "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT) WITH \
             ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
             'encoding' = 'json', 'isolation.level' = 'read_committed');\n\
             SELECT count(*), count(DISTINCT (ticker, sequence_number)), \
             count(*) FILTER (WHERE ticker = 'LOST') FROM k;"
        )))
        .unwrap();
    let col = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0);
    assert_eq!((col(0), col(1), col(2)), (1_000, 1_000, 0));
}

/// `'headers.column'`: each row's map entries become its record's headers, which a kafka
/// source reads back with `INCLUDE headers`.
#[test]
fn a_kafka_sink_writes_headers_from_a_map_column() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("q.jsonl");
    crate::common::write_quotes(
        &data,
        500,
        3,
        weir_testdata::QuoteFormat::Json,
        weir_codec::Framing::Lines,
    );
    let topic = topic("weir-sink-headers");
    create_topic(std::slice::from_ref(&broker), &topic, 2, 1, &[], false).unwrap();
    let engine = Engine::new(EngineOptions {
        partitions: 2,
        ..EngineOptions::default()
    });
    rt.block_on(engine.query(&format!(
        "CREATE SOURCE f (ticker VARCHAR, sequence_number BIGINT) WITH \
         ('connector' = 'file', 'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
         'fields.ticker' = 'base.ticker', 'fields.sequence_number' = 'base.sequence_number');\n\
         CREATE SINK out FROM (SELECT ticker, sequence_number, \
           map(['seq', 'from'], [CAST(sequence_number AS VARCHAR), 'weir']) AS hs FROM f) \
         WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
         'encoding' = 'json', 'headers.column' = 'hs');",
        data.display()
    )))
    .unwrap();
    rt.block_on(engine.finish()).unwrap();

    let engine = Engine::new(EngineOptions {
        partitions: 2,
        ..EngineOptions::default()
    });
    let got = rt
        .block_on(engine.query(&format!(
            "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT) INCLUDE headers AS h \
             WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
             'encoding' = 'json');\n\
             SELECT count(*), \
               sum(CASE WHEN CAST(h['seq'] AS VARCHAR) = CAST(sequence_number AS VARCHAR) \
                   AND CAST(h['from'] AS VARCHAR) = 'weir' THEN 1 ELSE 0 END), \
               CAST(min(cardinality(h)) AS BIGINT), CAST(max(cardinality(h)) AS BIGINT) FROM k;"
        )))
        .unwrap();
    let col = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0);
    assert_eq!((col(0), col(1), col(2), col(3)), (500, 500, 2, 2));

    // A column that is not a map of text keys is refused, naming it.
    let engine = Engine::new(EngineOptions::default());
    let e = match rt.block_on(engine.query(&format!(
        "CREATE SOURCE f (ticker VARCHAR) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json', 'fields.ticker' = 'base.ticker');\n\
         CREATE SINK out FROM f WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{topic}', 'encoding' = 'json', 'headers.column' = 'ticker');",
        data.display()
    ))) {
        Err(e) => e.to_string(),
        Ok(_) => rt.block_on(engine.finish()).unwrap_err().to_string(),
    };
    assert!(e.contains("headers column 'ticker'"), "{e}");
}

/// In follow mode a kafka sink sends its batches after `'linger.ms'` even when they are far
/// from full and no more rows come: a reader sees every record while the run goes on.
#[test]
fn a_kafka_sink_in_follow_mode_sends_after_linger_without_more_rows() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let input = topic("weir-linger-in");
    let output = topic("weir-linger-out");
    for t in [&input, &output] {
        create_topic(std::slice::from_ref(&broker), t, 2, 1, &[], false).unwrap();
    }
    let mut producer = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: input.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    for i in 0..100u32 {
        producer
            .send(None, Some(&i.to_be_bytes()), format!("m{i}").as_bytes())
            .unwrap();
    }
    producer.flush().unwrap();
    let engine = Engine::new(EngineOptions {
        follow: true,
        partitions: 2,
        ..EngineOptions::default()
    });
    rt.block_on(engine.query(&format!(
        "CREATE SOURCE r WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{input}', 'encoding' = 'raw');
         CREATE SINK relay FROM r WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{output}',
           'encoding' = 'raw', 'linger.ms' = '20');"
    )))
    .unwrap();
    let relayed = || -> i64 {
        let reader = Engine::new(EngineOptions::default());
        let got = rt
            .block_on(reader.query(&format!(
                "CREATE SOURCE o WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
                 'topic' = '{output}', 'encoding' = 'raw');\nSELECT count(*) FROM o;"
            )))
            .unwrap();
        got[0].column(0).as_primitive::<Int64Type>().value(0)
    };
    let mut seen = 0;
    for _ in 0..200 {
        seen = relayed();
        if seen == 100 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(seen, 100, "the relay's records while it runs");
    engine.stop();
    rt.block_on(engine.wait()).unwrap();
    rt.block_on(engine.finish()).unwrap();
    assert_eq!(relayed(), 100, "and no record again at the stop");
}

/// A row the protobuf encoder cannot write (a name that is no value of its enum) follows the
/// sink's `'on.error'`: it stops the run naming the column, or is left out (skipped, or written
/// to the dead-letter file with its columns) while every other row reaches the topic.
/// `trade.proto` in `dir`: `t.Trade` of a ticker, a side enum (BID, ASK) and a sequence
/// number, the sink tests' output message.
fn write_trade_proto(dir: &std::path::Path) -> std::path::PathBuf {
    let proto = dir.join("trade.proto");
    std::fs::write(
        &proto,
        "syntax = \"proto3\"; package t; enum Side { BID = 0; ASK = 1; }\n\
         message Trade { string ticker = 1; Side side = 2; int64 seq = 3; }\n",
    )
    .unwrap();
    proto
}

#[test]
fn a_row_the_encoder_cannot_write_follows_the_sinks_on_error() {
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("q.jsonl");
    crate::common::write_quotes(
        &data,
        700,
        5,
        weir_testdata::QuoteFormat::Json,
        weir_codec::Framing::Lines,
    );
    let proto = write_trade_proto(dir.path());
    let source = format!(
        "CREATE SOURCE f (ticker VARCHAR, seq BIGINT) WITH ('connector' = 'file', \
         'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', \
         'fields.ticker' = 'base.ticker', 'fields.seq' = 'base.sequence_number');",
        data.display()
    );
    // Every seventh sequence number gets a side that Side does not have.
    let sink = |topic: &str, extra: &str| {
        format!(
            "{source}\nCREATE SINK out FROM (SELECT ticker, \
               CASE WHEN seq % 7 = 3 THEN 'BOGUS' WHEN seq % 2 = 0 THEN 'BID' ELSE 'ASK' END \
                 AS side, seq FROM f) \
             WITH ('connector' = 'kafka', 'brokers' = '{broker}', 'topic' = '{topic}', \
             'encoding' = 'protobuf', 'message' = 't.Trade', 'location' = '{}'{extra});",
            proto.display()
        )
    };
    let run = |sql: String| -> Result<(), String> {
        let engine = Engine::new(EngineOptions::default());
        rt.block_on(engine.query(&sql)).map_err(|e| e.to_string())?;
        rt.block_on(engine.finish())
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let count = |sql: String| -> i64 {
        let engine = Engine::new(EngineOptions::default());
        let got = rt.block_on(engine.query(&sql)).unwrap();
        got[0].column(0).as_primitive::<Int64Type>().value(0)
    };
    let bad = count(format!(
        "{source}\nSELECT CAST(count(*) AS BIGINT) FROM f WHERE seq % 7 = 3;"
    ));
    assert!(bad > 0 && bad < 700, "{bad}");
    let read_back = |topic: &str| {
        count(format!(
            "CREATE SOURCE k (seq BIGINT, side VARCHAR) WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'protobuf', \
             'message' = 't.Trade', 'location' = '{}');\n\
             SELECT CAST(count(*) AS BIGINT) FROM k WHERE seq % 7 <> 3 \
               AND side = CASE WHEN seq % 2 = 0 THEN 'BID' ELSE 'ASK' END;",
            proto.display()
        ))
    };

    // fail: the run stops, naming the column and the value.
    let t = topic("weir-sink-on-error-fail");
    create_topic(std::slice::from_ref(&broker), &t, 1, 1, &[], false).unwrap();
    let e = run(sink(&t, "")).unwrap_err();
    assert!(
        e.contains("column 'side'") && e.contains("'BOGUS'") && e.contains("t.Side"),
        "{e}"
    );

    // skip: every other row is in the topic, and only those.
    let t = topic("weir-sink-on-error-skip");
    create_topic(std::slice::from_ref(&broker), &t, 2, 1, &[], false).unwrap();
    run(sink(&t, ", 'on.error' = 'skip'")).unwrap();
    assert_eq!(read_back(&t), 700 - bad);
    let all = count(format!(
        "CREATE SOURCE k (seq BIGINT) WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{t}', 'encoding' = 'protobuf', 'message' = 't.Trade', 'location' = '{}');\n\
         SELECT CAST(count(*) AS BIGINT) FROM k;",
        proto.display()
    ));
    assert_eq!(all, 700 - bad, "no refused row reached the topic");

    // dead_letter: the same rows in the topic, the refused ones in the file with their columns.
    let t = topic("weir-sink-on-error-dead");
    create_topic(std::slice::from_ref(&broker), &t, 2, 1, &[], false).unwrap();
    let dead = dir.path().join("dead.jsonl");
    run(sink(
        &t,
        &format!(
            ", 'on.error' = 'dead_letter', 'dead_letter.path' = '{}'",
            dead.display()
        ),
    ))
    .unwrap();
    assert_eq!(read_back(&t), 700 - bad);
    let text = std::fs::read_to_string(&dead).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len() as i64, bad, "{text}");
    for l in &lines {
        assert_eq!(l["sink"], "out");
        assert_eq!(l["topic"], t.as_str());
        assert_eq!(l["row"]["side"], "BOGUS");
        assert_eq!(l["row"]["seq"].as_i64().unwrap() % 7, 3, "{l}");
        assert!(l["error"].as_str().unwrap().contains("'BOGUS'"), "{l}");
    }
    // 'dead_letter' without a path is refused before anything runs.
    let e = run(sink(&t, ", 'on.error' = 'dead_letter'")).unwrap_err();
    assert!(e.contains("dead_letter.path"), "{e}");
}

/// One transaction a step, the rows the encoder refuses reach the dead-letter file once: a
/// step's refused rows are recorded with its state commit and appended once its transaction
/// commits, and a start puts the file back to what the last step committed (here after the
/// file lost its tail and gained a torn line, as a stop between the two commits leaves it).
#[test]
fn a_kafka_sink_one_transaction_a_step_dead_letters_each_refused_row_once() {
    use std::io::Write as _;
    let Some(broker) = bootstrap() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("trades.jsonl");
    // Every seventh sequence number has a side that Side does not have, the last row's too.
    let side = |n: u64| match n % 7 {
        3 => "BOGUS",
        _ if n % 2 == 0 => "BID",
        _ => "ASK",
    };
    let write_rows = |range: std::ops::Range<u64>| {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&data)
            .unwrap();
        for n in range {
            writeln!(
                f,
                r#"{{"ticker": "T{}", "side": "{}", "seq": {n}}}"#,
                n % 10,
                side(n)
            )
            .unwrap();
        }
    };
    write_rows(0..3_000);
    let proto = write_trade_proto(dir.path());
    let topic = topic("weir-sink-txn-dead");
    create_topic(std::slice::from_ref(&broker), &topic, 2, 1, &[], false).unwrap();
    let dead = dir.path().join("dead.jsonl");
    let sql = format!(
        "CREATE SOURCE f (ticker VARCHAR, side VARCHAR, seq BIGINT) WITH ('connector' = 'file', \
         'path' = '{}', 'framing' = 'lines', 'encoding' = 'json', 'state.dir' = '{}', \
         'commit.interval' = '500 rows');\n\
         CREATE SINK out FROM f WITH ('connector' = 'kafka', 'brokers' = '{broker}', \
         'topic' = '{topic}', 'encoding' = 'protobuf', 'message' = 't.Trade', \
         'location' = '{}', 'transactional.id' = '{topic}-writer', 'on.error' = 'dead_letter', \
         'dead_letter.path' = '{}');",
        data.display(),
        dir.path().join("state").display(),
        proto.display(),
        dead.display()
    );
    let run = || {
        let engine = Engine::new(EngineOptions {
            partitions: 2,
            ..EngineOptions::default()
        });
        rt.block_on(engine.query(&sql)).unwrap();
        rt.block_on(engine.finish()).unwrap()
    };
    // The dead letters' sequence numbers, sorted, and each line's fields checked.
    let dead_seqs = || -> Vec<u64> {
        let text = std::fs::read_to_string(&dead).unwrap();
        let mut seqs: Vec<u64> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["row"]["side"], "BOGUS", "{l}");
                assert_eq!(v["topic"], topic.as_str(), "{l}");
                v["row"]["seq"].as_u64().unwrap()
            })
            .collect();
        seqs.sort_unstable();
        seqs
    };
    let bogus = |end: u64| -> Vec<u64> { (0..end).filter(|n| n % 7 == 3).collect() };

    assert_eq!(run()[0].rows, 3_000);
    assert_eq!(dead_seqs(), bogus(3_000));
    let committed = std::fs::read_to_string(&dead).unwrap();

    // The file as a stop between the state commit and the append leaves it: the last lines
    // short, a torn one after them. The next start puts back exactly the committed lines.
    let mut torn = committed.as_bytes()[..committed.len() - 40].to_vec();
    torn.extend_from_slice(b"{\"sink\":\"out\",\"topic\":\"torn");
    std::fs::write(&dead, &torn).unwrap();
    assert_eq!(run()[0].rows, 0, "nothing new to read");
    assert_eq!(std::fs::read_to_string(&dead).unwrap(), committed);

    // More rows: their refused ones are appended, each once.
    write_rows(3_000..4_000);
    assert_eq!(run()[0].rows, 1_000);
    assert_eq!(dead_seqs(), bogus(4_000));
}

/// The broker of a run that writes a kafka sink one transaction a step restarts mid-run: the
/// run goes on (its source reconnects; the sink writes the step's transaction again with a new
/// producer, or settles the one it was committing), and a `read_committed` reader finds every
/// distinct key of the input once, the input sent before and after the restart.
#[test]
fn a_kafka_sink_keeps_every_row_once_through_a_broker_restart() {
    sink_through_a_broker_restart(true);
}

/// The same without state (at least once): the sink's producer sends again what was in
/// flight on the lost connections, and every message of the input reaches the topic.
#[test]
fn a_kafka_sink_without_state_loses_nothing_through_a_broker_restart() {
    sink_through_a_broker_restart(false);
}

fn sink_through_a_broker_restart(exactly_once: bool) {
    use crate::common::{interrupt, spawn, PrivateBroker};
    if bootstrap().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (broker, b) = PrivateBroker::start(d.join("kafka-run"));
    let pb = crate::common::write_schema(d);
    let send = |seed: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["gen", "quotes", "--count", "40000", "--duplicates", "0.1"])
            .args(["--seed", seed, "--to", &format!("kafka://{b}/in")])
            .args(["--topic-partitions", "3"])
            .output()
            .unwrap();
        assert!(out.status.success(), "weir gen: {out:?}");
    };
    // The distinct keys of both chunks, from the same generator.
    let mut keys = std::collections::HashSet::new();
    for seed in [11, 12] {
        let mut g = QuoteGenerator::new(seed).with_duplicates(0.1);
        for _ in 0..40_000 {
            let q = g.next_or_repeat();
            keys.insert((q.ticker.to_string(), q.sequence_number));
        }
    }
    send("11");
    create_topic(std::slice::from_ref(&b), "out", 3, 1, &[], false).unwrap();
    let sql = d.join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE) \
             WITH ('connector' = 'kafka', 'brokers' = '{b}', 'topic' = 'in', \
             'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}'{});\n\
             CREATE SINK out FROM q WITH ('connector' = 'kafka', 'brokers' = '{b}', \
             'topic' = 'out', 'encoding' = 'json', 'key' = 'ticker'{});\n",
            pb.display(),
            if exactly_once {
                format!(
                    ", 'state.dir' = '{}', 'dedup.key' = 'ticker,sequence_number', \
                     'commit.interval' = '200ms, 4000 rows'",
                    d.join("state").display()
                )
            } else {
                String::new()
            },
            if exactly_once {
                ", 'transactional.id' = 'restart-writer'"
            } else {
                ""
            }
        ),
    )
    .unwrap();
    let err = d.join("stderr");
    let mut child = spawn(
        &["run", "--follow", "--quiet", &sql.display().to_string()],
        &err,
    );
    let committed = || -> (usize, usize) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let engine = Engine::new(EngineOptions {
            partitions: 1,
            ..EngineOptions::default()
        });
        let got = rt
            .block_on(engine.query(&format!(
                "CREATE SOURCE k (ticker VARCHAR, sequence_number BIGINT) WITH \
                 ('connector' = 'kafka', 'brokers' = '{b}', 'topic' = 'out', \
                 'encoding' = 'json', 'isolation.level' = 'read_committed');\n\
                 SELECT count(*), count(DISTINCT (ticker, sequence_number)) FROM k;"
            )))
            .unwrap();
        let col = |c: usize| got[0].column(c).as_primitive::<Int64Type>().value(0) as usize;
        (col(0), col(1))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut wait_for = |what: &str, done: &dyn Fn((usize, usize)) -> bool| loop {
        if let Some(s) = child.try_wait().unwrap() {
            panic!(
                "weir exited ({s}) before {what}:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        let got = committed();
        if done(got) {
            return got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {got:?} committed after 180 s"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // Some steps committed, then the broker goes away while the run is writing.
    wait_for("the first steps", &|(rows, _)| rows > 0);
    let restarted = PrivateBroker::kafka_sh(&broker.run, "restart");
    assert!(
        restarted.status.success(),
        "the restart failed: {}",
        String::from_utf8_lossy(&restarted.stderr)
    );
    send("12");
    // Exactly once: each distinct key once. At least once: every message of the input (its
    // repeats included, as there is no dedup).
    let want = if exactly_once { keys.len() } else { 80_000 };
    let (rows, distinct) = wait_for("every row", &|(rows, distinct)| {
        rows >= want && distinct >= keys.len()
    });
    let log = interrupt(child, &err);
    // The sink met the restart (not only the source) and carried on.
    assert!(
        log.contains("the broker is unreachable") || log.contains("sent again"),
        "{log}"
    );
    if exactly_once {
        assert_eq!((rows, distinct), (want, keys.len()), "doubled or missing");
    }
    let (rows, distinct) = committed();
    assert_eq!(distinct, keys.len(), "a key is missing after the stop");
    if exactly_once {
        assert_eq!(rows, want, "doubled after the stop");
    } else {
        assert!(rows >= want, "{rows} of {want} messages after the stop");
    }
}
