//! The hand-labelled tables of (gold, completion, expected) cases: `tests/data/math_cases.jsonl`
//! (written with the verifier), `tests/data/math_redteam.jsonl` (written independently, to
//! break it: near misses, unusual correct forms, extraction traps), `math_families.jsonl` (answer
//! families as models write them, each with near misses), `math_models.jsonl` and
//! `math_heldout.jsonl` (model-style endings, each written independently).

use serde_json::Value;
use temper_verify::math::explain;

/// Runs a table: (cases, false positives, false negatives), each disagreement described.
fn run(table: &str) -> (usize, Vec<String>, Vec<String>) {
    let path = format!("{}/tests/data/{table}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("table");
    let (mut total, mut fp, mut fneg) = (0, Vec::new(), Vec::new());
    for line in text.lines() {
        let case: Value = serde_json::from_str(line).expect("json");
        let gold = case["gold"].as_str().expect("gold");
        let completion = case["completion"].as_str().expect("completion");
        let expected = case["expected"].as_bool().expect("expected");
        let verdict = explain(gold, completion);
        total += 1;
        if verdict.equivalent != expected {
            let line = format!(
                "[{}] gold {gold:?} completion {completion:?}: expected {expected} ({}: {} vs {})",
                case["category"], verdict.rule, verdict.gold, verdict.answer
            );
            if expected { fneg.push(line) } else { fp.push(line) }
        }
    }
    (total, fp, fneg)
}

/// Runs a table held at 100%: every case must agree, so that a new disagreement is looked at
/// rather than absorbed. The table must hold at least `min_cases`.
fn held_at_full_agreement(table: &str, min_cases: usize) {
    let (total, fp, fneg) = run(table);
    assert!(total >= min_cases, "{table} has {total} cases");
    let wrong: Vec<String> = fp.into_iter().chain(fneg).collect();
    assert!(wrong.is_empty(), "{} of {total} cases disagree:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn agrees_with_hand_labels() {
    // The acceptance bar is 98% agreement; this table is held at 100% so that any new
    // disagreement is looked at rather than absorbed.
    held_at_full_agreement("math_cases.jsonl", 200);
}

#[test]
fn independent_red_team_table() {
    let (total, fp, fneg) = run("math_redteam.jsonl");
    assert!(total >= 500, "{total} cases");
    let agreement = 1.0 - (fp.len() + fneg.len()) as f64 / total as f64;
    // Accepting a wrong answer is the costly error. The few left are float-precision
    // contrivances (\sqrt{2}+10^{-12} against \sqrt2) and 1/(2%) against 50%.
    assert!(fp.len() <= 4, "false positives:\n{}", fp.join("\n"));
    assert!(agreement >= 0.97, "agreement {agreement:.3}; false negatives:\n{}", fneg.join("\n"));
}

#[test]
fn answer_families_table() {
    // Answers as models write them, family by family (prose without a box, labelled answers,
    // relations, matrices, sets, notation, units), each with near misses that must stay wrong.
    held_at_full_agreement("math_families.jsonl", 180);
}

#[test]
fn independent_model_style_table() {
    // Written independently of the verifier (by a writer who did not read it), as models end
    // their solutions. 96.6% agreed when it was written; every disagreement was then looked at
    // and fixed, and the table is held at 100%.
    held_at_full_agreement("math_models.jsonl", 300);
}

#[test]
fn second_independent_table() {
    // A second table written independently (MATH, AIME, GSM8K, Minerva and reasoning-model
    // endings). Measured blind it agreed on 96.3% (1 false positive, 11 false negatives); those
    // were then fixed and it is held at 100%.
    held_at_full_agreement("math_heldout.jsonl", 300);
}
