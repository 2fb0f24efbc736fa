//! `temper hub bench`: publishes/s, installs/s and latency percentiles of the hub with many
//! concurrent clients. Prints a table and writes JSON.
//!
//! The server runs in this process on a fresh data folder (SQLite) or on `--database`, and the
//! clients talk to it over loopback HTTP with the same client `temper env` uses. Packages are
//! packed before the clock starts: the numbers are the hub's (upload, check, commit; resolve,
//! download, verify, unpack), not the packer's.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use temper_hub::lock::Lockfile;
use temper_hub::server::{Hub, HubConfig};
use temper_hub::{EnvRef, HubClient, Limits, Store};

use crate::HubBenchArgs;

/// Each task's per-operation latencies in ms, or why an operation failed.
type Outcomes = Vec<Result<f64, String>>;

/// Waits for every task; the latencies of what succeeded, and how many failed.
async fn collect(
    what: &str,
    mut tasks: tokio::task::JoinSet<Outcomes>,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let (mut ms, mut errors) = (Vec::new(), 0);
    while let Some(done) = tasks.join_next().await {
        for r in done? {
            match r {
                Ok(t) => ms.push(t),
                Err(e) => {
                    errors += 1;
                    tracing::warn!("{what} failed: {e}");
                }
            }
        }
    }
    Ok((ms, errors))
}

/// One phase's numbers.
fn phase(name: &str, mut ms: Vec<f64>, errors: usize, wall_s: f64) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "phase": name,
        "ok": ms.len(),
        "errors": errors,
        "wall_s": wall_s,
        "per_s": ms.len() as f64 / wall_s,
        "p50_ms": crate::report::percentile(&ms, 0.5),
        "p90_ms": crate::report::percentile(&ms, 0.9),
        "p99_ms": crate::report::percentile(&ms, 0.99),
        "max_ms": ms.last().copied().unwrap_or(f64::NAN),
    })
}

/// Writes and packs `name@1.0.V` with `bytes` of random data.
fn make_package(
    dir: &Path,
    name: &str,
    v: usize,
    bytes: usize,
    seed: u64,
) -> anyhow::Result<Vec<u8>> {
    std::fs::create_dir_all(dir.join("data"))?;
    std::fs::write(
        dir.join("environment.toml"),
        format!(
            "[environment]\nname = \"{name}\"\nversion = \"1.0.{v}\"\ndescription = \"hub bench package\"\n\n[dataset]\ntrain = \"data/train.jsonl\"\n\n[env]\nkind = \"single_turn\"\nparser = \"raw\"\n\n[[rubric]]\nreward = \"exact_match\"\nweight = 1.0\n"
        ),
    )?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut data = String::with_capacity(bytes + 100);
    while data.len() < bytes {
        let q: String = (0..48).map(|_| char::from(b'a' + rng.random_range(0..26u8))).collect();
        data.push_str(&format!("{{\"question\": \"{q}\", \"answer\": \"{}\"}}\n", &q[..8]));
    }
    std::fs::write(dir.join("data/train.jsonl"), data)?;
    std::fs::write(dir.join("README.md"), format!("# {name}\n\nVersion 1.0.{v}.\n"))?;
    Ok(temper_hub::pack(dir, &Limits::default())?.bytes)
}

pub async fn run(args: HubBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.clients >= 2, "--clients must be at least 2");
    anyhow::ensure!(args.publishes >= 1, "--publishes must be at least 1");
    let work = tempfile::tempdir().context("cannot make a scratch folder")?;
    let mut cfg = HubConfig::new(work.path().join("hub"));
    cfg.database = args.database.clone();
    // Every client comes from 127.0.0.1: the per-address limit would measure itself.
    cfg.rate_per_s = 1_000_000;
    cfg.burst = 1_000_000;
    let hub = Hub::open(cfg).await.context("cannot open the hub")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(temper_hub::server::serve(hub.clone(), listener, async move {
        let _ = stop_rx.await;
    }));

    // Users: a fresh prefix, so a shared Postgres database can be benchmarked more than once.
    let run_id: String = {
        let mut rng = rand::rng();
        (0..6).map(|_| char::from(b'a' + rng.random_range(0..26u8))).collect()
    };
    eprintln!(
        "preparing {} clients × {} versions of {} KiB packages…",
        args.clients,
        args.publishes,
        args.package_bytes >> 10
    );
    let mut clients = Vec::with_capacity(args.clients);
    for c in 0..args.clients {
        let user = format!("b{run_id}-{c}");
        hub.db.add_user(&user).await?;
        let (_, token) =
            hub.db.create_token(&user, &[temper_hub::db::Scope::Publish], "bench").await?;
        let mut archives = Vec::with_capacity(args.publishes);
        for v in 0..args.publishes {
            let dir = work.path().join("src").join(&user).join(v.to_string());
            archives.push(make_package(
                &dir,
                "bench-env",
                v,
                args.package_bytes,
                (c * 1000 + v) as u64,
            )?);
        }
        clients.push((user, HubClient::new(&url, Some(token))?, archives));
    }
    let archive_bytes = clients[0].2[0].len();

    // Publishes: every client pushes its versions one after another, all clients at once.
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (user, client, archives) in clients.clone() {
        tasks.spawn(async move {
            let mut out = Vec::new();
            for a in archives {
                let t = Instant::now();
                let r = client.publish(&user, "bench-env", a, false).await;
                out.push(match r {
                    Ok(o) if o.created => Ok(t.elapsed().as_secs_f64() * 1e3),
                    Ok(_) => Err("the version existed already".to_owned()),
                    Err(e) => Err(e.to_string()),
                });
            }
            out
        });
    }
    let (ms, errors) = collect("publish", tasks).await?;
    let publishes = phase("publish", ms, errors, t0.elapsed().as_secs_f64());

    // Installs: each client installs other clients' versions into fresh stores (so every
    // install downloads, verifies and unpacks).
    let users: Arc<Vec<String>> = Arc::new(clients.iter().map(|c| c.0.clone()).collect());
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, (_, client, _)) in clients.iter().cloned().enumerate() {
        let users = users.clone();
        let root = work.path().join("stores").join(c.to_string());
        let (installs, versions) = (args.installs, args.publishes);
        tasks.spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(c as u64);
            let mut out = Vec::new();
            for i in 0..installs {
                let other = &users[(c + 1 + rng.random_range(0..users.len() - 1)) % users.len()];
                let v = rng.random_range(0..versions);
                let reference: EnvRef = match format!("{other}/bench-env@1.0.{v}").parse() {
                    Ok(r) => r,
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        continue;
                    }
                };
                let store = Store::new(root.join(i.to_string()));
                let t = Instant::now();
                let r = temper_hub::install(
                    &client,
                    &store,
                    &reference,
                    &mut Lockfile::default(),
                    &Limits::default(),
                )
                .await;
                out.push(r.map(|_| t.elapsed().as_secs_f64() * 1e3).map_err(|e| e.to_string()));
            }
            out
        });
    }
    let (ms, errors) = collect("install", tasks).await?;
    let installs = phase("install", ms, errors, t0.elapsed().as_secs_f64());
    let _ = stop_tx.send(());
    let _ = server.await;

    let backend = if hub.db.is_sqlite() { "sqlite" } else { "postgres" };
    println!(
        "hub bench: {} clients, {backend}, archives {} KiB ({} KiB of data), server in this process on {} CPUs",
        args.clients,
        archive_bytes >> 10,
        args.package_bytes >> 10,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "{:<8} {:>6} {:>6} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "phase", "ok", "errors", "ops/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    for p in [&publishes, &installs] {
        println!(
            "{:<8} {:>6} {:>6} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            p["phase"].as_str().unwrap_or("?"),
            p["ok"],
            p["errors"],
            p["per_s"].as_f64().unwrap_or(f64::NAN),
            p["p50_ms"].as_f64().unwrap_or(f64::NAN),
            p["p90_ms"].as_f64().unwrap_or(f64::NAN),
            p["p99_ms"].as_f64().unwrap_or(f64::NAN),
            p["max_ms"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let report = json!({
        "clients": args.clients,
        "publishes_per_client": args.publishes,
        "installs_per_client": args.installs,
        "package_bytes": args.package_bytes,
        "archive_bytes": archive_bytes,
        "backend": backend,
        "cpus": std::thread::available_parallelism().map_or(0, usize::from),
        "phases": [publishes, installs],
    });
    crate::report::write(&args.output, &report)?;
    let failed = report["phases"].as_array().is_some_and(|p| p.iter().any(|p| p["errors"] != 0));
    anyhow::ensure!(!failed, "some operations failed (see above)");
    Ok(())
}
