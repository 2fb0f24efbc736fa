use std::path::PathBuf;

/// Everything that can go wrong building or running an environment.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A dataset file could not be read or a row is malformed; `line` is 1-based (a JSONL line or
    /// a Parquet row).
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Dataset {
        /// The dataset file.
        path: PathBuf,
        /// Line or row, when the problem is in one.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A configuration value is invalid; `field` is a dotted path such as `env.max_turns`.
    #[error("{}: field `{field}`: {message}", path.display())]
    Config {
        /// The configuration file (or the built-in environment's name).
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A configuration file is not valid TOML or does not have the expected shape.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The environment name is neither a built-in nor a folder with `environment.toml`.
    #[error(
        "unknown environment `{name}`: not a folder with environment.toml, and not a built-in ({available})"
    )]
    UnknownEnvironment {
        /// What was asked for.
        name: String,
        /// Comma-separated built-in names.
        available: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The environment failed while responding to the model.
    #[error("environment error: {0}")]
    Interaction(String),
    /// An external environment process failed or broke the protocol.
    #[error("external environment `{command}`: {message}")]
    External {
        /// The command line of the process.
        command: String,
        /// What went wrong.
        message: String,
    },
}

impl EnvError {
    pub(crate) fn config(
        path: impl Into<PathBuf>,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::Config { path: path.into(), field: field.to_owned(), message: message.into() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { path: path.into(), source }
    }
}
