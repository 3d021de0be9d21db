//! Where a message came from ([`Position`]) and the metadata columns a source can add
//! (`INCLUDE <kind> [AS <name>]`, as RisingWave spells it).

use std::fmt;
use std::sync::Arc;

use arrow::array::builder::{MapBuilder, MapFieldNames};
use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow::datatypes::{DataType, TimeUnit};

/// A metadata column (`INCLUDE <kind> [AS <name>]`, as RisingWave spells it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaKind {
    /// The file a message came from (Utf8).
    File,
    /// The message's byte offset in its file, or its Kafka offset (Int64).
    Offset,
    /// The Kafka topic (Utf8).
    Topic,
    /// The Kafka partition (Int32).
    Partition,
    /// The Kafka record timestamp (Timestamp(ms, UTC)).
    Timestamp,
    /// The Kafka record key (Binary, null when the key is null).
    Key,
    /// The Kafka record headers (Map of Utf8 key to Binary value, in record order).
    Headers,
}

impl MetaKind {
    /// Parses an `INCLUDE` kind for a connector.
    pub(crate) fn parse(kind: &str, connector: &str) -> Result<Self, String> {
        match (kind, connector) {
            ("file", "file") => Ok(Self::File),
            ("offset", _) => Ok(Self::Offset),
            ("topic", "kafka") => Ok(Self::Topic),
            ("partition", "kafka") => Ok(Self::Partition),
            ("timestamp", "kafka") => Ok(Self::Timestamp),
            ("key", "kafka") => Ok(Self::Key),
            ("headers", "kafka") => Ok(Self::Headers),
            _ => Err(format!(
                "INCLUDE {kind} is not available for the '{connector}' connector (it offers: {})",
                if connector == "kafka" {
                    "topic, partition, offset, timestamp, key, headers"
                } else {
                    "file, offset"
                }
            )),
        }
    }

    /// The column name when no `AS` is given.
    pub(crate) fn default_name(self) -> &'static str {
        match self {
            Self::File => "_weir_file",
            Self::Offset => "_weir_offset",
            Self::Topic => "_weir_topic",
            Self::Partition => "_weir_partition",
            Self::Timestamp => "_weir_timestamp",
            Self::Key => "_weir_key",
            Self::Headers => "_weir_headers",
        }
    }

    /// The Arrow type of the column.
    pub(crate) fn data_type(self) -> DataType {
        match self {
            Self::File | Self::Topic => DataType::Utf8,
            Self::Offset => DataType::Int64,
            Self::Partition => DataType::Int32,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Self::Key => DataType::Binary,
            // Exactly the type the builder produces.
            Self::Headers => arrow::array::Array::data_type(&headers_builder().finish()).clone(),
        }
    }

    /// Whether the column can be null (only the key).
    pub(crate) fn nullable(self) -> bool {
        self == Self::Key
    }
}

type HeadersBuilder = MapBuilder<StringBuilder, BinaryBuilder>;

fn headers_builder() -> HeadersBuilder {
    let names = MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    };
    MapBuilder::new(Some(names), StringBuilder::new(), BinaryBuilder::new())
}

/// Where a message came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Position<'a> {
    /// A message of the file connector.
    File {
        /// The file.
        file: &'a str,
        /// The byte offset of the message's frame in its file.
        offset: i64,
    },
    /// A Kafka record.
    Kafka {
        /// The topic.
        topic: &'a str,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// Milliseconds since the epoch.
        timestamp: i64,
        /// The key, if not null.
        key: Option<&'a [u8]>,
        /// The headers.
        headers: weir_kafka::Headers<'a>,
    },
}

impl fmt::Display for Position<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { file, offset } => write!(f, "file {file} at byte {offset}"),
            Self::Kafka {
                topic,
                partition,
                offset,
                ..
            } => write!(f, "topic {topic} partition {partition} offset {offset}"),
        }
    }
}

/// A metadata column being built for one batch.
pub(crate) enum MetaColumn {
    File(StringBuilder),
    Offset(Int64Builder),
    Topic(StringBuilder),
    Partition(Int32Builder),
    Timestamp(TimestampMillisecondBuilder),
    Key(BinaryBuilder),
    // Boxed: a map builder is several times the size of the others.
    Headers(Box<HeadersBuilder>),
}

impl MetaColumn {
    pub(crate) fn new(kind: MetaKind) -> Self {
        match kind {
            MetaKind::File => Self::File(StringBuilder::new()),
            MetaKind::Offset => Self::Offset(Int64Builder::new()),
            MetaKind::Topic => Self::Topic(StringBuilder::new()),
            MetaKind::Partition => Self::Partition(Int32Builder::new()),
            MetaKind::Timestamp => {
                Self::Timestamp(TimestampMillisecondBuilder::new().with_timezone("UTC"))
            }
            MetaKind::Key => Self::Key(BinaryBuilder::new()),
            MetaKind::Headers => Self::Headers(Box::new(headers_builder())),
        }
    }

    #[inline]
    pub(crate) fn append(&mut self, pos: &Position<'_>) {
        let (file, topic, partition, offset, timestamp, key, headers) = match *pos {
            Position::File { file, offset } => (file, "", 0, offset, 0, None, None),
            Position::Kafka {
                topic,
                partition,
                offset,
                timestamp,
                key,
                headers,
            } => ("", topic, partition, offset, timestamp, key, Some(headers)),
        };
        match self {
            Self::File(b) => b.append_value(file),
            Self::Offset(b) => b.append_value(offset),
            Self::Topic(b) => b.append_value(topic),
            Self::Partition(b) => b.append_value(partition),
            Self::Timestamp(b) => b.append_value(timestamp),
            Self::Key(b) => b.append_option(key),
            Self::Headers(b) => {
                for (k, v) in headers.into_iter().flatten() {
                    b.keys().append_value(String::from_utf8_lossy(k));
                    b.values().append_option(v);
                }
                // Appending a map entry cannot fail here: keys and values were appended in
                // pairs above.
                let _ = b.append(true);
            }
        }
    }

    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            Self::File(b) | Self::Topic(b) => Arc::new(b.finish()),
            Self::Offset(b) => Arc::new(b.finish()),
            Self::Partition(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
            Self::Key(b) => Arc::new(b.finish()),
            Self::Headers(b) => Arc::new(b.finish()),
        }
    }
}
