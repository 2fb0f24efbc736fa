//! The records of `metrics.jsonl`: every metric temper writes is named here, once.
//!
//! Contract: producers are the trainer (one [`TrainerStep`] per RL step, one [`UpdateStep`] per SFT
//! step) and the orchestrator (one [`OrchestratorStep`] per RL step); both write [`EvalScores`]
//! for held-out evaluations. Consumers are `temper rl`'s step line, `temper plot`, the
//! orchestrator's Prometheus gauges, tests and people. Each line is one JSON object with `step`
//! and `role` (the process that wrote it: `trainer`, `sft`, `orchestrator`); evaluation lines
//! add `"kind": "eval"`. Keys are flat, slash-separated names (`reward/mean`), as experiment
//! trackers expect; the per-environment families are `reward/<env>/mean`, `dropped/<reason>` and
//! `eval/<env>/<stat>`.
//!
//! What must hold: a line is appended with one `write` on a file opened for appending, so lines
//! of processes appending at once never interleave ([`append`]). Readers are lenient: a key this
//! version does not know is ignored, a missing number reads as NaN (a missing count as 0), a
//! line of an unknown role is skipped, and an evaluation line written before `kind` existed is
//! recognised by its `eval/` keys. A metric that is not a finite number (NaN) is written as
//! `null`, as serde_json does, and read back as NaN.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde_json::{Map, Value};

/// A value one metric can hold, with how it is written, read leniently and shown as a gauge.
pub trait MetricValue: Sized {
    /// The JSON value written.
    fn to_json(&self) -> Value;
    /// The value read from `v` (absent or of another type: [`MetricValue::missing`]).
    fn from_json(v: Option<&Value>) -> Self;
    /// The value of a metric a line does not carry.
    fn missing() -> Self;
    /// The value as a Prometheus gauge.
    fn gauge(&self) -> f64;
}

impl MetricValue for f64 {
    fn to_json(&self) -> Value {
        serde_json::Number::from_f64(*self).map_or(Value::Null, Value::Number)
    }
    fn from_json(v: Option<&Value>) -> Self {
        v.and_then(Value::as_f64).unwrap_or(f64::NAN)
    }
    fn missing() -> Self {
        f64::NAN
    }
    fn gauge(&self) -> f64 {
        *self
    }
}

impl MetricValue for u64 {
    fn to_json(&self) -> Value {
        Value::from(*self)
    }
    fn from_json(v: Option<&Value>) -> Self {
        v.and_then(|v| v.as_u64().or_else(|| v.as_f64().filter(|x| *x >= 0.0).map(|x| x as u64)))
            .unwrap_or(0)
    }
    fn missing() -> Self {
        0
    }
    fn gauge(&self) -> f64 {
        *self as f64
    }
}

impl MetricValue for bool {
    fn to_json(&self) -> Value {
        Value::Bool(*self)
    }
    fn from_json(v: Option<&Value>) -> Self {
        v.and_then(Value::as_bool).unwrap_or(false)
    }
    fn missing() -> Self {
        false
    }
    fn gauge(&self) -> f64 {
        f64::from(u8::from(*self))
    }
}

/// What a record opens with: its step (`u64`, the `step` key every line has) or another record
/// whose metrics it carries too (a [`TrainerStep`] opens with the [`UpdateStep`] every optimiser
/// step reports).
pub trait RecordHead: Sized {
    /// The step the line is about.
    fn step(&self) -> u64;
    /// The head's metrics as `(wire name, value)`.
    fn head_gauges(&self) -> Vec<(String, f64)>;
    /// Writes the head's metrics into `m`.
    fn write_head(&self, m: &mut Map<String, Value>);
    /// Reads the head from `m`.
    fn read_head(m: &Map<String, Value>) -> Self;
    /// The wire names of the head's metrics.
    fn head_keys() -> Vec<&'static str>;
}

/// The step itself: written by [`MetricsLine`], not as a metric.
impl RecordHead for u64 {
    fn step(&self) -> u64 {
        *self
    }
    fn head_gauges(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
    fn write_head(&self, _: &mut Map<String, Value>) {}
    fn read_head(m: &Map<String, Value>) -> Self {
        u64::from_json(m.get("step"))
    }
    fn head_keys() -> Vec<&'static str> {
        Vec::new()
    }
}

/// A record with named metrics: the struct, its wire names, and its conversions.
macro_rules! record {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(#[doc = $hdoc:literal])* $head:ident : $hty:ty;
            $( $(#[doc = $doc:literal])* $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $(#[doc = $hdoc])* pub $head: $hty,
            $( $(#[doc = $doc])* #[doc = concat!("\n\nWire name `", $key, "`.")] pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $head: Default::default(), $( $field: <$ty as MetricValue>::missing(), )* }
            }
        }

        impl RecordHead for $name {
            fn step(&self) -> u64 {
                self.$head.step()
            }
            fn head_gauges(&self) -> Vec<(String, f64)> {
                self.gauges()
            }
            fn write_head(&self, m: &mut Map<String, Value>) {
                self.write_fields(m)
            }
            fn read_head(m: &Map<String, Value>) -> Self {
                Self::read_fields(m)
            }
            fn head_keys() -> Vec<&'static str> {
                Self::keys()
            }
        }

        impl $name {
            /// The wire name of every metric of this record, in order.
            pub fn keys() -> Vec<&'static str> {
                let mut keys = <$hty as RecordHead>::head_keys();
                keys.extend([$($key),*]);
                keys
            }

            /// Each metric's wire name and value as a gauge.
            pub fn gauges(&self) -> Vec<(String, f64)> {
                let mut out = self.$head.head_gauges();
                $( out.push(($key.to_owned(), MetricValue::gauge(&self.$field))); )*
                out
            }

            fn write_fields(&self, m: &mut Map<String, Value>) {
                self.$head.write_head(m);
                $( m.insert($key.into(), MetricValue::to_json(&self.$field)); )*
            }

            fn read_fields(m: &Map<String, Value>) -> Self {
                Self {
                    $head: <$hty as RecordHead>::read_head(m),
                    $( $field: <$ty as MetricValue>::from_json(m.get($key)), )*
                }
            }
        }
    };
}

record! {
    /// What every optimiser step reports: an SFT step (`role: sft`) and the first part of an RL
    /// step's [`TrainerStep`].
    pub struct UpdateStep {
        /// The step the line is about.
        step: u64;
        /// The loss, as optimised (a sum over loss tokens divided by their count; SFT: the mean
        /// negative log-likelihood).
        loss: f64 = "loss/mean",
        /// Mean entropy of the trainer's distribution over loss tokens.
        entropy: f64 = "entropy/mean",
        /// Global gradient norm before clipping.
        grad_norm: f64 = "grad_norm",
        /// Learning rate of the step.
        lr: f64 = "lr",
        /// Tokens trained on per second of step time.
        tokens_per_s: f64 = "throughput/tokens_per_s",
        /// Seconds the step took.
        step_s: f64 = "time/step",
        /// Whether the update was skipped (a non-finite loss or gradient).
        skipped: bool = "skipped",
    }
}

record! {
    /// What the trainer did in one RL step (`role: trainer`): the update, and how far the
    /// engine's sampling was from the trainer's policy.
    pub struct TrainerStep {
        /// The optimiser step.
        update: UpdateStep;
        /// Mean per-token KL between the engine's sampling distribution and the trainer's.
        mismatch_kl: f64 = "mismatch_kl/mean",
        /// Fraction of loss tokens masked for an importance ratio above the upper bound.
        masked_high: f64 = "masked/high",
        /// Fraction of loss tokens masked for an importance ratio below the lower bound.
        masked_low: f64 = "masked/low",
        /// Fraction of loss tokens whose term was clipped.
        clipped: f64 = "clipped/fraction",
        /// Seconds spent waiting for the step's batch.
        wait_batch_s: f64 = "time/wait_batch",
    }
}

record! {
    /// What the orchestrator shipped for one RL step (`role: orchestrator`); the
    /// per-environment rewards and the dropped rollouts by reason are in
    /// [`OrchestratorStepLine`].
    pub struct OrchestratorStep {
        /// The step the line is about.
        step: u64;
        /// Mean reward of every rollout consumed this step (filtered groups included).
        reward_mean: f64 = "reward/mean",
        /// Population standard deviation of those rewards.
        reward_std: f64 = "reward/std",
        /// Samples in the step's batch.
        samples: u64 = "samples",
        /// Groups trained on.
        groups_trained: u64 = "groups/trained",
        /// Groups left out because every rollout had the same advantage.
        groups_filtered: u64 = "groups/filtered",
        /// Groups dropped for being too far behind the policy.
        groups_stale: u64 = "groups/stale",
        /// Groups cancelled in flight for the same reason.
        groups_cancelled: u64 = "groups/cancelled",
        /// Rollouts in the stale groups.
        rollouts_stale: u64 = "rollouts/stale",
        /// Multi-turn rollouts whose token trace could not be kept (the server re-rendered the
        /// conversation and it no longer extended the sampled tokens): not trained on.
        rollouts_dropped_trace: u64 = "rollouts/dropped_trace",
        /// Rollouts or groups that failed (model or environment errors).
        errors: u64 = "errors/count",
        /// Mean tokens (prompt and completion) of a rollout.
        seq_len: f64 = "seq_len/mean",
        /// Mean completion tokens of a rollout.
        completion_len: f64 = "completion_len/mean",
        /// Fraction of rollouts stopped by a token limit.
        truncated: f64 = "truncated/fraction",
        /// Largest number of steps a sample's policy was behind.
        off_policy_max: u64 = "off_policy/max",
        /// Mean number of steps a sample's policy was behind.
        off_policy_mean: f64 = "off_policy/mean",
        /// Weight version the inference servers held when the step shipped.
        policy_version: u64 = "policy_version",
        /// Completion tokens generated per second of collection.
        tokens_per_s: f64 = "throughput/tokens_per_s",
        /// Tokens in the step's batch.
        tokens_trained: u64 = "tokens/trained",
        /// Seconds waiting for the served version to be recent enough.
        wait_gate_s: f64 = "time/wait_gate",
        /// Seconds collecting groups.
        collect_s: f64 = "time/collect",
        /// Mean model time of a rollout, in milliseconds.
        generation_ms: f64 = "time/generation_ms",
        /// Mean scoring time of a rollout, in milliseconds.
        scoring_ms: f64 = "time/scoring_ms",
    }
}

/// An orchestrator step line: the fixed metrics and the per-environment families.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrchestratorStepLine {
    /// The metrics every step has.
    pub metrics: OrchestratorStep,
    /// Mean reward per environment (`reward/<env>/mean`).
    pub env_reward: BTreeMap<String, f64>,
    /// Rollouts that could not become samples, by reason (`dropped/<reason>`).
    pub dropped: BTreeMap<String, u64>,
}

/// The role that wrote a line (the process, not the kind of record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// `temper trainer` (RL).
    Trainer,
    /// `temper sft`.
    Sft,
    /// `temper orchestrator`.
    Orchestrator,
}

impl Writer {
    /// The `role` written.
    pub fn name(self) -> &'static str {
        match self {
            Writer::Trainer => "trainer",
            Writer::Sft => "sft",
            Writer::Orchestrator => "orchestrator",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Writer::Trainer, Writer::Sft, Writer::Orchestrator].into_iter().find(|w| w.name() == s)
    }
}

/// Held-out evaluation of one policy version (`kind: eval`): `eval/<env>/<stat>` per
/// environment (`reward/mean`, `avg@k`, `pass@k`, a rubric function's `<name>/mean`), SFT's
/// validation loss, and the time the evaluation took.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalScores {
    /// The policy version (RL) or step (SFT) evaluated.
    pub step: u64,
    /// Who evaluated.
    pub writer: Writer,
    /// Scores by environment, then statistic.
    pub scores: BTreeMap<String, BTreeMap<String, f64>>,
    /// Mean loss on the validation records (`eval/loss`, SFT).
    pub loss: Option<f64>,
    /// Seconds the evaluation took (`time/eval`).
    pub seconds: Option<f64>,
}

/// The statistic of an environment's mean reward.
pub const REWARD_MEAN: &str = "reward/mean";

impl EvalScores {
    /// An evaluation of `step` by `writer` with no scores yet.
    pub fn new(step: u64, writer: Writer) -> Self {
        Self { step, writer, scores: BTreeMap::new(), loss: None, seconds: None }
    }

    /// Records `stat` of `env`.
    pub fn set(&mut self, env: &str, stat: &str, value: f64) {
        self.scores.entry(env.to_owned()).or_default().insert(stat.to_owned(), value);
    }

    /// `stat` of `env`, if recorded.
    pub fn get(&self, env: &str, stat: &str) -> Option<f64> {
        self.scores.get(env)?.get(stat).copied()
    }

    /// Every score as `(environment, statistic, value)`.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, f64)> {
        self.scores
            .iter()
            .flat_map(|(env, s)| s.iter().map(move |(k, v)| (env.as_str(), k.as_str(), *v)))
    }

    /// Every score as `(wire name, value)`: `eval/<env>/<stat>`, then `eval/loss`, `time/eval`.
    pub fn gauges(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> =
            self.entries().map(|(env, k, v)| (format!("eval/{env}/{k}"), v)).collect();
        out.extend(self.loss.map(|v| ("eval/loss".to_owned(), v)));
        out.extend(self.seconds.map(|v| ("time/eval".to_owned(), v)));
        out
    }

    fn read(step: u64, writer: Writer, m: &Map<String, Value>) -> Self {
        let mut e = EvalScores::new(step, writer);
        e.loss = m.get("eval/loss").and_then(Value::as_f64);
        e.seconds = m.get("time/eval").and_then(Value::as_f64);
        for (k, v) in m {
            let Some(rest) = k.strip_prefix("eval/") else { continue };
            let split = match rest.strip_suffix("/reward/mean") {
                Some(env) => Some((env, REWARD_MEAN)),
                None => rest.rsplit_once('/'),
            };
            if let Some((env, stat)) = split
                && !env.is_empty()
            {
                e.set(env, stat, f64::from_json(Some(v)));
            }
        }
        e
    }
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsLine {
    /// An RL training step.
    Trainer(TrainerStep),
    /// An SFT step.
    Sft(UpdateStep),
    /// An orchestrator step.
    Orchestrator(OrchestratorStepLine),
    /// A held-out evaluation.
    Eval(EvalScores),
}

impl MetricsLine {
    /// The step (or policy version) the line is about.
    pub fn step(&self) -> u64 {
        match self {
            MetricsLine::Trainer(t) => t.step(),
            MetricsLine::Sft(s) => s.step,
            MetricsLine::Orchestrator(o) => o.metrics.step,
            MetricsLine::Eval(e) => e.step,
        }
    }

    /// The process that wrote it.
    pub fn writer(&self) -> Writer {
        match self {
            MetricsLine::Trainer(_) => Writer::Trainer,
            MetricsLine::Sft(_) => Writer::Sft,
            MetricsLine::Orchestrator(_) => Writer::Orchestrator,
            MetricsLine::Eval(e) => e.writer,
        }
    }

    /// Every number of the line as `(wire name, value)`, `step` first.
    pub fn gauges(&self) -> Vec<(String, f64)> {
        let mut out = vec![("step".to_owned(), self.step() as f64)];
        match self {
            MetricsLine::Trainer(t) => out.extend(t.gauges()),
            MetricsLine::Sft(s) => out.extend(s.gauges()),
            MetricsLine::Orchestrator(o) => {
                out.extend(o.metrics.gauges());
                out.extend(o.env_reward.iter().map(|(e, v)| (format!("reward/{e}/mean"), *v)));
                out.extend(o.dropped.iter().map(|(r, n)| (format!("dropped/{r}"), *n as f64)));
            }
            MetricsLine::Eval(e) => out.extend(e.gauges()),
        }
        out
    }

    /// The line as a JSON object.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("step".into(), Value::from(self.step()));
        m.insert("role".into(), Value::from(self.writer().name()));
        match self {
            MetricsLine::Trainer(t) => t.write_fields(&mut m),
            MetricsLine::Sft(s) => s.write_fields(&mut m),
            MetricsLine::Orchestrator(o) => {
                o.metrics.write_fields(&mut m);
                for (env, v) in &o.env_reward {
                    m.insert(format!("reward/{env}/mean"), v.to_json());
                }
                for (reason, n) in &o.dropped {
                    m.insert(format!("dropped/{reason}"), n.to_json());
                }
            }
            MetricsLine::Eval(e) => {
                m.insert("kind".into(), Value::from("eval"));
                for (k, v) in e.gauges() {
                    m.insert(k, v.to_json());
                }
            }
        }
        m
    }

    /// Reads one line. `Ok(None)`: a JSON object of a role this version does not know.
    pub fn parse(text: &str) -> Result<Option<Self>, serde_json::Error> {
        let m: Map<String, Value> = serde_json::from_str(text)?;
        Ok(Self::from_json(&m))
    }

    /// Reads one JSON object (see [`MetricsLine::parse`]).
    pub fn from_json(m: &Map<String, Value>) -> Option<Self> {
        let writer = Writer::parse(m.get("role")?.as_str()?)?;
        let step = u64::from_json(m.get("step"));
        // Before `kind`, an evaluation line was one whose keys start with `eval/`.
        let eval = match m.get("kind").and_then(Value::as_str) {
            Some(kind) => kind == "eval",
            None => m.keys().any(|k| k.starts_with("eval/")),
        };
        Some(match (eval, writer) {
            (true, w) => MetricsLine::Eval(EvalScores::read(step, w, m)),
            (false, Writer::Trainer) => MetricsLine::Trainer(TrainerStep::read_fields(m)),
            (false, Writer::Sft) => MetricsLine::Sft(UpdateStep::read_fields(m)),
            (false, Writer::Orchestrator) => MetricsLine::Orchestrator(OrchestratorStepLine {
                metrics: OrchestratorStep::read_fields(m),
                env_reward: family(m, "reward/", "/mean")
                    .map(|(k, v)| (k, f64::from_json(Some(v))))
                    .collect(),
                dropped: family(m, "dropped/", "")
                    .map(|(k, v)| (k, u64::from_json(Some(v))))
                    .collect(),
            }),
        })
    }
}

/// The keys `PREFIX<name>SUFFIX` of `m` whose name is one non-empty path component.
fn family<'a>(
    m: &'a Map<String, Value>,
    prefix: &'static str,
    suffix: &'static str,
) -> impl Iterator<Item = (String, &'a Value)> {
    m.iter().filter_map(move |(k, v)| {
        let name = k.strip_prefix(prefix)?.strip_suffix(suffix)?;
        (!name.is_empty() && !name.contains('/')).then(|| (name.to_owned(), v))
    })
}

/// Appends `line` to the metrics file at `path` with one `write` (see the module's contract).
pub fn append(path: &Path, line: &MetricsLine) -> std::io::Result<()> {
    let mut text = Value::Object(line.to_json()).to_string();
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
}

/// The lines of a metrics file's text, and how many lines were not a JSON object (a run killed
/// mid-write leaves a partial last line). Lines of unknown roles are skipped without counting.
pub fn parse_all(text: &str) -> (Vec<MetricsLine>, usize) {
    let mut bad = 0;
    let mut lines = Vec::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        match MetricsLine::parse(l) {
            Ok(line) => lines.extend(line),
            Err(_) => bad += 1,
        }
    }
    (lines, bad)
}

/// Drops every line of the metrics file at `path` about a step after `step` (and any line that
/// is not a JSON object with a `step`), by writing the rest to a temporary file and renaming it:
/// what a run resuming from the checkpoint of `step` writes again. A missing file is left so.
pub fn truncate_after(path: &Path, step: u64) -> std::io::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
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
    crate::fsio::write_atomic(path, kept.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_round_trips_through_its_wire_names() {
        let update = UpdateStep { step: 3, loss: 0.5, skipped: true, ..Default::default() };
        let t = TrainerStep { update, mismatch_kl: 1e-4, ..Default::default() };
        let mut o = OrchestratorStepLine::default();
        o.metrics.step = 3;
        o.metrics.reward_mean = 0.25;
        o.metrics.groups_filtered = 2;
        o.env_reward.insert("a".into(), 0.5);
        o.dropped.insert("too_long".into(), 1);
        let mut e = EvalScores::new(20, Writer::Orchestrator);
        e.set("say-e", REWARD_MEAN, 0.75);
        e.set("say-e", "pass@4", 1.0);
        e.seconds = Some(2.5);
        for line in [MetricsLine::Trainer(t), MetricsLine::Orchestrator(o), MetricsLine::Eval(e)] {
            let text = Value::Object(line.to_json()).to_string();
            let back = MetricsLine::parse(&text).unwrap().unwrap();
            // NaN != NaN: compare the written forms.
            assert_eq!(Value::Object(back.to_json()).to_string(), text);
        }
    }

    #[test]
    fn the_wire_shape_is_flat_and_named() {
        let mut o = OrchestratorStepLine::default();
        o.metrics.step = 7;
        o.metrics.reward_mean = 0.5;
        o.metrics.samples = 16;
        o.env_reward.insert("rev".into(), 0.25);
        let m = MetricsLine::Orchestrator(o).to_json();
        assert_eq!(m["step"], 7);
        assert_eq!(m["role"], "orchestrator");
        assert_eq!(m["reward/mean"], 0.5);
        assert_eq!(m["samples"], 16);
        assert_eq!(m["reward/rev/mean"], 0.25);
        // A metric that was not measured is null, not a made-up number.
        assert_eq!(m["reward/std"], Value::Null);
        assert!(!m.contains_key("kind"));
    }

    #[test]
    fn older_and_newer_lines_still_read() {
        // An evaluation line from before `kind`, with a key this version does not know.
        let old = r#"{"step":20,"role":"orchestrator","eval/say-e/reward/mean":0.5,"eval/say-e/pass@4":1.0,"time/eval":3.0,"new/thing":[1]}"#;
        let Some(MetricsLine::Eval(e)) = MetricsLine::parse(old).unwrap() else { panic!() };
        assert_eq!(e.get("say-e", REWARD_MEAN), Some(0.5));
        assert_eq!(e.get("say-e", "pass@4"), Some(1.0));
        assert_eq!(e.seconds, Some(3.0));
        assert_eq!(e.writer, Writer::Orchestrator);
        // A trainer line missing most keys: NaN for numbers, 0 and false otherwise.
        let Some(MetricsLine::Trainer(t)) =
            MetricsLine::parse(r#"{"step":2,"role":"trainer","loss/mean":0.1,"extra":"x"}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!((t.update.step, t.update.loss), (2, 0.1));
        assert!(t.mismatch_kl.is_nan() && !t.update.skipped);
        // SFT's validation loss, and a role from a future version.
        let sft = r#"{"step":4,"role":"sft","eval/loss":1.5,"eval/rev/reward/mean":0.2}"#;
        let Some(MetricsLine::Eval(e)) = MetricsLine::parse(sft).unwrap() else { panic!() };
        assert_eq!(
            (e.loss, e.get("rev", REWARD_MEAN), e.writer),
            (Some(1.5), Some(0.2), Writer::Sft)
        );
        assert_eq!(MetricsLine::parse(r#"{"step":1,"role":"judge"}"#).unwrap(), None);
        let (lines, bad) = parse_all("{\"step\":1,\"role\":\"sft\"}\n\n{\"step\":2,\"ro");
        assert_eq!((lines.len(), bad), (1, 1));
    }

    #[test]
    fn gauges_name_every_number() {
        let mut o = OrchestratorStepLine::default();
        o.metrics.step = 3;
        o.env_reward.insert("a".into(), 0.5);
        o.dropped.insert("no_tokens".into(), 2);
        let g: BTreeMap<String, f64> = MetricsLine::Orchestrator(o).gauges().into_iter().collect();
        assert_eq!(g["step"], 3.0);
        assert_eq!(g["reward/a/mean"], 0.5);
        assert_eq!(g["dropped/no_tokens"], 2.0);
        assert_eq!(g.len(), 1 + OrchestratorStep::keys().len() + 2);
    }

    /// Lines appended at the same moment by several writers (the trainer and the orchestrator
    /// share `metrics.jsonl`) all arrive whole: `writeln!` on a file wrote a formatted value in
    /// pieces, and this lost 90% of the lines with it.
    #[test]
    fn concurrent_appends_keep_every_line_whole() {
        let dir = std::env::temp_dir().join(format!("temper-append-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.jsonl");
        std::thread::scope(|s| {
            for writer in 0..4 {
                let path = &path;
                s.spawn(move || {
                    for step in 0..300 {
                        let mut e = EvalScores::new(step, Writer::Orchestrator);
                        for k in 0..40 {
                            e.set(&format!("env{writer}"), &format!("stat{k}"), k as f64 / 7.0);
                        }
                        append(path, &MetricsLine::Eval(e)).unwrap();
                    }
                });
            }
        });
        let (lines, bad) = parse_all(&std::fs::read_to_string(&path).unwrap());
        assert_eq!((lines.len(), bad), (1200, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncation_keeps_the_steps_up_to_the_checkpoint() {
        let dir = std::env::temp_dir().join(format!("temper-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.jsonl");
        for step in 1..=4 {
            let update = UpdateStep { step, loss: step as f64, ..Default::default() };
            let t = TrainerStep { update, ..Default::default() };
            append(&path, &MetricsLine::Trainer(t)).unwrap();
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"step\":5,\"ro")
            .unwrap();
        truncate_after(&path, 2).unwrap();
        let (lines, bad) = parse_all(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(lines.iter().map(MetricsLine::step).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(bad, 0);
        truncate_after(&dir.join("absent.jsonl"), 1).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
