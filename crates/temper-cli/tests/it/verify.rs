//! `temper verify math`.

use std::io::Write;
use std::process::{Command, Stdio};

fn temper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_temper"))
}

#[test]
fn single_answers_print_true_or_false() {
    let run = |gold: &str, answer: &str| {
        let out = temper()
            .args(["verify", "math", "--gold", gold, "--answer", answer])
            .output()
            .expect("run");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("utf-8")
    };
    assert_eq!(run("\\frac{1}{2}", "so the answer is \\boxed{0.5}."), "true\n");
    assert_eq!(run("\\frac{1}{3}", "\\boxed{0.33}"), "false\n");
    assert_eq!(run("(x+1)^2", "x^2+2x+1"), "true\n");
}

#[test]
fn jsonl_keeps_order_and_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("in.jsonl");
    // 2,000 lines, alternately equivalent and not, so parallel chunks must be stitched in order.
    let lines: String = (0..2000)
        .map(|i| {
            let answer =
                if i % 2 == 0 { format!("\\\\boxed{{{i}}}") } else { format!("{}", i + 1) };
            format!("{{\"id\": {i}, \"gold\": \"{i}\", \"answer\": \"{answer}\"}}\n")
        })
        .collect();
    std::fs::write(&path, lines).expect("write");
    let out = temper().args(["verify", "math", "--jsonl"]).arg(&path).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let rows: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(rows.len(), 2000);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["id"], i, "order kept");
        assert_eq!(row["equivalent"], i % 2 == 0, "{row}");
    }
    // The input's fields come first, in their order, then "equivalent".
    assert!(
        text.starts_with(
            "{\"id\":0,\"gold\":\"0\",\"answer\":\"\\\\boxed{0}\",\"equivalent\":true}"
        ),
        "{}",
        &text[..80]
    );
}

#[test]
fn malformed_lines_are_named_and_every_line_answered() {
    // Line 2 is blank (answered blank), 3 is cut short, 4 lacks `answer`, 5 has a list.
    let input = "{\"gold\": \"1\", \"answer\": \"1\"}\n\n{\"gold\": 1\n{\"gold\": \"1\"}\n\
                 {\"gold\": \"1\", \"answer\": [1]}\n{\"gold\": \"2\", \"answer\": \"3\"}\n";
    let mut child = temper()
        .args(["verify", "math", "--jsonl", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "one output line per input line: {stdout}");
    assert_eq!(lines[0], "{\"gold\":\"1\",\"answer\":\"1\",\"equivalent\":true}");
    assert_eq!(lines[1], "");
    let error = |i: usize| -> serde_json::Value { serde_json::from_str(lines[i]).expect("json") };
    assert!(
        error(2)["error"].as_str().expect("error").starts_with("not valid JSON"),
        "{}",
        lines[2]
    );
    assert_eq!(error(2)["equivalent"], serde_json::Value::Null);
    assert_eq!(error(3)["error"], "field `answer` is missing");
    assert_eq!(error(4)["error"], "field `answer` must be a string");
    assert_eq!(lines[5], "{\"gold\":\"2\",\"answer\":\"3\",\"equivalent\":false}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 of 6 lines could not be checked"), "{stderr}");
    for want in
        ["-:3: not valid JSON", "-:4: field `answer` is missing", "-:5: field `answer` must"]
    {
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
}
