//! Built-in environments, one file each. Each file's doc comment says what it rewards and where
//! the task comes from; each exposes `environment(&LoadOptions) -> Environment`.

pub mod alphabet_sort;
pub mod calculator;
pub mod code;
pub mod logic;
pub mod math;
pub mod mcq;
pub mod reverse_text;
pub mod wordle;

use serde_json::Map;
use temper_protocol::Message;

use crate::Example;

/// An example with one user message; `example_id` and `task` are filled in by the data source.
pub(crate) fn user_example(
    content: String,
    answer: String,
    info: Map<String, serde_json::Value>,
) -> Example {
    Example {
        example_id: 0,
        prompt: vec![Message::user(content)],
        answer,
        info,
        task: String::new(),
    }
}
