//! The hub server over HTTP: publish → download round trip, immutability (409, no-op), yank and
//! resolution, private visibility, token scopes and namespaces, hostile and oversized uploads,
//! the rate limit and the metrics. The same suite runs on SQLite and, when
//! `TEMPER_TEST_POSTGRES_URL` names a server (CI starts one), on Postgres.

use std::path::Path;

use reqwest::StatusCode;
use serde_json::{Value, json};
use temper_hub::db::Scope;
use temper_hub::server::{Hub, HubConfig};
use temper_hub::{Limits, pack, unpack};

struct Server {
    url: String,
    hub: Hub,
    http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(cfg: HubConfig) -> Server {
    let hub = Hub::open(cfg).await.expect("hub");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let h = hub.clone();
    tokio::spawn(async move {
        temper_hub::server::serve(h, listener, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Server { url, hub, http: reqwest::Client::new(), _stop: tx }
}

fn package(dir: &Path, name: &str, version: &str, readme: &str) -> Vec<u8> {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("environment.toml"),
        format!(
            "[environment]\nname = \"{name}\"\nversion = \"{version}\"\ndescription = \"Say hello ({name})\"\n\n[dataset]\ntrain = \"data/train.jsonl\"\n\n[env]\nkind = \"single_turn\"\nparser = \"raw\"\n\n[[rubric]]\nreward = \"exact_match\"\nweight = 1.0\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("data/train.jsonl"), "{\"question\": \"hi\", \"answer\": \"hello\"}\n")
        .unwrap();
    std::fs::write(dir.join("README.md"), readme).unwrap();
    pack(dir, &Limits::default()).unwrap().bytes
}

impl Server {
    async fn publish(
        &self,
        token: Option<&str>,
        env: &str,
        body: Vec<u8>,
        private: bool,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}/api/v1/envs/{env}/versions?private={private}", self.url))
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, token: Option<&str>, path: &str) -> (StatusCode, Value) {
        let mut req = self.http.get(format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn bytes(&self, token: Option<&str>, path: &str) -> (StatusCode, Vec<u8>) {
        let mut req = self.http.get(format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        (resp.status(), resp.bytes().await.unwrap().to_vec())
    }
}

async fn suite(cfg: HubConfig, work: &Path) {
    let s = start(cfg).await;
    let db = &s.hub.db;
    for user in ["alice", "bob"] {
        db.add_user(user).await.unwrap();
    }
    assert!(db.add_user("alice").await.unwrap_err().to_string().contains("exists"));
    let (_, alice) = db.create_token("alice", &[Scope::Publish], "laptop").await.unwrap();
    let (_, alice_read) = db.create_token("alice", &[Scope::Read], "ci").await.unwrap();
    let (bob_id, bob) = db.create_token("bob", &[Scope::Publish], "").await.unwrap();

    // Publish, then the same bytes again (no-op), then other content under the same version.
    let v1 = package(&work.join("v1"), "hello", "1.0.0", "# Hello\n");
    let (status, body) = s.publish(Some(&alice), "alice/hello", v1.clone(), false).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let hash = body["content_hash"].as_str().unwrap().to_owned();
    let (status, body) = s.publish(Some(&alice), "alice/hello", v1.clone(), false).await;
    assert_eq!((status, body["created"].clone()), (StatusCode::OK, json!(false)));
    let changed = package(&work.join("v1b"), "hello", "1.0.0", "# Hello, changed\n");
    let (status, body) = s.publish(Some(&alice), "alice/hello", changed, false).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["error"].as_str().unwrap().contains("immutable"));

    // Download round trip: the unpacked content has the published hash.
    let (status, archive) = s.bytes(None, "/api/v1/envs/alice/hello/versions/1.0.0/archive").await;
    assert_eq!(status, StatusCode::OK);
    let out = work.join("installed");
    let unpacked = unpack(&archive, &out, &Limits::default()).unwrap();
    assert_eq!(unpacked.content_hash, hash);
    assert_eq!(std::fs::read_to_string(out.join("README.md")).unwrap(), "# Hello\n");

    // More versions; yank hides one from resolution, an exact pin still gets it.
    for v in ["1.1.0", "1.2.0", "2.0.0"] {
        let bytes = package(&work.join(v), "hello", v, &format!("# Hello {v}\n"));
        assert_eq!(
            s.publish(Some(&alice), "alice/hello", bytes, false).await.0,
            StatusCode::CREATED
        );
    }
    let resolve =
        |req: &str| format!("/api/v1/envs/alice/hello/resolve?req={}", req.replace('^', "%5E"));
    assert_eq!(s.get(None, &resolve("")).await.1["version"], "2.0.0");
    let yank = s
        .http
        .post(format!("{}/api/v1/envs/alice/hello/versions/2.0.0/yank", s.url))
        .bearer_auth(&alice)
        .json(&json!({"yanked": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(yank.status(), StatusCode::OK);
    assert_eq!(s.get(None, &resolve("")).await.1["version"], "1.2.0");
    assert_eq!(s.get(None, &resolve("^1.0")).await.1["version"], "1.2.0");
    assert_eq!(s.get(None, &resolve("~1.1")).await.1["version"], "1.1.0");
    assert_eq!(s.get(None, &resolve("^2")).await.0, StatusCode::NOT_FOUND);
    let (status, pinned) = s.get(None, &resolve("2.0.0")).await;
    assert_eq!((status, pinned["yanked"].clone()), (StatusCode::OK, json!(true)));
    assert!(pinned["url"].as_str().unwrap().ends_with("/versions/2.0.0/archive"));
    // Bob cannot yank Alice's versions.
    let yank = s
        .http
        .post(format!("{}/api/v1/envs/alice/hello/versions/1.2.0/yank", s.url))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap();
    assert_eq!(yank.status(), StatusCode::FORBIDDEN);

    // Namespaces and scopes.
    let other = package(&work.join("other"), "hello", "9.0.0", "");
    assert_eq!(
        s.publish(Some(&bob), "alice/hello", other.clone(), false).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.publish(None, "alice/hello", other.clone(), false).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.publish(Some(&alice_read), "alice/hello", other.clone(), false).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.publish(Some("thub_forged"), "alice/hello", other.clone(), false).await.0,
        StatusCode::UNAUTHORIZED
    );
    // The manifest's name must be the URL's.
    let (status, body) = s.publish(Some(&bob), "bob/other-name", other.clone(), false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A revoked token stops working.
    assert!(db.revoke_token("bob", &bob_id).await.unwrap());
    assert_eq!(s.publish(Some(&bob), "bob/hello", other, false).await.0, StatusCode::UNAUTHORIZED);

    // Private environments are invisible to everyone but their owner.
    let secret = package(&work.join("secret"), "secret-env", "0.1.0", "# Secret\n");
    assert_eq!(
        s.publish(Some(&alice), "alice/secret-env", secret, true).await.0,
        StatusCode::CREATED
    );
    let (_, bob2) = db.create_token("bob", &[Scope::Read], "").await.unwrap();
    for token in [None, Some(bob2.as_str())] {
        assert_eq!(s.get(token, "/api/v1/envs/alice/secret-env").await.0, StatusCode::NOT_FOUND);
        let (status, _) =
            s.bytes(token, "/api/v1/envs/alice/secret-env/versions/0.1.0/archive").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            s.get(token, "/api/v1/envs/alice/secret-env/resolve").await.0,
            StatusCode::NOT_FOUND
        );
        let found = s.get(token, "/api/v1/envs?q=secret").await.1;
        assert_eq!(found["envs"], json!([]), "{found}");
    }
    assert_eq!(s.get(Some(&alice_read), "/api/v1/envs/alice/secret-env").await.0, StatusCode::OK);
    let found = s.get(Some(&alice), "/api/v1/envs?q=SECRET").await.1;
    assert_eq!(found["envs"][0]["name"], "secret-env", "{found}");
    // Search: case-insensitive over names and descriptions; LIKE wildcards are literal.
    let found = s.get(None, "/api/v1/envs?q=say%20HELLO").await.1;
    assert_eq!(found["envs"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["envs"][0]["latest"], "1.2.0");
    assert_eq!(s.get(None, "/api/v1/envs?q=%25").await.1["envs"], json!([]));

    // Hostile archives are refused and leave nothing stored.
    let before = db.counts().await.unwrap();
    let mut traversal = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.as_old_mut().name[..9].copy_from_slice(b"../evil.x");
    h.set_cksum();
    traversal.append(&h, &b"x"[..]).unwrap();
    let raw = traversal.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &raw).unwrap();
    let (status, body) = s.publish(Some(&alice), "alice/evil", gz.finish().unwrap(), false).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("leaves its folder"), "{body}");
    assert_eq!(db.counts().await.unwrap(), before);
    assert_eq!(s.hub.archives.list("tmp").await.unwrap(), Vec::<String>::new());
    // Every committed version has its archive.
    for v in db.versions("alice", "hello").await.unwrap() {
        assert!(s.hub.archives.exists(&v.archive_key).await.unwrap(), "{}", v.version);
    }

    // Token management over HTTP: a read token cannot mint a publish token.
    let resp = s
        .http
        .post(format!("{}/api/v1/tokens", s.url))
        .bearer_auth(&alice_read)
        .json(&json!({"scopes": ["publish"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let (status, who) = s.get(Some(&alice_read), "/api/v1/whoami").await;
    assert_eq!((status, who["user"].clone()), (StatusCode::OK, json!("alice")));
    let tokens = s.get(Some(&alice), "/api/v1/tokens").await.1;
    assert_eq!(tokens["tokens"].as_array().unwrap().len(), 2, "{tokens}");
    assert!(!tokens.to_string().contains("thub_"), "secrets are never listed");

    let metrics =
        s.http.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("temper_hub_publishes_total 5\n"), "{metrics}");
    assert!(metrics.contains("temper_hub_publish_conflicts_total 1\n"), "{metrics}");
    assert!(metrics.contains("temper_hub_versions 5\n"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_on_sqlite_and_a_local_folder() {
    let tmp = tempfile::tempdir().unwrap();
    suite(HubConfig::new(tmp.path().join("data")), tmp.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_and_rate_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HubConfig::new(tmp.path().join("data"));
    cfg.limits.max_archive_bytes = 4096;
    cfg.rate_per_s = 1;
    cfg.burst = 3;
    let s = start(cfg).await;
    s.hub.db.add_user("alice").await.unwrap();
    let (_, alice) = s.hub.db.create_token("alice", &[Scope::Publish], "").await.unwrap();
    let (status, _) = s.publish(Some(&alice), "alice/big", vec![7u8; 10_000], false).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // The bucket held 3; one went on the upload.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(s.get(None, "/health").await.0);
    }
    assert_eq!(statuses[..2], [StatusCode::OK, StatusCode::OK]);
    assert_eq!(statuses.last(), Some(&StatusCode::TOO_MANY_REQUESTS));
}

/// Headless Chromium (Debian's `chromium`), if installed. CI sets TEMPER_TEST_REQUIRE_CHROMIUM
/// (and installs it), so there a missing browser fails instead of skipping.
fn chromium() -> Option<std::path::PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os("TEMPER_TEST_REQUIRE_CHROMIUM").is_none(),
            "TEMPER_TEST_REQUIRE_CHROMIUM is set but no chromium is on PATH"
        );
    }
    found
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom`, `--screenshot=…`); its stdout.
async fn browse(browser: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let run = tokio::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(90), run)
        .await
        .expect("chromium finished within 90 s")
        .expect("chromium ran");
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::print_stderr, reason = "say why the test did nothing")]
async fn web_pages_render_safely_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no chromium on PATH (CI installs Debian's `chromium`)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let s = start(HubConfig::new(tmp.path().join("data"))).await;
    for user in ["alice", "bob"] {
        s.hub.db.add_user(user).await.unwrap();
    }
    let (_, alice) = s.hub.db.create_token("alice", &[Scope::Publish], "").await.unwrap();
    let (_, bob) = s.hub.db.create_token("bob", &[Scope::Publish], "").await.unwrap();
    let readme = "# Hello\n\nSay **hello** back.\n\n## Usage\n\n| split | examples |\n|---|---|\n| train | 1 |\n\n\
                  <script>document.title = 'pwned'</script>\n\n\
                  <img src=\"x\" onerror=\"document.title = 'pwned'\">\n\n\
                  [a link](javascript:document.title='pwned')\n";
    let v1 = package(&tmp.path().join("v1"), "hello", "1.0.0", readme);
    assert_eq!(s.publish(Some(&alice), "alice/hello", v1, false).await.0, StatusCode::CREATED);
    let v2 = package(&tmp.path().join("v2"), "hello", "1.1.0", readme);
    let (_, body) = s.publish(Some(&alice), "alice/hello", v2, false).await;
    let hash = body["content_hash"].as_str().unwrap().to_owned();
    let v3 = package(&tmp.path().join("v3"), "hello", "1.2.0", readme);
    assert_eq!(s.publish(Some(&alice), "alice/hello", v3, false).await.0, StatusCode::CREATED);
    s.hub.db.set_yanked("alice", "hello", &semver::Version::new(1, 2, 0), true).await.unwrap();
    let hidden = package(&tmp.path().join("h"), "hidden", "0.1.0", "# secret\n");
    assert_eq!(s.publish(Some(&bob), "bob/hidden", hidden, true).await.0, StatusCode::CREATED);

    let profile = tmp.path().join("chromium-profile");
    let page = format!("{}/envs/alice/hello", s.url);
    let dom = browse(&browser, &profile, &["--dump-dom"], &page).await;
    assert!(dom.contains("<title>alice/hello · temper hub</title>"), "the script ran: {dom}");
    assert!(dom.contains("<h1 id=\"title\">alice/hello</h1>"), "{dom}");
    assert!(dom.contains("temper env install alice/hello@1.1.0"), "latest non-yanked: {dom}");
    assert!(dom.contains("<h2>Usage</h2>") && dom.contains("<td>train</td>"), "{dom}");
    assert!(dom.contains("<strong>hello</strong>"), "{dom}");
    for bad in ["<script", "onerror", "javascript:", "pwned'"] {
        assert!(!dom.contains(bad), "{bad} reached the page: {dom}");
    }
    assert!(
        dom.contains(&format!("<div class=\"hash\" id=\"content-hash\">{hash}</div>")),
        "{dom}"
    );
    for v in ["1.0.0", "1.1.0", "1.2.0"] {
        assert!(dom.contains(&format!("?v={v}\">{v}</a>")), "version {v} listed: {dom}");
    }
    assert!(dom.contains("<span class=\"badge\">yanked</span>"), "{dom}");
    assert!(
        dom.contains("<code>data/train.jsonl</code>") && dom.contains("<code>README.md</code>")
    );

    let index = browse(&browser, &profile, &["--dump-dom"], &format!("{}/?q=hel", s.url)).await;
    assert!(index.contains("href=\"/envs/alice/hello\""), "{index}");
    assert!(!index.contains("hidden"), "a private environment is listed: {index}");
    let missing = format!("{}/envs/bob/hidden", s.url);
    let missing = browse(&browser, &profile, &["--dump-dom"], &missing).await;
    assert!(missing.contains("No environment bob/hidden"), "{missing}");

    // The screenshot, kept under target/tmp for people to look at.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hub-env-page.png");
    let _ = std::fs::remove_file(&shot);
    browse(&browser, &profile, &[&format!("--screenshot={}", shot.display())], &page).await;
    let img = image::open(&shot).expect("a PNG screenshot").to_rgb8();
    assert_eq!(img.dimensions(), (1280, 1000));
    // The dark install line and the brand colour are drawn; the page is not blank.
    let count = |rgb: [u8; 3]| img.pixels().filter(|p| p.0 == rgb).count();
    assert!(count([0x1d, 0x23, 0x2a]) > 2000, "install line: {}", count([0x1d, 0x23, 0x2a]));
    let distinct: std::collections::HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    assert!(distinct.len() > 50, "{} colours", distinct.len());
    eprintln!("screenshot: {}", shot.display());
}

/// The same suite on Postgres: TEMPER_TEST_POSTGRES_URL names a server and a role that may
/// create databases (`.ci/run` starts Debian's postgresql and sets it); each run gets a fresh
/// database, dropped afterwards. Without the variable the test says so and does nothing, unless
/// TEMPER_TEST_REQUIRE_POSTGRES is set.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::print_stderr, reason = "say why the test did nothing")]
async fn the_api_on_postgres() {
    use sqlx::Connection as _;
    let Ok(base) = std::env::var("TEMPER_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("TEMPER_TEST_REQUIRE_POSTGRES").is_none(),
            "TEMPER_TEST_REQUIRE_POSTGRES is set but TEMPER_TEST_POSTGRES_URL is not"
        );
        eprintln!("skipped: set TEMPER_TEST_POSTGRES_URL=postgres://USER:PASS@HOST/DB to run it");
        return;
    };
    let db_name = format!("temper_test_{}_{}", std::process::id(), rand_tag());
    let mut admin = sqlx::PgConnection::connect(&base).await.expect("connect to Postgres");
    let create = format!("CREATE DATABASE {db_name}");
    sqlx::query(&create).execute(&mut admin).await.expect("create the test database");
    let (head, query) = base.split_once('?').map_or((base.as_str(), ""), |(h, q)| (h, q));
    let server = head.rsplit_once('/').map_or(head, |(s, _)| s);
    let url = if query.is_empty() {
        format!("{server}/{db_name}")
    } else {
        format!("{server}/{db_name}?{query}")
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HubConfig::new(tmp.path().join("data"));
    cfg.database = Some(url);
    suite(cfg, tmp.path()).await;
    let drop_db = format!("DROP DATABASE {db_name} WITH (FORCE)");
    sqlx::query(&drop_db).execute(&mut admin).await.expect("drop the test database");
}

#[cfg(feature = "postgres")]
fn rand_tag() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos().into())
}

/// A hub that answers a resolve with a hash that would climb out of the store, or for another
/// environment: the client refuses both before any path is built from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_resolve_answer_is_refused() {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/api/v1/envs/{owner}/{name}/resolve",
        get(
            |axum::extract::Path((owner, name)): axum::extract::Path<(String, String)>| async move {
                let (answer_name, hash) = match name.as_str() {
                    "climb" => (format!("{owner}/{name}"), "../../../../tmp/evil".to_owned()),
                    _ => ("someone/else".to_owned(), "a".repeat(64)),
                };
                axum::Json(json!({"name": answer_name, "version": "1.0.0", "content_hash": hash,
                              "yanked": false, "url": "http://127.0.0.1:1/x"}))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let tmp = tempfile::tempdir().unwrap();
    let client = temper_hub::HubClient::new(&url, None).unwrap();
    let store = temper_hub::Store::new(tmp.path().join("store"));
    for (spec, needle) in
        [("al/climb", "not a SHA-256"), ("al/other", "answered for `someone/else`")]
    {
        let reference: temper_hub::EnvRef = spec.parse().unwrap();
        let mut lock = temper_hub::Lockfile::default();
        let err = temper_hub::install(&client, &store, &reference, &mut lock, &Limits::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{spec}: {err}");
        assert!(lock.env.is_empty());
    }
    assert!(!tmp.path().join("store").exists(), "nothing was created");
}
