//! The Kafka options a `kafka` source and a `kafka` sink share: the security of every
//! connection to a broker (librdkafka's names), over the engine's `--kafka-config` properties.

use std::sync::LazyLock;

use weir_codec::{OptionKind, OptionSpec, Options};
use weir_kafka::{SecurityConfig, SecurityValues, SECURITY_OPTIONS};

/// The security options of every connection to a broker (librdkafka's names), as declared by
/// the Kafka client; `'sasl.mechanisms'`, librdkafka's other spelling, is accepted too.
pub(crate) static KAFKA_SECURITY_OPTIONS: LazyLock<Vec<OptionSpec>> = LazyLock::new(|| {
    let mut specs: Vec<OptionSpec> = SECURITY_OPTIONS
        .iter()
        .map(|o| OptionSpec {
            key: o.key,
            kind: match o.values {
                SecurityValues::Choice(words) => OptionKind::Choice(words),
                SecurityValues::Path => OptionKind::Path,
                SecurityValues::Text | SecurityValues::Url => OptionKind::Text,
                // The client may declare kinds of values the engine shows as text.
                #[allow(unreachable_patterns)]
                _ => OptionKind::Text,
            },
            default: o.default,
            doc: o.doc,
            secret: o.secret,
        })
        .collect();
    specs.push(OptionSpec::new(
        "sasl.mechanisms",
        OptionKind::Text,
        "librdkafka's other spelling of 'sasl.mechanism'",
    ));
    specs
});

/// The security settings from `defaults` (a `--kafka-config` file's properties) overridden by
/// the security options among `options`.
pub(crate) fn security_config(
    defaults: &[(String, String)],
    options: &Options,
) -> Result<SecurityConfig, weir_kafka::Error> {
    let mut pairs: Vec<(String, String)> = defaults.to_vec();
    for (k, v) in options.iter() {
        if KAFKA_SECURITY_OPTIONS.iter().any(|s| s.matches(k)) {
            pairs.retain(|(dk, _)| dk != k);
            pairs.push((k.to_string(), v.to_string()));
        }
    }
    SecurityConfig::from_properties(pairs)
}
