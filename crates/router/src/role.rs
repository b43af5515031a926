//! The `llm-d.ai/role` pod label and the stages its values serve
//! (`pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go`).
//!
//! Two EPP components read it, and they disagree on one case, an empty
//! value: the decode-filter (`NewDecodeRole`, a `ByLabel` with
//! `allowsNoLabel` in `bylabel/filter.go`) keeps an endpoint only when the
//! label is absent or holds a listed role, so `llm-d.ai/role: ""` is
//! dropped; the flow controller's stage split
//! (`pkg/epp/flowcontrol/controller/internal/processor.go`,
//! `partitionEndpoints`) counts `""` as decode (`case bylabel.RoleDecode,
//! ""`). Both read the same role lists below; [`decode`] is the filter's
//! rule, [`decode_stage`] the flow controller's.

use std::collections::BTreeMap;

/// The label (`RoleLabel`).
pub const LABEL: &str = "llm-d.ai/role";

/// Roles `decode-filter` keeps (`NewDecodeRole`).
const DECODE: &[&str] = &["decode", "prefill-decode", "both", "encode-prefill-decode"];

/// Roles `prefill-filter` keeps (`NewPrefillRole`).
const PREFILL: &[&str] = &[
    "prefill",
    "encode-prefill",
    "prefill-decode",
    "both",
    "encode-prefill-decode",
];

/// Whether `decode-filter` keeps an endpoint with these labels: no role
/// label, or a decode-capable role.
pub fn decode(labels: &BTreeMap<String, String>) -> bool {
    labels
        .get(LABEL)
        .is_none_or(|r| DECODE.contains(&r.as_str()))
}

/// Whether `prefill-filter` keeps it (no `allowsNoLabel`), and whether the
/// flow controller counts it in the prefill stage (`partitionEndpoints`
/// agrees: prefill and encode-prefill, plus the interleaved roles).
pub fn prefill(labels: &BTreeMap<String, String>) -> bool {
    labels
        .get(LABEL)
        .is_some_and(|r| PREFILL.contains(&r.as_str()))
}

/// Whether the flow controller counts it in the decode stage
/// (`partitionEndpoints`): as [`decode`], but an empty role counts too.
pub fn decode_stage(labels: &BTreeMap<String, String>) -> bool {
    decode(labels) || labels.get(LABEL).is_some_and(String::is_empty)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    #[test]
    fn the_filters_and_the_stage_split_differ_only_on_an_empty_role() {
        let with = |r: &str| BTreeMap::from([(super::LABEL.to_string(), r.to_string())]);
        let none = BTreeMap::new();
        assert!(super::decode(&none) && super::decode_stage(&none));
        assert!(!super::prefill(&none));
        assert!(!super::decode(&with("")), "the decode-filter drops it");
        assert!(
            super::decode_stage(&with("")),
            "partitionEndpoints counts it"
        );
        assert!(!super::prefill(&with("")));
        for (role, prefill, decode) in [
            ("prefill", true, false),
            ("encode-prefill", true, false),
            ("decode", false, true),
            ("prefill-decode", true, true),
            ("both", true, true),
            ("encode-prefill-decode", true, true),
            ("encode", false, false),
            ("other", false, false),
        ] {
            let l = with(role);
            assert_eq!(super::prefill(&l), prefill, "{role}");
            assert_eq!(super::decode(&l), decode, "{role}");
            assert_eq!(super::decode_stage(&l), decode, "{role}");
        }
    }
}
