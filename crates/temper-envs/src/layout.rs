//! Column layouts of published datasets, read into the usual columns (`question`, `answer`,
//! `info`) before a row becomes an [`Example`](crate::Example). The user supplies the files
//! (JSONL or Parquet, as the dataset hubs publish them); nothing is downloaded.
//!
//! - `gpqa`: GPQA's `Question`, `Correct Answer` and `Incorrect Answer 1` to `3`. The four
//!   choices are shuffled by the dataset's seed and the row's index (the same seed always gives
//!   the same order), listed as `A)` to `D)` under the question; `answer` is the correct letter,
//!   `info.options` the choices in shown order and `info.correct_answer` the correct text.
//! - `aime`: a `problem` (or `Problem`, `question`) and an `answer` (or `Answer`; an integer is
//!   read as its digits).
//! - `mmlu_pro`: MMLU-Pro's `question`, `options` (up to ten, listed `A)` to `J)` in their
//!   order) and `answer` (a letter; `answer_index` is checked against it when both are there).
//! - `livecodebench`: LiveCodeBench's `question_content`, `starter_code`, `public_test_cases`,
//!   `private_test_cases` (JSON, or base64 of zlib of a pickled JSON string, as published) and
//!   `metadata` (which names the function of call-based problems). The prompt asks for a Python
//!   program that reads stdin, or for the starter code completed; `info.tests` holds every
//!   public and private test (`input`, `output`, `testtype`) and `info.func_name` the function
//!   of call-based problems. Options `from` and `to` (`YYYY-MM-DD`) keep the problems whose
//!   `contest_date` falls in `[from, to)`, the benchmark's release window.
//! - `hle`: Humanity's Last Exam's `question`, `answer` and `answer_type` (`exactMatch` or
//!   `multipleChoice`); rows with an `image` are skipped (the text subset) unless option
//!   `with_images = true`.
//!
//! In every layout the other columns are kept in `info` under their own names.

use std::io::Read;

use base64::Engine;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// How a file's rows are laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// temper's own columns (see [`crate::dataset`]).
    #[default]
    Standard,
    /// GPQA: a question, the correct answer and three incorrect ones.
    Gpqa,
    /// AIME: a problem and an integer answer.
    Aime,
    /// MMLU-Pro: a question, up to ten options and the answer letter.
    MmluPro,
    /// LiveCodeBench: a problem with stdin/stdout or call-based tests.
    Livecodebench,
    /// Humanity's Last Exam: exact-match and multiple-choice questions, graded by a judge.
    Hle,
}

/// Options of a layout (`[dataset] options` of a package whose files have a layout).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutOptions {
    /// `livecodebench`: the first contest day kept (`YYYY-MM-DD`).
    pub from: Option<String>,
    /// `livecodebench`: the first contest day no longer kept (`YYYY-MM-DD`).
    pub to: Option<String>,
    /// `hle`: keep the questions that come with an image.
    #[serde(default)]
    pub with_images: bool,
}

impl LayoutOptions {
    /// Checks the options against the layout they are given to.
    pub fn check(&self, layout: Layout) -> Result<(), String> {
        if (self.from.is_some() || self.to.is_some()) && layout != Layout::Livecodebench {
            return Err(format!(
                "`from` and `to` are options of layout livecodebench, not {}",
                layout.name()
            ));
        }
        if self.with_images && layout != Layout::Hle {
            return Err(format!("`with_images` is an option of layout hle, not {}", layout.name()));
        }
        for (name, day) in [("from", &self.from), ("to", &self.to)] {
            if let Some(day) = day
                && !is_day(day)
            {
                return Err(format!("`{name}` = {day:?} is not a day written YYYY-MM-DD"));
            }
        }
        Ok(())
    }
}

fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// GPQA's answer columns, the correct one first.
const GPQA_ANSWERS: [&str; 4] =
    ["Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"];

impl Layout {
    /// Its name in `environment.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Standard => "standard",
            Layout::Gpqa => "gpqa",
            Layout::Aime => "aime",
            Layout::MmluPro => "mmlu_pro",
            Layout::Livecodebench => "livecodebench",
            Layout::Hle => "hle",
        }
    }

    /// Row `index` of a file in this layout, as a row in the standard layout; `seed` orders
    /// shuffled choices.
    pub fn convert(self, row: Value, index: usize, seed: u64) -> Result<Value, String> {
        self.convert_with(row, index, seed, &LayoutOptions::default())?
            .ok_or_else(|| "the row is left out by its layout".into())
    }

    /// [`Layout::convert`] with options; `None` when the options leave the row out (a
    /// LiveCodeBench problem outside the date window, an HLE question with an image).
    pub fn convert_with(
        self,
        row: Value,
        index: usize,
        seed: u64,
        options: &LayoutOptions,
    ) -> Result<Option<Value>, String> {
        match self {
            Layout::Standard => Ok(Some(row)),
            Layout::Gpqa => gpqa(row, index, seed).map(Some),
            Layout::Aime => aime(row).map(Some),
            Layout::MmluPro => mmlu_pro(row).map(Some),
            Layout::Livecodebench => livecodebench(row, options),
            Layout::Hle => hle(row, options),
        }
    }
}

/// A question followed by its options as `A) ...` lines, and the letter of `correct`.
pub(crate) fn lettered<S: AsRef<str>>(
    question: &str,
    options: &[S],
    correct: &str,
) -> (String, char) {
    let position = options.iter().position(|o| o.as_ref() == correct).unwrap_or(0);
    let listing: Vec<String> = options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("{}) {}", char::from(b'A' + i as u8), o.as_ref()))
        .collect();
    (format!("{question}\n\n{}", listing.join("\n")), char::from(b'A' + position as u8))
}

fn text_column(row: &mut Map<String, Value>, name: &str) -> Result<String, String> {
    match row.remove(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Some(Value::String(_)) => Err(format!("column `{name}` is empty")),
        Some(other) => Err(format!("column `{name}` must be text, not {other}")),
        None => Err(format!("column `{name}` is missing")),
    }
}

fn gpqa(row: Value, index: usize, seed: u64) -> Result<Value, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let question = text_column(&mut row, "Question")?;
    let answers = GPQA_ANSWERS
        .iter()
        .map(|c| text_column(&mut row, c))
        .collect::<Result<Vec<String>, String>>()?;
    let correct = answers[0].clone();
    if answers[1..].contains(&correct) {
        return Err("an incorrect answer repeats the correct one".into());
    }
    let mut options = answers;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index as u64);
    options.shuffle(&mut rng);
    let (text, letter) = lettered(&question, &options, &correct);
    let mut info = row;
    info.insert("options".into(), json!(options));
    info.insert("correct_answer".into(), json!(correct));
    Ok(json!({
        "question": text,
        "answer": letter.to_string(),
        "info": info,
    }))
}

/// The first of `names` present in the row, removed, as text (a number as its digits).
fn first_text(row: &mut Map<String, Value>, names: &[&str]) -> Result<String, String> {
    let Some(name) = names.iter().find(|n| row.contains_key(**n)) else {
        return Err(format!("column `{}` is missing", names.join("` or `")));
    };
    match row.remove(*name) {
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(other) => {
            row.insert((*name).to_owned(), other);
            text_column(row, name)
        }
        None => unreachable!("the column is present"),
    }
}

fn aime(row: Value) -> Result<Value, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let question = first_text(&mut row, &["problem", "Problem", "question"])?;
    let answer = first_text(&mut row, &["answer", "Answer"])?;
    Ok(json!({"question": question, "answer": answer, "info": row}))
}

fn mmlu_pro(row: Value) -> Result<Value, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let question = text_column(&mut row, "question")?;
    let options: Vec<String> = match row.get("options") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|o| match o {
                Value::String(s) => Ok(s.trim().to_owned()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(format!("column `options` holds {other}, not text")),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(s)) => serde_json::from_str(s)
            .map_err(|e| format!("column `options` is text but not a JSON list: {e}"))?,
        Some(other) => return Err(format!("column `options` must be a list, not {other}")),
        None => return Err("column `options` is missing".into()),
    };
    if !(2..=10).contains(&options.len()) {
        return Err(format!(
            "column `options` has {} options; MMLU-Pro has 2 to 10",
            options.len()
        ));
    }
    let letter = text_column(&mut row, "answer")?;
    let position = match letter.as_bytes() {
        [c @ b'A'..=b'J'] => usize::from(c - b'A'),
        _ => return Err(format!("column `answer` = {letter:?} is not a letter A to J")),
    };
    if position >= options.len() {
        return Err(format!("answer {letter} names no option (there are {})", options.len()));
    }
    if let Some(index) = row.get("answer_index").and_then(Value::as_u64)
        && index as usize != position
    {
        return Err(format!("`answer` {letter} and `answer_index` {index} disagree"));
    }
    let (text, _) = lettered(&question, &options, &options[position]);
    row.insert("options".into(), json!(options));
    Ok(json!({"question": text, "answer": letter, "info": row}))
}

/// Most bytes a compressed test list may inflate to.
const MAX_TESTS_BYTES: u64 = 1 << 30;

/// LiveCodeBench's test lists: JSON text, or base64 of zlib of a pickled JSON string.
fn test_list(column: &str, value: Option<Value>) -> Result<Vec<Value>, String> {
    let text = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => return Ok(items),
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("column `{column}` must be text, not {other}")),
    };
    let json_text = if text.trim_start().starts_with('[') {
        text
    } else {
        let bad = |what: &str| format!("column `{column}` is neither JSON nor {what}");
        let packed = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| bad("base64"))?;
        let mut pickled = Vec::new();
        flate2::read::ZlibDecoder::new(packed.as_slice())
            .take(MAX_TESTS_BYTES + 1)
            .read_to_end(&mut pickled)
            .map_err(|_| bad("base64 of zlib data"))?;
        if pickled.len() as u64 > MAX_TESTS_BYTES {
            return Err(format!("column `{column}` inflates past {MAX_TESTS_BYTES} bytes"));
        }
        // Only a pickled string is read (no nested objects for the parser to build).
        if !pickled_string(&pickled) {
            return Err(bad("a pickled string"));
        }
        serde_pickle::from_slice::<String>(&pickled, serde_pickle::DeOptions::new())
            .map_err(|_| bad("a pickled string"))?
    };
    match serde_json::from_str(&json_text) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(_) => Err(format!("column `{column}` holds JSON that is not a list")),
        Err(e) => Err(format!("column `{column}` is not valid JSON: {e}")),
    }
}

/// Whether `bytes` is a pickle (protocol 2 or later) whose first object is a string.
fn pickled_string(bytes: &[u8]) -> bool {
    let body = match bytes {
        [0x80, _, 0x95, rest @ ..] if rest.len() > 8 => &rest[8..],
        [0x80, _, rest @ ..] => rest,
        _ => return false,
    };
    // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
    matches!(body.first(), Some(0x8c | 0x58 | 0x8d))
}

/// The prompt of a LiveCodeBench problem.
fn livecodebench_prompt(content: &str, starter: &str) -> String {
    if starter.trim().is_empty() {
        format!(
            "{content}\n\nWrite a Python 3 program that reads the input from standard input and \
             writes the answer to standard output. Give the whole program in one ```python code \
             block."
        )
    } else {
        format!(
            "{content}\n\nComplete this starter code in Python 3 and give the whole solution in \
             one ```python code block:\n\n```python\n{}\n```",
            starter.trim_end()
        )
    }
}

fn livecodebench(row: Value, options: &LayoutOptions) -> Result<Option<Value>, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let date = match row.get("contest_date") {
        Some(Value::String(s)) => s.get(..10).unwrap_or(s).to_owned(),
        _ => String::new(),
    };
    if options.from.is_some() || options.to.is_some() {
        if !is_day(&date) {
            return Err(
                "column `contest_date` is needed (YYYY-MM-DD...) for the date window".into()
            );
        }
        let before = options.from.as_ref().is_some_and(|from| date.as_str() < from.as_str());
        let after = options.to.as_ref().is_some_and(|to| date.as_str() >= to.as_str());
        if before || after {
            return Ok(None);
        }
    }
    let content = text_column(&mut row, "question_content")?;
    let starter = match row.remove("starter_code") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => String::new(),
        Some(other) => return Err(format!("column `starter_code` must be text, not {other}")),
    };
    let public = test_list("public_test_cases", row.remove("public_test_cases"))?;
    let private = test_list("private_test_cases", row.remove("private_test_cases"))?;
    let metadata = match row.get("metadata") {
        Some(Value::String(s)) if !s.trim().is_empty() => serde_json::from_str(s)
            .map_err(|e| format!("column `metadata` is not valid JSON: {e}"))?,
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    };
    let func_name = metadata.get("func_name").and_then(Value::as_str).map(str::to_owned);
    let functional = public
        .iter()
        .chain(&private)
        .any(|t| t.get("testtype").and_then(Value::as_str) == Some("functional"));
    if functional && func_name.is_none() {
        return Err("call-based tests need `func_name` in column `metadata`".into());
    }
    if public.is_empty() && private.is_empty() {
        return Err("the problem has no tests".into());
    }
    row.insert("public_tests".into(), json!(public.len()));
    let mut tests = public;
    tests.extend(private);
    row.insert("tests".into(), Value::Array(tests));
    row.insert("starter_code".into(), json!(starter));
    if let Some(name) = func_name {
        row.insert("func_name".into(), json!(name));
    }
    Ok(Some(
        json!({"question": livecodebench_prompt(&content, &starter), "answer": "", "info": row}),
    ))
}

fn hle(row: Value, options: &LayoutOptions) -> Result<Option<Value>, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let has_image = match row.get("image") {
        Some(Value::String(s)) => !s.trim().is_empty(),
        None | Some(Value::Null) => false,
        Some(_) => true,
    };
    if has_image && !options.with_images {
        return Ok(None);
    }
    let question = text_column(&mut row, "question")?;
    let answer = first_text(&mut row, &["answer"])?;
    match row.get("answer_type").and_then(Value::as_str) {
        Some("exactMatch" | "multipleChoice") => {}
        Some(other) => {
            return Err(format!("`answer_type` {other:?} is not exactMatch or multipleChoice"));
        }
        None => return Err("column `answer_type` is missing".into()),
    }
    Ok(Some(json!({"question": question, "answer": answer, "info": row})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Value {
        json!({
            "Question": "What is 2 + 2? ",
            "Correct Answer": "4\n",
            "Incorrect Answer 1": "3",
            "Incorrect Answer 2": "5",
            "Incorrect Answer 3": "22",
            "Subdomain": "Arithmetic",
        })
    }

    #[test]
    fn gpqa_rows_shuffle_by_seed_and_keep_the_right_letter() {
        let mut letters = std::collections::BTreeSet::new();
        for index in 0..40 {
            let out = Layout::Gpqa.convert(row(), index, 7).expect("converts");
            let options: Vec<String> =
                serde_json::from_value(out["info"]["options"].clone()).expect("options");
            let letter = out["answer"].as_str().expect("letter");
            let at = usize::from(letter.as_bytes()[0] - b'A');
            assert_eq!(options[at], "4");
            assert!(out["question"].as_str().expect("q").contains(&format!("{letter}) 4")));
            assert_eq!(out["info"]["Subdomain"], "Arithmetic");
            assert_eq!(out, Layout::Gpqa.convert(row(), index, 7).expect("again"));
            letters.insert(letter.to_owned());
        }
        assert_eq!(letters.len(), 4, "the correct answer lands on every letter");
        let other_seed: Vec<Value> = (0..8)
            .map(|i| Layout::Gpqa.convert(row(), i, 8).expect("ok")["answer"].clone())
            .collect();
        let same_seed: Vec<Value> = (0..8)
            .map(|i| Layout::Gpqa.convert(row(), i, 7).expect("ok")["answer"].clone())
            .collect();
        assert_ne!(other_seed, same_seed);
    }

    #[test]
    fn gpqa_rows_name_the_bad_column() {
        let mut missing = row();
        missing.as_object_mut().expect("obj").remove("Incorrect Answer 2");
        assert!(
            Layout::Gpqa
                .convert(missing, 0, 0)
                .unwrap_err()
                .contains("`Incorrect Answer 2` is missing")
        );
        let mut empty = row();
        empty["Question"] = json!("  ");
        assert!(Layout::Gpqa.convert(empty, 0, 0).unwrap_err().contains("`Question` is empty"));
        let mut repeated = row();
        repeated["Incorrect Answer 3"] = json!("4");
        assert!(Layout::Gpqa.convert(repeated, 0, 0).unwrap_err().contains("repeats"));
    }
}
