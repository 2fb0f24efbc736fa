//! The registry server (`temper hub serve`): a REST API under `/api/v1`, `/health` and
//! Prometheus `/metrics`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/api/v1/envs?q=&limit=&offset=` | search visible environments |
//! | GET | `/api/v1/envs/{owner}/{name}?limit=&offset=` | an environment and a page of its versions, newest first (no file lists or READMEs; at most [`MAX_PAGE`]) |
//! | GET | `/api/v1/envs/{owner}/{name}/versions/{version}` | one version with its files and README |
//! | GET | `/api/v1/envs/{owner}/{name}/resolve?req=^1.2` | the version a requirement picks |
//! | POST | `/api/v1/envs/{owner}/{name}/versions[?private=true]` | publish (body: the `.tar.gz`; the first version sets the visibility) |
//! | GET | `/api/v1/envs/{owner}/{name}/versions/{version}/archive` | download |
//! | POST | `/api/v1/envs/{owner}/{name}/versions/{version}/yank` | `{"yanked": bool}` |
//! | GET, POST | `/api/v1/tokens` | list, mint (`{"scopes": [...], "label": ""}`); needs `tokens` |
//! | DELETE | `/api/v1/tokens/{id}` | revoke it and every token minted from it; needs `tokens`, except a token revoking itself |
//! | GET | `/api/v1/whoami` | the token's user and scopes |
//!
//! Web pages for people are at `/` and `/envs/{owner}/{name}` ([`crate::web`]).
//!
//! Tokens come as `Authorization: Bearer thub_…`. Reading public environments needs none;
//! private ones are visible only to their owner (a token with `read` or `publish`); publishing and
//! yanking need `publish` and happen only under the token's own namespace; managing tokens needs
//! `tokens`, and a minted token never holds a scope its minter lacks. Errors are JSON
//! `{"error": {"code", "message"}}` with 400, 401, 403, 404, 409, 413, 422, 429 or 500 (whose
//! message never holds paths, SQL or storage details: those go to the log). Bodies are capped at the archive
//! limit; each client address gets a token bucket of requests.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use temper_protocol::ErrorBody;
use temper_protocol::error::json_errors;

use crate::db::{Db, FileEntry, Principal, Published, Scope, VersionRow};
use crate::reference::{EnvRef, Wanted, resolve};
use crate::store::Archives;
use crate::{HubError, Limits};

/// Uploads under `tmp/` older than this are abandoned (swept when the server starts).
const TEMP_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Longest README kept for the web page.
const MAX_README: usize = 256 << 10;

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Data folder: `hub.db` (unless `database`) and `archives/` (unless `storage`).
    pub data: PathBuf,
    /// `sqlite://FILE` or `postgres://…`; default `sqlite://DATA/hub.db`.
    pub database: Option<String>,
    /// `s3://bucket/prefix` or a folder; default `DATA/archives`.
    pub storage: Option<String>,
    /// Archive limits (the body limit is `max_archive_bytes`).
    pub limits: Limits,
    /// Requests per second per client address (a token bucket).
    pub rate_per_s: u32,
    /// Burst size of the bucket.
    pub burst: u32,
    /// The URL clients reach the server at, for download links (default from the Host header).
    pub public_url: Option<String>,
}

impl HubConfig {
    /// Defaults for a data folder.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            database: None,
            storage: None,
            limits: Limits::default(),
            rate_per_s: 100,
            burst: 200,
            public_url: None,
        }
    }
}

type Limiter = governor::DefaultKeyedRateLimiter<IpAddr>;

/// Requests between two prunings of the rate limiter's table.
pub const PRUNE_EVERY: u64 = 1024;

/// The rate limiter's key for an address: IPv4 as it is (IPv4-mapped IPv6 too), IPv6 by /64.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        },
    }
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    publishes: AtomicU64,
    unchanged: AtomicU64,
    conflicts: AtomicU64,
    downloads: AtomicU64,
    refused: AtomicU64,
    limited: AtomicU64,
}

/// The running hub's state.
#[derive(Debug, Clone)]
pub struct Hub {
    /// Metadata.
    pub db: Db,
    /// Archives.
    pub archives: Archives,
    cfg: Arc<HubConfig>,
    counters: Arc<Counters>,
    limiter: Arc<Limiter>,
    /// Manifest texts by archive key, for the web pages.
    manifests: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// Most manifests the web pages keep in memory.
const MANIFESTS_KEPT: usize = 1024;

impl Hub {
    /// Opens the database (migrating it) and the archive store.
    pub async fn open(cfg: HubConfig) -> Result<Self, HubError> {
        let db = match &cfg.database {
            Some(url) => Db::open(url).await?,
            None => Db::open_dir(&cfg.data).await?,
        };
        let archives = match &cfg.storage {
            Some(url) => Archives::open(url)?,
            None => Archives::local(&cfg.data.join("archives"))?,
        };
        // Leftovers of publishes a crash interrupted (never visible: no row points at them).
        match archives.sweep_temp(TEMP_MAX_AGE).await {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} abandoned uploads from tmp/"),
            Err(e) => tracing::warn!("could not sweep abandoned uploads: {e}"),
        }
        let rate = NonZeroU32::new(cfg.rate_per_s.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(cfg.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let limiter =
            governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(burst));
        Ok(Self {
            db,
            archives,
            cfg: Arc::new(cfg),
            counters: Arc::default(),
            limiter: Arc::new(limiter),
            manifests: Arc::default(),
        })
    }

    /// Counts a request from `ip` against its client's bucket; false when over the rate. A client
    /// is an IPv4 address or an IPv6 /64 (one host's whole prefix, which it can rotate through).
    /// Every [`PRUNE_EVERY`] requests, buckets that have filled up again are forgotten, so the
    /// table holds only clients seen within about `burst / rate` seconds.
    pub fn admit(&self, ip: IpAddr) -> bool {
        let n = self.counters.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(PRUNE_EVERY) {
            self.prune_rate_limits();
        }
        self.limiter.check_key(&client_key(ip)).is_ok()
    }

    /// The archive limits this hub enforces.
    pub(crate) fn limits(&self) -> &Limits {
        &self.cfg.limits
    }

    /// A version's manifest text kept by [`Hub::cache_manifest`], by archive key.
    pub(crate) fn cached_manifest(&self, archive_key: &str) -> Option<String> {
        self.manifests.lock().unwrap_or_else(|e| e.into_inner()).get(archive_key).cloned()
    }

    /// Keeps a version's manifest text for its pages (at most [`MANIFESTS_KEPT`]; all are
    /// dropped when full, and read again as pages ask).
    pub(crate) fn cache_manifest(&self, archive_key: &str, text: &str) {
        let mut kept = self.manifests.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= MANIFESTS_KEPT {
            kept.clear();
        }
        kept.insert(archive_key.to_owned(), text.to_owned());
    }

    /// Forgets clients whose bucket is full again; returns how many are still tracked.
    pub fn prune_rate_limits(&self) -> usize {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
        self.limiter.len()
    }

    /// The token's holder, if any; an invalid token is an error (not anonymous).
    async fn principal(&self, headers: &HeaderMap) -> Result<Option<Principal>, HubError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(None) };
        let secret =
            value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).ok_or_else(|| {
                HubError::Unauthorized("expected Authorization: Bearer TOKEN".into())
            })?;
        match self.db.authenticate(secret.trim()).await? {
            Some(p) => Ok(Some(p)),
            None => Err(HubError::Unauthorized("unknown or revoked token".into())),
        }
    }

    async fn require(&self, headers: &HeaderMap, scope: Scope) -> Result<Principal, HubError> {
        let who = self.principal(headers).await?.ok_or_else(|| {
            HubError::Unauthorized("this needs a token (TEMPER_HUB_TOKEN)".into())
        })?;
        if !who.can(scope) {
            return Err(HubError::Forbidden(format!("the token lacks the {scope:?} scope")));
        }
        Ok(who)
    }

    fn viewer<'a>(&self, who: &'a Option<Principal>) -> Option<&'a str> {
        who.as_ref().filter(|p| p.can(Scope::Read)).map(|p| p.user.as_str())
    }

    /// The environment, if `viewer` may see it (a private one looks absent to others).
    async fn visible(
        &self,
        owner: &str,
        name: &str,
        viewer: Option<&str>,
    ) -> Result<crate::db::EnvRow, HubError> {
        match self.db.env(owner, name).await? {
            Some(env) if !env.private || viewer == Some(owner) => Ok(env),
            _ => Err(HubError::NotFound(format!("{owner}/{name}"))),
        }
    }

    pub(crate) fn base_url(&self, headers: &HeaderMap) -> String {
        if let Some(url) = &self.cfg.public_url {
            return url.trim_end_matches('/').to_owned();
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        format!("http://{host}")
    }
}

/// An error as an HTTP response.
#[derive(Debug)]
pub struct ApiError(HubError);

impl From<HubError> for ApiError {
    fn from(e: HubError) -> Self {
        Self(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = match &self.0 {
            HubError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid"),
            HubError::Package(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_package"),
            HubError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            HubError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            HubError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            HubError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            HubError::Io { .. }
            | HubError::Database(_)
            | HubError::Open { .. }
            | HubError::Migrate { .. }
            | HubError::Stored(_)
            | HubError::Storage(_)
            | HubError::HashMismatch { .. }
            | HubError::Http(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        // The log has the details; a response never carries paths, SQL or storage errors.
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!("{}", self.0);
            "internal error; the hub's log has the details".to_owned()
        } else {
            self.0.to_string()
        };
        error_response(status, code, &message)
    }
}

/// `e` with its file named inside the package, not in this server's staging folder.
fn inside_package(mut e: temper_envs::EnvError, root: &FsPath) -> temper_envs::EnvError {
    use temper_envs::EnvError::{Config, Dataset, Io, Parse};
    if let Dataset { path, .. } | Config { path, .. } | Parse { path, .. } | Io { path, .. } =
        &mut e
        && let Ok(inside) = path.strip_prefix(root)
    {
        *path = inside.to_owned();
    }
    e
}

/// The error shape of every route: `{"error": {"code", "message"}}`.
fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorBody::new(code, message))).into_response()
}

type ApiResult<T> = Result<T, ApiError>;

/// The routes (the caller adds `into_make_service_with_connect_info::<SocketAddr>()` for the
/// per-address rate limit; without it every client shares one bucket).
pub fn router(hub: Hub) -> Router {
    let body_limit = usize::try_from(hub.cfg.limits.max_archive_bytes).unwrap_or(usize::MAX);
    Router::new()
        .route("/", get(crate::web::index))
        .route("/envs/{owner}/{name}", get(crate::web::env_page))
        .route("/envs/{owner}/{name}/files/{*path}", get(crate::web::file_page))
        .route("/publish", get(crate::web::publish_page))
        .route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
        .route("/metrics", get(metrics))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/envs", get(search))
        .route("/api/v1/envs/{owner}/{name}", get(show))
        .route("/api/v1/envs/{owner}/{name}/resolve", get(resolve_route))
        .route("/api/v1/envs/{owner}/{name}/versions", post(publish))
        .route("/api/v1/envs/{owner}/{name}/versions/{version}", get(show_version))
        .route("/api/v1/envs/{owner}/{name}/versions/{version}/archive", get(download))
        .route("/api/v1/envs/{owner}/{name}/versions/{version}/yank", post(yank))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", delete(revoke_token))
        .fallback(|| async { error_response(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(middleware::map_response(json_errors))
        .layer(middleware::from_fn_with_state(hub.clone(), limit_rate))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(hub)
}

/// Serves on `listener` until `shutdown` resolves.
pub async fn serve(
    hub: Hub,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(hub).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
}

async fn limit_rate(State(hub): State<Hub>, req: Request, next: Next) -> Response {
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    if !hub.admit(ip) {
        hub.counters.limited.fetch_add(1, Ordering::Relaxed);
        let message = format!("more than {} requests/s from {ip}", hub.cfg.rate_per_s);
        let mut resp = error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &message);
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    next.run(req).await
}

async fn metrics(State(hub): State<Hub>) -> ApiResult<Response> {
    use temper_protocol::exposition::{CONTENT_TYPE, Identity, Scrape};
    let (users, envs, versions) = hub.db.counts().await?;
    let c = &hub.counters;
    let mut s = Scrape::new("temper_hub", &Identity::of_process("hub"));
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    s.counter("requests", "HTTP requests.", n(&c.requests));
    s.counter("publishes", "New versions published.", n(&c.publishes));
    s.counter("publishes_unchanged", "Publishes of identical content.", n(&c.unchanged));
    s.counter("publish_conflicts", "Publishes refused with 409.", n(&c.conflicts));
    s.counter("publishes_refused", "Archives refused as invalid.", n(&c.refused));
    s.counter("downloads", "Archives served.", n(&c.downloads));
    s.counter("rate_limited", "Requests answered 429.", n(&c.limited));
    s.gauge("users", "Users.", users as f64);
    s.gauge("environments", "Environments.", envs as f64);
    s.gauge("versions", "Published versions.", versions as f64);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], s.encode()).into_response())
}

async fn whoami(State(hub): State<Hub>, headers: HeaderMap) -> ApiResult<axum::Json<Value>> {
    // Any valid token may ask who it is.
    let who = hub
        .principal(&headers)
        .await?
        .ok_or_else(|| HubError::Unauthorized("this needs a token (TEMPER_HUB_TOKEN)".into()))?;
    Ok(axum::Json(json!({"user": who.user, "token_id": who.token_id, "scopes": who.scopes})))
}

#[derive(Debug, Deserialize)]
struct SearchQuery {
    #[serde(default)]
    q: String,
    limit: Option<i64>,
    offset: Option<i64>,
}

async fn search(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Query(q): Query<SearchQuery>,
) -> ApiResult<axum::Json<Value>> {
    if q.q.len() > 200 {
        return Err(HubError::invalid("q is at most 200 bytes").into());
    }
    let who = hub.principal(&headers).await?;
    let limit = q.limit.unwrap_or(50).clamp(1, 200);
    let envs = hub.db.search(&q.q, hub.viewer(&who), limit, q.offset.unwrap_or(0).max(0)).await?;
    let mut out = Vec::with_capacity(envs.len());
    for e in envs {
        let latest = hub.db.latest(&e.owner, &e.name).await?;
        out.push(json!({
            "owner": e.owner, "name": e.name, "description": e.description,
            "private": e.private, "latest": latest.map(|v| v.to_string()),
        }));
    }
    Ok(axum::Json(json!({"envs": out})))
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    limit: Option<usize>,
    offset: Option<usize>,
}

/// The most versions one listing page holds.
pub const MAX_PAGE: usize = 200;

async fn show(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
    Query(page): Query<PageQuery>,
) -> ApiResult<axum::Json<Value>> {
    let who = hub.principal(&headers).await?;
    let env = hub.visible(&owner, &name, hub.viewer(&who)).await?;
    let versions = hub.db.version_summaries(&owner, &name).await?;
    let latest = resolve(versions.iter().map(|v| (&v.version, v.yanked)), &Wanted::Latest);
    let (limit, offset) = (page.limit.unwrap_or(50).clamp(1, MAX_PAGE), page.offset.unwrap_or(0));
    let shown: Vec<_> = versions.iter().skip(offset).take(limit).collect();
    Ok(axum::Json(json!({
        "env": env, "latest": latest.map(|v| v.to_string()), "total": versions.len(),
        "offset": offset, "versions": shown,
    })))
}

async fn show_version(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name, version)): Path<(String, String, String)>,
) -> ApiResult<axum::Json<VersionRow>> {
    Ok(axum::Json(version_row(&hub, &headers, &owner, &name, &version).await?))
}

#[derive(Debug, Deserialize)]
struct ResolveQuery {
    req: Option<String>,
}

async fn resolve_route(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
    Query(q): Query<ResolveQuery>,
) -> ApiResult<axum::Json<Value>> {
    let spec = match q.req.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => format!("{owner}/{name}@{r}"),
        None => format!("{owner}/{name}"),
    };
    let reference: EnvRef = spec.parse()?;
    let who = hub.principal(&headers).await?;
    hub.visible(&owner, &name, hub.viewer(&who)).await?;
    let flags = hub.db.version_flags(&owner, &name).await?;
    let picked =
        resolve(flags.iter().map(|(v, y)| (v, *y)), &reference.wanted).ok_or_else(|| {
            HubError::NotFound(format!("no version of {owner}/{name} matches {reference}"))
        })?;
    let v = hub.db.version(&owner, &name, &picked).await?.ok_or(HubError::NotFound(spec))?;
    let url = format!(
        "{}/api/v1/envs/{owner}/{name}/versions/{}/archive",
        hub.base_url(&headers),
        v.version
    );
    Ok(axum::Json(json!({
        "name": format!("{owner}/{name}"), "version": v.version.to_string(),
        "content_hash": v.content_hash, "yanked": v.yanked, "url": url,
    })))
}

#[derive(Debug, Deserialize)]
struct PublishQuery {
    #[serde(default)]
    private: bool,
}

/// What a valid archive holds, read from a staging copy.
struct Checked {
    version: semver::Version,
    description: String,
    content_hash: String,
    files: Vec<FileEntry>,
    readme: String,
}

fn check_archive(bytes: &[u8], name: &str, limits: &Limits) -> Result<Checked, HubError> {
    let staging = tempfile::tempdir().map_err(|e| HubError::io(FsPath::new("/tmp"), e))?;
    let dir = staging.path().join("pkg");
    let unpacked = crate::archive::unpack(bytes, &dir, limits)?;
    let manifest = temper_envs::package::read_manifest(&dir)
        .map_err(|e| HubError::Package(inside_package(e, &dir)))?;
    if manifest.environment.name != name {
        return Err(HubError::invalid(format!(
            "environment.toml names `{}` but this is the URL of `{name}`",
            manifest.environment.name
        )));
    }
    let version = semver::Version::parse(&manifest.environment.version)
        .map_err(|e| HubError::invalid(format!("environment.version: {e}")))?;
    let readme = std::fs::read(dir.join("README.md"))
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(MAX_README)]).into_owned())
        .unwrap_or_default();
    Ok(Checked {
        version,
        description: manifest.environment.description,
        content_hash: unpacked.content_hash,
        files: unpacked.files,
        readme,
    })
}

async fn publish(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
    Query(q): Query<PublishQuery>,
    body: Bytes,
) -> ApiResult<Response> {
    let who = hub.require(&headers, Scope::Publish).await?;
    if who.user != owner {
        return Err(HubError::Forbidden(format!(
            "`{}` publishes only under {}/, not {owner}/",
            who.user, who.user
        ))
        .into());
    }
    if !crate::reference::valid_name(&name) {
        return Err(HubError::invalid(format!("environment name `{name}`")).into());
    }
    // The archive is unpacked and checked before anything is stored.
    let limits = hub.cfg.limits;
    let body_for_check = body.clone();
    let name_for_check = name.clone();
    let checked = tokio::task::spawn_blocking(move || {
        check_archive(&body_for_check, &name_for_check, &limits)
    })
    .await
    .map_err(|e| HubError::invalid(format!("checking the archive: {e}")))?;
    let checked = match checked {
        Ok(c) => c,
        Err(e) => {
            hub.counters.refused.fetch_add(1, Ordering::Relaxed);
            return Err(e.into());
        }
    };
    let final_key = Archives::key_for(&owner, &name, &checked.version, &checked.content_hash);
    let row = VersionRow {
        owner: owner.clone(),
        name: name.clone(),
        version: checked.version.clone(),
        content_hash: checked.content_hash.clone(),
        archive_key: final_key.clone(),
        archive_bytes: body.len() as u64,
        files: checked.files,
        readme: checked.readme,
        description: checked.description,
        yanked: false,
        published_at: 0,
    };
    let tmp = hub.archives.put_temp(body).await?;
    let archives = hub.archives.clone();
    let (from, to) = (tmp.clone(), final_key.clone());
    let outcome =
        hub.db.publish(&row, q.private, || async move { archives.rename(&from, &to).await }).await;
    // After a commit the temporary object is gone (renamed); otherwise remove it.
    if !matches!(outcome, Ok(Published::Created)) {
        let _ = hub.archives.delete(&tmp).await;
    }
    let status = match outcome {
        Ok(Published::Created) => {
            hub.counters.publishes.fetch_add(1, Ordering::Relaxed);
            tracing::info!("published {owner}/{name}@{} ({})", row.version, row.content_hash);
            StatusCode::CREATED
        }
        Ok(Published::Unchanged) => {
            hub.counters.unchanged.fetch_add(1, Ordering::Relaxed);
            StatusCode::OK
        }
        Err(e) => {
            if matches!(e, HubError::Conflict(_)) {
                hub.counters.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            return Err(e.into());
        }
    };
    let body = json!({
        "name": format!("{owner}/{name}"), "version": row.version.to_string(),
        "content_hash": row.content_hash, "created": status == StatusCode::CREATED,
    });
    Ok((status, axum::Json(body)).into_response())
}

async fn version_row(
    hub: &Hub,
    headers: &HeaderMap,
    owner: &str,
    name: &str,
    version: &str,
) -> Result<VersionRow, HubError> {
    let who = hub.principal(headers).await?;
    hub.visible(owner, name, hub.viewer(&who)).await?;
    let wanted = semver::Version::parse(version)
        .map_err(|e| HubError::invalid(format!("version `{version}`: {e}")))?;
    hub.db
        .version(owner, name, &wanted)
        .await?
        .ok_or_else(|| HubError::NotFound(format!("{owner}/{name}@{version}")))
}

async fn download(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name, version)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let v = version_row(&hub, &headers, &owner, &name, &version).await?;
    let bytes = hub.archives.get(&v.archive_key).await?;
    hub.counters.downloads.fetch_add(1, Ordering::Relaxed);
    let mut resp = bytes.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/gzip"));
    if let Ok(hash) = HeaderValue::from_str(&v.content_hash) {
        h.insert("x-temper-content-hash", hash);
    }
    Ok(resp)
}

#[derive(Debug, Deserialize)]
struct YankBody {
    #[serde(default = "yes")]
    yanked: bool,
}

fn yes() -> bool {
    true
}

async fn yank(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name, version)): Path<(String, String, String)>,
    body: Option<axum::Json<YankBody>>,
) -> ApiResult<axum::Json<Value>> {
    let who = hub.require(&headers, Scope::Publish).await?;
    if who.user != owner {
        return Err(
            HubError::Forbidden(format!("`{}` cannot yank under {owner}/", who.user)).into()
        );
    }
    let yanked = body.is_none_or(|b| b.yanked);
    let v = semver::Version::parse(&version)
        .map_err(|e| HubError::invalid(format!("version `{version}`: {e}")))?;
    if !hub.db.set_yanked(&owner, &name, &v, yanked).await? {
        return Err(HubError::NotFound(format!("{owner}/{name}@{version}")).into());
    }
    Ok(axum::Json(json!({"name": format!("{owner}/{name}"), "version": version, "yanked": yanked})))
}

async fn list_tokens(State(hub): State<Hub>, headers: HeaderMap) -> ApiResult<axum::Json<Value>> {
    let who = hub.require(&headers, Scope::Tokens).await?;
    Ok(axum::Json(json!({"tokens": hub.db.list_tokens(&who.user).await?})))
}

#[derive(Debug, Deserialize)]
struct NewToken {
    scopes: Vec<String>,
    #[serde(default)]
    label: String,
}

async fn create_token(
    State(hub): State<Hub>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<NewToken>,
) -> ApiResult<Response> {
    let who = hub.require(&headers, Scope::Tokens).await?;
    let scopes: Vec<Scope> =
        body.scopes.iter().map(|s| Scope::parse(s)).collect::<Result<_, _>>()?;
    // Never more rights than the minting token; revoked with it.
    let (id, secret) = hub.db.mint_token(&who, &scopes, &body.label).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"id": id, "token": secret, "scopes": scopes})))
        .into_response())
}

async fn revoke_token(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Value>> {
    // A token may always revoke itself; any other token of its user needs the tokens scope.
    let who = hub
        .principal(&headers)
        .await?
        .ok_or_else(|| HubError::Unauthorized("this needs a token (TEMPER_HUB_TOKEN)".into()))?;
    if who.token_id != id && !who.can(Scope::Tokens) {
        return Err(
            HubError::Forbidden("revoking another token needs the tokens scope".into()).into()
        );
    }
    if !hub.db.revoke_token(&who.user, &id).await? {
        return Err(HubError::NotFound(format!("token {id}")).into());
    }
    Ok(axum::Json(json!({"revoked": id})))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: HubError) -> (StatusCode, String) {
        let resp = ApiError(e).into_response();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn errors_have_one_shape_and_internal_ones_keep_their_details_in_the_log() {
        let (status, body) = answer(HubError::NotFound("alice/nope".into())).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v, json!({"error": {"code": "not_found", "message": "not found: alice/nope"}}));
        let internal = [
            HubError::Database(sqlx::Error::Protocol(
                "SELECT hash FROM tokens WHERE id = $1: disk I/O error".into(),
            )),
            HubError::io(FsPath::new("/srv/hub/archives/tmp/x"), std::io::Error::other("full")),
            HubError::Storage(object_store::Error::Generic {
                store: "S3",
                source: "s3://bucket/secret-prefix: access denied".into(),
            }),
        ];
        for e in internal {
            let (status, body) = answer(e).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["error"]["code"], "internal");
            for leak in ["SELECT", "/srv", "s3://", "disk"] {
                assert!(!body.contains(leak), "{body}");
            }
        }
    }
}
