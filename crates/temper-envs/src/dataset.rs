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
//! split and `i`, so asking for 5 or 500 examples gives the same first five. A generator of fresh
//! instances can keep its eval split apart ([`Generator::distinct_eval`]): a draw whose prompt is
//! also one of the train examples is skipped (small puzzles can repeat), so the eval examples
//! then depend on the train size too.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use temper_protocol::Message;

use crate::EnvError;
use crate::layout::{Layout, LayoutOptions};

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

type MakeFn = dyn Fn(&mut ChaCha8Rng, usize) -> Example + Send + Sync;

/// A dataset generator: a [`GenerateFn`], or a closure holding its options (a difficulty, the
/// kinds of puzzle).
#[derive(Clone)]
pub struct Generator {
    make: Arc<MakeFn>,
    distinct_eval: bool,
}

impl Generator {
    /// Wraps a function or closure.
    pub fn new(f: impl Fn(&mut ChaCha8Rng, usize) -> Example + Send + Sync + 'static) -> Self {
        Self { make: Arc::new(f), distinct_eval: false }
    }

    /// Keeps the eval split apart from the train split: an eval draw whose prompt is also a
    /// train prompt is skipped. For generators of fresh instances (puzzles), not for those that
    /// draw from a fixed bank, whose eval split is the bank itself.
    pub fn distinct_eval(mut self) -> Self {
        self.distinct_eval = true;
        self
    }

    /// Example number `index`, from `rng` seeded for it.
    pub fn generate(&self, rng: &mut ChaCha8Rng, index: usize) -> Example {
        (self.make)(rng, index)
    }
}

impl From<GenerateFn> for Generator {
    fn from(f: GenerateFn) -> Self {
        Self::new(f)
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Generator")
    }
}

/// Where an environment's examples come from.
#[derive(Debug, Clone)]
pub enum DataSource {
    /// A seeded generator.
    Generated {
        /// The generator.
        generate: Generator,
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
        /// Seed of the shuffle that makes the held-out split (and of a layout's shuffles).
        seed: u64,
        /// How the files' columns are laid out.
        layout: Layout,
        /// The layout's options (a date window, which rows to keep).
        layout_options: LayoutOptions,
    },
}

impl DataSource {
    /// All examples of a split, in order. Rows without a `task` get `default_task`.
    pub fn load(&self, split: Split, default_task: &str) -> Result<Vec<Example>, EnvError> {
        match self {
            Self::Generated { generate, seed, train_size, eval_size } => {
                let make = |split: Split, i: usize| {
                    let mut rng = example_rng(*seed, split, i);
                    let mut example = generate.generate(&mut rng, i);
                    example.example_id = i as u64;
                    if example.task.is_empty() {
                        example.task = default_task.to_owned();
                    }
                    example
                };
                let size = if split == Split::Train { *train_size } else { *eval_size };
                if split == Split::Train || !generate.distinct_eval {
                    return Ok((0..size).map(|i| make(split, i)).collect());
                }
                // Held out for real: an eval draw whose prompt is also a train prompt (small
                // puzzles repeat) is skipped for the next draw of the eval stream.
                let key = |prompt: &[Message]| serde_json::to_string(prompt).unwrap_or_default();
                let train: HashSet<String> =
                    (0..*train_size).map(|i| key(&make(Split::Train, i).prompt)).collect();
                let mut out = Vec::with_capacity(*eval_size);
                let mut draw = 0;
                while out.len() < *eval_size {
                    if draw >= 4 * eval_size + 1000 {
                        return Err(EnvError::Dataset {
                            path: PathBuf::from(format!("{default_task} (generated)")),
                            line: None,
                            message: format!(
                                "the generator made only {} of {eval_size} eval examples that differ \
                             from the {train_size} train examples in {draw} draws; ask for fewer",
                                out.len()
                            ),
                        });
                    }
                    let mut example = make(Split::Eval, draw);
                    draw += 1;
                    if !train.contains(&key(&example.prompt)) {
                        example.example_id = out.len() as u64;
                        out.push(example);
                    }
                }
                Ok(out)
            }
            Self::Files { train, eval, eval_fraction, seed, layout, layout_options } => {
                let read =
                    |path| load_file_with(path, default_task, *layout, *seed, layout_options);
                match (split, eval) {
                    (Split::Eval, Some(path)) => read(path),
                    (Split::Train, Some(_)) => read(train),
                    (split, None) => Ok(split_holdout(read(train)?, *eval_fraction, *seed, split)),
                }
            }
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

/// Reads a `.jsonl` or `.parquet` file of examples in the standard layout.
pub fn load_file(path: &Path, default_task: &str) -> Result<Vec<Example>, EnvError> {
    load_file_as(path, default_task, Layout::Standard, 0)
}

/// Reads a `.jsonl` or `.parquet` file of examples whose rows are in `layout` (`seed` orders
/// its shuffles).
pub fn load_file_as(
    path: &Path,
    default_task: &str,
    layout: Layout,
    seed: u64,
) -> Result<Vec<Example>, EnvError> {
    load_file_with(path, default_task, layout, seed, &LayoutOptions::default())
}

/// [`load_file_as`] with the layout's options; rows the options leave out are skipped, and the
/// examples kept are numbered from 0 in file order.
pub fn load_file_with(
    path: &Path,
    default_task: &str,
    layout: Layout,
    seed: u64,
    options: &LayoutOptions,
) -> Result<Vec<Example>, EnvError> {
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
        let error =
            |message| EnvError::Dataset { path: path.to_owned(), line: Some(line), message };
        let Some(row) = layout.convert_with(row, index, seed, options).map_err(error)? else {
            continue;
        };
        let example = example_from_json(row, examples.len(), default_task).map_err(error)?;
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
        let source = |train_size| DataSource::Generated {
            generate: Generator::new(generate),
            seed: 7,
            train_size,
            eval_size: 3,
        };
        let few = source(2).load(Split::Train, "g").expect("load");
        let many = source(50).load(Split::Train, "g").expect("load");
        assert_eq!(few[..], many[..2]);
        let eval = source(2).load(Split::Eval, "g").expect("load");
        assert_ne!(eval[0].prompt, few[0].prompt);
        assert_eq!(few[1].example_id, 1);
        assert_eq!(few[0].task, "g");
    }

    #[test]
    fn distinct_eval_skips_prompts_seen_in_train() {
        // Eight possible prompts: with 6 train draws, eval draws repeat them often.
        fn small(rng: &mut ChaCha8Rng, _: usize) -> Example {
            use rand::Rng;
            Example {
                example_id: 0,
                prompt: vec![Message::user(rng.random_range(0..8u32).to_string())],
                answer: String::new(),
                info: Map::new(),
                task: String::new(),
            }
        }
        let source = |generate: Generator, train_size, eval_size| DataSource::Generated {
            generate,
            seed: 3,
            train_size,
            eval_size,
        };
        let train = source(Generator::new(small), 6, 4).load(Split::Train, "g").expect("train");
        let overlapping = |eval: &[Example]| {
            eval.iter().filter(|e| train.iter().any(|t| t.prompt == e.prompt)).count()
        };
        let plain = source(Generator::new(small), 6, 40).load(Split::Eval, "g").expect("eval");
        assert!(overlapping(&plain) > 0, "the plain eval split repeats train prompts");
        let distinct = Generator::new(small).distinct_eval();
        let eval = source(distinct.clone(), 6, 2).load(Split::Eval, "g").expect("eval");
        assert_eq!(overlapping(&eval), 0);
        assert_eq!(eval.iter().map(|e| e.example_id).collect::<Vec<_>>(), [0, 1]);
        // When the train split holds every prompt there is, nothing is left to hold out.
        let e = source(distinct, 100, 1).load(Split::Eval, "g").expect_err("only 8 prompts exist");
        assert!(
            e.to_string().contains("0 of 1 eval examples that differ from the 100 train"),
            "{e}"
        );
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
