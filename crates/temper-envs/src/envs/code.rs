//! `code`: write a Python program that passes stdin/stdout tests.
//!
//! Each problem states its input and output format; the model answers with one fenced Python
//! block. Reward: `code_tests` with every test required to pass (APPS/CodeContests style), run
//! through the code runner (the sandbox). The built-in bank has 10 short problems written for
//! temper with 3 to 4 tests each; the eval split is the bank once, the train split cycles it.
//! Real datasets load through an `environment.toml` whose rows carry `info.tests`.

use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use serde_json::{Map, json};

use super::user_example;
use crate::rewards::{CodeTests, Format};
use crate::rollout::SingleTurn;
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "code";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Write a complete Python 3 program that reads standard input and \
writes standard output. Give the whole program in a single ```python code block.";

/// (statement, [(stdin, expected stdout)]).
pub const BANK: &[(&str, &[(&str, &str)])] = &[
    (
        "The input is a line of integers separated by spaces. Print their sum.",
        &[("1 2 3\n", "6\n"), ("-5 5\n", "0\n"), ("100\n", "100\n")],
    ),
    (
        "The input is one line of text. Print it reversed.",
        &[("abc\n", "cba\n"), ("racecar\n", "racecar\n"), ("ab cd\n", "dc ba\n")],
    ),
    (
        "The input is an integer n (1 <= n <= 30). Print the numbers 1 to n, one per line, but print Fizz for multiples of 3, Buzz for multiples of 5 and FizzBuzz for multiples of both.",
        &[
            ("5\n", "1\n2\nFizz\n4\nBuzz\n"),
            ("1\n", "1\n"),
            ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz\n"),
        ],
    ),
    (
        "The input is an integer n (0 <= n <= 20). Print n factorial.",
        &[("0\n", "1\n"), ("5\n", "120\n"), ("20\n", "2432902008176640000\n")],
    ),
    (
        "The input is one line of text. Print the number of vowels (a, e, i, o, u, either case) in it.",
        &[("hello\n", "2\n"), ("AEIOU xyz\n", "5\n"), ("rhythm\n", "0\n")],
    ),
    (
        "The input is two integers a and b on one line (1 <= a, b <= 10^9). Print their greatest common divisor.",
        &[("12 18\n", "6\n"), ("7 13\n", "1\n"), ("1000000000 500000000\n", "500000000\n")],
    ),
    (
        "The input is an integer n (0 <= n <= 90). Print the n-th Fibonacci number, where F(0) = 0 and F(1) = 1.",
        &[("0\n", "0\n"), ("10\n", "55\n"), ("90\n", "2880067194370816120\n")],
    ),
    (
        "The input is a line of integers separated by spaces. Print them in increasing order, separated by single spaces.",
        &[("3 1 2\n", "1 2 3\n"), ("5\n", "5\n"), ("-1 10 -20 0\n", "-20 -1 0 10\n")],
    ),
    (
        "The input is one word. Print YES if it is a palindrome and NO otherwise (case-sensitive).",
        &[("level\n", "YES\n"), ("Level\n", "NO\n"), ("a\n", "YES\n"), ("ab\n", "NO\n")],
    ),
    (
        "The first line holds n; the next n lines hold one integer each. Print the largest of them.",
        &[("3\n1\n9\n4\n", "9\n"), ("1\n-7\n", "-7\n"), ("4\n-1\n-2\n-3\n-4\n", "-1\n")],
    ),
];

/// Problem `index` of the bank (cycling), with its tests in `info.tests`.
pub fn generate(_rng: &mut ChaCha8Rng, index: usize) -> Example {
    let (statement, tests) = BANK[index % BANK.len()];
    let tests: Vec<_> =
        tests.iter().map(|(stdin, out)| json!({"stdin": stdin, "expected_stdout": out})).collect();
    let mut info = Map::new();
    info.insert("tests".into(), json!(tests));
    user_example(statement.to_owned(), String::new(), info)
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Python programs judged by stdin/stdout tests."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Code,
        data: options.generated(generate, BANK.len() * 10, BANK.len()),
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("code_tests", 1.0, CodeTests::default()).with(
            "format",
            0.0,
            Format {},
        ),
        limits: TurnLimits::single_turn(),
    }
}
