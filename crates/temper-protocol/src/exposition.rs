//! Prometheus metrics of every temper role, written by `prometheus-client` in the OpenMetrics
//! text format.
//!
//! A role builds a [`Scrape`] per request from its current state: every sample carries the
//! role's `role`, `node` and `rank` labels ([`Identity`]), so a slow or failing node or rank
//! stands out in a query over a whole run. [`Gauges`] keeps the latest value of every number of
//! the `metrics.jsonl` lines a role writes (the trainer's and the orchestrator's metrics), and
//! [`serve`] (feature `axum`) runs `/metrics` for a role without an HTTP server of its own.
//!
//! Roles that `temper rl` starts also announce themselves: [`write_target`] writes
//! `RUN/prometheus/<role>-<rank>.json` in Prometheus' file-based service discovery format, so
//! a Prometheus whose `file_sd_configs` names `RUN/prometheus/*.json` scrapes every role of the
//! run wherever it was placed.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::MetricsLine;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Set by the launcher on the roles it starts several of (inference servers): the replica's
/// index, reported as its `rank` label.
pub const RANK_VAR: &str = "TEMPER_RANK";

/// Which process the samples come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `trainer`, `orchestrator`, `inference`, `sandbox`, `hub`.
    pub role: String,
    /// The node's name.
    pub node: String,
    /// The rank (trainer) or replica index (inference servers); 0 for a role run once.
    pub rank: usize,
}

impl Identity {
    /// This process as `role`: the node is Slurm's `SLURMD_NODENAME` or the host name; the rank
    /// is [`RANK_VAR`], or the launcher's rank variables (`SLURM_PROCID`,
    /// `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `RANK`), or 0.
    pub fn of_process(role: &str) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let node = var("SLURMD_NODENAME")
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .or_else(|| var("HOSTNAME"))
            .unwrap_or_else(|| "unknown".into());
        let rank = [RANK_VAR, "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"]
            .iter()
            .find_map(|k| var(k).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0);
        Self { role: role.to_owned(), node, rank }
    }

    /// The same process with rank `rank` (a trainer rank known from its collective).
    pub fn with_rank(mut self, rank: usize) -> Self {
        self.rank = rank;
        self
    }

    fn labels(&self) -> impl Iterator<Item = (Cow<'static, str>, Cow<'static, str>)> {
        [
            (Cow::Borrowed("role"), Cow::Owned(self.role.clone())),
            (Cow::Borrowed("node"), Cow::Owned(self.node.clone())),
            (Cow::Borrowed("rank"), Cow::Owned(self.rank.to_string())),
        ]
        .into_iter()
    }
}

/// One scrape's metrics, named `<prefix>_<name>` and labelled with the [`Identity`].
#[derive(Debug)]
pub struct Scrape {
    registry: Registry,
}

impl Scrape {
    /// An empty scrape of `who`, with metric names starting `prefix_`.
    pub fn new(prefix: &str, who: &Identity) -> Self {
        Self { registry: Registry::with_prefix_and_labels(prefix, who.labels()) }
    }

    /// A counter (`name` without `_total`, which the format adds). The format ends `help`
    /// with a full stop.
    pub fn counter(&mut self, name: &str, help: &str, value: f64) {
        self.registry.register(name, sentence(help), ConstCounter::new(value));
    }

    /// A gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.registry.register(name, sentence(help), ConstGauge::new(value));
    }

    /// A counter with one more label, `label`, taking each of `values`' keys.
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        values: impl IntoIterator<Item = (String, f64)>,
    ) {
        let family = Family::<Vec<(String, String)>, Counter<f64, AtomicU64>>::default();
        for (key, v) in values {
            family.get_or_create(&vec![(label.to_owned(), key)]).inc_by(v);
        }
        self.registry.register(name, sentence(help), family);
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The value of the sample of metric `name` in exposition `text` whose labels include every
/// pair of `labels` (the first such sample). For tests and checks that read a scrape.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (head, value) = line.rsplit_once(' ')?;
        let (metric, set) = match head.split_once('{') {
            Some((m, rest)) => (m, rest.strip_suffix('}')?),
            None => (head, ""),
        };
        let has = |(k, v): &(&str, &str)| set.split(',').any(|p| p == format!("{k}=\"{v}\""));
        (metric == name && labels.iter().all(has)).then(|| value.parse().ok()).flatten()
    })
}

/// `help` without its final full stop, which the encoder adds.
fn sentence(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

/// A metric name from a `metrics.jsonl` key: every character outside `[a-zA-Z0-9_]` becomes `_`
/// (`reward/mean` → `reward_mean`, `pass@4` → `pass_4`).
pub fn metric_name(key: &str) -> String {
    key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The latest value of every number a role reported.
#[derive(Debug, Clone, Default)]
pub struct Gauges(Arc<Mutex<BTreeMap<String, f64>>>);

impl Gauges {
    /// Records every number of `line` (a metric that was not measured, NaN, is left out).
    pub fn set_all(&self, line: &MetricsLine) {
        self.set(line.gauges());
    }

    /// Records `values` by key.
    pub fn set(&self, values: impl IntoIterator<Item = (String, f64)>) {
        let Ok(mut g) = self.0.lock() else { return };
        for (k, v) in values {
            if v.is_finite() {
                g.insert(k, v);
            }
        }
    }

    /// The exposition of the gauges, each `<prefix>_<metric_name(key)>`.
    pub fn render(&self, prefix: &str, who: &Identity) -> String {
        let mut scrape = Scrape::new(prefix, who);
        if let Ok(g) = self.0.lock() {
            for (k, v) in g.iter() {
                scrape.gauge(&metric_name(k), &format!("Latest `{k}`."), *v);
            }
        }
        scrape.encode()
    }
}

/// The file of `who`'s scrape target under the run directory `run`.
pub fn target_file(run: &Path, who: &Identity) -> PathBuf {
    run.join("prometheus").join(format!("{}-{}.json", who.role, who.rank))
}

/// Announces `who`'s `/metrics` at `addr` (`host:port`; an unspecified host, `0.0.0.0`, is
/// replaced by the node's name) in Prometheus' file service discovery format, atomically.
pub fn write_target(run: &Path, who: &Identity, addr: &str) -> std::io::Result<PathBuf> {
    let (host, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
    let host = if matches!(host, "0.0.0.0" | "[::]" | "::") { who.node.as_str() } else { host };
    let target = serde_json::json!([{
        "targets": [format!("{host}:{port}")],
        "labels": {"role": who.role, "node": who.node, "rank": who.rank.to_string()},
    }]);
    let path = target_file(run, who);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::fsio::write_atomic(&path, target.to_string().as_bytes())?;
    Ok(path)
}

/// Serves `/metrics` (the text `render` makes at each request) on `addr` until the returned
/// guard is dropped; returns the address it listens on (port 0 picks a free one).
#[cfg(feature = "axum")]
pub async fn serve(
    addr: &str,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> std::io::Result<(std::net::SocketAddr, AbortOnDrop)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let text = render();
            async move { ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text) }
        }),
    );
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("metrics server stopped: {e}");
        }
    });
    Ok((local, AbortOnDrop(task)))
}

/// A task aborted when this is dropped.
#[cfg(feature = "axum")]
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

#[cfg(feature = "axum")]
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Identity {
        Identity { role: "trainer".into(), node: "n7".into(), rank: 3 }
    }

    #[test]
    fn samples_carry_role_node_and_rank() {
        let mut s = Scrape::new("temper_x", &who());
        s.counter("requests", "Requests.", 5.0);
        s.gauge("queue_depth", "Waiting.", 2.0);
        s.counters(
            "runs",
            "Runs by status.",
            "status",
            [("ok".into(), 3.0), ("timeout".into(), 1.0)],
        );
        let text = s.encode();
        let labels = r#"role="trainer",node="n7",rank="3""#;
        assert!(text.contains("# TYPE temper_x_requests counter\n"), "{text}");
        assert!(text.contains(&format!("temper_x_requests_total{{{labels}}} 5")), "{text}");
        assert!(text.contains(&format!("temper_x_queue_depth{{{labels}}} 2")), "{text}");
        let ok = text.lines().find(|l| l.contains(r#"status="ok""#)).unwrap_or_default();
        assert!(ok.starts_with("temper_x_runs_total{") && ok.contains(labels), "{text}");
        assert!(ok.ends_with(" 3.0") || ok.ends_with(" 3"), "{text}");
        // One description per metric family, however many label sets.
        assert_eq!(text.matches("# TYPE temper_x_runs counter").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# HELP temper_x_requests Requests.\n"), "{text}");
        assert_eq!(sample(&text, "temper_x_requests_total", &[("rank", "3")]), Some(5.0));
        assert_eq!(sample(&text, "temper_x_runs_total", &[("status", "timeout")]), Some(1.0));
        assert_eq!(sample(&text, "temper_x_runs_total", &[("status", "nope")]), None);
    }

    #[test]
    fn gauges_keep_the_latest_finite_value_of_each_key() {
        let g = Gauges::default();
        let step = r#"{"step": 3, "role": "orchestrator", "reward/mean": 0.5}"#;
        let eval = r#"{"step": 2, "role": "orchestrator", "kind": "eval", "eval/x/pass@4": 1.0}"#;
        for line in [step, eval] {
            g.set_all(&MetricsLine::parse(line).expect("json").expect("known role"));
        }
        g.set([("nan".to_owned(), f64::NAN)]);
        let text = g.render("temper_orchestrator", &who());
        assert!(text.contains("temper_orchestrator_reward_mean{"), "{text}");
        assert!(text.contains("temper_orchestrator_eval_x_pass_4{"), "{text}");
        // An evaluation line's step is the version it evaluated; the latest line's is kept.
        assert!(
            text.contains(r#"temper_orchestrator_step{role="trainer",node="n7",rank="3"} 2"#),
            "{text}"
        );
        assert!(!text.contains("NaN") && !text.contains("_nan"), "{text}");
    }

    #[test]
    fn targets_name_the_node_for_an_unspecified_host() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = write_target(dir, &who(), "0.0.0.0:9400").unwrap();
        assert_eq!(path, dir.join("prometheus/trainer-3.json"));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v[0]["targets"][0], "n7:9400");
        assert_eq!(v[0]["labels"]["rank"], "3");
        let path = write_target(dir, &who(), "127.0.0.1:80").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v[0]["targets"][0], "127.0.0.1:80");
    }
}
