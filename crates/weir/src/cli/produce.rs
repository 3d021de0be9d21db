//! `weir produce`: sends the messages of a file to a Kafka topic.

use anyhow::Result;
use weir_codec::Framing;

use super::progress::{bytes, count};

pub(crate) fn produce(
    input: &str,
    framing: Framing,
    to: &str,
    partitions: i32,
    compression: &str,
    kafka_config: Option<&std::path::Path>,
) -> Result<()> {
    if framing == Framing::AvroContainer {
        anyhow::bail!(
            "--framing avro-container: a container file holds blocks of values, not messages \
             to send one by one; write the topic with `weir gen quotes --to` or a kafka sink"
        );
    }
    let properties = super::kafka_properties(kafka_config)?;
    let mut producer = super::kafka_producer(to, partitions, compression, &properties)?;
    let (n, total) = weir::for_each_message(input, framing, |message| {
        producer.send(None, None, message)?;
        Ok(())
    })?;
    producer.flush()?;
    eprintln!("sent {} messages ({}) to {to}", count(n), bytes(total));
    Ok(())
}
