//! weir's native Kafka client.
//!
//! This crate owns everything between a Kafka broker and a message slice: the wire protocol
//! (requests of ApiVersions, Metadata, ListOffsets, Fetch, Produce, InitProducerId,
//! FindCoordinator, ConsumerGroupHeartbeat, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, CreateTopics, SaslHandshake and SaslAuthenticate are framed by the `kafka-protocol` crate; the consumer's responses are read by
//! hand, every length checked before anything is reserved), the hot path written by hand
//! because it demands it (the Fetch response walker and the record-batch v2 parser: zero-copy,
//! zero-allocation),
//! decompression (gzip, snappy, lz4, zstd) into a reused buffer, CRC32C checks, read_committed
//! filtering of aborted transactions, leader routing, pipelined fetches, retries with backoff,
//! offset reset, and TLS, mutual TLS and SASL on every connection. It does not decode
//! messages: the engine's decoder reads each value in place, straight from the fetch buffer.
//!
//! * [`Consumer`]: one topic, a static set of partitions, single-threaded and `Send`, no
//!   consumer group (weir checkpoints offsets itself). [`Consumer::poll`] calls a closure with
//!   a [`Record`] whose key, value and headers are slices of the response.
//! * [`Producer`]: a batching producer with optional compression, for loading data.
//! * [`GroupMember`]: membership of a consumer group, by Kafka 4's consumer group protocol
//!   (KIP-848, ConsumerGroupHeartbeat) or the classic one (JoinGroup and SyncGroup, the
//!   cooperative-sticky assignor), as [`GroupProtocol`] says: the partitions the group gives
//!   the member, taken away only after the member says it has finished with them, fencing of a
//!   member the group has moved past, and offsets committed for lag monitors. Not yet used by
//!   the engine's Kafka source.
//! * [`create_topic`] / [`create_topic_with`]: topic creation for tests, benchmarks and
//!   `weir gen`.
//! * [`SecurityConfig`]: TLS and SASL for all three, built from librdkafka's option names by
//!   [`SecurityConfig::from_properties`] (the keys: [`SECURITY_OPTIONS`]; a Java properties
//!   file: [`parse_properties`]).
//! * [`tls`]: loading CA certificates, client certificates and keys into rustls values, for
//!   any TLS client of weir.
//! * [`batch`]: the record-batch parser itself, usable on any bytes.
//! * [`PartitionStats`]: what a consumer knows about each partition (position, high
//!   watermark, last record time, fetch latency, reconnects), atomics updated once per fetch
//!   response, for a metrics scrape on another thread ([`Consumer::partition_stats`]).
//!
//! How the SQL options of a Kafka source map onto [`ConsumerConfig`]:
//!
//! | SQL option | field | parsed by |
//! |---|---|---|
//! | `'brokers'` (comma-separated) | `brokers` | split on `,` |
//! | `'topic'` | `topic` | |
//! | `'partitions'` = `all` / `0,2,5-7` | `partitions` | [`PartitionSelection::from_str`](std::str::FromStr) |
//! | `'scan.startup.mode'` + `'scan.startup.offset'` / `'scan.startup.timestamp'` | `startup` | [`StartupMode::parse`] |
//! | bounded `SELECT` / `--follow` | `bounded` | |
//! | `'isolation.level'` | `isolation` | [`Isolation::from_str`](std::str::FromStr) |
//! | `'check.crcs'` | `check_crc` | |
//! | `'offset.reset'` = `earliest` / `latest` / `fail` | `offset_reset` | [`OffsetReset::from_str`](std::str::FromStr) |
//! | `'security.protocol'`, `'sasl.*'`, `'ssl.*'` ([`SECURITY_OPTIONS`]) | `security` | [`SecurityConfig::from_properties`] |
//!
//! # Security
//!
//! | `'security.protocol'` | transport | authentication |
//! |---|---|---|
//! | `PLAINTEXT` (default) | TCP | none |
//! | `SSL` | TLS 1.2/1.3 (rustls, `ring`) | the broker's certificate; the client's too with `'ssl.certificate.location'` |
//! | `SASL_PLAINTEXT` | TCP | SASL: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER` |
//! | `SASL_SSL` | TLS | SASL over TLS |
//!
//! Each connection runs the TLS handshake, ApiVersions, then SaslHandshake and
//! SaslAuthenticate. TLS is rustls's buffered stream over a socket read 256 KiB at a time,
//! lingering 100 µs after a short read so one system call takes many records. (A record layer
//! of weir's own that decrypted TLS 1.3 records in place saved 32% of the CPU of a raw read but
//! only 7% of a read + decode into Arrow, measured; not enough to keep security-critical code
//! written by hand.) Each connection renews its SASL session (KIP-368) at 85% of the lifetime the broker
//! grants, before a request with nothing in flight, so a run that lasts days outlives its
//! sessions and its OAUTHBEARER tokens ([`Consumer::reauthentications`] counts). A new SASL
//! mechanism implements [`SaslMechanism`] (`AWS_MSK_IAM` would; see its documentation).
//! Secrets are [`Secret`]s: `Debug` and every error leave them out.
//!
//! The metadata columns (topic, partition, offset, timestamp, key, headers) are the fields of
//! [`Record`]. [`Consumer::position`] and [`Consumer::seek`] are what a checkpoint needs.
//!
//! Limits, on purpose or not yet: no consumer groups or offset commits (weir checkpoints
//! itself), no GSSAPI (Kerberos) or AWS_MSK_IAM mechanism, no Java keystores (PEM only), fetches
//! by topic name (Fetch up to v12), and one blocking socket read
//! per leader in turn within a `poll` (with several leaders, a slow one delays the others by at
//! most the fetch wait). The responses `kafka-protocol` still decodes (Produce, InitProducerId,
//! CreateTopics: the producer and topic creation, not the consumer) trust the array lengths a
//! broker sends when reserving memory.

#![forbid(unsafe_code)]

mod cluster;
mod compression;
mod connection;
mod consumer;
mod error;
mod fetch_response;
mod group;
mod producer;
mod record_batch;
mod responses;
mod security;
mod stats;
mod transaction;
mod wire;

/// The record-batch (magic v2) parser and writer, usable on any bytes: `BatchIter` walks the
/// batches of a fetch response or a log segment, `RecordIter` the records of one batch, and
/// `RecordsWriter` builds batches (`take_batch` in place, `finish_batch` around a compressed
/// or copied body). The batch codec and the record headers
/// are [`Compression`] and [`Headers`] at the crate root.
pub mod batch {
    pub use crate::record_batch::{
        control_type, finish_batch, AbortedFilter, BatchError, BatchHeader, BatchIter, BatchSpec,
        ControlType, RawBatch, RecordIter, RecordView, RecordsWriter, BATCH_HEADER_LEN,
        LOG_OVERHEAD,
    };
}

pub use cluster::{cluster_id, create_topic, create_topic_with};
pub use compression::Decompressor;
pub use consumer::{
    Consumer, ConsumerConfig, Isolation, OffsetReset, PartitionSelection, PollStatus, Record,
    StartupMode,
};
pub use error::{AuthFailure, Error, Result};
pub use group::{
    committed_offsets, committed_offsets_stamped, CommittedOffset, GroupConfig, GroupEvent,
    GroupMember, GroupMetadata, GroupProtocol, TopicPartition,
};
pub use producer::{
    describe_transaction, murmur2, now_ms, settle_transaction, Producer, ProducerConfig, Settled,
    TransactionProtocol, TransactionStatus,
};
pub use record_batch::{Compression, Headers};
pub use security::{
    parse_properties, tls, OAuthBearerConfig, OidcConfig, PemSource, SaslConfig, SaslError,
    SaslExchange, SaslMechanism, ScramHash, Secret, SecurityConfig, SecurityOption,
    SecurityProtocol, SecurityValues, TlsConfig, TokenSource, SECURITY_OPTIONS,
};
pub use stats::{Histogram, PartitionStats, DURATION_BUCKETS};
pub use wire::WireError;
