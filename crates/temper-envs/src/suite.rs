//! Benchmark suites: several published benchmarks, each with its own protocol, in one TOML file.
//!
//! ```toml
//! [suite]
//! name = "intellect3"
//! description = "..."
//!
//! [sampling]                    # every benchmark's, unless it says otherwise
//! temperature = 0.6
//! top_p = 0.95
//! max_tokens = 32768
//!
//! [[benchmark]]
//! name = "aime2024"             # also the folder of its results in the suite's output
//! data = "aime_2024"            # a file under the --data folder (.jsonl or .parquet added
//!                               # when the name has no extension)
//! layout = "aime"               # the file's column layout (see `layout`)
//! options = {}                  # the layout's options (livecodebench: from, to; hle: with_images)
//! seed = 0                      # the layout's shuffling seed (gpqa's choice order)
//! samples = 32                  # samples per problem: the k of avg@k
//! num_examples = 0              # the first this-many problems; 0 means all
//! pass_threshold = 0.5          # reward at or above which a sample passes, for pass@k
//! system_prompt = "..."
//! parser = "boxed"              # as in environment.toml
//! timeout_s = 3600              # wall-clock limit of one sample
//! sampling = { max_tokens = 65536 }   # overrides [sampling] for this benchmark
//! rubric = [{ reward = "math_equiv" }]
//! ```
//!
//! Every benchmark is a single-turn environment over one file. Its content hash covers its own
//! table and the bytes of its data file, so resuming a suite refuses a benchmark whose definition
//! or data changed.
//!
//! [`builtin`] holds the suites that ship with temper (`intellect3`); [`Suite::resolve`] reads a
//! file path or one of those names.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use temper_protocol::SamplingParams;

use crate::layout::{Layout, LayoutOptions};
use crate::package::valid_name;
use crate::rewards::{self, RewardSpec, SpecSource};
use crate::rollout::SingleTurn;
use crate::{DataSource, EnvError, EnvInfo, Environment, Parser, Rubric, TurnLimits};

/// The suites built into temper: name and TOML text.
pub const BUILTIN: &[(&str, &str)] = &[("intellect3", include_str!("../suites/intellect3.toml"))];

/// The names of the built-in suites.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

/// The TOML text of a built-in suite.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// A suite file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// Identity.
    pub suite: SuiteInfo,
    /// Sampling settings shared by the benchmarks.
    #[serde(default)]
    pub sampling: Sampling,
    /// The benchmarks, run in this order.
    #[serde(default)]
    pub benchmark: Vec<Benchmark>,
    /// The suite's TOML text, for the copy kept with its results.
    #[serde(skip)]
    pub text: String,
    /// Where it was read from (a file, or `builtin:NAME`), for error messages.
    #[serde(skip)]
    pub source: PathBuf,
    /// The `[sampling]` table as TOML, hashed into every benchmark's content hash.
    #[serde(skip)]
    sampling_toml: String,
}

/// `[suite]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteInfo {
    /// The suite's name (as environment names: `^[a-z0-9][a-z0-9-]{1,63}$`).
    pub name: String,
    /// Its version, recorded as each benchmark environment's version.
    #[serde(default = "default_version")]
    pub version: String,
    /// One line on what it measures.
    #[serde(default)]
    pub description: String,
}

fn default_version() -> String {
    "1.0.0".into()
}

/// Sampling settings (`[sampling]`, or a benchmark's `sampling`, which wins key by key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// Softmax temperature.
    pub temperature: Option<f64>,
    /// Nucleus mass.
    pub top_p: Option<f64>,
    /// Top-k (server extension).
    pub top_k: Option<u32>,
    /// Min-p (server extension).
    pub min_p: Option<f64>,
    /// Most tokens of the answer.
    pub max_tokens: Option<u32>,
    /// Sampling seed; sample i of a problem uses seed + i.
    pub seed: Option<u64>,
}

/// A sampling setting outside its range: the key (`top_p`) and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfRange {
    /// The setting's key, as in a suite file.
    pub key: &'static str,
    /// What it must be, and what it was.
    pub rule: String,
}

impl Sampling {
    /// These settings, with `over`'s where it has them.
    pub fn with(&self, over: &Sampling) -> Sampling {
        Sampling {
            temperature: over.temperature.or(self.temperature),
            top_p: over.top_p.or(self.top_p),
            top_k: over.top_k.or(self.top_k),
            min_p: over.min_p.or(self.min_p),
            max_tokens: over.max_tokens.or(self.max_tokens),
            seed: over.seed.or(self.seed),
        }
    }

    /// Checks the ranges; the error names the first bad key and the rule it breaks.
    pub fn check(&self) -> Result<(), OutOfRange> {
        let bad = |key: &'static str, rule: String| Err(OutOfRange { key, rule });
        if let Some(t) = self.temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return bad("temperature", format!("must be at least 0, not {t}"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad("top_p", format!("must be in (0, 1], not {p}"));
        }
        if let Some(p) = self.min_p
            && !(0.0..=1.0).contains(&p)
        {
            return bad("min_p", format!("must be in [0, 1], not {p}"));
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens", "must be at least 1".into());
        }
        Ok(())
    }

    /// As the parameters of a request.
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            max_tokens: self.max_tokens,
            seed: self.seed,
            stop: Vec::new(),
        }
    }
}

/// `[[benchmark]]`: one benchmark and its protocol.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Benchmark {
    /// Its name, also its results folder (as environment names).
    pub name: String,
    /// Its data file under the data folder; without an extension, `.jsonl` then `.parquet`.
    pub data: String,
    /// The file's column layout.
    #[serde(default)]
    pub layout: Layout,
    /// The layout's options.
    #[serde(default)]
    pub options: LayoutOptions,
    /// The layout's shuffling seed.
    #[serde(default)]
    pub seed: u64,
    /// Samples per problem.
    #[serde(default = "one_sample")]
    pub samples: u32,
    /// The first this-many problems; 0 means all.
    #[serde(default)]
    pub num_examples: usize,
    /// Reward at or above which a sample passes (pass@k).
    #[serde(default = "half")]
    pub pass_threshold: f64,
    /// System prompt.
    pub system_prompt: Option<String>,
    /// Where the answer sits in a reply (`raw`, `boxed`, `code`, `xml:<field>`, `marker:<text>`).
    pub parser: Option<String>,
    /// Wall-clock limit of one sample in seconds.
    pub timeout_s: Option<f64>,
    /// Sampling settings of this benchmark (over the suite's).
    #[serde(default)]
    pub sampling: Sampling,
    /// How a reply is scored.
    #[serde(default)]
    pub rubric: Vec<RewardSpec>,
    /// This benchmark's table as TOML, hashed into its content hash.
    #[serde(skip)]
    table_toml: String,
}

fn one_sample() -> u32 {
    1
}

fn half() -> f64 {
    0.5
}

/// Most samples per problem a suite may ask for.
pub const MAX_SAMPLES: u32 = 1024;

impl Suite {
    /// Parses a suite's TOML text; `source` names it in errors.
    pub fn parse(text: &str, source: &Path) -> Result<Suite, EnvError> {
        let mut suite: Suite = toml::from_str(text)
            .map_err(|e| EnvError::Parse { path: source.to_owned(), message: e.to_string() })?;
        // The tables as written, once, for the content hashes (deserialising above kept the
        // line numbers for errors; a plain table has none).
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| EnvError::Parse { path: source.to_owned(), message: e.to_string() })?;
        suite.sampling_toml = table.get("sampling").map(|s| s.to_string()).unwrap_or_default();
        if let Some(tables) = table.get("benchmark").and_then(|b| b.as_array()) {
            for (b, t) in suite.benchmark.iter_mut().zip(tables) {
                b.table_toml = t.to_string();
            }
        }
        suite.text = text.to_owned();
        suite.source = source.to_owned();
        suite.check()?;
        Ok(suite)
    }

    /// Reads a suite file, or a built-in suite by name (a file of that name wins).
    pub fn resolve(name_or_path: &str) -> Result<Suite, EnvError> {
        let path = Path::new(name_or_path);
        if path.is_file() {
            let text = fs::read_to_string(path).map_err(|e| EnvError::io(path, e))?;
            return Suite::parse(&text, path);
        }
        match builtin(name_or_path) {
            Some(text) => Suite::parse(text, Path::new(&format!("builtin:{name_or_path}"))),
            None => Err(EnvError::config(
                path,
                "suite",
                format!(
                    "not a suite file, and not a built-in suite ({})",
                    builtin_names().join(", ")
                ),
            )),
        }
    }

    fn check(&self) -> Result<(), EnvError> {
        let err = |field: String, message: String| EnvError::config(&self.source, &field, message);
        if !valid_name(&self.suite.name) {
            return Err(err(
                "suite.name".into(),
                format!("`{}` must match ^[a-z0-9][a-z0-9-]{{1,63}}$", self.suite.name),
            ));
        }
        if let Err(e) = semver::Version::parse(&self.suite.version) {
            return Err(err(
                "suite.version".into(),
                format!("`{}` is not a semantic version: {e}", self.suite.version),
            ));
        }
        self.sampling.check().map_err(|e| err(format!("sampling.{}", e.key), e.rule))?;
        if self.benchmark.is_empty() {
            return Err(err("benchmark".into(), "the suite has no [[benchmark]] entries".into()));
        }
        let mut names = BTreeSet::new();
        for (i, b) in self.benchmark.iter().enumerate() {
            let at = |key: &str| format!("benchmark[{i}].{key}");
            if !valid_name(&b.name) {
                return Err(err(
                    at("name"),
                    format!("`{}` must match ^[a-z0-9][a-z0-9-]{{1,63}}$", b.name),
                ));
            }
            if !names.insert(b.name.as_str()) {
                return Err(err(at("name"), format!("`{}` names two benchmarks", b.name)));
            }
            if b.data.is_empty()
                || Path::new(&b.data).is_absolute()
                || Path::new(&b.data)
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(err(
                    at("data"),
                    format!("`{}` must be a relative path inside the data folder", b.data),
                ));
            }
            if !(1..=MAX_SAMPLES).contains(&b.samples) {
                return Err(err(
                    at("samples"),
                    format!("{} is not between 1 and {MAX_SAMPLES}", b.samples),
                ));
            }
            if !b.pass_threshold.is_finite() {
                return Err(err(at("pass_threshold"), "must be a finite number".into()));
            }
            if let Some(t) = b.timeout_s
                && !(t.is_finite() && t > 0.0)
            {
                return Err(err(
                    at("timeout_s"),
                    format!("{t} is not a positive number of seconds"),
                ));
            }
            b.options.check(b.layout).map_err(|m| err(at("options"), m))?;
            b.sampling.check().map_err(|e| err(at(&format!("sampling.{}", e.key)), e.rule))?;
            if let Some(parser) = &b.parser {
                parser.parse::<Parser>().map_err(|m| err(at("parser"), m))?;
            }
            if b.rubric.is_empty() {
                return Err(err(at("rubric"), "a benchmark needs at least one reward".into()));
            }
        }
        Ok(())
    }

    /// The benchmark named `name`.
    pub fn get(&self, name: &str) -> Option<&Benchmark> {
        self.benchmark.iter().find(|b| b.name == name)
    }
}

impl Benchmark {
    /// The data file under `data_dir`: `data` itself, or, when it has no extension, the first of
    /// `data.jsonl` and `data.parquet` that exists.
    pub fn data_file(&self, data_dir: &Path) -> Result<PathBuf, EnvError> {
        let named = data_dir.join(&self.data);
        let candidates = if Path::new(&self.data).extension().is_some() {
            vec![named]
        } else {
            vec![named.with_extension("jsonl"), named.with_extension("parquet")]
        };
        if let Some(found) = candidates.iter().find(|p| p.is_file()) {
            return Ok(found.clone());
        }
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        Err(EnvError::Dataset {
            path: candidates[0].clone(),
            line: None,
            message: format!(
                "benchmark `{}` reads its problems from {}, which is not there; put the file \
                 there (in the `{}` column layout) or edit `data` in the suite",
                self.name,
                tried.join(" or "),
                self.layout.name()
            ),
        })
    }

    /// The sampling settings of a request: the suite's, then the benchmark's.
    pub fn sampling(&self, suite: &Suite) -> Sampling {
        suite.sampling.with(&self.sampling)
    }

    /// This benchmark as an environment over its file in `data_dir`. Relative paths in its
    /// rubric (a `script` reward's program) are read from the suite file's folder.
    pub fn environment(&self, suite: &Suite, data_dir: &Path) -> Result<Environment, EnvError> {
        let index = suite.benchmark.iter().position(|b| b.name == self.name).unwrap_or(0);
        let field = |key: &str| format!("benchmark[{index}].{key}");
        let file = &suite.source;
        let data = self.data_file(data_dir)?;
        let parser: Parser = self
            .parser
            .as_deref()
            .unwrap_or("raw")
            .parse()
            .map_err(|m| EnvError::config(file, &field("parser"), m))?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let mut rubric = Rubric::new();
        for (i, spec) in self.rubric.iter().enumerate() {
            let entry =
                rewards::build(spec, SpecSource { file, dir, index: i }).map_err(|e| match e {
                    EnvError::Config { path, field: f, message } => {
                        EnvError::Config { path, field: field(&f), message }
                    }
                    other => other,
                })?;
            rubric.push(entry);
        }
        let info = EnvInfo {
            name: self.name.clone(),
            version: suite.suite.version.clone(),
            description: format!("{} benchmark of suite {}", self.name, suite.suite.name),
            content_hash: self.content_hash(suite, &data)?,
        };
        Ok(Environment {
            info,
            system_prompt: self.system_prompt.clone(),
            parser,
            data: DataSource::Files {
                train: data.clone(),
                eval: Some(data),
                eval_fraction: 0.0,
                seed: self.seed,
                layout: self.layout,
                layout_options: self.options.clone(),
            },
            interaction: Arc::new(SingleTurn),
            rubric,
            limits: TurnLimits {
                max_turns: 1,
                max_completion_tokens: None,
                timeout: self.timeout_s.map(Duration::from_secs_f64),
            },
        })
    }

    /// SHA-256 (hex) over this benchmark's table in the suite, the suite's `[sampling]` and the
    /// bytes of its data file.
    fn content_hash(&self, suite: &Suite, data: &Path) -> Result<String, EnvError> {
        let mut hasher = Sha256::new();
        for part in [self.table_toml.as_bytes(), suite.sampling_toml.as_bytes()] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        let mut file = fs::File::open(data).map_err(|e| EnvError::io(data, e))?;
        std::io::copy(&mut file, &mut hasher).map_err(|e| EnvError::io(data, e))?;
        Ok(hex::encode(hasher.finalize()))
    }
}
