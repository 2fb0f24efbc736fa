//! `temper rl CONFIG`: inference, orchestrator and trainer as three supervised processes.
//!
//! The launcher splits the one config into the roles' configs (written to the run directory as
//! `trainer.toml` and `orchestrator.toml`, with the whole resolved config as `config.toml`),
//! runs the SFT warmup when the model does not exist yet, starts the processes (each in its own
//! process group, its output in `logs/<role>.log`), shows a line per step from `metrics.jsonl`,
//! and stops everything when one of them fails, on Ctrl-C, or when the run is done. Children
//! watch this process too (`TEMPER_SUPERVISOR_PID`): if the launcher is killed, they exit.

use std::io::{BufRead, Seek, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Map, Value};
use temper_orchestrator::OrchestratorConfig;
use temper_protocol::run_dir;
use temper_trainer::rl::RlTrainerConfig;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use toml::Table;

use crate::args::RlArgs;
use crate::env_vars;

/// Sections each role reads; `output` goes to both.
const TRAINER_SECTIONS: &[&str] =
    &["model", "optim", "schedule", "loss", "trainer", "lora", "output"];
const ORCHESTRATOR_SECTIONS: &[&str] = &["orchestrator", "inference", "env", "output"];
const OWN_SECTIONS: &[&str] = &["warmup"];

/// The split config.
struct Plan {
    trainer: RlTrainerConfig,
    orchestrator: OrchestratorConfig,
    warmup: Option<PathBuf>,
    resolved: String,
}

fn plan(path: &Path, sets: &[String]) -> anyhow::Result<Plan> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut table: Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    for set in sets {
        super::settings::apply(&mut table, set)?;
    }
    for key in table.keys() {
        let known = TRAINER_SECTIONS.iter().chain(ORCHESTRATOR_SECTIONS).chain(OWN_SECTIONS);
        if !known.clone().any(|k| k == key) {
            let mut all: Vec<&str> = known.copied().collect();
            all.sort_unstable();
            all.dedup();
            bail!(
                "{}: unknown section [{key}]; expected one of {}",
                path.display(),
                all.join(", ")
            );
        }
    }
    // One run directory for both roles: without [output], the RL default (the trainer's own
    // default is SFT's folder, which would split the run in two).
    if !table.contains_key("output") {
        let dir = temper_orchestrator::config::OutputConfig::default().dir;
        let mut output = Table::new();
        output.insert("dir".into(), toml::Value::String(dir.to_string_lossy().into_owned()));
        table.insert("output".into(), toml::Value::Table(output));
    }
    let pick = |keys: &[&str]| -> Table {
        table
            .iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut trainer_t = pick(TRAINER_SECTIONS);
    let mut orch_t = pick(ORCHESTRATOR_SECTIONS);
    // One step count: [trainer] steps, copied to the orchestrator (which must not disagree).
    let trainer_steps =
        trainer_t.get("trainer").and_then(|t| t.get("steps")).and_then(toml::Value::as_integer);
    let orch_steps =
        orch_t.get("orchestrator").and_then(|t| t.get("steps")).and_then(toml::Value::as_integer);
    let steps = match (trainer_steps, orch_steps) {
        (Some(a), Some(b)) if a != b => bail!(
            "{}: trainer.steps ({a}) and orchestrator.steps ({b}) differ; set trainer.steps only",
            path.display()
        ),
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => bail!("{}: set trainer.steps (the number of RL steps)", path.display()),
    };
    for (t, section) in [(&mut trainer_t, "trainer"), (&mut orch_t, "orchestrator")] {
        let entry = t.entry(section.to_owned()).or_insert_with(|| toml::Value::Table(Table::new()));
        if let toml::Value::Table(s) = entry {
            s.insert("steps".into(), toml::Value::Integer(steps));
        }
    }
    let parse_err = |what: &str, e: toml::de::Error| {
        anyhow::anyhow!("{} ({what} sections): {e}", path.display())
    };
    let trainer: RlTrainerConfig =
        toml::Value::Table(trainer_t).try_into().map_err(|e| parse_err("trainer", e))?;
    let orchestrator: OrchestratorConfig =
        toml::Value::Table(orch_t).try_into().map_err(|e| parse_err("orchestrator", e))?;
    let warmup = match table.get("warmup") {
        None => None,
        Some(w) => {
            let sft = w.get("sft").and_then(toml::Value::as_str).with_context(|| {
                format!("{}: [warmup] needs sft = \"FILE\" (an SFT config)", path.display())
            })?;
            if let Some(other) = w.as_table().and_then(|t| t.keys().find(|k| *k != "sft")) {
                bail!("{}: unknown field warmup.{other}; expected sft", path.display());
            }
            // Relative to the RL config's folder.
            Some(path.parent().unwrap_or(Path::new(".")).join(sft))
        }
    };
    let resolved = toml::to_string_pretty(&table).context("cannot write the resolved config")?;
    Ok(Plan { trainer, orchestrator, warmup, resolved })
}

pub async fn run(args: RlArgs) -> anyhow::Result<()> {
    let Plan { trainer, mut orchestrator, warmup, resolved } = plan(&args.config, &args.set)?;
    let file = args.config.display().to_string();
    let Some(model) = trainer.model.path.clone() else {
        bail!(
            "{file}: [model] path is required (a Hugging Face folder or .gguf; train one with `temper sft` or name it in [warmup])"
        );
    };
    ensure!(
        trainer.output.dir == orchestrator.output.dir,
        "{file}: trainer and orchestrator must share output.dir"
    );
    trainer.validate().with_context(|| format!("invalid config {file}"))?;
    // The orchestrator's checks, with the address of the server this launcher would start.
    let mut check = orchestrator.clone();
    if check.inference.base_urls.is_empty() {
        check.inference.base_urls = vec![format!("http://{}/v1", check.inference.addr)];
    }
    check.validate().with_context(|| format!("invalid config {file}"))?;
    // Hub environments are installed (and pinned in temper.lock) here, before anything starts;
    // the orchestrator then finds them in the store.
    super::env::resolve_config_envs(&mut check)
        .await
        .with_context(|| format!("invalid config {file}"))?;
    let envs = temper_orchestrator::run::load_envs(&check)
        .with_context(|| format!("invalid config {file}"))?;
    if args.check {
        match (&warmup, model.exists()) {
            (_, true) => {}
            (Some(sft), false) => {
                super::sft::load_config(sft, &[])
                    .with_context(|| format!("{file}: [warmup] sft {}", sft.display()))?;
            }
            (None, false) => bail!(
                "{file}: model.path {} does not exist (and no [warmup] sft config makes it)",
                model.display()
            ),
        }
        let names: Vec<String> =
            envs.iter().map(|e| format!("{}@{}", e.info.name, e.info.version)).collect();
        println!(
            "{file}: ok ({} steps, model {}{}, environments {}, run directory {})",
            trainer.trainer.steps,
            model.display(),
            if model.exists() { "" } else { " from the warmup" },
            names.join(", "),
            trainer.output.dir.display()
        );
        return Ok(());
    }
    drop(envs);
    let dir = trainer.output.dir.clone();

    // The run directory: refuse an earlier run unless told what to do with it.
    let has_data = std::fs::read_dir(&dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if has_data && args.clean {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot delete {}", dir.display()))?;
    } else if has_data && !args.resume {
        bail!(
            "{} already holds a run; pass --resume to continue it or --clean to start over",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.join("logs").display()))?;

    // The SFT warmup, when the model is still to be made.
    if !model.exists() {
        let Some(sft) = &warmup else {
            bail!(
                "{file}: model.path {} does not exist (and no [warmup] sft config makes it)",
                model.display()
            );
        };
        eprintln!("== SFT warmup: {} (makes {})", sft.display(), model.display());
        let status = Command::new(std::env::current_exe()?)
            .arg("sft")
            .arg(sft)
            .arg("--resume")
            .status()
            .await
            .context("cannot start the SFT warmup")?;
        ensure!(status.success(), "the SFT warmup failed ({status})");
        ensure!(
            model.exists(),
            "the SFT warmup finished but {} does not exist: its output.dir must end in the model path's folder (…/final)",
            model.display()
        );
    }

    // Where a resume starts: the trainer's newest complete checkpoint.
    let resume_step = if args.resume {
        temper_trainer::checkpoint::latest(&run_dir::checkpoints_dir(&dir, "trainer"))?.unwrap_or(0)
    } else {
        0
    };
    if args.resume {
        rewind(&dir, resume_step)?;
        eprintln!("== resuming after step {resume_step}");
    }

    let exe = std::env::current_exe().context("cannot find the temper binary")?;
    let mut procs: Vec<Proc> = Vec::new();
    let result = async {
        if orchestrator.inference.base_urls.is_empty() {
            let addr = free_addr(&orchestrator.inference.addr)?;
            let mut cmd = Command::new(&exe);
            cmd.args(["inference", "serve", "--addr", &addr, "--served-model-name"])
                .arg(&orchestrator.inference.model_name)
                .arg("--model")
                .arg(&model)
                .args(["--max-running", &orchestrator.inference.max_running.to_string()]);
            if let Some(dtype) = &trainer.model.dtype {
                cmd.args(["--dtype", dtype]);
            }
            procs.push(Proc::spawn("inference", cmd, &dir).await?);
            orchestrator.inference.base_urls = vec![format!("http://{addr}/v1")];
        }
        orchestrator.validate().with_context(|| format!("invalid config {file}"))?;
        write_file(&dir.join("config.toml"), &resolved)?;
        write_file(&dir.join("trainer.toml"), &toml::to_string_pretty(&trainer)?)?;
        write_file(&dir.join("orchestrator.toml"), &toml::to_string_pretty(&orchestrator)?)?;

        let mut cmd = Command::new(&exe);
        cmd.arg("trainer").arg(dir.join("trainer.toml"));
        if resume_step > 0 {
            cmd.arg("--resume");
        }
        procs.push(Proc::spawn("trainer", cmd, &dir).await?);
        let mut cmd = Command::new(&exe);
        cmd.arg("orchestrator").arg(dir.join("orchestrator.toml"));
        if args.resume {
            cmd.args(["--resume-step", &resume_step.to_string()]);
        }
        procs.push(Proc::spawn("orchestrator", cmd, &dir).await?);
        supervise(&mut procs, &dir, trainer.trainer.steps, resume_step).await
    }
    .await;
    stop_all(&mut procs).await;
    let summary = result?;
    println!("{summary}");
    Ok(())
}

/// Forgets everything after step `step`: newer batches and weights (the orchestrator and the
/// trainer make them again from the checkpoints), and newer metric lines.
fn rewind(dir: &Path, step: u64) -> anyhow::Result<()> {
    for sub in ["rollouts", "weights"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if run_dir::parse_step(&name).is_some_and(|s| s > step) {
                std::fs::remove_dir_all(e.path())
                    .with_context(|| format!("cannot delete {}", e.path().display()))?;
            }
        }
    }
    let path = run_dir::metrics_file(dir);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| v.get("step").and_then(Value::as_u64))
                    .is_some_and(|s| s <= step)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let tmp = path.with_extension("jsonl.tmp");
        std::fs::write(&tmp, kept).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `addr` with port 0 replaced by a free port.
fn free_addr(addr: &str) -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("inference.addr {addr}: cannot listen there"))?;
    Ok(listener.local_addr()?.to_string())
}

/// A child process of the run.
struct Proc {
    role: &'static str,
    child: Child,
    status: Option<ExitStatus>,
    log: PathBuf,
}

impl Proc {
    async fn spawn(role: &'static str, mut cmd: Command, dir: &Path) -> anyhow::Result<Self> {
        let log = dir.join("logs").join(format!("{role}.log"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        cmd.process_group(0)
            .env(env_vars::SUPERVISOR_PID, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if std::env::var_os(env_vars::LOG).is_none() {
            cmd.env(env_vars::LOG, "info");
        }
        let mut child = cmd.spawn().with_context(|| format!("cannot start the {role}"))?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            bail!("the {role}'s output is not piped");
        };
        let _ = writeln!(file, "== temper rl started the {role} (pid {:?})", child.id());
        let file = std::sync::Arc::new(std::sync::Mutex::new(file));
        for stream in [Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(err)]
        {
            let file = file.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut f) = file.lock() {
                        let _ = writeln!(f, "{line}");
                    }
                    // Problems reach the terminal; the rest stays in the log.
                    if line.contains("WARN") || line.contains("ERROR") || line.starts_with("error")
                    {
                        eprintln!("[{role}] {line}");
                    }
                }
            });
        }
        Ok(Self { role, child, status: None, log })
    }

    fn signal(&self, signal: Signal) {
        if self.status.is_none()
            && let Some(pid) = self.child.id()
        {
            let _ = killpg(Pid::from_raw(pid as i32), signal);
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Stops every child still running: SIGINT (the trainer and orchestrator stop cleanly), then
/// SIGTERM, then SIGKILL, each after a grace period; reaps them all.
async fn stop_all(procs: &mut [Proc]) {
    for (signal, grace) in [
        (Signal::SIGINT, Duration::from_secs(20)),
        (Signal::SIGTERM, Duration::from_secs(5)),
        (Signal::SIGKILL, Duration::from_secs(5)),
    ] {
        if procs.iter().all(|p| p.status.is_some()) {
            return;
        }
        for p in procs.iter() {
            p.signal(signal);
        }
        let deadline = Instant::now() + grace;
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Ok(Ok(status)) = tokio::time::timeout(left, p.child.wait()).await {
                p.status = Some(status);
            }
        }
    }
}

/// Follows `metrics.jsonl` from where it was last read.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn read(&mut self) -> Vec<Map<String, Value>> {
        let Ok(mut f) = std::fs::File::open(&self.path) else { return Vec::new() };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut reader = std::io::BufReader::new(f);
        let mut out = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    self.partial.push_str(&line);
                    if self.partial.ends_with('\n') {
                        if let Ok(Value::Object(m)) = serde_json::from_str(self.partial.trim()) {
                            out.push(m);
                        }
                        self.partial.clear();
                    }
                }
            }
        }
        out
    }
}

fn num(l: &Map<String, Value>, k: &str) -> f64 {
    l.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// Waits for the run to end; returns the closing summary or why it failed.
async fn supervise(
    procs: &mut [Proc],
    dir: &Path,
    steps: u64,
    start: u64,
) -> anyhow::Result<String> {
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {bar:30} {pos}/{len} steps {elapsed_precise} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(start);
    let say = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    let mut tail = Tail { path: run_dir::metrics_file(dir), offset: 0, partial: String::new() };
    // Skip what an earlier (resumed) run wrote, except its evaluations.
    let mut first_eval: Option<Map<String, Value>> = None;
    let mut last_eval: Option<Map<String, Value>> = None;
    for l in tail.read() {
        if l.keys().any(|k| k.starts_with("eval/")) {
            first_eval.get_or_insert_with(|| l.clone());
            last_eval = Some(l);
        }
    }
    let mut orchestrator_lines: std::collections::BTreeMap<u64, Map<String, Value>> =
        Default::default();
    let started = Instant::now();
    let mut interrupt = Box::pin(tokio::signal::ctrl_c());
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        // Children that ended.
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.status = Some(status);
                let done = p.role != "inference" && status.success();
                if !done {
                    bar.finish_and_clear();
                    bail!(
                        "the {} stopped ({status}); the run is stopped. Last lines of {}:\n{}",
                        p.role,
                        p.log.display(),
                        p.log_tail(20)
                    );
                }
            }
        }
        for l in tail.read() {
            let step = l.get("step").and_then(Value::as_u64).unwrap_or(0);
            if l.keys().any(|k| k.starts_with("eval/")) {
                let scores: Vec<String> = l
                    .iter()
                    .filter(|(k, _)| {
                        k.starts_with("eval/")
                            && (k.ends_with("/reward/mean") || k.contains("pass@"))
                    })
                    .map(|(k, v)| format!("{} {:.3}", &k[5..], v.as_f64().unwrap_or(f64::NAN)))
                    .collect();
                say(format!("eval   v{step:<5} | {}", scores.join(" | ")));
                first_eval.get_or_insert_with(|| l.clone());
                last_eval = Some(l);
                continue;
            }
            match l.get("role").and_then(Value::as_str) {
                Some("orchestrator") => {
                    orchestrator_lines.insert(step, l);
                }
                Some("trainer") => {
                    let o = orchestrator_lines.remove(&step).unwrap_or_default();
                    say(format!(
                        "step {step:>5}/{steps} | reward {:.3} | mismatch_kl {:.1e} | entropy {:.3} | grad {:.3} | lr {:.1e} | off-policy ≤ {} | seq {:.0} | {:.1} s",
                        num(&o, "reward/mean"),
                        num(&l, "mismatch_kl/mean"),
                        num(&l, "entropy/mean"),
                        num(&l, "grad_norm"),
                        num(&l, "lr"),
                        num(&o, "off_policy/max"),
                        num(&o, "seq_len/mean"),
                        num(&l, "time/step"),
                    ));
                    bar.set_position(step);
                    bar.set_message(format!("reward {:.3}", num(&o, "reward/mean")));
                }
                _ => {}
            }
        }
        let finished = procs.iter().filter(|p| p.role != "inference").all(|p| p.status.is_some());
        if finished {
            break;
        }
        tokio::select! {
            _ = &mut interrupt => {
                bar.finish_and_clear();
                bail!("interrupted; the processes are stopped (continue with --resume)");
            }
            _ = tick.tick() => {}
        }
    }
    bar.finish_and_clear();
    let mut summary = format!(
        "RL finished: {steps} steps in {:.0} s; run directory {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    if let (Some(a), Some(b)) = (first_eval, last_eval) {
        for (k, v) in &b {
            if k.starts_with("eval/") && k.ends_with("/reward/mean") {
                summary.push_str(&format!(
                    "\n  {k}: {:.3} (v{}) → {:.3} (v{})",
                    num(&a, k),
                    num(&a, "step"),
                    v.as_f64().unwrap_or(f64::NAN),
                    num(&b, "step")
                ));
            }
        }
    }
    Ok(summary)
}
