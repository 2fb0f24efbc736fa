//! Datasets: examples from JSONL or Parquet files, or from seeded generators.
//!
//! Columns of a file row (the usual ones of RL datasets):
//!
//! | column | meaning |
//! |---|---|
//! | `prompt` | a list of chat messages, or a string (one user message) |
//! | `question` | used when `prompt` is absent: one user message |
//! | `answer` | the reference answer; numbers are written as text |
//! | `info` | an object, or a JSON string holding one: anything the reward functions need |
//! | `task` | a label for the kind of task (defaults to the environment's name) |
//! | `example_id` | a non-negative integer; assigned from the row index when absent |
//!
//! Any other column is copied into `info` under its own name (unless `info` already has it), so
//! a `tests` column reaches the code reward as `info.tests`.
//!
//! Generated datasets are reproducible: example `i` of a split depends only on the seed, the
//! split and `i`, so asking for 5 or 500 examples gives the same first five.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use temper_protocol::Message;

use crate::EnvError;

/// One task instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// Identifier, unique within a split.
    pub example_id: u64,
    /// Messages shown to the model (before the environment's system prompt is added).
    pub prompt: Vec<Message>,
    /// Reference answer (may be empty).
    pub answer: String,
    /// Extra data for the interaction and the reward functions (always an object).
    pub info: Map<String, Value>,
    /// Task label.
    pub task: String,
}

/// Which part of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Examples to train on.
    Train,
    /// Held-out examples to evaluate on.
    Eval,
}

/// Makes example number `index` of a generated dataset from a generator seeded for it.
pub type GenerateFn = fn(rng: &mut ChaCha8Rng, index: usize) -> Example;

/// Where an environment's examples come from.
#[derive(Debug, Clone)]
pub enum DataSource {
    /// A seeded generator.
    Generated {
        /// The generator.
        generate: GenerateFn,
        /// Base seed.
        seed: u64,
        /// Examples in the train split.
        train_size: usize,
        /// Examples in the eval split.
        eval_size: usize,
    },
    /// JSONL or Parquet files.
    Files {
        /// The train file.
        train: PathBuf,
        /// The eval file; when absent, the eval split is `eval_fraction` of the train file.
        eval: Option<PathBuf>,
        /// Fraction of the train file held out for eval when there is no eval file.
        eval_fraction: f64,
        /// Seed of the shuffle that makes the held-out split.
        seed: u64,
    },
}

impl DataSource {
    /// All examples of a split, in order. Rows without a `task` get `default_task`.
    pub fn load(&self, split: Split, default_task: &str) -> Result<Vec<Example>, EnvError> {
        match self {
            Self::Generated { generate, seed, train_size, eval_size } => {
                let size = if split == Split::Train { *train_size } else { *eval_size };
                Ok((0..size)
                    .map(|i| {
                        let mut rng = example_rng(*seed, split, i);
                        let mut example = generate(&mut rng, i);
                        example.example_id = i as u64;
                        if example.task.is_empty() {
                            example.task = default_task.to_owned();
                        }
                        example
                    })
                    .collect())
            }
            Self::Files { train, eval, eval_fraction, seed } => match (split, eval) {
                (Split::Eval, Some(path)) => load_file(path, default_task),
                (Split::Train, Some(_)) => load_file(train, default_task),
                (split, None) => {
                    let all = load_file(train, default_task)?;
                    Ok(split_holdout(all, *eval_fraction, *seed, split))
                }
            },
        }
    }
}

/// A generator seeded for example `index` of `split`, independent of every other example.
pub fn example_rng(seed: u64, split: Split, index: usize) -> ChaCha8Rng {
    let salt: u64 = if split == Split::Train { 0x7261_696e } else { 0x6576_616c };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ salt.rotate_left(32));
    rng.set_stream(index as u64);
    rng
}

/// Shuffles `items` in place, reproducibly for a given seed.
pub fn shuffle_seeded<T>(items: &mut [T], seed: u64) {
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
}

/// Holds out the last `fraction` of a seeded shuffle as the eval split; each split keeps the
/// file's order.
fn split_holdout(all: Vec<Example>, fraction: f64, seed: u64, split: Split) -> Vec<Example> {
    let mut order: Vec<usize> = (0..all.len()).collect();
    shuffle_seeded(&mut order, seed);
    let n_eval = ((all.len() as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
    let mut eval_rows = vec![false; all.len()];
    for &i in &order[all.len() - n_eval..] {
        eval_rows[i] = true;
    }
    all.into_iter()
        .zip(eval_rows)
        .filter(|(_, is_eval)| *is_eval == (split == Split::Eval))
        .map(|(example, _)| example)
        .collect()
}

/// Reads a `.jsonl` or `.parquet` file of examples.
pub fn load_file(path: &Path, default_task: &str) -> Result<Vec<Example>, EnvError> {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let rows = match extension {
        "jsonl" | "json" | "ndjson" => read_jsonl(path)?,
        "parquet" => read_parquet(path)?,
        _ => {
            return Err(EnvError::Dataset {
                path: path.to_owned(),
                line: None,
                message: "unknown dataset format: expected a .jsonl or .parquet file".into(),
            });
        }
    };
    let mut examples = Vec::with_capacity(rows.len());
    for (index, (line, row)) in rows.into_iter().enumerate() {
        let example = example_from_json(row, index, default_task).map_err(|message| {
            EnvError::Dataset { path: path.to_owned(), line: Some(line), message }
        })?;
        examples.push(example);
    }
    Ok(examples)
}

fn read_jsonl(path: &Path) -> Result<Vec<(usize, Value)>, EnvError> {
    let file = File::open(path).map_err(|e| EnvError::io(path, e))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| EnvError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|e| EnvError::Dataset {
            path: path.to_owned(),
            line: Some(i + 1),
            message: format!("not valid JSON: {e}"),
        })?;
        rows.push((i + 1, value));
    }
    Ok(rows)
}

fn read_parquet(path: &Path) -> Result<Vec<(usize, Value)>, EnvError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let err = |line: Option<usize>, e: parquet::errors::ParquetError| EnvError::Dataset {
        path: path.to_owned(),
        line,
        message: format!("cannot read Parquet: {e}"),
    };
    let file = File::open(path).map_err(|e| EnvError::io(path, e))?;
    let reader = SerializedFileReader::new(file).map_err(|e| err(None, e))?;
    let mut rows = Vec::new();
    for (i, row) in reader.get_row_iter(None).map_err(|e| err(None, e))?.enumerate() {
        let row = row.map_err(|e| err(Some(i + 1), e))?;
        rows.push((i + 1, row.to_json_value()));
    }
    Ok(rows)
}

/// Converts one dataset row to an [`Example`]; the error says which column is wrong.
pub fn example_from_json(row: Value, index: usize, default_task: &str) -> Result<Example, String> {
    let Value::Object(mut row) = row else {
        return Err("a row must be a JSON object".into());
    };
    let prompt = match (row.remove("prompt"), row.remove("question")) {
        (Some(Value::String(text)), _) | (None | Some(Value::Null), Some(Value::String(text))) => {
            vec![Message::user(text)]
        }
        (Some(Value::Array(messages)), _) => serde_json::from_value(Value::Array(messages))
            .map_err(|e| format!("column `prompt`: {e}"))?,
        (Some(other), _) if !other.is_null() => {
            return Err(format!(
                "column `prompt` must be a list of messages or a string, not {other}"
            ));
        }
        (_, Some(other)) if !other.is_null() => {
            return Err(format!("column `question` must be a string, not {other}"));
        }
        _ => return Err("the row has neither a `prompt` nor a `question` column".into()),
    };
    let answer = match row.remove("answer") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
        Some(other) => {
            return Err(format!("column `answer` must be text or a number, not {other}"));
        }
    };
    let mut info = match row.remove("info") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(Value::String(s)) if s.trim().is_empty() => Map::new(),
        Some(Value::String(s)) => match serde_json::from_str(&s) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("column `info` holds JSON that is not an object".into()),
            Err(e) => return Err(format!("column `info` is a string but not valid JSON: {e}")),
        },
        Some(other) => return Err(format!("column `info` must be an object, not {other}")),
    };
    let task = match row.remove("task") {
        None | Some(Value::Null) => default_task.to_owned(),
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("column `task` must be a string, not {other}")),
    };
    let example_id = match row.remove("example_id") {
        None | Some(Value::Null) => index as u64,
        Some(v) => v.as_u64().ok_or_else(|| {
            format!("column `example_id` must be a non-negative integer, not {v}")
        })?,
    };
    for (key, value) in row {
        info.entry(key).or_insert(value);
    }
    Ok(Example { example_id, prompt, answer, info, task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use temper_protocol::Role;

    #[test]
    fn rows_in_every_accepted_shape() {
        let e = example_from_json(json!({"question": "2+2?", "answer": 4}), 3, "t").expect("ok");
        assert_eq!((e.example_id, e.answer.as_str(), e.task.as_str()), (3, "4", "t"));
        assert_eq!(e.prompt, vec![Message::user("2+2?")]);

        let e = example_from_json(
            json!({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                   "info": "{\"k\": 1}", "task": "x", "example_id": 9, "tests": [1]}),
            0,
            "t",
        )
        .expect("ok");
        assert_eq!(e.prompt[0].role, Role::System);
        assert_eq!((e.example_id, e.task.as_str()), (9, "x"));
        assert_eq!(e.info, json!({"k": 1, "tests": [1]}).as_object().cloned().expect("obj"));
    }

    #[test]
    fn malformed_rows_name_the_column() {
        let cases = [
            (json!([1]), "JSON object"),
            (json!({"answer": "1"}), "neither"),
            (json!({"question": 5}), "`question`"),
            (json!({"prompt": 5}), "`prompt`"),
            (json!({"prompt": [{"role": "robot", "content": "x"}]}), "`prompt`"),
            (json!({"question": "q", "info": "{bad"}), "`info`"),
            (json!({"question": "q", "info": 3}), "`info`"),
            (json!({"question": "q", "example_id": -1}), "`example_id`"),
            (json!({"question": "q", "answer": [1]}), "`answer`"),
        ];
        for (row, want) in cases {
            let err = example_from_json(row.clone(), 0, "t").expect_err("must fail");
            assert!(err.contains(want), "{row}: {err}");
        }
    }

    #[test]
    fn generated_examples_do_not_depend_on_count() {
        fn generate(rng: &mut ChaCha8Rng, _: usize) -> Example {
            use rand::Rng;
            Example {
                example_id: 0,
                prompt: vec![Message::user(rng.random::<u32>().to_string())],
                answer: String::new(),
                info: Map::new(),
                task: String::new(),
            }
        }
        let source =
            |train_size| DataSource::Generated { generate, seed: 7, train_size, eval_size: 3 };
        let few = source(2).load(Split::Train, "g").expect("load");
        let many = source(50).load(Split::Train, "g").expect("load");
        assert_eq!(few[..], many[..2]);
        let eval = source(2).load(Split::Eval, "g").expect("load");
        assert_ne!(eval[0].prompt, few[0].prompt);
        assert_eq!(few[1].example_id, 1);
        assert_eq!(few[0].task, "g");
    }

    #[test]
    fn holdout_split_is_disjoint_and_complete() {
        let all: Vec<Example> = (0..10)
            .map(|i| example_from_json(json!({"question": i.to_string()}), i, "t").expect("row"))
            .collect();
        let train = split_holdout(all.clone(), 0.3, 1, Split::Train);
        let eval = split_holdout(all, 0.3, 1, Split::Eval);
        assert_eq!((train.len(), eval.len()), (7, 3));
        let mut ids: Vec<u64> = train.iter().chain(&eval).map(|e| e.example_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
    }
}
