//! # weir-testdata
//!
//! What weir's program, tests, benchmarks and fuzzers share without pulling in an engine:
//!
//! - [`Rng`]: splitmix64, the one deterministic random number generator of the project;
//! - [`quotes`]: the options-quotes workload: `stocks.QuoteNBBO` messages for 10,000 OPRA option
//!   symbols ([`STOCKS_PROTO`], [`QuoteGenerator`]), encoded as protobuf or JSON;
//! - [`Framing`]: how messages are laid out in a file (`varint`, `u32be`, `lines`): the one
//!   frame reader (the file connector's, [`Framing::frame`]) and the one frame writer
//!   ([`Framing::write`]).
//!
//! The framing lives here rather than in the engine so that the generator, which writes framed
//! files, and the file connector, which reads them, use one definition; it is plain byte
//! arithmetic with no dependency beyond `memchr`.

#![forbid(unsafe_code)]

mod framing;
pub mod quotes;
mod rng;

pub use framing::{Frame, FrameError, Framing};
pub use quotes::{Quote, QuoteFormat, QuoteGenerator, DEFAULT_SEED, QUOTE_MESSAGE, STOCKS_PROTO};
pub use rng::Rng;
