//! Every environment variable temper reads, in one place (with `TEMPER_SUPERVISOR_PID`, which
//! the launcher sets on the processes it starts: `temper_launch::process::SUPERVISOR_PID`).

/// Log filter for stderr (`tracing` syntax, e.g. `info` or `temper_envs=debug`); default `warn`
/// (`info` in the processes `temper rl` starts).
pub use temper_launch::process::LOG;
/// Default of `--api-key-var`: the variable holding the model server's API key.
pub const DEFAULT_API_KEY_VAR: &str = "OPENAI_API_KEY";
/// The environments hub's base URL (`temper env`, `temper login`, hub references in `eval` and
/// `rl`).
pub const HUB_URL: &str = "TEMPER_HUB_URL";
/// The hub API token (wins over the one `temper login` saved).
pub const HUB_TOKEN: &str = "TEMPER_HUB_TOKEN";
/// temper's own folder: installed environments (`envs/`) and saved credentials; default
/// `~/.temper`.
pub const HOME: &str = "TEMPER_HOME";
