//! Package archives: `tar` inside `gzip`, written deterministically and read defensively.
//!
//! [`pack`] writes the files of a package folder (`temper_envs::package::package_files`: sorted,
//! regular files only, `.git` and the like left out) as plain ustar entries with fixed metadata
//! (mode 0644, owner 0:0, mtime 0, no user or group names) inside a gzip stream with no name and
//! mtime 0, so the same files give the same bytes. The identity of a package is its content hash
//! (`temper_envs::package::content_hash`, over paths and bytes), not the archive's bytes.
//!
//! [`unpack`] trusts nothing in the archive: it accepts regular files and folders only (no
//! symbolic or hard links, devices, FIFOs or other entry types), paths made of plain components
//! (no absolute paths, `..`, `.`, empty components, backslashes, control characters, or names the
//! content hash leaves out such as `.git`), at most
//! [`Limits::max_files`] entries, [`Limits::max_path_bytes`] per path and
//! [`Limits::max_unpacked_bytes`] in all — counted from the bytes actually read, not from the
//! headers. Extension headers are not trusted either: tar readers load GNU long names and PAX
//! records whole into memory before any check, so entries are read raw here, a GNU long name
//! (what [`pack`] writes for a path past ustar's fields) may hold at most one path's bytes, and
//! PAX records, GNU long link names and sparse files are refused. The decompressed stream as a
//! whole, headers and padding included, has a byte budget ([`stream_budget`]), so no entry type
//! can make a small archive expand without bound. It writes into a fresh folder next to the destination and renames it into place only
//! when everything passed, so a refused archive leaves nothing behind.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use temper_envs::package;

use crate::HubError;

/// Bounds on what an archive may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The archive itself (compressed).
    pub max_archive_bytes: u64,
    /// The sum of the files' sizes once unpacked.
    pub max_unpacked_bytes: u64,
    /// Entries (files and folders).
    pub max_files: usize,
    /// Bytes of one relative path.
    pub max_path_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_archive_bytes: 64 << 20,
            max_unpacked_bytes: 256 << 20,
            max_files: 10_000,
            max_path_bytes: 255,
        }
    }
}

/// A packed package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The `.tar.gz` bytes.
    pub bytes: Vec<u8>,
    /// `temper_envs::package::content_hash` of the folder.
    pub content_hash: String,
    /// Relative paths, sorted.
    pub files: Vec<String>,
    /// The files' total size.
    pub unpacked_bytes: u64,
}

/// One file of a package.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileEntry {
    /// Relative path.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256 hex of its bytes.
    pub sha256: String,
}

/// What [`unpack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// The content hash of the unpacked folder.
    pub content_hash: String,
    /// The regular files written, sorted by path.
    pub files: Vec<FileEntry>,
    /// Their total size.
    pub bytes: u64,
}

/// Packs the package folder `dir` (which must hold `environment.toml`).
pub fn pack(dir: &Path, limits: &Limits) -> Result<Packed, HubError> {
    if !dir.join(package::MANIFEST).is_file() {
        return Err(HubError::invalid(format!(
            "{}: not a package (no {} at its root)",
            dir.display(),
            package::MANIFEST
        )));
    }
    let files = package::package_files(dir)?;
    if files.len() > limits.max_files {
        return Err(HubError::invalid(format!(
            "{}: {} files; a package may hold at most {}",
            dir.display(),
            files.len(),
            limits.max_files
        )));
    }
    let gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), Compression::new(9));
    let mut tar = tar::Builder::new(gz);
    let mut total = 0u64;
    let mut names = Vec::with_capacity(files.len());
    let mut hash = package::ContentHasher::default();
    for (rel, full) in &files {
        check_path(rel, limits)
            .map_err(|m| HubError::invalid(format!("{}: {m}", full.display())))?;
        let data = fs::read(full).map_err(|e| HubError::io(full, e))?;
        total += data.len() as u64;
        if total > limits.max_unpacked_bytes {
            return Err(HubError::invalid(format!(
                "{}: more than {} bytes of files; the limit is {}",
                dir.display(),
                total,
                limits.max_unpacked_bytes
            )));
        }
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, rel, data.as_slice()).map_err(|e| HubError::io(full, e))?;
        hash.add(rel, &data);
        names.push(rel.clone());
    }
    let gz = tar.into_inner().map_err(|e| HubError::io(dir, e))?;
    let bytes = gz.finish().map_err(|e| HubError::io(dir, e))?;
    if bytes.len() as u64 > limits.max_archive_bytes {
        return Err(HubError::invalid(format!(
            "{}: the archive is {} bytes; the limit is {}",
            dir.display(),
            bytes.len(),
            limits.max_archive_bytes
        )));
    }
    Ok(Packed { bytes, content_hash: hash.finish(), files: names, unpacked_bytes: total })
}

/// A relative path an archive may hold: plain components separated by `/`.
fn check_path(rel: &str, limits: &Limits) -> Result<(), String> {
    if rel.is_empty() {
        return Err("an empty path".into());
    }
    if rel.len() > limits.max_path_bytes {
        return Err(format!("path of {} bytes (limit {})", rel.len(), limits.max_path_bytes));
    }
    if rel.starts_with('/') {
        return Err(format!("absolute path {rel:?}"));
    }
    if rel.contains('\\') || rel.chars().any(char::is_control) {
        return Err(format!("path {rel:?} holds a backslash or a control character"));
    }
    for part in rel.split('/') {
        match part {
            "" => return Err(format!("path {rel:?} has an empty component")),
            "." | ".." => return Err(format!("path {rel:?} leaves its folder or names `.`")),
            // The content hash leaves these out, so they could change unseen: refuse them.
            p if package::IGNORED.contains(&p) => {
                return Err(format!("path {rel:?} holds `{p}`, which packages leave out"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Unpacks `archive` into `dest`, which must not exist yet; see the module docs for what is
/// refused. On any error nothing is left at `dest`.
pub fn unpack(archive: &[u8], dest: &Path, limits: &Limits) -> Result<Unpacked, HubError> {
    unpack_checked(archive, dest, limits, None)
}

/// [`unpack`], and the unpacked content must hash to `expected` (a lockfile's or the server's
/// word): otherwise nothing is left at `dest` and the error names both hashes.
pub fn unpack_verified(
    archive: &[u8],
    dest: &Path,
    limits: &Limits,
    expected: &str,
) -> Result<Unpacked, HubError> {
    unpack_checked(archive, dest, limits, Some(expected))
}

fn unpack_checked(
    archive: &[u8],
    dest: &Path,
    limits: &Limits,
    expected: Option<&str>,
) -> Result<Unpacked, HubError> {
    if archive.len() as u64 > limits.max_archive_bytes {
        return Err(HubError::invalid(format!(
            "the archive is {} bytes; the limit is {}",
            archive.len(),
            limits.max_archive_bytes
        )));
    }
    if dest.exists() {
        return Err(HubError::invalid(format!("{} already exists", dest.display())));
    }
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
    let staging = tempfile::Builder::new()
        .prefix(".unpacking-")
        .tempdir_in(parent)
        .map_err(|e| HubError::io(parent, e))?;
    let (files, bytes) = unpack_into(archive, staging.path(), limits)?;
    if !staging.path().join(package::MANIFEST).is_file() {
        return Err(HubError::invalid(format!(
            "the archive has no {} at its root",
            package::MANIFEST
        )));
    }
    let content_hash = package::content_hash(staging.path())?;
    if let Some(expected) = expected
        && expected != content_hash
    {
        return Err(HubError::HashMismatch { expected: expected.to_owned(), actual: content_hash });
    }
    let staged: PathBuf = staging.keep();
    if let Err(e) = fs::rename(&staged, dest) {
        let _ = fs::remove_dir_all(&staged);
        return Err(HubError::io(dest, e));
    }
    Ok(Unpacked { content_hash, files, bytes })
}

/// One file read out of an archive: its first bytes and its whole size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// At most the bytes asked for.
    pub bytes: Vec<u8>,
    /// The file's size in the archive.
    pub size: u64,
}

impl FileRead {
    /// Whether `bytes` holds less than the whole file.
    pub fn truncated(&self) -> bool {
        (self.bytes.len() as u64) < self.size
    }
}

/// The first `max_bytes` of the regular file at `wanted` (a package-relative path) in a
/// published archive, or `None` when it has no such file. Reading stops at that file, and the
/// archive is held to the same stream budget as [`unpack`].
pub fn read_file(
    archive: &[u8],
    wanted: &str,
    limits: &Limits,
    max_bytes: u64,
) -> Result<Option<FileRead>, HubError> {
    let bad = |m: String| HubError::invalid(format!("refused archive: {m}"));
    let limit = stream_budget(limits);
    let mut tar = tar::Archive::new(Budget { inner: GzDecoder::new(archive), left: limit, limit });
    let mut long_name: Option<Vec<u8>> = None;
    for entry in tar.entries().map_err(|e| bad(e.to_string()))?.raw(true) {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let kind = entry.header().entry_type();
        if kind.is_gnu_longname() {
            long_name = Some(read_long_name(&mut entry, limits).map_err(bad)?);
            continue;
        }
        let raw = match long_name.take() {
            Some(name) => name,
            None => entry.path_bytes().into_owned(),
        };
        let is_file = matches!(kind, tar::EntryType::Regular | tar::EntryType::Continuous);
        if is_file && raw == wanted.as_bytes() {
            let size = entry.size();
            let mut bytes = Vec::with_capacity(size.min(max_bytes) as usize);
            entry.take(max_bytes).read_to_end(&mut bytes).map_err(|e| bad(e.to_string()))?;
            return Ok(Some(FileRead { bytes, size }));
        }
    }
    Ok(None)
}

/// The size of a tar block: headers, and the unit data is padded to.
const BLOCK: u64 = 512;

/// The most bytes the decompressed tar stream of an archive within `limits` can hold: the files'
/// bytes, and for each entry its header, a GNU long-name entry for its path, and the padding of
/// both, plus the end-of-archive blocks. Reading past it is refused whatever the headers say.
pub fn stream_budget(limits: &Limits) -> u64 {
    let long_name = (limits.max_path_bytes as u64 + 1).div_ceil(BLOCK) * BLOCK;
    let per_entry = 2 * BLOCK + long_name + 2 * BLOCK;
    let entries = limits.max_files as u64 + 1;
    limits
        .max_unpacked_bytes
        .saturating_add(entries.saturating_mul(per_entry))
        .saturating_add(20 * BLOCK)
}

/// A reader that fails once more than `left` bytes have been read through it.
struct Budget<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Read for Budget<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Ask for one byte past the budget, so that reaching it exactly is not an error.
        let want =
            buf.len().min(usize::try_from(self.left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(format!(
                "it expands past {} bytes of tar stream",
                self.limit
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn unpack_into(
    archive: &[u8],
    root: &Path,
    limits: &Limits,
) -> Result<(Vec<FileEntry>, u64), HubError> {
    let bad = |m: String| HubError::invalid(format!("refused archive: {m}"));
    let limit = stream_budget(limits);
    let mut tar = tar::Archive::new(Budget { inner: GzDecoder::new(archive), left: limit, limit });
    let mut seen = BTreeSet::new();
    let (mut entries, mut files, mut total) = (0usize, Vec::new(), 0u64);
    // A GNU long name read from the entry before, for the entry that follows it.
    let mut long_name: Option<Vec<u8>> = None;
    // Raw: the tar crate would read every extension entry whole into memory, unchecked.
    for entry in tar.entries().map_err(|e| bad(e.to_string()))?.raw(true) {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let kind = entry.header().entry_type();
        if kind.is_gnu_longname() {
            if long_name.is_some() {
                return Err(bad("two long-name entries for one file".into()));
            }
            long_name = Some(read_long_name(&mut entry, limits).map_err(bad)?);
            continue;
        }
        if let Some(what) = extension_kind(kind) {
            return Err(bad(format!(
                "it holds {what}, which packages never do (they are plain ustar entries)"
            )));
        }
        entries += 1;
        if entries > limits.max_files {
            return Err(bad(format!("more than {} entries", limits.max_files)));
        }
        let raw = match long_name.take() {
            Some(name) => name,
            None => entry.path_bytes().into_owned(),
        };
        let rel = String::from_utf8(raw).map_err(|_| bad("a path that is not UTF-8".into()))?;
        let is_dir = kind == tar::EntryType::Directory;
        let rel_trimmed = if is_dir { rel.trim_end_matches('/') } else { rel.as_str() };
        check_path(rel_trimmed, limits).map_err(bad)?;
        // Belt and braces: the path must be plain components by the OS's reading too.
        if !Path::new(rel_trimmed).components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad(format!("path {rel:?}")));
        }
        match kind {
            tar::EntryType::Directory => {
                let path = root.join(rel_trimmed);
                fs::create_dir_all(&path).map_err(|e| HubError::io(&path, e))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if !seen.insert(rel_trimmed.to_owned()) {
                    return Err(bad(format!("{rel:?} appears twice")));
                }
                let path = root.join(rel_trimmed);
                let left = limits.max_unpacked_bytes - total;
                let (bytes, sha256) = write_file(&mut entry, &path, left).map_err(|e| match e {
                    WriteError::TooBig => {
                        bad(format!("it expands past {} bytes", limits.max_unpacked_bytes))
                    }
                    WriteError::Read(e) => bad(e.to_string()),
                    WriteError::Write(e) => HubError::io(&path, e),
                })?;
                total += bytes;
                files.push(FileEntry { path: rel_trimmed.to_owned(), bytes, sha256 });
            }
            other => {
                let what = match other {
                    tar::EntryType::Symlink => "a symbolic link",
                    tar::EntryType::Link => "a hard link",
                    tar::EntryType::Char | tar::EntryType::Block => "a device file",
                    tar::EntryType::Fifo => "a FIFO",
                    _ => "an entry that is neither a file nor a folder",
                };
                return Err(bad(format!("{rel:?} is {what}")));
            }
        }
    }
    if long_name.is_some() {
        return Err(bad("a long-name entry that names no file".into()));
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((files, total))
}

/// Why [`write_file`] stopped.
enum WriteError {
    /// More than the bytes left of the package's budget.
    TooBig,
    /// The archive could not be read.
    Read(std::io::Error),
    /// The file could not be written.
    Write(std::io::Error),
}

/// Writes `data` to a new file at `path`, refusing it past `left` bytes; counts what is read,
/// not what the header claims. Returns its size and SHA-256 hex.
fn write_file(data: &mut impl Read, path: &Path, left: u64) -> Result<(u64, String), WriteError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(WriteError::Write)?;
    }
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(WriteError::Write)?;
    let (mut buf, mut sha, mut size) = ([0u8; 64 << 10], Sha256::new(), 0u64);
    let mut reader = data.take(left.saturating_add(1));
    loop {
        let n = reader.read(&mut buf).map_err(WriteError::Read)?;
        if n == 0 {
            return Ok((size, hex::encode(sha.finalize())));
        }
        size += n as u64;
        if size > left {
            return Err(WriteError::TooBig);
        }
        out.write_all(&buf[..n]).map_err(WriteError::Write)?;
        sha.update(&buf[..n]);
    }
}

/// The path a GNU long-name entry holds: at most one path's bytes and its NUL, read whole only
/// once its declared size is known to be that small.
fn read_long_name<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    limits: &Limits,
) -> Result<Vec<u8>, String> {
    let cap = limits.max_path_bytes as u64 + 1;
    let size = entry.size();
    if size > cap {
        return Err(format!("a long-name header of {size} bytes (limit {cap})"));
    }
    let mut name = Vec::with_capacity(size as usize);
    entry.take(cap).read_to_end(&mut name).map_err(|e| e.to_string())?;
    while name.last() == Some(&0) {
        name.pop();
    }
    Ok(name)
}

/// What an extension entry type is, for the ones refused outright.
fn extension_kind(kind: tar::EntryType) -> Option<&'static str> {
    if kind.is_pax_local_extensions() || kind.is_pax_global_extensions() {
        Some("a PAX extension header")
    } else if kind.is_gnu_longlink() {
        Some("a GNU long link name")
    } else if kind.is_gnu_sparse() {
        Some("a sparse file")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use flate2::write::GzEncoder;

    use super::*;

    fn package(dir: &Path) {
        fs::create_dir_all(dir.join("data")).unwrap();
        fs::write(
            dir.join("environment.toml"),
            "[environment]\nname = \"demo\"\nversion = \"0.1.0\"\n",
        )
        .unwrap();
        fs::write(dir.join("data/train.jsonl"), "{\"question\": \"q\", \"answer\": \"a\"}\n")
            .unwrap();
        fs::write(dir.join("README.md"), "# demo\n").unwrap();
    }

    /// An archive built by hand, entry by entry: (path, type, data, link target).
    fn hostile(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            // Write the name bytes directly: `set_path` itself refuses `..` and absolute paths.
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
            }
            h.set_cksum();
            tar.append(&h, *data).unwrap();
        }
        let raw = tar.into_inner().unwrap();
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&raw).unwrap();
        gz.finish().unwrap()
    }

    const MANIFEST: (&str, tar::EntryType, &[u8], Option<&str>) =
        ("environment.toml", tar::EntryType::Regular, b"[environment]\n", None);

    #[test]
    fn packing_is_deterministic_and_round_trips_with_the_same_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        package(&a);
        package(&b);
        // Different mtimes and creation order, same files: same bytes.
        fs::write(b.join("README.md"), "# demo\n").unwrap();
        let limits = Limits::default();
        let (pa, pb) = (pack(&a, &limits).unwrap(), pack(&b, &limits).unwrap());
        assert_eq!(pa, pb);
        assert_eq!(pa.files, ["README.md", "data/train.jsonl", "environment.toml"]);
        let out = tmp.path().join("out/demo");
        let u = unpack(&pa.bytes, &out, &limits).unwrap();
        assert_eq!(u.content_hash, pa.content_hash);
        let paths: Vec<&str> = u.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, pa.files);
        let readme = u.files.iter().find(|f| f.path == "README.md").unwrap();
        assert_eq!(
            (readme.bytes, readme.sha256.as_str()),
            (7, hex::encode(Sha256::digest(b"# demo\n")).as_str())
        );
        assert_eq!(fs::read_to_string(out.join("README.md")).unwrap(), "# demo\n");
        // One changed byte changes the hash.
        fs::write(b.join("README.md"), "# demo!\n").unwrap();
        assert_ne!(pack(&b, &limits).unwrap().content_hash, pa.content_hash);
    }

    #[test]
    fn hostile_archives_are_refused_and_leave_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = Limits::default();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "traversal",
                hostile(&[MANIFEST, ("../evil.sh", tar::EntryType::Regular, b"x", None)]),
                "leaves its folder",
            ),
            (
                "nested traversal",
                hostile(&[MANIFEST, ("data/../../evil", tar::EntryType::Regular, b"x", None)]),
                "leaves its folder",
            ),
            (
                "absolute",
                hostile(&[MANIFEST, ("/etc/evil", tar::EntryType::Regular, b"x", None)]),
                "absolute path",
            ),
            (
                "symlink",
                hostile(&[MANIFEST, ("link", tar::EntryType::Symlink, b"", Some("/etc/passwd"))]),
                "symbolic link",
            ),
            (
                "hard link",
                hostile(&[MANIFEST, ("hl", tar::EntryType::Link, b"", Some("environment.toml"))]),
                "hard link",
            ),
            (
                "char device",
                hostile(&[MANIFEST, ("tty", tar::EntryType::Char, b"", None)]),
                "device",
            ),
            (
                "block device",
                hostile(&[MANIFEST, ("sda", tar::EntryType::Block, b"", None)]),
                "device",
            ),
            ("fifo", hostile(&[MANIFEST, ("pipe", tar::EntryType::Fifo, b"", None)]), "FIFO"),
            (
                "duplicate",
                hostile(&[MANIFEST, ("environment.toml", tar::EntryType::Regular, b"x", None)]),
                "twice",
            ),
            (
                "backslash",
                hostile(&[MANIFEST, ("..\\evil", tar::EntryType::Regular, b"x", None)]),
                "backslash",
            ),
            (
                "unhashed name",
                hostile(&[
                    MANIFEST,
                    (".git/hooks/post-checkout", tar::EntryType::Regular, b"x", None),
                ]),
                "packages leave out",
            ),
            (
                "no manifest",
                hostile(&[("a.txt", tar::EntryType::Regular, b"x", None)]),
                "environment.toml",
            ),
            ("not gzip", b"just some bytes".to_vec(), "refused archive"),
        ];
        for (what, bytes, expect) in cases {
            let dest = tmp.path().join(format!("out-{}", what.replace(' ', "-")));
            let err = unpack(&bytes, &dest, &limits).expect_err(what).to_string();
            assert!(err.contains(expect), "{what}: {err}");
            assert!(!dest.exists(), "{what}: nothing at the destination");
        }
        assert!(!tmp.path().parent().unwrap().join("evil.sh").exists());
        // No staging folder is left behind either.
        let left: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn size_and_count_limits_count_what_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        // 8 MiB of zeros compresses to a few KiB: a small archive that expands past the limit.
        let zeros = vec![0u8; 8 << 20];
        let bomb = hostile(&[MANIFEST, ("zeros.bin", tar::EntryType::Regular, &zeros, None)]);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let limits = Limits { max_unpacked_bytes: 1 << 20, ..Limits::default() };
        let err = unpack(&bomb, &tmp.path().join("bomb"), &limits).unwrap_err().to_string();
        assert!(err.contains("expands past 1048576 bytes"), "{err}");
        assert!(!tmp.path().join("bomb").exists());

        let small = Limits { max_archive_bytes: 100, ..Limits::default() };
        let err = unpack(&bomb, &tmp.path().join("big"), &small).unwrap_err().to_string();
        assert!(err.contains("limit is 100"), "{err}");

        let many: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
        let entries: Vec<_> = std::iter::once(MANIFEST)
            .chain(many.iter().map(|n| (n.as_str(), tar::EntryType::Regular, &b"x"[..], None)))
            .collect();
        let few = Limits { max_files: 4, ..Limits::default() };
        let err = unpack(&hostile(&entries), &tmp.path().join("many"), &few).unwrap_err();
        assert!(err.to_string().contains("more than 4 entries"), "{err}");
    }

    /// A gzip'd tar whose first entry is an extension header of `kind` declaring `size` bytes of
    /// zeros, then the manifest: streamed, so building it takes little memory.
    fn extension_bomb(kind: tar::EntryType, size: u64) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_cksum();
        gz.write_all(h.as_bytes()).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut left = size.next_multiple_of(512);
        while left > 0 {
            let n = left.min(chunk.len() as u64);
            gz.write_all(&chunk[..n as usize]).unwrap();
            left -= n;
        }
        let mut m = tar::Header::new_gnu();
        m.set_path(MANIFEST.0).unwrap();
        m.set_size(MANIFEST.2.len() as u64);
        m.set_cksum();
        gz.write_all(m.as_bytes()).unwrap();
        gz.write_all(
            &MANIFEST.2.iter().copied().chain(std::iter::repeat(0)).take(512).collect::<Vec<_>>(),
        )
        .unwrap();
        gz.write_all(&[0u8; 1024]).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn long_paths_round_trip_and_extension_headers_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let limits = Limits::default();
        // A 150-byte file name does not fit ustar's fields: the packer writes a GNU long name.
        let dir = tmp.path().join("pkg");
        package(&dir);
        let long = format!("data/{}.txt", "n".repeat(150));
        fs::write(dir.join(&long), "x").unwrap();
        let packed = pack(&dir, &limits).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(packed.bytes.as_slice()).read_to_end(&mut raw).unwrap();
        assert!(raw.windows(13).any(|w| w == b"././@LongLink"), "the packer wrote a long name");
        let u = unpack(&packed.bytes, &tmp.path().join("out"), &limits).unwrap();
        assert_eq!(u.content_hash, packed.content_hash);
        assert!(u.files.iter().any(|f| f.path == long));

        let cases = [
            (extension_bomb(tar::EntryType::GNULongName, 4096), "long-name header of 4096 bytes"),
            (extension_bomb(tar::EntryType::XHeader, 64), "PAX extension header"),
            (extension_bomb(tar::EntryType::XGlobalHeader, 64), "PAX extension header"),
            (extension_bomb(tar::EntryType::GNULongLink, 64), "GNU long link"),
            (extension_bomb(tar::EntryType::GNUSparse, 64), "sparse file"),
        ];
        for (i, (bytes, expect)) in cases.iter().enumerate() {
            let err = unpack(bytes, &tmp.path().join(format!("x{i}")), &limits).unwrap_err();
            assert!(err.to_string().contains(expect), "{expect}: {err}");
        }
        // A long name must name something.
        let mut dangling = tar::Header::new_gnu();
        dangling.set_entry_type(tar::EntryType::GNULongName);
        dangling.set_size(4);
        dangling.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        dangling.set_cksum();
        let mut t = dangling.as_bytes().to_vec();
        t.extend_from_slice(&[b'a', b'b', b'c', 0]);
        t.resize(512 * 2 + 1024, 0);
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&t).unwrap();
        let err = unpack(&gz.finish().unwrap(), &tmp.path().join("d"), &limits).unwrap_err();
        assert!(err.to_string().contains("names no file"), "{err}");
    }

    #[test]
    fn the_decompressed_stream_has_a_budget_whatever_the_entry_type() {
        // A folder entry's data is never written anywhere, yet it is decompressed and skipped:
        // 8 MiB of it must not get past a 1 MiB package limit.
        let zeros = vec![0u8; 8 << 20];
        let bomb = hostile(&[MANIFEST, ("data/", tar::EntryType::Directory, &zeros, None)]);
        let limits = Limits { max_unpacked_bytes: 1 << 20, max_files: 10, ..Limits::default() };
        assert!(stream_budget(&limits) < 2 << 20, "{}", stream_budget(&limits));
        let tmp = tempfile::tempdir().unwrap();
        let err = unpack(&bomb, &tmp.path().join("out"), &limits).unwrap_err().to_string();
        assert!(err.contains("bytes of tar stream"), "{err}");
        // The budget leaves room for what the limits allow: a package at every limit unpacks.
        let names: Vec<String> = (0..9).map(|i| format!("{}{i}", "p".repeat(254))).collect();
        let data = vec![7u8; (1 << 20) / 10];
        let dir = tmp.path().join("full");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("environment.toml"), MANIFEST.2).unwrap();
        for n in &names {
            fs::write(dir.join(n), &data).unwrap();
        }
        let packed = pack(&dir, &limits).unwrap();
        unpack(&packed.bytes, &tmp.path().join("full-out"), &limits).unwrap();
    }

    /// Run by [`extension_headers_cost_no_memory`] in a child process, so that the peak resident
    /// memory it reports is this unpacking's alone.
    #[test]
    #[ignore = "a child of extension_headers_cost_no_memory"]
    fn extension_header_memory_child() {
        let tmp = tempfile::tempdir().unwrap();
        for (i, kind) in
            [tar::EntryType::GNULongName, tar::EntryType::XHeader].into_iter().enumerate()
        {
            let bomb = extension_bomb(kind, 256 << 20);
            let err = unpack(&bomb, &tmp.path().join(format!("out{i}")), &Limits::default());
            let err = err.expect_err("refused").to_string();
            assert!(err.contains("refused archive"), "{err}");
        }
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let hwm = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        // The parent reads this line.
        #[allow(clippy::print_stdout)]
        {
            println!("child {hwm}");
        }
    }

    #[test]
    fn extension_headers_cost_no_memory() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "archive::tests::extension_header_memory_child"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let kb: u64 = stdout
            .lines()
            .find_map(|l| l.split_once("child VmHWM:").map(|(_, v)| v))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM line in {stdout}"));
        // Two 256 MiB extension headers: a reader that loads them would peak past 256 MiB.
        assert!(kb < 64 << 10, "peak resident memory {kb} kB");
    }

    #[test]
    fn packing_refuses_a_folder_without_a_manifest_and_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let err = pack(tmp.path(), &Limits::default()).unwrap_err().to_string();
        assert!(err.contains("no environment.toml"), "{err}");
        package(tmp.path());
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("data/passwd")).unwrap();
        let err = pack(tmp.path(), &Limits::default()).unwrap_err().to_string();
        assert!(err.contains("symbolic links"), "{err}");
    }
}
