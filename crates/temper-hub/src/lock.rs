//! `temper.lock`: the exact version, content hash and download URL of every hub environment a
//! project uses. `temper env install` writes it; with an entry present, installs take exactly
//! that version and refuse content whose hash differs.
//!
//! ```toml
//! version = 1
//!
//! [[env]]
//! name = "alice/reverse-text"
//! version = "1.2.0"
//! content_hash = "9f2c…"   # SHA-256 hex, temper_envs::package::content_hash
//! url = "https://hub.example/api/v1/envs/alice/reverse-text/1.2.0/archive"
//! ```

use std::path::Path;

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::HubError;

/// The file's name.
pub const LOCKFILE: &str = "temper.lock";
const FORMAT: u32 = 1;

/// Whether `s` is a SHA-256 digest in lowercase hex (what a content hash looks like).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// One locked environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    /// `owner/name`.
    pub name: String,
    /// The resolved version.
    pub version: Version,
    /// SHA-256 hex of the package's content.
    pub content_hash: String,
    /// Where the archive was downloaded from.
    pub url: String,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    /// Format version (1).
    pub version: u32,
    /// Entries, sorted by name.
    #[serde(default)]
    pub env: Vec<Locked>,
}

impl Default for Lockfile {
    fn default() -> Self {
        Self { version: FORMAT, env: Vec::new() }
    }
}

impl Lockfile {
    /// Reads `path`; a missing file is an empty lockfile.
    pub fn read(path: &Path) -> Result<Self, HubError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(HubError::io(path, e)),
        };
        let lock: Self = toml::from_str(&text)
            .map_err(|e| HubError::invalid(format!("{}: {e}", path.display())))?;
        if lock.version != FORMAT {
            return Err(HubError::invalid(format!(
                "{}: lockfile format {} (this temper reads {FORMAT})",
                path.display(),
                lock.version
            )));
        }
        for l in &lock.env {
            let name_ok = l.name.split_once('/').is_some_and(|(owner, name)| {
                crate::reference::valid_name(owner) && crate::reference::valid_name(name)
            });
            if !name_ok {
                return Err(HubError::invalid(format!(
                    "{}: `{}` is not an owner/name",
                    path.display(),
                    l.name
                )));
            }
            if !is_sha256_hex(&l.content_hash) {
                return Err(HubError::invalid(format!(
                    "{}: {}: content_hash is not a SHA-256 hex digest",
                    path.display(),
                    l.name
                )));
            }
        }
        Ok(lock)
    }

    /// Writes `path` atomically (a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> Result<(), HubError> {
        let mut sorted = self.clone();
        sorted.env.sort_by(|a, b| a.name.cmp(&b.name));
        let body = toml::to_string_pretty(&sorted)
            .map_err(|e| HubError::invalid(format!("cannot write the lockfile: {e}")))?;
        let text = format!(
            "# temper.lock: written by `temper env install`; commit it so every machine installs\n# the same environments.\n{body}"
        );
        // A temporary file of its own (two writers never share one), renamed over the file.
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new()
            .prefix(".temper.lock.")
            .tempfile_in(dir)
            .map_err(|e| HubError::io(dir, e))?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| HubError::io(path, e))?;
        tmp.persist(path).map_err(|e| HubError::io(path, e.error))?;
        Ok(())
    }

    /// The entry of `owner/name`.
    pub fn get(&self, name: &str) -> Option<&Locked> {
        self.env.iter().find(|l| l.name == name)
    }

    /// Adds or replaces the entry of `locked.name`.
    pub fn put(&mut self, locked: Locked) {
        self.env.retain(|l| l.name != locked.name);
        self.env.push(locked);
        self.env.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_sorted_and_refuses_a_bad_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(LOCKFILE);
        assert_eq!(Lockfile::read(&path).unwrap(), Lockfile::default());
        let mut lock = Lockfile::default();
        for (name, v) in [("zed/env", "1.0.0"), ("ab/cd", "0.2.0"), ("zed/env", "1.1.0")] {
            lock.put(Locked {
                name: name.into(),
                version: Version::parse(v).unwrap(),
                content_hash: "a".repeat(64),
                url: format!("http://hub/{name}"),
            });
        }
        lock.write(&path).unwrap();
        let back = Lockfile::read(&path).unwrap();
        let names: Vec<(&str, String)> =
            back.env.iter().map(|l| (l.name.as_str(), l.version.to_string())).collect();
        assert_eq!(names, [("ab/cd", "0.2.0".into()), ("zed/env", "1.1.0".into())]);
        let text = std::fs::read_to_string(&path).unwrap().replace(&"a".repeat(64), "xyz");
        std::fs::write(&path, text).unwrap();
        let err = Lockfile::read(&path).unwrap_err().to_string();
        assert!(err.contains("ab/cd: content_hash"), "{err}");
        // A name that would climb out of the store is refused on reading.
        lock.env[0].name = "../../etc".into();
        lock.write(&path).unwrap();
        let err = Lockfile::read(&path).unwrap_err().to_string();
        assert!(err.contains("`../../etc` is not an owner/name"), "{err}");
    }
}
