//! `temper env …` and `temper login`: environment packages on a hub, and hub references
//! (`owner/name@req`) wherever an environment is named.

use std::io::{BufRead as _, IsTerminal as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};
use temper_hub::client::DEFAULT_URL;
use temper_hub::lock::{LOCKFILE, Lockfile};
use temper_hub::{EnvRef, HubClient, Limits, Store};

use crate::args::{
    EnvCommand, EnvInfoArgs, EnvInitArgs, EnvInstallArgs, EnvListArgs, EnvPullArgs, EnvPushArgs,
    EnvSearchArgs, EnvYankArgs, HubArgs, LoginArgs,
};
use crate::env_vars;

pub async fn run(command: EnvCommand) -> anyhow::Result<()> {
    match command {
        EnvCommand::Init(args) => init(&args),
        EnvCommand::Push(args) => push(args).await,
        EnvCommand::Install(args) => install(args).await,
        EnvCommand::Pull(args) => pull(args).await,
        EnvCommand::List(args) => list(&args),
        EnvCommand::Search(args) => search(args).await,
        EnvCommand::Info(args) => info(args).await,
        EnvCommand::Yank(args) => yank(args).await,
    }
}

/// temper's own folder (TEMPER_HOME, default ~/.temper).
fn temper_home() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(env_vars::HOME).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).with_context(|| {
        format!("set {} or HOME: where installed environments live", env_vars::HOME)
    })?;
    Ok(PathBuf::from(home).join(".temper"))
}

fn store() -> anyhow::Result<Store> {
    Ok(Store::new(temper_home()?.join("envs")))
}

/// What `temper login` saves.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    url: String,
    token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("url", &self.url).finish_non_exhaustive()
    }
}

fn credentials_path() -> anyhow::Result<PathBuf> {
    Ok(temper_home()?.join("credentials.toml"))
}

fn saved_credentials() -> anyhow::Result<Option<Credentials>> {
    let path = credentials_path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            toml::from_str(&text).with_context(|| format!("{} is malformed", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The hub client: URL from --hub / TEMPER_HUB_URL, else the saved one, else the default; token
/// from TEMPER_HUB_TOKEN, else the saved one when it belongs to the same hub.
fn connect(hub: &HubArgs) -> anyhow::Result<HubClient> {
    let saved = saved_credentials()?;
    let url = hub
        .url
        .clone()
        .or_else(|| saved.as_ref().map(|c| c.url.clone()))
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let token = std::env::var(env_vars::HUB_TOKEN).ok().filter(|t| !t.is_empty()).or_else(|| {
        saved.filter(|c| c.url.trim_end_matches('/') == url.trim_end_matches('/')).map(|c| c.token)
    });
    Ok(HubClient::new(&url, token)?)
}

pub async fn login(args: LoginArgs) -> anyhow::Result<()> {
    let url = args.hub.url.clone().unwrap_or_else(|| DEFAULT_URL.to_owned());
    let stdin = std::io::stdin();
    let mut token = String::new();
    if stdin.is_terminal() {
        let prompt =
            format!("token for {url} (from `temper hub user add`; not shown as you paste it): ");
        read_unechoed(&prompt, &mut token).context("cannot read the token from the terminal")?;
    } else {
        stdin.lock().read_line(&mut token).context("cannot read the token from stdin")?;
    }
    let token = token.trim().to_owned();
    ensure!(!token.is_empty(), "no token on stdin");
    let client = HubClient::new(&url, Some(token.clone()))?;
    let who =
        client.whoami().await.with_context(|| format!("the hub at {url} refused the token"))?;
    let path = credentials_path()?;
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let text = toml::to_string(&Credentials { url: url.clone(), token })?;
    temper_protocol::fsio::write_private(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "logged in to {url} as {} (scopes {}); saved to {}",
        who["user"].as_str().unwrap_or("?"),
        who["scopes"],
        path.display()
    );
    Ok(())
}

/// Shows `prompt` and reads a line from the terminal with echo off (as `ssh` and `sudo` read a
/// password), putting the terminal back as it was. Echo goes off before the prompt shows, so
/// nothing pasted at the prompt is echoed.
fn read_unechoed(prompt: &str, line: &mut String) -> std::io::Result<()> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let before = tcgetattr(&stdin)?;
    let mut quiet = before.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    // Ctrl-C at the prompt must not leave the terminal without echo.
    let restore = before.clone();
    let on_interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &restore);
            eprintln!();
            std::process::exit(130);
        }
    });
    tcsetattr(&stdin, SetArg::TCSANOW, &quiet)?;
    eprint!("{prompt}");
    let read = stdin.lock().read_line(line);
    tcsetattr(&stdin, SetArg::TCSANOW, &before)?;
    on_interrupt.abort();
    read.map(|_| ())
}

/// Installs `reference` (pinning it in `lock_path`) and returns the package folder.
async fn install_one(
    client: &HubClient,
    store: &Store,
    reference: &EnvRef,
    lock_path: &Path,
) -> anyhow::Result<temper_hub::Installed> {
    match temper_hub::install_locked(client, store, reference, lock_path, &Limits::default()).await
    {
        Ok(installed) => Ok(installed),
        Err(e @ temper_hub::HubError::NotFound(_)) => {
            let close = close_name(client, reference).await;
            let hint = close.map(|c| format!("; did you mean {c}?")).unwrap_or_default();
            Err(anyhow::Error::new(e).context(format!("cannot install {reference}{hint}")))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot install {reference}"))),
    }
}

/// The hub environment whose name is closest to a reference that was not found: among the
/// owner's, else among those matching the name.
async fn close_name(client: &HubClient, reference: &EnvRef) -> Option<String> {
    let mut names: Vec<String> = Vec::new();
    for query in [reference.owner.as_str(), reference.name.as_str()] {
        if let Ok(hits) = client.search(query, 100).await {
            names.extend(hits.into_iter().map(|h| format!("{}/{}", h.owner, h.name)));
        }
    }
    // The name itself is no suggestion (it exists: the version asked for does not).
    let wanted = reference.full_name();
    names.retain(|n| *n != wanted);
    names.sort_unstable();
    names.dedup();
    temper_launch::settings::closest(&wanted, &names)
}

fn describe(i: &temper_hub::Installed) -> String {
    format!("{}@{} ({}) in {}", i.name, i.version, &i.content_hash[..12], i.dir.display())
}

/// What `temper eval` and `temper rl` load for an environment named `spec`: a hub reference
/// (`owner/name[@req]`, not an existing path) is installed on first use, pinned in ./temper.lock,
/// and becomes its installed folder; anything else is returned as it is.
pub async fn resolve_spec(spec: &str) -> anyhow::Result<String> {
    if !EnvRef::looks_like(spec) {
        return Ok(spec.to_owned());
    }
    let reference: EnvRef = spec.parse()?;
    let client = connect(&HubArgs { url: std::env::var(env_vars::HUB_URL).ok() })?;
    let installed = install_one(&client, &store()?, &reference, Path::new(LOCKFILE))
        .await
        .with_context(|| {
            format!(
                "`{spec}` is no folder here and no built-in environment, so it was taken as a hub \
                 reference (hub {})",
                client.base_url()
            )
        })?;
    if installed.downloaded {
        eprintln!("installed {}", describe(&installed));
    }
    Ok(installed.dir.to_string_lossy().into_owned())
}

/// Replaces hub references among the config's `[[env]]` ids with their installed folders.
pub async fn resolve_config_envs(
    cfg: &mut temper_orchestrator::OrchestratorConfig,
) -> anyhow::Result<()> {
    for (i, env) in cfg.env.iter_mut().enumerate() {
        env.id = resolve_spec(&env.id).await.with_context(|| format!("env[{i}] ({})", env.id))?;
    }
    Ok(())
}

const INIT_TOML: &str = r#"[environment]
name = "NAME"
version = "0.1.0"
description = "Short arithmetic questions; reward 1 for the exact answer in <answer> tags."
license = "Apache-2.0"
tags = ["single-turn"]

[dataset]
train = "data/train.jsonl"
eval = "data/eval.jsonl"

[env]
kind = "single_turn"
system_prompt = "Think step by step if you like, then give only the final answer as <answer>...</answer>."
# The text inside the last <answer>...</answer> is what the rubric scores.
parser = "xml:answer"

# Reward functions and their weights; see the built-in list in temper's docs, or
# reward = "script" with path = "rewards/score.py" for your own (run in the sandbox).
[[rubric]]
reward = "exact_match"
weight = 1.0
"#;

const INIT_README: &str = r#"# NAME

Short arithmetic questions; the reward is 1 when the reply's `<answer>` holds exactly the
reference answer.

- `environment.toml`: identity, data files, prompt, parser and rubric.
- `data/train.jsonl`, `data/eval.jsonl`: one `{"question": ..., "answer": ...}` per line.

Try it against any OpenAI-compatible server, then publish it:

```sh
temper eval ./NAME -m http://localhost:8000/v1 -n 4
temper env push ./NAME
```
"#;

fn init(args: &EnvInitArgs) -> anyhow::Result<()> {
    ensure!(
        temper_envs::package::valid_name(&args.name),
        "environment name `{}`: 2-64 of a-z, 0-9 and -, starting with a letter or digit",
        args.name
    );
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    ensure!(!dir.exists(), "{} already exists; choose another --dir", dir.display());
    std::fs::create_dir_all(dir.join("data"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let mut train = String::new();
    let mut eval = String::new();
    for (i, (a, b)) in [(3, 4), (12, 30), (7, 8), (25, 17), (9, 11), (40, 2), (6, 6), (13, 29)]
        .into_iter()
        .enumerate()
    {
        let line = format!("{{\"question\": \"What is {a} + {b}?\", \"answer\": \"{}\"}}\n", a + b);
        if i < 6 { train.push_str(&line) } else { eval.push_str(&line) }
    }
    let files = [
        ("environment.toml", INIT_TOML.replace("NAME", &args.name)),
        ("README.md", INIT_README.replace("NAME", &args.name)),
        ("data/train.jsonl", train),
        ("data/eval.jsonl", eval),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // What was written must load.
    temper_envs::package::load_dir(&dir, &temper_envs::LoadOptions::default())
        .with_context(|| format!("the scaffold in {} does not load (a bug)", dir.display()))?;
    println!(
        "created {}: edit environment.toml and data/, try `temper eval {}`, publish with `temper env push {}`",
        dir.display(),
        dir.display(),
        dir.display()
    );
    Ok(())
}

async fn push(args: EnvPushArgs) -> anyhow::Result<()> {
    let dir = &args.path;
    // Validate as temper will load it: manifest, data files, rubric. Publishing runs nothing,
    // so an external environment's command is allowed here (it starts only when an evaluation
    // or a run asks for it, with that command's own consent).
    let load = temper_envs::LoadOptions { allow_external: true, ..Default::default() };
    let env = temper_envs::package::load_dir(dir, &load)
        .with_context(|| format!("{} is not a valid environment package", dir.display()))?;
    let version = semver::Version::parse(&env.info.version).with_context(|| {
        format!("{}: environment.version", dir.join("environment.toml").display())
    })?;
    let client = connect(&args.hub)?;
    ensure!(
        client.has_token(),
        "publishing needs a token: set {} or run `temper login`",
        env_vars::HUB_TOKEN
    );
    let who = client.whoami().await?;
    let owner = who["user"].as_str().context("the hub did not say whose token this is")?.to_owned();
    let packed = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || temper_hub::pack(&dir, &Limits::default())).await??
    };
    let name = env.info.name.clone();
    let bytes = packed.bytes.len();
    let out = client
        .publish(&owner, &name, packed.bytes, args.private)
        .await
        .with_context(|| format!("cannot publish {owner}/{name}@{version}"))?;
    ensure!(
        out.content_hash == packed.content_hash,
        "the hub recorded content hash {} but the package hashes to {}",
        out.content_hash,
        packed.content_hash
    );
    if out.created {
        println!(
            "published {owner}/{name}@{version} ({} files, {bytes} bytes, sha256 {})",
            packed.files.len(),
            out.content_hash
        );
    } else {
        println!(
            "{owner}/{name}@{version} is already published with this content; nothing changed"
        );
    }
    Ok(())
}

async fn install(args: EnvInstallArgs) -> anyhow::Result<()> {
    let client = connect(&args.hub)?;
    let store = store()?;
    let specs: Vec<String> = if args.envs.is_empty() {
        let lock = Lockfile::read(&args.lock)?;
        ensure!(
            !lock.env.is_empty(),
            "nothing to install: name OWNER/NAME[@REQ], or keep a {} with entries here",
            args.lock.display()
        );
        lock.env.iter().map(|l| format!("{}@={}", l.name, l.version)).collect()
    } else {
        args.envs.clone()
    };
    for spec in specs {
        let reference: EnvRef = spec.parse()?;
        let installed = install_one(&client, &store, &reference, &args.lock).await?;
        let how = if installed.downloaded { "installed" } else { "up to date" };
        println!("{how}: {}", describe(&installed));
    }
    Ok(())
}

async fn pull(args: EnvPullArgs) -> anyhow::Result<()> {
    let reference: EnvRef = args.env.parse()?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&reference.name));
    ensure!(!dir.exists(), "{} already exists; choose another --dir", dir.display());
    let client = connect(&args.hub)?;
    let r = temper_hub::install::pull(&client, &reference, &dir, &Limits::default())
        .await
        .with_context(|| format!("cannot pull {reference}"))?;
    println!("pulled {}@{} (sha256 {}) into {}", r.name, r.version, r.content_hash, dir.display());
    Ok(())
}

fn list(args: &EnvListArgs) -> anyhow::Result<()> {
    let store = store()?;
    let lock = Lockfile::read(&args.lock)?;
    let installed = store.list()?;
    if installed.is_empty() {
        println!("nothing installed in {}", store.root().display());
    }
    for i in &installed {
        let pinned = lock
            .get(&i.name)
            .is_some_and(|l| l.version == i.version && l.content_hash == i.content_hash);
        println!(
            "{:<40} {:<10} {}  {}",
            i.name,
            i.version.to_string(),
            &i.content_hash[..12],
            if pinned { "locked" } else { "" }
        );
    }
    for l in &lock.env {
        if !installed.iter().any(|i| i.name == l.name && i.content_hash == l.content_hash) {
            println!(
                "{:<40} {:<10} {}  locked, not installed (`temper env install`)",
                l.name,
                l.version.to_string(),
                &l.content_hash[..12]
            );
        }
    }
    Ok(())
}

async fn search(args: EnvSearchArgs) -> anyhow::Result<()> {
    let client = connect(&args.hub)?;
    let hits = client.search(&args.query, args.limit).await?;
    if hits.is_empty() {
        println!("no environment on {} matches `{}`", client.base_url(), args.query);
    }
    for h in hits {
        println!(
            "{:<40} {:<10} {}{}",
            format!("{}/{}", h.owner, h.name),
            h.latest.as_deref().unwrap_or("(yanked)"),
            h.description,
            if h.private { " [private]" } else { "" }
        );
    }
    Ok(())
}

async fn info(args: EnvInfoArgs) -> anyhow::Result<()> {
    let reference: EnvRef = args.env.parse()?;
    let client = connect(&args.hub)?;
    let l = client.show(&reference.owner, &reference.name, args.limit, 0).await?;
    println!("{}/{}{}", l.env.owner, l.env.name, if l.env.private { " [private]" } else { "" });
    if !l.env.description.is_empty() {
        println!("  {}", l.env.description);
    }
    println!("  latest: {}", l.latest.as_deref().unwrap_or("none (all yanked)"));
    println!("  install: temper env install {}/{}", l.env.owner, l.env.name);
    for v in &l.versions {
        println!(
            "  {:<10} sha256 {}  {} bytes{}",
            v.version.to_string(),
            v.content_hash,
            v.archive_bytes,
            if v.yanked { "  yanked" } else { "" }
        );
        if args.files {
            let row = client.version(&reference.owner, &reference.name, &v.version).await?;
            for f in &row.files {
                println!("      {:<40} {:>9}  {}", f.path, f.bytes, f.sha256);
            }
        }
    }
    if l.total > l.versions.len() {
        println!("  … and {} older versions (--limit N shows more)", l.total - l.versions.len());
    }
    Ok(())
}

async fn yank(args: EnvYankArgs) -> anyhow::Result<()> {
    let reference: EnvRef = args.env.parse()?;
    let temper_hub::Wanted::Exact(version) = &reference.wanted else {
        bail!("{}: name one exact version, OWNER/NAME@X.Y.Z", args.env);
    };
    let client = connect(&args.hub)?;
    client.yank(&reference.owner, &reference.name, version, !args.undo).await?;
    let done = if args.undo { "restored" } else { "yanked" };
    println!("{done} {}/{}@{version}", reference.owner, reference.name);
    Ok(())
}
