//! Column layouts of published datasets, read into the usual columns (`question`, `answer`,
//! `info`) before a row becomes an [`Example`](crate::Example).
//!
//! `[dataset] layout = "gpqa"` reads GPQA's columns: `Question`, `Correct Answer` and
//! `Incorrect Answer 1` to `3`. The four choices are shuffled by the dataset's seed and the row's
//! index (the same seed always gives the same order), listed as `A)` to `D)` under the question;
//! `answer` is the correct letter, `info.options` the choices in shown order and
//! `info.correct_answer` the correct text. Every other column (`Subdomain`, `Record ID`, ...)
//! is kept in `info` under its own name.

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
        }
    }

    /// Row `index` of a file in this layout, as a row in the standard layout; `seed` orders
    /// shuffled choices.
    pub fn convert(self, row: Value, index: usize, seed: u64) -> Result<Value, String> {
        match self {
            Layout::Standard => Ok(row),
            Layout::Gpqa => gpqa(row, index, seed),
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
        None => Err(format!("column `{name}` is missing (layout gpqa)")),
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
