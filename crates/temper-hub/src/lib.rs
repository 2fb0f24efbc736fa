//! The environments hub: where environment packages are published, versioned, found and
//! installed, so a run can name `owner/name@1.2.0` and get the same task, data and reward code on
//! every machine.
//!
//! - [`archive`]: deterministic `.tar.gz` of a package folder and defensive unpacking (no links,
//!   devices, traversal or size bombs; all or nothing);
//! - [`reference`]: `owner/name[@requirement]` and semver resolution with yanked versions;
//! - [`lock`]: `temper.lock`, the exact versions and content hashes a project installs;
//! - [`client`] and [`install`]: talking to a hub, and installing into the local store;
//! - [`db`], [`store`], [`server`] and [`web`]: the registry server (`temper hub serve`).
//!
//! The identity of a package version is its content hash
//! (`temper_envs::package::content_hash`), shared by push, install, verify and the server.

pub mod archive;
pub mod client;
pub mod db;
pub mod install;
pub mod lock;
pub mod reference;
pub mod server;
pub mod store;
pub mod web;

use std::path::{Path, PathBuf};

pub use archive::{Limits, Packed, Unpacked, pack, unpack, unpack_verified};
pub use client::HubClient;
pub use install::{Installed, Store, install, install_locked};
pub use lock::{LOCKFILE, Locked, Lockfile};
pub use reference::{EnvRef, Wanted, resolve};

/// What can go wrong in the hub's library code.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Input that breaks a rule (a name, a version, an archive, a limit); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A package folder is malformed.
    #[error(transparent)]
    Package(#[from] temper_envs::EnvError),
    /// A database query failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The database could not be opened.
    #[error("database: cannot open {url}: {source}")]
    Open {
        /// The database URL.
        url: String,
        /// Why.
        source: sqlx::Error,
    },
    /// The database's schema could not be brought up to date.
    #[error("database: migrating {url}: {source}")]
    Migrate {
        /// The database URL.
        url: String,
        /// Why.
        source: sqlx::migrate::MigrateError,
    },
    /// The database holds a value this version cannot read; the message names the column.
    #[error("database: {0}")]
    Stored(String),
    /// The object store failed.
    #[error("archive storage: {0}")]
    Storage(#[from] object_store::Error),
    /// The thing exists with other content (a published version, a user).
    #[error("{0}")]
    Conflict(String),
    /// Talking to a hub failed (unreachable, or an unexpected answer).
    #[error("{0}")]
    Http(String),
    /// Downloaded content is not what was pinned.
    #[error(
        "content hash mismatch: expected {expected}, the archive holds {actual}; refusing it (a tampered archive, or a version republished elsewhere)"
    )]
    HashMismatch {
        /// The pinned hash (temper.lock or the server's record).
        expected: String,
        /// What the content hashes to.
        actual: String,
    },
    /// No such thing (or not visible to the caller).
    #[error("not found: {0}")]
    NotFound(String),
    /// Authenticated, but not allowed.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// No valid token.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
}

impl HubError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_owned(), source }
    }
}
