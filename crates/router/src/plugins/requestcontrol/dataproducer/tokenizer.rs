//! token-producer (legacy alias `tokenizer`;
//! `requestcontrol/dataproducer/tokenizer/tokenizer.go`): its parameters
//! as the factory checks them. pdsim's requests arrive as tokens, so the
//! producer's output is the prompt's tokens whichever real backend is
//! configured (see [`crate::config`] for the `estimate` backend).

use crate::flags::parse_go_duration;
use crate::plugins::{Checks, strict_block};
use serde_yaml::Value;

/// token-producer's `tokenizerPluginConfig` (`dataproducer/tokenizer/
/// tokenizer.go`, `PluginFactory`): one backend at most; `vllm` or
/// `udsTokenizerConfig` need `modelName`. pdsim's prompts are tokens
/// already, so the vLLM `/render` and UDS backends yield the engine's
/// tokens; the `estimate` backend (also the default when no backend is
/// set) packs bytes into ids that never match an engine's blocks, and is
/// refused rather than simulated.
pub(crate) fn check(c: &mut Checks<'_>, p: &serde_yaml::Mapping) {
    let bad =
        |c: &mut Checks<'_>, key: &str, code: &'static str, why: &str| c.problem(key, code, why);
    let uds = p.get("udsTokenizerConfig").is_some_and(|v| !v.is_null());
    let vllm = p.get("vllm").is_some_and(|v| !v.is_null());
    let estimate = p.get("estimate").is_some_and(|v| !v.is_null());
    if (estimate && (uds || vllm)) || (uds && vllm) {
        bad(
            c,
            "vllm",
            "epp-plugin-parameter",
            "only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set",
        );
    }
    if (uds || vllm)
        && p.get("modelName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        bad(
            c,
            "modelName",
            "epp-plugin-parameter",
            "'modelName' must be specified",
        );
    }
    if let Some(v) = p.get("vllm")
        && strict_block(c, "vllm", v, &["url", "timeout", "mmTimeout"])
    {
        for key in ["timeout", "mmTimeout"] {
            if let Some(t) = v.get(key)
                && !t
                    .as_str()
                    .is_some_and(|t| t.is_empty() || parse_go_duration(t).is_some())
            {
                bad(
                    c,
                    &format!("vllm.{key}"),
                    "epp-plugin-parameter",
                    "must be a Go duration such as `5s`",
                );
            }
        }
        if v.get("url").is_some_and(|u| !u.is_string()) {
            bad(
                c,
                "vllm.url",
                "epp-plugin-parameter",
                "url must be a string",
            );
        }
    }
    if let Some(v) = p.get("udsTokenizerConfig") {
        strict_block(c, "udsTokenizerConfig", v, &["socketFile"]);
    }
    let model = p.get("modelName").is_some_and(|m| !m.is_null());
    if estimate || (!uds && !vllm && !model) {
        bad(
            c,
            if estimate { "estimate" } else { "modelName" },
            "epp-not-simulated",
            "the `estimate` backend (the default without `vllm` or `udsTokenizerConfig`) packs prompt bytes into ids; pdsim does not simulate it",
        );
    }
}
