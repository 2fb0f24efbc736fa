//! Installing hub environments into the local store, pinned by `temper.lock`.
//!
//! The store keeps each version in its own folder, `ROOT/OWNER/NAME/VERSION-HASH`, written
//! whole or not at all ([`crate::archive::unpack_verified`]) and never changed afterwards. An
//! install:
//!
//! 1. takes the lockfile's entry when it satisfies the reference (`owner/name`, an exact pin, or
//!    a requirement the locked version matches), else asks the hub to resolve it;
//! 2. uses the installed folder when present, after checking its content still hashes to the
//!    pinned value (no network needed);
//! 3. otherwise downloads the archive and unpacks it only if its content hashes to the pinned
//!    value: a lockfile's hash, or the hub's record for a fresh resolution. A lockfile entry is
//!    cross-checked first: the hub must record the same hash for that exact version, and the
//!    archive is fetched from the hub the client talks to, never from a URL the lockfile (or an
//!    answer) names;
//! 4. records the result in the lockfile: the caller writes it, or [`install_locked`] does,
//!    holding a lock on the project folder across read, install and write.

use std::path::{Path, PathBuf};

use semver::Version;

use crate::client::HubClient;
use crate::lock::{Locked, Lockfile};
use crate::reference::{EnvRef, Wanted};
use crate::{HubError, Limits};

/// The local store of installed environments.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// An installed environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// `owner/name`.
    pub name: String,
    /// Its version.
    pub version: Version,
    /// Its content hash.
    pub content_hash: String,
    /// The package folder.
    pub dir: PathBuf,
    /// Whether this call downloaded it (false: it was in the store).
    pub downloaded: bool,
}

impl Store {
    /// The store at `root` (created on the first install).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Its root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `owner/name` at `version` with `hash` lives. Callers pass a validated reference's
    /// name and a hex digest (both checked by [`install`]); anything else is a bug.
    pub fn dir_for(&self, name: &str, version: &Version, hash: &str) -> PathBuf {
        assert!(
            crate::lock::is_sha256_hex(hash) && !name.contains(".."),
            "store path from unchecked input: {name} {hash}"
        );
        self.root.join(name).join(format!("{version}-{hash}"))
    }

    /// Everything installed, sorted by name then version.
    pub fn list(&self) -> Result<Vec<Installed>, HubError> {
        let mut out = Vec::new();
        for owner in read_dirs(&self.root)? {
            for env in read_dirs(&owner)? {
                for version in read_dirs(&env)? {
                    let file = version.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    // VERSION-HASH, where the hash is the last 64 characters.
                    let Some((v, hash)) = file
                        .len()
                        .checked_sub(65)
                        .filter(|&at| file.as_bytes()[at] == b'-')
                        .map(|at| (&file[..at], &file[at + 1..]))
                    else {
                        continue;
                    };
                    let Ok(v) = Version::parse(v) else { continue };
                    if !crate::lock::is_sha256_hex(hash) {
                        continue;
                    }
                    let name = format!("{}/{}", file_name(&owner), file_name(&env));
                    out.push(Installed {
                        name,
                        version: v,
                        content_hash: hash.to_owned(),
                        dir: version.clone(),
                        downloaded: false,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.version.cmp(&b.version)));
        Ok(out)
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Sub-folders of `dir` (none when it does not exist), skipping hidden ones (unpacking staging).
fn read_dirs(dir: &Path) -> Result<Vec<PathBuf>, HubError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(HubError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| HubError::io(dir, e))?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !hidden && entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Whether a locked version answers `wanted`.
fn satisfies(locked: &Locked, wanted: &Wanted) -> bool {
    match wanted {
        Wanted::Latest => true,
        Wanted::Exact(v) => &locked.version == v,
        Wanted::Req(r) => r.matches(&locked.version),
    }
}

/// Installs `reference` into `store` (see the module docs); `lock` gets the entry.
pub async fn install(
    client: &HubClient,
    store: &Store,
    reference: &EnvRef,
    lock: &mut Lockfile,
    limits: &Limits,
) -> Result<Installed, HubError> {
    let name = reference.full_name();
    let locked = lock.get(&name).filter(|l| satisfies(l, &reference.wanted)).cloned();
    let from_lock = locked.is_some();
    let mut target = match locked {
        Some(locked) => locked,
        None => {
            // resolve() checks the answer names this environment and holds a digest.
            let r = client.resolve(reference).await?;
            Locked {
                name: name.clone(),
                version: r.version,
                content_hash: r.content_hash,
                url: r.url,
            }
        }
    };
    if !crate::lock::is_sha256_hex(&target.content_hash) {
        return Err(HubError::invalid(format!("{name}: the pinned content hash is not a digest")));
    }
    let dir = store.dir_for(&name, &target.version, &target.content_hash);
    let downloaded = if dir.is_dir() {
        check_installed(&dir, &target.content_hash)?;
        false
    } else {
        if from_lock {
            // The lockfile is the user's file, not the hub's word: its hash must be what the
            // hub records for that exact version.
            cross_check(client, &target).await?;
        }
        // Fetched from the hub this client talks to, never from a URL a lockfile or an answer
        // names (nor one built from the Host header a proxy rewrote).
        target.url = client.archive_url(reference, &target.version);
        let bytes = client.download(&target.url, limits.max_archive_bytes).await?;
        let (dest, expected, limits) = (dir.clone(), target.content_hash.clone(), *limits);
        let unpacked = tokio::task::spawn_blocking(move || {
            crate::archive::unpack_verified(&bytes, &dest, &limits, &expected)
        })
        .await
        .map_err(|e| HubError::invalid(format!("unpacking {name}: {e}")))?;
        match unpacked {
            Ok(_) => true,
            // Another process installed the same version meanwhile (it won the final rename).
            Err(e) if dir.is_dir() => {
                check_installed(&dir, &target.content_hash).map_err(|_| e)?;
                false
            }
            Err(e) => return Err(e),
        }
    };
    lock.put(target.clone());
    Ok(Installed {
        name,
        version: target.version,
        content_hash: target.content_hash,
        dir,
        downloaded,
    })
}

/// The hub's record of the locked version must carry the locked hash; returns where the hub
/// says its archive is.
async fn cross_check(client: &HubClient, locked: &Locked) -> Result<(), HubError> {
    let exact = EnvRef { wanted: Wanted::Exact(locked.version.clone()), ..locked.name.parse()? };
    let r = client.resolve(&exact).await?;
    if r.version != locked.version || r.content_hash != locked.content_hash {
        return Err(HubError::invalid(format!(
            "content hash mismatch: {} pins {}@{} with content hash {}, but {} records {}@{} \
             with {}; refusing it (an edited lockfile, or a lockfile from another hub)",
            crate::lock::LOCKFILE,
            locked.name,
            locked.version,
            locked.content_hash,
            client.base_url(),
            r.name,
            r.version,
            r.content_hash
        )));
    }
    Ok(())
}

/// [`install`] with `reference` pinned in the lockfile at `lock_path`: the lockfile is read,
/// extended and written back (only if it changed) while an exclusive lock is held on the folder
/// that holds it, so concurrent installs in one project (parallel evaluations, a launcher and a
/// user) never lose each other's entries.
pub async fn install_locked(
    client: &HubClient,
    store: &Store,
    reference: &EnvRef,
    lock_path: &Path,
    limits: &Limits,
) -> Result<Installed, HubError> {
    let folder = lock_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let handle = std::fs::File::open(folder).map_err(|e| HubError::io(folder, e))?;
    // Released when `_guard` drops, at the end of this call.
    let _guard = tokio::task::spawn_blocking(move || {
        nix::fcntl::Flock::lock(handle, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e)
    })
    .await
    .map_err(|e| HubError::invalid(format!("locking {}: {e}", folder.display())))?
    .map_err(|e| HubError::io(folder, e.into()))?;
    let mut lock = Lockfile::read(lock_path)?;
    let before = lock.clone();
    let installed = install(client, store, reference, &mut lock, limits).await?;
    if lock != before {
        lock.write(lock_path)?;
    }
    Ok(installed)
}

/// An installed folder must still hold what was pinned.
fn check_installed(dir: &Path, expected: &str) -> Result<(), HubError> {
    let actual = temper_envs::package::content_hash(dir)?;
    if actual != expected {
        return Err(HubError::invalid(format!(
            "{} was changed after it was installed (its content hashes to {actual}, the pin is \
             {expected}); delete that folder and install again",
            dir.display()
        )));
    }
    Ok(())
}

/// Downloads `reference`'s sources into `dest` (which must not exist), checked against the
/// hub's content hash; the lockfile is not involved.
pub async fn pull(
    client: &HubClient,
    reference: &EnvRef,
    dest: &Path,
    limits: &Limits,
) -> Result<crate::client::Resolved, HubError> {
    let r = client.resolve(reference).await?;
    let bytes = client
        .download(&client.archive_url(reference, &r.version), limits.max_archive_bytes)
        .await?;
    let (to, expected, limits) = (dest.to_owned(), r.content_hash.clone(), *limits);
    tokio::task::spawn_blocking(move || {
        crate::archive::unpack_verified(&bytes, &to, &limits, &expected)
    })
    .await
    .map_err(|e| HubError::invalid(format!("unpacking {reference}: {e}")))??;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_entries_answer_references() {
        let locked = Locked {
            name: "al/bc".into(),
            version: Version::new(1, 2, 3),
            content_hash: "0".repeat(64),
            url: String::new(),
        };
        let wanted = |s: &str| s.parse::<EnvRef>().unwrap().wanted;
        assert!(satisfies(&locked, &wanted("al/bc")));
        assert!(satisfies(&locked, &wanted("al/bc@1.2.3")));
        assert!(satisfies(&locked, &wanted("al/bc@^1.1")));
        assert!(!satisfies(&locked, &wanted("al/bc@1.2.4")));
        assert!(!satisfies(&locked, &wanted("al/bc@^2")));
    }

    #[test]
    fn the_store_lists_what_it_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(tmp.path());
        assert!(store.list().unwrap().is_empty());
        let hash = "ab".repeat(32);
        for v in ["1.10.0", "1.2.0"] {
            let dir = store.dir_for("al/env", &Version::parse(v).unwrap(), &hash);
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::create_dir_all(tmp.path().join("al/env/.unpacking-x")).unwrap();
        std::fs::create_dir_all(tmp.path().join("al/env/junk")).unwrap();
        let listed: Vec<String> =
            store.list().unwrap().iter().map(|i| format!("{}@{}", i.name, i.version)).collect();
        assert_eq!(listed, ["al/env@1.2.0", "al/env@1.10.0"]);
        assert_eq!(store.list().unwrap()[0].content_hash, hash);
    }
}
