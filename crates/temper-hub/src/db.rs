//! The hub's metadata: users, tokens, environments and versions, in SQLite (a file, the default)
//! or Postgres, through `sqlx`'s `Any` driver so one set of queries and one migration serve both.
//!
//! Tokens are random 32-byte secrets shown once; only their SHA-256 is stored (a fast hash is
//! enough for secrets with 256 bits of entropy). A version row is inserted in the same
//! transaction that makes its archive visible (see [`Db::publish`]), so readers never see a
//! version without its archive.

use std::future::Future;

use rand::RngCore;
use semver::Version;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::HubError;
pub use crate::archive::FileEntry;

/// What a token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// See the owner's private environments.
    Read,
    /// Publish and yank under the owner's namespace (implies read).
    Publish,
    /// List, mint and revoke the owner's tokens. A minted token holds at most the scopes of the
    /// token that minted it, and is revoked with it.
    Tokens,
}

impl Scope {
    /// Parses `read` or `publish`.
    pub fn parse(s: &str) -> Result<Self, HubError> {
        match s.trim() {
            "read" => Ok(Self::Read),
            "publish" => Ok(Self::Publish),
            "tokens" => Ok(Self::Tokens),
            other => Err(HubError::invalid(format!(
                "unknown scope `{other}`; expected read, publish or tokens"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Publish => "publish",
            Self::Tokens => "tokens",
        }
    }
}

/// The holder of a valid token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user.
    pub user: String,
    /// The token's id.
    pub token_id: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
}

impl Principal {
    /// Whether the token carries `scope` (publish implies read; tokens implies nothing else).
    pub fn can(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Publish))
    }
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its id.
    pub id: String,
    /// Its scopes.
    pub scopes: Vec<Scope>,
    /// What the user called it.
    pub label: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, when revoked.
    pub revoked_at: Option<i64>,
    /// The token that minted it (none for a user's first tokens).
    pub parent_id: Option<String>,
}

/// An environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvRow {
    /// Namespace.
    pub owner: String,
    /// Name.
    pub name: String,
    /// Visible only to its owner.
    pub private: bool,
    /// The newest version's description.
    pub description: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A published version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRow {
    /// Namespace.
    pub owner: String,
    /// Name.
    pub name: String,
    /// Semver.
    pub version: Version,
    /// SHA-256 hex over the package's files.
    pub content_hash: String,
    /// Where the archive is in the object store.
    #[serde(skip)]
    pub archive_key: String,
    /// Archive size.
    pub archive_bytes: u64,
    /// The files.
    pub files: Vec<FileEntry>,
    /// README.md (or empty).
    pub readme: String,
    /// From environment.toml.
    pub description: String,
    /// Hidden from resolution (an exact pin still installs it).
    pub yanked: bool,
    /// Unix seconds.
    pub published_at: i64,
}

/// A version as listed: what a listing shows of it, without its file list and README (those
/// are [`VersionRow`]'s, one version at a time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSummary {
    /// Semver.
    pub version: Version,
    /// SHA-256 hex over the package's files.
    pub content_hash: String,
    /// Archive size.
    pub archive_bytes: u64,
    /// Hidden from resolution.
    pub yanked: bool,
    /// Unix seconds.
    pub published_at: i64,
}

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// A new version.
    Created,
    /// The same version with the same content existed: nothing changed.
    Unchanged,
}

/// The database.
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    sqlite: bool,
    /// The in-process writer queue of SQLite (see `write_guard`).
    write: std::sync::Arc<tokio::sync::Mutex<()>>,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Db {
    /// Connects to `url` (`sqlite://FILE` or `postgres://…`) and brings the schema up to date.
    pub async fn open(url: &str) -> Result<Self, HubError> {
        sqlx::any::install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        let postgres = url.starts_with("postgres:") || url.starts_with("postgresql:");
        if !sqlite && !postgres {
            return Err(HubError::invalid(format!(
                "database URL `{url}`: expected sqlite://FILE or postgres://…"
            )));
        }
        let url =
            if sqlite && !url.contains('?') { format!("{url}?mode=rwc") } else { url.to_owned() };
        let pool = AnyPoolOptions::new()
            .max_connections(if sqlite { 4 } else { 16 })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                        sqlx::query("PRAGMA busy_timeout = 10000").execute(&mut *conn).await?;
                        sqlx::query("PRAGMA foreign_keys = ON").execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(|source| HubError::Open { url: url.clone(), source })?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|source| HubError::Migrate { url: url.clone(), source })?;
        Ok(Self { pool, sqlite, write: Default::default() })
    }

    /// The SQLite database of a data folder (`DIR/hub.db`).
    pub async fn open_dir(dir: &std::path::Path) -> Result<Self, HubError> {
        std::fs::create_dir_all(dir).map_err(|e| HubError::io(dir, e))?;
        Self::open(&format!("sqlite://{}", dir.join("hub.db").display())).await
    }

    /// SQLite takes one writer at a time: writes queue in-process rather than fail with "database
    /// is locked". Postgres handles concurrent writers itself.
    async fn write_guard(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.sqlite { Some(self.write.lock().await) } else { None }
    }

    /// Whether this is SQLite.
    pub fn is_sqlite(&self) -> bool {
        self.sqlite
    }

    /// Adds a user.
    pub async fn add_user(&self, name: &str) -> Result<(), HubError> {
        if !crate::reference::valid_name(name) {
            return Err(HubError::invalid(format!(
                "user name `{name}`: 2-64 of a-z, 0-9 and -, starting with a letter or digit"
            )));
        }
        let _w = self.write_guard().await;
        sqlx::query("INSERT INTO users (name, created_at) VALUES ($1, $2)")
            .bind(name)
            .bind(now())
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    HubError::Conflict(format!("user `{name}` exists"))
                } else {
                    HubError::Database(e)
                }
            })?;
        Ok(())
    }

    /// Whether a user exists.
    pub async fn user_exists(&self, name: &str) -> Result<bool, HubError> {
        let row = sqlx::query("SELECT name FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(HubError::Database)?;
        Ok(row.is_some())
    }

    /// Creates a token for `user` with no parent (what `temper hub user add` does); returns
    /// (id, secret). The secret is not stored.
    pub async fn create_token(
        &self,
        user: &str,
        scopes: &[Scope],
        label: &str,
    ) -> Result<(String, String), HubError> {
        self.insert_token(user, scopes, label, None).await
    }

    /// Mints a token for `parent`'s user, holding `scopes`, which must be among `parent`'s
    /// (publish counts as read); revoking `parent` revokes it. `parent` needs the `tokens` scope.
    pub async fn mint_token(
        &self,
        parent: &Principal,
        scopes: &[Scope],
        label: &str,
    ) -> Result<(String, String), HubError> {
        if !parent.can(Scope::Tokens) {
            return Err(HubError::Forbidden("minting a token needs the tokens scope".into()));
        }
        if let Some(extra) = scopes.iter().find(|s| !parent.can(**s)) {
            return Err(HubError::Forbidden(format!(
                "a token cannot mint one with a scope it lacks ({})",
                extra.name()
            )));
        }
        self.insert_token(&parent.user, scopes, label, Some(&parent.token_id)).await
    }

    async fn insert_token(
        &self,
        user: &str,
        scopes: &[Scope],
        label: &str,
        parent: Option<&str>,
    ) -> Result<(String, String), HubError> {
        if scopes.is_empty() {
            return Err(HubError::invalid("a token needs at least one scope"));
        }
        if label.len() > 200 {
            return Err(HubError::invalid("a token label is at most 200 bytes"));
        }
        if !self.user_exists(user).await? {
            return Err(HubError::NotFound(format!("user `{user}`")));
        }
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let secret = format!("thub_{}", hex::encode(raw));
        let mut id = [0u8; 6];
        rand::rng().fill_bytes(&mut id);
        let id = hex::encode(id);
        let scopes_text: Vec<&str> = scopes.iter().map(|s| s.name()).collect();
        let _w = self.write_guard().await;
        sqlx::query(
            "INSERT INTO tokens (id, user_name, hash, scopes, label, created_at, revoked_at, parent_id) VALUES ($1, $2, $3, $4, $5, $6, NULL, $7)",
        )
        .bind(&id)
        .bind(user)
        .bind(sha256_hex(secret.as_bytes()))
        .bind(scopes_text.join(","))
        .bind(label)
        .bind(now())
        .bind(parent)
        .execute(&self.pool)
        .await
        .map_err(HubError::Database)?;
        Ok((id, secret))
    }

    /// The holder of `secret`, if it is a live token.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<Principal>, HubError> {
        if !secret.starts_with("thub_") || secret.len() > 128 {
            return Ok(None);
        }
        let row = sqlx::query(
            "SELECT id, user_name, scopes, parent_id FROM tokens WHERE hash = $1 AND revoked_at IS NULL",
        )
        .bind(sha256_hex(secret.as_bytes()))
        .fetch_optional(&self.pool)
        .await
        .map_err(HubError::Database)?;
        let Some(row) = row else { return Ok(None) };
        // Every ancestor must be live too: a token minted while its parent was being revoked
        // (a race the cascade in `revoke_token` can miss) dies with it all the same.
        let mut parent: Option<String> = row.try_get("parent_id").map_err(HubError::Database)?;
        while let Some(id) = parent {
            let up = sqlx::query("SELECT parent_id, revoked_at FROM tokens WHERE id = $1")
                .bind(&id)
                .fetch_optional(&self.pool)
                .await
                .map_err(HubError::Database)?;
            let Some(up) = up else { return Ok(None) };
            if up.try_get::<Option<i64>, _>("revoked_at").map_err(HubError::Database)?.is_some() {
                return Ok(None);
            }
            parent = up.try_get("parent_id").map_err(HubError::Database)?;
        }
        let scopes: String = row.try_get("scopes").map_err(HubError::Database)?;
        Ok(Some(Principal {
            user: row.try_get("user_name").map_err(HubError::Database)?,
            token_id: row.try_get("id").map_err(HubError::Database)?,
            scopes: scopes.split(',').filter_map(|s| Scope::parse(s).ok()).collect(),
        }))
    }

    /// `user`'s tokens.
    pub async fn list_tokens(&self, user: &str) -> Result<Vec<TokenInfo>, HubError> {
        let rows = sqlx::query(
            "SELECT id, scopes, label, created_at, revoked_at, parent_id FROM tokens WHERE user_name = $1 ORDER BY created_at, id",
        )
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(HubError::Database)?;
        rows.iter()
            .map(|r| {
                let scopes: String = r.try_get("scopes")?;
                Ok(TokenInfo {
                    id: r.try_get("id")?,
                    scopes: scopes.split(',').filter_map(|s| Scope::parse(s).ok()).collect(),
                    label: r.try_get("label")?,
                    created_at: r.try_get("created_at")?,
                    revoked_at: r.try_get("revoked_at")?,
                    parent_id: r.try_get("parent_id")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(HubError::Database)
    }

    /// Revokes `user`'s token `id` and every live token minted from it, at any depth, in one
    /// transaction; false when there is no such live token.
    pub async fn revoke_token(&self, user: &str, id: &str) -> Result<bool, HubError> {
        let _w = self.write_guard().await;
        let at = now();
        let mut tx = self.pool.begin().await.map_err(HubError::Database)?;
        let done = sqlx::query(
            "UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND user_name = $3 AND revoked_at IS NULL",
        )
        .bind(at)
        .bind(id)
        .bind(user)
        .execute(&mut *tx)
        .await
        .map_err(HubError::Database)?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        let mut frontier = vec![id.to_owned()];
        while let Some(parent) = frontier.pop() {
            let children = sqlx::query(
                "SELECT id FROM tokens WHERE parent_id = $1 AND user_name = $2 AND revoked_at IS NULL",
            )
            .bind(&parent)
            .bind(user)
            .fetch_all(&mut *tx)
            .await
            .map_err(HubError::Database)?;
            for child in children {
                let child: String = child.try_get("id").map_err(HubError::Database)?;
                sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2")
                    .bind(at)
                    .bind(&child)
                    .execute(&mut *tx)
                    .await
                    .map_err(HubError::Database)?;
                frontier.push(child);
            }
        }
        tx.commit().await.map_err(HubError::Database)?;
        Ok(true)
    }

    /// Publishes `row` (a new version of `owner/name`, creating the environment on its first
    /// version with `private`). Inside the transaction, once the row is in, `make_visible` puts the
    /// archive at `row.archive_key`; the commit follows only if it succeeded. The same version
    /// with the same content hash is [`Published::Unchanged`]; with another hash, a conflict.
    pub async fn publish<F, Fut>(
        &self,
        row: &VersionRow,
        private: bool,
        make_visible: F,
    ) -> Result<Published, HubError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), HubError>>,
    {
        let _w = self.write_guard().await;
        let mut tx = self.pool.begin().await.map_err(HubError::Database)?;
        let existing = sqlx::query(
            "SELECT content_hash FROM versions WHERE owner = $1 AND name = $2 AND version = $3",
        )
        .bind(&row.owner)
        .bind(&row.name)
        .bind(row.version.to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(HubError::Database)?;
        if let Some(existing) = existing {
            let hash: String = existing.try_get("content_hash").map_err(HubError::Database)?;
            return if hash == row.content_hash {
                Ok(Published::Unchanged)
            } else {
                Err(HubError::Conflict(format!(
                    "{}/{}@{} is already published with content {hash}; versions are immutable, publish a new version",
                    row.owner, row.name, row.version
                )))
            };
        }
        let env = sqlx::query("SELECT owner FROM envs WHERE owner = $1 AND name = $2")
            .bind(&row.owner)
            .bind(&row.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(HubError::Database)?;
        if env.is_none() {
            sqlx::query(
                "INSERT INTO envs (owner, name, private, description, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner, name) DO NOTHING",
            )
            .bind(&row.owner)
            .bind(&row.name)
            .bind(i64::from(private))
            .bind(&row.description)
            .bind(now())
            .execute(&mut *tx)
            .await
            .map_err(HubError::Database)?;
        } else {
            sqlx::query("UPDATE envs SET description = $1 WHERE owner = $2 AND name = $3")
                .bind(&row.description)
                .bind(&row.owner)
                .bind(&row.name)
                .execute(&mut *tx)
                .await
                .map_err(HubError::Database)?;
        }
        let files = serde_json::to_string(&row.files)
            .map_err(|e| HubError::invalid(format!("file list: {e}")))?;
        sqlx::query(
            "INSERT INTO versions (owner, name, version, content_hash, archive_key, archive_bytes, files, readme, description, yanked, published_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10)",
        )
        .bind(&row.owner)
        .bind(&row.name)
        .bind(row.version.to_string())
        .bind(&row.content_hash)
        .bind(&row.archive_key)
        .bind(row.archive_bytes as i64)
        .bind(files)
        .bind(&row.readme)
        .bind(&row.description)
        .bind(now())
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HubError::Conflict(format!(
                    "{}/{}@{} was published concurrently; retry to compare contents",
                    row.owner, row.name, row.version
                ))
            } else {
                HubError::Database(e)
            }
        })?;
        make_visible().await?;
        tx.commit().await.map_err(HubError::Database)?;
        Ok(Published::Created)
    }

    /// An environment.
    pub async fn env(&self, owner: &str, name: &str) -> Result<Option<EnvRow>, HubError> {
        let row = sqlx::query(
            "SELECT owner, name, private, description, created_at FROM envs WHERE owner = $1 AND name = $2",
        )
        .bind(owner)
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(HubError::Database)?;
        row.map(|r| env_row(&r)).transpose().map_err(HubError::Database)
    }

    /// Environments whose owner or name or description contains `query` (any case), visible to
    /// `viewer` (public ones, and the viewer's own private ones), best first: the name itself,
    /// names that start with the query, names that hold it, owners that do, then descriptions.
    pub async fn search(
        &self,
        query: &str,
        viewer: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<EnvRow>, HubError> {
        let escaped: String = query
            .to_lowercase()
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let pattern = format!("%{escaped}%");
        let prefix = format!("{escaped}%");
        // Best first: the name itself, a name that starts with the query, one that holds it,
        // the owner, then the description; names in order within each.
        let rows = sqlx::query(
            "SELECT owner, name, private, description, created_at FROM envs \
             WHERE (private = 0 OR owner = $1) \
             AND (LOWER(owner) LIKE $2 ESCAPE '\\' OR LOWER(name) LIKE $2 ESCAPE '\\' OR LOWER(description) LIKE $2 ESCAPE '\\') \
             ORDER BY CASE \
               WHEN LOWER(name) = $5 OR LOWER(owner) || '/' || LOWER(name) = $5 THEN 0 \
               WHEN LOWER(name) LIKE $6 ESCAPE '\\' THEN 1 \
               WHEN LOWER(name) LIKE $2 ESCAPE '\\' THEN 2 \
               WHEN LOWER(owner) LIKE $2 ESCAPE '\\' THEN 3 \
               ELSE 4 END, name, owner LIMIT $3 OFFSET $4",
        )
        .bind(viewer.unwrap_or(""))
        .bind(pattern)
        .bind(limit)
        .bind(offset)
        .bind(query.to_lowercase())
        .bind(prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(HubError::Database)?;
        rows.iter().map(env_row).collect::<Result<_, _>>().map_err(HubError::Database)
    }

    /// Every version of `owner/name` as listed, newest first by semver.
    pub async fn version_summaries(
        &self,
        owner: &str,
        name: &str,
    ) -> Result<Vec<VersionSummary>, HubError> {
        let rows = sqlx::query(
            "SELECT version, content_hash, archive_bytes, yanked, published_at FROM versions WHERE owner = $1 AND name = $2",
        )
        .bind(owner)
        .bind(name)
        .fetch_all(&self.pool)
        .await
        .map_err(HubError::Database)?;
        let mut out = rows
            .iter()
            .map(|r| {
                Ok(VersionSummary {
                    version: stored_version(r)?,
                    content_hash: r.try_get("content_hash").map_err(HubError::Database)?,
                    archive_bytes: r
                        .try_get::<i64, _>("archive_bytes")
                        .map_err(HubError::Database)? as u64,
                    yanked: r.try_get::<i64, _>("yanked").map_err(HubError::Database)? != 0,
                    published_at: r.try_get("published_at").map_err(HubError::Database)?,
                })
            })
            .collect::<Result<Vec<_>, HubError>>()?;
        out.sort_by(|a, b| b.version.cmp(&a.version));
        Ok(out)
    }

    /// One version of `owner/name`.
    pub async fn version(
        &self,
        owner: &str,
        name: &str,
        version: &Version,
    ) -> Result<Option<VersionRow>, HubError> {
        let row = sqlx::query(
            "SELECT owner, name, version, content_hash, archive_key, archive_bytes, files, readme, description, yanked, published_at FROM versions WHERE owner = $1 AND name = $2 AND version = $3",
        )
        .bind(owner)
        .bind(name)
        .bind(version.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(HubError::Database)?;
        row.as_ref().map(version_row).transpose()
    }

    /// `(version, yanked)` of every version of `owner/name`: what resolution needs, without the
    /// file lists and READMEs.
    pub async fn version_flags(
        &self,
        owner: &str,
        name: &str,
    ) -> Result<Vec<(Version, bool)>, HubError> {
        let rows =
            sqlx::query("SELECT version, yanked FROM versions WHERE owner = $1 AND name = $2")
                .bind(owner)
                .bind(name)
                .fetch_all(&self.pool)
                .await
                .map_err(HubError::Database)?;
        rows.iter()
            .map(|r| {
                Ok((
                    stored_version(r)?,
                    r.try_get::<i64, _>("yanked").map_err(HubError::Database)? != 0,
                ))
            })
            .collect()
    }

    /// The newest non-yanked version of `owner/name`, if any.
    pub async fn latest(&self, owner: &str, name: &str) -> Result<Option<Version>, HubError> {
        let flags = self.version_flags(owner, name).await?;
        Ok(crate::reference::resolve(flags.iter().map(|(v, y)| (v, *y)), &crate::Wanted::Latest))
    }

    /// Sets or clears `yanked`; false when there is no such version.
    pub async fn set_yanked(
        &self,
        owner: &str,
        name: &str,
        version: &Version,
        yanked: bool,
    ) -> Result<bool, HubError> {
        let _w = self.write_guard().await;
        let done = sqlx::query(
            "UPDATE versions SET yanked = $1 WHERE owner = $2 AND name = $3 AND version = $4",
        )
        .bind(i64::from(yanked))
        .bind(owner)
        .bind(name)
        .bind(version.to_string())
        .execute(&self.pool)
        .await
        .map_err(HubError::Database)?;
        Ok(done.rows_affected() == 1)
    }

    /// Counts for `/metrics`: (users, environments, versions).
    pub async fn counts(&self) -> Result<(i64, i64, i64), HubError> {
        let one = |sql: &'static str| async move {
            let row = sqlx::query(sql).fetch_one(&self.pool).await.map_err(HubError::Database)?;
            row.try_get::<i64, _>(0).map_err(HubError::Database)
        };
        Ok((
            one("SELECT COUNT(*) FROM users").await?,
            one("SELECT COUNT(*) FROM envs").await?,
            one("SELECT COUNT(*) FROM versions").await?,
        ))
    }
}

fn env_row(r: &AnyRow) -> Result<EnvRow, sqlx::Error> {
    Ok(EnvRow {
        owner: r.try_get("owner")?,
        name: r.try_get("name")?,
        private: r.try_get::<i64, _>("private")? != 0,
        description: r.try_get("description")?,
        created_at: r.try_get("created_at")?,
    })
}

/// The `version` column of a row, parsed.
fn stored_version(r: &AnyRow) -> Result<Version, HubError> {
    let text: String = r.try_get("version").map_err(HubError::Database)?;
    Version::parse(&text).map_err(|e| HubError::Stored(format!("stored version `{text}`: {e}")))
}

fn version_row(r: &AnyRow) -> Result<VersionRow, HubError> {
    let files: String = r.try_get("files").map_err(HubError::Database)?;
    Ok(VersionRow {
        owner: r.try_get("owner").map_err(HubError::Database)?,
        name: r.try_get("name").map_err(HubError::Database)?,
        version: stored_version(r)?,
        content_hash: r.try_get("content_hash").map_err(HubError::Database)?,
        archive_key: r.try_get("archive_key").map_err(HubError::Database)?,
        archive_bytes: r.try_get::<i64, _>("archive_bytes").map_err(HubError::Database)? as u64,
        files: serde_json::from_str(&files)
            .map_err(|e| HubError::Stored(format!("stored file list: {e}")))?,
        readme: r.try_get("readme").map_err(HubError::Database)?,
        description: r.try_get("description").map_err(HubError::Database)?,
        yanked: r.try_get::<i64, _>("yanked").map_err(HubError::Database)? != 0,
        published_at: r.try_get("published_at").map_err(HubError::Database)?,
    })
}
