//! The commands of the `weir` program, one file each, and what they share.

pub(crate) mod compact;
pub(crate) mod decode;
pub(crate) mod demo;
pub(crate) mod gen;
pub(crate) mod log;
pub(crate) mod produce;
pub(crate) mod progress;
pub(crate) mod run;
pub(crate) mod stats;

use anyhow::{Context, Result};

/// A multi-thread runtime with a worker for each of `partitions`, but no more workers than the
/// cores this process may use (one per core when `None`): more partitions than cores then run
/// as tasks on those workers instead of threads that take turns on the cores, which costs CPU
/// time in context switches and cold caches.
pub(crate) fn runtime(partitions: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = partitions {
        let cores = std::thread::available_parallelism().map_or(n, usize::from);
        b.worker_threads(n.clamp(1, cores.max(1)));
    }
    b.build().context("cannot start the runtime")
}

/// An error and its causes on one line. weir's errors already name their cause in their own
/// message (and keep it as their source), so a cause whose text is already in the line is not
/// repeated.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Parses `kafka://HOST:PORT[,HOST:PORT...]/TOPIC`.
pub(crate) fn kafka_url(url: &str) -> Result<(Vec<String>, String)> {
    let rest = url
        .strip_prefix("kafka://")
        .with_context(|| format!("'{url}' is not a kafka://HOST:PORT/TOPIC address"))?;
    let (brokers, topic) = rest
        .split_once('/')
        .filter(|(b, t)| !b.is_empty() && !t.is_empty())
        .with_context(|| format!("'{url}' needs brokers and a topic: kafka://HOST:PORT/TOPIC"))?;
    Ok((
        brokers.split(',').map(str::to_string).collect(),
        topic.to_string(),
    ))
}

/// The Kafka client properties of a `--kafka-config` file (a Java properties file, as Kafka's
/// own tools take with `--command-config`), with `${env:...}`/`${file:...}` references resolved.
pub(crate) fn kafka_properties(file: Option<&std::path::Path>) -> Result<Vec<(String, String)>> {
    let Some(file) = file else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the Kafka configuration {}", file.display()))?;
    let pairs = weir_kafka::parse_properties(&text)
        .with_context(|| format!("in the Kafka configuration {}", file.display()))?;
    weir_codec::resolve_references(pairs)
        .with_context(|| format!("in the Kafka configuration {}", file.display()))
}

/// A producer to the topic of `url`, creating the topic with `partitions` partitions if missing.
pub(crate) fn kafka_producer(
    url: &str,
    partitions: i32,
    compression: &str,
    properties: &[(String, String)],
) -> Result<weir_kafka::Producer> {
    let (brokers, topic) = kafka_url(url)?;
    let compression: weir_kafka::Compression = compression.parse().map_err(anyhow::Error::msg)?;
    let security = weir_kafka::SecurityConfig::from_properties(properties.iter().cloned())?;
    weir_kafka::create_topic_with(&brokers, &security, &topic, partitions, 1, &[], true)
        .with_context(|| format!("cannot create topic {topic}"))?;
    weir_kafka::Producer::connect(&weir_kafka::ProducerConfig {
        brokers,
        topic,
        compression,
        security,
        ..weir_kafka::ProducerConfig::default()
    })
    .with_context(|| format!("cannot connect to {url}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = std::io::Error::other("connection refused");
        let e = anyhow::Error::new(weir::SinkError::Io {
            path: "x.parquet".into(),
            source: io,
        })
        .context("in p.sql");
        assert_eq!(
            one_line(&e),
            "in p.sql: cannot write x.parquet: connection refused"
        );
    }

    #[test]
    fn kafka_urls() {
        let (b, t) = kafka_url("kafka://a:1,b:2/quotes").unwrap();
        assert_eq!(
            (b, t.as_str()),
            (vec!["a:1".to_string(), "b:2".into()], "quotes")
        );
        assert!(kafka_url("http://a/b").is_err());
        assert!(kafka_url("kafka://a:1/").is_err());
    }
}
