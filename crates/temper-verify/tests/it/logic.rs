//! Logic puzzles: every generated puzzle is solved by search and the solution checks; wrong
//! answers are refused with a reason; any valid answer is accepted, not only the generator's.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use temper_verify::logic::{self, Kind, Puzzle, check, generate, solve};

/// 1,000 puzzles of each kind, 200 at each difficulty: the planted answer and the solver's both
/// pass the checker, and the solver never comes back empty.
#[test]
fn every_countdown_is_solved_and_checked() {
    solve_and_check_1000(Kind::Countdown);
}

#[test]
fn every_sudoku_is_solved_and_checked() {
    solve_and_check_1000(Kind::Sudoku);
}

#[test]
fn every_knights_puzzle_is_solved_and_checked() {
    solve_and_check_1000(Kind::Knights);
}

#[test]
fn every_coloring_is_solved_and_checked() {
    solve_and_check_1000(Kind::Coloring);
}

#[test]
fn every_zebra_is_solved_and_checked() {
    solve_and_check_1000(Kind::Zebra);
}

fn solve_and_check_1000(kind: Kind) {
    {
        for difficulty in logic::DIFFICULTY {
            for i in 0..200u64 {
                let mut rng = ChaCha8Rng::seed_from_u64(i * 31 + u64::from(difficulty));
                let puzzle = generate(kind, difficulty, &mut rng);
                assert_eq!(puzzle.kind(), kind);
                puzzle.validate().unwrap();
                let reference = puzzle.reference();
                check(&puzzle, &reference).unwrap_or_else(|e| {
                    panic!("{kind:?} d{difficulty} #{i}: plant fails: {e}\n{reference}")
                });
                let solved = solve(&puzzle)
                    .unwrap_or_else(|| panic!("{kind:?} d{difficulty} #{i}: no solution found"));
                check(&puzzle, &solved).unwrap_or_else(|e| {
                    panic!("{kind:?} d{difficulty} #{i}: solver's answer fails: {e}")
                });
                // The stored form round-trips, so a dataset row scores like the generator's value.
                let json = serde_json::to_string(&puzzle).unwrap();
                assert_eq!(serde_json::from_str::<Puzzle>(&json).unwrap(), puzzle);
            }
        }
    }
}

#[test]
fn generation_is_reproducible_and_difficulty_grows() {
    let a = generate(Kind::Zebra, 4, &mut ChaCha8Rng::seed_from_u64(9));
    let b = generate(Kind::Zebra, 4, &mut ChaCha8Rng::seed_from_u64(9));
    assert_eq!(a, b);
    let size = |d| match generate(Kind::Sudoku, d, &mut ChaCha8Rng::seed_from_u64(1)) {
        Puzzle::Sudoku(p) => (p.size, p.rows.concat().matches('.').count()),
        _ => unreachable!(),
    };
    assert_eq!([size(1), size(2), size(3), size(5)], [(4, 6), (4, 10), (9, 35), (9, 52)]);
    let people = |d| match generate(Kind::Knights, d, &mut ChaCha8Rng::seed_from_u64(1)) {
        Puzzle::Knights(p) => p.names.len(),
        _ => unreachable!(),
    };
    assert_eq!((1..=5).map(people).collect::<Vec<_>>(), [2, 3, 4, 5, 6]);
}

fn countdown() -> Puzzle {
    serde_json::from_str(
        r#"{"kind": "countdown", "numbers": [25, 50, 4, 3, 6, 1], "target": 231, "solution": "(50 - 3) * 4 + 25 + 6 + 1 - 1"}"#,
    )
    .unwrap()
}

#[test]
fn countdown_accepts_any_exact_expression_over_the_numbers() {
    let p = countdown();
    // Two different right answers; a trailing "= 231", unicode operators and LaTeX all read.
    for answer in [
        "50*4 + 25 + 6",
        "(50 × 4) + 25 + 6 = 231",
        "4 \\times 50 + 25 + 6",
        "(25 + 6/3*3 + 1) * 6 + 50 - 4 - 1 + 3 - 3",
    ] {
        let r = check(&p, answer);
        if answer.ends_with("- 3") {
            assert!(r.is_err(), "uses 3 twice: {answer}");
        } else {
            assert!(r.is_ok(), "{answer}: {r:?}");
        }
    }
    // Exact fractions: 6 / 4 * ... is not rounded.
    let p2: Puzzle = serde_json::from_str(
        r#"{"kind": "countdown", "numbers": [3, 8, 3], "target": 8, "solution": "8"}"#,
    )
    .unwrap();
    assert!(check(&p2, "8 / 3 * 3").is_ok());
    for (bad, why) in [
        ("50*4 + 25 + 5", "5 is not one of"),
        ("50*4 + 25 + 6 + 1", "equals 232"),
        ("50*4 + 25 + 6 + 25", "not one of the numbers left"),
        ("(50*4 + 25 + 6", "not closed"),
        ("25 / (4 - 4)", "division by zero"),
        ("50 / (4 - 3 - 1)", "division by zero"),
        ("import os", "unexpected"),
        ("", "no expression"),
        ("99999999999999 + 1", "too large"),
    ] {
        let e = check(&p, bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    let deep = format!("{}25{}", "(".repeat(100), ")".repeat(100));
    assert!(check(&p, &deep).unwrap_err().contains("too"));
}

#[test]
fn sudoku_accepts_any_valid_completion_and_names_the_broken_rule() {
    // An almost empty 4×4 grid has many completions; two different ones both pass.
    let p: Puzzle = serde_json::from_str(
        r#"{"kind": "sudoku", "size": 4, "rows": ["1...", "....", "....", "...."], "solution": ["1234", "3412", "2143", "4321"]}"#,
    )
    .unwrap();
    assert!(check(&p, "1234\n3412\n2143\n4321").is_ok());
    assert!(
        check(&p, "Row 1: 1 2 | 4 3\nRow 2: 4 3 | 1 2\nRow 3: 2 1 | 3 4\nRow 4: 3 4 | 2 1").is_ok()
    );
    assert!(check(&p, "1243 4312 2134 3421").is_ok(), "all digits in row order");
    assert!(check(&p, "2134\n3412\n1243\n4321").unwrap_err().contains("must stay 1"));
    assert!(check(&p, "1234\n3412\n2143\n4312").unwrap_err().contains("column"));
    assert!(check(&p, "1234\n3412\n2143").unwrap_err().contains("not a 4×4 grid"));
}

#[test]
fn knights_reads_prose_and_checks_every_statement() {
    // Alice: "Bruno is a knave." Bruno: "Alice and I are of the same kind."
    let p: Puzzle = serde_json::from_str(
        r#"{"kind": "knights", "names": ["Alice", "Bruno"],
            "says": [{"op": "knave", "who": 1}, {"op": "same", "a": 0, "b": 1}],
            "knights": [true, false]}"#,
    )
    .unwrap();
    assert!(p.prompt().contains("Bruno says: \"Alice and I are of the same kind.\""));
    assert!(check(&p, "Alice: knight\nBruno: knave").is_ok());
    assert!(check(&p, "Alice is a knight, and Bruno is not a knight.").is_ok());
    assert!(check(&p, "Alice: knave\nBruno: knight").unwrap_err().contains("statement is"));
    assert!(check(&p, "Alice: knight").unwrap_err().contains("Bruno"));
    assert!(check(&p, "Alice: knight, knave\nBruno: knave").unwrap_err().contains("both"));
}

#[test]
fn coloring_accepts_another_proper_colouring() {
    // A path 1-2-3: two colourings with different colours both pass.
    let p: Puzzle = serde_json::from_str(
        r#"{"kind": "coloring", "nodes": 3, "colors": ["red", "green", "blue"], "edges": [[1, 2], [2, 3]], "solution": [0, 1, 0]}"#,
    )
    .unwrap();
    assert!(check(&p, "1: red\n2: green\n3: red").is_ok());
    assert!(check(&p, "node 1 = blue, node 2 = red, node 3 = green").is_ok());
    assert!(check(&p, "1: red\n2: red\n3: blue").unwrap_err().contains("nodes 1 and 2"));
    assert!(check(&p, "1: red\n2: green").unwrap_err().contains("node 3"));
    assert!(check(&p, "1: purple\n2: green\n3: red").unwrap_err().contains("node 1"));
}

#[test]
fn zebra_reads_tables_and_sentences() {
    let p = generate(Kind::Zebra, 2, &mut ChaCha8Rng::seed_from_u64(3));
    let Puzzle::Zebra(z) = &p else { unreachable!() };
    let reference = p.reference();
    assert!(check(&p, &reference).is_ok());
    // The same placement as sentences, in another order.
    let sentences: Vec<String> = reference
        .lines()
        .rev()
        .flat_map(|line| {
            let (house, values) = line.split_once(": ").unwrap();
            let house = house.trim_start_matches("House ").to_owned();
            values
                .split(", ")
                .map(move |v| format!("The {v} is in house {house}."))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(check(&p, &sentences.join(" \n")).is_ok());
    // Swapping two houses breaks a clue (the solution is unique).
    let swapped = reference
        .replace("House 1", "House X")
        .replace("House 2", "House 1")
        .replace("House X", "House 2");
    let e = check(&p, &swapped).unwrap_err();
    assert!(e.contains("clue does not hold"), "{e}");
    let first_value = &z.categories[0].values[0];
    let missing: String = reference
        .replace(&format!("{first_value},"), "")
        .replace(&format!("{first_value}\n"), "\n");
    assert!(check(&p, &missing).is_err());
}

#[test]
fn hostile_rows_and_answers_are_refused() {
    let bad_rows = [
        r#"{"kind": "sudoku", "size": 16, "rows": [], "solution": []}"#,
        r#"{"kind": "knights", "names": ["A"], "says": [{"op": "knight", "who": 7}], "knights": [true]}"#,
        r#"{"kind": "coloring", "nodes": 3, "colors": ["red"], "edges": [[0, 9]], "solution": [0]}"#,
        r#"{"kind": "countdown", "numbers": [], "target": 3, "solution": ""}"#,
    ];
    for row in bad_rows {
        let p: Puzzle = serde_json::from_str(row).unwrap();
        assert!(check(&p, "anything").is_err(), "{row}");
    }
    let p = countdown();
    let huge = "1+".repeat(logic::MAX_ANSWER);
    assert!(check(&p, &huge).unwrap_err().contains("bytes"));
}
