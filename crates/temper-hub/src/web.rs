//! The hub's web pages, served by the same process as the API:
//!
//! - `/` (and `/?q=…`): the public environments, searched by owner, name or description;
//! - `/envs/{owner}/{name}[?v=VERSION]`: one environment, with its README rendered, the lines
//!   that evaluate, install and train on it, what its manifest says (kind, parser, rubric,
//!   dataset layout, tags, license), every version with its content hash, and the files of the
//!   shown version, each opening as text (`/envs/{owner}/{name}/files/PATH[?v=VERSION]`);
//! - `/publish`: how to get a token and publish an environment.
//!
//! Templates are minijinja with HTML auto-escaping; a README is Markdown (pulldown-cmark)
//! sanitized by ammonia, so scripts, event handlers and `javascript:` links never reach the page,
//! and a Content-Security-Policy that allows no script at all backs that up. Pages show only
//! public environments: the web has no login.

use std::sync::OnceLock;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::HubError;
use crate::db::{VersionRow, VersionSummary};

/// The most versions an environment's page lists (newest first).
const MAX_VERSION_ROWS: usize = 200;
use crate::reference::{Wanted, resolve};
use crate::server::Hub;

/// No script, no plugins, no framing; styles only inline (ours), images from anywhere a README
/// links (http(s) and data).
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' https: data:; \
                   form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

fn templates() -> &'static minijinja::Environment<'static> {
    static ENV: OnceLock<minijinja::Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        for (name, source) in [
            ("base.html", include_str!("../templates/base.html")),
            ("index.html", include_str!("../templates/index.html")),
            ("env.html", include_str!("../templates/env.html")),
            ("error.html", include_str!("../templates/error.html")),
            ("file.html", include_str!("../templates/file.html")),
            ("publish.html", include_str!("../templates/publish.html")),
        ] {
            // The templates are part of the binary; a syntax error is caught by the tests.
            if let Err(e) = env.add_template(name, source) {
                tracing::error!("web template {name}: {e}");
            }
        }
        env
    })
}

/// Markdown to HTML that cannot run script.
pub fn render_readme(markdown: &str) -> String {
    use pulldown_cmark::{Options, Parser, html};
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, Parser::new_ext(markdown, options));
    ammonia::Builder::default().clean(&out).to_string()
}

fn page(status: StatusCode, template: &str, ctx: minijinja::Value) -> Response {
    let rendered = templates().get_template(template).and_then(|t| t.render(ctx));
    let (status, body) = match rendered {
        Ok(body) => (status, body),
        Err(e) => {
            tracing::error!("rendering {template}: {e:#}");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered".to_owned())
        }
    };
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

fn error_page(e: &HubError) -> Response {
    let (status, message) = match e {
        HubError::NotFound(what) => (StatusCode::NOT_FOUND, format!("No environment {what}.")),
        HubError::Invalid(m) => (StatusCode::BAD_REQUEST, m.clone()),
        other => {
            tracing::error!("web page: {other}");
            (StatusCode::INTERNAL_SERVER_ERROR, "Something went wrong on the hub.".to_owned())
        }
    };
    let ctx = json!({"status": status.to_string(), "message": message, "q": ""});
    page(status, "error.html", minijinja::Value::from(minijinja::value::Serde(&ctx)))
}

#[derive(Debug, Deserialize)]
pub(crate) struct IndexQuery {
    #[serde(default)]
    q: String,
}

const PAGE_SIZE: i64 = 100;

pub(crate) async fn index(State(hub): State<Hub>, Query(q): Query<IndexQuery>) -> Response {
    match index_inner(&hub, &q.q).await {
        Ok(r) => r,
        Err(e) => error_page(&e),
    }
}

async fn index_inner(hub: &Hub, q: &str) -> Result<Response, HubError> {
    if q.len() > 200 {
        return Err(HubError::invalid("a search is at most 200 bytes"));
    }
    let mut envs = hub.db.search(q, None, PAGE_SIZE + 1, 0).await?;
    let more = envs.len() as i64 > PAGE_SIZE;
    envs.truncate(PAGE_SIZE as usize);
    let mut rows = Vec::with_capacity(envs.len());
    for e in envs {
        let latest = hub.db.latest(&e.owner, &e.name).await?;
        rows.push(json!({
            "owner": e.owner, "name": e.name, "description": e.description,
            "latest": latest.map(|v| v.to_string()),
        }));
    }
    let ctx = json!({"q": q, "envs": rows, "more": more});
    Ok(page(StatusCode::OK, "index.html", minijinja::Value::from(minijinja::value::Serde(&ctx))))
}

#[derive(Debug, Deserialize)]
pub(crate) struct EnvQuery {
    v: Option<String>,
}

pub(crate) async fn env_page(
    State(hub): State<Hub>,
    headers: HeaderMap,
    Path((owner, name)): Path<(String, String)>,
    Query(q): Query<EnvQuery>,
) -> Response {
    match env_inner(&hub, &headers, &owner, &name, q.v.as_deref()).await {
        Ok(r) => r,
        Err(e) => error_page(&e),
    }
}

/// The most bytes of a file its page shows.
const MAX_FILE_BYTES: u64 = 256 << 10;

pub(crate) async fn file_page(
    State(hub): State<Hub>,
    Path((owner, name, path)): Path<(String, String, String)>,
    Query(q): Query<EnvQuery>,
) -> Response {
    match file_inner(&hub, &owner, &name, &path, q.v.as_deref()).await {
        Ok(r) => r,
        Err(e) => error_page(&e),
    }
}

async fn file_inner(
    hub: &Hub,
    owner: &str,
    name: &str,
    path: &str,
    version: Option<&str>,
) -> Result<Response, HubError> {
    let (_, shown) = shown_version(hub, owner, name, version).await?;
    let entry =
        shown.files.iter().find(|f| f.path == path).ok_or_else(|| {
            HubError::NotFound(format!("{owner}/{name}@{}: {path}", shown.version))
        })?;
    let archive = hub.archives.get(&shown.archive_key).await?;
    let read = crate::archive::read_file(&archive, path, hub.limits(), MAX_FILE_BYTES)?
        .ok_or_else(|| HubError::NotFound(format!("{owner}/{name}@{}: {path}", shown.version)))?;
    // Cut at MAX_FILE_BYTES, a text file may end inside a character: the whole characters
    // before the cut are its text.
    let text = match std::str::from_utf8(&read.bytes) {
        Ok(t) => Some(t),
        Err(e) if read.truncated() && e.error_len().is_none() => {
            std::str::from_utf8(&read.bytes[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    }
    .filter(|t| !t.contains('\0'));
    let ctx = json!({
        "q": "",
        "owner": owner,
        "name": name,
        "version": shown.version.to_string(),
        "path": path,
        "bytes": entry.bytes,
        "sha256": entry.sha256,
        "text": text,
        "truncated": read.truncated(),
        "shown_bytes": read.bytes.len(),
    });
    Ok(page(StatusCode::OK, "file.html", minijinja::Value::from(minijinja::value::Serde(&ctx))))
}

pub(crate) async fn publish_page(State(hub): State<Hub>, headers: HeaderMap) -> Response {
    let ctx = json!({"q": "", "hub_url": hub.base_url(&headers)});
    page(StatusCode::OK, "publish.html", minijinja::Value::from(minijinja::value::Serde(&ctx)))
}

/// `YYYY-MM-DD` of Unix seconds (UTC), by the days-to-civil algorithm.
fn date(unix: i64) -> String {
    let z = unix.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The environment (public only) and the version a page shows: `version`, else the latest
/// that is not yanked, else the newest.
async fn shown_version(
    hub: &Hub,
    owner: &str,
    name: &str,
    version: Option<&str>,
) -> Result<(Vec<VersionSummary>, VersionRow), HubError> {
    let not_found = || HubError::NotFound(format!("{owner}/{name}"));
    hub.db.env(owner, name).await?.filter(|e| !e.private).ok_or_else(not_found)?;
    // Summaries of every version (no file lists or READMEs), and one version whole.
    let versions: Vec<VersionSummary> = hub.db.version_summaries(owner, name).await?;
    let picked = match version {
        Some(v) => semver::Version::parse(v)
            .map_err(|e| HubError::invalid(format!("version `{v}`: {e}")))?,
        None => resolve(versions.iter().map(|v| (&v.version, v.yanked)), &Wanted::Latest)
            .or_else(|| versions.first().map(|v| v.version.clone()))
            .ok_or_else(not_found)?,
    };
    let shown: VersionRow = hub
        .db
        .version(owner, name, &picked)
        .await?
        .ok_or_else(|| HubError::NotFound(format!("{owner}/{name}@{picked}")))?;
    Ok((versions, shown))
}

/// What a package's manifest says about it, for its page; `None` fields were not set.
fn about(manifest_text: &str) -> serde_json::Value {
    let Ok(m) = toml::from_str::<temper_envs::package::Manifest>(manifest_text) else {
        return json!({"unreadable": true});
    };
    let rubric: Vec<String> = m
        .rubric
        .iter()
        .map(|r| {
            let name = r.name.as_deref().filter(|n| *n != r.reward);
            let named = name.map(|n| format!(" as {n}")).unwrap_or_default();
            if r.weight == 0.0 {
                format!("{}{named} (logged only)", r.reward)
            } else {
                format!("{}{named} × {}", r.reward, r.weight)
            }
        })
        .collect();
    let dataset = m.dataset.as_ref().map(|d| {
        let layout = d.layout.map(|l| format!("{l:?}").to_lowercase());
        match (&d.generator, layout) {
            (Some(g), _) => format!("generated by {g}"),
            (None, Some(l)) => format!("files in the {l} layout"),
            (None, None) => "files".to_owned(),
        }
    });
    json!({
        "kind": m.env.kind.clone().unwrap_or_else(|| "single_turn".into()),
        "parser": m.env.parser.clone().unwrap_or_else(|| "raw".into()),
        "rubric": rubric,
        "tools": m.tool.iter().map(|t| t.name.clone()).chain(m.env.tools.iter().cloned()).collect::<Vec<_>>(),
        "dataset": dataset,
        "tags": m.environment.tags,
        "license": m.environment.license,
    })
}

/// A version's `environment.toml`, read from its archive once and then kept (a version never
/// changes); empty when the archive cannot be read, so the page still shows the rest.
async fn manifest_of(hub: &Hub, shown: &VersionRow) -> String {
    if let Some(text) = hub.cached_manifest(&shown.archive_key) {
        return text;
    }
    let read = match hub.archives.get(&shown.archive_key).await {
        Ok(archive) => crate::archive::read_file(
            &archive,
            temper_envs::package::MANIFEST,
            hub.limits(),
            MAX_FILE_BYTES,
        ),
        Err(e) => Err(e),
    };
    match read {
        Ok(found) => {
            let text =
                found.map(|m| String::from_utf8_lossy(&m.bytes).into_owned()).unwrap_or_default();
            hub.cache_manifest(&shown.archive_key, &text);
            text
        }
        Err(e) => {
            tracing::warn!(
                "{}/{}@{}: manifest unreadable: {e}",
                shown.owner,
                shown.name,
                shown.version
            );
            String::new()
        }
    }
}

async fn env_inner(
    hub: &Hub,
    headers: &HeaderMap,
    owner: &str,
    name: &str,
    version: Option<&str>,
) -> Result<Response, HubError> {
    let (versions, shown) = shown_version(hub, owner, name, version).await?;
    let rows: Vec<_> = versions
        .iter()
        .take(MAX_VERSION_ROWS)
        .map(|v| {
            json!({
                "version": v.version.to_string(), "content_hash": v.content_hash,
                "yanked": v.yanked, "published": date(v.published_at),
            })
        })
        .collect();
    let manifest = manifest_of(hub, &shown).await;
    let hub_url = hub.base_url(headers);
    let ctx = json!({
        "q": "",
        "owner": owner,
        "name": name,
        "description": shown.description,
        "readme": render_readme(&shown.readme),
        "manifest": manifest,
        "about": about(&manifest),
        "hub_url": hub_url,
        "default_hub": hub_url == crate::client::DEFAULT_URL,
        "shown": {
            "version": shown.version.to_string(), "content_hash": shown.content_hash,
            "yanked": shown.yanked, "files": shown.files, "archive_bytes": shown.archive_bytes,
        },
        "versions": rows,
    });
    Ok(page(StatusCode::OK, "env.html", minijinja::Value::from(minijinja::value::Serde(&ctx))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readmes_lose_every_way_to_run_script() {
        let md = "# Title\n\n<script>alert(1)</script>\n\n<img src=\"x\" onerror=\"alert(2)\">\n\n\
                  [click](javascript:alert(3)) <a href=\"javascript:alert(4)\">x</a>\n\n\
                  <iframe src=\"https://evil\"></iframe><style>body{display:none}</style>\n\n\
                  | a | b |\n|---|---|\n| 1 | 2 |\n\n`<b>code</b>`\n";
        let html = render_readme(md);
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<td>1</td>"), "tables render: {html}");
        assert!(html.contains("&lt;b&gt;code&lt;/b&gt;"), "code is escaped: {html}");
        for bad in ["<script", "onerror", "javascript:", "<iframe", "<style", "alert(1)"] {
            assert!(!html.contains(bad), "{bad} survived: {html}");
        }
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_796_083_200), "2026-12-01");
    }

    #[test]
    fn templates_parse() {
        for t in ["index.html", "env.html", "error.html"] {
            templates().get_template(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        }
    }
}
