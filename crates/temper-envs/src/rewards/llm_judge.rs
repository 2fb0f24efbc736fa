//! `llm_judge`: asks a judge model whether the response answers the question correctly given the
//! reference; 1 for a reply starting with "yes" (or holding a line `correct: yes`), 0 for "no",
//! an error for anything else. The judge is the model in `Services::judge` (`temper eval
//! --judge-model`). The prompt template may use `{question}`, `{answer}` (the reference) and
//! `{response}` (the parsed answer, or the last turn when nothing parses).
//!
//! `style = "exam"` picks [`EXAM_PROMPT`], written for Humanity's Last Exam style grading: the
//! judge restates the response's final answer, reasons about it against the reference and ends
//! with `correct: yes` or `correct: no` (it gets 1024 tokens unless `max_tokens` says otherwise).

use async_trait::async_trait;
use serde::Deserialize;
use temper_protocol::{Message, Role, SamplingParams};

use super::{RewardSpec, SpecSource, params};
use crate::parser::last_assistant;
use crate::rubric::{RewardError, RewardFunction, RewardInput, Services};
use crate::{ChatRequest, EnvError};

/// The default judge prompt.
pub const DEFAULT_PROMPT: &str = "You are grading an answer.\n\nQuestion:\n{question}\n\n\
Reference answer:\n{answer}\n\nResponse:\n{response}\n\n\
Does the response give the same final answer as the reference? Reply with exactly one word: yes or no.";

/// A grading prompt for exam questions with one precise answer (Humanity's Last Exam style):
/// the judge names the final answer it read, compares it with the reference allowing only
/// equivalent forms and small numerical rounding, and ends with a `correct:` line.
pub const EXAM_PROMPT: &str = "You are grading a response to an exam question against its \
reference answer.\n\n[question]\n{question}\n\n[response]\n{response}\n\n[reference answer]\n{answer}\n\n\
Grade only the final answer the response gives, not its reasoning. It is correct when it says the \
same thing as the reference answer: an equivalent expression, the same choice, or a number within \
a small rounding of the reference. It is incorrect when it differs, is ambiguous, hedges between \
several answers, or gives none.\n\nReply in exactly this form:\n\
final_answer: <the final answer the response gives, or None>\n\
reasoning: <one or two sentences comparing it with the reference answer>\n\
correct: <yes or no>";

/// The configured judge function.
#[derive(Debug, Clone)]
pub struct LlmJudge {
    /// The prompt template.
    pub prompt: String,
    /// Most tokens of the judge's reply.
    pub max_tokens: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    style: Option<String>,
}

impl Default for LlmJudge {
    fn default() -> Self {
        Self { prompt: DEFAULT_PROMPT.to_owned(), max_tokens: 16 }
    }
}

impl LlmJudge {
    pub(crate) fn from_spec(spec: &RewardSpec, source: SpecSource<'_>) -> Result<Self, EnvError> {
        let p: Params = params(spec, source)?;
        let (style_prompt, style_tokens) = match p.style.as_deref() {
            None | Some("yes_no") => (DEFAULT_PROMPT, 16),
            Some("exam") => (EXAM_PROMPT, 1024),
            Some(other) => {
                return Err(source.error("style", format!("`{other}` is not `yes_no` or `exam`")));
            }
        };
        if p.style.is_some() && p.prompt.is_some() {
            return Err(source.error("prompt", "give a `prompt` or a `style`, not both"));
        }
        let prompt = p.prompt.unwrap_or_else(|| style_prompt.to_owned());
        if !prompt.contains("{response}") {
            return Err(source.error("prompt", "the judge prompt must contain `{response}`"));
        }
        Ok(Self { prompt, max_tokens: p.max_tokens.unwrap_or(style_tokens) })
    }
}

/// Reads a yes/no verdict from the judge's reply: its first word, or the last line that starts
/// with `correct:` (Markdown emphasis allowed).
pub fn verdict(reply: &str) -> Option<bool> {
    let text = temper_verify::extract::strip_think(reply);
    let text = text.as_ref();
    let yes_no = |s: &str| {
        let word: String = s.trim_start().chars().take_while(|c| c.is_alphabetic()).collect();
        match word.to_ascii_lowercase().as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        }
    };
    let labelled = text.lines().rev().find_map(|line| {
        let line = line.trim().trim_start_matches(['*', '#', '-', ' ']);
        line.get(..8).filter(|head| head.eq_ignore_ascii_case("correct:"))?;
        yes_no(line[8..].trim_start_matches(['*', ' ']))
    });
    labelled.or_else(|| yes_no(text))
}

#[async_trait]
impl RewardFunction for LlmJudge {
    async fn score(
        &self,
        input: &RewardInput<'_>,
        services: &Services,
    ) -> Result<f64, RewardError> {
        let judge = services
            .judge
            .as_ref()
            .ok_or_else(|| {
                RewardError(
                    "no judge model is configured (temper eval: --judge-model; temper rl: [orchestrator.judge])"
                        .into(),
                )
            })?;
        let question = input
            .prompt
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map_or("", |m| m.content.as_str());
        let response = input
            .parsed_answer()
            .or_else(|| last_assistant(input.completion).map(|m| m.content.clone()))
            .unwrap_or_default();
        let prompt = self
            .prompt
            .replace("{question}", question)
            .replace("{answer}", &input.example.answer)
            .replace("{response}", &response);
        let request = ChatRequest {
            messages: vec![Message::user(prompt)],
            tools: Vec::new(),
            sampling: SamplingParams {
                temperature: Some(0.0),
                max_tokens: Some(self.max_tokens),
                ..Default::default()
            },
            prefix: None,
        };
        let reply = judge.chat(&request).await.map_err(|e| RewardError(format!("judge: {e}")))?;
        match verdict(&reply.message.content) {
            Some(yes) => Ok(f64::from(u8::from(yes))),
            None => Err(RewardError(format!(
                "judge reply is neither yes nor no: {:?}",
                reply.message.content.chars().take(80).collect::<String>()
            ))),
        }
    }
}
