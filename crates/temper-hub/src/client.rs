//! The hub's HTTP client: what `temper env …` and `temper login` call.
//!
//! Errors keep the server's meaning: 401 → [`HubError::Unauthorized`], 403 →
//! [`HubError::Forbidden`], 404 → [`HubError::NotFound`], 409 → [`HubError::Conflict`], other
//! refusals → [`HubError::Invalid`] with the server's message.

use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::HubError;
use crate::db::{EnvRow, VersionRow, VersionSummary};
use crate::reference::{EnvRef, Wanted};

/// The hub a client talks to by default: where `temper hub serve` listens by default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8470";

/// What a reference resolved to on the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// `owner/name`.
    pub name: String,
    /// The picked version.
    pub version: semver::Version,
    /// Its content hash.
    pub content_hash: String,
    /// Whether it is yanked (only an exact pin picks a yanked version).
    pub yanked: bool,
    /// Where its archive downloads from.
    pub url: String,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    /// Namespace.
    pub owner: String,
    /// Name.
    pub name: String,
    /// The newest version's description.
    pub description: String,
    /// Visible only to its owner.
    pub private: bool,
    /// The newest non-yanked version.
    pub latest: Option<String>,
}

/// An environment and its versions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listing {
    /// The environment.
    pub env: EnvRow,
    /// The newest non-yanked version.
    pub latest: Option<String>,
    /// How many versions there are in all.
    pub total: usize,
    /// The page asked for, newest first.
    pub versions: Vec<VersionSummary>,
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishOutcome {
    /// `owner/name`.
    pub name: String,
    /// The version.
    pub version: String,
    /// Its content hash.
    pub content_hash: String,
    /// False when the same content was already published (nothing changed).
    pub created: bool,
}

/// A client of one hub.
#[derive(Clone)]
pub struct HubClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl HubClient {
    /// A client of the hub at `base` (e.g. `http://127.0.0.1:8470`), with an optional token.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, HubError> {
        let base = base.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(HubError::invalid(format!(
                "hub URL `{base}`: expected http:// or https://"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| HubError::Http(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { base: base.to_owned(), token: token.filter(|t| !t.is_empty()), http })
    }

    /// The hub's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Where this hub serves the archive of `reference` at `version`.
    pub fn archive_url(&self, reference: &EnvRef, version: &semver::Version) -> String {
        format!(
            "{}/api/v1/envs/{}/{}/versions/{version}/archive",
            self.base, reference.owner, reference.name
        )
    }

    /// Whether `url` is under this hub's base URL (the only place the token is sent).
    pub fn is_own_url(&self, url: &str) -> bool {
        url.strip_prefix(&self.base).is_some_and(|rest| rest.starts_with('/'))
    }

    /// Whether a token is set.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.authed(self.http.get(format!("{}{path}", self.base)))
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.authed(self.http.post(format!("{}{path}", self.base)))
    }

    fn authed(&self, req: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn send(&self, req: RequestBuilder) -> Result<Response, HubError> {
        let resp = req.send().await.map_err(|e| {
            HubError::Http(format!(
                "cannot reach the hub at {}: {e} (is it running, and TEMPER_HUB_URL right?)",
                self.base
            ))
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        // `{"error": {"code", "message"}}`; hubs before it answered `{"error": "…"}`.
        let message = temper_protocol::ErrorBody::message_of(text.as_bytes())
            .unwrap_or_else(|| text.chars().take(300).collect());
        Err(match status {
            StatusCode::UNAUTHORIZED => HubError::Unauthorized(message),
            StatusCode::FORBIDDEN => HubError::Forbidden(message),
            StatusCode::NOT_FOUND => HubError::NotFound(message),
            StatusCode::CONFLICT => HubError::Conflict(message),
            s if s.is_client_error() => HubError::Invalid(format!("{message} (HTTP {s})")),
            s => HubError::Http(format!("the hub at {} answered {s}: {message}", self.base)),
        })
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        req: RequestBuilder,
    ) -> Result<T, HubError> {
        self.send(req)
            .await?
            .json()
            .await
            .map_err(|e| HubError::Http(format!("unexpected answer from {}: {e}", self.base)))
    }

    /// The token's user and scopes.
    pub async fn whoami(&self) -> Result<Value, HubError> {
        self.json(self.get("/api/v1/whoami")).await
    }

    /// Environments whose owner, name or description contains `query`.
    pub async fn search(&self, query: &str, limit: u32) -> Result<Vec<Hit>, HubError> {
        #[derive(Deserialize)]
        struct Hits {
            envs: Vec<Hit>,
        }
        let req = self.get("/api/v1/envs").query(&[("q", query), ("limit", &limit.to_string())]);
        Ok(self.json::<Hits>(req).await?.envs)
    }

    /// An environment and a page of its versions, newest first: `limit` from `offset` (the hub
    /// caps `limit` at `server::MAX_PAGE`).
    pub async fn show(
        &self,
        owner: &str,
        name: &str,
        limit: usize,
        offset: usize,
    ) -> Result<Listing, HubError> {
        let req = self
            .get(&format!("/api/v1/envs/{owner}/{name}"))
            .query(&[("limit", limit), ("offset", offset)]);
        self.json(req).await
    }

    /// One version with its file list and README.
    pub async fn version(
        &self,
        owner: &str,
        name: &str,
        version: &semver::Version,
    ) -> Result<VersionRow, HubError> {
        self.json(self.get(&format!("/api/v1/envs/{owner}/{name}/versions/{version}"))).await
    }

    /// The version `reference` picks.
    pub async fn resolve(&self, reference: &EnvRef) -> Result<Resolved, HubError> {
        let req = match &reference.wanted {
            Wanted::Latest => String::new(),
            Wanted::Exact(v) => format!("={v}"),
            Wanted::Req(r) => r.to_string(),
        };
        let path = format!("/api/v1/envs/{}/{}/resolve", reference.owner, reference.name);
        let r: Resolved = self.json(self.get(&path).query(&[("req", req)])).await?;
        // The answer names folders in the store: it must be what was asked, and a digest.
        if r.name != reference.full_name() {
            return Err(HubError::Http(format!(
                "asked {} for {}, it answered for `{}`",
                self.base,
                reference.full_name(),
                r.name
            )));
        }
        if !crate::lock::is_sha256_hex(&r.content_hash) {
            return Err(HubError::Http(format!(
                "{} answered a content hash for {} that is not a SHA-256 hex digest",
                self.base,
                reference.full_name()
            )));
        }
        Ok(r)
    }

    /// Downloads an archive of at most `max_bytes`. The token goes only to this client's hub:
    /// a lockfile naming another host gets no credentials.
    pub async fn download(&self, url: &str, max_bytes: u64) -> Result<Vec<u8>, HubError> {
        let req =
            if self.is_own_url(url) { self.authed(self.http.get(url)) } else { self.http.get(url) };
        let mut resp = self.send(req).await?;
        if resp.content_length().is_some_and(|n| n > max_bytes) {
            return Err(HubError::invalid(format!(
                "{url}: the archive is larger than the {max_bytes}-byte limit"
            )));
        }
        let mut out = Vec::new();
        while let Some(chunk) =
            resp.chunk().await.map_err(|e| HubError::Http(format!("downloading {url}: {e}")))?
        {
            if (out.len() + chunk.len()) as u64 > max_bytes {
                return Err(HubError::invalid(format!(
                    "{url}: the archive is larger than the {max_bytes}-byte limit"
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Publishes a packed archive under `owner/name`.
    pub async fn publish(
        &self,
        owner: &str,
        name: &str,
        archive: Vec<u8>,
        private: bool,
    ) -> Result<PublishOutcome, HubError> {
        let req = self
            .post(&format!("/api/v1/envs/{owner}/{name}/versions"))
            .query(&[("private", private)])
            .header(reqwest::header::CONTENT_TYPE, "application/gzip")
            .body(archive);
        self.json(req).await
    }

    /// Yanks (or, with `yanked = false`, restores) a version.
    pub async fn yank(
        &self,
        owner: &str,
        name: &str,
        version: &semver::Version,
        yanked: bool,
    ) -> Result<(), HubError> {
        let path = format!("/api/v1/envs/{owner}/{name}/versions/{version}/yank");
        self.send(self.post(&path).json(&json!({"yanked": yanked}))).await.map(drop)
    }
}
