//! `mcq`: multiple-choice questions in the style of GPQA and MMLU-Pro.
//!
//! Each example is a question with four options, shuffled by the seed, labelled `A` to `D`. The
//! model ends with `Answer: <letter>`. Reward: `mcq_letter`, 1 when the chosen letter is the one
//! under which the correct option landed. The built-in bank holds 32 science and general-knowledge
//! questions written for temper; the eval split is the bank once (each question with its own
//! shuffle), and the train split cycles the bank with fresh shuffles. Real benchmarks load through
//! an `environment.toml` whose rows carry `question`, `info.options` and a letter `answer`.

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, json};

use super::user_example;
use crate::rewards::McqLetter;
use crate::rollout::SingleTurn;
use crate::{EnvInfo, Environment, Example, LoadOptions, Parser, Rubric, TurnLimits};

/// Registered name.
pub const NAME: &str = "mcq";
const VERSION: &str = "0.1.0";
/// Instructions given as the system prompt.
pub const SYSTEM_PROMPT: &str = "Answer the multiple-choice question. Think it through, then end \
with a line of the form `Answer: X`, where X is the letter of the correct option.";

/// (question, correct option, three wrong options).
pub const BANK: &[(&str, &str, [&str; 3])] = &[
    ("Which planet has the shortest year?", "Mercury", ["Venus", "Mars", "Earth"]),
    ("What is the chemical symbol of sodium?", "Na", ["So", "Sd", "S"]),
    (
        "Which gas makes up most of Earth's atmosphere?",
        "Nitrogen",
        ["Oxygen", "Argon", "Carbon dioxide"],
    ),
    ("How many chromosomes does a typical human somatic cell have?", "46", ["23", "44", "48"]),
    ("What is the SI unit of electric resistance?", "Ohm", ["Volt", "Ampere", "Farad"]),
    (
        "Which organelle produces most of a eukaryotic cell's ATP?",
        "Mitochondrion",
        ["Ribosome", "Golgi apparatus", "Lysosome"],
    ),
    ("What is the derivative of sin(x)?", "cos(x)", ["-cos(x)", "-sin(x)", "tan(x)"]),
    ("Which particle has no electric charge?", "Neutron", ["Proton", "Electron", "Positron"]),
    ("What is the pH of pure water at 25 °C?", "7", ["0", "1", "14"]),
    ("Which element has atomic number 6?", "Carbon", ["Nitrogen", "Oxygen", "Boron"]),
    ("What is 2 to the power of 10?", "1024", ["1000", "512", "2048"]),
    (
        "Which law states that pressure times volume is constant for a gas at fixed temperature?",
        "Boyle's law",
        ["Charles's law", "Hooke's law", "Ohm's law"],
    ),
    (
        "Which blood cells carry oxygen?",
        "Red blood cells",
        ["White blood cells", "Platelets", "Plasma cells"],
    ),
    (
        "What is the speed of light in vacuum, approximately?",
        "300,000 km/s",
        ["30,000 km/s", "3,000 km/s", "3,000,000 km/s"],
    ),
    ("Which of these numbers is prime?", "97", ["91", "87", "93"]),
    ("What is the largest planet in the Solar System?", "Jupiter", ["Saturn", "Neptune", "Uranus"]),
    (
        "Which bond holds the two strands of DNA together?",
        "Hydrogen bonds",
        ["Ionic bonds", "Peptide bonds", "Metallic bonds"],
    ),
    (
        "What is the integral of 1/x dx (for x > 0)?",
        "ln(x) + C",
        ["x^2/2 + C", "1/x^2 + C", "e^x + C"],
    ),
    (
        "Which force keeps planets in orbit around the Sun?",
        "Gravity",
        ["Magnetism", "Friction", "The strong force"],
    ),
    (
        "What is the boiling point of water at sea level in kelvin, approximately?",
        "373 K",
        ["273 K", "100 K", "473 K"],
    ),
    (
        "Which scientist proposed the three laws of motion?",
        "Isaac Newton",
        ["Galileo Galilei", "Albert Einstein", "Johannes Kepler"],
    ),
    (
        "What is the sum of the interior angles of a triangle?",
        "180 degrees",
        ["90 degrees", "270 degrees", "360 degrees"],
    ),
    (
        "Which molecule carries amino acids to the ribosome?",
        "tRNA",
        ["mRNA", "rRNA", "DNA polymerase"],
    ),
    (
        "What is the main product of photosynthesis besides oxygen?",
        "Glucose",
        ["Carbon dioxide", "Methane", "Ammonia"],
    ),
    ("How many bits are in a byte?", "8", ["4", "16", "10"]),
    (
        "Which sorting algorithm has the best worst-case time complexity?",
        "Merge sort",
        ["Quicksort", "Bubble sort", "Insertion sort"],
    ),
    (
        "What is the time complexity of binary search on a sorted array?",
        "O(log n)",
        ["O(n)", "O(1)", "O(n log n)"],
    ),
    ("Which metal is liquid at room temperature?", "Mercury", ["Iron", "Aluminium", "Copper"]),
    ("What is the square root of 144?", "12", ["14", "11", "16"]),
    (
        "Which layer of the Sun do we see as its surface?",
        "Photosphere",
        ["Corona", "Core", "Chromosphere"],
    ),
    (
        "What kind of wave is sound in air?",
        "Longitudinal",
        ["Transverse", "Electromagnetic", "Standing only"],
    ),
    (
        "Which vitamin does the skin make under sunlight?",
        "Vitamin D",
        ["Vitamin C", "Vitamin A", "Vitamin K"],
    ),
];

/// Question `index` of the bank (cycling), its options shuffled by the generator.
pub fn generate(rng: &mut ChaCha8Rng, index: usize) -> Example {
    let (question, correct, wrong) = BANK[index % BANK.len()];
    let mut options: Vec<&str> = std::iter::once(correct).chain(wrong).collect();
    options.shuffle(rng);
    let position = options.iter().position(|o| *o == correct).unwrap_or(0);
    let letter = char::from(b'A' + position as u8);
    let listing: Vec<String> = options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("{}) {o}", char::from(b'A' + i as u8)))
        .collect();
    let mut info = Map::new();
    info.insert("options".into(), json!(options));
    user_example(format!("{question}\n\n{}", listing.join("\n")), letter.to_string(), info)
}

/// The environment.
pub fn environment(options: &LoadOptions) -> Environment {
    Environment {
        info: EnvInfo::builtin(NAME, VERSION, "Multiple-choice questions with shuffled options."),
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        parser: Parser::Raw,
        data: options.generated(generate, BANK.len() * 10, BANK.len()),
        interaction: Arc::new(SingleTurn),
        rubric: Rubric::new().with("mcq_letter", 1.0, McqLetter::default()),
        limits: TurnLimits::single_turn(),
    }
}
