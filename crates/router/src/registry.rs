//! The plugin types the EPP registers (llm-d-router `cmd/epp/runner/runner.go`,
//! `registerInTreePlugins`; `research/epp.md` §3), with their parameters as
//! the strict decoder accepts them, their stability, and whether pdsim
//! simulates them yet.

/// What a plugin does in the scheduling cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    ProfileHandler,
    Decider,
    Filter,
    Scorer,
    Picker,
    Producer,
    DataLayer,
    Parser,
    Admission,
    Saturation,
    FlowControl,
    Other,
}

/// A registered plugin type.
#[derive(Clone, Copy, Debug)]
pub struct PluginType {
    pub name: &'static str,
    pub role: Role,
    /// Parameter keys the strict decoder accepts; `None` when the schema was
    /// not read (the type is then refused before its parameters matter).
    pub params: Option<&'static [&'static str]>,
    /// Alpha types load only with `--allow-experimental-plugins`.
    pub alpha: bool,
    /// Why pdsim does not run this type yet; `None` when it does.
    pub not_simulated: Option<&'static str>,
}

/// `PluginConfig` of the precise producer (`preciseprefixcache/producer.go`)
/// and of the legacy scorer (same fields).
const PRECISE_PARAMS: &[&str] = &[
    "tokenProcessorConfig",
    "indexerConfig",
    "kvEventsConfig",
    "speculativeIndexing",
    "speculativeTTL",
];

/// `tokenizerPluginConfig` (`dataproducer/tokenizer/tokenizer.go`).
const TOKEN_PARAMS: &[&str] = &["udsTokenizerConfig", "vllm", "estimate", "modelName"];

const NOT_YET: &str = "its scheduling behaviour is not simulated yet";
const EXTERNAL: &str = "it needs a service outside the cluster model (tokenizer, latency predictor, KV-event stream or metrics endpoint)";

macro_rules! plugins {
    ($( $name:literal => $role:ident, $params:expr, $alpha:literal, $sim:expr; )*) => {
        &[$( PluginType { name: $name, role: Role::$role, params: $params, alpha: $alpha, not_simulated: $sim } ),*]
    };
}

pub const PLUGINS: &[PluginType] = plugins! {
    // Profile handlers (§3.1).
    "single-profile-handler" => ProfileHandler, Some(&[]), false, None;
    "disagg-profile-handler" => ProfileHandler, Some(&["stageOrder", "profiles", "deciders", "decodeProfile", "prefillProfile", "encodeProfile", "prefillDeciderPluginName", "encodeDeciderPluginName", "deciderPluginName"]), false, None;
    // Deprecated in v0.7.0, removal v0.9.0 (`RegisterDeprecatedWithPluginDependencies`);
    // use disagg-profile-handler.
    "pd-profile-handler" => ProfileHandler, Some(&["decodeProfile", "prefillProfile", "prefixPluginType", "prefixPluginName", "primaryPort", "deciderPluginName", "prefixMatchInfoProducerName"]), false, None;
    // Registered Beta; its factory only logs "Deprecated: Use
    // simple-profile-handler with Istio >= 1.28.1".
    "data-parallel-profile-handler" => ProfileHandler, Some(&["primaryPort"]), false, None;
    // Registered Alpha (`profilehandler/headerprofile`).
    "header-profile-handler" => ProfileHandler, Some(&["headerName", "defaultProfile"]), true, None;
    // Deciders (§3.2).
    "prefix-based-pd-decider" => Decider, Some(&["nonCachedTokens", "promptTokens"]), false, None;
    "always-disagg-pd-decider" => Decider, Some(&[]), false, None;
    "always-disagg-multimodal-decider" => Decider, Some(&[]), false, Some("pdsim's workloads carry no multimodal content to decide on");
    // Filters (§3.3).
    "decode-filter" => Filter, Some(&[]), false, None;
    "prefill-filter" => Filter, Some(&[]), false, None;
    "encode-filter" => Filter, Some(&[]), false, Some("pdsim has no encode pools");
    "label-selector-filter" => Filter, Some(&["matchLabels", "matchExpressions"]), false, None;
    // Deprecated alias; use label-selector-filter.
    "by-label-selector" => Filter, Some(&["matchLabels", "matchExpressions"]), false, None;
    // Deprecated alias; use label-selector-filter.
    "by-label" => Filter, Some(&["label", "validValues", "allowsNoLabel"]), false, None;
    "prefix-cache-affinity-filter" => Filter, Some(&["affinityThreshold", "explorationProbability", "maxTTFTPenaltyMs", "ttftSource", "peakPrefillThroughput", "prefixMatchInfoProducerName", "inFlightLoadProducerName"]), false, None;
    // A filter and a scorer at once (`scorer/contextlengthaware`): the
    // loader slots it as both wherever a profile references it.
    "context-length-aware" => Filter, Some(&["label", "enableFiltering"]), false, None;
    "slo-headroom-tier-filter" => Filter, None, false, Some(EXTERNAL);
    // The scorer's parameters and session machinery
    // (`util/sessionaffinity`); Alpha (`filter/sessionaffinity`).
    "session-affinity-filter" => Filter, Some(&["strategy", "encodedEndpointHeaderConfig", "sessionIdConfig", "profileName"]), true, None;
    "endpoint-attribute-filter" => Filter, None, true, Some(NOT_YET);
    "topology-affinity-filter" => Filter, None, true, Some(NOT_YET);
    // Registered Alpha (`scheduling/filter/utilization/filter.go`).
    "utilization-filter" => Filter, Some(&["conditions", "fallbackOnEmpty", "inFlightLoadProducerName"]), true, None;
    // Scorers (§3.4).
    "queue-scorer" => Scorer, Some(&[]), false, None;
    "running-requests-size-scorer" => Scorer, Some(&[]), false, None;
    "kv-cache-utilization-scorer" => Scorer, Some(&[]), false, None;
    "load-aware-scorer" => Scorer, Some(&["threshold"]), false, None;
    "prefix-cache-scorer" => Scorer, Some(&["matchLengthWeight", "matchLengthScaleTokens", "prefixMatchInfoProducerName"]), false, None;
    "token-load-scorer" => Scorer, Some(&["queueThresholdTokens", "inFlightLoadProducerName"]), false, None;
    "active-request-scorer" => Scorer, Some(&["idleThreshold", "maxBusyScore", "requestTimeout"]), false, None;
    "no-hit-lru-scorer" => Scorer, Some(&["lruSize", "prefixPluginType", "prefixPluginName", "prefixMatchInfoProducerName"]), false, None;
    "session-affinity-scorer" => Scorer, Some(&["strategy", "encodedEndpointHeaderConfig", "sessionIdConfig", "profileName"]), true, None;
    "lora-affinity-scorer" => Scorer, None, false, Some("pdsim serves no LoRA adapters");
    // The legacy form: its own precise producer plus a prefix-cache-scorer
    // reading it, or deferring to a configured producer
    // (`scorer/preciseprefixcache/precise_prefix_cache.go`).
    // Deprecated alias; use precise-prefix-cache-producer with prefix-cache-scorer.
    "precise-prefix-cache-scorer" => Scorer, Some(PRECISE_PARAMS), false, None;
    "latency-scorer" => Scorer, None, false, Some(EXTERNAL);
    "mm-embeddings-cache-scorer" => Scorer, None, false, Some("pdsim's workloads carry no multimodal content");
    "endpoint-attribute-scorer" => Scorer, None, true, Some(NOT_YET);
    "topology-affinity-scorer" => Scorer, None, true, Some(NOT_YET);
    "header-label-affinity-scorer" => Scorer, None, true, Some(NOT_YET);
    // Pickers (§3.5).
    "max-score-picker" => Picker, Some(&["maxNumOfEndpoints"]), false, None;
    "random-picker" => Picker, Some(&["maxNumOfEndpoints"]), false, None;
    "weighted-random-picker" => Picker, Some(&["maxNumOfEndpoints"]), false, None;
    // Data producers and request plugins (§3.6).
    "approx-prefix-cache-producer" => Producer, Some(&["autoTune", "blockSizeTokens", "blockSize", "maxPrefixBlocksToMatch", "maxPrefixTokensToMatch", "lruCapacityPerServer"]), false, None;
    "inflight-load-producer" => Producer, Some(&["addEstimatedOutputTokens", "outputRatio", "maxEstimatedOutputTokens", "prefixMatchInfoProducerName", "syncCrossReplicaState"]), false, None;
    "precise-prefix-cache-producer" => Producer, Some(PRECISE_PARAMS), false, None;
    // pdsim's prompts are token sequences already; the tokenize call's
    // latency is not simulated.
    "token-producer" => Producer, Some(TOKEN_PARAMS), false, None;
    // Deprecated alias; use token-producer.
    "tokenizer" => Producer, Some(TOKEN_PARAMS), false, None;
    "predicted-latency-producer" => Producer, None, false, Some(EXTERNAL);
    "session-id-producer" => Producer, None, false, Some(NOT_YET);
    "mm-embeddings-cache-producer" => Producer, None, false, Some("pdsim's workloads carry no multimodal content");
    // Both names register `HeadersHandlerFactory`, deprecated in v0.9.0,
    // removal v0.11.0.
    // Deprecated alias; use disagg-profile-handler.
    "prefill-header-handler" => Other, Some(&["prefillProfile", "encodeProfile"]), false, None;
    // Deprecated alias; use disagg-profile-handler.
    "disagg-headers-handler" => Other, Some(&["prefillProfile", "encodeProfile"]), false, None;
    "request-attribute-reporter" => Other, None, false, Some(NOT_YET);
    // Admission and saturation (§6). They act only on sheddable requests
    // (negative InferenceObjective priority, chosen by a request header);
    // pdsim's requests carry no objective header, so every request has
    // priority 0 and is admitted, exactly as the EPP admits it.
    "probabilistic-admitter" => Admission, Some(&["queueDepthThreshold", "kvCacheUtilThreshold", "power", "k"]), false, None;
    "latency-slo-admitter" => Admission, None, false, Some(EXTERNAL);
    "utilization-detector" => Saturation, Some(&["queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold", "headroom"]), false, None;
    "concurrency-detector" => Saturation, Some(&["maxConcurrency", "headroom", "concurrencyMode", "maxTokenConcurrency", "inFlightLoadProducerName"]), false, None;
    // Data layer (§3.7): the simulated scrape stands in for them.
    "metrics-data-source" => DataLayer, Some(&["scheme", "path", "insecureSkipVerify"]), false, None;
    "core-metrics-extractor" => DataLayer, Some(&["engineLabelKey", "defaultEngine", "engineConfigs"]), false, None;
    // Endpoint add/delete notifications: pdsim's endpoints are fixed for a
    // run, so every one is announced once at start.
    "endpoint-notification-source" => DataLayer, Some(&[]), false, None;
    "k8s-notification-source" => DataLayer, None, false, Some(NOT_YET);
    "models-data-source" => DataLayer, None, false, Some(NOT_YET);
    "models-data-extractor" => DataLayer, None, false, Some(NOT_YET);
    "dcgm-data-source" => DataLayer, None, true, Some(EXTERNAL);
    "dcgm-extractor" => DataLayer, None, true, Some(EXTERNAL);
    "file-discovery" => DataLayer, None, false, Some(NOT_YET);
    // Parsers: pdsim's requests arrive as tokens already, so parsing is moot.
    "openai-parser" => Parser, Some(&[]), false, None;
    "passthrough-parser" => Parser, Some(&[]), false, None;
    "vllmgrpc-parser" => Parser, None, false, Some(NOT_YET);
    "vertexai-parser" => Parser, None, false, Some(NOT_YET);
    "anthropic-parser" => Parser, None, false, Some(NOT_YET);
    // Flow control (§3.8; `flowcontrol.rs`). pdsim's requests carry no
    // fairness id or objective header, so they form one flow in the
    // priority-0 band, where every fairness policy picks that flow and the
    // ordering policies all serve arrival order (no deadlines or SLO
    // headers). Factories that ignore their decoder take no parameters.
    "global-strict-fairness-policy" => FlowControl, Some(&[]), false, None;
    "round-robin-fairness-policy" => FlowControl, Some(&[]), false, None;
    "program-aware-fairness" => FlowControl, Some(&["strategy", "evictionTtlSeconds", "evictionSweepSeconds", "lasWeightService", "lasWeightHeadWait", "lasHalfLifeSeconds"]), false, None;
    "fcfs-ordering-policy" => FlowControl, Some(&[]), false, None;
    "edf-ordering-policy" => FlowControl, Some(&[]), false, None;
    "slo-deadline-ordering-policy" => FlowControl, Some(&[]), false, None;
    "static-usage-limit-policy" => FlowControl, Some(&["threshold"]), false, None;
    "priority-holdback-policy" => FlowControl, None, true, Some("its per-band ceilings depend on the saturation trend and the set of provisioned bands; not simulated yet");
    "soft-reflective-ceiling-policy" => FlowControl, None, true, Some("its adaptive ceiling is not simulated yet");
    "sheddable-eviction-filter" => FlowControl, None, true, Some("in-flight eviction (flowControl.enableEviction) is not simulated");
    "priority-then-time-eviction-order-policy" => FlowControl, None, true, Some("in-flight eviction (flowControl.enableEviction) is not simulated");
};

/// Types that older EPP releases had and the newest does not (§3.9).
pub const REMOVED: &[(&str, &str)] = &[
    (
        "decision-tree-filter",
        "removed in gateway-api-inference-extension v1.0.0 (filters became scorers)",
    ),
    (
        "low-queue-filter",
        "removed in gateway-api-inference-extension v1.0.0; use queue-scorer",
    ),
    (
        "least-queue-filter",
        "removed in gateway-api-inference-extension v1.0.0; use queue-scorer",
    ),
    (
        "least-kv-cache-filter",
        "removed in gateway-api-inference-extension v1.0.0; use kv-cache-utilization-scorer",
    ),
    (
        "lora-affinity-filter",
        "removed in gateway-api-inference-extension v1.0.0; use lora-affinity-scorer",
    ),
    (
        "kv-cache-scorer",
        "not registered in the EPP; the scorer is kv-cache-utilization-scorer",
    ),
    (
        "kvcache-aware-scorer",
        "removed from llm-d-inference-scheduler after v0.3; use precise-prefix-cache-scorer",
    ),
    (
        "prefix-aware-scorer",
        "removed from llm-d-inference-scheduler after v0.3; use prefix-cache-scorer",
    ),
];

pub fn lookup(name: &str) -> Option<&'static PluginType> {
    PLUGINS.iter().find(|p| p.name == name)
}
