//! weir-kafka's integration tests, one binary: against a real broker (`broker`, started by
//! `scripts/test.sh` through `scripts/kafka.sh`; skipped with a notice when
//! `WEIR_KAFKA_BOOTSTRAP` is not set) and against a scripted broker for faults a real one does
//! not produce on demand (`fake_broker`), and TLS and SASL against the secure listeners of
//! `scripts/kafka.sh start --secure` (`secure`; skipped with a notice when `WEIR_KAFKA_SASL_SSL`
//! is not set). The allocation test is `alloc.rs`, a binary of its own.

mod broker;
mod common;
mod fake_broker;
mod group;
mod secure;
