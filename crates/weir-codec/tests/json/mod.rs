//! The JSON decoder.

mod decode;
mod encode;
mod key_order;
mod roundtrip;
