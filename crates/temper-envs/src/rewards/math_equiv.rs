//! `math_equiv`: 1 when the completion's final answer is mathematically equivalent to the
//! reference, by temper's math verifier (`temper_verify::math`), else 0.
//!
//! With the `boxed` parser (the `math` environment's), the verifier extracts the answer itself
//! from the last turn: the last `\boxed{}`, else a final "answer is ..." line, else a short
//! reply. With another parser, the parsed answer is compared. No answer scores 0.

use async_trait::async_trait;
use serde::Deserialize;

use crate::Parser;
use crate::parser::last_assistant;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};

/// No parameters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MathEquiv {}

#[async_trait]
impl RewardFunction for MathEquiv {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        let gold = &input.example.answer;
        let equal = match input.parser {
            Parser::Boxed => last_assistant(input.completion)
                .is_some_and(|m| temper_verify::math::verify(gold, &m.content)),
            _ => input.parsed_answer().is_some_and(|a| temper_verify::math::equivalent(gold, &a)),
        };
        Ok(f64::from(u8::from(equal)))
    }
}
