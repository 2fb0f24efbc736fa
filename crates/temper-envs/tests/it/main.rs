//! Integration tests of temper-envs: one binary, one module per area.

mod benchmarks;
mod datasets;
mod envs;
mod external;
mod packages;
mod reference;
mod rubric;
mod stop;
mod support;
