//! Hostile inputs for the math verifier: deep nesting, unbalanced braces, huge numbers and
//! exponents, very long inputs. Shared by the fuzz test and the benchmark.

/// (gold, completion) pairs that must be answered quickly, without a panic.
pub fn inputs() -> Vec<(String, String)> {
    let boxed = |s: String| format!("\\boxed{{{s}}}");
    let mut v: Vec<(String, String)> = vec![
        ("1".into(), boxed("10^{10^{10}}".into())),
        ("10^{10^{10}}".into(), boxed("10^{10^{10}+1}".into())),
        ("1".into(), boxed("9^9^9^9^9^9".into())),
        ("1".into(), boxed("2^{2^{2^{2^{2^{2^{2}}}}}}".into())),
        ("1".into(), boxed("((((10!)!)!)!)".into())),
        ("1".into(), boxed("\\binom{10^{9}}{5 \\cdot 10^{8}}".into())),
        ("1".into(), boxed("x^{x^{x^{x^{x^{x^{x}}}}}}".into())),
        ("0".into(), boxed("\\frac{1}{0}".into())),
        ("0".into(), boxed("0^0".into())),
        ("0".into(), boxed("\\ln 0".into())),
        ("1".into(), boxed("\\sqrt[0]{2}".into())),
        ("1".into(), boxed("\\sqrt[10^{10}]{2}".into())),
        ("1".into(), boxed("e^{e^{e^{e^{10}}}}".into())),
        ("1".into(), boxed("\\tan(\\pi/2)".into())),
        ("x".into(), boxed("\\frac{1}{x-x}".into())),
        ("1".into(), "\\boxed{".into()),
        ("1".into(), "}}}}\\boxed{1".into()),
        ("1".into(), boxed("\\frac{\\frac{\\frac{1}{".into())),
        ("{".into(), "}".into()),
        ("\\".into(), "\\\\".into()),
        ("1".into(), boxed("\\begin{pmatrix}".into())),
        ("1".into(), boxed("|||||||".into())),
        ("".into(), "".into()),
    ];
    let nest = |open: &str, mid: &str, close: &str, n: usize| {
        format!("{}{mid}{}", open.repeat(n), close.repeat(n))
    };
    v.push(("1".into(), boxed(nest("(", "1", ")", 20_000))));
    v.push(("1".into(), boxed(nest("{", "1", "}", 20_000))));
    v.push(("1".into(), boxed(nest("\\sqrt{", "1", "}", 5_000))));
    v.push(("1".into(), boxed(nest("\\frac{1}{", "1", "}", 5_000))));
    v.push(("1".into(), boxed(nest("-", "1", "", 20_000))));
    v.push(("1".into(), boxed(nest("2^{", "2", "}", 5_000))));
    v.push(("1".into(), boxed("(".repeat(30_000))));
    v.push(("1".into(), boxed("}".repeat(30_000))));
    v.push(("1".into(), boxed("9".repeat(45_000))));
    v.push(("1".into(), boxed(format!("1{}", "+1".repeat(20_000)))));
    v.push(("1".into(), boxed(format!("x{}", "*x".repeat(15_000)))));
    v.push(("1".into(), boxed(format!("\\{{{}1\\}}", "1,".repeat(20_000)))));
    v.push(("1".into(), boxed("1\\frac".repeat(8_000))));
    v.push(("1".into(), boxed("\\text{a".repeat(5_000))));
    v.push(("1".into(), "x".repeat(60_000)));
    v.push(("1".into(), format!("\\boxed{{1}}{}", " ".repeat(59_990))));
    v.push(("a".repeat(60_000), "a".repeat(60_000)));
    // Prose, relations, set membership and units at their worst.
    v.push(("1".into(), "The value $x$ is ".repeat(3_000) + "1."));
    v.push(("1".into(), format!("{}so 1", "1. $a$, so $b$ is ".repeat(2_500))));
    v.push(("1".into(), format!("$${}$$", "$ and $".repeat(8_000))));
    let intervals: Vec<String> = (0..2_000).map(|i| format!("[{},{}]", 2 * i, 2 * i + 1)).collect();
    v.push(("|x| > 1".into(), boxed(intervals.join("\\cup "))));
    v.push(("x > 1".into(), boxed(format!("x{}", " > 1".repeat(10_000)))));
    v.push(("1".into(), boxed(format!("x{}", " = 1".repeat(10_000)))));
    v.push(("1\\text{ km}".into(), boxed(format!("1\\text{{ {}}}", "km/".repeat(5_000)))));
    v.push(("(0,1)".into(), boxed(nest("\\{x \\mid ", "x > 0", "\\}", 5_000))));
    v.push(("(0,1)".into(), boxed(format!("{}\\{{0\\}}", "\\mathbb{R}\\setminus ".repeat(5_000)))));
    v.push((
        format!("\\{{{}\\}}", (0..60).map(|i| i.to_string()).collect::<Vec<_>>().join(",")),
        boxed(format!(
            "\\{{{}\\}}",
            (0..60).rev().map(|i| format!("x^{i}")).collect::<Vec<_>>().join(",")
        )),
    ));
    v
}
