//! Countdown: reach a target with +, −, ×, ÷ over given numbers, each used at most once.
//!
//! The answer is an expression such as `(25 + 5) * 4`; a trailing `= 120` is allowed. It is
//! evaluated with exact fractions, so `8 / 3 * 3` is 8; each number in it must be one of the
//! given numbers, used no more often than it is given.

use std::collections::HashSet;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::Zero;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

/// A countdown puzzle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// The numbers that may be used.
    pub numbers: Vec<u32>,
    /// The value to reach.
    pub target: u32,
    /// The generator's expression.
    pub solution: String,
}

const MAX_NUMBERS: usize = 8;
const MAX_NUMBER: u32 = 1000;
const MAX_DEPTH: usize = 32;

/// A puzzle at `difficulty` 1–5: 3, 4, 5, 6 and 6 numbers, targets up to 99, 200, 500, 999.
pub fn generate(difficulty: u8, rng: &mut dyn RngCore) -> Puzzle {
    let d = usize::from(difficulty.clamp(1, 5));
    let n = [3, 4, 5, 6, 6][d - 1];
    let (lo, hi) = [(10, 99), (10, 200), (50, 500), (100, 999), (101, 999)][d - 1];
    let min_used = [2, 2, 3, 3, 4][d - 1];
    loop {
        let large = if d >= 3 { rng.random_range(0..=2) } else { rng.random_range(0..=1) };
        let mut bigs = [25, 50, 75, 100];
        bigs.shuffle(rng);
        let mut numbers: Vec<u32> = bigs[..large].to_vec();
        while numbers.len() < n {
            numbers.push(rng.random_range(1..=10));
        }
        numbers.shuffle(rng);
        let used = rng.random_range(min_used..=n);
        let mut items: Vec<(i64, String)> =
            numbers[..used].iter().map(|&v| (i64::from(v), v.to_string())).collect();
        while items.len() > 1 {
            let i = rng.random_range(0..items.len());
            let a = items.swap_remove(i);
            let j = rng.random_range(0..items.len());
            let b = items.swap_remove(j);
            let (hi_item, lo_item) = if a.0 >= b.0 { (a, b) } else { (b, a) };
            let choices = ops(hi_item.0, lo_item.0);
            let (value, op) = choices[rng.random_range(0..choices.len())];
            items.push((value, format!("({} {op} {})", hi_item.1, lo_item.1)));
        }
        let (value, expr) = items.pop().expect("one item left");
        if (lo..=hi).contains(&value) && !numbers.iter().any(|&x| i64::from(x) == value) {
            let expr = expr.strip_prefix('(').and_then(|e| e.strip_suffix(')')).unwrap_or(&expr);
            return Puzzle { numbers, target: value as u32, solution: expr.to_owned() };
        }
    }
}

/// The integer results of combining `a >= b` (positive integers, no trivial ×1 or ÷1).
fn ops(a: i64, b: i64) -> Vec<(i64, char)> {
    let mut out = vec![(a + b, '+')];
    if a > b {
        out.push((a - b, '-'));
    }
    if b > 1 {
        out.push((a * b, '*'));
        if a % b == 0 {
            out.push((a / b, '/'));
        }
    }
    out
}

impl Puzzle {
    pub(crate) fn prompt(&self) -> String {
        let numbers: Vec<String> = self.numbers.iter().map(u32::to_string).collect();
        format!(
            "Using the numbers {}, each at most once (you need not use them all), and the \
             operations +, -, * and / with parentheses, write an arithmetic expression whose \
             value is exactly {}.\nThe answer is the expression alone, for example (3 + 4) * 2.",
            numbers.join(", "),
            self.target
        )
    }

    pub(crate) fn reference(&self) -> String {
        self.solution.clone()
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.numbers.is_empty() || self.numbers.len() > MAX_NUMBERS {
            return Err(format!(
                "countdown: {} numbers, not 1 to {MAX_NUMBERS}",
                self.numbers.len()
            ));
        }
        if let Some(x) = self.numbers.iter().find(|&&x| x == 0 || x > MAX_NUMBER) {
            return Err(format!("countdown: number {x} is not in 1..={MAX_NUMBER}"));
        }
        Ok(())
    }

    pub(crate) fn check(&self, answer: &str) -> Result<(), String> {
        let expr = answer.split('=').next().unwrap_or_default();
        let mut parser = Parser { tokens: tokens(expr)?, at: 0, used: Vec::new() };
        let value = parser.expr(0)?;
        if parser.at != parser.tokens.len() {
            return Err(format!("unexpected {:?} after the expression", parser.tokens[parser.at]));
        }
        let mut left = self.numbers.clone();
        for n in &parser.used {
            match left.iter().position(|x| x == n) {
                Some(i) => {
                    left.swap_remove(i);
                }
                None => return Err(format!("{n} is not one of the numbers left to use")),
            }
        }
        if value != BigRational::from_integer(BigInt::from(self.target)) {
            return Err(format!("the expression equals {value}, not {}", self.target));
        }
        Ok(())
    }

    pub(crate) fn solve(&self) -> Option<String> {
        let items: Vec<(i64, String)> =
            self.numbers.iter().map(|&v| (i64::from(v), v.to_string())).collect();
        let mut seen = HashSet::new();
        search(&items, i64::from(self.target), &mut seen)
    }
}

/// Depth-first search over pairwise combinations; `seen` holds the value multisets tried.
fn search(items: &[(i64, String)], target: i64, seen: &mut HashSet<Vec<i64>>) -> Option<String> {
    if let Some((_, e)) = items.iter().find(|(v, _)| *v == target) {
        return Some(e.clone());
    }
    let mut key: Vec<i64> = items.iter().map(|i| i.0).collect();
    key.sort_unstable();
    if items.len() < 2 || !seen.insert(key) {
        return None;
    }
    for i in 0..items.len() {
        for j in 0..items.len() {
            if i == j || items[i].0 < items[j].0 || (items[i].0 == items[j].0 && i > j) {
                continue;
            }
            for (value, op) in ops(items[i].0, items[j].0) {
                let mut next: Vec<(i64, String)> = items
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| *k != i && *k != j)
                    .map(|(_, x)| x.clone())
                    .collect();
                next.push((value, format!("({} {op} {})", items[i].1, items[j].1)));
                if let Some(found) = search(&next, target, seen) {
                    return Some(found);
                }
            }
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(u32),
    Op(char),
    Open,
    Close,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' | '$' | '`' => {}
            '0'..='9' => {
                let mut value = u64::from(c.to_digit(10).unwrap_or(0));
                while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                    value = value.saturating_mul(10).saturating_add(u64::from(d));
                    chars.next();
                }
                let n = u32::try_from(value).map_err(|_| format!("{value} is too large"))?;
                out.push(Token::Num(n));
            }
            '+' => out.push(Token::Op('+')),
            '-' | '−' | '–' => out.push(Token::Op('-')),
            '*' | '×' | '·' | '⋅' => out.push(Token::Op('*')),
            '/' | '÷' => out.push(Token::Op('/')),
            '(' | '[' => out.push(Token::Open),
            ')' | ']' => out.push(Token::Close),
            '\\' => {
                let name: String =
                    std::iter::from_fn(|| chars.next_if(char::is_ascii_alphabetic)).collect();
                match name.as_str() {
                    "times" | "cdot" => out.push(Token::Op('*')),
                    "div" => out.push(Token::Op('/')),
                    "left" | "right" => {}
                    _ => return Err(format!("unexpected \\{name} in the expression")),
                }
            }
            other => return Err(format!("unexpected {other:?} in the expression")),
        }
        if out.len() > 256 {
            return Err("the expression is too long".into());
        }
    }
    if out.is_empty() {
        return Err("no expression".into());
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    used: Vec<u32>,
}

impl Parser {
    fn expr(&mut self, depth: usize) -> Result<BigRational, String> {
        let mut value = self.term(depth)?;
        while let Some(Token::Op(op @ ('+' | '-'))) = self.tokens.get(self.at).cloned() {
            self.at += 1;
            let rhs = self.term(depth)?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn term(&mut self, depth: usize) -> Result<BigRational, String> {
        let mut value = self.factor(depth)?;
        while let Some(Token::Op(op @ ('*' | '/'))) = self.tokens.get(self.at).cloned() {
            self.at += 1;
            let rhs = self.factor(depth)?;
            if op == '*' {
                value *= rhs;
            } else if rhs.is_zero() {
                return Err("division by zero".into());
            } else {
                value /= rhs;
            }
        }
        Ok(value)
    }

    fn factor(&mut self, depth: usize) -> Result<BigRational, String> {
        if depth > MAX_DEPTH {
            return Err("the expression nests too deeply".into());
        }
        match self.tokens.get(self.at).cloned() {
            Some(Token::Num(n)) => {
                self.at += 1;
                self.used.push(n);
                Ok(BigRational::from_integer(BigInt::from(n)))
            }
            Some(Token::Open) => {
                self.at += 1;
                let value = self.expr(depth + 1)?;
                if self.tokens.get(self.at) != Some(&Token::Close) {
                    return Err("a parenthesis is not closed".into());
                }
                self.at += 1;
                Ok(value)
            }
            Some(other) => Err(format!("unexpected {other:?}")),
            None => Err("the expression ends early".into()),
        }
    }
}
