//! Where archives live: `object_store` over a local folder (the default, `DATA/archives`) or an
//! S3-compatible bucket (feature `s3`).
//!
//! An upload is first written under `tmp/` and moved to its final key
//! (`archives/OWNER/NAME/VERSION-HASH.tar.gz`) inside the database transaction that publishes
//! it, so a crash leaves at most an unreferenced object, never a version without its archive.

use std::sync::Arc;

use object_store::path::Path as Key;
use object_store::{ObjectStore, PutPayload};
use rand::RngCore;

use crate::HubError;

/// The archive store.
#[derive(Debug, Clone)]
pub struct Archives {
    store: Arc<dyn ObjectStore>,
}

impl Archives {
    /// A local folder (created if missing).
    pub fn local(dir: &std::path::Path) -> Result<Self, HubError> {
        std::fs::create_dir_all(dir).map_err(|e| HubError::io(dir, e))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
            .map_err(HubError::Storage)?;
        Ok(Self { store: Arc::new(fs) })
    }

    /// Opens `url`: `s3://bucket[/prefix]` (credentials and endpoint from the usual `AWS_*`
    /// variables; needs the `s3` feature) or a local folder path.
    pub fn open(url: &str) -> Result<Self, HubError> {
        if let Some(rest) = url.strip_prefix("s3://") {
            return Self::s3(rest);
        }
        Self::local(std::path::Path::new(url.strip_prefix("file://").unwrap_or(url)))
    }

    #[cfg(feature = "s3")]
    fn s3(rest: &str) -> Result<Self, HubError> {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(HubError::Storage)?;
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
        };
        Ok(Self { store })
    }

    #[cfg(not(feature = "s3"))]
    fn s3(_: &str) -> Result<Self, HubError> {
        Err(HubError::invalid(
            "s3:// storage needs temper built with the `s3` feature of temper-hub",
        ))
    }

    /// The final key of a version's archive.
    pub fn key_for(owner: &str, name: &str, version: &semver::Version, hash: &str) -> String {
        format!("archives/{owner}/{name}/{version}-{hash}.tar.gz")
    }

    /// Writes `bytes` under a fresh temporary key and returns it.
    pub async fn put_temp(&self, bytes: impl Into<PutPayload>) -> Result<String, HubError> {
        let mut id = [0u8; 12];
        rand::rng().fill_bytes(&mut id);
        let key = format!("tmp/{}.tar.gz", hex::encode(id));
        self.store.put(&Key::from(key.as_str()), bytes.into()).await.map_err(HubError::Storage)?;
        Ok(key)
    }

    /// Moves `from` to `to` (replacing it).
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), HubError> {
        self.store.rename(&Key::from(from), &Key::from(to)).await.map_err(HubError::Storage)
    }

    /// Deletes `key` (missing is fine).
    pub async fn delete(&self, key: &str) -> Result<(), HubError> {
        match self.store.delete(&Key::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(HubError::Storage(e)),
        }
    }

    /// Reads `key`.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, HubError> {
        let got = self.store.get(&Key::from(key)).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => HubError::NotFound(format!("archive {key}")),
            e => HubError::Storage(e),
        })?;
        Ok(got.bytes().await.map_err(HubError::Storage)?.to_vec())
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &str) -> Result<bool, HubError> {
        match self.store.head(&Key::from(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(HubError::Storage(e)),
        }
    }

    /// Deletes uploads under `tmp/` older than `age`: what an interrupted publish (a crash
    /// between upload and commit) leaves behind. Younger ones may belong to publishes in
    /// progress on another server sharing the store. Returns how many were deleted.
    pub async fn sweep_temp(&self, age: std::time::Duration) -> Result<usize, HubError> {
        use futures::TryStreamExt;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let cutoff = now - age.as_secs() as i64;
        let items: Vec<_> = self
            .store
            .list(Some(&Key::from("tmp")))
            .try_collect()
            .await
            .map_err(HubError::Storage)?;
        let mut deleted = 0;
        for item in items.into_iter().filter(|m| m.last_modified.timestamp() <= cutoff) {
            self.delete(item.location.as_ref()).await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Keys under `prefix`.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, HubError> {
        use futures::TryStreamExt;
        let items: Vec<_> = self
            .store
            .list(Some(&Key::from(prefix)))
            .try_collect()
            .await
            .map_err(HubError::Storage)?;
        Ok(items.into_iter().map(|m| m.location.to_string()).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[tokio::test]
    async fn abandoned_uploads_are_swept_fresh_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Archives::local(tmp.path()).unwrap();
        let old = store.put_temp(b"old".to_vec()).await.unwrap();
        let fresh = store.put_temp(b"fresh".to_vec()).await.unwrap();
        let file = std::fs::File::options().write(true).open(tmp.path().join(&old)).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
        assert_eq!(store.sweep_temp(Duration::from_secs(3600)).await.unwrap(), 1);
        assert!(!store.exists(&old).await.unwrap());
        assert!(store.exists(&fresh).await.unwrap());
    }
}
