//! Reports over evaluation runs: for every benchmark of one or more runs, avg@k and pass@k with
//! 95% intervals, and the difference of each run from the first with its interval.
//!
//! A run is the output folder of `temper eval` (it holds `metadata.json` and `results.jsonl`) or
//! of `temper eval --suite` (one such folder per benchmark, in the order of the `suite.toml`
//! kept beside them). The numbers come from `results.jsonl`, so a run cut short reports the
//! problems it finished and is marked incomplete.
//!
//! - avg@k of a problem is the mean reward of its k samples; pass@k is the unbiased estimate of
//!   the chance that at least one of k samples passes (reward at or above the run's pass
//!   threshold, and no error). A benchmark's figure is the mean over its problems, with a
//!   Student-t interval over problems ([`crate::stats::mean_interval`]), cut to [0, 1] when
//!   every problem's value lies there.
//! - The difference of two runs is taken over the problems both finished, pairing each
//!   problem's avg@k ([`crate::stats::paired_difference`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use temper_protocol::Rollout;

use crate::eval::{METADATA, RESULTS};
use crate::stats::{Estimate, mean_interval, paired_difference, pass_at_k, pass_ks, passes};

/// The file a suite run keeps its suite in.
pub const SUITE_FILE: &str = "suite.toml";

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not what an evaluation writes.
    #[error("{}: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The folder holds no evaluation.
    #[error(
        "{} holds no evaluation: no {METADATA} in it or in its folders (give the output folder of `temper eval` or `temper eval --suite`)",
        path.display()
    )]
    NotARun {
        /// The folder.
        path: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io { path: path.to_owned(), source }
}

/// One benchmark of one run, read from its folder.
#[derive(Debug, Clone)]
pub struct BenchmarkRun {
    /// The benchmark (the environment's name).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Samples per problem.
    pub samples: usize,
    /// Reward at or above which a sample passes.
    pub pass_threshold: f64,
    /// Whether the run finished (`metadata.json` says `complete`).
    pub complete: bool,
    /// The model's name as the run recorded it.
    pub model: String,
    /// Each finished problem's samples: reward and whether it passed.
    pub problems: BTreeMap<u64, Vec<(f64, bool)>>,
    /// Samples with an error.
    pub errors: usize,
}

/// One run: a label and its benchmarks.
#[derive(Debug, Clone)]
pub struct Run {
    /// What the report calls it.
    pub label: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its benchmarks, in order.
    pub benchmarks: Vec<BenchmarkRun>,
}

impl Run {
    /// Reads the run in `dir` (an evaluation folder, or a suite's folder of them). Without a
    /// `label`, the run is called by its model's name.
    pub fn read(dir: &Path, label: Option<String>) -> Result<Run, ReportError> {
        let benchmarks = if dir.join(METADATA).is_file() {
            vec![read_benchmark(dir)?]
        } else {
            let mut found = Vec::new();
            let entries = fs::read_dir(dir).map_err(io(dir))?;
            for entry in entries {
                let path = entry.map_err(io(dir))?.path();
                if path.join(METADATA).is_file() {
                    found.push(read_benchmark(&path)?);
                }
            }
            let order = suite_order(dir);
            found.sort_by_key(|b| {
                (order.iter().position(|n| *n == b.name).unwrap_or(usize::MAX), b.name.clone())
            });
            found
        };
        if benchmarks.is_empty() {
            return Err(ReportError::NotARun { path: dir.to_owned() });
        }
        let label = label.unwrap_or_else(|| benchmarks[0].model.clone());
        Ok(Run { label, dir: dir.to_owned(), benchmarks })
    }
}

/// The benchmark names of the suite kept in a suite run's folder, in order (empty without one).
fn suite_order(dir: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(dir.join(SUITE_FILE)) else { return Vec::new() };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else { return Vec::new() };
    table
        .get("benchmark")
        .and_then(|b| b.as_array())
        .map(|all| {
            all.iter()
                .filter_map(|b| b.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn read_benchmark(dir: &Path) -> Result<BenchmarkRun, ReportError> {
    let meta_path = dir.join(METADATA);
    let text = fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let meta: Value = serde_json::from_str(&text).map_err(|e| ReportError::Malformed {
        path: meta_path.clone(),
        message: format!("not valid JSON: {e}"),
    })?;
    let config = &meta["config"];
    let malformed = |what: &str| ReportError::Malformed {
        path: meta_path.clone(),
        message: format!("has no {what} (is it an evaluation's {METADATA}?)"),
    };
    let name = config["env"]["name"].as_str().ok_or_else(|| malformed("config.env.name"))?;
    let samples = config["eval"]["rollouts_per_example"]
        .as_u64()
        .filter(|&k| k >= 1)
        .ok_or_else(|| malformed("config.eval.rollouts_per_example"))? as usize;
    let pass_threshold = config["eval"]["pass_threshold"]
        .as_f64()
        .ok_or_else(|| malformed("config.eval.pass_threshold"))?;
    let model = config["eval"]["model_name"].as_str().unwrap_or("model").to_owned();

    let results = dir.join(RESULTS);
    let text = match fs::read(&results) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(&results)(e)),
    };
    let mut groups: BTreeMap<u64, Vec<(f64, bool)>> = BTreeMap::new();
    let mut errors = BTreeMap::<u64, usize>::new();
    // A partial last line (a run killed mid-write) is skipped, as resuming would drop it.
    for line in text.split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        let Ok(r) = serde_json::from_slice::<Rollout>(line) else { continue };
        groups.entry(r.example_id).or_default().push((r.reward, passes(&r, pass_threshold)));
        *errors.entry(r.example_id).or_default() += usize::from(r.error.is_some());
    }
    groups.retain(|_, g| g.len() == samples);
    let errors = groups.keys().map(|id| errors.get(id).copied().unwrap_or(0)).sum();
    Ok(BenchmarkRun {
        name: name.to_owned(),
        dir: dir.to_owned(),
        samples,
        pass_threshold,
        complete: meta["status"] == "complete",
        model,
        problems: groups,
        errors,
    })
}

/// A benchmark's figures in one run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkStats {
    /// The run's label.
    pub run: String,
    /// Samples per problem (the k of avg@k).
    pub samples: usize,
    /// Problems finished.
    pub problems: usize,
    /// Whether the run finished.
    pub complete: bool,
    /// Samples with an error.
    pub errors: usize,
    /// avg@k: the mean over problems of each problem's mean reward.
    pub avg_at_k: Option<Estimate>,
    /// pass@k for k = 1, 2, 4, ... up to the samples per problem.
    pub pass_at_k: BTreeMap<usize, Estimate>,
}

/// A run's difference from the baseline run on one benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    /// The run.
    pub run: String,
    /// The run it is compared with.
    pub baseline: String,
    /// avg@k of `run` minus that of `baseline`, over the problems both finished.
    pub avg_at_k: Estimate,
}

/// One benchmark across the runs.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkReport {
    /// The benchmark.
    pub name: String,
    /// Its figures in each run that has it, in run order.
    pub runs: Vec<BenchmarkStats>,
    /// Each later run's difference from the first run that has it.
    pub differences: Vec<Difference>,
}

/// The report over several runs.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The runs' labels and folders, in order.
    pub runs: Vec<(String, PathBuf)>,
    /// Every benchmark of any run, in the order they first appear.
    pub benchmarks: Vec<BenchmarkReport>,
}

/// Each problem's avg@k.
fn per_problem(b: &BenchmarkRun) -> BTreeMap<u64, f64> {
    b.problems
        .iter()
        .map(|(id, s)| (*id, s.iter().map(|(r, _)| r).sum::<f64>() / s.len() as f64))
        .collect()
}

/// [`mean_interval`], with the interval cut to `[0, 1]` when every value lies there (a share
/// cannot leave it, though the t interval of a small sample can).
fn share_interval(values: &[f64]) -> Option<Estimate> {
    let e = mean_interval(values)?;
    if values.iter().all(|v| (0.0..=1.0).contains(v)) {
        Some(Estimate { low: e.low.max(0.0), high: e.high.min(1.0), ..e })
    } else {
        Some(e)
    }
}

/// A benchmark's figures.
pub fn benchmark_stats(run: &str, b: &BenchmarkRun) -> BenchmarkStats {
    let avg: Vec<f64> = per_problem(b).into_values().collect();
    let pass_at = pass_ks(b.samples)
        .into_iter()
        .filter_map(|k| {
            let values: Vec<f64> = b
                .problems
                .values()
                .map(|s| pass_at_k(s.len(), s.iter().filter(|(_, p)| *p).count(), k))
                .collect();
            share_interval(&values).map(|e| (k, e))
        })
        .collect();
    BenchmarkStats {
        run: run.to_owned(),
        samples: b.samples,
        problems: b.problems.len(),
        complete: b.complete,
        errors: b.errors,
        avg_at_k: share_interval(&avg),
        pass_at_k: pass_at,
    }
}

/// The report over `runs`; differences are taken from the first run that has each benchmark.
pub fn report(runs: &[Run]) -> Report {
    let mut names: Vec<&str> = Vec::new();
    for run in runs {
        for b in &run.benchmarks {
            if !names.contains(&b.name.as_str()) {
                names.push(&b.name);
            }
        }
    }
    let benchmarks = names
        .into_iter()
        .map(|name| {
            let present: Vec<(&Run, &BenchmarkRun)> = runs
                .iter()
                .filter_map(|r| r.benchmarks.iter().find(|b| b.name == name).map(|b| (r, b)))
                .collect();
            let stats = present.iter().map(|(r, b)| benchmark_stats(&r.label, b)).collect();
            let differences = match present.split_first() {
                Some(((base_run, base), rest)) => {
                    let base_values = per_problem(base);
                    rest.iter()
                        .filter_map(|(r, b)| {
                            paired_difference(&per_problem(b), &base_values).map(|d| Difference {
                                run: r.label.clone(),
                                baseline: base_run.label.clone(),
                                avg_at_k: d,
                            })
                        })
                        .collect()
                }
                None => Vec::new(),
            };
            BenchmarkReport { name: name.to_owned(), runs: stats, differences }
        })
        .collect();
    Report { runs: runs.iter().map(|r| (r.label.clone(), r.dir.clone())).collect(), benchmarks }
}

/// A share as a percentage with one decimal.
fn pct(x: f64) -> String {
    // Adding 0 turns −0 into 0.
    if x.is_finite() { format!("{:.1}", 100.0 * x + 0.0) } else { "∞".into() }
}

/// An interval as `low – high` in percent (unbounded with one problem).
fn interval(e: &Estimate) -> String {
    if e.low.is_finite() && e.high.is_finite() {
        format!("{} – {}", pct(e.low), pct(e.high))
    } else {
        "n/a (one problem)".into()
    }
}

impl Report {
    /// The report as Markdown: a table of every benchmark and run, then the differences.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| benchmark | run | k | problems | avg@k % | 95% interval | pass@k % | errors |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---|---:|---:|");
        for b in &self.benchmarks {
            for s in &b.runs {
                let (avg, ci) = match &s.avg_at_k {
                    Some(e) => (pct(e.mean), interval(e)),
                    None => ("–".into(), "–".into()),
                };
                let pass = s
                    .pass_at_k
                    .iter()
                    .next_back()
                    .map_or("–".into(), |(k, e)| format!("{} (k={k})", pct(e.mean)));
                let problems = if s.complete {
                    s.problems.to_string()
                } else {
                    format!("{} (incomplete)", s.problems)
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    b.name, s.run, s.samples, problems, avg, ci, pass, s.errors
                );
            }
        }
        let differences: Vec<(&str, &Difference)> = self
            .benchmarks
            .iter()
            .flat_map(|b| b.differences.iter().map(move |d| (b.name.as_str(), d)))
            .collect();
        if !differences.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "| benchmark | run − baseline | Δ avg@k (points) | 95% interval | shared problems |"
            );
            let _ = writeln!(out, "|---|---|---:|---|---:|");
            for (name, d) in differences {
                let sign = if d.avg_at_k.mean >= 0.0 { "+" } else { "" };
                let _ = writeln!(
                    out,
                    "| {name} | {} − {} | {sign}{} | {} | {} |",
                    d.run,
                    d.baseline,
                    pct(d.avg_at_k.mean),
                    interval(&d.avg_at_k),
                    d.avg_at_k.n
                );
            }
        }
        out
    }
}
