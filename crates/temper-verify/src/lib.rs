//! Pure answer checkers: given a model's text and a reference, say how right it is.
//!
//! `temper-verify` owns text extraction (think blocks, `\boxed{}`, answer markers), string
//! similarity (LCS ratio), multiple-choice letters, the math answer verifier, and the
//! [`code::CodeRunner`] trait through which code tests are run. Everything here is a pure function
//! of its inputs: no network, no files, no processes, no clocks. Code is executed only by whatever
//! implements `CodeRunner` (the sandbox), never by this crate. It knows nothing about models,
//! environments, datasets or rollouts.
//!
//! Every function bounds its own work: inputs longer than the documented limits are cut or
//! rejected, so a hostile completion cannot make a checker hang.

pub mod code;
pub mod extract;
pub mod lcs;
pub mod logic;
pub mod math;
pub mod mcq;
pub mod text;
