//! Integration tests of the `temper` binary against a loopback mock OpenAI server.

mod agentic;
mod eval;
mod first_hour;
mod gpu;
mod hub;
mod inference;
mod mock;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
mod prometheus;
mod rl;
mod sandbox;
mod sft;
#[cfg(feature = "mpi")]
mod slurm;
mod verify;
