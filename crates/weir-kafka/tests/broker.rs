//! weir's consumer and producer against a real Apache Kafka broker (started by
//! `scripts/test.sh` through `scripts/kafka.sh`; see `common::bootstrap`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{
    bootstrap, config, drain, java_load, java_value, serial, topic, try_java_load, PrivateBroker,
};
use weir_kafka::{
    committed_offsets, GroupConfig, GroupEvent, GroupMember, GroupMetadata, GroupProtocol,
    SecurityConfig,
};
use weir_kafka::{
    create_topic, describe_transaction, murmur2, settle_transaction, Compression, Consumer, Error,
    Isolation, OffsetReset, PartitionSelection, PollStatus, Producer, ProducerConfig, Settled,
    StartupMode, TransactionProtocol,
};

/// Data written by Kafka's Java producer with each codec reads back exactly: every record once,
/// in offset order per partition, with its key, value, header and a plausible timestamp.
#[test]
fn java_producer_batches_with_every_codec() {
    let _serial = serial();
    let Some(b) = bootstrap("java_producer_batches_with_every_codec") else {
        return;
    };
    let (partitions, count) = (3usize, 3000usize);
    // The load is Kafka's Java producer against the broker, before weir reads anything. It is
    // tried a second time on fresh topics if it fails (a loaded 2-core CI machine once left one
    // batch unanswered for the producer's whole 120 s delivery timeout); the first failure is
    // printed. What weir reads is checked in full either way.
    let mut prefix = topic("codecs");
    let load = |prefix: &str| {
        try_java_load(&[
            "codecs",
            &b,
            prefix,
            &partitions.to_string(),
            &count.to_string(),
        ])
    };
    if let Err(first) = load(&prefix) {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "NOTICE: the Java producer's load failed once; loading fresh topics again.\n{first}"
        );
        prefix = topic("codecs");
        if let Err(second) = load(&prefix) {
            panic!("the Java producer's load failed twice.\nfirst: {first}\nsecond: {second}");
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let t = format!("{prefix}-{codec}");
        let mut c = Consumer::connect(&config(&b, &t)).unwrap();
        let got = drain(&mut c);
        let total: usize = got.values().map(Vec::len).sum();
        assert_eq!(total, count, "{codec}: record count");
        for p in 0..partitions {
            let recs = &got[&(p as i32)];
            for (k, r) in recs.iter().enumerate() {
                let i = p + k * partitions;
                assert_eq!(r.offset, k as i64, "{codec} p{p}");
                assert_eq!(
                    r.key.as_deref(),
                    Some(format!("k{i}").as_bytes()),
                    "{codec}"
                );
                assert_eq!(r.value.as_deref(), Some(&java_value(i)[..]), "{codec}");
                assert_eq!(
                    r.headers,
                    vec![(b"i".to_vec(), Some(i.to_string().into_bytes()))],
                    "{codec}"
                );
                assert!(r.timestamp > now - 600_000 && r.timestamp <= now + 60_000);
            }
            assert_eq!(c.position(p as i32), Some(recs.len() as i64));
        }
    }
}

/// Transactions from the Java producer, some committed and some aborted: read_committed returns
/// exactly the committed records and no control records; read_uncommitted returns all records.
#[test]
fn read_committed_drops_aborted_transactions() {
    let _serial = serial();
    let Some(b) = bootstrap("read_committed_drops_aborted_transactions") else {
        return;
    };
    let t = topic("tx");
    let (partitions, txns, per) = (2usize, 12usize, 7usize);
    java_load(&[
        "tx",
        &b,
        &t,
        &partitions.to_string(),
        &txns.to_string(),
        &per.to_string(),
    ]);
    let expected = |committed_only: bool| -> BTreeSet<String> {
        (0..txns)
            .filter(|t| !committed_only || t % 3 != 1)
            .flat_map(|t| (0..per).map(move |j| format!("t{t}-{j}")))
            .collect()
    };
    for (isolation, committed_only) in [
        (Isolation::ReadCommitted, true),
        (Isolation::ReadUncommitted, false),
    ] {
        let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
            isolation,
            ..config(&b, &t)
        })
        .unwrap();
        let got = drain(&mut c);
        let mut values = Vec::new();
        for recs in got.values() {
            let mut last = -1;
            for r in recs {
                assert!(r.offset > last);
                last = r.offset;
                let v = String::from_utf8(r.value.clone().unwrap()).unwrap();
                let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
                assert_eq!(key, format!("k{}", &v[1..]));
                values.push(v);
            }
        }
        let set: BTreeSet<String> = values.iter().cloned().collect();
        assert_eq!(set.len(), values.len(), "{isolation:?}: duplicates");
        assert_eq!(set, expected(committed_only), "{isolation:?}");
        // The commit/abort markers take offsets too: the read ends past the last one.
        for p in 0..partitions as i32 {
            assert_eq!(c.position(p), c.end_offset(p));
        }
    }
}

/// weir's own producer with each codec; a static partition subset; keys partitioned as the Java
/// client would; every startup mode.
#[test]
fn producer_round_trip_partitions_and_startup_modes() {
    let _serial = serial();
    let Some(b) = bootstrap("producer_round_trip_partitions_and_startup_modes") else {
        return;
    };
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let t = topic(&format!("rt-{}", codec.name()));
        create_topic(std::slice::from_ref(&b), &t, 4, 1, &[], false).unwrap();
        let mut p = Producer::connect(&ProducerConfig {
            brokers: vec![b.clone()],
            topic: t.clone(),
            compression: codec,
            batch_bytes: 16 << 10,
            ..ProducerConfig::default()
        })
        .unwrap();
        let n = 4000;
        for i in 0..n {
            let key = format!("key-{i}");
            let value = format!("value-{i}");
            p.send_with(
                None,
                Some(key.as_bytes()),
                if i % 100 == 99 {
                    None
                } else {
                    Some(value.as_bytes())
                },
                &[(b"n", Some(i.to_string().as_bytes())), (b"null", None)],
                Some(1_700_000_000_000 + i as i64),
            )
            .unwrap();
        }
        p.flush().unwrap();

        // Partitions 1 and 3 only.
        let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
            partitions: PartitionSelection::List(vec![1, 3]),
            ..config(&b, &t)
        })
        .unwrap();
        assert_eq!(c.partitions(), vec![1, 3]);
        let got = drain(&mut c);
        let expect: Vec<usize> = (0..n)
            .filter(|i| {
                let part = (murmur2(format!("key-{i}").as_bytes()) & 0x7fff_ffff) % 4;
                part == 1 || part == 3
            })
            .collect();
        let mut seen = Vec::new();
        for (part, recs) in &got {
            assert!(*part == 1 || *part == 3);
            for (k, r) in recs.iter().enumerate() {
                assert_eq!(r.offset, k as i64);
                let i: usize = std::str::from_utf8(&r.headers[0].1.clone().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(r.key.as_deref(), Some(format!("key-{i}").as_bytes()));
                if i % 100 == 99 {
                    assert_eq!(r.value, None);
                } else {
                    assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
                }
                assert_eq!(r.headers[1], (b"null".to_vec(), None));
                assert_eq!(r.timestamp, 1_700_000_000_000 + i as i64);
                seen.push(i);
            }
        }
        seen.sort_unstable();
        if seen != expect {
            let missing: Vec<usize> = expect
                .iter()
                .filter(|i| seen.binary_search(i).is_err())
                .copied()
                .collect();
            let repeated: Vec<usize> = seen
                .windows(2)
                .filter(|w| w[0] == w[1])
                .map(|w| w[0])
                .collect();
            let sizes: Vec<(i32, usize)> = got.iter().map(|(p, r)| (*p, r.len())).collect();
            panic!(
                "{codec:?}: read {} records of {} expected ({sizes:?} by partition); \
                 missing {missing:?}; repeated {repeated:?}",
                seen.len(),
                expect.len()
            );
        }

        if codec != Compression::None {
            continue;
        }
        // Startup modes, checked on one codec: Offset, Offsets, Latest, Timestamp.
        let all = drain(&mut Consumer::connect(&config(&b, &t)).unwrap());
        let sizes: Vec<i64> = (0..4).map(|p| all[&p].len() as i64).collect();
        let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
            startup: StartupMode::Offset(10),
            ..config(&b, &t)
        })
        .unwrap();
        let got = drain(&mut c);
        for p in 0..4 {
            assert_eq!(got[&p].len() as i64, sizes[p as usize] - 10);
            assert_eq!(got[&p][0], all[&p][10]);
        }
        let got = drain(
            &mut Consumer::connect(&weir_kafka::ConsumerConfig {
                startup: StartupMode::Offsets(vec![(2, 5)]),
                partitions: PartitionSelection::List(vec![2]),
                ..config(&b, &t)
            })
            .unwrap(),
        );
        assert_eq!(got[&2][..], all[&2][5..]);
        let mut latest = Consumer::connect(&weir_kafka::ConsumerConfig {
            startup: StartupMode::Latest,
            ..config(&b, &t)
        })
        .unwrap();
        assert_eq!(
            latest
                .poll(Duration::from_millis(10), |_| Ok::<(), std::io::Error>(()))
                .unwrap(),
            PollStatus::End
        );
        // Timestamps are 1_700_000_000_000 + i: from i = 3000 on.
        let got = drain(
            &mut Consumer::connect(&weir_kafka::ConsumerConfig {
                startup: StartupMode::Timestamp(1_700_000_003_000),
                ..config(&b, &t)
            })
            .unwrap(),
        );
        for (p, recs) in &got {
            eprintln!(
                "p{p}: first {:?} n {}",
                recs.first().map(|r| (r.offset, r.timestamp)),
                recs.len()
            );
        }
        let mut from_ts: Vec<i64> = got.values().flatten().map(|r| r.timestamp).collect();
        from_ts.sort_unstable();
        let want: Vec<i64> = (3000..n as i64).map(|i| 1_700_000_000_000 + i).collect();
        assert_eq!(from_ts, want);
    }
}

/// A start offset outside the log follows `offset.reset`; so does an offset that a fetch finds
/// out of range (after a seek past the end).
#[test]
fn offsets_out_of_range_follow_offset_reset() {
    let _serial = serial();
    let Some(b) = bootstrap("offsets_out_of_range_follow_offset_reset") else {
        return;
    };
    let t = topic("oor");
    create_topic(std::slice::from_ref(&b), &t, 1, 1, &[], false).unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    for i in 0..50 {
        p.send(Some(0), None, format!("m{i}").as_bytes()).unwrap();
    }
    p.flush().unwrap();

    let err = Consumer::connect(&weir_kafka::ConsumerConfig {
        startup: StartupMode::Offset(1_000),
        ..config(&b, &t)
    })
    .unwrap_err();
    match &err {
        Error::OffsetOutOfRange {
            topic,
            partition,
            offset,
            log_start,
            log_end,
        } => {
            assert_eq!(
                (topic.as_str(), *partition, *offset, *log_start, *log_end),
                (t.as_str(), 0, 1_000, 0, 50)
            );
        }
        other => panic!("expected OffsetOutOfRange, got {other}"),
    }
    assert!(err.to_string().contains(&format!("{t}/0")));

    let got = drain(
        &mut Consumer::connect(&weir_kafka::ConsumerConfig {
            startup: StartupMode::Offset(1_000),
            offset_reset: OffsetReset::Earliest,
            ..config(&b, &t)
        })
        .unwrap(),
    );
    assert_eq!(got[&0].len(), 50);
    assert_eq!(got[&0][0].value.as_deref(), Some(&b"m0"[..]));

    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        startup: StartupMode::Offset(1_000),
        offset_reset: OffsetReset::Latest,
        ..config(&b, &t)
    })
    .unwrap();
    assert_eq!(c.position(0), Some(50));
    assert!(drain(&mut c).is_empty());

    // Fetch-time: an unbounded consumer seeks past the end; the broker answers
    // OFFSET_OUT_OF_RANGE and the consumer goes back to the earliest offset.
    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        bounded: false,
        offset_reset: OffsetReset::Earliest,
        ..config(&b, &t)
    })
    .unwrap();
    c.seek(0, 5_000).unwrap();
    let mut values = Vec::new();
    for _ in 0..50 {
        c.poll(Duration::from_millis(100), |r| {
            values.push(r.value.unwrap().to_vec());
            Ok::<(), std::io::Error>(())
        })
        .unwrap();
        if values.len() >= 50 {
            break;
        }
    }
    assert_eq!(values.len(), 50);
    assert_eq!(values[49], b"m49");

    // With 'fail', the fetch-time error names topic, partition and offset.
    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        bounded: false,
        ..config(&b, &t)
    })
    .unwrap();
    c.seek(0, 5_000).unwrap();
    let err = c
        .poll(Duration::from_millis(100), |_| Ok::<(), std::io::Error>(()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OffsetOutOfRange {
                partition: 0,
                offset: 5_000,
                ..
            }
        ),
        "{err}"
    );
}

/// An unbounded consumer from `Latest` sees only what is written after it connected; a handler
/// error leaves the failing record unconsumed.
#[test]
fn unbounded_follow_and_handler_errors() {
    let _serial = serial();
    let Some(b) = bootstrap("unbounded_follow_and_handler_errors") else {
        return;
    };
    let t = topic("follow");
    create_topic(std::slice::from_ref(&b), &t, 2, 1, &[], false).unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    p.send(Some(0), None, b"before").unwrap();
    p.flush().unwrap();
    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        bounded: false,
        startup: StartupMode::Latest,
        ..config(&b, &t)
    })
    .unwrap();
    assert_eq!(
        c.poll(Duration::from_millis(50), |_| Ok::<(), std::io::Error>(()))
            .unwrap(),
        PollStatus::Idle
    );
    for i in 0..10 {
        p.send(Some(i % 2), None, format!("after-{i}").as_bytes())
            .unwrap();
    }
    p.flush().unwrap();
    let mut got = Vec::new();
    // The handler refuses "after-4" once: the error names where, and the record comes again.
    let mut refused = false;
    for _ in 0..100 {
        let r = c.poll(Duration::from_millis(100), |r| {
            let v = r.value.unwrap();
            if v == b"after-4" && !refused {
                refused = true;
                return Err(std::io::Error::other("refused once"));
            }
            got.push(String::from_utf8(v.to_vec()).unwrap());
            Ok(())
        });
        if let Err(e) = r {
            assert!(
                matches!(
                    e,
                    Error::Handler {
                        partition: 0,
                        offset: 3,
                        ..
                    }
                ),
                "{e}"
            );
        }
        if got.len() == 10 {
            break;
        }
    }
    assert!(refused);
    got.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("after-{i}")).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(c.position(0), Some(6));
    assert_eq!(c.position(1), Some(5));
}

/// Connecting to a topic that does not exist or to partitions it does not have is an error.
#[test]
fn unknown_topic_and_partition_are_errors() {
    let _serial = serial();
    let Some(b) = bootstrap("unknown_topic_and_partition_are_errors") else {
        return;
    };
    let t = topic("missing");
    let err = Consumer::connect(&config(&b, &t)).unwrap_err();
    assert!(matches!(err, Error::Topic { .. }), "{err}");
    create_topic(std::slice::from_ref(&b), &t, 2, 1, &[], false).unwrap();
    let err = Consumer::connect(&weir_kafka::ConsumerConfig {
        partitions: PartitionSelection::List(vec![0, 5]),
        ..config(&b, &t)
    })
    .unwrap_err();
    assert!(err.to_string().contains("lists 5"), "{err}");
}

/// A batch the broker refuses for good (larger than the topic's `max.message.bytes`) fails the
/// flush with the broker's answer, naming the topic and partition; the producer then refuses
/// every later send, since its records are missing from the topic.
#[test]
fn a_batch_refused_for_good_stops_the_producer() {
    let _serial = serial();
    let Some(b) = bootstrap("a_batch_refused_for_good_stops_the_producer") else {
        return;
    };
    let t = topic("too-large");
    create_topic(
        std::slice::from_ref(&b),
        &t,
        1,
        1,
        &[("max.message.bytes", "2000")],
        false,
    )
    .unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        ..ProducerConfig::default()
    })
    .unwrap();
    p.send(Some(0), None, &[b'x'; 5000]).unwrap();
    let e = p.flush().unwrap_err().to_string();
    assert!(
        e.contains("MESSAGE_TOO_LARGE") && e.contains(&format!("{t}/0")),
        "{e}"
    );
    match p.send(Some(0), None, b"small") {
        Err(Error::BatchesLost { batches: 1, .. }) => {}
        other => panic!("expected BatchesLost after the refusal, got {other:?}"),
    }
    assert!(matches!(p.flush(), Err(Error::BatchesLost { .. })));
}

/// A broker stopped and restarted in the middle of a bounded read: the consumer retries with
/// backoff and resumes at the next offset, with no gap and no duplicate. The test runs its own
/// broker so the restart does not disturb the other tests.
#[test]
fn broker_restart_mid_read_loses_and_repeats_nothing() {
    let _serial = serial();
    if bootstrap("broker_restart_mid_read_loses_and_repeats_nothing").is_none() {
        return;
    }
    let (broker, b) = PrivateBroker::start();
    let t = topic("restart");
    let partitions = 3;
    let n = 60_000usize;
    create_topic(std::slice::from_ref(&b), &t, partitions, 1, &[], false).unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        compression: Compression::Lz4,
        batch_bytes: 32 << 10,
        ..ProducerConfig::default()
    })
    .unwrap();
    for i in 0..n {
        let mut v = format!("r{i}|").into_bytes();
        v.resize(100, b'-');
        p.send(Some((i % partitions as usize) as i32), None, &v)
            .unwrap();
    }
    p.flush().unwrap();
    drop(p);

    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        // Small fetches, so that the read is still going when the broker goes away.
        partition_max_bytes: 16 << 10,
        fetch_max_bytes: 48 << 10,
        retry_backoff: Duration::from_millis(50),
        retry_backoff_max: Duration::from_millis(500),
        ..config(&b, &t)
    })
    .unwrap();
    let mut got: Vec<Vec<(i64, Vec<u8>)>> = vec![Vec::new(); partitions as usize];
    let mut take = |c: &mut Consumer| {
        c.poll(Duration::from_millis(200), |r| {
            got[r.partition as usize].push((r.offset, r.value.unwrap().to_vec()));
            Ok::<(), std::io::Error>(())
        })
        .unwrap()
    };
    let mut seen = 0;
    while seen < n / 4 {
        if let PollStatus::Records(k) = take(&mut c) {
            seen += k;
        }
    }
    // Restart in the background; hold off polling until the broker has really gone away, so
    // the consumer meets a dead connection and then a refusing port.
    let run = broker.run.clone();
    let restart = std::thread::spawn(move || PrivateBroker::kafka_sh(&run, "restart"));
    let addr: std::net::SocketAddr = b.parse().unwrap();
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        && !restart.is_finished()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut idle = 0;
    loop {
        match take(&mut c) {
            PollStatus::End => break,
            PollStatus::Idle => {
                idle += 1;
                assert!(idle < 600, "no progress after the restart");
            }
            PollStatus::Records(_) => {}
        }
    }
    let out = restart.join().unwrap();
    assert!(
        out.status.success(),
        "restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.retries() > 0, "the consumer never noticed the restart");
    for (part, recs) in got.iter().enumerate() {
        assert_eq!(recs.len(), n / partitions as usize, "partition {part}");
        for (k, (offset, value)) in recs.iter().enumerate() {
            assert_eq!(*offset, k as i64, "partition {part}: gap or duplicate");
            let i = part + k * partitions as usize;
            assert!(value.starts_with(format!("r{i}|").as_bytes()));
        }
    }
}

/// A broker restarted while an idempotent producer sends: the batches in flight on the lost
/// connections, and those sent while the broker is away, are sent once it is back, and a reader
/// finds every record once, in order in each partition (the broker drops by sequence number
/// what it had written already). The test runs its own broker.
#[test]
fn broker_restart_mid_produce_loses_and_repeats_nothing() {
    let _serial = serial();
    if bootstrap("broker_restart_mid_produce_loses_and_repeats_nothing").is_none() {
        return;
    }
    let (broker, b) = PrivateBroker::start();
    let t = topic("restart-produce");
    let partitions = 3;
    let n = 60_000usize;
    create_topic(std::slice::from_ref(&b), &t, partitions, 1, &[], false).unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        // Small batches: many in flight when the connections go.
        batch_bytes: 8 << 10,
        ..ProducerConfig::default()
    })
    .unwrap();
    let value = |i: usize| {
        let mut v = format!("r{i}|").into_bytes();
        v.resize(100, b'-');
        v
    };
    let part = |i: usize| Some((i % partitions as usize) as i32);
    for i in 0..n / 2 {
        p.send(part(i), None, &value(i)).unwrap();
    }
    let run = broker.run.clone();
    let restart = std::thread::spawn(move || PrivateBroker::kafka_sh(&run, "restart"));
    // Keep sending until the broker has really gone away, then send the rest while it is away
    // and coming back.
    let addr: std::net::SocketAddr = b.parse().unwrap();
    let mut i = n / 2;
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        && !restart.is_finished()
        && i < n * 3 / 4
    {
        p.send(part(i), None, &value(i)).unwrap();
        i += 1;
    }
    for i in i..n {
        p.send(part(i), None, &value(i)).unwrap();
    }
    p.flush().unwrap();
    let out = restart.join().unwrap();
    assert!(
        out.status.success(),
        "restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = Consumer::connect(&config(&b, &t)).unwrap();
    let mut got: Vec<Vec<(i64, Vec<u8>)>> = vec![Vec::new(); partitions as usize];
    loop {
        let status = c
            .poll(Duration::from_millis(200), |r| {
                got[r.partition as usize].push((r.offset, r.value.unwrap().to_vec()));
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        if matches!(status, PollStatus::End) {
            break;
        }
    }
    for (part, recs) in got.iter().enumerate() {
        assert_eq!(
            recs.len(),
            n / partitions as usize,
            "partition {part}: lost or doubled"
        );
        for (k, (_, value)) in recs.iter().enumerate() {
            let i = part + k * partitions as usize;
            assert!(
                value.starts_with(format!("r{i}|").as_bytes()),
                "partition {part} record {k}: {}",
                String::from_utf8_lossy(&value[..12])
            );
        }
    }
}

/// weir's transactional producer: committed transactions are read by a `read_committed`
/// consumer, aborted ones are not (a `read_uncommitted` one sees both), and a second producer
/// with the same `transactional.id` fences the first, whose next write fails as fenced. The
/// test command's Kafka 4 offers KIP-890's protocol, which the producer takes.
#[test]
fn transactions_commit_abort_and_fence() {
    let _serial = serial();
    let Some(b) = bootstrap("transactions_commit_abort_and_fence") else {
        return;
    };
    commit_abort_and_fence(&b, TransactionProtocol::Kip890);
}

/// The same two checks against a broker whose cluster offers only the classic transaction
/// protocol (`transaction.version` 1, as Kafka 3.x): the producer falls back to it.
#[test]
fn transactions_under_the_classic_protocol() {
    let _serial = serial();
    if bootstrap("transactions_under_the_classic_protocol").is_none() {
        return;
    }
    let (_broker, b) = PrivateBroker::start_with_features("transaction.version=1");
    commit_abort_and_fence(&b, TransactionProtocol::Classic);
    left_open_and_settled(&b, TransactionProtocol::Classic);
    ended_at_the_last_epoch(&b, TransactionProtocol::Classic);
    offsets_inside_transactions(&b, TransactionProtocol::Classic, GroupProtocol::Classic);
}

/// The values of `topic` a `read_committed` consumer reads.
fn committed_values(b: &str, topic: &str) -> BTreeSet<String> {
    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        ..config(b, topic)
    })
    .unwrap();
    drain(&mut c)
        .values()
        .flatten()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect()
}

/// A source's offsets committed inside a transaction (KIP-447), under KIP-890's protocol and a
/// member of Kafka 4's consumer group protocol.
#[test]
fn offsets_committed_inside_a_transaction() {
    let _serial = serial();
    let Some(b) = bootstrap("offsets_committed_inside_a_transaction") else {
        return;
    };
    offsets_inside_transactions(&b, TransactionProtocol::Kip890, GroupProtocol::Consumer);
}

/// Offsets sent to a transaction are the group's once it commits, never while it is open
/// (a `require_stable` read waits) nor after it aborts; a transaction of offsets alone commits
/// them; a member's offsets carry its generation, and offsets of a member the group does not
/// know are refused as fenced.
fn offsets_inside_transactions(b: &str, protocol: TransactionProtocol, group: GroupProtocol) {
    let brokers = vec![b.to_string()];
    let src = topic("wtxo-src");
    let out = topic("wtxo-out");
    create_topic(&brokers, &src, 2, 1, &[], false).unwrap();
    create_topic(&brokers, &out, 2, 1, &[], false).unwrap();
    let cfg = ProducerConfig {
        brokers: brokers.clone(),
        topic: out.clone(),
        transactional_id: Some(format!("{out}-writer")),
        ..ProducerConfig::default()
    };
    let security = SecurityConfig::default();
    let read = |group: &str| {
        committed_offsets(
            &brokers,
            &security,
            group,
            &src,
            &[0, 1],
            Duration::from_secs(20),
        )
    };
    let at = |a: i64, b: i64| vec![((src.clone(), 0), a), ((src.clone(), 1), b)];
    let standalone = GroupMetadata::standalone(&format!("{src}-g"));
    let mut p = Producer::connect(&cfg).unwrap();
    assert_eq!(p.transaction_protocol(), Some(protocol));

    p.begin_transaction().unwrap();
    p.send(None, Some(b"k"), b"v1").unwrap();
    p.send_offsets_to_transaction(&at(5, 7), &standalone)
        .unwrap();
    p.flush().unwrap();
    // Open: a stable read waits, here past its patience.
    let e = committed_offsets(
        &brokers,
        &security,
        &standalone.group_id,
        &src,
        &[0, 1],
        Duration::from_secs(1),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("UNSTABLE_OFFSET_COMMIT"), "{e}");
    p.commit_transaction().unwrap();
    assert_eq!(read(&standalone.group_id).unwrap(), vec![(0, 5), (1, 7)]);
    // Offsets committed in a transaction carry the time they were sent, too.
    let stamped = weir_kafka::committed_offsets_stamped(
        &brokers,
        &security,
        &standalone.group_id,
        &src,
        &[0, 1],
        Duration::from_secs(20),
    )
    .unwrap();
    let age = |ms: i64| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
            - ms
    };
    assert!(
        stamped.iter().all(|c| c
            .committed_ms
            .is_some_and(|ms| (0..60_000).contains(&age(ms)))),
        "{stamped:?}"
    );
    // Only the partitions asked for.
    let one = committed_offsets(
        &brokers,
        &security,
        &standalone.group_id,
        &src,
        &[1],
        Duration::from_secs(20),
    );
    assert_eq!(one.unwrap(), vec![(1, 7)]);

    // Aborted: the offsets go with the records.
    p.begin_transaction().unwrap();
    p.send(None, Some(b"k"), b"aborted").unwrap();
    p.send_offsets_to_transaction(&at(9, 9), &standalone)
        .unwrap();
    p.flush().unwrap();
    p.abort_transaction().unwrap();
    assert_eq!(read(&standalone.group_id).unwrap(), vec![(0, 5), (1, 7)]);

    // Offsets alone (a step whose rows were all filtered out) still commit.
    p.begin_transaction().unwrap();
    p.send_offsets_to_transaction(&at(6, 8), &standalone)
        .unwrap();
    assert!(p.transaction_has_writes());
    p.commit_transaction().unwrap();
    assert_eq!(read(&standalone.group_id).unwrap(), vec![(0, 6), (1, 8)]);

    // A member's offsets, stamped with its generation.
    let group_config = GroupConfig {
        protocol: group,
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(20),
        ..GroupConfig::new(&format!("{src}-members"))
    };
    let mut member = GroupMember::join(
        &brokers,
        &security,
        group_config,
        std::slice::from_ref(&src),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let GroupEvent::Assigned(parts) = member.poll().unwrap() {
            if !parts.is_empty() {
                member.owned(parts);
                member.poll().unwrap();
                break;
            }
        }
        assert!(Instant::now() < deadline, "no assignment in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let known = member.metadata();
    assert!(known.generation > 0, "{known:?}");
    p.begin_transaction().unwrap();
    p.send(None, Some(b"k"), b"v2").unwrap();
    p.send_offsets_to_transaction(&at(11, 12), &known).unwrap();
    p.commit_transaction().unwrap();
    assert_eq!(read(&known.group_id).unwrap(), vec![(0, 11), (1, 12)]);
    // A member the group does not know (one it dropped) is fenced, and its transaction aborts.
    let stranger = GroupMetadata {
        member_id: "a-member-the-group-dropped".into(),
        ..known.clone()
    };
    p.begin_transaction().unwrap();
    p.send(None, Some(b"k"), b"zombie").unwrap();
    let e = p
        .send_offsets_to_transaction(&at(20, 20), &stranger)
        .unwrap_err();
    assert!(matches!(e, Error::OffsetsFenced { .. }), "{e}");
    p.flush().unwrap();
    p.abort_transaction().unwrap();
    assert_eq!(read(&known.group_id).unwrap(), vec![(0, 11), (1, 12)]);
    member.leave().unwrap();

    // What a read_committed consumer sees: the committed records only.
    assert_eq!(
        committed_values(b, &out),
        BTreeSet::from(["v1".to_string(), "v2".to_string()])
    );
}

fn commit_abort_and_fence(b: &str, protocol: TransactionProtocol) {
    let b = b.to_string();
    let t = topic("wtx");
    create_topic(std::slice::from_ref(&b), &t, 2, 1, &[], false).unwrap();
    let cfg = ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        transactional_id: Some(format!("{t}-writer")),
        compression: Compression::Lz4,
        ..ProducerConfig::default()
    };
    let mut first = Producer::connect(&cfg).unwrap();
    assert_eq!(first.transaction_protocol(), Some(protocol));
    // Outside a transaction nothing is sent.
    let e = first.send(None, Some(b"k"), b"v").unwrap_err().to_string();
    assert!(e.contains("begin_transaction"), "{e}");
    let write = |p: &mut Producer, tag: &str, n: usize, commit: bool| {
        p.begin_transaction().unwrap();
        for i in 0..n {
            let key = format!("k{i}");
            p.send(None, Some(key.as_bytes()), format!("{tag}{i}").as_bytes())
                .unwrap();
        }
        if commit {
            p.commit_transaction().unwrap();
        } else {
            p.flush().unwrap();
            p.abort_transaction().unwrap();
        }
    };
    let before = first.producer_identity();
    write(&mut first, "a", 10, true);
    // KIP-890 ends each transaction with a new epoch; the classic protocol keeps it.
    let bumped = i16::from(protocol == TransactionProtocol::Kip890);
    assert_eq!(first.producer_identity(), (before.0, before.1 + bumped));
    write(&mut first, "b", 5, false);
    assert_eq!(first.producer_identity(), (before.0, before.1 + 2 * bumped));
    write(&mut first, "c", 5, true);
    // A second producer of the same id takes over; the first is fenced.
    let mut second = Producer::connect(&cfg).unwrap();
    first.begin_transaction().unwrap();
    first.send(None, Some(b"k0"), b"z0").unwrap();
    let e = first.commit_transaction().unwrap_err();
    assert!(matches!(e, Error::Fenced { .. }), "{e}");
    assert!(e.to_string().contains(&format!("{t}-writer")), "{e}");
    write(&mut second, "d", 3, true);

    let values = |isolation: Isolation| -> BTreeSet<String> {
        let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
            isolation,
            ..config(&b, &t)
        })
        .unwrap();
        drain(&mut c)
            .values()
            .flatten()
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect()
    };
    let named = |tags: &[(&str, usize)]| -> BTreeSet<String> {
        tags.iter()
            .flat_map(|(tag, n)| (0..*n).map(move |i| format!("{tag}{i}")))
            .collect()
    };
    assert_eq!(
        values(Isolation::ReadCommitted),
        named(&[("a", 10), ("c", 5), ("d", 3)])
    );
    let all = values(Isolation::ReadUncommitted);
    assert!(all.is_superset(&named(&[("a", 10), ("b", 5), ("c", 5), ("d", 3)])));
}

/// A transaction left open by a producer that stopped (its id and epoch recorded) is committed
/// by `settle_transaction`; one that committed before a new epoch began is reported so, and the
/// transaction of that later epoch is aborted by the next producer.
#[test]
fn a_transaction_left_open_is_settled_by_its_epoch() {
    let _serial = serial();
    let Some(b) = bootstrap("a_transaction_left_open_is_settled_by_its_epoch") else {
        return;
    };
    left_open_and_settled(&b, TransactionProtocol::Kip890);
    ended_at_the_last_epoch(&b, TransactionProtocol::Kip890);
}

/// Waits (up to a minute) until the coordinator of `cfg`'s id has aborted its open transaction
/// for its timeout; returns what it says then.
fn aborted_by_coordinator(cfg: &ProducerConfig) -> weir_kafka::TransactionStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = describe_transaction(cfg).unwrap().unwrap();
        if s.state == "CompleteAbort" {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "not aborted after a minute: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn left_open_and_settled(b: &str, protocol: TransactionProtocol) {
    let b = b.to_string();
    let t = topic("wtxs");
    create_topic(std::slice::from_ref(&b), &t, 2, 1, &[], false).unwrap();
    let cfg = ProducerConfig {
        brokers: vec![b.clone()],
        topic: t.clone(),
        transactional_id: Some(format!("{t}-writer")),
        ..ProducerConfig::default()
    };
    let send = |p: &mut Producer, tag: &str, n: usize| {
        p.begin_transaction().unwrap();
        for i in 0..n {
            p.send(
                None,
                Some(format!("k{i}").as_bytes()),
                format!("{tag}{i}").as_bytes(),
            )
            .unwrap();
        }
        p.flush().unwrap();
        assert!(p.transaction_has_writes());
    };
    // Stopped with its transaction open: settling commits it.
    let mut first = Producer::connect(&cfg).unwrap();
    assert_eq!(first.transaction_protocol(), Some(protocol));
    send(&mut first, "a", 10);
    let open = first.producer_identity();
    drop(first);
    assert_eq!(settle_transaction(&cfg, open).unwrap(), Settled::Committed);
    // Settling again finds it committed with that very epoch.
    assert_eq!(settle_transaction(&cfg, open).unwrap(), Settled::Committed);

    // Committed, a new epoch begun and its transaction left open: the recorded one ended before.
    let mut second = Producer::connect(&cfg).unwrap();
    send(&mut second, "b", 4);
    let committed = second.producer_identity();
    second.commit_transaction().unwrap();
    second.renew_epoch().unwrap();
    assert!(second.producer_identity().1 > committed.1);
    send(&mut second, "c", 6);
    drop(second);
    assert_eq!(
        settle_transaction(&cfg, committed).unwrap(),
        Settled::EndedBefore
    );
    // The next producer of the id aborts what the later epoch left open.
    let mut third = Producer::connect(&cfg).unwrap();
    send(&mut third, "d", 3);
    third.commit_transaction().unwrap();
    third.renew_epoch().unwrap();
    drop(third);

    // Stopped with its transaction open past its timeout: the coordinator aborts it, and
    // settling says so rather than taking it for committed.
    let short = ProducerConfig {
        transaction_timeout: Duration::from_secs(2),
        ..cfg.clone()
    };
    let mut fourth = Producer::connect(&short).unwrap();
    send(&mut fourth, "e", 5);
    let timed_out = fourth.producer_identity();
    drop(fourth);
    let status = aborted_by_coordinator(&short);
    assert_eq!(status.producer_id, timed_out.0, "{protocol:?}");
    assert_eq!(
        settle_transaction(&short, timed_out).unwrap(),
        Settled::AbortedByCoordinator { timeout_ms: 2000 },
        "{protocol:?}: {status:?}, left open at epoch {}",
        timed_out.1
    );
    // Asked again, it says the same: settling changes nothing at the coordinator.
    assert_eq!(
        settle_transaction(&short, timed_out).unwrap(),
        Settled::AbortedByCoordinator { timeout_ms: 2000 }
    );
    // A transaction committed, its producer then stopped before the next one: never taken for
    // aborted. Under KIP-890 its commit sent again with its epoch answers as a retry of the
    // commit; under the classic protocol the epoch renewed after it answers that it ended.
    let mut fifth = Producer::connect(&short).unwrap();
    send(&mut fifth, "f", 2);
    let committed = fifth.producer_identity();
    fifth.commit_transaction().unwrap();
    fifth.renew_epoch().unwrap();
    drop(fifth);
    assert_eq!(
        settle_transaction(&short, committed).unwrap(),
        match protocol {
            TransactionProtocol::Kip890 => Settled::Committed,
            TransactionProtocol::Classic => Settled::EndedBefore,
        }
    );
    // Committed, then the next transaction left open past its timeout and aborted by the
    // coordinator: the committed one is not taken for that abort.
    let mut sixth = Producer::connect(&short).unwrap();
    send(&mut sixth, "g", 2);
    let committed = sixth.producer_identity();
    sixth.commit_transaction().unwrap();
    sixth.renew_epoch().unwrap();
    send(&mut sixth, "h", 2);
    drop(sixth);
    aborted_by_coordinator(&short);
    assert_eq!(
        settle_transaction(&short, committed).unwrap(),
        Settled::EndedBefore,
        "{protocol:?}"
    );

    let got = committed_values(&b, &t);
    let want: BTreeSet<String> = [("a", 10), ("b", 4), ("d", 3), ("f", 2), ("g", 2)]
        .iter()
        .flat_map(|(tag, n)| (0..*n).map(move |i| format!("{tag}{i}")))
        .collect();
    assert_eq!(got, want);
}

/// Begins epochs of the `transactional.id` `id` until its epoch is `epoch`, as producers
/// starting one after another would: each InitProducerId of an id between transactions begins
/// the next. Raw requests to `broker` (the test's one broker, so the coordinator of every
/// id), since weir's producer asks once a connection and tens of thousands of connections
/// take long (these take a few seconds on a local broker).
fn epochs_begun(broker: &str, id: &str, timeout_ms: i32, epoch: i16) -> (i64, i16) {
    use kafka_protocol::messages::{
        ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader,
        ResponseHeader, TransactionalId,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
    use std::io::{Read, Write};
    const VERSION: i16 = 4;
    let mut conn = std::net::TcpStream::connect(broker).unwrap();
    conn.set_nodelay(true).unwrap();
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.to_string()))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut frame = bytes::BytesMut::new();
    for correlation in 0.. {
        frame.clear();
        frame.extend_from_slice(&[0; 4]);
        RequestHeader::default()
            .with_request_api_key(ApiKey::InitProducerId as i16)
            .with_request_api_version(VERSION)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str("weir-epochs")))
            .encode(&mut frame, InitProducerIdRequest::header_version(VERSION))
            .unwrap();
        request.encode(&mut frame, VERSION).unwrap();
        let len = i32::try_from(frame.len() - 4).unwrap();
        frame[..4].copy_from_slice(&len.to_be_bytes());
        conn.write_all(&frame).unwrap();
        let mut size = [0; 4];
        conn.read_exact(&mut size).unwrap();
        let mut body = vec![0; usize::try_from(i32::from_be_bytes(size)).unwrap()];
        conn.read_exact(&mut body).unwrap();
        let mut body = bytes::Bytes::from(body);
        ResponseHeader::decode(&mut body, InitProducerIdResponse::header_version(VERSION)).unwrap();
        let resp = InitProducerIdResponse::decode(&mut body, VERSION).unwrap();
        match resp.error_code {
            0 if resp.producer_epoch >= epoch => return (resp.producer_id.0, resp.producer_epoch),
            0 => {}
            // The coordinator still loading, or ending the last epoch's transaction.
            14 | 51 => std::thread::sleep(Duration::from_millis(20)),
            code => panic!("InitProducerId of '{id}' failed with error code {code}"),
        }
    }
    unreachable!("the correlation ids ran out")
}

/// At the last epoch before a `transactional.id`'s epochs run out (Kafka counts
/// `Short.MAX_VALUE - 1` as exhausted), where ending a transaction may move the id to a new
/// producer id: a transaction left open there and aborted by its coordinator for its timeout
/// is still told apart, and one committed there is still found committed (or ended).
fn ended_at_the_last_epoch(b: &str, protocol: TransactionProtocol) {
    let t = topic("wtxe");
    create_topic(&[b.to_string()], &t, 2, 1, &[], false).unwrap();
    let cfg = ProducerConfig {
        brokers: vec![b.to_string()],
        topic: t.clone(),
        transaction_timeout: Duration::from_secs(2),
        ..ProducerConfig::default()
    };
    let last = i16::MAX - 1;
    // A producer of `id` at the last epoch (its coordinator loaded by a first producer).
    let at_last_epoch = |id: &str| {
        let cfg = ProducerConfig {
            transactional_id: Some(id.to_string()),
            ..cfg.clone()
        };
        drop(Producer::connect(&cfg).unwrap());
        epochs_begun(b, id, 2000, last - 1);
        let p = Producer::connect(&cfg).unwrap();
        assert_eq!(p.producer_identity().1, last, "{protocol:?}");
        (p, cfg)
    };
    let send = |p: &mut Producer, tag: &str, n: usize| {
        p.begin_transaction().unwrap();
        for i in 0..n {
            p.send(None, Some(b"k"), format!("{tag}{i}").as_bytes())
                .unwrap();
        }
        p.flush().unwrap();
    };

    // Left open at the last epoch, past its timeout.
    let (mut p, aborting) = at_last_epoch(&format!("{t}-aborted"));
    send(&mut p, "a", 3);
    let left = p.producer_identity();
    drop(p);
    let status = aborted_by_coordinator(&aborting);
    assert_eq!(
        settle_transaction(&aborting, left).unwrap(),
        Settled::AbortedByCoordinator { timeout_ms: 2000 },
        "{protocol:?}: left open at {left:?}, the coordinator says {status:?}"
    );
    // The next producer of the id (a new producer id) writes on.
    let mut next = Producer::connect(&aborting).unwrap();
    assert_ne!(next.producer_identity().0, left.0, "{protocol:?}");
    send(&mut next, "b", 2);
    next.commit_transaction().unwrap();
    drop(next);

    // Committed at the last epoch, then stopped before the next transaction.
    let (mut p, committing) = at_last_epoch(&format!("{t}-committed"));
    send(&mut p, "c", 2);
    let committed = p.producer_identity();
    p.commit_transaction().unwrap();
    p.renew_epoch().unwrap();
    assert_ne!(p.producer_identity().0, committed.0, "{protocol:?}");
    let settled = settle_transaction(&committing, committed).unwrap();
    assert!(
        matches!(settled, Settled::Committed | Settled::EndedBefore),
        "{protocol:?}: {settled:?}"
    );
    // The next transaction, on the new producer id, left open past its timeout: its abort (at
    // that id's epoch 1) is not taken for one of the committed transaction.
    send(&mut p, "d", 2);
    drop(p);
    let status = aborted_by_coordinator(&committing);
    assert_eq!(
        settle_transaction(&committing, committed).unwrap(),
        Settled::EndedBefore,
        "{protocol:?}: committed at {committed:?}, the coordinator says {status:?}"
    );

    let want: BTreeSet<String> = ["b0", "b1", "c0", "c1"].map(String::from).into();
    assert_eq!(committed_values(b, &t), want, "{protocol:?}");
}
