//! Text normalisation for exact-match comparison.

/// Trims the ends and collapses every run of whitespace to one space; with `fold_case`, also
/// lowercases.
pub fn normalize(text: &str, fold_case: bool) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if fold_case { joined.to_lowercase() } else { joined }
}

/// Whether two answers are equal after [`normalize`].
pub fn exact_match(answer: &str, gold: &str, fold_case: bool) -> bool {
    normalize(answer, fold_case) == normalize(gold, fold_case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_and_case() {
        assert!(exact_match("  Paris \n", "Paris", false));
        assert!(exact_match("new   york", "New York", true));
        assert!(!exact_match("new york", "New York", false));
        assert!(!exact_match("Paris.", "Paris", true));
    }
}
