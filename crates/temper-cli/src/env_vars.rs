//! Every environment variable temper reads, in one place.

/// Log filter for stderr (`tracing` syntax, e.g. `info` or `temper_envs=debug`); default `warn`.
pub const LOG: &str = "TEMPER_LOG";
/// Default of `--api-key-var`: the variable holding the model server's API key.
pub const DEFAULT_API_KEY_VAR: &str = "OPENAI_API_KEY";
