//! How temper writes the files other processes and later runs read: whole or not at all.
//!
//! Contract: a reader of a path written by [`write_atomic`] sees the old content or the new,
//! never a part, because the bytes go to a temporary file beside it ([`temp_path`]) that is
//! then renamed over the path (a rename within one folder is atomic on POSIX filesystems). A
//! crash leaves at most that temporary file, which the next write of the path replaces.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The temporary name [`write_atomic`] writes `path` under: `.NAME.tmp` in the same folder.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Replaces the file at `path` with `bytes`, atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_with_mode(path, bytes, 0o666)
}

/// [`write_atomic`] for a file only its owner may read or write (mode 0600 from its creation:
/// tokens and other secrets are never readable by others, even for a moment).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_with_mode(path, bytes, 0o600)
}

fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = temp_path(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn a_write_replaces_the_whole_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("temper-fsio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.json");
        std::fs::write(temp_path(&path), b"left by a crash").unwrap();
        write_atomic(&path, b"0123456789").unwrap();
        write_atomic(&path, b"ab").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"ab");
        assert!(!temp_path(&path).exists());
        let secret = dir.join("token");
        write_private(&secret, b"s").unwrap();
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A folder that does not exist is an error, not a silent success.
        assert!(write_atomic(&dir.join("no/such/file"), b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
