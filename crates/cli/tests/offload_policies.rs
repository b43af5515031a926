//! The OffloadingConnector's two cache policies through `pdsim run`, on the
//! same multi-turn requests: `deployments/h100-offload-lru.yaml` and
//! `h100-offload-arc.yaml` differ only in `offload.eviction_policy`, and the
//! tier is small enough that evictions decide which conversation histories
//! are found there. The policies themselves are checked against vLLM's own
//! manager in the engine crate (`tests/offload_oracle.rs`); this checks that
//! the deployment key reaches the engines and moves what the run reports.
//!
//! Needs the Mooncake conversation trace in `PDSIM_SHARED` and says on the
//! terminal that it was skipped without it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn arc_and_lru_find_different_prefixes_in_the_same_tier() {
    let Some(shared) = pdsim_testkit::shared(
        "offload_policies",
        "the Mooncake conversation trace (traces/mooncake_conversation_trace.jsonl)",
    ) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("pdsim-offload-policies-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The first 4,000 requests: the busy engines store some 300,000 blocks
    // each against a tier of 32,768, so both policies evict throughout.
    let text = std::fs::read_to_string(shared.join("traces/mooncake_conversation_trace.jsonl"))
        .expect("the trace");
    let head: String = text.lines().take(4000).map(|l| format!("{l}\n")).collect();
    let trace = dir.join("head.jsonl");
    std::fs::write(&trace, head).unwrap();
    let mut caches = Vec::new();
    for policy in ["lru", "arc"] {
        let out = dir.join(policy);
        let output = Command::new(env!("CARGO_BIN_EXE_pdsim"))
            .args([
                "run",
                "--scenario",
                "scenarios/h100-llama-8b.yaml",
                "--deployment",
                &format!("deployments/h100-offload-{policy}.yaml"),
                "--trace",
                &trace.to_string_lossy(),
                "--out",
                &out.to_string_lossy(),
            ])
            .current_dir(root())
            .output()
            .expect("pdsim runs");
        assert!(
            output.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        caches.push(summary["prefix_cache"].clone());
    }
    let _ = std::fs::remove_dir_all(&dir);
    for cache in &caches {
        for key in [
            "offload_stores_blocks",
            "offload_evictions_blocks",
            "external_hits_tokens",
        ] {
            assert!(cache[key].as_u64().unwrap() > 0, "{key}: {cache}");
        }
    }
    // Same stores offered, different victims: the tier finds different
    // prefixes under each policy.
    assert_ne!(
        caches[0]["external_hits_tokens"], caches[1]["external_hits_tokens"],
        "{caches:?}"
    );
    assert_ne!(
        caches[0]["offload_evictions_blocks"], caches[1]["offload_evictions_blocks"],
        "{caches:?}"
    );
}
