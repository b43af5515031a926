//! Router files get the same input bounds as every other document: a UTF-8
//! byte-order mark is accepted, and nesting and alias expansion are refused
//! before the YAML parser does unbounded work.

use pdsim_router::config::DEFAULT_CONFIG;
use pdsim_router::{load_config, load_manifests};

const POOL: &str = "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n  name: pool\nspec:\n  selector:\n    matchLabels:\n      app: vllm\n  targetPorts:\n  - number: 8000\n";

fn bomb() -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..9 {
        let refs = vec![format!("*a{}", level - 1); 10].join(", ");
        text.push_str(&format!("a{level}: &a{level} [{refs}]\n"));
    }
    text
}

#[test]
fn a_utf8_bom_is_accepted_in_router_files() {
    let plain = load_config("epp.yaml", DEFAULT_CONFIG, false).unwrap();
    let marked = load_config("epp.yaml", &format!("\u{feff}{DEFAULT_CONFIG}"), false).unwrap();
    assert_eq!(format!("{plain:?}"), format!("{marked:?}"));
    let manifests = load_manifests("pool.yaml", &format!("\u{feff}{POOL}")).unwrap();
    assert_eq!(manifests.pools.len(), 1);
}

#[test]
fn deep_nesting_and_alias_bombs_are_refused_by_name() {
    let deep = format!("apiVersion: {}", "[".repeat(100_000));
    for (code, text) in [("too-deep", deep), ("too-many-aliases", bomb())] {
        let problems = load_config("epp.yaml", &text, false).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].code, code, "{}", problems[0]);
        assert!(problems[0].message.starts_with("line "), "{}", problems[0]);
        let problems = load_manifests("pool.yaml", &text).unwrap_err();
        assert_eq!(problems[0].code, code, "{}", problems[0]);
        assert_eq!(problems[0].file, "pool.yaml");
    }
}
