//! Encoded messages laid end to end in one buffer, so every decoder reads the same slices.

use std::ops::Range;

/// A contiguous buffer of encoded messages (protobuf or JSON) and the byte range of each one.
#[derive(Debug, Clone, Default)]
pub struct Corpus {
    data: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl Corpus {
    /// An empty corpus with room for `messages` messages of about `bytes_per_message` bytes.
    pub fn with_capacity(messages: usize, bytes_per_message: usize) -> Self {
        Self {
            data: Vec::with_capacity(messages * bytes_per_message),
            ranges: Vec::with_capacity(messages),
        }
    }

    /// Encodes `message` with prost and appends it.
    pub fn push<M: prost::Message>(&mut self, message: &M) {
        let start = self.data.len();
        message
            .encode(&mut self.data)
            .expect("a Vec<u8> never runs out of room");
        self.ranges.push(start..self.data.len());
    }

    /// Appends one message's bytes as they are (JSON text, for example).
    pub fn push_bytes(&mut self, message: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(message);
        self.ranges.push(start..self.data.len());
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there is no message.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The encoded size of all messages.
    pub fn total_bytes(&self) -> usize {
        self.data.len()
    }

    /// The mean encoded message size in bytes.
    pub fn avg_message_size(&self) -> f64 {
        self.total_bytes() as f64 / self.len().max(1) as f64
    }

    /// The encoded bytes of message `i`.
    pub fn message(&self, i: usize) -> &[u8] {
        &self.data[self.ranges[i].clone()]
    }

    /// Every message, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.ranges.iter().map(|r| &self.data[r.clone()])
    }

    /// A corpus of the first `n` messages (for correctness checks).
    pub fn head(&self, n: usize) -> Corpus {
        let n = n.min(self.len());
        let end = self.ranges.get(n.wrapping_sub(1)).map_or(0, |r| r.end);
        Corpus {
            data: self.data[..end].to_vec(),
            ranges: self.ranges[..n].to_vec(),
        }
    }
}
