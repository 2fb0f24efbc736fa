//! `math`: grade-school word problems in the style of GSM8K, with the answer in `\boxed{}`.
//!
//! Problems come from eight seeded templates (totals, rates, wages, percentages, remainders,
//! perimeters, differences and fraction sums) with random numbers, so the answer is known exactly.
//! Reward: `math_equiv` between the boxed answer and the reference (`0.5` equals `\frac{1}{2}`,
//! `1,000` equals `1000`). A dataset of real problems (GSM8K, MATH) can be used through an
//! `environment.toml` with this rubric.

use std::sync::Arc;

use rand::Rng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::Map;

use super::user_example;
use crate::rewards::{Format, MathEquiv};
use crate::rollout::SingleTurn;
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "math";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Solve the problem. Reason step by step, then give the final \
answer in \\boxed{}.";

const PEOPLE: &[&str] =
    &["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jon"];

/// One number from each range, drawn in order.
fn draw<const N: usize>(rng: &mut ChaCha8Rng, ranges: [std::ops::Range<u64>; N]) -> [u64; N] {
    ranges.map(|r| rng.random_range(r))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One problem from a random template; `answer` is exact (an integer or a reduced fraction).
pub fn generate(rng: &mut ChaCha8Rng, _index: usize) -> Example {
    let who = PEOPLE.choose(rng).copied().unwrap_or("Ana");
    let (question, answer) = match rng.random_range(0..8) {
        0 => {
            let [a, b, c] = draw(rng, [2..50, 2..10, 2..13]);
            (
                format!(
                    "{who} has {a} apples and buys {b} bags with {c} apples in each. How many apples does {who} have now?"
                ),
                (a + b * c).to_string(),
            )
        }
        1 => {
            let (v, t) = (rng.random_range(40..130u64), rng.random_range(2..9u64));
            (
                format!(
                    "A train travels at {v} km per hour for {t} hours. How many kilometres does it travel?"
                ),
                (v * t).to_string(),
            )
        }
        2 => {
            let [w, h, k] = draw(rng, [10..40, 10..41, 2..6]);
            (
                format!(
                    "{who} earns ${w} per hour and works {h} hours each week. How many dollars does {who} earn in {k} weeks?"
                ),
                (w * h * k).to_string(),
            )
        }
        3 => {
            let (n, p) = (20 * rng.random_range(1..8u64), 5 * rng.random_range(1..20u64));
            (
                format!(
                    "A school club has {n} members and {p}% of them are girls. How many members are boys?"
                ),
                (n - n * p / 100).to_string(),
            )
        }
        4 => {
            let (a, d) = (rng.random_range(10..60u64), rng.random_range(2..8u64));
            let s = rng.random_range(1..a * d);
            (
                format!(
                    "A baker bakes {a} loaves every day for {d} days and sells {s} loaves in total. How many loaves are left?"
                ),
                (a * d - s).to_string(),
            )
        }
        5 => {
            let (t, k) = (rng.random_range(20..200u64), rng.random_range(3..12u64));
            (
                format!(
                    "{who} shares {t} candies equally among {k} friends, giving each friend as many as possible, and keeps the rest. How many candies does {who} keep?"
                ),
                (t % k).to_string(),
            )
        }
        6 => {
            let (l, w) = (rng.random_range(3..60u64), rng.random_range(3..60u64));
            (
                format!("A rectangle is {l} cm long and {w} cm wide. What is its perimeter in cm?"),
                (2 * (l + w)).to_string(),
            )
        }
        _ => {
            let [a, b, c, d] = draw(rng, [1..9, 2..10, 1..9, 2..10]);
            let (num, den) = (a * d + c * b, b * d);
            let g = gcd(num, den);
            let answer = if den / g == 1 {
                (num / g).to_string()
            } else {
                format!("{}/{}", num / g, den / g)
            };
            (
                format!(
                    "What is {a}/{b} + {c}/{d}? Give the answer as a fraction in lowest terms."
                ),
                answer,
            )
        }
    };
    user_example(question, answer, Map::new())
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(
            NAME,
            VERSION,
            "Grade-school word problems; boxed answer checked for equivalence.",
        ),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Boxed,
        data: options.generated(generate, 10_000, 200),
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("math_equiv", 1.0, MathEquiv {}).with("format", 0.0, Format {}),
        limits: TurnLimits::single_turn(),
    }
}
