//! The weir engine.
