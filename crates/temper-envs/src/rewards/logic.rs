//! `logic`: 1 when the parsed answer solves the example's puzzle (`info.puzzle`, see
//! `temper_verify::logic`), else 0. Any valid solution counts, not only the generator's; a
//! completion with no parsable answer scores 0. A row whose `info.puzzle` is missing or malformed
//! fails the reward (an error on the rollout, never a silent 0).

use async_trait::async_trait;
use serde::Deserialize;
use temper_verify::logic::{Puzzle, check};

use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// No parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Logic {}

/// The puzzle of an example's `info`.
pub fn puzzle_of(info: &serde_json::Map<String, serde_json::Value>) -> Result<Puzzle, String> {
    let value = info.get("puzzle").ok_or("the example has no info.puzzle")?;
    let puzzle: Puzzle = serde_json::from_value(value.clone())
        .map_err(|e| format!("info.puzzle is not a puzzle: {e}"))?;
    puzzle.validate()?;
    Ok(puzzle)
}

#[async_trait]
impl RewardFunction for Logic {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let puzzle = puzzle_of(&input.example.info).map_err(RewardError)?;
        let Some(answer) = input.parsed_answer() else { return Ok(0.0) };
        Ok(f64::from(u8::from(check(&puzzle, &answer).is_ok())))
    }
}
