//! Dataset files: JSONL and Parquet, and the errors that name the file and line.

use std::fs::File;
use std::sync::Arc;

use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::json;
use temper_envs::dataset::load_file;
use temper_envs::{DataSource, EnvError, Split};
use temper_protocol::{Message, Role};

#[test]
fn jsonl_rows_and_line_numbers_in_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.jsonl");
    std::fs::write(&path, "{\"question\": \"a\", \"answer\": 1}\n\n{\"question\": \"b\"}\n")
        .expect("write");
    let rows = load_file(&path, "t").expect("load");
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].answer.as_str(), rows[1].example_id), ("1", 1));

    std::fs::write(&path, "{\"question\": \"a\"}\n{\"question\": \"b\",\n").expect("write");
    let err = load_file(&path, "t").expect_err("malformed").to_string();
    assert!(err.starts_with(&format!("{}:2: not valid JSON", path.display())), "{err}");

    std::fs::write(&path, "{\"question\": \"a\"}\n{\"answer\": \"b\"}\n").expect("write");
    let err = load_file(&path, "t").expect_err("no prompt").to_string();
    assert!(err.contains(":2: the row has neither"), "{err}");

    let missing = dir.path().join("nope.jsonl");
    let err = load_file(&missing, "t").expect_err("missing");
    assert!(matches!(err, EnvError::Io { .. }) && err.to_string().contains("nope.jsonl"), "{err}");
    let err = load_file(&dir.path().join("x.csv"), "t").expect_err("format").to_string();
    assert!(err.contains("x.csv") && err.contains(".jsonl or .parquet"), "{err}");
}

/// Writes rows whose `prompt` is a list of {role, content} structs, as Hugging Face datasets do.
fn write_parquet(path: &std::path::Path) {
    let schema = parse_message_type(
        "message schema {
            REQUIRED group prompt (LIST) {
                REPEATED group list {
                    REQUIRED group element {
                        REQUIRED BYTE_ARRAY role (UTF8);
                        REQUIRED BYTE_ARRAY content (UTF8);
                    }
                }
            }
            REQUIRED BYTE_ARRAY answer (UTF8);
            OPTIONAL BYTE_ARRAY info (UTF8);
        }",
    )
    .expect("schema");
    let file = File::create(path).expect("create");
    let mut writer = SerializedFileWriter::new(
        file,
        Arc::new(schema),
        Arc::new(WriterProperties::builder().build()),
    )
    .expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    let bytes = |v: &[&str]| v.iter().map(|s| ByteArray::from(*s)).collect::<Vec<_>>();
    // Row 0: [system, user]; row 1: [user].
    // (values, definition levels, repetition levels) per leaf column.
    type Column = (Vec<ByteArray>, Vec<i16>, Option<Vec<i16>>);
    let columns: Vec<Column> = vec![
        (bytes(&["system", "user", "user"]), vec![1, 1, 1], Some(vec![0, 1, 0])),
        (bytes(&["be brief", "2+2?", "3+3?"]), vec![1, 1, 1], Some(vec![0, 1, 0])),
        (bytes(&["4", "6"]), vec![0, 0], None),
        (bytes(&["{\"level\": 1}"]), vec![1, 0], None),
    ];
    for (values, def, rep) in columns {
        let mut column = group.next_column().expect("column").expect("a column");
        let def = if def.iter().all(|d| *d == 0) && rep.is_none() { None } else { Some(def) };
        column
            .typed::<ByteArrayType>()
            .write_batch(&values, def.as_deref(), rep.as_deref())
            .expect("write");
        column.close().expect("close column");
    }
    group.close().expect("close group");
    writer.close().expect("close");
}

#[test]
fn parquet_with_nested_prompts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.parquet");
    write_parquet(&path);
    let rows = load_file(&path, "t").expect("load");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].prompt, vec![Message::system("be brief"), Message::user("2+2?")]);
    assert_eq!(rows[0].answer, "4");
    assert_eq!(rows[0].info, json!({"level": 1}).as_object().cloned().expect("object"));
    assert_eq!(rows[1].prompt[0].role, Role::User);
    assert_eq!((rows[1].example_id, rows[1].info.len()), (1, 0));
}

#[test]
fn file_source_holds_out_an_eval_split() {
    let dir = tempfile::tempdir().expect("tempdir");
    let train = dir.path().join("train.jsonl");
    let lines: String =
        (0..20).map(|i| format!("{{\"question\": \"q{i}\", \"answer\": \"{i}\"}}\n")).collect();
    std::fs::write(&train, lines).expect("write");
    let source = DataSource::Files {
        train: train.clone(),
        eval: None,
        eval_fraction: 0.25,
        seed: 3,
        layout: Default::default(),
        layout_options: Default::default(),
    };
    let (t, e) = (
        source.load(Split::Train, "x").expect("train"),
        source.load(Split::Eval, "x").expect("eval"),
    );
    assert_eq!((t.len(), e.len()), (15, 5));
    assert!(e.iter().all(|x| t.iter().all(|y| y.example_id != x.example_id)));
    // The same seed gives the same split; another seed another one.
    assert_eq!(source.load(Split::Eval, "x").expect("eval"), e);
    let other = DataSource::Files {
        train,
        eval: None,
        eval_fraction: 0.25,
        seed: 4,
        layout: Default::default(),
        layout_options: Default::default(),
    };
    assert_ne!(other.load(Split::Eval, "x").expect("eval"), e);
}
