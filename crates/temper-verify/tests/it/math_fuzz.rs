//! The verifier never panics or hangs: hostile inputs and random token soup.

use std::time::{Duration, Instant};

use temper_verify::math::{MAX_ANSWER_CHARS, explain, verify};

use crate::adversarial;

/// Generous for a debug build on a loaded 2-core machine; the release-build numbers are in the
/// benchmark. What this catches is a hang or a blow-up, not a few milliseconds.
const LIMIT: Duration = Duration::from_millis(500);

fn check(gold: &str, completion: &str) {
    let start = Instant::now();
    let verdict = explain(gold, completion);
    let took = start.elapsed();
    assert!(took < LIMIT, "{took:?} on gold {:.80?} / completion {:.80?}", gold, completion);
    if gold.len() > MAX_ANSWER_CHARS || completion.len() > MAX_ANSWER_CHARS {
        assert!(!verdict.equivalent, "inputs over the limit are never equivalent");
    }
}

#[test]
fn hostile_inputs_are_bounded() {
    for (gold, completion) in adversarial::inputs() {
        check(&gold, &completion);
    }
    // Identical huge exponents are equal by structure; different ones are not claimed equal.
    assert!(verify("10^{10^{10}}", "\\boxed{10^{10^{10}}}"));
    assert!(!verify("10^{10^{10}}", "\\boxed{10^{10^{10}+1}}"));
    assert!(!verify("1", "\\boxed{\\frac{1}{0}}"));
}

#[test]
fn random_token_soup_never_panics() {
    const PIECES: &[&str] = &[
        "1",
        "2",
        "0",
        "9",
        ".",
        "x",
        "y",
        "e",
        "i",
        "\\pi",
        "+",
        "-",
        "*",
        "/",
        "^",
        "_",
        "!",
        "%",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "\\{",
        "\\}",
        "|",
        ",",
        "=",
        "<",
        "\\le",
        "\\frac",
        "\\sqrt",
        "\\sqrt[3]",
        "\\binom",
        "\\sin",
        "\\log_",
        "\\ln",
        "\\infty",
        "\\cup",
        "\\pm",
        "\\text{",
        "\\boxed{",
        "\\left(",
        "\\right)",
        "\\begin{pmatrix}",
        "&",
        "\\\\",
        "\\end{pmatrix}",
        " ",
        "\\cdot",
        "10^{",
        "\\,",
        "<think>",
        "</think>",
        "answer is",
        "$",
        "A",
        "(C)",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..3_000 {
        let len = next(60);
        let a: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
        let len = next(20);
        let g: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
        check(&g, &a);
        check(&a, &g);
    }
}
