//! Integration tests of temper-verify.

mod math_table;
