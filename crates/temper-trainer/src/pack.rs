//! Packing samples into fixed-length rows, and rows into balanced shares for data-parallel
//! ranks: the rules of `temper_protocol::pack`, which the orchestrator packs RL batches with too.

pub use temper_protocol::pack::{balance, first_fit_decreasing};
