//! The encodings an engine knows, by the name SQL uses in `'encoding' = '...'`: the built-in
//! `protobuf`, `json`, `avro` and `raw`, and any a user registers.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use weir_codec::{
    AvroFactory, DecoderFactory, EncoderFactory, JsonFactory, ProtobufFactory, RawFactory,
};

use crate::error::EngineError;

/// One encoding: a decoder factory, an encoder factory, or both.
#[derive(Clone, Default)]
struct Encoding {
    decoder: Option<Arc<dyn DecoderFactory>>,
    encoder: Option<Arc<dyn EncoderFactory>>,
}

/// The table of encodings, by name.
pub(crate) struct Encodings(RwLock<BTreeMap<String, Encoding>>);

impl Encodings {
    /// The built-in encodings.
    pub(crate) fn builtin() -> Self {
        let mut map = BTreeMap::new();
        let raw = Arc::new(RawFactory);
        map.insert(
            "protobuf".to_string(),
            Encoding {
                decoder: Some(Arc::new(ProtobufFactory)),
                encoder: Some(Arc::new(ProtobufFactory)),
            },
        );
        map.insert(
            "json".to_string(),
            Encoding {
                decoder: Some(Arc::new(JsonFactory)),
                encoder: Some(Arc::new(JsonFactory)),
            },
        );
        map.insert(
            "avro".to_string(),
            Encoding {
                decoder: Some(Arc::new(AvroFactory)),
                encoder: None,
            },
        );
        map.insert(
            "raw".to_string(),
            Encoding {
                decoder: Some(raw.clone()),
                encoder: Some(raw),
            },
        );
        Self(RwLock::new(map))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Encoding>> {
        // A poisoned registry still holds whole entries: each insert is one map operation.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers (or replaces) an encoding.
    pub(crate) fn register(
        &self,
        name: &str,
        decoder: Option<Arc<dyn DecoderFactory>>,
        encoder: Option<Arc<dyn EncoderFactory>>,
    ) -> Result<(), EngineError> {
        let refuse = |reason| EngineError::Registry {
            name: name.to_string(),
            reason,
        };
        if name.trim().is_empty() {
            return Err(refuse("an encoding name cannot be empty"));
        }
        if decoder.is_none() && encoder.is_none() {
            return Err(refuse("give a decoder factory, an encoder factory or both"));
        }
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), Encoding { decoder, encoder });
        Ok(())
    }

    /// The decoder factory of `name`, or the names that have one.
    pub(crate) fn decoder(&self, name: &str) -> Result<Arc<dyn DecoderFactory>, String> {
        let map = self.read();
        map.get(name)
            .and_then(|e| e.decoder.clone())
            .ok_or_else(|| {
                format!(
                    "unknown encoding '{name}'; registered encodings with a decoder: {}",
                    names(&map, |e| e.decoder.is_some())
                )
            })
    }

    /// The encoder factory of `name`, or the names that have one.
    pub(crate) fn encoder(&self, name: &str) -> Result<Arc<dyn EncoderFactory>, String> {
        let map = self.read();
        map.get(name)
            .and_then(|e| e.encoder.clone())
            .ok_or_else(|| {
                format!(
                    "no encoder is registered for encoding '{name}'; encodings with an encoder: {}",
                    names(&map, |e| e.encoder.is_some())
                )
            })
    }
}

fn names(map: &BTreeMap<String, Encoding>, keep: impl Fn(&Encoding) -> bool) -> String {
    map.iter()
        .filter(|(_, e)| keep(e))
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
