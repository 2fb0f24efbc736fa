//! The orchestrator's metrics on `/metrics`: the latest value of every number of the lines it
//! writes to `metrics.jsonl` (the records of [`temper_protocol::metrics`]) as a Prometheus
//! gauge, when `orchestrator.metrics_addr` is set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use temper_protocol::MetricsLine;

use crate::OrchestratorError;

/// The latest value of every numeric metric.
#[derive(Debug, Clone, Default)]
pub struct Gauges(Arc<Mutex<BTreeMap<String, f64>>>);

impl Gauges {
    /// Records every number of `line` (a metric that was not measured, NaN, is left out).
    pub fn set_all(&self, line: &MetricsLine) {
        let Ok(mut g) = self.0.lock() else { return };
        for (k, v) in line.gauges() {
            if v.is_finite() {
                g.insert(k, v);
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
        let step = r#"{"step": 3, "role": "orchestrator", "reward/mean": 0.5}"#;
        let eval = r#"{"step": 2, "role": "orchestrator", "kind": "eval", "eval/x/pass@4": 1.0}"#;
        for line in [step, eval] {
            g.set_all(&MetricsLine::parse(line).expect("json").expect("known role"));
        }
        let text = g.render();
        assert!(text.contains("temper_orchestrator_reward_mean 0.5\n"), "{text}");
        assert!(text.contains("temper_orchestrator_eval_x_pass_4 1\n"), "{text}");
        // An evaluation line's step is the version it evaluated; the latest line's is kept.
        assert!(text.contains("temper_orchestrator_step 2\n"), "{text}");
        // Metrics a line did not carry are not shown as NaN.
        assert!(!text.contains("NaN"), "{text}");
        assert!(!text.contains("role"), "{text}");
    }
}
