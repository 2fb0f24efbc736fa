//! `temper sandbox bench`: start-up latency and throughput of the sandbox, side by side with
//! bubblewrap (`bwrap`) on the same workloads, in one run. Prints a table and writes JSON.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use temper_sandbox::{Sandbox, SandboxConfig, Slot};

use crate::SandboxBenchArgs;
use crate::report::percentile;

const PYTHON: &str = "/usr/bin/python3";
/// Where the benchmark's own programs are bound read-only inside every sandbox.
const BENCH_DIR: &str = "/opt/temper-bench";
/// The trivial program: `int main(void) { return 0; }`, compiled static on the host.
const TRIVIAL: &str = "/opt/temper-bench/trivial";

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({"p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99), "n": ms.len()})
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Builds the trivial program on the host (static, so its start costs no dynamic linking).
fn build_trivial(dir: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let src = dir.join("trivial.c");
    std::fs::write(&src, "int main(void) { return 0; }\n")?;
    let status = Command::new("gcc")
        .args(["-O2", "-static", "-o"])
        .arg(dir.join("trivial"))
        .arg(&src)
        .status()?;
    anyhow::ensure!(status.success(), "gcc could not build the trivial program");
    Ok(std::fs::read(dir.join("trivial"))?)
}

/// The trivial program is bound in from the host, so nothing needs staging.
async fn stage(_slot: &Slot, _trivial: &[u8]) -> anyhow::Result<()> {
    Ok(())
}

/// One exec on a slot, checked to have exited 0; `warm_next` when another exec follows in the
/// slot without a reset (as in a session).
async fn exec_ok(
    sb: &Sandbox,
    slot: &Slot,
    command: &[&str],
    warm_next: bool,
) -> anyhow::Result<()> {
    let mut exec = sb.exec_request(argv(command), 10_000);
    exec.warm_next = warm_next;
    let out = slot.exec(exec, Vec::new(), Duration::from_secs(10), 1 << 16).await?;
    anyhow::ensure!(out.code == Some(0), "{command:?} did not exit 0: {out:?}");
    Ok(())
}

/// Latency of `command` on slots that are already built (warm) or built on the spot (cold),
/// measured on a quiet machine: the pool is full and nothing is being reset or destroyed.
async fn latency(
    sb: &Sandbox,
    trivial: &[u8],
    command: &[&str],
    runs: usize,
    warm: bool,
) -> anyhow::Result<Value> {
    let mut ms = Vec::with_capacity(runs);
    let mut used = Vec::with_capacity(runs);
    if warm {
        let mut slots = Vec::with_capacity(runs);
        for _ in 0..runs {
            let slot = sb.session_slot().await?;
            stage(&slot, trivial).await?;
            slots.push(slot);
        }
        sb.settle(Duration::from_secs(60)).await;
        for slot in slots {
            let start = Instant::now();
            exec_ok(sb, &slot, command, false).await?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            used.push(slot);
        }
    } else {
        sb.settle(Duration::from_secs(60)).await;
        for _ in 0..runs {
            let start = Instant::now();
            let slot = sb.fresh_slot().await?;
            if command[0] == TRIVIAL {
                stage(&slot, trivial).await?;
            }
            exec_ok(sb, &slot, command, false).await?;
            ms.push(start.elapsed().as_secs_f64() * 1e3);
            used.push(slot);
        }
    }
    for slot in used {
        sb.retire(slot);
    }
    Ok(summary(ms))
}

/// The same program started with no isolation at all (fork and exec), for reference.
fn bare_latency(dir: &std::path::Path, command: &[&str], runs: usize) -> anyhow::Result<Value> {
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let program = if command[0] == TRIVIAL { dir.join("trivial") } else { command[0].into() };
        let status = Command::new(program).args(&command[1..]).stdin(Stdio::null()).status()?;
        anyhow::ensure!(status.success(), "{command:?} failed");
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(summary(ms))
}

/// Runs per second of `once` called from `concurrency` threads, `runs` times in all.
fn threaded_rate(
    runs: usize,
    concurrency: usize,
    once: impl Fn() -> anyhow::Result<()> + Sync,
) -> anyhow::Result<f64> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..concurrency)
            .map(|_| {
                s.spawn(|| {
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < runs {
                        once()?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a bench thread panicked"))?)
    })?;
    Ok(runs as f64 / start.elapsed().as_secs_f64())
}

/// Runs per second of the program started with no isolation at `concurrency`, for reference.
fn bare_throughput(
    dir: &std::path::Path,
    command: &'static [&'static str],
    runs: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let program = if command[0] == TRIVIAL { dir.join("trivial") } else { command[0].into() };
    threaded_rate(runs, concurrency, || {
        let status = Command::new(&program).args(&command[1..]).stdin(Stdio::null()).status()?;
        anyhow::ensure!(status.success(), "{command:?} failed");
        Ok(())
    })
}

/// Runs per second at `concurrency`, each run taking a slot from the pool and handing it back
/// (reset to a fresh state in the background, or rebuilt after `max_runs_per_slot` runs).
async fn throughput(
    sb: &Sandbox,
    trivial: &Arc<Vec<u8>>,
    command: &'static [&'static str],
    runs: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let workers = (0..concurrency).map(|_| {
        let (sb, next, trivial) = (sb.clone(), Arc::clone(&next), Arc::clone(trivial));
        tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < runs {
                let slot = sb.slot().await?;
                // Each run brings its program, as a real run brings its code.
                if command[0] == TRIVIAL {
                    stage(&slot, &trivial).await?;
                }
                exec_ok(&sb, &slot, command, false).await?;
                sb.recycle(slot);
            }
            anyhow::Ok(())
        })
    });
    for w in futures_join(workers.collect()).await {
        w??;
    }
    Ok(runs as f64 / start.elapsed().as_secs_f64())
}

async fn futures_join<T>(
    handles: Vec<tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await);
    }
    out
}

fn bwrap_command(dir: &std::path::Path, command: &[&str]) -> Command {
    let mut c = Command::new("bwrap");
    c.args(["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"])
        .args(["--uid", "1000", "--gid", "1000", "--ro-bind", "/usr", "/usr"])
        .args([
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
        ])
        .args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/work"])
        .arg("--ro-bind")
        .arg(dir)
        .arg(BENCH_DIR)
        .args(["--chdir", "/work"])
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn bwrap_once(dir: &std::path::Path, command: &[&str]) -> anyhow::Result<()> {
    let status = bwrap_command(dir, command).status().context("run bwrap")?;
    anyhow::ensure!(status.success(), "bwrap {command:?} failed: {status}");
    Ok(())
}

fn bwrap_latency(dir: &std::path::Path, command: &[&str], runs: usize) -> anyhow::Result<Value> {
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        bwrap_once(dir, command)?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(summary(ms))
}

fn bwrap_throughput(
    dir: &std::path::Path,
    command: &'static [&'static str],
    runs: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    threaded_rate(runs, concurrency, || bwrap_once(dir, command))
}

/// Holds `n` idle slots at once, then checks that each still runs a command correctly.
async fn sessions(sb: &Sandbox, n: usize) -> anyhow::Result<Value> {
    let start = Instant::now();
    let mut slots = Vec::with_capacity(n);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let sb = sb.clone();
        set.spawn(async move { sb.fresh_slot().await });
        while set.len() >= 16 {
            if let Some(r) = set.join_next().await {
                slots.push(r??);
            }
        }
    }
    while let Some(r) = set.join_next().await {
        slots.push(r??);
    }
    let built_s = start.elapsed().as_secs_f64();
    let pss_kb = host_pss_kb(sb);
    let slots = Arc::new(slots);
    let mut correct = 0;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (sb, slots) = (sb.clone(), Arc::clone(&slots));
        set.spawn(async move {
            let exec = sb.exec_request(argv(&["/bin/sh", "-c", &format!("echo {i}")]), 5_000);
            let out = slots[i].exec(exec, Vec::new(), Duration::from_secs(10), 1 << 10).await;
            out.is_ok_and(|o| o.code == Some(0) && o.stdout == format!("{i}\n").into_bytes())
        });
        while set.len() >= 32 {
            correct += usize::from(set.join_next().await.is_some_and(|r| r.unwrap_or(false)));
        }
    }
    while let Some(r) = set.join_next().await {
        correct += usize::from(r.unwrap_or(false));
    }
    let slots = Arc::try_unwrap(slots).map_err(|_| anyhow::anyhow!("slots still shared"))?;
    for slot in slots {
        sb.retire(slot);
    }
    Ok(
        json!({"held": n, "executed_correctly": correct, "build_s": built_s, "helper_pss_mb": pss_kb as f64 / 1024.0}),
    )
}

/// Proportional set size (shared pages split between sharers) of every process running as the
/// sandbox's host uids: what the sessions really cost.
/// Proportional set size (shared pages split among their users) of every host process of the
/// sandbox, in KiB: what the slots really cost in memory.
fn host_pss_kb(sb: &Sandbox) -> u64 {
    let uids = [sb.config().host_root_uid.to_string(), sb.config().host_user_uid.to_string()];
    let ours = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("status")).is_ok_and(|s| {
            s.lines().any(|l| {
                l.starts_with("Uid:") && uids.iter().any(|u| l.split_whitespace().nth(1) == Some(u))
            })
        })
    };
    let pss = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("smaps_rollup")).ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
    };
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| ours(p))
                .filter_map(|p| pss(&p))
                .sum()
        })
        .unwrap_or(0)
}

/// The sandbox's performance targets, each with what was measured and the reference that bounds it
/// on this machine (the same program with no isolation at all, or bwrap).
fn targets(r: &Value) -> Vec<Value> {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let best_trivial = ["1", "2", "16", "64"]
        .iter()
        .map(|c| (c, f(&r["throughput"][c]["temper"]), f(&r["throughput"][c]["bare"])))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let row = |target: &str, measured: String, met: bool, reference: String| json!({"target": target, "measured": measured, "met": met, "reference": reference});
    let mut out = vec![
        row(
            "warm trivial start-to-exit p50 <= 1 ms",
            format!("{:.2} ms", f(&r["trivial"]["warm"]["p50_ms"])),
            f(&r["trivial"]["warm"]["p50_ms"]) <= 1.0,
            format!("no isolation: {:.2} ms", f(&r["trivial"]["bare"]["p50_ms"])),
        ),
        row(
            "warm trivial start-to-exit p99 <= 5 ms",
            format!("{:.2} ms", f(&r["trivial"]["warm"]["p99_ms"])),
            f(&r["trivial"]["warm"]["p99_ms"]) <= 5.0,
            format!("no isolation: {:.2} ms", f(&r["trivial"]["bare"]["p99_ms"])),
        ),
        row(
            "cold trivial start-to-exit p50 <= 2 ms",
            format!("{:.2} ms", f(&r["trivial"]["cold"]["p50_ms"])),
            f(&r["trivial"]["cold"]["p50_ms"]) <= 2.0,
            format!("bwrap (always cold): {:.2} ms", f(&r["trivial"]["bwrap"]["p50_ms"])),
        ),
    ];
    if let Some((c, t, bare)) = best_trivial {
        out.push(row(
            ">= 1000 trivial runs/s",
            format!("{t:.0}/s"),
            t >= 1000.0,
            format!("no isolation at concurrency {c}: {bare:.0}/s"),
        ));
    }
    let (py, bare_py) =
        (f(&r["throughput"]["python_16"]["temper"]), f(&r["throughput"]["python_16"]["bare"]));
    out.push(row(
        ">= 200 python runs/s",
        format!("{py:.0}/s"),
        py >= 200.0,
        format!("no isolation: {bare_py:.0}/s"),
    ));
    let pre = f(&r["python_preimport"]["runs_per_s_16"]);
    out.push(row(
        ">= 800 pre-imported python runs/s",
        format!("{pre:.0}/s"),
        pre >= 800.0,
        format!("fresh python, no isolation: {bare_py:.0}/s"),
    ));
    // Ahead of bwrap: lower latency, higher throughput, on each workload both ran.
    let mut shared: Vec<(String, f64)> = Vec::new();
    for name in ["trivial", "python"] {
        let (t, b) = (f(&r[name]["warm"]["p50_ms"]), f(&r[name]["bwrap"]["p50_ms"]));
        shared.push((format!("{name} p50"), b / t));
    }
    for c in ["1", "2", "16", "64", "python_16"] {
        let (t, b) = (f(&r["throughput"][c]["temper"]), f(&r["throughput"][c]["bwrap"]));
        shared.push((format!("runs/s {c}"), t / b));
    }
    let shared: Vec<_> = shared.into_iter().filter(|(_, x)| x.is_finite()).collect();
    if let Some((worst, ratio)) = shared.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        let ahead = shared.iter().filter(|(_, x)| *x > 1.0).count();
        out.push(row(
            "ahead of bwrap on every shared workload",
            format!("{ahead} of {}", shared.len()),
            ahead == shared.len(),
            format!("closest: {worst}, temper {ratio:.2}x better"),
        ));
    }
    let held = r["sessions"]["executed_correctly"].as_u64().unwrap_or(0);
    out.push(row(
        ">= 1000 live idle sandboxes",
        held.to_string(),
        held >= 1000,
        format!("{:.0} MiB in all", f(&r["sessions"]["helper_pss_mb"])),
    ));
    out
}

pub async fn run(args: SandboxBenchArgs) -> anyhow::Result<()> {
    let runs = args.runs.max(10);
    // A folder bound at the same path inside every sandbox, holding the trivial program.
    std::fs::create_dir_all(BENCH_DIR).with_context(|| format!("cannot create {BENCH_DIR}"))?;
    let dir = std::path::Path::new(BENCH_DIR);
    let binary = Arc::new(build_trivial(dir)?);
    let mut cfg = SandboxConfig { pool_size: 64, pool_builders: 2, ..SandboxConfig::default() };
    cfg.ro_binds.push(BENCH_DIR.to_owned());
    let sb = Sandbox::new(cfg).await.context("cannot start the sandbox")?;
    let has_bwrap =
        Command::new("bwrap").arg("--version").output().is_ok_and(|o| o.status.success());
    eprintln!(
        "measuring ({runs} runs per workload{})...",
        if has_bwrap { ", with bwrap" } else { ", bwrap not found" }
    );

    let trivial: &'static [&'static str] = &[TRIVIAL];
    let python: &'static [&'static str] = &[PYTHON, "-c", "pass"];
    let mut report = json!({"runs": runs, "trivial": "int main(void) { return 0; } (static)", "python": "python3 -c pass"});
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let fmt = |v: &Value| {
        format!(
            "{:.2} / {:.2}",
            v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            v["p99_ms"].as_f64().unwrap_or(f64::NAN)
        )
    };

    for (name, command) in [("trivial", trivial), ("python", python)] {
        let warm = latency(&sb, &binary, command, runs, true).await?;
        let cold = latency(&sb, &binary, command, runs / 2, false).await?;
        let bw = if has_bwrap { Some(bwrap_latency(dir, command, runs / 2)?) } else { None };
        let bare = bare_latency(dir, command, runs / 2)?;
        rows.push((
            format!("{name} start-to-exit, warm (p50 / p99 ms)"),
            fmt(&warm),
            bw.as_ref().map_or("-".into(), fmt),
            fmt(&bare),
        ));
        rows.push((
            format!("{name} start-to-exit, cold (p50 / p99 ms)"),
            fmt(&cold),
            "".into(),
            "".into(),
        ));
        report[name] = json!({"warm": warm, "cold": cold, "bwrap": bw, "bare": bare});
    }
    for concurrency in [1usize, 2, 16, 64] {
        sb.settle(Duration::from_secs(60)).await;
        let t = throughput(&sb, &binary, trivial, runs * 5, concurrency).await?;
        let b = if has_bwrap {
            Some(bwrap_throughput(dir, trivial, runs * 5, concurrency)?)
        } else {
            None
        };
        let bare = bare_throughput(dir, trivial, runs * 5, concurrency)?;
        rows.push((
            format!("trivial runs/s at concurrency {concurrency}"),
            format!("{t:.0}"),
            b.map_or("-".into(), |b| format!("{b:.0}")),
            format!("{bare:.0}"),
        ));
        report["throughput"][concurrency.to_string()] =
            json!({"temper": t, "bwrap": b, "bare": bare});
    }
    sb.settle(Duration::from_secs(60)).await;
    let py = throughput(&sb, &binary, python, runs, 16).await?;
    let bpy = if has_bwrap { Some(bwrap_throughput(dir, python, runs, 16)?) } else { None };
    let bare_py = bare_throughput(dir, python, runs, 16)?;
    rows.push((
        "python runs/s at concurrency 16".into(),
        format!("{py:.0}"),
        bpy.map_or("-".into(), |b| format!("{b:.0}")),
        format!("{bare_py:.0}"),
    ));
    report["throughput"]["python_16"] = json!({"temper": py, "bwrap": bpy, "bare": bare_py});

    // The pre-imported Python option: whole runs (code written to /work, then run in a fork of
    // a waiting interpreter).
    sb.settle(Duration::from_secs(60)).await;
    let pre = Sandbox::new(SandboxConfig {
        python_preimport: true,
        pool_size: 32,
        ..sb.config().clone()
    })
    .await
    .context("cannot start the pre-imported Python sandbox")?;
    pre.settle(Duration::from_secs(120)).await;
    let request = temper_protocol::RunRequest {
        language: temper_protocol::Language::Python,
        code: "pass".into(),
        stdin: String::new(),
        limits: temper_protocol::Limits::default(),
    };
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs.min(32) {
        let start = Instant::now();
        let out = pre.run(&request).await;
        anyhow::ensure!(
            out.status == temper_protocol::RunStatus::Ok,
            "pre-imported run failed: {out:?}"
        );
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let pre_latency = summary(ms);
    pre.settle(Duration::from_secs(120)).await;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = runs * 2;
    let start = Instant::now();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (pre, next, request) = (pre.clone(), Arc::clone(&next), request.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                    let out = pre.run(&request).await;
                    anyhow::ensure!(
                        out.status == temper_protocol::RunStatus::Ok,
                        "pre-imported run failed: {out:?}"
                    );
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for w in futures_join(workers).await {
        w??;
    }
    let pre_rate = total as f64 / start.elapsed().as_secs_f64();
    pre.shutdown().await;
    rows.push((
        "python (pre-imported) whole run, warm (p50 / p99 ms)".into(),
        fmt(&pre_latency),
        "".into(),
        "".into(),
    ));
    rows.push((
        "python (pre-imported) runs/s at concurrency 16".into(),
        format!("{pre_rate:.0}"),
        "".into(),
        "".into(),
    ));
    report["python_preimport"] = json!({"warm": pre_latency, "runs_per_s_16": pre_rate});

    let session_slot = sb.session_slot().await?;
    stage(&session_slot, &binary).await?;
    sb.settle(Duration::from_secs(60)).await;
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        exec_ok(&sb, &session_slot, trivial, true).await?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    sb.retire(session_slot);
    let session = summary(ms);
    rows.push(("session exec, trivial (p50 / p99 ms)".into(), fmt(&session), "".into(), "".into()));
    report["session_exec"] = session;

    let agentic = agentic(&sb, runs, args.rollouts, 4).await?;
    rows.extend(agentic_rows(&agentic, args.rollouts));
    report["agentic"] = agentic;

    let held = sessions(&sb, args.sessions).await?;
    rows.push((
        format!(
            "idle sessions held ({} built in {:.1} s, {:.0} MiB)",
            args.sessions,
            held["build_s"].as_f64().unwrap_or(0.0),
            held["helper_pss_mb"].as_f64().unwrap_or(0.0)
        ),
        format!("{} ran correctly", held["executed_correctly"]),
        "".into(),
        "".into(),
    ));
    report["sessions"] = held;
    let (warm, cold) = sb.starts();
    report["slot_starts"] = json!({"warm": warm, "cold": cold});
    sb.shutdown().await;

    println!("{:<60} {:>18} {:>18} {:>18}", "workload", "temper", "bwrap", "no isolation");
    for (name, t, b, bare) in &rows {
        println!("{name:<60} {t:>18} {b:>18} {bare:>18}");
    }
    println!(
        "(bwrap keeps no pool: each of its runs builds its sandbox from nothing, like temper's \
         cold start)"
    );
    let targets = targets(&report);
    println!("\n{:<44} {:>10} {:>6}   reference", "target", "measured", "met");
    for t in &targets {
        println!(
            "{:<44} {:>10} {:>6}   {}",
            t["target"].as_str().unwrap_or(""),
            t["measured"].as_str().unwrap_or(""),
            if t["met"].as_bool() == Some(true) { "yes" } else { "no" },
            t["reference"].as_str().unwrap_or("")
        );
    }
    report["targets"] = Value::Array(targets);
    crate::report::write(&args.output, &report)?;
    Ok(())
}

/// The table rows of [`agentic`]'s report.
fn agentic_rows(r: &Value, rollouts: usize) -> Vec<(String, String, String, String)> {
    let p = |v: &Value| {
        format!(
            "{:.2} / {:.2}",
            v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            v["p99_ms"].as_f64().unwrap_or(f64::NAN)
        )
    };
    let row = |name: String, value: String| (name, value, String::new(), String::new());
    let mut rows: Vec<_> = [
        ("session open (p50 / p99 ms)", "open"),
        ("session destroy (p50 / p99 ms)", "destroy"),
        ("plain run of the tool's command (p50 / p99 ms)", "plain_run"),
        ("same command in a session (p50 / p99 ms)", "session_exec"),
        ("same command as a bash tool call, one rollout (p50 / p99 ms)", "tool_call_alone"),
    ]
    .into_iter()
    .map(|(label, key)| row(label.into(), p(&r[key])))
    .collect();
    rows.push(row(
        format!("bash tool call, {rollouts} rollouts at once, each its own session (p50 / p99 ms)"),
        p(&r["tool_call_concurrent"]),
    ));
    rows.push(row(
        format!("{rollouts} concurrent session rollouts: all correct, wall s"),
        format!(
            "{} / {rollouts}; {:.2}",
            r["rollouts_correct"],
            r["wall_s"].as_f64().unwrap_or(f64::NAN)
        ),
    ));
    rows
}

/// A scripted agent for the agentic workload: `calls` bash calls that count in a file of the
/// session, then an answer. It records, per rollout, the time between its turns: the tool call
/// as the rollout sees it.
#[derive(Debug)]
struct Counter {
    calls: usize,
    last: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
    gaps: std::sync::Mutex<Vec<f64>>,
}

#[async_trait::async_trait]
impl temper_envs::ChatModel for Counter {
    async fn chat(
        &self,
        request: &temper_envs::ChatRequest,
    ) -> Result<temper_envs::ModelReply, temper_envs::ModelError> {
        use temper_protocol::{FinishReason, FunctionCall, Message, Role, ToolCall};
        let key = request.messages.first().map(|m| m.content.clone()).unwrap_or_default();
        let now = Instant::now();
        if let Some(before) = self.last.lock().unwrap_or_else(|p| p.into_inner()).insert(key, now) {
            let gap = now.duration_since(before).as_secs_f64() * 1e3;
            self.gaps.lock().unwrap_or_else(|p| p.into_inner()).push(gap);
        }
        let done = request.messages.iter().filter(|m| m.role == Role::Tool).count();
        let mut message = Message::assistant("");
        let finish = if done < self.calls {
            let command = "echo $(( $(cat n 2>/dev/null || echo 0) + 1 )) > n; cat n";
            message.tool_calls = vec![ToolCall {
                id: format!("call_{done}"),
                kind: "function".into(),
                function: FunctionCall {
                    name: "bash".into(),
                    arguments: json!({"command": command}).to_string(),
                },
            }];
            FinishReason::ToolCalls
        } else {
            message.content = "done".into();
            FinishReason::Stop
        };
        Ok(temper_envs::ModelReply {
            message,
            finish_reason: finish,
            usage: Default::default(),
            tokens: None,
            policy_version: None,
        })
    }
}

/// Sessions for agentic rollouts: open and destroy latency, a tool's command run plainly and in
/// a session, and `rollouts` rollouts at once, each holding its own session and making `calls`
/// bash calls through the tool loop (a rollout is correct when its counter reached `calls`).
async fn agentic(
    sb: &Sandbox,
    runs: usize,
    rollouts: usize,
    calls: usize,
) -> anyhow::Result<Value> {
    use temper_verify::code::CodeRunner;
    let command = "echo 1 > n; cat n";
    let limits = temper_protocol::Limits::default();
    sb.settle(Duration::from_secs(60)).await;
    let (mut open, mut destroy) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t = Instant::now();
        let slot = sb.session_slot().await?;
        open.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        slot.destroy().await;
        destroy.push(t.elapsed().as_secs_f64() * 1e3);
        // Let the pool replace it, as it would between rollouts.
        sb.settle(Duration::from_secs(10)).await;
    }
    let mut plain = Vec::with_capacity(runs);
    for _ in 0..runs {
        let request = temper_protocol::RunRequest {
            language: temper_protocol::Language::Bash,
            code: command.into(),
            stdin: String::new(),
            limits,
        };
        let t = Instant::now();
        let r = sb.run(&request).await;
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(r.stdout == "1\n", "plain run: {r:?}");
    }
    let session = sb.open_session().await?;
    let mut in_session = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = session.exec(command, "", limits).await?;
        in_session.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(r.stdout == "1\n", "session exec: {r:?}");
    }
    session.close().await;

    let env = temper_envs::Environment {
        info: temper_envs::EnvInfo::builtin("bench-sessions", "0.1.0", "bash in a session"),
        system_prompt: None,
        parser: temper_envs::Parser::Raw,
        data: temper_envs::DataSource::Generated {
            generate: temper_envs::Generator::new(|_, _| unreachable!("examples are built here")),
            seed: 0,
            train_size: 0,
            eval_size: 0,
        },
        interaction: Arc::new(
            temper_envs::tools::ToolUse::new(vec![
                temper_envs::tools::builtin_tool("bash").expect("bash is built in"),
            ])
            .map_err(anyhow::Error::msg)?,
        ),
        rubric: temper_envs::Rubric::new(),
        limits: temper_envs::TurnLimits::turns(calls as u32 + 1),
    };
    let model = Counter { calls, last: Default::default(), gaps: Default::default() };
    let services = temper_envs::Services {
        code_runner: Some(Arc::new(sb.clone()) as Arc<dyn CodeRunner>),
        judge: None,
    };
    let sampling = temper_protocol::SamplingParams::default();
    let examples: Vec<temper_envs::Example> = (0..rollouts)
        .map(|i| temper_envs::Example {
            example_id: i as u64,
            prompt: vec![temper_protocol::Message::user(format!("rollout {i}"))],
            answer: String::new(),
            info: Default::default(),
            task: "bench".into(),
        })
        .collect();
    // One rollout at a time: the tool loop's own cost over the session exec above.
    for e in examples.iter().take((runs / calls).max(1)) {
        env.run_group(&model, e, 1, &sampling, &services).await;
    }
    let alone = std::mem::take(&mut *model.gaps.lock().unwrap_or_else(|p| p.into_inner()));
    model.last.lock().unwrap_or_else(|p| p.into_inner()).clear();
    sb.settle(Duration::from_secs(60)).await;
    let t = Instant::now();
    let groups = futures::future::join_all(
        examples.iter().map(|e| env.run_group(&model, e, 1, &sampling, &services)),
    )
    .await;
    let wall_s = t.elapsed().as_secs_f64();
    let last = calls.to_string();
    let correct = groups
        .iter()
        .flatten()
        .filter(|r| {
            r.error.is_none()
                && r.completion
                    .iter()
                    .rev()
                    .find(|m| m.role == temper_protocol::Role::Tool)
                    .is_some_and(|m| m.content.trim() == last)
        })
        .count();
    let gaps = model.gaps.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(json!({
        "open": summary(open),
        "destroy": summary(destroy),
        "plain_run": summary(plain),
        "session_exec": summary(in_session),
        "tool_call_alone": summary(alone),
        "tool_call_concurrent": summary(gaps),
        "rollouts": rollouts,
        "calls_per_rollout": calls,
        "rollouts_correct": correct,
        "wall_s": wall_s,
    }))
}
