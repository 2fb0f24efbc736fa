//! `calculator`: arithmetic with a tool.
//!
//! Each problem is a multi-step computation on large numbers (products, differences, integer
//! quotients) that is easy to get wrong by hand. The model is offered a `calculator` tool and
//! answers in `\boxed{}`. Reward: `math_equiv` of the boxed answer; the number of tool calls is
//! logged as a weight-0 metric. A minimal tool-use task in the style of the ToolRL/ReTool
//! calculator environments.

use std::sync::Arc;

use async_trait::async_trait;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::Map;
use temper_protocol::Role;

use super::user_example;
use crate::rewards::MathEquiv;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::tools::{Calculator, ToolUse};
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "calculator";
const VERSION: &str = "0.1.0";
/// Turns allowed (tool calls and the final answer).
pub const MAX_TURNS: u32 = 8;
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Compute the exact value. Use the calculator tool for arithmetic. \
When you know the result, give it in \\boxed{}.";

/// `a × b − c` or `(a × b) ÷ d` with an exact integer result.
pub fn generate(rng: &mut ChaCha8Rng, _index: usize) -> Example {
    let a: i64 = rng.random_range(100..10_000);
    let b: i64 = rng.random_range(100..10_000);
    let (question, answer) = if rng.random_bool(0.5) {
        let c: i64 = rng.random_range(1_000..1_000_000);
        (format!("What is {a} × {b} − {c}?"), a * b - c)
    } else {
        let d: i64 = rng.random_range(2..100);
        let a = a * d;
        (format!("What is ({a} × {b}) ÷ {d}?"), a * b / d)
    };
    user_example(question, answer.to_string(), Map::new())
}

/// Counts the tool calls the model made.
#[derive(Debug, Clone, Copy)]
pub struct ToolCalls;

#[async_trait]
impl RewardFunction for ToolCalls {
    async fn score(&self, input: &RewardInput<'_>, _: &Services) -> Result<f64, RewardError> {
        Ok(input
            .completion
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(|m| m.tool_calls.len())
            .sum::<usize>() as f64)
    }
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Exact arithmetic with a calculator tool."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Boxed,
        data: options.generated(generate, 10_000, 200),
        interaction: Arc::new(
            ToolUse::new(vec![Arc::new(Calculator)]).expect("the calculator schema is valid"),
        ),
        rubric: Rubric::new().with("math_equiv", 1.0, MathEquiv {}).with(
            "tool_calls",
            0.0,
            ToolCalls,
        ),
        limits: TurnLimits::turns(MAX_TURNS),
    }
}
