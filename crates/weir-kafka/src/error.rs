//! The crate's errors. Everything that concerns data names the topic, the partition and the
//! offset, so that a failed query says where to look.

use crate::record_batch::BatchError;
use crate::wire::WireError;

/// A Kafka client error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work.
    #[error("kafka config: {0}")]
    Config(String),
    /// A security option has a value that cannot be used (the value of a secret is never
    /// quoted).
    #[error("kafka option '{key}': {reason}")]
    Option {
        /// The option's key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The broker refused the SASL credentials (a wrong password, an unknown user, an expired
    /// or refused token).
    #[error("kafka broker {broker}: SASL {mechanism} authentication failed for {user}: {cause}")]
    Authentication {
        /// `host:port`.
        broker: String,
        /// The mechanism.
        mechanism: String,
        /// `user 'NAME'` or `principal 'NAME'` (never a secret).
        user: String,
        /// The broker's refusal, or what the client found wrong (boxed: the error stays small).
        #[source]
        cause: Box<AuthFailure>,
    },
    /// The broker does not enable the configured SASL mechanism.
    #[error("kafka broker {broker} does not enable SASL mechanism {mechanism}; it offers {}: set 'sasl.mechanism' to one of them", offered_list(.offered))]
    MechanismNotEnabled {
        /// `host:port`.
        broker: String,
        /// The mechanism asked for.
        mechanism: String,
        /// The mechanisms the broker enables on this listener.
        offered: Vec<String>,
    },
    /// The TLS handshake failed: an untrusted, expired or wrong-host certificate, a refused
    /// client certificate.
    #[error("kafka broker {broker}: TLS handshake failed: {reason}")]
    Tls {
        /// `host:port`.
        broker: String,
        /// Why, in words, with the option that changes it.
        reason: String,
    },
    /// TLS failed on an established connection (a record that does not decrypt, an alert
    /// from the broker): the connection is dropped and opened again, as for a socket error.
    #[error("kafka broker {broker}: TLS failed on an open connection: {reason}")]
    TlsStream {
        /// `host:port`.
        broker: String,
        /// Why, in words.
        reason: String,
    },
    /// The listener speaks another security protocol than the one configured (TLS to a
    /// plaintext port, plaintext to a TLS port, no SASL where SASL is required).
    #[error("kafka broker {broker}: {reason}; check 'security.protocol' (it is {protocol})")]
    WrongProtocol {
        /// `host:port`.
        broker: String,
        /// The configured `'security.protocol'`.
        protocol: &'static str,
        /// What was seen.
        reason: String,
    },
    /// No OAUTHBEARER token could be had (the token file, the token endpoint).
    #[error("kafka OAUTHBEARER token: {reason}")]
    Token {
        /// Why.
        reason: String,
    },
    /// No broker of the list could be reached (after retries).
    #[error("kafka: cannot reach any broker of {brokers:?}: {last}")]
    NoBroker {
        /// The brokers tried.
        brokers: Vec<String>,
        /// The last failure.
        last: String,
    },
    /// A socket failed talking to a broker.
    #[error("kafka broker {broker}: {source}")]
    Io {
        /// `host:port`.
        broker: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A broker sent bytes that do not frame or decode as the expected response.
    #[error("kafka broker {broker}: malformed {api} response: {reason}")]
    Protocol {
        /// `host:port`.
        broker: String,
        /// The API (Fetch, Metadata, ...).
        api: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A broker's response body does not decode: a field out of its bounds.
    #[error("kafka broker {broker}: malformed {api} response: {source}")]
    Malformed {
        /// `host:port`.
        broker: String,
        /// The API (Fetch, Metadata, ...).
        api: &'static str,
        /// What is wrong, and where.
        #[source]
        source: WireError,
    },
    /// The broker does not support a version of an API this client needs.
    #[error("kafka broker {broker} does not support {api} v{min}..v{max} (it offers v{offered_min}..v{offered_max})")]
    UnsupportedVersion {
        /// `host:port`.
        broker: String,
        /// The API.
        api: &'static str,
        /// Lowest version this client speaks.
        min: i16,
        /// Highest version this client speaks.
        max: i16,
        /// Lowest version the broker offers.
        offered_min: i16,
        /// Highest version the broker offers.
        offered_max: i16,
    },
    /// The topic does not exist (or is not visible).
    #[error("kafka topic {topic}: {reason}")]
    Topic {
        /// The topic.
        topic: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A broker answered a request about a partition with an error code that is not retried.
    #[error("kafka {topic}/{partition} at offset {offset}: {api} failed with error code {code} ({name})")]
    Broker {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The partition's position when it happened (-1 when not yet known).
        offset: i64,
        /// The API.
        api: &'static str,
        /// Kafka's error code.
        code: i16,
        /// Kafka's name for it.
        name: &'static str,
    },
    /// The position is outside the partition's log and `offset.reset` is `fail`.
    #[error("kafka {topic}/{partition}: offset {offset} is out of range (log is {log_start}..{log_end}); set 'offset.reset' = 'earliest' or 'latest' to move on")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The requested offset.
        offset: i64,
        /// First offset in the log.
        log_start: i64,
        /// Offset after the last in the log.
        log_end: i64,
    },
    /// A record batch is corrupt.
    #[error("kafka {topic}/{partition}: corrupt record batch at offset {offset}: {error}")]
    CorruptBatch {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The batch's base offset (or the fetch position when the header itself is bad).
        offset: i64,
        /// What is wrong.
        error: BatchError,
    },
    /// A partition made no progress for longer than `retry_timeout`.
    #[error(
        "kafka {topic}/{partition} at offset {offset}: gave up after {secs} s of failures: {last}"
    )]
    RetriesExhausted {
        /// The topic.
        topic: String,
        /// A partition that was waiting.
        partition: i32,
        /// Its position.
        offset: i64,
        /// How long it kept trying.
        secs: u64,
        /// The last failure.
        last: String,
    },
    /// The record handler returned an error; the record was not consumed.
    #[error("kafka {topic}/{partition} at offset {offset}: the record handler failed: {source}")]
    Handler {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// The handler's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A transaction could not be begun, extended or ended.
    #[error("kafka transaction '{transactional_id}': {reason}")]
    Transaction {
        /// The `transactional.id`.
        transactional_id: String,
        /// Why.
        reason: String,
    },
    /// The transaction coordinator kept answering that it is not ready (loading its state,
    /// moving, or completing the previous transaction) for the whole request timeout: worth
    /// another try later, as a lost connection is.
    #[error("kafka transaction '{transactional_id}': {reason}")]
    CoordinatorNotReady {
        /// The `transactional.id`.
        transactional_id: String,
        /// What it answered, and for how long.
        reason: String,
    },
    /// The open transaction can no longer commit (KIP-890's TRANSACTION_ABORTABLE: its
    /// coordinator aborted it, for one, after a broker restart): a new producer of the same
    /// id, whose epoch aborts it, can write its records again into a new one.
    #[error("kafka transaction '{transactional_id}' must be aborted: {reason}")]
    TransactionAbortable {
        /// The `transactional.id`.
        transactional_id: String,
        /// Which partition's answer said so.
        reason: String,
    },
    /// A transaction's offsets were refused by the group's coordinator: the group has moved
    /// past this member (a rebalance it has not heard of, or a session that expired), so the
    /// partitions may be another member's. The transaction must be aborted.
    #[error(
        "kafka group '{group_id}': this member (generation {generation}) was fenced: {reason}; \
         its partitions may be another member's, so its open transaction must be aborted"
    )]
    OffsetsFenced {
        /// The `group.id`.
        group_id: String,
        /// The generation or member epoch the offsets carried.
        generation: i32,
        /// The partitions refused, and how.
        reason: String,
    },
    /// The consumer group's coordinator refused this member, or cannot be found.
    #[error("kafka group '{group_id}': {reason}")]
    Group {
        /// The `group.id`.
        group_id: String,
        /// What was refused, and why.
        reason: String,
    },
    /// A newer producer with the same `transactional.id` took over: this one may not write.
    #[error(
        "kafka transaction '{transactional_id}': fenced: another producer with this \
         transactional.id started after this one (epoch {epoch}); this one stops writing"
    )]
    Fenced {
        /// The `transactional.id`.
        transactional_id: String,
        /// This producer's epoch (-1 when not known yet).
        epoch: i16,
    },
    /// A produce request failed.
    #[error("kafka produce to {topic}/{partition}: {reason}")]
    Produce {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Why.
        reason: String,
    },
    /// Batches were dropped (in flight on a lost connection and not sent again before the
    /// request timeout, or refused by the broker for good): records may be missing, so the
    /// producer refuses to go on. A new producer that sends them again (an exactly-once sink's
    /// next attempt does) mends it.
    #[error(
        "kafka producer of {topic}: {batches} batch(es) were not written (the last failure: \
         {reason}); this producer stops here, as records may be missing: send them again with \
         a new one"
    )]
    BatchesLost {
        /// The topic.
        topic: String,
        /// How many batches.
        batches: usize,
        /// The last failure.
        reason: String,
    },
}

/// Why a SASL authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthFailure {
    /// The broker refused, with its message (a wrong password, an unknown user, a refused
    /// token) or, without one, its error code's name.
    #[error("{0}")]
    Refused(String),
    /// The broker closed the connection during the exchange (some refuse credentials so).
    #[error("the broker closed the connection during authentication ({0})")]
    Closed(#[source] std::io::Error),
    /// The client found the broker's side of the exchange wrong.
    #[error(transparent)]
    Exchange(#[from] SaslError),
}

impl Error {
    /// True for failures worth retrying after a metadata refresh (sockets, protocol hiccups).
    pub fn is_transient(&self) -> bool {
        match self {
            // A response in a version this client does not read is answered the same way by
            // the next attempt; a damaged one may not be.
            Self::Malformed { source, .. } => !matches!(source, WireError::Version { .. }),
            Self::Io { .. }
            | Self::NoBroker { .. }
            | Self::Protocol { .. }
            | Self::TlsStream { .. }
            | Self::CoordinatorNotReady { .. }
            | Self::TransactionAbortable { .. }
            | Self::BatchesLost { .. } => true,
            _ => false,
        }
    }
}

fn offered_list(offered: &[String]) -> String {
    if offered.is_empty() {
        "none".into()
    } else {
        offered.join(", ")
    }
}

impl Error {
    /// True for a failure of authentication, TLS or the security protocol: retrying or
    /// trying another broker of the cluster would fail the same way.
    pub fn is_security(&self) -> bool {
        matches!(
            self,
            Self::Authentication { .. }
                | Self::MechanismNotEnabled { .. }
                | Self::Tls { .. }
                | Self::WrongProtocol { .. }
                | Self::Token { .. }
                | Self::Option { .. }
        )
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Kafka's name for an error code (the common ones; others are "UNKNOWN").
pub fn error_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        9 => "REPLICA_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        35 => "UNSUPPORTED_VERSION",
        42 => "INVALID_REQUEST",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        69 => "GROUP_ID_NOT_FOUND",
        56 => "KAFKA_STORAGE_ERROR",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        79 => "MEMBER_ID_REQUIRED",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        87 => "INVALID_RECORD",
        88 => "UNSTABLE_OFFSET_COMMIT",
        90 => "PRODUCER_FENCED",
        100 => "UNKNOWN_TOPIC_ID",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        120 => "TRANSACTION_ABORTABLE",
        _ => "UNKNOWN",
    }
}

/// Error codes after which a metadata refresh and a retry can succeed (leadership moved, a
/// broker is restarting, a replica is catching up).
pub fn is_retriable(code: i16) -> bool {
    matches!(
        code,
        3 | 5 | 6 | 7 | 9 | 13 | 14 | 15 | 19 | 20 | 56 | 74 | 75 | 78 | 100
    )
}

/// What the client found wrong in a SASL exchange (the broker's own refusals are not these:
/// they come back as its error message).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SaslError {
    /// [`SaslExchange::first`](crate::security::SaslExchange::first) was called twice.
    #[error("the exchange was already started")]
    AlreadyStarted,
    /// A message of the broker's does not follow the mechanism's grammar.
    #[error("the broker's message is malformed: {0}")]
    Malformed(&'static str),
    /// The broker reported an error inside the exchange (SCRAM's `e=` attribute).
    #[error("the server reports '{0}'")]
    Reported(String),
    /// SCRAM: the broker's nonce does not begin with the client's.
    #[error("the server's nonce does not extend the client's")]
    ForeignNonce,
    /// SCRAM: the iteration count is outside Kafka's bounds (a man in the middle asking for a
    /// cheap proof, or a hostile broker burning CPU).
    #[error(
        "the server asks for {asked} iterations, outside the {min} to {max} Kafka allows; refused (a man in the middle or a misconfigured broker)"
    )]
    Iterations {
        /// The count the server asked for.
        asked: u32,
        /// The least count accepted.
        min: u32,
        /// The largest count accepted.
        max: u32,
    },
    /// SCRAM: the broker's signature proves it does not know the password.
    #[error(
        "the server's signature is wrong: it does not know the password (a man in the middle?)"
    )]
    ServerSignature,
    /// OAUTHBEARER: the broker refused the token, with its JSON challenge.
    #[error("the broker refused the token: {0}")]
    TokenRefused(String),
    /// A mechanism of the user's own failed.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_version_the_client_does_not_read_is_not_retried() {
        let malformed = |source| Error::Malformed {
            broker: "127.0.0.1:9092".into(),
            api: "Fetch",
            source,
        };
        let damaged = malformed(WireError::Truncated {
            what: "records",
            at: 12,
        });
        let unread = malformed(WireError::Version {
            api: "Fetch",
            version: 99,
        });
        assert!(damaged.is_transient());
        assert!(!unread.is_transient());
    }
}
