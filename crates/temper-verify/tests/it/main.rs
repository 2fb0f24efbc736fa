//! Integration tests of temper-verify.

mod adversarial;
mod math_fuzz;
mod math_table;
