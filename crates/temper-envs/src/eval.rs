//! Evaluation runs: `G` rollouts for each of `n` examples, written as they complete, resumable.
//!
//! An evaluation writes two files in its output folder:
//!
//! - `results.jsonl`: one [`Rollout`] per line. The lines of a group are appended together as
//!   soon as the group is scored, so killing the run loses at most the groups in flight.
//! - `metadata.json`: the run's configuration (written first, with `"status": "running"`), then,
//!   at the end, the summary: counts, mean reward, the mean of each reward function, pass@k,
//!   error rate and timings (`"status": "complete"`).
//!
//! Resuming reads `results.jsonl`, drops any incomplete group or partial last line, and any group
//! in which no rollout reached the model (so a run cut short by a server outage is completed by
//! resuming once the server is back), refuses if the configuration differs from the one in
//! `metadata.json`, and runs only the missing groups; the summary is then computed over the whole
//! file, so it matches an uninterrupted run.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use temper_protocol::{Rollout, SCHEMA_VERSION, SamplingParams};

use crate::stats::{Summary, summarize};
use crate::{ChatModel, EnvError, Environment, Example, LoadOptions, Services, Split};

/// Results file name.
pub const RESULTS: &str = "results.jsonl";
/// Metadata file name.
pub const METADATA: &str = "metadata.json";

/// What to evaluate and how.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRun {
    /// Examples to evaluate (the first ones of the split); 0 means all.
    pub num_examples: usize,
    /// Rollouts per example (the group size).
    pub rollouts_per_example: u32,
    /// Which split.
    pub split: Split,
    /// Sampling options.
    pub sampling: SamplingParams,
    /// Reward at or above which a rollout passes, for pass@k.
    pub pass_threshold: f64,
    /// Base URL of the model server.
    pub model_url: String,
    /// Model name sent to the server.
    pub model_name: String,
    /// The judge model (URL and name) of `llm_judge` rewards, when it differs from the model.
    pub judge: Option<(String, String)>,
    /// Which code runner runs model-written code (`null` when there is none).
    pub code_runner: Option<String>,
    /// Options the environment was loaded with.
    #[serde(skip)]
    pub load: LoadOptions,
    /// Rollouts in flight at most (not part of the configuration checked on resume).
    #[serde(skip)]
    pub concurrency: usize,
}

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The environment failed to load its data.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// A file of the output folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The output folder already holds a run and `resume` was not asked for.
    #[error("{} already holds an evaluation; pass --resume to continue it or choose another --output", path.display())]
    Exists {
        /// The folder.
        path: PathBuf,
    },
    /// Resume was asked for but the folder does not hold a resumable run.
    #[error("cannot resume {}: {message}", path.display())]
    NotResumable {
        /// The folder.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Resume was asked for with a different configuration.
    #[error("cannot resume {}: the configuration changed ({differences})", path.display())]
    ConfigChanged {
        /// The folder.
        path: PathBuf,
        /// The keys that differ, with old and new values.
        differences: String,
    },
    /// Two examples share an id, so their groups could not be told apart.
    #[error("the dataset has two examples with example_id {0}")]
    DuplicateExample(u64),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EvalError + '_ {
    move |source| EvalError::Io { path: path.to_owned(), source }
}

/// Progress after each group.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Groups finished, including those found when resuming.
    pub groups_done: usize,
    /// Groups in the whole run.
    pub groups_total: usize,
    /// Mean reward of the groups finished in this session.
    pub reward_mean: f64,
    /// Rollouts with an error in this session.
    pub errors: usize,
}

/// The outcome of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalReport {
    /// The summary over every rollout of the run.
    pub summary: Summary,
    /// The final `metadata.json`.
    pub metadata: Value,
    /// Groups that were already done when resuming.
    pub resumed_groups: usize,
    /// Every rollout failed because of the model (nothing was evaluated): the first such error.
    pub all_failed: Option<String>,
}

/// The configuration recorded in `metadata.json` and compared on resume.
pub fn fingerprint(env: &Environment, config: &EvalRun) -> Value {
    json!({
        "env": {"name": env.info.name, "version": env.info.version, "content_hash": env.info.content_hash},
        "eval": config,
        "data": {"seed": config.load.seed, "train_size": config.load.train_size, "eval_size": config.load.eval_size},
    })
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), EvalError> {
    temper_protocol::fsio::write_atomic(path, bytes).map_err(io(path))
}

/// Reads the complete groups of a results file, rewriting it without partial lines or groups.
/// With `retry_unreached`, a group in which no rollout got a reply from the model is dropped too,
/// so that resuming after a server outage runs it again.
fn recover(path: &Path, group_size: u32, retry_unreached: bool) -> Result<Vec<Rollout>, EvalError> {
    let text = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    let mut rollouts = Vec::new();
    let mut dropped = false;
    for line in text.split_inclusive(|&b| b == b'\n') {
        match serde_json::from_slice::<Rollout>(line) {
            Ok(r) if line.ends_with(b"\n") => rollouts.push(r),
            _ if line.iter().all(u8::is_ascii_whitespace) => {}
            _ => dropped = true,
        }
    }
    let mut members: HashMap<u64, BTreeSet<u32>> = HashMap::new();
    for r in &rollouts {
        members.entry(r.example_id).or_default().insert(r.rollout_index);
    }
    let mut reached: BTreeSet<u64> = BTreeSet::new();
    for r in &rollouts {
        if r.error.as_ref().is_none_or(|e| e.source != "model") {
            reached.insert(r.example_id);
        }
    }
    let keep = |id: &u64| {
        members.get(id).is_some_and(|m| m.len() == group_size as usize)
            && (!retry_unreached || reached.contains(id))
    };
    let before = rollouts.len();
    rollouts.retain(|r| keep(&r.example_id));
    if dropped || rollouts.len() != before {
        let mut out = Vec::new();
        for r in &rollouts {
            serde_json::to_writer(&mut out, r).map_err(|e| io(path)(e.into()))?;
            out.push(b'\n');
        }
        write_atomic(path, &out)?;
    }
    Ok(rollouts)
}

/// Describes how two configurations differ, key by key.
fn differences(old: &Value, new: &Value, prefix: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                differences(
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    &path,
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("{prefix}: {a} → {b}")),
        _ => {}
    }
}

/// Runs the rollouts of one example, each after taking a permit of `gate`, and scores the group.
async fn gated_group(
    env: &Environment,
    model: &dyn ChatModel,
    example: &Example,
    config: &EvalRun,
    services: &Services,
    gate: &tokio::sync::Semaphore,
) -> Vec<Rollout> {
    let r = config.rollouts_per_example.max(1);
    env.run_group_gated(model, example, r, &config.sampling, services, Some(gate)).await
}

/// Runs (or resumes) an evaluation into `dir`. `on_progress` is called after every group.
pub async fn run(
    env: &Environment,
    model: &dyn ChatModel,
    services: &Services,
    config: &EvalRun,
    dir: &Path,
    resume: bool,
    on_progress: &(dyn Fn(Progress) + Sync),
) -> Result<EvalReport, EvalError> {
    let started = Instant::now();
    let mut examples = env.examples(config.split)?;
    if config.num_examples > 0 {
        examples.truncate(config.num_examples);
    }
    let mut ids = BTreeSet::new();
    if let Some(dup) = examples.iter().find(|e| !ids.insert(e.example_id)) {
        return Err(EvalError::DuplicateExample(dup.example_id));
    }

    let config_value = fingerprint(env, config);
    let metadata_path = dir.join(METADATA);
    let results_path = dir.join(RESULTS);
    let mut started_at = now();
    let previous = if resume {
        let text = fs::read_to_string(&metadata_path).map_err(|e| EvalError::NotResumable {
            path: dir.to_owned(),
            message: format!("cannot read {}: {e}", metadata_path.display()),
        })?;
        let old: Value = serde_json::from_str(&text).map_err(|e| EvalError::NotResumable {
            path: dir.to_owned(),
            message: format!("{} is not valid JSON: {e}", metadata_path.display()),
        })?;
        let mut diff = Vec::new();
        differences(old.get("config").unwrap_or(&Value::Null), &config_value, "", &mut diff);
        if !diff.is_empty() {
            return Err(EvalError::ConfigChanged {
                path: dir.to_owned(),
                differences: diff.join("; "),
            });
        }
        started_at = old.get("started_at").and_then(Value::as_f64).unwrap_or(started_at);
        recover(&results_path, config.rollouts_per_example, true)?
    } else {
        if metadata_path.exists() || results_path.exists() {
            return Err(EvalError::Exists { path: dir.to_owned() });
        }
        fs::create_dir_all(dir).map_err(io(dir))?;
        Vec::new()
    };

    let header = json!({
        "schema_version": SCHEMA_VERSION,
        "temper_version": env!("CARGO_PKG_VERSION"),
        "status": "running",
        "config": config_value,
        "started_at": started_at,
    });
    write_atomic(
        &metadata_path,
        &serde_json::to_vec_pretty(&header).map_err(|e| io(&metadata_path)(e.into()))?,
    )?;

    let done: BTreeSet<u64> = previous.iter().map(|r| r.example_id).collect();
    let resumed_groups = done.len();
    let todo: Vec<_> = examples.iter().filter(|e| !done.contains(&e.example_id)).collect();
    let groups_total = resumed_groups + todo.len();
    let r = config.rollouts_per_example.max(1);
    let in_flight = config.concurrency.max(1).div_ceil(r as usize) + 1;

    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&results_path)
        .map_err(io(&results_path))?;
    let mut progress =
        Progress { groups_done: resumed_groups, groups_total, ..Progress::default() };
    on_progress(progress);
    let (mut reward_sum, mut rollout_count) = (0.0, 0usize);
    let mut model_failures: Option<String> = None;
    let mut all_model_failed = true;
    // At most `concurrency` rollouts run at once, each with at most one request in flight; a
    // rollout's own time limit starts only when it gets its turn.
    let gate = tokio::sync::Semaphore::new(config.concurrency.max(1));
    let mut groups = futures::stream::iter(todo)
        .map(|example| gated_group(env, model, example, config, services, &gate))
        .buffer_unordered(in_flight);
    while let Some(group) = groups.next().await {
        let mut lines = Vec::new();
        for rollout in &group {
            serde_json::to_writer(&mut lines, rollout).map_err(|e| io(&results_path)(e.into()))?;
            lines.push(b'\n');
            reward_sum += rollout.reward;
            rollout_count += 1;
            match &rollout.error {
                Some(e) if e.source == "model" => {
                    model_failures.get_or_insert_with(|| e.message.clone());
                }
                _ => all_model_failed = false,
            }
            progress.errors += usize::from(rollout.error.is_some());
        }
        file.write_all(&lines).map_err(io(&results_path))?;
        progress.groups_done += 1;
        progress.reward_mean = reward_sum / rollout_count.max(1) as f64;
        on_progress(progress);
    }
    drop(groups);
    file.flush().map_err(io(&results_path))?;

    let all = recover(&results_path, r, false)?;
    let summary = summarize(&all, r as usize, config.pass_threshold);
    let mut metadata = header;
    let map = metadata.as_object_mut().expect("metadata is an object");
    map.insert("status".into(), json!("complete"));
    map.insert("finished_at".into(), json!(now()));
    map.insert("env".into(), json!({"name": env.info.name, "version": env.info.version, "content_hash": env.info.content_hash}));
    map.insert("model".into(), json!({"url": config.model_url, "name": config.model_name}));
    map.insert("sampling".into(), json!(config.sampling));
    map.insert(
        "counts".into(),
        json!({"examples": summary.examples, "rollouts": summary.rollouts, "errors": summary.errors,
               "rollouts_per_example": r}),
    );
    map.insert("error_rate".into(), json!(summary.error_rate));
    map.insert(
        "reward".into(),
        json!({"mean": summary.reward_mean, "std": summary.reward_std,
               "mean_without_errors": summary.reward_mean_without_errors}),
    );
    map.insert("scores".into(), json!(summary.scores));
    map.insert("pass_at_k".into(), json!(summary.pass_at_k));
    map.insert("pass_threshold".into(), json!(config.pass_threshold));
    map.insert("stop_reasons".into(), json!(summary.stop_reasons));
    map.insert("metrics".into(), json!(summary.metrics));
    let timings: BTreeMap<&str, f64> = BTreeMap::from([
        ("session_wall_s", started.elapsed().as_secs_f64()),
        ("generation_ms_mean", summary.generation_ms_mean),
        ("scoring_ms_mean", summary.scoring_ms_mean),
    ]);
    map.insert("timings".into(), json!(timings));
    write_atomic(
        &metadata_path,
        &serde_json::to_vec_pretty(&metadata).map_err(|e| io(&metadata_path)(e.into()))?,
    )?;

    let all_failed = if rollout_count > 0 && all_model_failed { model_failures } else { None };
    Ok(EvalReport { summary, metadata, resumed_groups, all_failed })
}
