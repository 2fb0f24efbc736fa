//! A real Prometheus (Debian's `prometheus`), pointed at the scrape targets a running `temper
//! rl` job announces in `RUN/prometheus/`, scrapes every role (two inference servers, two
//! trainer ranks, the orchestrator), and its query API returns the trainer's step counter for
//! each rank. Runs where `prometheus` is on PATH; required with
//! `TEMPER_TEST_REQUIRE_PROMETHEUS=1` (CI).
#![allow(clippy::print_stderr, reason = "a skipped test says so in the log")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::rl::spawn_rl;
use crate::slurm::two_by_two;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The result vector of an instant query.
fn query(rt: &tokio::runtime::Runtime, base: &str, q: &str) -> Vec<Value> {
    let url = format!("{base}/api/v1/query");
    rt.block_on(async {
        let resp = reqwest::Client::new().get(&url).query(&[("query", q)]).send().await;
        match resp {
            Ok(r) => r.json::<Value>().await.ok(),
            Err(_) => None,
        }
    })
    .and_then(|v| v["data"]["result"].as_array().cloned())
    .unwrap_or_default()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

#[test]
fn prometheus_scrapes_every_role_of_a_running_job() {
    if Command::new("prometheus").arg("--version").output().is_err() {
        assert!(
            std::env::var("TEMPER_TEST_REQUIRE_PROMETHEUS").is_err(),
            "TEMPER_TEST_REQUIRE_PROMETHEUS is set but prometheus is not on PATH (apt install prometheus)"
        );
        eprintln!("skipped: prometheus is not on PATH (apt install prometheus)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = two_by_two(tmp.path(), 400, "placement = \"local\"");
    let run = tmp.path().join("run");
    let prom_config = tmp.path().join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: temper\n    file_sd_configs:\n      - files: ['{}/prometheus/*.json']\n        refresh_interval: 1s\n",
            run.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let _prometheus = KillOnDrop(
        Command::new("prometheus")
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", tmp.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _job = KillOnDrop(spawn_rl(&config, &[]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base = format!("http://127.0.0.1:{port}");

    // Every role is found through RUN/prometheus/ and answers.
    let start = Instant::now();
    let mut up = Vec::new();
    while start.elapsed() < Duration::from_secs(120) {
        up = query(&rt, &base, "up == 1");
        if up.len() == 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut roles: Vec<String> = up
        .iter()
        .map(|s| {
            format!(
                "{}-{}",
                s["metric"]["role"].as_str().unwrap_or("?"),
                s["metric"]["rank"].as_str().unwrap_or("?")
            )
        })
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        ["inference-0", "inference-1", "orchestrator-0", "trainer-0", "trainer-1"],
        "{up:?}"
    );

    // The trainer's step counter, per rank, from the query API.
    let mut steps = Vec::new();
    while start.elapsed() < Duration::from_secs(180) {
        steps = query(&rt, &base, "temper_trainer_step");
        if steps.len() == 2 && steps.iter().all(|s| value(s) >= 2.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(steps.len(), 2, "{steps:?}");
    for s in &steps {
        assert!(value(s) >= 2.0, "{s}");
        assert_eq!(s["metric"]["role"], "trainer");
        assert!(s["metric"]["node"].as_str().is_some_and(|n| !n.is_empty()), "{s}");
    }
    let peak = query(&rt, &base, "temper_trainer_peak_memory_bytes");
    assert_eq!(peak.len(), 2, "{peak:?}");
    assert!(peak.iter().all(|s| value(s) > 1e6), "{peak:?}");
    // The other roles' metrics carry their labels too.
    let served = query(&rt, &base, "temper_inference_requests_total");
    assert_eq!(served.len(), 2, "{served:?}");
    assert!(served.iter().all(|s| value(s) > 0.0), "both servers served requests: {served:?}");
    let reward = query(&rt, &base, "temper_orchestrator_reward_mean");
    assert_eq!(reward.len(), 1, "{reward:?}");
}
