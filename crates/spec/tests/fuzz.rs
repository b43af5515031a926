//! Property tests: the loader and every check must turn any input into
//! problems, never a panic. Inputs are random text, random YAML-ish token
//! soup, and the bundled documents with random mutations (which reach deep
//! into the checks because most of each document stays well formed).
//!
//! proptest prints the failing input and seed; a failure is replayed from
//! `proptest-regressions/`.

use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use proptest::prelude::*;

const SCENARIO: &str = include_str!("../../../scenarios/4x8-h200.yaml");
const DEPLOYMENTS: &[&str] = &[
    include_str!("../../../deployments/1p3d-ep8.yaml"),
    include_str!("../../../deployments/2p2d-ep8.yaml"),
    include_str!("../../../deployments/colocated-tp8.yaml"),
    include_str!("../../../deployments/rebel100-4p4d.yaml"),
];

/// The documents with the router file the bundled P/D layouts name.
fn files(scenario: &str, deployment: &str) -> MemoryFiles {
    MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment)
        .with(
            "pd/epp-always-pd.yaml",
            include_str!("../../../deployments/pd/epp-always-pd.yaml"),
        )
}

/// Validates a scenario and deployment text pair; panics propagate.
fn run(scenario: &str, deployment: &str) {
    let files = files(scenario, deployment);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    // Every problem names its file; a report is invalid iff it has an error.
    for problem in &report.problems {
        assert!(!problem.file.is_empty());
        assert!(!problem.code.is_empty());
    }
    assert_eq!(report.valid, !report.problems.has_errors());
}

/// Tokens that tend to reach interesting branches: numbers at the edges,
/// special floats, suffixes, YAML syntax.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("9223372036854775807".to_string()),
        Just("99999999999999999999999".to_string()),
        Just(".nan".to_string()),
        Just(".inf".to_string()),
        Just("-.inf".to_string()),
        Just("1.5K".to_string()),
        Just("128k".to_string()),
        Just("auto".to_string()),
        Just("~".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("\"\"".to_string()),
        Just("&a".to_string()),
        Just("*a".to_string()),
        Just("!!binary".to_string()),
        Just(": ".to_string()),
        Just("- ".to_string()),
        Just("\n".to_string()),
        Just("\t".to_string()),
        (-100_000i64..100_000).prop_map(|n| n.to_string()),
        "[a-z_]{1,12}",
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the characters in [at, at + len) with a token.
    Replace {
        at: usize,
        len: usize,
        token: String,
    },
    /// Delete one line.
    DeleteLine { line: usize },
    /// Duplicate one line.
    DuplicateLine { line: usize },
    /// Re-indent one line.
    Indent { line: usize, spaces: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0usize..4000, 0usize..8, token()).prop_map(|(at, len, token)| Mutation::Replace {
            at,
            len,
            token
        }),
        (0usize..80).prop_map(|line| Mutation::DeleteLine { line }),
        (0usize..80).prop_map(|line| Mutation::DuplicateLine { line }),
        (0usize..80, 0usize..9).prop_map(|(line, spaces)| Mutation::Indent { line, spaces }),
    ]
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_string();
    for m in mutations {
        match m {
            Mutation::Replace { at, len, token } => {
                let chars: Vec<char> = text.chars().collect();
                let at = at % (chars.len() + 1);
                let end = (at + len).min(chars.len());
                text = chars[..at].iter().collect::<String>()
                    + token
                    + &chars[end..].iter().collect::<String>();
            }
            Mutation::DeleteLine { line }
            | Mutation::DuplicateLine { line }
            | Mutation::Indent { line, .. } => {
                let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                if lines.is_empty() {
                    continue;
                }
                let i = line % lines.len();
                match m {
                    Mutation::DeleteLine { .. } => {
                        lines.remove(i);
                    }
                    Mutation::DuplicateLine { .. } => {
                        let copy = lines[i].clone();
                        lines.insert(i, copy);
                    }
                    Mutation::Indent { spaces, .. } => {
                        lines[i] = format!("{}{}", " ".repeat(*spaces), lines[i].trim_start());
                    }
                    Mutation::Replace { .. } => {}
                }
                text = lines.join("\n");
            }
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_deployments_never_panic(which in 0usize..4, mutations in prop::collection::vec(mutation(), 1..6)) {
        run(SCENARIO, &apply(DEPLOYMENTS[which], &mutations));
    }

    #[test]
    fn mutated_scenarios_never_panic(mutations in prop::collection::vec(mutation(), 1..6)) {
        run(&apply(SCENARIO, &mutations), DEPLOYMENTS[0]);
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(token(), 0..60)) {
        run(SCENARIO, &tokens.concat());
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        run(&text, &text);
    }
}

#[test]
fn the_unmutated_documents_are_valid() {
    // The mutations start from valid documents, so a failure above is the
    // mutation's doing, not the baseline's.
    for deployment in &DEPLOYMENTS[..3] {
        let files = files(SCENARIO, deployment);
        let report = validate(&Request {
            files: &files,
            catalog_dirs: vec![],
            scenario: Some("s.yaml".into()),
            documents: vec!["d.yaml".into()],
        });
        assert!(report.valid, "{:#?}", report.problems);
    }
}
