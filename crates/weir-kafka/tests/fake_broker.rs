//! Faults a single real broker does not produce on demand, played by a scripted broker on
//! 127.0.0.1: a leader that answers NOT_LEADER_OR_FOLLOWER, a connection dropped in the middle
//! of a response, a batch corrupted in transit. Requests are decoded and responses encoded with
//! `kafka-protocol` (its broker side), record batches built with weir's own writer.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use weir_kafka::batch::{finish_batch, BatchSpec, RecordsWriter};
use weir_kafka::{Consumer, ConsumerConfig, Error, PollStatus, Producer, ProducerConfig};

const TOPIC: &str = "fake";
/// Records in partition 0, in batches of 10.
const RECORDS: i64 = 100;

/// What the scripted broker does wrong, by the number of Fetch requests it has seen.
#[derive(Clone, Copy)]
enum Fault {
    /// Fetch 2 answers NOT_LEADER_OR_FOLLOWER for the partition.
    NotLeader,
    /// Fetch 3's connection is closed half-way through the response.
    DropMidResponse,
    /// Fetch 1's second batch has one byte flipped.
    Corrupt,
}

fn batches(from: i64) -> Bytes {
    let mut out = Vec::new();
    let mut base = from - from % 10;
    // Two batches per response, so a read takes several fetches.
    for _ in 0..2 {
        if base >= RECORDS {
            break;
        }
        let mut w = RecordsWriter::default();
        for i in 0..10 {
            let v = format!("m{}", base + i);
            w.push(1_000 + base + i, None, Some(v.as_bytes()), &[]);
        }
        let body = w.records().to_vec();
        finish_batch(
            &mut out,
            &BatchSpec {
                base_offset: base,
                ..BatchSpec::default()
            },
            &w,
            &body,
        );
        base += 10;
    }
    Bytes::from(out)
}

fn respond<T: Encodable>(s: &mut TcpStream, key: ApiKey, version: i16, id: i32, body: &T) -> bool {
    let mut b = BytesMut::new();
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&id.to_be_bytes());
    if key.response_header_version(version) >= 1 {
        b.extend_from_slice(&[0]);
    }
    body.encode(&mut b, version).unwrap();
    let n = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&n.to_be_bytes());
    s.write_all(&b).is_ok()
}

/// Reads one request: its API, version, correlation id and body (after the header); `None`
/// once the connection closes.
fn read_request(s: &mut TcpStream) -> Option<(ApiKey, i16, i32, Bytes)> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut frame).ok()?;
    let mut buf = Bytes::from(frame);
    let key = ApiKey::try_from(i16::from_be_bytes([buf[0], buf[1]])).unwrap();
    let version = i16::from_be_bytes([buf[2], buf[3]]);
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version)).unwrap();
    Some((key, version, header.correlation_id, buf))
}

/// The APIs the fake brokers a consumer reads from offer.
const CONSUMER_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Fetch, 4, 12),
    (ApiKey::Metadata, 4, 12),
    (ApiKey::ListOffsets, 2, 7),
    (ApiKey::ApiVersions, 0, 3),
];

/// An ApiVersions answer offering `apis` (each with its lowest and highest version).
fn api_versions(apis: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(
        apis.iter()
            .map(|&(k, lo, hi)| {
                ApiVersion::default()
                    .with_api_key(k as i16)
                    .with_min_version(lo)
                    .with_max_version(hi)
            })
            .collect(),
    )
}

fn serve(mut s: TcpStream, port: u16, fault: Fault, fetches: Arc<AtomicUsize>) {
    loop {
        let Some((key, version, id, mut buf)) = read_request(&mut s) else {
            return;
        };
        let ok = match key {
            ApiKey::ApiVersions => respond(&mut s, key, version, id, &api_versions(CONSUMER_APIS)),
            ApiKey::Metadata => respond(
                &mut s,
                key,
                version,
                id,
                &MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(1))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(i32::from(port))])
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                        .with_partitions(vec![MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(1))])]),
            ),
            ApiKey::ListOffsets => {
                let req = ListOffsetsRequest::decode(&mut buf, version).unwrap();
                let ts = req.topics[0].partitions[0].timestamp;
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &ListOffsetsResponse::default().with_topics(vec![
                        ListOffsetsTopicResponse::default()
                            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                            .with_partitions(vec![ListOffsetsPartitionResponse::default()
                                .with_partition_index(0)
                                .with_offset(if ts == -2 { 0 } else { RECORDS })]),
                    ]),
                )
            }
            ApiKey::Fetch => {
                let req = FetchRequest::decode(&mut buf, version).unwrap();
                let from = req.topics[0].partitions[0].fetch_offset;
                let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
                let mut part = PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(RECORDS)
                    .with_last_stable_offset(RECORDS);
                match fault {
                    Fault::NotLeader if n == 2 => part = part.with_error_code(6),
                    Fault::Corrupt if n == 1 => {
                        let mut b = batches(from).to_vec();
                        let last = b.len() - 3;
                        b[last] ^= 0x20;
                        part = part.with_records(Some(Bytes::from(b)));
                    }
                    _ => part = part.with_records(Some(batches(from))),
                }
                let resp =
                    FetchResponse::default()
                        .with_responses(vec![FetchableTopicResponse::default()
                            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                            .with_partitions(vec![part])]);
                if matches!(fault, Fault::DropMidResponse) && n == 3 {
                    let mut b = BytesMut::new();
                    resp.encode(&mut b, version).unwrap();
                    let total = (b.len() + 5) as i32;
                    let _ = s.write_all(&total.to_be_bytes());
                    let _ = s.write_all(&id.to_be_bytes());
                    let _ = s.write_all(&b[..b.len() / 2]);
                    return; // the connection closes with the response half sent
                }
                respond(&mut s, key, version, id, &resp)
            }
            other => panic!("the fake broker does not answer {other:?}"),
        };
        if !ok {
            return;
        }
    }
}

/// Starts the scripted broker; returns its address and its Fetch counter.
fn fake_broker(fault: Fault) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fetches = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&fetches);
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || serve(s, port, fault, counter));
        }
    });
    (format!("127.0.0.1:{port}"), fetches)
}

fn consumer(addr: &str) -> Consumer {
    Consumer::connect(&ConsumerConfig {
        brokers: vec![addr.to_string()],
        topic: TOPIC.into(),
        retry_backoff: Duration::from_millis(10),
        retry_backoff_max: Duration::from_millis(50),
        ..ConsumerConfig::default()
    })
    .unwrap()
}

/// Reads to the end; every record must come exactly once, in order.
fn read_all(c: &mut Consumer) -> Vec<i64> {
    let mut got = Vec::new();
    for _ in 0..1_000 {
        let status = c
            .poll(Duration::from_millis(100), |r| {
                assert_eq!(r.value.unwrap(), format!("m{}", r.offset).as_bytes());
                got.push(r.offset);
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        if status == PollStatus::End {
            return got;
        }
    }
    panic!("the read did not end: {} records", got.len());
}

/// A two-broker cluster: partition 0 led by node 1, partition 1 by node 2. After node 1 has
/// answered `move_after` fetches, leadership of partition 0 moves to node 2: node 1 answers
/// NOT_LEADER_OR_FOLLOWER for it and the metadata names node 2.
struct Cluster {
    ports: [u16; 2],
    /// Fetches answered per node (index node - 1), and per node and partition.
    fetches: [AtomicUsize; 2],
    served: [[AtomicUsize; 2]; 2],
    refused: AtomicUsize,
    moved: std::sync::atomic::AtomicBool,
    move_after: usize,
}

impl Cluster {
    fn leader(&self, partition: i32) -> i32 {
        if partition == 1 || self.moved.load(Ordering::SeqCst) {
            2
        } else {
            1
        }
    }
}

fn serve_node(mut s: TcpStream, node: i32, cl: Arc<Cluster>) {
    loop {
        let Some((key, version, id, mut buf)) = read_request(&mut s) else {
            return;
        };
        let ok = match key {
            ApiKey::ApiVersions => respond(&mut s, key, version, id, &api_versions(CONSUMER_APIS)),
            ApiKey::Metadata => {
                let broker = |n: i32| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(n))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(i32::from(cl.ports[(n - 1) as usize]))
                };
                let part = |p: i32| {
                    MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_id(BrokerId(cl.leader(p)))
                };
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &MetadataResponse::default()
                        .with_brokers(vec![broker(1), broker(2)])
                        .with_topics(vec![MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                            .with_partitions(vec![part(0), part(1)])]),
                )
            }
            ApiKey::ListOffsets => {
                let req = ListOffsetsRequest::decode(&mut buf, version).unwrap();
                let ts = req.topics[0].partitions[0].timestamp;
                let parts = req.topics[0]
                    .partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(if cl.leader(p.partition_index) == node {
                                0
                            } else {
                                6
                            })
                            .with_offset(if ts == -2 { 0 } else { RECORDS })
                    })
                    .collect();
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &ListOffsetsResponse::default().with_topics(vec![
                        ListOffsetsTopicResponse::default()
                            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                            .with_partitions(parts),
                    ]),
                )
            }
            ApiKey::Fetch => {
                let req = FetchRequest::decode(&mut buf, version).unwrap();
                let n = cl.fetches[(node - 1) as usize].fetch_add(1, Ordering::SeqCst) + 1;
                if node == 1 && n > cl.move_after {
                    cl.moved.store(true, Ordering::SeqCst);
                }
                let parts = req.topics[0]
                    .partitions
                    .iter()
                    .map(|fp| {
                        let p = fp.partition;
                        let part = PartitionData::default()
                            .with_partition_index(p)
                            .with_high_watermark(RECORDS)
                            .with_last_stable_offset(RECORDS);
                        if cl.leader(p) != node {
                            cl.refused.fetch_add(1, Ordering::SeqCst);
                            return part.with_error_code(6);
                        }
                        cl.served[(node - 1) as usize][p as usize].fetch_add(1, Ordering::SeqCst);
                        part.with_records(Some(batches(fp.fetch_offset)))
                    })
                    .collect();
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &FetchResponse::default().with_responses(vec![
                        FetchableTopicResponse::default()
                            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                            .with_partitions(parts),
                    ]),
                )
            }
            other => panic!("the fake broker does not answer {other:?}"),
        };
        if !ok {
            return;
        }
    }
}

/// Fetches go to each partition's leader, one connection per broker; when leadership moves, the
/// consumer refreshes metadata, follows the partition to its new leader (now fetching both
/// partitions in one request there), and reads everything exactly once.
#[test]
fn fetches_follow_leaders_across_brokers() {
    let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
    let l2 = TcpListener::bind("127.0.0.1:0").unwrap();
    let cl = Arc::new(Cluster {
        ports: [
            l1.local_addr().unwrap().port(),
            l2.local_addr().unwrap().port(),
        ],
        fetches: [AtomicUsize::new(0), AtomicUsize::new(0)],
        served: Default::default(),
        refused: AtomicUsize::new(0),
        moved: std::sync::atomic::AtomicBool::new(false),
        move_after: 2,
    });
    for (node, l) in [(1, l1), (2, l2)] {
        let cl = Arc::clone(&cl);
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let cl = Arc::clone(&cl);
                std::thread::spawn(move || serve_node(s, node, cl));
            }
        });
    }
    let mut c = consumer(&format!("127.0.0.1:{}", cl.ports[0]));
    let mut got: [Vec<i64>; 2] = Default::default();
    for _ in 0..1_000 {
        let status = c
            .poll(Duration::from_millis(100), |r| {
                assert_eq!(r.value.unwrap(), format!("m{}", r.offset).as_bytes());
                got[r.partition as usize].push(r.offset);
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        if status == PollStatus::End {
            break;
        }
    }
    for (p, offsets) in got.iter().enumerate() {
        assert_eq!(*offsets, (0..RECORDS).collect::<Vec<_>>(), "partition {p}");
    }
    let served = |n: usize, p: usize| cl.served[n][p].load(Ordering::SeqCst);
    // Node 1 served partition 0 until the move, node 2 served it after; node 1 never served
    // partition 1.
    assert_eq!(served(0, 0), 2);
    assert!(served(1, 0) >= 1);
    assert_eq!(served(0, 1), 0);
    assert_eq!(served(1, 1), 5);
    // Exactly one fetch reached the old leader after the move.
    assert_eq!(cl.refused.load(Ordering::SeqCst), 1);
}

#[test]
fn not_leader_refreshes_metadata_and_resumes() {
    let (addr, fetches) = fake_broker(Fault::NotLeader);
    let mut c = consumer(&addr);
    let got = read_all(&mut c);
    assert_eq!(got, (0..RECORDS).collect::<Vec<_>>());
    assert!(
        c.retries() == 0,
        "a partition error is not a connection failure"
    );
    // 5 answered fetches of 20 records, plus the one refused.
    assert_eq!(fetches.load(Ordering::SeqCst), 6);
}

#[test]
fn connection_dropped_mid_response_resumes_without_gap_or_duplicate() {
    let (addr, _) = fake_broker(Fault::DropMidResponse);
    let mut c = consumer(&addr);
    let got = read_all(&mut c);
    assert_eq!(got, (0..RECORDS).collect::<Vec<_>>());
    assert!(c.retries() >= 1);
}

#[test]
fn batch_corrupted_in_transit_is_an_error_naming_where() {
    let (addr, _) = fake_broker(Fault::Corrupt);
    let mut c = consumer(&addr);
    let mut got = Vec::new();
    let err = loop {
        match c.poll(Duration::from_millis(100), |r| {
            got.push(r.offset);
            Ok::<(), std::io::Error>(())
        }) {
            Ok(PollStatus::End) => panic!("the corrupt batch went unnoticed"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    // The first batch (0..10) is intact and handed out; the second is refused.
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    match &err {
        Error::CorruptBatch {
            topic,
            partition,
            offset,
            ..
        } => assert_eq!((topic.as_str(), *partition, *offset), (TOPIC, 0, 10)),
        other => panic!("expected CorruptBatch, got {other}"),
    }
    assert!(err.to_string().contains("fake/0"), "{err}");
    assert_eq!(c.position(0), Some(10));
}

/// A broker that drops the connection of the first Produce request it reads, unanswered, and
/// then refuses every connection for `down` (closes it at once), then answers all.
struct Flaky {
    port: u16,
    down: Duration,
    /// When it stopped answering, once it has.
    dropped_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// Batches it acknowledged.
    written: AtomicUsize,
}

impl Flaky {
    fn is_down(&self) -> bool {
        let at = *self.dropped_at.lock().unwrap();
        at.is_some_and(|t| t.elapsed() < self.down)
    }
}

fn serve_flaky(mut s: TcpStream, b: Arc<Flaky>) {
    if b.is_down() {
        return; // the connection closes before any answer
    }
    loop {
        let Some((key, version, id, mut buf)) = read_request(&mut s) else {
            return;
        };
        let ok = match key {
            ApiKey::ApiVersions => respond(
                &mut s,
                key,
                version,
                id,
                &api_versions(&[
                    (ApiKey::Produce, 3, 9),
                    (ApiKey::Metadata, 4, 12),
                    (ApiKey::InitProducerId, 0, 4),
                    (ApiKey::ApiVersions, 0, 3),
                ]),
            ),
            ApiKey::Metadata => {
                let part = |p: i32| {
                    MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_id(BrokerId(1))
                };
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &MetadataResponse::default()
                        .with_brokers(vec![MetadataResponseBroker::default()
                            .with_node_id(BrokerId(1))
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(i32::from(b.port))])
                        .with_topics(vec![MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
                            .with_partitions(vec![part(0), part(1)])]),
                )
            }
            ApiKey::InitProducerId => respond(
                &mut s,
                key,
                version,
                id,
                &InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(1000))
                    .with_producer_epoch(0),
            ),
            ApiKey::Produce => {
                let req = ProduceRequest::decode(&mut buf, version).unwrap();
                {
                    let mut at = b.dropped_at.lock().unwrap();
                    if at.is_none() {
                        *at = Some(std::time::Instant::now());
                        return; // dropped, unanswered
                    }
                }
                let topics = req
                    .topic_data
                    .iter()
                    .map(|t| {
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        b.written.fetch_add(1, Ordering::SeqCst);
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_base_offset(0)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &ProduceResponse::default().with_responses(topics),
                )
            }
            other => panic!("the fake broker does not answer {other:?}"),
        };
        if !ok {
            return;
        }
    }
}

/// Batches in flight on a connection that drops, which cannot be sent again before the request
/// timeout (the broker away), are lost: the producer says so at once and at every later send
/// and flush, also once the broker is back, rather than send on and report success.
#[test]
fn batches_that_cannot_be_sent_again_fail_every_later_flush() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let broker = Arc::new(Flaky {
        port: listener.local_addr().unwrap().port(),
        // Well past the 1-s request timeout of the resends, on a loaded machine too.
        down: Duration::from_secs(5),
        dropped_at: std::sync::Mutex::new(None),
        written: AtomicUsize::new(0),
    });
    let served = Arc::clone(&broker);
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let b = Arc::clone(&served);
            std::thread::spawn(move || serve_flaky(s, b));
        }
    });
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![format!("127.0.0.1:{}", broker.port)],
        topic: TOPIC.into(),
        // Every record is a batch of its own, sent at once.
        batch_bytes: 1,
        request_timeout: Duration::from_secs(1),
        ..ProducerConfig::default()
    })
    .unwrap();
    // Two batches in flight (partitions 0 and 1); the broker drops the first unanswered.
    p.send(Some(0), None, b"a").unwrap();
    p.send(Some(1), None, b"b").unwrap();
    // The next batch of partition 0 waits for the first, whose connection is gone: the two
    // are sent again while the broker refuses connections (for 5 s), past the 1-s request
    // timeout.
    let lost = |e: Error| match e {
        Error::BatchesLost { batches, .. } => batches,
        other => panic!("expected BatchesLost, got {other}"),
    };
    // The two, and this one, which is not sent after them.
    assert_eq!(lost(p.send(Some(0), None, b"c").unwrap_err()), 3);
    // The broker is back: the producer still refuses, since two batches never arrived.
    while broker.is_down() {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(lost(p.flush().unwrap_err()), 3);
    assert_eq!(lost(p.send(Some(1), None, b"d").unwrap_err()), 3);
    assert_eq!(broker.written.load(Ordering::SeqCst), 0);
}
