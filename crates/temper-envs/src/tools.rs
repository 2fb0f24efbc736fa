//! Tool use: the model calls functions, the environment runs them and answers with their output.
//!
//! A tool call that names an unknown tool, or whose arguments are not a JSON object, is answered
//! with an error message to the model (a tool message starting with `error:`); the rollout goes
//! on. The rollout is done when the model answers without calling a tool.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use temper_protocol::{Language, Limits, Message, RunRequest, RunStatus, ToolSpec};

use crate::rollout::{Interaction, RolloutState, Step};
use crate::{EnvError, Services};

/// A function the model may call.
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// Name, description and JSON schema of the arguments.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool. `Err` is shown to the model as `error: <message>`.
    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        services: &Services,
    ) -> Result<String, String>;
}

/// The interaction of tool environments.
#[derive(Debug, Clone)]
pub struct ToolUse {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolUse {
    /// Offers `tools` to the model.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        Self { tools }
    }

    /// Answers one tool call.
    async fn answer(&self, call: &temper_protocol::ToolCall, services: &Services) -> String {
        let name = &call.function.name;
        let Some(tool) = self.tools.iter().find(|t| t.spec().function.name == *name) else {
            let known: Vec<String> = self.tools.iter().map(|t| t.spec().function.name).collect();
            return format!("error: unknown tool `{name}`; available tools: {}", known.join(", "));
        };
        let raw =
            if call.function.arguments.trim().is_empty() { "{}" } else { &call.function.arguments };
        let arguments = match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return format!("error: arguments must be a JSON object, not {other}"),
            Err(e) => return format!("error: arguments are not valid JSON: {e}"),
        };
        match tool.call(&arguments, services).await {
            Ok(output) => output,
            Err(message) => format!("error: {message}"),
        }
    }
}

#[async_trait]
impl Interaction for ToolUse {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    fn is_done(&self, state: &RolloutState<'_>) -> bool {
        state.last_reply().is_none_or(|m| m.tool_calls.is_empty())
    }

    async fn respond(
        &self,
        state: &mut RolloutState<'_>,
        services: &Services,
    ) -> Result<Step, EnvError> {
        let calls = state.last_reply().map(|m| m.tool_calls.clone()).unwrap_or_default();
        let mut messages = Vec::with_capacity(calls.len());
        for call in &calls {
            let output = self.answer(call, services).await;
            messages.push(Message::tool(&call.id, &call.function.name, output));
        }
        Ok(Step::Continue(messages))
    }
}

/// Builds a built-in tool by name: `calculator` or `python`.
pub fn builtin_tool(name: &str) -> Option<Arc<dyn Tool>> {
    match name {
        "calculator" => Some(Arc::new(Calculator)),
        "python" => Some(Arc::new(Python)),
        _ => None,
    }
}

/// Names of the built-in tools.
pub const BUILTIN_TOOLS: &[&str] = &["calculator", "python"];

/// Evaluates an arithmetic expression: `+ - * / ^`, parentheses, decimals.
#[derive(Debug, Clone, Copy)]
pub struct Calculator;

#[async_trait]
impl Tool for Calculator {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "calculator",
            "Evaluate an arithmetic expression with + - * / ^ and parentheses, e.g. (3 + 4) * 2.",
            json!({"type": "object",
                   "properties": {"expression": {"type": "string", "description": "the expression"}},
                   "required": ["expression"]}),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        _: &Services,
    ) -> Result<String, String> {
        let expression = arguments
            .get("expression")
            .and_then(Value::as_str)
            .ok_or("missing string argument `expression`")?;
        let value = calc::evaluate(expression)?;
        Ok(calc::format(value))
    }
}

/// Runs a Python program through the code runner and returns its output.
#[derive(Debug, Clone, Copy)]
pub struct Python;

#[async_trait]
impl Tool for Python {
    fn spec(&self) -> ToolSpec {
        ToolSpec::function(
            "python",
            "Run a Python 3 program and return what it prints (stdout, then stderr).",
            json!({"type": "object",
                   "properties": {"code": {"type": "string", "description": "the program"}},
                   "required": ["code"]}),
        )
    }

    async fn call(
        &self,
        arguments: &serde_json::Map<String, Value>,
        services: &Services,
    ) -> Result<String, String> {
        let code = arguments
            .get("code")
            .and_then(Value::as_str)
            .ok_or("missing string argument `code`")?;
        let runner = services.code_runner.as_ref().ok_or("no code runner is configured")?;
        let request = RunRequest {
            language: Language::Python,
            code: code.to_owned(),
            stdin: String::new(),
            limits: Limits {
                time_limit_ms: Some(10_000),
                memory_mb: Some(512),
                output_bytes: Some(16_384),
            },
        };
        let result = runner.run(request).await.map_err(|e| e.to_string())?;
        let mut out = result.stdout;
        if !result.stderr.is_empty() {
            out.push_str(&result.stderr);
        }
        if result.status != RunStatus::Ok {
            out.push_str(&format!("\n[{:?}]", result.status));
        }
        Ok(out)
    }
}

/// A bounded arithmetic evaluator for the calculator tool.
pub mod calc {
    /// Longest expression accepted.
    pub const MAX_LEN: usize = 1_000;
    const MAX_DEPTH: usize = 64;

    /// Evaluates `expr`; the error says what is wrong and where.
    ///
    /// Grammar: `sum := product (('+'|'-') product)*`, `product := unary (('*'|'/') unary)*`,
    /// `unary := ('-'|'+') unary | power`, `power := atom ('^' unary)?`, so `-2^2 = -4` and
    /// `2^3^2 = 2^9`.
    pub fn evaluate(expr: &str) -> Result<f64, String> {
        if expr.len() > MAX_LEN {
            return Err(format!("expression longer than {MAX_LEN} characters"));
        }
        let mut p = Calc { chars: expr.chars().collect(), pos: 0, depth: 0 };
        let value = p.sum()?;
        if let Some(c) = p.peek() {
            return Err(format!("unexpected `{c}` at position {}", p.pos + 1));
        }
        if !value.is_finite() {
            return Err("result is not a finite number".into());
        }
        Ok(value)
    }

    /// Formats a result: integers without a decimal point, others with up to 12 decimals.
    pub fn format(value: f64) -> String {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{}", value as i64)
        } else {
            let s = format!("{value:.12}");
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
    }

    struct Calc {
        chars: Vec<char>,
        pos: usize,
        depth: usize,
    }

    impl Calc {
        /// The next non-space character, without consuming it.
        fn peek(&mut self) -> Option<char> {
            while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
                self.pos += 1;
            }
            self.chars.get(self.pos).copied()
        }

        fn nested<T>(
            &mut self,
            f: impl FnOnce(&mut Self) -> Result<T, String>,
        ) -> Result<T, String> {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(format!("expression nested deeper than {MAX_DEPTH}"));
            }
            let v = f(self);
            self.depth -= 1;
            v
        }

        fn sum(&mut self) -> Result<f64, String> {
            let mut value = self.product()?;
            while let Some(op @ ('+' | '-')) = self.peek() {
                self.pos += 1;
                let rhs = self.product()?;
                value = if op == '+' { value + rhs } else { value - rhs };
            }
            Ok(value)
        }

        fn product(&mut self) -> Result<f64, String> {
            let mut value = self.unary()?;
            while let Some(op @ ('*' | '/' | '×' | '÷')) = self.peek() {
                self.pos += 1;
                let rhs = self.unary()?;
                if matches!(op, '/' | '÷') {
                    if rhs == 0.0 {
                        return Err("division by zero".into());
                    }
                    value /= rhs;
                } else {
                    value *= rhs;
                }
            }
            Ok(value)
        }

        fn unary(&mut self) -> Result<f64, String> {
            match self.peek() {
                Some('-') => {
                    self.pos += 1;
                    self.nested(|p| p.unary().map(|v| -v))
                }
                Some('+') => {
                    self.pos += 1;
                    self.nested(Self::unary)
                }
                _ => self.power(),
            }
        }

        fn power(&mut self) -> Result<f64, String> {
            let base = self.atom()?;
            if self.peek() == Some('^') {
                self.pos += 1;
                let exponent = self.nested(Self::unary)?;
                return Ok(base.powf(exponent));
            }
            Ok(base)
        }

        fn atom(&mut self) -> Result<f64, String> {
            match self.peek() {
                Some('(') => {
                    self.pos += 1;
                    let v = self.nested(Self::sum)?;
                    if self.peek() != Some(')') {
                        return Err(format!("missing `)` at position {}", self.pos + 1));
                    }
                    self.pos += 1;
                    Ok(v)
                }
                Some(c) if c.is_ascii_digit() || c == '.' => {
                    let start = self.pos;
                    while self
                        .chars
                        .get(self.pos)
                        .is_some_and(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                    {
                        self.pos += 1;
                    }
                    let text: String =
                        self.chars[start..self.pos].iter().filter(|&&c| c != ',').collect();
                    text.parse().map_err(|_| format!("bad number `{text}`"))
                }
                Some(c) => Err(format!("unexpected `{c}` at position {}", self.pos + 1)),
                None => Err("expression ends too early".into()),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn arithmetic_table() {
            let cases = [
                ("1 + 2 * 3", Ok(7.0)),
                ("(1 + 2) * 3", Ok(9.0)),
                ("2^3^2", Ok(512.0)),
                ("-2^2", Ok(-4.0)),
                ("2^-1", Ok(0.5)),
                ("10 / 4", Ok(2.5)),
                ("1,234 * 2", Ok(2468.0)),
                ("1 / 0", Err("division by zero")),
                ("2 +", Err("ends too early")),
                ("(1", Err("missing `)`")),
                ("1 2", Err("unexpected `2`")),
                ("x", Err("unexpected `x`")),
                ("10^400", Err("not a finite")),
            ];
            for (input, want) in cases {
                match (evaluate(input), want) {
                    (Ok(v), Ok(w)) => assert_eq!(v, w, "{input}"),
                    (Err(e), Err(w)) => assert!(e.contains(w), "{input}: {e}"),
                    (got, _) => panic!("{input}: {got:?}"),
                }
            }
            let deep = format!("{}1{}", "(".repeat(300), ")".repeat(300));
            assert!(evaluate(&"-".repeat(900)).is_err());
            assert!(evaluate(&deep).expect_err("deep").contains("deeper"));
            assert_eq!(format(2.5), "2.5");
            assert_eq!(format(7.0), "7");
            assert_eq!(format(1.0 / 3.0), "0.333333333333");
        }
    }
}
