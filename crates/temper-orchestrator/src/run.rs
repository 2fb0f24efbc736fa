//! The asynchronous loop of `temper orchestrator`.
//!
//! For each trainer step n (1-based; step n turns weights v(n−1) into v(n)):
//!
//! 1. **Gate**: wait until the servers hold weights v(n−1−async_level), so sampling runs at most
//!    `async_level` steps ahead of the trainer. Nothing is dispatched for step n before that.
//! 2. **Sweep**: a group whose rollouts began on a version older than
//!    v(n−1−max_off_policy_steps) is dropped, whether queued (the hard guarantee) or still in
//!    flight (cancelled to save compute). A whole group ages together: its version is the oldest
//!    its members report.
//! 3. **Collect**: dispatch groups (`group_size` rollouts of one task, all on one server) while
//!    under `max_concurrent` rollouts in flight, until `batch_size / group_size` groups are
//!    usable: rollouts with an error are left out (counted), advantages are computed over the
//!    rest, and groups with equal rewards are filtered (and replaced, with
//!    `resample_zero_advantage`).
//! 4. **Ship**: pack the samples into `rollouts/step_n/rank_R.json`, write `STABLE`, log the
//!    step's metrics, checkpoint the task position.
//!
//! Meanwhile a watcher loads the newest `weights/step_k/` (once `STABLE`) on every server, and
//! every version due for evaluation on the way there; when k is due it evaluates it on the
//! held-out split while holding further updates back, so the score belongs to exactly that
//! version.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use temper_envs::{Environment, LoadOptions, Services, Split};
use temper_protocol::metrics::{
    EvalScores, MetricsLine, OrchestratorStepLine, REWARD_MEAN, Writer,
};
use temper_protocol::run_dir::{self, STABLE};
use temper_protocol::{Rollout, SCHEMA_VERSION, StopReason, TrainSample};
use tokio::sync::{RwLock, mpsc};
use tokio::task::JoinSet;

use crate::advantage::{advantages, is_zero_advantage, shaped_reward};
use crate::batch::{Unusable, build_batches, sample_of};
use crate::collect::{Collector, Decision, Group, Policy, StepCounts};
use crate::config::OrchestratorConfig;
use crate::servers::Servers;
use crate::tasks::{TaskEnv, TaskSource, TaskState};
use crate::{OrchestratorError, metrics};
use temper_protocol::config::EvalConfig;

/// Where to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From step 1; the run directory must hold no batches yet.
    Fresh,
    /// After the newest orchestrator checkpoint.
    Latest,
    /// After the checkpoint of exactly this step (0: from the start, keeping nothing).
    At(u64),
}

/// What `temper orchestrator` calls back into, with the records written to `metrics.jsonl`.
pub trait OrchestratorHooks: Send {
    /// The loop starts after `start_step`.
    fn on_start(&mut self, _start_step: u64, _total: u64) {}
    /// A batch was shipped.
    fn on_step(&mut self, _metrics: &OrchestratorStepLine) {}
    /// Servers now serve `version`.
    fn on_weights(&mut self, _version: u64) {}
    /// An evaluation finished.
    fn on_eval(&mut self, _scores: &EvalScores) {}
    /// Stop now (each step is checkpointed as it ships).
    fn should_stop(&mut self) -> bool {
        false
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default)]
pub struct NoHooks;
impl OrchestratorHooks for NoHooks {}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Batches shipped (the last step number).
    pub steps: u64,
    /// Whether it stopped early.
    pub stopped: bool,
    /// The last evaluation, if one ran.
    pub last_eval: Option<EvalScores>,
}

/// The orchestrator's checkpoint: the task position after shipping `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrchestratorState {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The last batch shipped.
    pub step: u64,
    /// Where task sampling stands.
    pub tasks: TaskState,
}

/// Loads the environments of the config. `services` are shared by every rollout (the code
/// runner for code environments).
pub fn load_envs(cfg: &OrchestratorConfig) -> Result<Vec<Arc<Environment>>, OrchestratorError> {
    cfg.env
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let options = LoadOptions {
                seed: e.seed,
                train_size: e.train_size,
                eval_size: e.eval_size,
                allow_external: e.allow_external,
            };
            let mut env = temper_envs::load(&e.id, &options)
                .map_err(|err| OrchestratorError::Config(format!("env[{i}] ({}): {err}", e.id)))?;
            if let Some(prompt) = &e.system_prompt {
                env.system_prompt = (!prompt.is_empty()).then(|| prompt.clone());
            }
            Ok(Arc::new(env))
        })
        .collect()
}

struct Flight {
    version: u64,
    handle: tokio::task::AbortHandle,
}

/// Runs the orchestrator until `steps` batches are shipped and the trainer's last weights are
/// loaded (and evaluated, when evaluation is on).
pub async fn run(
    cfg: &OrchestratorConfig,
    services: Services,
    hooks: &mut dyn OrchestratorHooks,
    start: Start,
) -> Result<Summary, OrchestratorError> {
    cfg.validate()?;
    let envs = load_envs(cfg)?;
    run_with_envs(cfg, envs, services, hooks, start).await
}

/// [`run`] with the environments already built (one per `[[env]]`, in order; tests pass their
/// own).
pub async fn run_with_envs(
    cfg: &OrchestratorConfig,
    envs: Vec<Arc<Environment>>,
    services: Services,
    hooks: &mut dyn OrchestratorHooks,
    start: Start,
) -> Result<Summary, OrchestratorError> {
    let mut o = Orchestrator::start(cfg, envs, services, start).await?;
    hooks.on_start(o.start_step, cfg.orchestrator.steps);
    let result = o.run(hooks).await;
    o.close(result, hooks).await
}

/// The running loop: what every step reads and changes.
struct Orchestrator<'a> {
    cfg: &'a crate::config::LoopConfig,
    run: PathBuf,
    envs: Vec<Arc<Environment>>,
    services: Arc<Services>,
    servers: Servers,
    tasks: TaskSource,
    /// The weight version every server serves (set by the watcher).
    loaded: Arc<AtomicU64>,
    start_step: u64,
    inbox: Inbox,
    collector: Collector,
    watcher: tokio::task::JoinHandle<()>,
    _metrics_server: Option<temper_protocol::exposition::AbortOnDrop>,
}

impl<'a> Orchestrator<'a> {
    /// Checks the configuration, restores the resume point, waits for healthy servers, and
    /// starts the weight watcher (with the evaluation of the starting weights when due).
    async fn start(
        cfg: &'a OrchestratorConfig,
        envs: Vec<Arc<Environment>>,
        services: Services,
        start: Start,
    ) -> Result<Self, OrchestratorError> {
        cfg.validate()?;
        if envs.len() != cfg.env.len() {
            return Err(OrchestratorError::Config(format!(
                "{} environments for {} [[env]] entries",
                envs.len(),
                cfg.env.len()
            )));
        }
        let o = &cfg.orchestrator;
        let run = cfg.output.dir.clone();
        std::fs::create_dir_all(&run).map_err(|e| io(&run, e))?;
        let (start_step, task_state) = resume_point(&run, start)?;
        let tasks = TaskSource::new(task_envs(cfg, &envs)?, o.seed, task_state);
        let per_server = o.max_concurrent.div_ceil(cfg.inference.base_urls.len().max(1));
        let servers = Servers::new(&cfg.inference, per_server)?;
        servers.wait_healthy(Duration::from_secs_f64(cfg.inference.timeout_s)).await?;
        let gauges = temper_protocol::exposition::Gauges::default();
        let metrics_server = match &o.metrics_addr {
            Some(addr) => Some(metrics::serve(addr, gauges.clone(), &run).await?),
            None => None,
        };
        let services = Arc::new(services);
        let loaded = Arc::new(AtomicU64::new(0));
        let (events_tx, events) = mpsc::unbounded_channel::<Event>();
        let watcher = Watcher {
            run: run.clone(),
            servers: servers.clone(),
            loaded: loaded.clone(),
            lock: Arc::new(RwLock::new(())),
            timeout: Duration::from_secs_f64(o.update_timeout_s),
            eval: EvalConfig {
                max_tokens: o.eval.max_tokens.or(Some(o.sampling.max_tokens)),
                ..o.eval
            },
            steps: o.steps,
            envs: envs.clone(),
            services: services.clone(),
            events: events_tx,
        };
        if o.eval.every > 0 && start_step == 0 {
            // The starting point, before any update.
            let guard = watcher.lock.clone().write_owned().await.downgrade();
            watcher.spawn_eval(0, guard);
        }
        let inbox = Inbox {
            in_flight: JoinSet::new(),
            flights: BTreeMap::new(),
            queue: VecDeque::new(),
            events,
            last_eval: None,
            metrics_path: run_dir::metrics_file(&run),
            gauges,
        };
        let collector = Collector::new(Policy {
            needed: o.batch_size / o.group_size,
            group_size: o.group_size,
            max_concurrent: o.max_concurrent,
            filter_zero: o.advantage.filter_zero_advantage,
            resample: o.advantage.resample_zero_advantage,
        });
        Ok(Self {
            cfg: o,
            run,
            envs,
            services,
            servers,
            tasks,
            loaded,
            start_step,
            inbox,
            collector,
            watcher: tokio::spawn(watcher.run()),
            _metrics_server: metrics_server,
        })
    }

    /// The steps, each: gate on the served version, sweep stale work, collect, ship. Returns
    /// the last step shipped and whether the hooks stopped the run.
    async fn run(
        &mut self,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<(u64, bool), OrchestratorError> {
        let mut step = self.start_step;
        while step < self.cfg.steps {
            step += 1;
            let started = Instant::now();
            if !self.gate(step, hooks).await? {
                return Ok((step - 1, true));
            }
            let wait_gate_s = started.elapsed().as_secs_f64();
            tracing::debug!("step {step}: gate passed after {wait_gate_s:.2} s");
            self.sweep(step);
            let collect_started = Instant::now();
            if !self.collect(hooks).await? {
                return Ok((step - 1, true));
            }
            let timing = Timing { wait_gate_s, collect_s: collect_started.elapsed().as_secs_f64() };
            self.ship(step, timing, hooks)?;
            tracing::debug!("step {step} shipped in {:.2} s", started.elapsed().as_secs_f64());
        }
        Ok((step, false))
    }

    /// Waits until the servers hold weights v(step − 1 − async_level); false when stopped.
    async fn gate(
        &mut self,
        step: u64,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<bool, OrchestratorError> {
        let gate = (step - 1).saturating_sub(self.cfg.async_level);
        while self.loaded.load(Ordering::SeqCst) < gate {
            if hooks.should_stop() {
                return Ok(false);
            }
            self.inbox.wait(hooks).await?;
        }
        Ok(true)
    }

    /// Starts the step's collection: groups in flight since before the oldest version it allows
    /// are cancelled.
    fn sweep(&mut self, step: u64) {
        let oldest = (step - 1).saturating_sub(self.cfg.max_off_policy_steps);
        self.collector.begin(step, oldest);
        let collector = &mut self.collector;
        self.inbox.flights.retain(|_, f| {
            let keep = collector.keep_flight(f.version);
            if !keep {
                f.handle.abort();
            }
            keep
        });
    }

    /// Offers finished groups to the collector and starts what it asks for until the step has
    /// its groups; false when stopped.
    async fn collect(
        &mut self,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<bool, OrchestratorError> {
        loop {
            while self.collector.wants()
                && let Some(g) = self.inbox.queue.pop_front()
            {
                self.collector.offer(g);
            }
            self.collector.check()?;
            match self.collector.decide(self.inbox.flights.len(), self.inbox.queue.len()) {
                Decision::Ship => return Ok(true),
                Decision::Dispatch(n) => (0..n).for_each(|_| self.dispatch()),
                Decision::Wait => {}
            }
            if hooks.should_stop() {
                return Ok(false);
            }
            self.inbox.wait(hooks).await?;
        }
    }

    /// Starts one group on the next task, on the least-loaded server.
    fn dispatch(&mut self) {
        let o = self.cfg;
        let (env_index, example) = self.tasks.next_task();
        let env = self.tasks.envs()[env_index].env.clone();
        let version = self.loaded.load(Ordering::SeqCst);
        let lease = self.servers.lease();
        let sampling = o.sampling.params(Some(o.seed ^ self.tasks.state().draws.rotate_left(20)));
        let services = self.services.clone();
        let (group_size, adv_cfg) = (o.group_size as u32, o.advantage);
        let handle = self.inbox.in_flight.spawn(async move {
            let rollouts = env.run_group(&lease, &example, group_size, &sampling, &services).await;
            drop(lease);
            score_group(env_index, version, rollouts, &adv_cfg)
        });
        self.inbox.flights.insert(handle.id(), Flight { version, handle });
    }

    /// Writes the step's batches, its metrics line, and the task position.
    fn ship(
        &mut self,
        step: u64,
        timing: Timing,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<(), OrchestratorError> {
        let collected = self.collector.finish();
        let loaded = self.loaded.load(Ordering::SeqCst);
        let ship = Ship { step, o: self.cfg, counts: &collected.counts, timing, loaded };
        let line = ship_step(&self.run, &ship, &collected.chosen, &collected.filtered, &self.envs)?;
        hooks.on_step(&line);
        self.inbox.record(&MetricsLine::Orchestrator(line))?;
        save_state(&self.run, step, self.tasks.state())
    }

    /// Ends the run: on success (not stopped), waits for the trainer's last weights and their
    /// evaluation first.
    async fn close(
        mut self,
        result: Result<(u64, bool), OrchestratorError>,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<Summary, OrchestratorError> {
        self.inbox.in_flight.abort_all();
        let outcome = match result {
            Ok((steps, stopped)) if !stopped => {
                self.last_weights(hooks).await.map(|()| (steps, stopped))
            }
            other => other,
        };
        self.watcher.abort();
        let (steps, stopped) = outcome?;
        Ok(Summary { steps, stopped, last_eval: self.inbox.last_eval })
    }

    /// Waits until the servers serve the last step's weights and, with evaluation on, that
    /// version's evaluation is in (or the hooks stop it).
    async fn last_weights(
        &mut self,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<(), OrchestratorError> {
        let (steps, due_eval) = (self.cfg.steps, self.cfg.eval.every > 0);
        loop {
            let have = self.loaded.load(Ordering::SeqCst);
            let evaluated = self.inbox.last_eval.as_ref().map(|e| e.step) == Some(steps);
            if (have >= steps && (!due_eval || evaluated)) || hooks.should_stop() {
                return Ok(());
            }
            match tokio::time::timeout(Duration::from_millis(100), self.inbox.events.recv()).await {
                Ok(Some(ev)) => self.inbox.handle(ev, hooks)?,
                Ok(None) => return Ok(()),
                Err(_) => {}
            }
        }
    }
}

/// Each environment with its train examples and draw weight.
fn task_envs(
    cfg: &OrchestratorConfig,
    envs: &[Arc<Environment>],
) -> Result<Vec<TaskEnv>, OrchestratorError> {
    envs.iter()
        .zip(&cfg.env)
        .map(|(env, c)| {
            let examples = env
                .examples(Split::Train)
                .map_err(|e| OrchestratorError::Config(format!("env {}: {e}", c.id)))?;
            if examples.is_empty() {
                return Err(OrchestratorError::Config(format!("env {}: no train examples", c.id)));
            }
            Ok(TaskEnv { env: env.clone(), weight: c.weight, examples: Arc::new(examples) })
        })
        .collect()
}

/// How long a step waited at the gate and collected.
#[derive(Debug, Clone, Copy)]
struct Timing {
    wait_gate_s: f64,
    collect_s: f64,
}

fn score_group(
    env: usize,
    dispatched: u64,
    rollouts: Vec<Rollout>,
    cfg: &crate::config::AdvantageConfig,
) -> Group {
    let version = rollouts.iter().filter_map(|r| r.policy_version).min().unwrap_or(dispatched);
    let ok: Vec<usize> = (0..rollouts.len()).filter(|&i| rollouts[i].error.is_none()).collect();
    let rewards: Vec<f64> = ok.iter().map(|&i| shaped_reward(&rollouts[i], cfg)).collect();
    let adv = advantages(&rewards, cfg);
    let mut out = vec![None; rollouts.len()];
    for (k, &i) in ok.iter().enumerate() {
        out[i] = Some(adv[k]);
    }
    let zero = ok.len() < 2 || is_zero_advantage(&rewards);
    Group { env, version, rollouts, advantages: out, zero }
}

#[derive(Debug)]
enum Event {
    Weights(u64),
    Eval(EvalScores),
    Failed(OrchestratorError),
}

/// What the loop waits on: rollout groups in flight and done, and the watcher's events (whose
/// evaluation lines it writes).
struct Inbox {
    in_flight: JoinSet<Group>,
    /// The in-flight groups not swept as stale, with the version they were dispatched at.
    flights: BTreeMap<tokio::task::Id, Flight>,
    /// Finished groups not yet taken into a batch.
    queue: VecDeque<Group>,
    events: mpsc::UnboundedReceiver<Event>,
    last_eval: Option<EvalScores>,
    metrics_path: PathBuf,
    gauges: temper_protocol::exposition::Gauges,
}

impl Inbox {
    /// Waits for the next finished group or watcher event (at most 100 ms).
    async fn wait(&mut self, hooks: &mut dyn OrchestratorHooks) -> Result<(), OrchestratorError> {
        tokio::select! {
            Some(done) = self.in_flight.join_next_with_id(), if !self.in_flight.is_empty() => {
                match done {
                    Ok((id, group)) => {
                        // A group whose flight was swept as stale is dropped when it lands.
                        if self.flights.remove(&id).is_some() {
                            self.queue.push_back(group);
                        }
                    }
                    Err(e) if e.is_cancelled() => {}
                    Err(e) => return Err(OrchestratorError::Rollouts(format!("a rollout task failed: {e}"))),
                }
            }
            Some(ev) = self.events.recv() => self.handle(ev, hooks)?,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        Ok(())
    }

    /// Appends `line` to `metrics.jsonl` and shows it on `/metrics`.
    fn record(&self, line: &MetricsLine) -> Result<(), OrchestratorError> {
        temper_protocol::metrics::append(&self.metrics_path, line)
            .map_err(|e| io(&self.metrics_path, e))?;
        self.gauges.set_all(line);
        Ok(())
    }

    fn handle(
        &mut self,
        ev: Event,
        hooks: &mut dyn OrchestratorHooks,
    ) -> Result<(), OrchestratorError> {
        match ev {
            Event::Weights(v) => hooks.on_weights(v),
            Event::Eval(scores) => {
                hooks.on_eval(&scores);
                self.record(&MetricsLine::Eval(scores.clone()))?;
                self.last_eval = Some(scores);
            }
            Event::Failed(e) => return Err(e),
        }
        Ok(())
    }
}

struct Ship<'a> {
    step: u64,
    o: &'a crate::config::LoopConfig,
    counts: &'a StepCounts,
    timing: Timing,
    loaded: u64,
}

/// The trainable samples of `groups`, the staleness of each (steps behind the trainer), and how
/// many rollouts could not be trained on, by reason.
type Samples = (Vec<TrainSample>, Vec<u64>, BTreeMap<&'static str, u64>);

/// Writes the batch files and `STABLE`, and returns the step's metrics line.
fn ship_step(
    run: &Path,
    ship: &Ship<'_>,
    groups: &[Group],
    filtered: &[Group],
    envs: &[Arc<Environment>],
) -> Result<OrchestratorStepLine, OrchestratorError> {
    let (o, step) = (ship.o, ship.step);
    let (samples, staleness, unusable) = samples_of(groups, o, step);
    if samples.is_empty() {
        return Err(OrchestratorError::Rollouts(format!(
            "step {step}: no rollout can be trained on ({unusable:?}); check that the inference server returns token ids and that seq_len ({}) holds prompt + max_tokens",
            o.seq_len
        )));
    }
    let trained_tokens = write_batches(run, step, samples, o)?;
    Ok(step_metrics(ship, groups, filtered, envs, (&staleness, &unusable, trained_tokens)))
}

fn samples_of(groups: &[Group], o: &crate::config::LoopConfig, step: u64) -> Samples {
    let mut unusable: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut samples: Vec<TrainSample> = Vec::new();
    let mut staleness: Vec<u64> = Vec::new();
    for g in groups {
        for (r, a) in g.rollouts.iter().zip(&g.advantages) {
            let Some(a) = a else { continue };
            match sample_of(r, *a, o.sampling.temperature, g.version, o.seq_len) {
                Ok(s) => {
                    samples.push(s);
                    staleness.push((step - 1).saturating_sub(g.version));
                }
                Err(why) => {
                    let key = match why {
                        Unusable::NoTokens => "no_tokens",
                        Unusable::TooLong => "too_long",
                        Unusable::NoLossTokens => "no_loss_tokens",
                    };
                    *unusable.entry(key).or_default() += 1;
                }
            }
        }
    }
    (samples, staleness, unusable)
}

/// Packs `samples` into per-rank batch files, then `STABLE`; returns the tokens trained on.
fn write_batches(
    run: &Path,
    step: u64,
    samples: Vec<TrainSample>,
    o: &crate::config::LoopConfig,
) -> Result<u64, OrchestratorError> {
    let batches = build_batches(step, samples, o.seq_len, o.micro_batch_rows, o.world_size);
    let dir = run_dir::batch_dir(run, step);
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let mut trained_tokens = 0u64;
    for b in &batches {
        let path = run_dir::batch_file(run, step, b.rank);
        let bytes = serde_json::to_vec(b).map_err(OrchestratorError::Json)?;
        temper_protocol::fsio::write_atomic(&path, &bytes).map_err(|e| io(&path, e))?;
        trained_tokens +=
            b.micro_batches.iter().flatten().map(|s| s.token_ids.len() as u64).sum::<u64>();
    }
    std::fs::write(dir.join(STABLE), b"").map_err(|e| io(&dir, e))?;
    Ok(trained_tokens)
}

/// The step's metrics line. `trained`: each sample's staleness, unusable rollouts by reason, and
/// the tokens trained on.
fn step_metrics(
    ship: &Ship<'_>,
    groups: &[Group],
    filtered: &[Group],
    envs: &[Arc<Environment>],
    trained: (&[u64], &BTreeMap<&'static str, u64>, u64),
) -> OrchestratorStepLine {
    let (staleness, unusable, tokens_trained) = trained;
    // Metrics over every rollout consumed this step (filtered groups included: their rewards are
    // part of what the policy does).
    let all: Vec<&Rollout> = groups.iter().chain(filtered).flat_map(|g| &g.rollouts).collect();
    let n = all.len().max(1) as f64;
    let rewards: Vec<f64> = all.iter().map(|r| r.reward).collect();
    let mean = rewards.iter().sum::<f64>() / n;
    let std = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    let completion_tokens: Vec<f64> =
        all.iter().map(|r| r.metrics.get("completion_tokens").copied().unwrap_or(0.0)).collect();
    let truncated = all
        .iter()
        .filter(|r| matches!(r.stop_reason, StopReason::Length | StopReason::TokenBudget))
        .count();
    let seq_lens: Vec<f64> = all
        .iter()
        .filter_map(|r| r.tokens.as_ref())
        .map(|t| (t.prompt_ids.len() + t.completion_ids.len()) as f64)
        .collect();
    let mut per_env: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
    for g in groups.iter().chain(filtered) {
        let e = per_env.entry(g.env).or_default();
        e.0 += g.rollouts.iter().map(|r| r.reward).sum::<f64>();
        e.1 += g.rollouts.len();
    }
    let c = ship.counts;
    let metrics = temper_protocol::metrics::OrchestratorStep {
        step: ship.step,
        reward_mean: mean,
        reward_std: std,
        samples: staleness.len() as u64,
        groups_trained: groups.len() as u64,
        groups_filtered: c.filtered_groups,
        groups_stale: c.stale_groups,
        groups_cancelled: c.cancelled_groups,
        rollouts_stale: c.stale_rollouts,
        rollouts_dropped_trace: all
            .iter()
            .filter(|r| r.metrics.contains_key("token_trace_broken"))
            .count() as u64,
        errors: c.errors,
        seq_len: mean_of(&seq_lens),
        completion_len: mean_of(&completion_tokens),
        truncated: truncated as f64 / n,
        off_policy_max: staleness.iter().max().copied().unwrap_or(0),
        off_policy_mean: staleness.iter().sum::<u64>() as f64 / staleness.len().max(1) as f64,
        policy_version: ship.loaded,
        tokens_per_s: completion_tokens.iter().sum::<f64>() / ship.timing.collect_s.max(1e-9),
        tokens_trained,
        wait_gate_s: ship.timing.wait_gate_s,
        collect_s: ship.timing.collect_s,
        generation_ms: all.iter().map(|r| r.timings.generation_ms).sum::<f64>() / n,
        scoring_ms: all.iter().map(|r| r.timings.scoring_ms).sum::<f64>() / n,
    };
    OrchestratorStepLine {
        metrics,
        env_reward: per_env
            .into_iter()
            .map(|(env, (sum, count))| (envs[env].info.name.clone(), sum / count.max(1) as f64))
            .collect(),
        dropped: unusable.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

fn mean_of(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn io(path: &Path, e: std::io::Error) -> OrchestratorError {
    OrchestratorError::Io { path: path.to_owned(), source: e }
}

fn state_dir(run: &Path) -> PathBuf {
    run_dir::checkpoints_dir(run, "orchestrator")
}

/// Orchestrator checkpoints kept (each a few bytes; enough to rewind to any trainer checkpoint).
const KEEP_STATES: usize = 1000;

fn save_state(run: &Path, step: u64, tasks: &TaskState) -> Result<(), OrchestratorError> {
    let root = state_dir(run);
    let dir = root.join(format!("step_{step}"));
    let tmp = root.join(format!("step_{step}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| io(&tmp, e))?;
    let state = OrchestratorState { schema_version: SCHEMA_VERSION, step, tasks: tasks.clone() };
    let bytes = serde_json::to_vec_pretty(&state).map_err(OrchestratorError::Json)?;
    std::fs::write(tmp.join("state.json"), bytes).map_err(|e| io(&tmp, e))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).map_err(|e| io(&dir, e))?;
    let steps = saved_steps(run);
    for old in steps.iter().rev().skip(KEEP_STATES) {
        let _ = std::fs::remove_dir_all(root.join(format!("step_{old}")));
    }
    Ok(())
}

/// Steps with a complete orchestrator checkpoint, ascending.
pub fn saved_steps(run: &Path) -> Vec<u64> {
    let mut steps: Vec<u64> = std::fs::read_dir(state_dir(run))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| run_dir::parse_step(&e.file_name().to_string_lossy()))
        .filter(|s| state_dir(run).join(format!("step_{s}")).join("state.json").is_file())
        .collect();
    steps.sort_unstable();
    steps
}

fn load_state(run: &Path, step: u64) -> Result<OrchestratorState, OrchestratorError> {
    let path = state_dir(run).join(format!("step_{step}")).join("state.json");
    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
    let state: OrchestratorState = serde_json::from_slice(&bytes)
        .map_err(|e| OrchestratorError::BadFile { path: path.clone(), message: e.to_string() })?;
    if state.schema_version > SCHEMA_VERSION || state.step != step {
        return Err(OrchestratorError::BadFile {
            path,
            message: format!(
                "schema {} step {} (expected ≤ {SCHEMA_VERSION}, step {step})",
                state.schema_version, state.step
            ),
        });
    }
    Ok(state)
}

fn resume_point(run: &Path, start: Start) -> Result<(u64, Option<TaskState>), OrchestratorError> {
    let step = match start {
        Start::Fresh => {
            let has_batches = std::fs::read_dir(run.join("rollouts"))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if has_batches || !saved_steps(run).is_empty() {
                return Err(OrchestratorError::Config(format!(
                    "{} already holds batches; resume the run or start in an empty directory",
                    run.display()
                )));
            }
            return Ok((0, None));
        }
        Start::Latest => saved_steps(run).last().copied().unwrap_or(0),
        Start::At(step) => step,
    };
    // Batches after the resume point are re-made from the restored position.
    if let Ok(entries) = std::fs::read_dir(run.join("rollouts")) {
        for e in entries.flatten() {
            if run_dir::parse_step(&e.file_name().to_string_lossy()).is_some_and(|s| s > step) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    if step == 0 {
        return Ok((0, None));
    }
    let state = load_state(run, step)?;
    Ok((step, Some(state.tasks)))
}

/// The version to load next when the servers hold `have` and the newest published is `newest`:
/// the first version due for evaluation (a multiple of `every`) between them whose weights are
/// still there, else `newest`. A trainer that publishes two versions between two looks at the
/// directory (a small model's step is shorter than a weight load) would otherwise step over a
/// due evaluation.
fn next_version(run: &Path, every: u64, have: u64, newest: u64) -> u64 {
    if every == 0 {
        return newest;
    }
    let mut due = (have / every + 1) * every;
    while due < newest {
        if run_dir::weights_dir(run, due).join(STABLE).is_file() {
            return due;
        }
        tracing::warn!("no evaluation of v{due}: its weights were removed before it was loaded");
        due += every;
    }
    newest
}

/// Loads new weights on the servers and evaluates the due versions.
struct Watcher {
    run: PathBuf,
    servers: Servers,
    loaded: Arc<AtomicU64>,
    lock: Arc<RwLock<()>>,
    timeout: Duration,
    eval: EvalConfig,
    steps: u64,
    envs: Vec<Arc<Environment>>,
    services: Arc<Services>,
    events: mpsc::UnboundedSender<Event>,
}

impl Watcher {
    fn newest_weights(&self) -> Option<u64> {
        std::fs::read_dir(self.run.join("weights"))
            .ok()?
            .flatten()
            .filter_map(|e| run_dir::parse_step(&e.file_name().to_string_lossy()))
            .filter(|&s| run_dir::weights_dir(&self.run, s).join(STABLE).is_file())
            .max()
    }

    /// The trainer has consumed every batch up to `version`: keep the last two for inspection.
    fn prune_batches(&self, version: u64) {
        let Ok(entries) = std::fs::read_dir(self.run.join("rollouts")) else { return };
        for e in entries.flatten() {
            if run_dir::parse_step(&e.file_name().to_string_lossy())
                .is_some_and(|s| s + 2 <= version)
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    fn due(&self, version: u64) -> bool {
        self.eval.every > 0 && (version.is_multiple_of(self.eval.every) || version == self.steps)
    }

    async fn run(self) {
        let mut failing_since: Option<Instant> = None;
        loop {
            let have = self.loaded.load(Ordering::SeqCst);
            match self.newest_weights() {
                Some(newest) if newest > have => {
                    let v = next_version(&self.run, self.eval.every, have, newest);
                    let guard = self.lock.clone().write_owned().await;
                    let dir = run_dir::weights_dir(&self.run, v);
                    match self.servers.update_weights(&dir, v, self.timeout).await {
                        Ok(()) => {
                            failing_since = None;
                            self.loaded.store(v, Ordering::SeqCst);
                            tracing::info!("servers serve weights v{v}");
                            self.prune_batches(v);
                            let _ = self.events.send(Event::Weights(v));
                            if self.due(v) {
                                self.spawn_eval(v, guard.downgrade());
                            }
                        }
                        Err(e) => {
                            drop(guard);
                            let since = *failing_since.get_or_insert_with(Instant::now);
                            tracing::warn!("weight update to v{v} failed: {e}");
                            if since.elapsed() > self.timeout {
                                let _ = self.events.send(Event::Failed(e));
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Evaluates `version` on every environment's held-out split; `guard` holds weight updates
    /// back until it is done.
    fn spawn_eval(&self, version: u64, guard: tokio::sync::OwnedRwLockReadGuard<()>) {
        let envs = self.envs.clone();
        let servers = self.servers.clone();
        let services = self.services.clone();
        let eval = self.eval;
        let events = self.events.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            tracing::debug!("evaluating v{version}");
            let line = evaluate(&envs, &servers, &services, &eval, version).await;
            drop(guard);
            tracing::debug!("evaluated v{version} in {:.2} s", started.elapsed().as_secs_f64());
            match line {
                Ok(mut line) => {
                    line.seconds = Some(started.elapsed().as_secs_f64());
                    let _ = events.send(Event::Eval(line));
                }
                Err(e) => {
                    let _ = events.send(Event::Failed(e));
                }
            }
        });
    }
}

/// The scores of one evaluation: per environment `reward/mean`, `avg@k`, `pass@k`, `errors`.
async fn evaluate(
    envs: &[Arc<Environment>],
    servers: &Servers,
    services: &Services,
    eval: &EvalConfig,
    version: u64,
) -> Result<EvalScores, OrchestratorError> {
    let mut line = EvalScores::new(version, Writer::Orchestrator);
    let sampling = temper_protocol::SamplingParams {
        temperature: Some(eval.temperature),
        max_tokens: eval.max_tokens,
        seed: Some(version),
        ..temper_protocol::SamplingParams::default()
    };
    let k = eval.rollouts_per_example.max(1);
    for env in envs {
        let mut examples = env
            .examples(Split::Eval)
            .map_err(|e| OrchestratorError::Config(format!("env {}: {e}", env.info.name)))?;
        if eval.num_examples > 0 {
            examples.truncate(eval.num_examples);
        }
        let groups = examples.iter().map(|ex| {
            let lease = servers.lease();
            let sampling = sampling.clone();
            async move { env.run_group(&lease, ex, k as u32, &sampling, services).await }
        });
        let rollouts: Vec<Rollout> =
            futures::future::join_all(groups).await.into_iter().flatten().collect();
        let summary = temper_envs::stats::summarize(&rollouts, k, eval.pass_threshold);
        let name = &env.info.name;
        line.set(name, REWARD_MEAN, summary.reward_mean);
        line.set(name, &format!("avg@{k}"), summary.reward_mean);
        for (kk, p) in &summary.pass_at_k {
            line.set(name, &format!("pass@{kk}"), *p);
        }
        line.set(name, "errors", summary.errors as f64);
        let versions: Vec<u64> = rollouts.iter().filter_map(|r| r.policy_version).collect();
        if let (Some(lo), Some(hi)) = (versions.iter().min(), versions.iter().max())
            && (*lo != version || *hi != version)
        {
            tracing::warn!("evaluation of v{version} saw versions {lo}..={hi}");
        }
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_version_the_trainer_passed_is_loaded_before_the_newest() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path();
        let publish = |k: u64| {
            let dir = run_dir::weights_dir(run, k);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(STABLE), "").unwrap();
        };
        for k in [19, 20, 21] {
            publish(k);
        }
        // Servers at v19, the trainer already at v21: v20 is due (every 20) and comes first.
        assert_eq!(next_version(run, 20, 19, 21), 20);
        // Then on to the newest; nothing due between.
        assert_eq!(next_version(run, 20, 20, 21), 21);
        assert_eq!(next_version(run, 5, 21, 24), 24);
        // The newest is itself due: no detour.
        assert_eq!(next_version(run, 20, 19, 20), 20);
        // No evaluations: always the newest.
        assert_eq!(next_version(run, 0, 19, 21), 21);
        // A due version whose weights are gone is skipped for the next due one that is there.
        for k in [30, 41] {
            publish(k);
        }
        assert_eq!(next_version(run, 10, 21, 41), 30);
        std::fs::remove_file(run_dir::weights_dir(run, 30).join(STABLE)).unwrap();
        assert_eq!(next_version(run, 10, 21, 41), 41);
    }
}
