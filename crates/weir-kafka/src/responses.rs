//! The responses the consumer needs besides Fetch (ApiVersions, Metadata, ListOffsets), read by
//! hand for the same reason as Fetch: `kafka-protocol`'s decoders reserve memory for whatever
//! array length the wire claims, so a broken broker could make the process abort. Here every
//! count is checked against the bytes that remain before anything is reserved.

use crate::wire::{Cursor, Parse, WireError};

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerAddr {
    /// Node id.
    pub node_id: i32,
    /// `host:port`.
    pub addr: String,
}

/// One partition's answer to ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListedOffset {
    pub partition: i32,
    /// The offset, or -1 when no record has a timestamp at or after the one asked.
    pub offset: i64,
    pub error_code: i16,
}

/// `(api_key, min_version, max_version)` per API a broker offers.
pub(crate) type ApiVersionList = Vec<(i16, i16, i16)>;

/// What an ApiVersions v3 response says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiVersions {
    pub error_code: i16,
    pub keys: ApiVersionList,
    /// The cluster's finalized `transaction.version` feature level (0 when the broker names
    /// none): 2 and above is KIP-890's transaction protocol.
    pub transaction_version: i16,
}

/// An ApiVersions v3 response body.
pub(crate) fn api_versions(body: &[u8]) -> Parse<ApiVersions> {
    // ApiVersions answers with a v0 header (no tagged fields) whatever the version.
    let mut c = Cursor { b: body, pos: 0 };
    let error_code = c.i16("error_code")?;
    let n = c.array_len(true, 7, "api_keys")?.unwrap_or(0);
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        let key = c.i16("api_key")?;
        let min = c.i16("min_version")?;
        let max = c.i16("max_version")?;
        c.tagged("api key")?;
        keys.push((key, min, max));
    }
    let mut out = ApiVersions {
        error_code,
        keys,
        transaction_version: 0,
    };
    // An error answer (an unsupported request version) may end after the keys.
    if c.pos == body.len() {
        return Ok(out);
    }
    c.i32("throttle_time_ms")?;
    let tags = c.uvarint("tagged fields")?;
    for _ in 0..tags {
        let tag = c.uvarint("tag")?;
        let size = c.uvarint("tag size")? as usize;
        let field = c.take(size, "tagged field")?;
        // Tag 2: FinalizedFeatures, (name, max_version_level, min_version_level) each.
        if tag == 2 {
            out.transaction_version = finalized_level(field, "transaction.version")?;
        }
    }
    Ok(out)
}

/// The max level of feature `name` in a FinalizedFeatures array (0 when absent).
fn finalized_level(field: &[u8], name: &str) -> Parse<i16> {
    let mut c = Cursor { b: field, pos: 0 };
    let n = c.array_len(true, 6, "finalized_features")?.unwrap_or(0);
    let mut level = 0;
    for _ in 0..n {
        let key = c.bytes(true, false, "feature name")?.unwrap_or(0..0);
        let max = c.i16("max_version_level")?;
        c.i16("min_version_level")?;
        c.tagged("finalized feature")?;
        if field.get(key) == Some(name.as_bytes()) {
            level = max;
        }
    }
    Ok(level)
}

/// One topic of a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicMetadata {
    pub error_code: i16,
    /// `(partition_index, error_code, leader_id)`.
    pub partitions: Vec<(i32, i16, i32)>,
}

/// The brokers and, when present, `topic` from a Metadata response body (v4..=12, after the
/// correlation id).
pub(crate) fn metadata(
    body: &[u8],
    version: i16,
    topic: &str,
) -> Parse<(Vec<BrokerAddr>, Option<TopicMetadata>)> {
    if !(4..=12).contains(&version) {
        return Err(WireError::Version {
            api: "Metadata",
            version,
        });
    }
    let flexible = version >= 9;
    let mut c = Cursor { b: body, pos: 0 };
    if flexible {
        c.tagged("response header")?;
    }
    c.i32("throttle_time_ms")?;
    let n = c.array_len(flexible, 10, "brokers")?.unwrap_or(0);
    let mut brokers = Vec::with_capacity(n);
    for _ in 0..n {
        let node_id = c.i32("node_id")?;
        let host = c
            .bytes(flexible, false, "host")?
            .ok_or(WireError::Null("host"))?;
        let port = c.i32("port")?;
        c.bytes(flexible, false, "rack")?;
        if flexible {
            c.tagged("broker")?;
        }
        let host = std::str::from_utf8(&body[host]).map_err(|_| WireError::NotUtf8("host"))?;
        brokers.push(BrokerAddr {
            node_id,
            addr: format!("{host}:{port}"),
        });
    }
    c.bytes(flexible, false, "cluster_id")?;
    c.i32("controller_id")?;
    let n = c.array_len(flexible, 8, "topics")?.unwrap_or(0);
    let mut found = None;
    for _ in 0..n {
        let error_code = c.i16("topic error_code")?;
        let name = c.bytes(flexible, false, "topic name")?;
        if version >= 10 {
            c.take(16, "topic_id")?;
        }
        c.take(1, "is_internal")?;
        let ours = name.is_some_and(|r| &body[r] == topic.as_bytes());
        let pn = c.array_len(flexible, 18, "partitions")?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(if ours { pn } else { 0 });
        for _ in 0..pn {
            let perr = c.i16("partition error_code")?;
            let index = c.i32("partition_index")?;
            let leader = c.i32("leader_id")?;
            if version >= 7 {
                c.i32("leader_epoch")?;
            }
            let lists = if version >= 5 { 3 } else { 2 };
            for _ in 0..lists {
                let k = c.array_len(flexible, 4, "replica list")?.unwrap_or(0);
                c.take(k * 4, "replica list")?;
            }
            if flexible {
                c.tagged("partition")?;
            }
            if ours {
                partitions.push((index, perr, leader));
            }
        }
        if version >= 8 {
            c.i32("topic_authorized_operations")?;
        }
        if flexible {
            c.tagged("topic")?;
        }
        if ours {
            found = Some(TopicMetadata {
                error_code,
                partitions,
            });
        }
    }
    if (8..=10).contains(&version) {
        c.i32("cluster_authorized_operations")?;
    }
    if flexible {
        c.tagged("response")?;
    }
    Ok((brokers, found))
}

/// The partitions of `topic` in a ListOffsets response body (v2..=7, after the correlation id).
pub(crate) fn list_offsets(body: &[u8], version: i16, topic: &str) -> Parse<Vec<ListedOffset>> {
    if !(2..=7).contains(&version) {
        return Err(WireError::Version {
            api: "ListOffsets",
            version,
        });
    }
    let flexible = version >= 6;
    let mut c = Cursor { b: body, pos: 0 };
    if flexible {
        c.tagged("response header")?;
    }
    c.i32("throttle_time_ms")?;
    let n = c.array_len(flexible, 3, "topics")?.unwrap_or(0);
    let mut out = Vec::new();
    for _ in 0..n {
        let name = c
            .bytes(flexible, false, "topic name")?
            .ok_or(WireError::Null("topic"))?;
        let ours = &body[name] == topic.as_bytes();
        let pn = c.array_len(flexible, 22, "partitions")?.unwrap_or(0);
        for _ in 0..pn {
            let partition = c.i32("partition_index")?;
            let error_code = c.i16("error_code")?;
            c.i64("timestamp")?;
            let offset = c.i64("offset")?;
            if version >= 4 {
                c.i32("leader_epoch")?;
            }
            if flexible {
                c.tagged("partition")?;
            }
            if ours {
                out.push(ListedOffset {
                    partition,
                    offset,
                    error_code,
                });
            }
        }
        if flexible {
            c.tagged("topic")?;
        }
    }
    if flexible {
        c.tagged("response")?;
    }
    Ok(out)
}

/// The error code and the enabled mechanisms of a SaslHandshake v0/v1 response body.
pub(crate) fn sasl_handshake(body: &[u8]) -> Parse<(i16, Vec<String>)> {
    let mut c = Cursor { b: body, pos: 0 };
    let error_code = c.i16("error_code")?;
    let n = c.array_len(false, 2, "mechanisms")?.unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let m = c
            .bytes(false, false, "mechanism")?
            .ok_or(WireError::Null("mechanism"))?;
        out.push(String::from_utf8_lossy(&body[m]).into_owned());
    }
    Ok((error_code, out))
}

/// A SaslAuthenticate response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SaslAnswer {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub auth_bytes: Vec<u8>,
    /// v1+: how long the session lasts (0: no limit).
    pub session_lifetime_ms: i64,
}

/// A SaslAuthenticate response body (v0..=2, after the correlation id).
pub(crate) fn sasl_authenticate(body: &[u8], version: i16) -> Parse<SaslAnswer> {
    if !(0..=2).contains(&version) {
        return Err(WireError::Version {
            api: "SaslAuthenticate",
            version,
        });
    }
    let flexible = version >= 2;
    let mut c = Cursor { b: body, pos: 0 };
    if flexible {
        c.tagged("response header")?;
    }
    let error_code = c.i16("error_code")?;
    let error_message = c
        .bytes(flexible, false, "error_message")?
        .map(|r| String::from_utf8_lossy(&body[r]).into_owned());
    let auth = c
        .bytes(flexible, true, "auth_bytes")?
        .ok_or(WireError::Null("auth_bytes"))?;
    let session_lifetime_ms = if version >= 1 {
        c.i64("session_lifetime_ms")?
    } else {
        0
    };
    if flexible {
        c.tagged("response")?;
    }
    Ok(SaslAnswer {
        error_code,
        error_message,
        auth_bytes: body[auth].to_vec(),
        session_lifetime_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiVersionsResponse, BrokerId, ListOffsetsResponse, MetadataResponse, TopicName,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn enc<T: Encodable>(m: &T, version: i16, header_tags: bool) -> Vec<u8> {
        let mut b = BytesMut::new();
        if header_tags {
            b.extend_from_slice(&[0]);
        }
        m.encode(&mut b, version).unwrap();
        b.to_vec()
    }

    fn metadata_response() -> MetadataResponse {
        let topic = |name: &'static str, parts: i32| {
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(name))))
                .with_partitions(
                    (0..parts)
                        .map(|i| {
                            MetadataResponsePartition::default()
                                .with_partition_index(i)
                                .with_leader_id(BrokerId(i % 2 + 1))
                                .with_error_code(if i == 2 { 5 } else { 0 })
                                .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                                .with_isr_nodes(vec![BrokerId(1)])
                        })
                        .collect(),
                )
        };
        MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(9092),
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(2))
                    .with_host(StrBytes::from_static_str("localhost"))
                    .with_port(9093)
                    .with_rack(Some(StrBytes::from_static_str("r1"))),
            ])
            .with_topics(vec![topic("other", 1), topic("quotes", 3)])
    }

    #[test]
    fn metadata_for_every_version() {
        for v in 4..=12 {
            let body = enc(&metadata_response(), v, v >= 9);
            let (brokers, t) = metadata(&body, v, "quotes").unwrap();
            assert_eq!(brokers[1].addr, "localhost:9093", "v{v}");
            let t = t.unwrap();
            assert_eq!(t.partitions, vec![(0, 0, 1), (1, 0, 2), (2, 5, 1)], "v{v}");
            assert!(metadata(&body, v, "absent").unwrap().1.is_none());
            for cut in 0..body.len() {
                assert!(
                    metadata(&body[..cut], v, "quotes").is_err(),
                    "v{v} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn list_offsets_for_every_version() {
        let resp =
            ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("quotes")))
                .with_partitions(vec![
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(0)
                        .with_offset(42),
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(1)
                        .with_error_code(6)
                        .with_offset(-1),
                ])]);
        for v in 2..=7 {
            let body = enc(&resp, v, v >= 6);
            let got = list_offsets(&body, v, "quotes").unwrap();
            assert_eq!(
                got,
                vec![
                    ListedOffset {
                        partition: 0,
                        offset: 42,
                        error_code: 0
                    },
                    ListedOffset {
                        partition: 1,
                        offset: -1,
                        error_code: 6
                    }
                ],
                "v{v}"
            );
            for cut in 0..body.len() {
                assert!(list_offsets(&body[..cut], v, "quotes").is_err());
            }
        }
    }

    #[test]
    fn api_versions_v3() {
        let resp = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(1)
                .with_min_version(4)
                .with_max_version(17),
            ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(13),
        ]);
        let body = enc(&resp, 3, false);
        assert_eq!(
            api_versions(&body).unwrap(),
            ApiVersions {
                error_code: 0,
                keys: vec![(1, 4, 17), (3, 0, 13)],
                transaction_version: 0,
            }
        );
    }

    #[test]
    fn api_versions_reads_the_finalized_transaction_version() {
        use kafka_protocol::messages::api_versions_response::FinalizedFeatureKey;
        let feature = |name: &'static str, level| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_max_version_level(level)
                .with_min_version_level(level)
        };
        let resp = ApiVersionsResponse::default()
            .with_api_keys(vec![ApiVersion::default()
                .with_api_key(26)
                .with_min_version(0)
                .with_max_version(5)])
            .with_finalized_features_epoch(7)
            .with_finalized_features(vec![
                feature("metadata.version", 30),
                feature("transaction.version", 2),
                feature("group.version", 1),
            ]);
        let body = enc(&resp, 3, false);
        let read = api_versions(&body).unwrap();
        assert_eq!(read.keys, vec![(26, 0, 5)]);
        assert_eq!(read.transaction_version, 2);
        // Every cut of the body is an error or reads as much as it holds, never a panic.
        for cut in 0..body.len() {
            let _ = api_versions(&body[..cut]);
        }
        let without = enc(
            &ApiVersionsResponse::default()
                .with_finalized_features(vec![feature("group.version", 1)]),
            3,
            false,
        );
        assert_eq!(api_versions(&without).unwrap().transaction_version, 0);
    }

    #[test]
    fn sasl_responses_for_every_version() {
        use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
        let hs = SaslHandshakeResponse::default()
            .with_error_code(33)
            .with_mechanisms(vec![
                StrBytes::from_static_str("PLAIN"),
                StrBytes::from_static_str("SCRAM-SHA-512"),
            ]);
        for v in 0..=1 {
            let body = enc(&hs, v, false);
            assert_eq!(
                sasl_handshake(&body).unwrap(),
                (33, vec!["PLAIN".to_string(), "SCRAM-SHA-512".to_string()])
            );
            for cut in 0..body.len() {
                assert!(sasl_handshake(&body[..cut]).is_err());
            }
        }
        let auth = SaslAuthenticateResponse::default()
            .with_error_code(58)
            .with_error_message(Some(StrBytes::from_static_str("Authentication failed")))
            .with_auth_bytes(bytes::Bytes::from_static(b"r=abc,s=xyz,i=4096"))
            .with_session_lifetime_ms(3_000);
        for v in 0..=2 {
            let body = enc(&auth, v, v >= 2);
            let got = sasl_authenticate(&body, v).unwrap();
            assert_eq!(got.error_code, 58);
            assert_eq!(got.error_message.as_deref(), Some("Authentication failed"));
            assert_eq!(got.auth_bytes, b"r=abc,s=xyz,i=4096");
            assert_eq!(got.session_lifetime_ms, if v >= 1 { 3_000 } else { 0 });
            for cut in 0..body.len() {
                assert!(
                    sasl_authenticate(&body[..cut], v).is_err(),
                    "v{v} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn absurd_counts_are_refused_not_reserved() {
        // Metadata v4: throttle, then a broker count of i32::MAX with 4 bytes behind it.
        let body = [0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(metadata(&body, 4, "t").is_err());
        // ApiVersions: an api_keys count of 2^32-2 (compact).
        let body = [0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(api_versions(&body).is_err());
        let mut x = 0x1234_5678_9abc_def1u64;
        let base = enc(&metadata_response(), 12, true);
        for _ in 0..20_000 {
            let mut b = base.clone();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) % b.len();
            b[at] = (x >> 32) as u8;
            let _ = metadata(&b, 12, "quotes");
        }
    }
}
