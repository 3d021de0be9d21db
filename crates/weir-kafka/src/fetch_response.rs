//! The Fetch response, read in place.
//!
//! Requests are encoded by `kafka-protocol`, but the Fetch response is walked here by hand: it is
//! the one response on the hot path, and decoding it into owned structs costs allocations per
//! response and, worse, trusts array lengths from the wire (`Vec::with_capacity(n)` for any `n`
//! a broken broker sends). This walker allocates nothing: it records, for each partition of
//! the consumer's topic, where its records and aborted-transaction list lie in the response,
//! and checks every length against the bytes that remain.

use std::ops::Range;

use crate::wire::{Cursor, Parse, WireError};

/// One partition of a Fetch response (positions are into the response body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionView {
    pub partition: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Where the aborted-transaction array's entries start, and how many there are.
    aborted_at: usize,
    aborted_count: usize,
    /// The record batches (empty when the broker sent none or null).
    pub records: Range<usize>,
}

/// Walks a Fetch response body (everything after the correlation id) of `version` (4..=12),
/// appending the partitions of `topic` to `out`. Returns the top-level error code.
pub(crate) fn parse_fetch(
    body: &[u8],
    version: i16,
    topic: &str,
    out: &mut Vec<PartitionView>,
) -> Parse<i16> {
    if !(4..=12).contains(&version) {
        return Err(WireError::Version {
            api: "Fetch",
            version,
        });
    }
    let flexible = version >= 12;
    let mut c = Cursor { b: body, pos: 0 };
    if flexible {
        c.tagged("response header")?;
    }
    c.i32("throttle_time_ms")?;
    let mut error_code = 0;
    if version >= 7 {
        error_code = c.i16("error_code")?;
        c.i32("session_id")?;
    }
    let topics = c.array_len(flexible, 2, "topics")?.unwrap_or(0);
    for _ in 0..topics {
        let name = c
            .bytes(flexible, false, "topic name")?
            .ok_or(WireError::Null("topic name"))?;
        let ours = &body[name] == topic.as_bytes();
        let partitions = c.array_len(flexible, 30, "partitions")?.unwrap_or(0);
        for _ in 0..partitions {
            let partition = c.i32("partition_index")?;
            let error_code = c.i16("error_code")?;
            let high_watermark = c.i64("high_watermark")?;
            c.i64("last_stable_offset")?;
            let log_start_offset = if version >= 5 {
                c.i64("log_start_offset")?
            } else {
                -1
            };
            let entry = if flexible { 17 } else { 16 };
            let aborted_count = c
                .array_len(flexible, entry, "aborted_transactions")?
                .unwrap_or(0);
            let aborted_at = c.pos;
            for _ in 0..aborted_count {
                c.take(16, "aborted transaction")?;
                if flexible {
                    c.tagged("aborted transaction")?;
                }
            }
            if version >= 11 {
                c.i32("preferred_read_replica")?;
            }
            let records = c.bytes(flexible, true, "records")?.unwrap_or(0..0);
            if flexible {
                c.tagged("partition")?;
            }
            if ours {
                out.push(PartitionView {
                    partition,
                    error_code,
                    high_watermark,
                    log_start_offset,
                    aborted_at,
                    aborted_count,
                    records,
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
    Ok(error_code)
}

/// The `(producer_id, first_offset)` pairs of a partition's aborted-transaction list (already
/// bounds-checked by [`parse_fetch`]).
pub(crate) fn aborted<'a>(
    body: &'a [u8],
    version: i16,
    p: &PartitionView,
) -> impl Iterator<Item = (i64, i64)> + 'a {
    let flexible = version >= 12;
    let mut c = Cursor {
        b: body,
        pos: p.aborted_at,
    };
    (0..p.aborted_count).map_while(move |_| {
        let pid = c.i64("producer_id").ok()?;
        let first = c.i64("first_offset").ok()?;
        if flexible {
            c.tagged("aborted transaction").ok()?;
        }
        Some((pid, first))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn response(version: i16) -> FetchResponse {
        let part = |i: i32, records: Option<&'static [u8]>, aborted: bool| {
            PartitionData::default()
                .with_partition_index(i)
                .with_error_code(if i == 2 { 6 } else { 0 })
                .with_high_watermark(1000 + i64::from(i))
                .with_last_stable_offset(900)
                .with_log_start_offset(if version >= 5 { 7 } else { -1 })
                .with_aborted_transactions(aborted.then(|| {
                    vec![
                        AbortedTransaction::default()
                            .with_producer_id(ProducerId(42))
                            .with_first_offset(5),
                        AbortedTransaction::default()
                            .with_producer_id(ProducerId(43))
                            .with_first_offset(9),
                    ]
                }))
                .with_records(records.map(Bytes::from_static))
        };
        FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("other")))
                .with_partitions(vec![part(0, Some(b"zzz"), true)]),
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("quotes")))
                .with_partitions(vec![
                    part(0, Some(b"batch-bytes-0"), true),
                    part(1, None, false),
                    part(2, Some(b""), false),
                ]),
        ])
    }

    fn encode(version: i16) -> Vec<u8> {
        let mut buf = BytesMut::new();
        if version >= 12 {
            buf.extend_from_slice(&[0]); // response header tagged fields
        }
        response(version).encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn reads_what_kafka_protocol_encodes_for_every_version() {
        for version in 4..=12 {
            let body = encode(version);
            let mut out = Vec::new();
            assert_eq!(parse_fetch(&body, version, "quotes", &mut out), Ok(0));
            assert_eq!(out.len(), 3, "v{version}");
            assert_eq!(out[0].partition, 0);
            assert_eq!(&body[out[0].records.clone()], b"batch-bytes-0");
            assert_eq!(out[0].high_watermark, 1000);
            assert_eq!(out[0].log_start_offset, if version >= 5 { 7 } else { -1 });
            let ab: Vec<_> = aborted(&body, version, &out[0]).collect();
            assert_eq!(ab, vec![(42, 5), (43, 9)], "v{version}");
            assert!(out[1].records.is_empty());
            assert_eq!(aborted(&body, version, &out[1]).count(), 0);
            assert_eq!(out[2].error_code, 6);
        }
    }

    #[test]
    fn truncated_and_mutated_responses_are_errors_not_panics() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for version in [4, 7, 11, 12] {
            let body = encode(version);
            for cut in 0..body.len() {
                let mut out = Vec::new();
                assert!(parse_fetch(&body[..cut], version, "quotes", &mut out).is_err());
            }
            for _ in 0..20_000 {
                let mut b = body.clone();
                for _ in 0..3 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x as usize) % b.len();
                    b[at] = (x >> 40) as u8;
                }
                let mut out = Vec::new();
                if parse_fetch(&b, version, "quotes", &mut out).is_ok() {
                    for p in &out {
                        let _ = &b[p.records.clone()];
                        let _ = aborted(&b, version, p).count();
                    }
                }
            }
        }
        // A count no response could hold is refused before anything is reserved.
        let mut out = Vec::new();
        let huge = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff];
        assert!(parse_fetch(&huge, 7, "quotes", &mut out).is_err());
    }
}
