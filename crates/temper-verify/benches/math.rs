//! Side-by-side benchmark of temper's math verifier and Hugging Face `math-verify` on the
//! hand-labelled table (`tests/data/math_cases.jsonl`): agreement with the labels, every
//! disagreement with its reason, and throughput, in one run; then agreement, false positives and
//! false negatives of both on the other tables in `tests/data/`.
//!
//! ```sh
//! cargo bench -p temper-verify --bench math            # creates target/bench-venv on first use
//! MATH_VERIFY_PYTHON=/path/to/python cargo bench -p temper-verify --bench math
//! ```
//!
//! Prints a table and writes `target/bench/math_verify.json`. Both verifiers run single-threaded
//! in their own process; times are medians over repetitions.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark program reports to people"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};
use temper_verify::math::explain;

#[path = "../tests/it/adversarial.rs"]
mod adversarial;

const REPS: usize = 5;

struct Case {
    category: String,
    gold: String,
    completion: String,
    expected: bool,
}

fn load(path: &Path) -> Vec<Case> {
    std::fs::read_to_string(path)
        .expect("the table")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            Case {
                category: v["category"].as_str().unwrap_or_default().to_owned(),
                gold: v["gold"].as_str().expect("gold").to_owned(),
                completion: v["completion"].as_str().expect("completion").to_owned(),
                expected: v["expected"].as_bool().expect("expected"),
            }
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The Python with math-verify: `MATH_VERIFY_PYTHON`, or a virtual environment made once under
/// `target/bench-venv`.
fn python(target: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::env::var("MATH_VERIFY_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = target.join("bench-venv");
    let python = venv.join("bin/python");
    let has = |p: &Path| {
        Command::new(p).args(["-c", "import math_verify"]).status().is_ok_and(|s| s.success())
    };
    if has(&python) {
        return Some(python);
    }
    eprintln!("creating {} with math-verify (once)...", venv.display());
    let made =
        Command::new("python3").args(["-m", "venv"]).arg(&venv).status().is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "math-verify==0.9.0", "antlr4-python3-runtime==4.13.2"])
                .status()
                .is_ok_and(|s| s.success());
    (made && has(&python)).then_some(python)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = root.join("tests/data/math_cases.jsonl");
    let target = root.join("../../target");
    let cases = load(&table);
    let n = cases.len();

    // temper: per-case medians, then whole-table passes.
    let mut temper_results = Vec::with_capacity(n);
    let mut temper_case_s = Vec::with_capacity(n);
    for case in &cases {
        let mut times = Vec::with_capacity(REPS);
        let mut verdict = None;
        for _ in 0..REPS {
            let start = Instant::now();
            verdict = Some(explain(&case.gold, &case.completion));
            times.push(start.elapsed().as_secs_f64());
        }
        temper_results.push(verdict.expect("ran"));
        temper_case_s.push(median(times));
    }
    let passes = 200;
    let start = Instant::now();
    let mut sink = 0usize;
    for _ in 0..passes {
        for case in &cases {
            sink += usize::from(temper_verify::math::verify(&case.gold, &case.completion));
        }
    }
    let temper_total = start.elapsed().as_secs_f64();
    assert!(sink > 0);
    let temper_rate = (passes * n) as f64 / temper_total;

    // math-verify, in its own process.
    let reference = python(&target).and_then(|py| {
        let out = Command::new(py)
            .arg(root.join("benches/math_verify_ref.py"))
            .arg(&table)
            .arg(REPS.to_string())
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!("math-verify failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        serde_json::from_slice::<Value>(&out.stdout).ok()
    });

    let agree =
        |results: &[bool]| results.iter().zip(&cases).filter(|(r, c)| **r == c.expected).count();
    let temper_bools: Vec<bool> = temper_results.iter().map(|v| v.equivalent).collect();
    let temper_agree = agree(&temper_bools);
    println!("math answer verification: {n} hand-labelled cases, single process each\n");
    println!(
        "{:<14} {:>10} {:>14} {:>16} {:>14}",
        "verifier", "agreement", "cases/s", "median case µs", "max case ms"
    );
    let row = |name: &str, agreed: usize, rate: f64, med: f64, max: f64| {
        println!(
            "{name:<14} {:>9.1}% {rate:>14.0} {:>16.1} {:>14.3}",
            100.0 * agreed as f64 / n as f64,
            med * 1e6,
            max * 1e3
        );
    };
    let t_max = temper_case_s.iter().copied().fold(0.0, f64::max);
    row("temper", temper_agree, temper_rate, median(temper_case_s.clone()), t_max);

    let mut report = json!({
        "cases": n,
        "temper": {"agreement": temper_agree as f64 / n as f64, "cases_per_s": temper_rate,
                   "median_case_us": median(temper_case_s.clone()) * 1e6, "max_case_ms": t_max * 1e3},
    });
    // Hostile inputs (deep nesting, huge exponents, 60,000-character answers): slowest case.
    let hostile = adversarial::inputs();
    let hostile_times: Vec<f64> = hostile
        .iter()
        .map(|(g, c)| {
            median(
                (0..REPS)
                    .map(|_| {
                        let start = Instant::now();
                        let _ = explain(g, c);
                        start.elapsed().as_secs_f64()
                    })
                    .collect(),
            )
        })
        .collect();
    let (slowest, hostile_max) = hostile_times
        .iter()
        .copied()
        .enumerate()
        .fold((0, 0.0), |acc, (i, t)| if t > acc.1 { (i, t) } else { acc });
    let shorten = |s: &str| s.chars().take(40).collect::<String>();
    println!(
        "{:<14} {:>10} {:>14} {:>16} {:>14.3}",
        "temper hostile",
        "-",
        "-",
        "-",
        hostile_max * 1e3
    );
    println!(
        "  (slowest hostile input: gold {:?}…, completion {:?}… of {} characters)",
        shorten(&hostile[slowest].0),
        shorten(&hostile[slowest].1),
        hostile[slowest].1.len()
    );
    report["temper"]["hostile_inputs"] = json!(hostile.len());
    report["temper"]["hostile_max_case_ms"] = json!(hostile_max * 1e3);
    let mut disagreements = Vec::new();
    if let Some(r) = &reference {
        let mv: Vec<bool> = r["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|b| b.as_bool().unwrap_or(false))
            .collect();
        let per_case: Vec<f64> =
            r["per_case_s"].as_array().expect("times").iter().filter_map(Value::as_f64).collect();
        let mv_rate =
            r["runs"].as_f64().unwrap_or(0.0) / r["total_s"].as_f64().unwrap_or(f64::INFINITY);
        let mv_agree = agree(&mv);
        let mv_max = per_case.iter().copied().fold(0.0, f64::max);
        row("math-verify", mv_agree, mv_rate, median(per_case.clone()), mv_max);
        println!("\nthroughput ratio temper / math-verify: {:.0}×", temper_rate / mv_rate);
        report["math_verify"] = json!({"agreement": mv_agree as f64 / n as f64, "cases_per_s": mv_rate,
            "median_case_us": median(per_case) * 1e6, "max_case_ms": mv_max * 1e3, "version": "0.9.0"});
        report["speedup"] = json!(temper_rate / mv_rate);
        println!("\ncases where math-verify disagrees with the hand label:");
        for (i, case) in cases.iter().enumerate() {
            if mv[i] != case.expected {
                let parsed = &r["parsed"][i];
                let line = format!(
                    "[{}] gold {:?} completion {:?}: label {}, math-verify {} (parsed gold {}, answer {}); temper {} by rule `{}` ({} vs {})",
                    case.category,
                    case.gold,
                    case.completion,
                    case.expected,
                    mv[i],
                    parsed[0],
                    parsed[1],
                    temper_results[i].equivalent,
                    temper_results[i].rule,
                    temper_results[i].gold,
                    temper_results[i].answer
                );
                println!("  {line}");
                disagreements.push(line);
            }
        }
    } else {
        println!(
            "\nmath-verify is not available (set MATH_VERIFY_PYTHON or allow pip to install it)"
        );
    }
    println!("\ncases where temper disagrees with the hand label:");
    for (i, case) in cases.iter().enumerate() {
        if temper_bools[i] != case.expected {
            let v = &temper_results[i];
            let line = format!(
                "[{}] gold {:?} completion {:?}: label {}, temper {} by rule `{}` ({} vs {})",
                case.category,
                case.gold,
                case.completion,
                case.expected,
                v.equivalent,
                v.rule,
                v.gold,
                v.answer
            );
            println!("  {line}");
            disagreements.push(line);
        }
    }
    report["disagreements"] = json!(disagreements);

    // The other tables: agreement, false positives and false negatives (math-verify is slow
    // enough that one pass over 500 cases takes a minute, so one pass each).
    let tables = [
        ("redteam", "independent red-team table", "math_redteam.jsonl"),
        (
            "families",
            "answer-family table (prose, labels, relations, matrices, units)",
            "math_families.jsonl",
        ),
        ("models", "model-style endings, written independently", "math_models.jsonl"),
        ("heldout", "model-style endings, a second independent table", "math_heldout.jsonl"),
    ];
    let mv_python = python(&target);
    for (key, title, file) in tables {
        let path = root.join("tests/data").join(file);
        let cases = load(&path);
        let score = |results: &[bool]| {
            let fp = results.iter().zip(&cases).filter(|(r, c)| **r && !c.expected).count();
            let fneg = results.iter().zip(&cases).filter(|(r, c)| !**r && c.expected).count();
            (1.0 - (fp + fneg) as f64 / cases.len() as f64, fp, fneg)
        };
        let ours: Vec<bool> =
            cases.iter().map(|c| temper_verify::math::verify(&c.gold, &c.completion)).collect();
        let (t_agree, t_fp, t_fn) = score(&ours);
        println!("\n{title}: {} cases", cases.len());
        println!(
            "{:<14} {:>10} {:>16} {:>16}",
            "verifier", "agreement", "false positives", "false negatives"
        );
        println!("{:<14} {:>9.1}% {t_fp:>16} {t_fn:>16}", "temper", 100.0 * t_agree);
        report[key] = json!({"cases": cases.len(), "temper": {"agreement": t_agree, "false_positives": t_fp, "false_negatives": t_fn}});
        let Some(py) = &mv_python else { continue };
        let out = Command::new(py)
            .arg(root.join("benches/math_verify_ref.py"))
            .arg(&path)
            .arg("1")
            .output();
        if let Some(out) = out.ok().filter(|o| o.status.success()) {
            let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let mv: Vec<bool> = r["results"]
                .as_array()
                .map(|a| a.iter().map(|b| b.as_bool().unwrap_or(false)).collect())
                .unwrap_or_default();
            if mv.len() == cases.len() {
                let (m_agree, m_fp, m_fn) = score(&mv);
                println!("{:<14} {:>9.1}% {m_fp:>16} {m_fn:>16}", "math-verify", 100.0 * m_agree);
                report[key]["math_verify"] =
                    json!({"agreement": m_agree, "false_positives": m_fp, "false_negatives": m_fn});
            }
        }
    }
    let out = target.join("bench/math_verify.json");
    std::fs::create_dir_all(out.parent().expect("parent")).expect("mkdir");
    std::fs::write(&out, serde_json::to_vec_pretty(&report).expect("json")).expect("write");
    println!("\nwrote {}", out.display());
}
