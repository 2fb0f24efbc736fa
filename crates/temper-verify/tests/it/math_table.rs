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
    // The acceptance bar is 98% agreement; the table is held at 100% so that any new
    // disagreement is looked at rather than absorbed.
    assert!(wrong.is_empty(), "{} of {total} cases disagree:\n{}", wrong.len(), wrong.join("\n"));
}
