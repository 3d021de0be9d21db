//! The protobuf decoder.

mod adversarial;
mod differential;
mod features;
