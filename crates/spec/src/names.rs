//! "Did you mean": the nearest of a set of names to one that is not among
//! them, when it is near enough to read as a typo of it.

/// The name in `names` nearest to `unknown` (Damerau–Levenshtein edits),
/// when it is within a third of `unknown`'s length (at least 2 edits):
/// nearer still reads as a typo of it; beyond that the names are merely
/// different. Ties go to the first name given.
pub fn nearest<'a>(unknown: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (unknown.chars().count() / 3).max(2);
    let mut best: Option<(usize, &'a str)> = None;
    for name in names {
        let edits = strsim::damerau_levenshtein(unknown, name);
        if edits <= limit && best.is_none_or(|(b, _)| edits < b) {
            best = Some((edits, name));
        }
    }
    best.map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn a_typo_finds_its_name_and_a_different_name_finds_none() {
        let names = ["queue-scorer", "prefix-cache-scorer", "max-score-picker"];
        assert_eq!(nearest("queue-scorr", names), Some("queue-scorer"));
        assert_eq!(
            nearest("prefix-cache-scroer", names),
            Some("prefix-cache-scorer")
        );
        assert_eq!(nearest("lora-affinity", names), None);
        // Short names allow two edits.
        assert_eq!(nearest("tp", ["dp", "pp"]), Some("dp"));
        assert_eq!(nearest("x", ["abcd"]), None);
        // The nearest wins wherever it stands; a tie goes to the first.
        assert_eq!(
            nearest("queue-scorr", ["queue-scorers", "queue-scorer"]),
            Some("queue-scorer")
        );
        assert_eq!(nearest("ab", ["ax", "ay"]), Some("ax"));
    }
}
