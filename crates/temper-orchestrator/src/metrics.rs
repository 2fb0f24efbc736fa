//! The orchestrator's metrics on `/metrics` (when `orchestrator.metrics_addr` is set): the
//! latest value of every number of the lines it writes to `metrics.jsonl` (the records of
//! [`temper_protocol::metrics`]) as a gauge `temper_orchestrator_<name>`, labelled with its
//! role, node and rank ([`temper_protocol::exposition`]). Its address is announced in
//! `RUN/prometheus/orchestrator-0.json` for Prometheus' file service discovery.

use std::path::Path;

use temper_protocol::exposition::{self, AbortOnDrop, Gauges, Identity};

use crate::OrchestratorError;

/// Serves the gauges on `addr` until the returned guard is dropped, announcing it under `run`.
pub async fn serve(
    addr: &str,
    gauges: Gauges,
    run: &Path,
) -> Result<AbortOnDrop, OrchestratorError> {
    let who = Identity::of_process("orchestrator");
    let render = {
        let who = who.clone();
        move || gauges.render("temper_orchestrator", &who)
    };
    let (local, guard) = exposition::serve(addr, render)
        .await
        .map_err(|e| OrchestratorError::Config(format!("orchestrator.metrics_addr {addr}: {e}")))?;
    exposition::write_target(run, &who, &local.to_string()).map_err(|e| {
        OrchestratorError::Config(format!(
            "cannot announce the metrics address under {}: {e}",
            run.display()
        ))
    })?;
    tracing::info!("metrics on http://{local}/metrics");
    Ok(guard)
}
