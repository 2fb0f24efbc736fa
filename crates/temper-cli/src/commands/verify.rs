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
    let rows: Vec<(Value, String, String)> =
        lines.iter().filter_map(|l| l.as_ref().ok().and_then(Option::as_ref).cloned()).collect();
    let mut checked = check_all(&rows, args.explain).into_iter();
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    let mut bad = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match line {
            Ok(Some(_)) => writeln!(w, "{}", checked.next().unwrap_or_default())?,
            Ok(None) => writeln!(w)?,
            Err(why) => {
                writeln!(w, "{}", json!({"equivalent": null, "error": why}))?;
                bad.push(format!("  {}:{}: {why}", path.display(), i + 1));
            }
        }
    }
    w.flush()?;
    if !bad.is_empty() {
        let shown = bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n");
        let more =
            if bad.len() > 10 { format!("\n  and {} more", bad.len() - 10) } else { String::new() };
        bail!(
            "{} of {} lines could not be checked (each has an \"error\" line in the output):\n{shown}{more}",
            bad.len(),
            lines.len()
        );
    }
    Ok(())
}

/// One input line: a row to check, a blank line (`None`, written back blank so output line N
/// answers input line N), or why it cannot be checked.
type Line = Result<Option<(Value, String, String)>, String>;

/// Reads every line; a malformed one is kept as its error, so the rest are still checked.
fn read_lines(path: &Path) -> anyhow::Result<Vec<Line>> {
    let reader: Box<dyn BufRead> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        ))
    };
    let mut lines = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}:{}", path.display(), i + 1))?;
        lines.push(parse_line(&line));
    }
    Ok(lines)
}

fn parse_line(line: &str) -> Line {
    if line.trim().is_empty() {
        return Ok(None);
    }
    if line.len() > MAX_LINE_BYTES {
        return Err(format!("line longer than {MAX_LINE_BYTES} bytes"));
    }
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let field = |name: &str| -> Result<String, String> {
        match value.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v @ Value::Number(_)) => Ok(v.to_string()),
            None => Err(format!("field `{name}` is missing")),
            Some(_) => Err(format!("field `{name}` must be a string")),
        }
    };
    let (gold, answer) = (field("gold")?, field("answer")?);
    Ok(Some((value, gold, answer)))
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
