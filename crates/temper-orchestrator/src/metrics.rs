//! Metrics: one JSON object per line in `metrics.jsonl` (names in `overview.md`), and the
//! latest value of each numeric one as a Prometheus gauge on `/metrics` when
//! `orchestrator.metrics_addr` is set.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::OrchestratorError;

/// Appends one line (a single `write` on an `O_APPEND` file, so lines of the trainer and the
/// orchestrator never interleave).
pub fn append(path: &Path, line: &Map<String, Value>) -> Result<(), OrchestratorError> {
    let mut text = serde_json::to_string(line).map_err(|e| OrchestratorError::Io(e.to_string()))?;
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| OrchestratorError::Io(format!("{}: {e}", path.display())))
}

/// The latest value of every numeric metric.
#[derive(Debug, Clone, Default)]
pub struct Gauges(Arc<Mutex<BTreeMap<String, f64>>>);

impl Gauges {
    /// Records every number in `line`.
    pub fn set_all(&self, line: &Map<String, Value>) {
        let Ok(mut g) = self.0.lock() else { return };
        for (k, v) in line {
            if let Some(x) = v.as_f64() {
                g.insert(k.clone(), x);
            }
        }
    }

    /// The Prometheus text exposition of the gauges: `temper_orchestrator_<name>` with every
    /// character outside `[a-zA-Z0-9_]` turned into `_` (`reward/mean` →
    /// `temper_orchestrator_reward_mean`; `pass@4` → `pass_4`).
    pub fn render(&self) -> String {
        let Ok(g) = self.0.lock() else { return String::new() };
        let mut out = String::new();
        for (k, v) in g.iter() {
            let name: String = k
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
                .collect();
            out.push_str(&format!("# TYPE temper_orchestrator_{name} gauge\n"));
            out.push_str(&format!("temper_orchestrator_{name} {v}\n"));
        }
        out
    }
}

/// Serves `/metrics` on `addr` until the returned task is dropped... or aborted.
pub async fn serve(addr: &str, gauges: Gauges) -> Result<AbortOnDrop, OrchestratorError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| OrchestratorError::Config(format!("orchestrator.metrics_addr {addr}: {e}")))?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = gauges.render();
            async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }),
    );
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("metrics server stopped: {e}");
        }
    });
    Ok(AbortOnDrop(task))
}

/// A task aborted when this is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_render_prometheus_names() {
        let g = Gauges::default();
        let line: Map<String, Value> = serde_json::from_str(
            r#"{"step": 3, "role": "orchestrator", "reward/mean": 0.5, "eval/x/pass@4": 1.0}"#,
        )
        .expect("json");
        g.set_all(&line);
        let text = g.render();
        assert!(text.contains("temper_orchestrator_reward_mean 0.5\n"), "{text}");
        assert!(text.contains("temper_orchestrator_eval_x_pass_4 1\n"), "{text}");
        assert!(text.contains("temper_orchestrator_step 3\n"), "{text}");
        assert!(!text.contains("role"), "{text}");
    }
}
