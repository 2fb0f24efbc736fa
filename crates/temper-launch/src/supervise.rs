//! Watching a run: which processes ended, and what `metrics.jsonl` says.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use temper_protocol::metrics::{EvalScores, MetricsLine, OrchestratorStep, TrainerStep};
use temper_protocol::run_dir;

use crate::LaunchError;
use crate::process::Proc;

/// What the launcher reports while a run goes on.
pub trait RunHooks: Send {
    /// Something a person should read (the warmup starting, a resume point).
    fn on_notice(&mut self, _text: &str) {}
    /// A step finished: the trainer's line with the orchestrator's line of the same step (the
    /// default record if the orchestrator's is not there).
    fn on_step(&mut self, _trainer: &TrainerStep, _orchestrator: &OrchestratorStep) {}
    /// An evaluation finished.
    fn on_eval(&mut self, _scores: &EvalScores) {}
}

/// Hooks that report nothing.
#[derive(Debug, Default)]
pub struct Quiet;
impl RunHooks for Quiet {}

/// How a run that finished went.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Seconds from the start of supervision.
    pub seconds: f64,
    /// The first evaluation of the run directory (an earlier, resumed run's included).
    pub first_eval: Option<EvalScores>,
    /// The last evaluation.
    pub last_eval: Option<EvalScores>,
}

/// Follows `metrics.jsonl` from where it was last read.
#[derive(Debug)]
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn read(&mut self) -> Vec<MetricsLine> {
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
                        if let Ok(Some(l)) = MetricsLine::parse(self.partial.trim()) {
                            out.push(l);
                        }
                        self.partial.clear();
                    }
                }
            }
        }
        out
    }
}

/// Waits until every process but the inference server has exited successfully, reporting
/// steps and evaluations from the metrics of `dir`. A process that fails (or an inference
/// server that exits) ends the run with its log's last lines; so does Ctrl-C.
pub async fn supervise(
    procs: &mut [Proc],
    dir: &Path,
    hooks: &mut dyn RunHooks,
) -> Result<Outcome, LaunchError> {
    let mut tail = Tail { path: run_dir::metrics_file(dir), offset: 0, partial: String::new() };
    // What an earlier (resumed) run wrote is not reported again, except its evaluations.
    let (mut first_eval, mut last_eval) = (None, None);
    for l in tail.read() {
        if let MetricsLine::Eval(e) = l {
            first_eval.get_or_insert_with(|| e.clone());
            last_eval = Some(e);
        }
    }
    let mut orchestrator_lines: BTreeMap<u64, OrchestratorStep> = BTreeMap::new();
    let started = Instant::now();
    let mut interrupt = Box::pin(tokio::signal::ctrl_c());
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        for p in procs.iter_mut() {
            let ended = p.status.is_none().then(|| p.poll()).flatten();
            if let Some(status) = ended
                && (p.serves || !status.success())
            {
                return Err(p.failure(status));
            }
        }
        for l in tail.read() {
            match l {
                MetricsLine::Eval(e) => {
                    hooks.on_eval(&e);
                    first_eval.get_or_insert_with(|| e.clone());
                    last_eval = Some(e);
                }
                MetricsLine::Orchestrator(o) => {
                    orchestrator_lines.insert(o.metrics.step, o.metrics);
                }
                MetricsLine::Trainer(t) => {
                    let o = orchestrator_lines.remove(&t.update.step).unwrap_or_default();
                    hooks.on_step(&t, &o);
                }
                MetricsLine::Sft(_) => {}
            }
        }
        if procs.iter().filter(|p| !p.serves).all(|p| p.status.is_some()) {
            break;
        }
        tokio::select! {
            _ = &mut interrupt => return Err(LaunchError::Interrupted),
            _ = tick.tick() => {}
        }
    }
    Ok(Outcome { seconds: started.elapsed().as_secs_f64(), first_eval, last_eval })
}
