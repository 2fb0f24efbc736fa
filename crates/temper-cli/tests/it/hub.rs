//! The hub through the `temper` binary: `temper hub serve` as a process, accounts, `temper env
//! init/push/install/pull/list/search/info/yank`, `temper login`, `temper.lock` pinning and
//! tampering, hub references in `temper eval`, and a server killed in the middle of uploads.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use temper_hub::lock::Lockfile;
use temper_hub::{Limits, pack};

use crate::mock::{Behaviour, Mock};

/// A `temper hub serve` process.
struct HubProc {
    child: Child,
    url: String,
}

impl HubProc {
    fn start(data: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_temper"))
            .args(["hub", "serve", "--addr", "127.0.0.1:0", "--data"])
            .arg(data)
            .env("TEMPER_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start temper hub serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Self { child, url }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HubProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A scratch world: TEMPER_HOME, a project folder, the hub's data.
struct World {
    tmp: tempfile::TempDir,
    url: String,
}

impl World {
    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `temper ARGS` in `cwd` with `home` as TEMPER_HOME and `token` as TEMPER_HUB_TOKEN.
    fn temper(&self, cwd: &str, home: &str, token: Option<&str>, args: &[&str]) -> Output {
        let cwd = self.path(cwd);
        std::fs::create_dir_all(&cwd).expect("cwd");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_temper"));
        cmd.args(args)
            .current_dir(&cwd)
            .env("TEMPER_HOME", self.path(home))
            .env("TEMPER_HUB_URL", &self.url)
            .env("TEMPER_LOG", "error")
            .env_remove("OPENAI_API_KEY")
            .env_remove("TEMPER_HUB_TOKEN");
        if let Some(t) = token {
            cmd.env("TEMPER_HUB_TOKEN", t);
        }
        cmd.output().expect("run temper")
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "temper failed: {}", text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn fails(o: &Output, needle: &str) {
    assert!(!o.status.success(), "expected a failure: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "stderr lacks {needle:?}: {}", text(o));
}

fn user_add(data: &Path, name: &str, scopes: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["hub", "user", "add", name, "--scopes", scopes, "--data"])
        .arg(data)
        .output()
        .expect("user add");
    let token = ok(&out).trim().to_owned();
    assert!(token.starts_with("thub_") && token.len() == 69, "{token}");
    token
}

fn read_lock(path: &Path) -> Lockfile {
    Lockfile::read(path).expect("lockfile")
}

fn eval_meta(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("metadata.json")).expect("metadata"))
        .expect("json")
}

#[test]
fn push_install_lock_yank_private_and_login_through_the_cli() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("hub");
    let hub = HubProc::start(&data);
    let w = World { tmp, url: hub.url.clone() };
    let alice = user_add(&data, "alice", "publish");
    let bob = user_add(&data, "bob", "publish");
    let alice_read = user_add(&data, "alice", "read");
    let a = Some(alice.as_str());

    // A scaffold evaluates as it is: the mock answers each sum, and every rollout scores 1.
    ok(&w.temper("work", "home", None, &["env", "init", "greet"]));
    let mock = Mock::start(Behaviour::AnswerSum, Duration::ZERO);
    let out = w.path("evals/scaffold");
    let args =
        ["eval", "greet", "-m", &mock.url, "-n", "2", "-r", "2", "-o", out.to_str().unwrap()];
    ok(&w.temper("work", "home", None, &args));
    let meta = eval_meta(&out);
    assert_eq!(meta["reward"]["mean"], 1.0, "{meta}");
    assert_eq!(meta["counts"]["rollouts"], 4, "{meta}");
    fails(&w.temper("work", "home", None, &["env", "init", "greet"]), "already exists");
    fails(&w.temper("work", "home", None, &["env", "init", "Bad_Name"]), "environment name");

    // Push: anonymous is refused; then published; the same again changes nothing; other content
    // under the same version is refused; a new version publishes.
    fails(&w.temper("work", "home", None, &["env", "push", "greet"]), "needs a token");
    let pushed = ok(&w.temper("work", "home", a, &["env", "push", "greet"]));
    assert!(pushed.contains("published alice/greet@0.1.0"), "{pushed}");
    let hash_010 = temper_envs::package::content_hash(&w.path("work/greet")).expect("hash");
    assert!(pushed.contains(&hash_010), "{pushed}");
    let again = ok(&w.temper("work", "home", a, &["env", "push", "greet"]));
    assert!(again.contains("nothing changed"), "{again}");
    let readme = w.path("work/greet/README.md");
    std::fs::write(&readme, "# greet\n\nchanged\n").expect("write");
    fails(&w.temper("work", "home", a, &["env", "push", "greet"]), "versions are immutable");
    let toml_path = w.path("work/greet/environment.toml");
    let manifest = std::fs::read_to_string(&toml_path).expect("toml");
    std::fs::write(&toml_path, manifest.replace("0.1.0", "0.2.0")).expect("write");
    ok(&w.temper("work", "home", a, &["env", "push", "greet"]));
    let hash_020 = temper_envs::package::content_hash(&w.path("work/greet")).expect("hash");
    assert_ne!(hash_010, hash_020);
    // A Python (external) environment publishes: pushing runs nothing, so it needs no consent.
    let guess =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments/guess-number");
    let pushed = ok(&w.temper("work", "home", a, &["env", "push", guess.to_str().unwrap()]));
    assert!(pushed.contains("published alice/guess-number@"), "{pushed}");
    // A slip of the name gets the close one.
    let miss = w.temper("p0", "home", None, &["env", "install", "alice/gret"]);
    assert_eq!(miss.status.code(), Some(1));
    let err = String::from_utf8_lossy(&miss.stderr);
    assert!(
        err.starts_with("error: cannot install alice/gret; did you mean alice/greet?"),
        "{err}"
    );
    assert!(!w.path("p0/temper.lock").exists(), "a failed install wrote the lock");
    // A version that does not exist suggests no other name.
    let none = w.temper("p0", "home", None, &["env", "install", "alice/greet@^9"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&none.stderr).contains("did you mean"), "{}", text(&none));
    // A token made where no hub keeps its data would be rejected by the running hub: refused.
    let stray = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["hub", "user", "add", "carol"])
        .current_dir(w.path("p0"))
        .output()
        .expect("user add");
    assert_eq!(stray.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&stray.stderr)
            .starts_with("error: hub-data/hub.db does not exist: pass --data DIR"),
        "{}",
        text(&stray)
    );
    assert!(!w.path("p0/hub-data").exists() && stray.stdout.is_empty());

    // Install by requirement: the lockfile pins version, hash and URL.
    let got = ok(&w.temper("p1", "home", None, &["env", "install", "alice/greet@^0.1"]));
    assert!(got.contains("installed: alice/greet@0.1.0"), "{got}");
    let lock = read_lock(&w.path("p1/temper.lock"));
    assert_eq!(lock.env.len(), 1);
    let l = &lock.env[0];
    assert_eq!((l.name.as_str(), l.version.to_string()), ("alice/greet", "0.1.0".into()));
    assert_eq!(l.content_hash, hash_010);
    assert!(l.url.starts_with(&w.url) && l.url.ends_with("/versions/0.1.0/archive"), "{}", l.url);
    let dir = w.path("home/envs/alice/greet").join(format!("0.1.0-{hash_010}"));
    assert_eq!(temper_envs::package::content_hash(&dir).expect("hash"), hash_010);
    let again = ok(&w.temper("p1", "home", None, &["env", "install", "alice/greet@^0.1"]));
    assert!(again.contains("up to date"), "{again}");

    // A hub reference in `temper eval` honours the lock: 0.1.0 although 0.2.0 is the latest.
    let out = w.path("evals/locked");
    let args =
        ["eval", "alice/greet", "-m", &mock.url, "-n", "1", "-r", "1", "-o", out.to_str().unwrap()];
    ok(&w.temper("p1", "home", None, &args));
    assert_eq!(eval_meta(&out)["env"]["version"], "0.1.0");
    assert_eq!(eval_meta(&out)["env"]["content_hash"], hash_010.as_str());
    // Without a lock it installs the latest on first use and writes the lock.
    let out = w.path("evals/fresh");
    let args =
        ["eval", "alice/greet", "-m", &mock.url, "-n", "1", "-r", "1", "-o", out.to_str().unwrap()];
    ok(&w.temper("p2", "home", None, &args));
    assert_eq!(eval_meta(&out)["env"]["version"], "0.2.0");
    assert_eq!(read_lock(&w.path("p2/temper.lock")).env[0].content_hash, hash_020);

    // Yank hides 0.2.0 from resolution; an exact pin still installs it.
    fails(&w.temper("p3", "home", Some(&bob), &["env", "yank", "alice/greet@0.2.0"]), "forbidden");
    ok(&w.temper("p3", "home", a, &["env", "yank", "alice/greet@0.2.0"]));
    let got = ok(&w.temper("p3", "home", None, &["env", "install", "alice/greet"]));
    assert!(got.contains("alice/greet@0.1.0"), "{got}");
    std::fs::remove_file(w.path("p3/temper.lock")).expect("rm");
    let got = ok(&w.temper("p3", "home", None, &["env", "install", "alice/greet@0.2.0"]));
    assert!(got.contains("alice/greet@0.2.0"), "{got}");
    let info = ok(&w.temper("p3", "home", None, &["env", "info", "alice/greet", "--files"]));
    assert!(info.contains("latest: 0.1.0") && info.contains("yanked"), "{info}");
    assert!(info.contains(&hash_010) && info.contains("data/train.jsonl"), "{info}");

    // A lockfile whose hash differs from the hub's content is refused, and nothing installed.
    std::fs::create_dir_all(w.path("p4")).expect("mkdir");
    let mut lock = read_lock(&w.path("p1/temper.lock"));
    lock.env[0].content_hash = hash_020.clone();
    lock.write(&w.path("p4/temper.lock")).expect("write");
    fails(&w.temper("p4", "home2", None, &["env", "install"]), "content hash mismatch");
    assert!(!w.path("home2/envs/alice/greet").join(format!("0.1.0-{hash_020}")).exists());
    // An installed copy changed after install is refused too.
    std::fs::write(dir.join("README.md"), "tampered").expect("write");
    fails(&w.temper("p1", "home", None, &["env", "install"]), "changed after it was installed");

    // Pull: the sources, hash-checked, into a folder.
    ok(&w.temper("p5", "home", None, &["env", "pull", "alice/greet@0.1.0"]));
    assert_eq!(temper_envs::package::content_hash(&w.path("p5/greet")).expect("hash"), hash_010);
    let listed = ok(&w.temper("p2", "home", None, &["env", "list"]));
    assert!(listed.contains("alice/greet") && listed.contains("locked"), "{listed}");

    // `temper rl --check` installs a hub environment named in [[env]] and pins it.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/reverse-text");
    let rl = std::fs::read_to_string(example.join("rl.toml"))
        .expect("example")
        .replace("id = \"reverse-text\"", "id = \"alice/greet\"")
        .replace(
            "sft = \"sft-warmup.toml\"",
            &format!("sft = {:?}", example.join("sft-warmup.toml")),
        );
    std::fs::create_dir_all(w.path("p6")).expect("mkdir");
    std::fs::write(w.path("p6/rl.toml"), rl).expect("write");
    let checked = ok(&w.temper("p6", "home5", None, &["rl", "rl.toml", "--check"]));
    assert!(checked.contains("environments greet@0.1.0"), "{checked}");
    assert_eq!(read_lock(&w.path("p6/temper.lock")).env[0].content_hash, hash_010);

    // Private: bob's environment is invisible to alice and to anonymous readers.
    ok(&w.temper("bob", "home", None, &["env", "init", "secret"]));
    ok(&w.temper("bob", "home", Some(&bob), &["env", "push", "secret", "--private"]));
    fails(&w.temper("x", "home", a, &["env", "info", "bob/secret"]), "not found");
    fails(&w.temper("x", "home", None, &["env", "install", "bob/secret"]), "not found");
    let found = ok(&w.temper("x", "home", None, &["env", "search", "secret"]));
    assert!(found.contains("no environment"), "{found}");
    let found = ok(&w.temper("x", "home", Some(&bob), &["env", "search", "secret"]));
    assert!(found.contains("bob/secret") && found.contains("[private]"), "{found}");
    ok(&w.temper("x", "home3", Some(&bob), &["env", "install", "bob/secret"]));
    // A read token cannot publish.
    fails(&w.temper("work", "home", Some(&alice_read), &["env", "push", "greet"]), "scope");

    // Login saves the token (mode 0600) and later commands use it.
    let mut login = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["login", "--hub", &w.url])
        .env("TEMPER_HOME", w.path("home4"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("login");
    std::io::Write::write_all(login.stdin.as_mut().expect("stdin"), format!("{bob}\n").as_bytes())
        .expect("write");
    let said = ok(&login.wait_with_output().expect("login"));
    assert!(said.contains("as bob"), "{said}");
    let cred = w.path("home4/credentials.toml");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&cred).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let found = ok(&w.temper("x", "home4", None, &["env", "search", "secret"]));
    assert!(found.contains("bob/secret"), "{found}");
    // At a terminal (a pseudo-terminal here), the pasted token is not echoed.
    let at_terminal = Command::new("python3")
        .args(["-c", PTY_LOGIN, env!("CARGO_BIN_EXE_temper"), "login", "--hub", &w.url])
        .env("TEMPER_HOME", w.path("home5"))
        .env("TOKEN", &bob)
        .output()
        .expect("python3 with pty");
    let screen = String::from_utf8_lossy(&at_terminal.stdout);
    assert!(
        at_terminal.status.success(),
        "{screen} {}",
        String::from_utf8_lossy(&at_terminal.stderr)
    );
    assert!(screen.contains("not shown as you paste it") && screen.contains("as bob"), "{screen}");
    assert!(!screen.contains(&bob), "the token was echoed: {screen}");
    drop(hub);
}

/// Runs argv[1:] in a pseudo-terminal, types $TOKEN and Enter at the prompt, prints what the
/// terminal showed.
const PTY_LOGIN: &str = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
seen = b""
while b"paste it" not in seen:
    seen += os.read(fd, 1024)
os.write(fd, (os.environ["TOKEN"] + "\n").encode())
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(0 if os.waitstatus_to_exitcode(status) == 0 else 1)
"#;

/// A package of `bytes` random bytes of data, packed.
fn package(dir: &Path, name: &str, version: &str, bytes: usize, seed: u64) -> Vec<u8> {
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::write(
        dir.join("environment.toml"),
        format!(
            "[environment]\nname = \"{name}\"\nversion = \"{version}\"\n\n[dataset]\ntrain = \"data/train.jsonl\"\n\n[env]\nkind = \"single_turn\"\n\n[[rubric]]\nreward = \"exact_match\"\nweight = 1.0\n"
        ),
    )
    .expect("write");
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut data = String::new();
    while data.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.push_str(&format!("{{\"question\": \"{x:x}\", \"answer\": \"{x:x}\"}}\n"));
    }
    std::fs::write(dir.join("data/train.jsonl"), data).expect("write");
    pack(dir, &Limits::default()).expect("pack").bytes
}

#[test]
#[expect(clippy::print_stderr, reason = "where the kills landed is worth seeing in the log")]
fn killing_the_server_mid_upload_leaves_no_half_published_version() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("hub");
    let token = user_add(&data, "carol", "publish");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("rt");
    let http = reqwest::Client::new();
    let publish = |url: &str, name: &str, body: Vec<u8>| {
        http.post(format!("{url}/api/v1/envs/carol/{name}/versions"))
            .bearer_auth(&token)
            .body(body)
            .send()
    };
    const VERSIONS: u64 = 8;
    let archives = |name: &str| -> Vec<Vec<u8>> {
        (0..VERSIONS)
            .map(|i| {
                let dir = tmp.path().join("src").join(name).join(i.to_string());
                package(&dir, name, &format!("1.0.{i}"), 1 << 20, i)
            })
            .collect()
    };

    // 1. A body cut off half-way: the server dies while it is still receiving.
    let cut = archives("cut");
    let mut hub = HubProc::start(&data);
    {
        use std::io::Write as _;
        let addr = hub.url.trim_start_matches("http://").to_owned();
        let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
        let a = &cut[0];
        write!(
            conn,
            "POST /api/v1/envs/carol/cut/versions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n",
            a.len()
        )
        .expect("headers");
        conn.write_all(&a[..a.len() / 2]).expect("half the body");
        std::thread::sleep(Duration::from_millis(300));
        hub.kill();
    }
    let restarted = HubProc::start(&data);
    assert_eq!(check_consistent(&rt, &restarted.url, "cut", &cut, &data), 0);
    drop(restarted);

    // 2. Uploads of 8 versions at once, the server killed at a fraction of the time they take
    // undisturbed: each version is either fully published (row, archive and hash agree) or
    // absent.
    let all_in = |name: &str, files: &[Vec<u8>]| {
        let hub = HubProc::start(&data);
        let t = std::time::Instant::now();
        rt.block_on(async {
            let sends: Vec<_> =
                files.iter().map(|a| tokio::spawn(publish(&hub.url, name, a.clone()))).collect();
            for s in sends {
                assert_eq!(s.await.expect("join").expect("publish").status(), 201);
            }
        });
        t.elapsed()
    };
    let full = all_in("calib", &archives("calib"));
    let mut partial = 0;
    for (round, fraction) in [0.2, 0.4, 0.6, 0.8, 0.95].into_iter().enumerate() {
        let name = format!("round{round}");
        let files = archives(&name);
        let mut hub = HubProc::start(&data);
        rt.block_on(async {
            let sends: Vec<_> =
                files.iter().map(|a| tokio::spawn(publish(&hub.url, &name, a.clone()))).collect();
            tokio::time::sleep(full.mul_f64(fraction)).await;
            hub.kill();
            for s in sends {
                let _ = s.await;
            }
        });
        let hub = HubProc::start(&data);
        let published = check_consistent(&rt, &hub.url, &name, &files, &data);
        partial += usize::from(published > 0 && published < VERSIONS as usize);
        eprintln!("killed at {fraction} of {full:?}: {published} of {VERSIONS} versions published");
        // Every version still publishes afterwards (or is there with the same content).
        rt.block_on(async {
            for (i, a) in files.iter().enumerate() {
                let r = publish(&hub.url, &name, a.clone()).await.expect("publish");
                assert!(r.status() == 201 || r.status() == 200, "1.0.{i}: {}", r.status());
            }
        });
        assert_eq!(check_consistent(&rt, &hub.url, &name, &files, &data), VERSIONS as usize);
    }
    eprintln!("{partial} of 5 kills landed while some versions were published and others not");
}

/// Every version the hub lists downloads with the content hash it records, which is that of the
/// archive uploaded for it; returns how many there are.
fn check_consistent(
    rt: &tokio::runtime::Runtime,
    url: &str,
    name: &str,
    archives: &[Vec<u8>],
    data: &Path,
) -> usize {
    let client = temper_hub::HubClient::new(url, None).expect("client");
    rt.block_on(async {
        let listing = match client.show("carol", name, 200, 0).await {
            Ok(l) => l,
            Err(temper_hub::HubError::NotFound(_)) => return 0,
            Err(e) => panic!("show: {e}"),
        };
        for v in &listing.versions {
            let i: usize = v.version.patch as usize;
            let dest = data.with_file_name(format!("check-{name}-{}-{}", v.version, rand_suffix()));
            let bytes = client
                .download(
                    &format!("{url}/api/v1/envs/carol/{name}/versions/{}/archive", v.version),
                    64 << 20,
                )
                .await
                .expect("a listed version downloads");
            assert_eq!(bytes, archives[i], "{}: the stored archive is the uploaded one", v.version);
            temper_hub::unpack_verified(&bytes, &dest, &Limits::default(), &v.content_hash)
                .expect("the archive holds the recorded content");
        }
        listing.versions.len()
    })
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn the_bench_counts_every_publish_and_install() {
    let tmp = tempfile::tempdir().expect("tmp");
    let json = tmp.path().join("hub.json");
    let out = Command::new(env!("CARGO_BIN_EXE_temper"))
        .args(["hub", "bench", "--clients", "3", "--publishes", "2", "--installs", "4"])
        .args(["--package-bytes", "4096", "--output"])
        .arg(&json)
        .output()
        .expect("bench");
    let table = ok(&out);
    assert!(table.contains("publish") && table.contains("p99 ms"), "{table}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("json");
    let phases = report["phases"].as_array().expect("phases");
    assert_eq!((phases[0]["phase"].as_str(), phases[0]["ok"].as_u64()), (Some("publish"), Some(6)));
    assert_eq!(
        (phases[1]["phase"].as_str(), phases[1]["ok"].as_u64()),
        (Some("install"), Some(12))
    );
    for p in phases {
        assert_eq!(p["errors"], 0, "{p}");
        let (p50, p99) = (p["p50_ms"].as_f64().expect("p50"), p["p99_ms"].as_f64().expect("p99"));
        assert!(p50 > 0.0 && p99 >= p50, "{p}");
        assert!(p["per_s"].as_f64().expect("rate") > 0.0, "{p}");
    }
}

#[test]
fn concurrent_installs_share_the_store_and_the_lockfile() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("hub");
    let hub = HubProc::start(&data);
    let w = World { tmp, url: hub.url.clone() };
    let token = user_add(&data, "dave", "publish");
    let names = ["aa", "bb", "cc", "dd"];
    for n in names {
        ok(&w.temper("src", "home", None, &["env", "init", n]));
        ok(&w.temper("src", "home", Some(&token), &["env", "push", n]));
    }
    // Each environment twice, all at once, into one project and one store.
    let spawn = |spec: String| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_temper"));
        cmd.args(["env", "install", &spec])
            .current_dir(w.path("proj"))
            .env("TEMPER_HOME", w.path("home"))
            .env("TEMPER_HUB_URL", &w.url)
            .env("TEMPER_LOG", "error")
            .env_remove("TEMPER_HUB_TOKEN");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn")
    };
    std::fs::create_dir_all(w.path("proj")).expect("mkdir");
    let children: Vec<Child> =
        names.iter().chain(names.iter()).map(|n| spawn(format!("dave/{n}"))).collect();
    for c in children {
        ok(&c.wait_with_output().expect("install"));
    }
    let lock = read_lock(&w.path("proj/temper.lock"));
    let locked: Vec<&str> = lock.env.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(locked, ["dave/aa", "dave/bb", "dave/cc", "dave/dd"]);
    for l in &lock.env {
        let dir =
            w.path("home/envs").join(&l.name).join(format!("{}-{}", l.version, l.content_hash));
        assert_eq!(temper_envs::package::content_hash(&dir).expect("installed"), l.content_hash);
    }
    let leftovers: Vec<_> = std::fs::read_dir(w.path("proj"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, ["temper.lock"], "no temporary files left in the project");
    drop(hub);
}

/// The four reference packages publish to a local hub, and a `temper rl` run (a tiny model,
/// 6 steps) installs all four from it and trains on them with no reward error and no dropped
/// token trace.
#[test]
fn reference_packages_publish_and_rl_installs_and_runs_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("hub");
    let hub = HubProc::start(&data);
    let w = World { tmp, url: hub.url.clone() };
    let alice = user_add(&data, "alice", "publish");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/environments");
    let names = ["logic", "science-mcq", "swe-lite", "research-lite"];
    for name in names {
        let dir = examples.join(name);
        let pushed =
            ok(&w.temper("work", "home", Some(&alice), &["env", "push", dir.to_str().unwrap()]));
        assert!(pushed.contains(&format!("published alice/{name}@0.1.0")), "{pushed}");
    }

    let work = w.path("work");
    let base = std::fs::read_to_string(crate::rl::rl_config(&work, 6)).expect("config");
    let sft = std::fs::read_to_string(work.join("sft.toml")).expect("sft");
    // Long enough for a repository's issue and the tools' schemas.
    std::fs::write(
        work.join("sft.toml"),
        sft.replace("max_positions = 256", "max_positions = 8192"),
    )
    .expect("sft");
    let envs: String = names.iter().map(|n| format!("[[env]]\nid = \"alice/{n}\"\n")).collect();
    let text = base
        .replace("[[env]]\nid = \"reverse-text\"\nsystem_prompt = \"\"\n", &envs)
        .replace("seq_len = 256", "seq_len = 8192")
        .replace("batch_size = 8", "batch_size = 16");
    assert!(text.contains("alice/swe-lite"), "{text}");
    let config = work.join("reference.toml");
    std::fs::write(&config, text).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_temper"))
        .arg("rl")
        .arg(&config)
        .current_dir(&work)
        .env("TEMPER_HOME", w.path("home"))
        .env("TEMPER_HUB_URL", &w.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("temper rl");
    let (status, err) = crate::rl::wait(&mut child, Duration::from_secs(400));
    assert!(status.success(), "{err}");

    // Installed from the hub and pinned.
    let lock = read_lock(&work.join("temper.lock"));
    let locked = format!("{lock:?}");
    for name in names {
        assert!(locked.contains(&format!("alice/{name}")), "{locked}");
    }
    let lines = crate::rl::metrics(&work.join("run"));
    let steps: Vec<&Value> =
        lines.iter().filter(|l| l["role"] == "orchestrator" && l["step"].is_u64()).collect();
    assert!(steps.len() >= 6, "{} orchestrator steps", steps.len());
    let mut seen = std::collections::BTreeSet::new();
    for s in &steps {
        assert_eq!(s["errors/count"].as_f64(), Some(0.0), "{s}");
        assert_eq!(s["rollouts/dropped_trace"].as_f64(), Some(0.0), "{s}");
        for name in names {
            if s.get(format!("reward/{name}/mean")).is_some_and(Value::is_number) {
                seen.insert(name);
            }
        }
    }
    assert_eq!(seen.len(), 4, "rollouts of every package: {seen:?}");
}
