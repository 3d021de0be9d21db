//! The JSON decoder.

mod decode;
mod key_order;
mod roundtrip;
