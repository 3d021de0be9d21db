//! # weir-testdata
//!
//! What weir's program, tests, benchmarks and fuzzers share without pulling in an engine:
//!
//! - [`Rng`]: splitmix64, the one deterministic random number generator of the project;
//! - [`quotes`]: the options-quotes workload: `stocks.QuoteNBBO` messages for 10,000 OPRA option
//!   symbols ([`STOCKS_PROTO`], [`QuoteGenerator`]), encoded as protobuf or JSON;
//!
//! The generator writes framed files with `weir_codec::Framing`, the one definition the file
//! connector reads them by.

#![forbid(unsafe_code)]

pub mod quotes;
mod rng;

pub use quotes::{
    Quote, QuoteFormat, QuoteGenerator, DEFAULT_SEED, QUOTE_MESSAGE, STOCKS_AVSC, STOCKS_PROTO,
};
pub use rng::Rng;
