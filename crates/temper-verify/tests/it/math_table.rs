//! The hand-labelled table of (gold, completion, expected) cases in `tests/data/math_cases.jsonl`.

use serde_json::Value;
use temper_verify::math::explain;

#[test]
fn agrees_with_hand_labels() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/math_cases.jsonl"
    ))
    .expect("table");
    let mut total = 0;
    let mut wrong = Vec::new();
    for line in text.lines() {
        let case: Value = serde_json::from_str(line).expect("json");
        let (gold, completion) = (
            case["gold"].as_str().expect("gold"),
            case["completion"].as_str().expect("completion"),
        );
        let expected = case["expected"].as_bool().expect("expected");
        let verdict = explain(gold, completion);
        total += 1;
        if verdict.equivalent != expected {
            wrong.push(format!(
                "[{}] gold {gold:?} completion {completion:?}: expected {expected}, got {} ({}: {} vs {})",
                case["category"], verdict.equivalent, verdict.rule, verdict.gold, verdict.answer
            ));
        }
    }
    assert!(total >= 200, "the table has {total} cases");
    let agreement = 1.0 - wrong.len() as f64 / f64::from(total);
    assert!(
        agreement >= 0.98,
        "agreement {agreement:.3} over {total} cases; disagreements:\n{}",
        wrong.join("\n")
    );
    // Print the disagreements left, for the record (visible with --nocapture).
    for w in &wrong {
        println!("disagreement: {w}");
    }
}
