//! `temper verify math`: the math answer verifier on the command line.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use temper_verify::math;

use crate::args::{VerifyCommand, VerifyMathArgs};

/// Longest input line accepted in JSONL mode.
const MAX_LINE_BYTES: usize = 1 << 20;

pub fn run(command: VerifyCommand) -> anyhow::Result<()> {
    match command {
        VerifyCommand::Math(args) => math_command(&args),
    }
}

fn math_command(args: &VerifyMathArgs) -> anyhow::Result<()> {
    if let (Some(gold), Some(answer)) = (&args.gold, &args.answer) {
        println!("{}", math::verify(gold, answer));
        return Ok(());
    }
    let Some(path) = &args.jsonl else { bail!("give --gold and --answer, or --jsonl FILE") };
    let lines = read_lines(path)?;
    let out = check_all(&lines, args.explain);
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    for line in out {
        writeln!(w, "{line}")?;
    }
    w.flush()?;
    Ok(())
}

/// Reads and validates every line first, so a malformed line fails the run before any output.
fn read_lines(path: &Path) -> anyhow::Result<Vec<(Value, String, String)>> {
    let reader: Box<dyn BufRead> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        ))
    };
    let mut rows = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let at = || format!("{}:{}", path.display(), i + 1);
        let line = line.with_context(|| format!("cannot read {}", at()))?;
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > MAX_LINE_BYTES {
            bail!("{}: line longer than {MAX_LINE_BYTES} bytes", at());
        }
        let value: Value =
            serde_json::from_str(&line).with_context(|| format!("{}: not valid JSON", at()))?;
        let field = |name: &str| -> anyhow::Result<String> {
            match value.get(name) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v @ Value::Number(_)) => Ok(v.to_string()),
                _ => bail!("{}: field `{name}` must be a string", at()),
            }
        };
        let (gold, answer) = (field("gold")?, field("answer")?);
        rows.push((value, gold, answer));
    }
    Ok(rows)
}

/// Checks every row, in parallel, keeping the input order.
fn check_all(rows: &[(Value, String, String)], explain: bool) -> Vec<String> {
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(rows.len().max(1));
    let chunk = rows.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(value, gold, answer)| {
                            let verdict = math::explain(gold, answer);
                            let mut value = value.clone();
                            if let Some(map) = value.as_object_mut() {
                                map.insert("equivalent".into(), json!(verdict.equivalent));
                                if explain {
                                    map.insert(
                                        "explanation".into(),
                                        json!({"rule": verdict.rule, "gold": verdict.gold, "answer": verdict.answer}),
                                    );
                                }
                            }
                            value.to_string()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    })
}
