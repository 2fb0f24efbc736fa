//! Integration tests of temper-verify.

mod adversarial;
mod logic;
mod math_fuzz;
mod math_table;
