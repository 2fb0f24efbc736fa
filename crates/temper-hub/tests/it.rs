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
    assert!(body["error"]["message"].as_str().unwrap().contains("immutable"));

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
    assert_eq!(body["error"]["code"], "invalid", "{body}");
    // A broken manifest is named inside the package, never by the server's staging path.
    let broken = work.join("broken");
    package(&broken, "broken", "1.0.0", "");
    std::fs::write(broken.join("environment.toml"), "[environment\nname = ").unwrap();
    let bytes = pack(&broken, &Limits::default()).unwrap().bytes;
    let (status, body) = s.publish(Some(&alice), "alice/broken", bytes, false).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_package")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("environment.toml:") && !message.contains("/tmp"), "{message}");
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
    assert!(body["error"]["message"].as_str().unwrap().contains("leaves its folder"), "{body}");
    assert_eq!(db.counts().await.unwrap(), before);
    assert_eq!(s.hub.archives.list("tmp").await.unwrap(), Vec::<String>::new());
    // Every committed version has its archive.
    for v in db.version_summaries("alice", "hello").await.unwrap() {
        let v = db.version("alice", "hello", &v.version).await.unwrap().unwrap();
        assert!(s.hub.archives.exists(&v.archive_key).await.unwrap(), "{}", v.version);
    }

    token_management(&s, &alice, &alice_read).await;

    // A listing is a page of summaries (no README, no file list); one version has them whole.
    let (status, listing) = s.get(None, "/api/v1/envs/alice/hello?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{listing}");
    assert_eq!((listing["total"].clone(), listing["latest"].clone()), (json!(4), json!("1.2.0")));
    let shown: Vec<&str> = listing["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["2.0.0", "1.2.0"], "newest first: {listing}");
    assert!(!listing.to_string().contains("Hello 2.0.0") && !listing.to_string().contains("files"));
    let older = s.get(None, "/api/v1/envs/alice/hello?limit=2&offset=2").await.1;
    assert_eq!(older["versions"][1]["version"], "1.0.0", "{older}");
    let (status, one) = s.get(None, "/api/v1/envs/alice/hello/versions/1.2.0").await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["readme"], "# Hello 1.2.0\n");
    assert!(one["files"].as_array().unwrap().iter().any(|f| f["path"] == "environment.toml"));
    let page = s.get(None, "/api/v1/envs/alice/hello?limit=100000").await.1;
    assert_eq!(page["versions"].as_array().unwrap().len(), 4);

    let metrics =
        s.http.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    let sample = |name| temper_protocol::exposition::sample(&metrics, name, &[("role", "hub")]);
    assert_eq!(sample("temper_hub_publishes_total"), Some(5.0), "{metrics}");
    assert_eq!(sample("temper_hub_publish_conflicts_total"), Some(1.0), "{metrics}");
    assert_eq!(sample("temper_hub_versions"), Some(5.0), "{metrics}");
}

/// Token scopes: only a `tokens` token lists, mints and revokes (a token may revoke itself); a
/// minted token holds at most its minter's scopes and dies with it, at any depth.
async fn token_management(s: &Server, alice: &str, alice_read: &str) {
    let tokens_req = |method: reqwest::Method, path: &str, token: &str| {
        s.http.request(method, format!("{}{path}", s.url)).bearer_auth(token.to_owned())
    };
    let mint = |token: &str, scopes: &[&str]| {
        tokens_req(reqwest::Method::POST, "/api/v1/tokens", token)
            .json(&json!({"scopes": scopes}))
            .send()
    };
    // Neither a read nor a publish token manages tokens: not list, mint, nor revoke another.
    for t in [alice_read, alice] {
        assert_eq!(mint(t, &["read"]).await.unwrap().status(), StatusCode::FORBIDDEN);
        assert_eq!(s.get(Some(t), "/api/v1/tokens").await.0, StatusCode::FORBIDDEN);
    }
    let alice_id = s.get(Some(alice), "/api/v1/whoami").await.1["token_id"].clone();
    let read_id = s.get(Some(alice_read), "/api/v1/whoami").await.1["token_id"].clone();
    let revoke = |token: &str, id: &Value| {
        tokens_req(
            reqwest::Method::DELETE,
            &format!("/api/v1/tokens/{}", id.as_str().unwrap()),
            token,
        )
        .send()
    };
    // The reported case: a read token revoking its owner's publish token.
    assert_eq!(revoke(alice_read, &alice_id).await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(s.get(Some(alice), "/api/v1/whoami").await.0, StatusCode::OK, "still alive");

    // A tokens token mints within its own scopes only.
    let (_, admin) =
        s.hub.db.create_token("alice", &[Scope::Read, Scope::Tokens], "admin").await.unwrap();
    let resp = mint(&admin, &["publish"]).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let child: Value = mint(&admin, &["read", "tokens"]).await.unwrap().json().await.unwrap();
    let child_secret = child["token"].as_str().unwrap().to_owned();
    let grandchild: Value = mint(&child_secret, &["read"]).await.unwrap().json().await.unwrap();
    let grandchild_secret = grandchild["token"].as_str().unwrap().to_owned();
    let listed = s.get(Some(&admin), "/api/v1/tokens").await.1;
    assert_eq!(listed["tokens"].as_array().unwrap().len(), 5, "{listed}");
    assert!(!listed.to_string().contains("thub_"), "secrets are never listed");
    assert_eq!(
        listed["tokens"].as_array().unwrap().iter().find(|t| t["id"] == grandchild["id"]).unwrap()
            ["parent_id"],
        child["id"]
    );
    // Revoking the child revokes the grandchild it minted; the admin token lives on.
    assert_eq!(revoke(&admin, &child["id"]).await.unwrap().status(), StatusCode::OK);
    for t in [&child_secret, &grandchild_secret] {
        assert_eq!(s.get(Some(t), "/api/v1/whoami").await.0, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(s.get(Some(&admin), "/api/v1/whoami").await.0, StatusCode::OK);
    // A mint that raced its parent's revocation (authenticated before, inserted after) leaves a
    // child the cascade never saw: it is refused all the same.
    let (_, racer) =
        s.hub.db.create_token("alice", &[Scope::Read, Scope::Tokens], "racer").await.unwrap();
    let stale = s.hub.db.authenticate(&racer).await.unwrap().unwrap();
    assert!(s.hub.db.revoke_token("alice", &stale.token_id).await.unwrap());
    let (_, orphan) = s.hub.db.mint_token(&stale, &[Scope::Read], "late").await.unwrap();
    assert_eq!(s.hub.db.authenticate(&orphan).await.unwrap(), None);
    assert_eq!(s.get(Some(&orphan), "/api/v1/whoami").await.0, StatusCode::UNAUTHORIZED);
    // Any token may revoke itself.
    let (_, own) = s.hub.db.create_token("alice", &[Scope::Read], "short-lived").await.unwrap();
    let own_id = s.get(Some(&own), "/api/v1/whoami").await.1["token_id"].clone();
    assert_eq!(revoke(&own, &own_id).await.unwrap().status(), StatusCode::OK);
    assert_eq!(s.get(Some(&own), "/api/v1/whoami").await.0, StatusCode::UNAUTHORIZED);
    let (status, who) = s.get(Some(alice_read), "/api/v1/whoami").await;
    assert_eq!(
        (status, who["user"].clone(), read_id.is_string()),
        (StatusCode::OK, json!("alice"), true)
    );
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
    cfg.burst = 5;
    let s = start(cfg).await;
    s.hub.db.add_user("alice").await.unwrap();
    let (_, alice) = s.hub.db.create_token("alice", &[Scope::Publish], "").await.unwrap();
    let (status, body) = s.publish(Some(&alice), "alice/big", vec![7u8; 10_000], false).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"]["code"], "too_large", "{body}");
    // What no handler sees (a bad query, an unknown route) answers in the error shape too.
    let (status, body) = s.get(None, "/api/v1/envs?limit=many").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("limit"), "{body}");
    let (status, body) = s.get(None, "/api/v1/nope").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found")),
        "{body}"
    );
    // The bucket held 5; three went on the upload and the two refused requests.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(s.get(None, "/health").await.0);
    }
    assert_eq!(statuses[..2], [StatusCode::OK, StatusCode::OK]);
    assert_eq!(statuses.last(), Some(&StatusCode::TOO_MANY_REQUESTS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limiter_forgets_idle_clients_and_groups_ipv6_prefixes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = HubConfig::new(tmp.path().join("data"));
    (cfg.rate_per_s, cfg.burst) = (100, 1);
    let hub = Hub::open(cfg).await.unwrap();
    for i in 0..2000u32 {
        assert!(hub.admit(std::net::Ipv4Addr::from(0x0a00_0000 + i).into()));
    }
    // One host rotating through its IPv6 /64 is one client, and is limited as one.
    let prefix: u128 = 0x2001_0db8_0000_0001 << 64;
    let admitted =
        (0..2000u128).filter(|i| hub.admit(std::net::Ipv6Addr::from(prefix | i).into())).count();
    assert!(admitted < 100, "{admitted} of 2000 requests from one /64 admitted");
    // A pruning came with the 1024th request; tables shrink once the buckets fill again.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(hub.prune_rate_limits(), 0);
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

    // What a visitor needs to choose and use it: the lines to run, what the manifest says, and
    // every file opening as text (escaped).
    assert!(dom.contains("temper eval alice/hello -m http://localhost:8000/v1"), "{dom}");
    assert!(
        dom.contains("id = \"alice/hello\"") || dom.contains("id = &quot;alice/hello&quot;"),
        "{dom}"
    );
    assert!(dom.contains(&format!("export TEMPER_HUB_URL={}", s.url)), "{dom}");
    for shown in [
        "<th>kind</th><td>single_turn</td>",
        "<code>raw</code>",
        "<code>exact_match × 1</code>",
        "not stated",
    ] {
        assert!(dom.contains(shown), "{shown}: {dom}");
    }
    let link = "/envs/alice/hello/files/data/train.jsonl?v=1.1.0";
    assert!(dom.contains(&format!("href=\"{link}\"")), "{dom}");
    let file = browse(&browser, &profile, &["--dump-dom"], &format!("{}{link}", s.url)).await;
    assert!(file.contains("<code>data/train.jsonl</code>"), "{file}");
    assert!(file.contains("{\"question\": \"hi\", \"answer\": \"hello\"}"), "{file}");
    let readme_file = format!("{}/envs/alice/hello/files/README.md?v=1.1.0", s.url);
    let readme_file = browse(&browser, &profile, &["--dump-dom"], &readme_file).await;
    assert!(readme_file.contains("&lt;script&gt;document.title"), "shown as text: {readme_file}");
    assert!(readme_file.contains("<title>README.md · alice/hello@1.1.0 · temper hub</title>"));
    let no_file = format!("{}/envs/alice/hello/files/nope.txt", s.url);
    let no_file = browse(&browser, &profile, &["--dump-dom"], &no_file).await;
    assert!(no_file.contains("No environment alice/hello@1.1.0: nope.txt."), "{no_file}");
    let publish = browse(&browser, &profile, &["--dump-dom"], &format!("{}/publish", s.url)).await;
    for step in
        ["temper hub user add YOUR_NAME --data DIR", "temper login", "temper env push my-task"]
    {
        assert!(publish.contains(step), "{step}: {publish}");
    }
    // A package without a README shows its manifest instead; its tags and license too.
    let bare = tmp.path().join("bare");
    package(&bare, "tagged", "0.1.0", "");
    std::fs::remove_file(bare.join("README.md")).unwrap();
    let manifest = std::fs::read_to_string(bare.join("environment.toml")).unwrap();
    std::fs::write(
        bare.join("environment.toml"),
        manifest
            .replace("description", "license = \"MIT\"\ntags = [\"math\", \"tiny\"]\ndescription"),
    )
    .unwrap();
    let packed = pack(&bare, &Limits::default()).unwrap().bytes;
    assert_eq!(s.publish(Some(&alice), "alice/tagged", packed, false).await.0, StatusCode::CREATED);
    let tagged =
        browse(&browser, &profile, &["--dump-dom"], &format!("{}/envs/alice/tagged", s.url)).await;
    assert!(tagged.contains("<pre id=\"manifest\">[environment]"), "{tagged}");
    assert!(
        tagged.contains("<span class=\"badge\">math</span>") && tagged.contains("<td>MIT</td>"),
        "{tagged}"
    );

    // Search ranks a name match before a description match.
    let ranked = s.get(None, "/api/v1/envs?q=tagged").await.1;
    assert_eq!(ranked["envs"][0]["name"], "tagged", "{ranked}");
    let ranked = s.get(None, "/api/v1/envs?q=hello").await.1;
    let names: Vec<&str> =
        ranked["envs"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hello", "tagged"], "the name first, then the description: {ranked}");

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
    for (name, url) in [
        ("hub-file-page.png", format!("{}{link}", s.url)),
        ("hub-publish-page.png", format!("{}/publish", s.url)),
        ("hub-env-without-readme.png", format!("{}/envs/alice/tagged", s.url)),
    ] {
        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_file(&shot);
        browse(&browser, &profile, &[&format!("--screenshot={}", shot.display())], &url).await;
        let img = image::open(&shot).expect("a PNG screenshot").to_rgb8();
        let distinct: std::collections::HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        assert!(distinct.len() > 20, "{name}: {} colours", distinct.len());
        eprintln!("screenshot: {}", shot.display());
    }
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
                    // Well-formed, but the archive is said to be on another host.
                    "foreign" => (format!("{owner}/{name}"), "b".repeat(64)),
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
    for (spec, needle) in [
        ("al/climb", "not a SHA-256"),
        ("al/other", "answered for `someone/else`"),
        // The archive is asked of this hub (which has none), never of the host it named.
        ("al/foreign", "not found"),
    ] {
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

/// `temper.lock` is the user's file: an entry whose hash or URL was edited cannot substitute
/// content under a trusted name. Its URL is never fetched; its hash must be the hub's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_lockfile_cannot_substitute_content() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(HubConfig::new(tmp.path().join("data"))).await;
    for user in ["alice", "mallory"] {
        s.hub.db.add_user(user).await.unwrap();
    }
    let (_, alice) = s.hub.db.create_token("alice", &[Scope::Publish], "").await.unwrap();
    let (_, mallory) = s.hub.db.create_token("mallory", &[Scope::Publish], "").await.unwrap();
    let good = package(&tmp.path().join("good"), "hello", "1.0.0", "# Hello\n");
    let evil = package(&tmp.path().join("evil"), "evil", "1.0.0", "# Evil\n");
    let good_hash = s.publish(Some(&alice), "alice/hello", good, false).await.1["content_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let evil_hash = s.publish(Some(&mallory), "mallory/evil", evil, false).await.1["content_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = temper_hub::HubClient::new(&s.url, None).unwrap();
    let store = temper_hub::Store::new(tmp.path().join("store"));
    let reference: temper_hub::EnvRef = "alice/hello".parse().unwrap();
    let locked = |hash: &str, url: String| temper_hub::Lockfile {
        version: 1,
        env: vec![temper_hub::Locked {
            name: "alice/hello".into(),
            version: semver::Version::new(1, 0, 0),
            content_hash: hash.to_owned(),
            url,
        }],
    };
    // Mallory's archive and hash under Alice's name, the URL on the same hub or another host.
    let evil_url = format!("{}/api/v1/envs/mallory/evil/versions/1.0.0/archive", s.url);
    for url in [evil_url, "http://127.0.0.1:1/evil.tar.gz".to_owned()] {
        let mut lock = locked(&evil_hash, url);
        let err = temper_hub::install(&client, &store, &reference, &mut lock, &Limits::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("records alice/hello@1.0.0 with {good_hash}")), "{err}");
        assert!(store.list().unwrap().is_empty(), "nothing installed");
    }
    // The right hash with a URL on another host: the hub's archive is what is fetched.
    let mut lock = locked(&good_hash, "http://127.0.0.1:1/evil.tar.gz".to_owned());
    let installed = temper_hub::install(&client, &store, &reference, &mut lock, &Limits::default())
        .await
        .unwrap();
    assert_eq!(installed.content_hash, good_hash);
    assert!(lock.env[0].url.starts_with(&s.url), "{}", lock.env[0].url);
}

/// Fuzz cases per property: bounded so CI's run stays short; `TEMPER_FUZZ_CASES` runs more.
fn fuzz_cases(default: u32) -> u32 {
    std::env::var("TEMPER_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A raw tar header with every field chosen by the fuzzer except a valid checksum, so the reader
/// gets past it and acts on the fields.
fn fuzzed_header(kind: u8, name: &[u8], size_field: &[u8; 12], prefix: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    h[100..108].copy_from_slice(b"0000644\0");
    h[124..136].copy_from_slice(size_field);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let p = prefix.len().min(155);
    h[345..345 + p].copy_from_slice(&prefix[..p]);
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, raw).unwrap();
    gz.finish().unwrap()
}

/// Nothing may appear next to the destination but the destination itself.
fn assert_contained(root: &Path, dest: &Path) {
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(path, dest, "unpacking left {} behind", path.display());
    }
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// Entry types a tar may name, the ones the reader treats specially among them.
    const KINDS: &[u8] = b"0\x007123456LKxgSDMNV";

    fn entry() -> impl Strategy<Value = (u8, Vec<u8>, [u8; 12], Vec<u8>, Vec<u8>)> {
        let size = prop_oneof![
            (0u64..4096).prop_map(|n| format!("{n:011o}\0")),
            // Huge, malformed or base-256 sizes.
            Just("77777777777\0".to_owned()),
            "[0-7 x\0]{12}".prop_map(|s| s.chars().take(12).collect()),
        ]
        .prop_map(|s| {
            let mut field = [0u8; 12];
            let b = s.as_bytes();
            field[..b.len().min(12)].copy_from_slice(&b[..b.len().min(12)]);
            field
        });
        let name = prop_oneof![
            Just(b"environment.toml".to_vec()),
            Just(b"././@LongLink".to_vec()),
            "[a-z./\\\\]{0,40}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..120),
        ];
        (
            proptest::sample::select(KINDS),
            name,
            size,
            proptest::collection::vec(any::<u8>(), 0..32),
            proptest::collection::vec(any::<u8>(), 0..2048),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: fuzz_cases(256), ..ProptestConfig::default() })]

        /// Random entries: unpacking never panics, and whatever it does stays in its folder.
        #[test]
        fn unpacking_random_entries_stays_contained(
            entries in proptest::collection::vec(entry(), 1..8),
            trailer in any::<bool>(),
        ) {
            let mut raw = Vec::new();
            for (kind, name, size, prefix, data) in &entries {
                raw.extend_from_slice(&fuzzed_header(*kind, name, size, prefix));
                raw.extend_from_slice(data);
                raw.resize(raw.len().next_multiple_of(512), 0);
            }
            if trailer {
                raw.extend_from_slice(&[0u8; 1024]);
            }
            let tmp = tempfile::tempdir().unwrap();
            let dest = tmp.path().join("out");
            let limits = Limits { max_unpacked_bytes: 1 << 20, max_files: 16, ..Limits::default() };
            if unpack(&gzip(&raw), &dest, &limits).is_ok() {
                prop_assert!(dest.join("environment.toml").is_file());
            }
            assert_contained(tmp.path(), &dest);
        }

        /// A valid package with bytes of its tar stream changed: refused or unpacked, never a
        /// panic, never outside its folder, and an unpacked one hashes as it says.
        #[test]
        fn unpacking_a_mutated_package_stays_contained(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let packed = package(&tmp.path().join("src"), "fuzzed", "1.0.0", "# Fuzzed\n");
            let mut raw = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(packed.as_slice()), &mut raw).unwrap();
            for (at, byte) in flips {
                let i = at.index(raw.len());
                raw[i] = byte;
            }
            if let Some(at) = cut {
                raw.truncate(at.index(raw.len()));
            }
            let out = tmp.path().join("work");
            std::fs::create_dir(&out).unwrap();
            let dest = out.join("out");
            if let Ok(u) = unpack(&gzip(&raw), &dest, &Limits::default()) {
                prop_assert_eq!(u.content_hash, temper_envs::package::content_hash(&dest).unwrap());
            }
            assert_contained(&out, &dest);
        }
    }

    /// Mutated and random publish bodies over HTTP: every one is answered with a client error or
    /// accepted, never a server error, and the hub keeps serving.
    #[test]
    fn publish_bodies_never_break_the_hub() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let s = rt.block_on(async {
            let mut cfg = HubConfig::new(tmp.path().join("data"));
            cfg.rate_per_s = 100_000;
            cfg.burst = 100_000;
            let s = start(cfg).await;
            s.hub.db.add_user("fuzz").await.unwrap();
            s
        });
        let (_, token) = rt.block_on(s.hub.db.create_token("fuzz", &[Scope::Publish], "")).unwrap();
        let packed = package(&tmp.path().join("src"), "target", "1.0.0", "# Target\n");
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(packed.as_slice()), &mut raw)
            .unwrap();
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: fuzz_cases(48),
            ..ProptestConfig::default()
        });
        let bodies = prop_oneof![
            proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16).prop_map(
                move |flips| {
                    let mut r = raw.clone();
                    for (at, b) in flips {
                        let i = at.index(r.len());
                        r[i] = b;
                    }
                    gzip(&r)
                }
            ),
            proptest::collection::vec(any::<u8>(), 0..4096),
        ];
        runner
            .run(&bodies, |body| {
                let (status, answer) =
                    rt.block_on(s.publish(Some(&token), "fuzz/target", body, false));
                prop_assert!(!status.is_server_error(), "{status}: {answer}");
                Ok(())
            })
            .unwrap();
        assert_eq!(rt.block_on(s.get(None, "/health")).0, StatusCode::OK);
    }
}

/// Concurrent installs into one project through the library keep every entry of temper.lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_locked_installs_lose_no_lock_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let s = start(HubConfig::new(tmp.path().join("data"))).await;
    s.hub.db.add_user("alice").await.unwrap();
    let (_, alice) = s.hub.db.create_token("alice", &[Scope::Publish], "").await.unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("env-{i}")).collect();
    for n in &names {
        let bytes = package(&tmp.path().join(n), n, "1.0.0", "");
        let (status, body) = s.publish(Some(&alice), &format!("alice/{n}"), bytes, false).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let lock_path = project.join(temper_hub::LOCKFILE);
    let client = temper_hub::HubClient::new(&s.url, None).unwrap();
    let store = temper_hub::Store::new(tmp.path().join("store"));
    let installs = names.iter().map(|n| {
        let (client, store, lock_path) = (client.clone(), store.clone(), lock_path.clone());
        let reference: temper_hub::EnvRef = format!("alice/{n}").parse().unwrap();
        tokio::spawn(async move {
            temper_hub::install_locked(&client, &store, &reference, &lock_path, &Limits::default())
                .await
        })
    });
    for done in futures::future::join_all(installs).await {
        done.unwrap().unwrap();
    }
    let lock = temper_hub::Lockfile::read(&lock_path).unwrap();
    assert_eq!(lock.env.len(), 8, "{lock:?}");
}
