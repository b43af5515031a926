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
    /// Parameter keys the strict decoder accepts; `None` for a simulated
    /// type whose factory never reads its decoder (any parameters load, as
    /// in the EPP), or for a refused type whose schema was not read.
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

const OTHER_PROTOCOL: &str = "it parses a request protocol other than the OpenAI-compatible one pdsim's requests stand for (the request bodies it reads, and so what the `estimate` tokenizer would hash, are not modelled)";
const EXTERNAL: &str = "it needs a service outside the cluster model (tokenizer, latency predictor, KV-event stream or metrics endpoint)";
const MULTI_CLUSTER: &str =
    "it routes across the InferencePools of several clusters, and pdsim simulates one cluster";

macro_rules! plugins {
    ($( $name:literal => $role:ident, $params:expr, $alpha:literal, $sim:expr; )*) => {
        &[$( PluginType { name: $name, role: Role::$role, params: $params, alpha: $alpha, not_simulated: $sim } ),*]
    };
}

pub const PLUGINS: &[PluginType] = plugins! {
    // Profile handlers (§3.1).
    "single-profile-handler" => ProfileHandler, None, false, None;
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
    "always-disagg-pd-decider" => Decider, None, false, None;
    "always-disagg-multimodal-decider" => Decider, None, false, Some("pdsim's workloads carry no multimodal content to decide on");
    // Filters (§3.3).
    "decode-filter" => Filter, None, false, None;
    "prefill-filter" => Filter, None, false, None;
    "encode-filter" => Filter, None, false, Some("pdsim has no encode pools");
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
    // Over the custom metrics pdsim's vLLM series give
    // (`filter/endpointattribute.rs`).
    "endpoint-attribute-filter" => Filter, Some(&["attribute", "producer", "onMissing", "fallbackOnEmpty", "algorithm"]), true, None;
    // Alpha (`filter/topologyaffinity`, `scorer/topologyaffinity`): they
    // compare each candidate's Topology with the peer endpoint's.
    "topology-affinity-filter" => Filter, Some(&["minAffinity", "topologyProducerName"]), true, None;
    // Registered Alpha (`scheduling/filter/utilization/filter.go`).
    "utilization-filter" => Filter, Some(&["conditions", "fallbackOnEmpty", "inFlightLoadProducerName"]), true, None;
    // Scorers (§3.4).
    "queue-scorer" => Scorer, None, false, None;
    "running-requests-size-scorer" => Scorer, None, false, None;
    "kv-cache-utilization-scorer" => Scorer, None, false, None;
    "load-aware-scorer" => Scorer, Some(&["threshold"]), false, None;
    "prefix-cache-scorer" => Scorer, Some(&["matchLengthWeight", "matchLengthScaleTokens", "prefixMatchInfoProducerName"]), false, None;
    "token-load-scorer" => Scorer, Some(&["queueThresholdTokens", "inFlightLoadProducerName"]), false, None;
    "active-request-scorer" => Scorer, Some(&["idleThreshold", "maxBusyScore", "requestTimeout"]), false, None;
    "no-hit-lru-scorer" => Scorer, Some(&["lruSize", "prefixPluginType", "prefixPluginName", "prefixMatchInfoProducerName"]), false, None;
    "session-affinity-scorer" => Scorer, Some(&["strategy", "encodedEndpointHeaderConfig", "sessionIdConfig", "profileName"]), true, None;
    // Simulated for what pdsim's engines are: servers of no LoRA adapter,
    // where it scores every endpoint 0 (`scorer/loraaffinity.rs`).
    "lora-affinity-scorer" => Scorer, None, false, None;
    // The legacy form: its own precise producer plus a prefix-cache-scorer
    // reading it, or deferring to a configured producer
    // (`scorer/preciseprefixcache/precise_prefix_cache.go`).
    // Deprecated alias; use precise-prefix-cache-producer with prefix-cache-scorer.
    "precise-prefix-cache-scorer" => Scorer, Some(PRECISE_PARAMS), false, None;
    "latency-scorer" => Scorer, None, false, Some(EXTERNAL);
    "mm-embeddings-cache-scorer" => Scorer, None, false, Some("pdsim's workloads carry no multimodal content");
    "endpoint-attribute-scorer" => Scorer, Some(&["attributeKey", "producer", "algorithm"]), true, None;
    "topology-affinity-scorer" => Scorer, Some(&["topologyProducerName"]), true, None;
    // The request's header against each endpoint's label
    // (`scorer/headerlabelaffinity.rs`).
    "header-label-affinity-scorer" => Scorer, Some(&["headerName", "labelKey"]), true, None;
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
    // It copies a session header or cookie into the request's `SessionID`
    // attribute, which no plugin at ebab687 reads; pdsim's requests carry
    // no headers, so it produces nothing, as the EPP for such a request.
    "session-id-producer" => Producer, Some(&["headerName", "cookieName"]), false, None;
    "mm-embeddings-cache-producer" => Producer, None, false, Some("pdsim's workloads carry no multimodal content");
    // Both names register `HeadersHandlerFactory`, deprecated in v0.9.0,
    // removal v0.11.0.
    // Deprecated alias; use disagg-profile-handler.
    "prefill-header-handler" => Other, Some(&["prefillProfile", "encodeProfile"]), false, None;
    // Deprecated alias; use disagg-profile-handler.
    "disagg-headers-handler" => Other, Some(&["prefillProfile", "encodeProfile"]), false, None;
    // A response plugin reporting a CEL value to the proxy: no decision
    // changes (`plugins/requestcontrol/requestattributereporter.rs`).
    "request-attribute-reporter" => Other, Some(&["attributes"]), false, None;
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
    "k8s-notification-source" => DataLayer, None, false, Some("it watches a Kubernetes kind (`gvk`) for its extractors, and pdsim simulates no Kubernetes API server whose objects could change during a run");
    "models-data-source" => DataLayer, None, false, Some("pdsim does not simulate its HTTP polling of each model server's `/v1/models` (nor check its TLS files and interval as its factory does); no plugin at ebab687 reads what it extracts");
    "models-data-extractor" => DataLayer, None, false, Some("it extracts what `models-data-source` polls from `/v1/models`, which pdsim does not simulate");
    "dcgm-data-source" => DataLayer, None, true, Some(EXTERNAL);
    "dcgm-extractor" => DataLayer, None, true, Some(EXTERNAL);
    "file-discovery" => DataLayer, None, false, Some("it discovers the EPP's endpoints from a file on the EPP's disk instead of the InferencePool; pdsim's endpoints are the deployment's pods");
    // Parsers: pdsim's requests arrive as tokens already, so parsing is moot.
    "openai-parser" => Parser, None, false, None;
    "passthrough-parser" => Parser, None, false, None;
    "vllmgrpc-parser" => Parser, None, false, Some(OTHER_PROTOCOL);
    "vertexai-parser" => Parser, None, false, Some(OTHER_PROTOCOL);
    "anthropic-parser" => Parser, None, false, Some(OTHER_PROTOCOL);
    // Flow control (§3.8; `flowcontrol.rs`). pdsim's requests carry no
    // fairness id or objective header, so they form one flow in the
    // priority-0 band, where every fairness policy picks that flow and the
    // ordering policies all serve arrival order (no deadlines or SLO
    // headers). A factory that ignores its decoder (`_ *json.Decoder`)
    // accepts any parameters: `instantiatePlugins`
    // (`config/loader/configloader.go`) hands it a strict decoder it never
    // reads, so those types list no schema (`None`).
    "global-strict-fairness-policy" => FlowControl, None, false, None;
    "round-robin-fairness-policy" => FlowControl, None, false, None;
    "program-aware-fairness" => FlowControl, Some(&["strategy", "evictionTtlSeconds", "evictionSweepSeconds", "lasWeightService", "lasWeightHeadWait", "lasHalfLifeSeconds"]), false, None;
    "fcfs-ordering-policy" => FlowControl, None, false, None;
    "edf-ordering-policy" => FlowControl, None, false, None;
    "slo-deadline-ordering-policy" => FlowControl, None, false, None;
    "static-usage-limit-policy" => FlowControl, Some(&["threshold"]), false, None;
    // Alpha (`flowcontrol/usagelimits/priorityholdback`,
    // `.../softreflectiveceiling`; `plugins/flowcontrol/usagelimits`).
    "priority-holdback-policy" => FlowControl, Some(&["shape", "domain", "minCeiling", "maxCeiling"]), true, None;
    "soft-reflective-ceiling-policy" => FlowControl, Some(&[]), true, None;
    // Alpha (`flowcontrol/eviction/{filtering,ordering}`). The runner builds
    // the evictor from its own instances of both, so a configured one is
    // instantiated and used by nothing; their factories ignore their
    // decoder, so any parameters load.
    "sheddable-eviction-filter" => FlowControl, None, true, None;
    "priority-then-time-eviction-order-policy" => FlowControl, None, true, None;
    // Registered at ebab687 too (`registerInTreePlugins`), in the groups the
    // runner gives them.
    // Request header processor, Alpha (`requestheader/agentidentity`): it
    // copies the first agent session header it finds into the request's
    // `agent-identity` attribute, from which the Director derives the
    // fairness id. pdsim's requests carry no headers, so it finds none and
    // sets nothing, as the EPP does for such a request.
    "agent-identity" => Other, Some(&["additionalSessionHeaders"]), true, None;
    // Screener, Alpha (`screener/disaggregatedsetrollout`).
    "disaggregatedset-rollout-screener" => Other, None, true, Some("it screens endpoints by DisaggregatedSet revision labels and request headers during a rollout, and pdsim models no rollouts or revisions");
    // Data producers, Alpha.
    // burst-prefix-cache-producer holds arriving requests for a batch window
    // and places prompt-sharing bursts jointly (`dataproducer/burstprefix`;
    // `plugins/requestcontrol/dataproducer/burstprefix.rs`).
    "burst-prefix-cache-producer" => Producer, Some(&["windowDurationMs", "maxPerReplica", "blockSizeTokens", "maxPrefixTokensToMatch", "minColocateBlocks", "maxBatchSize", "balanceBy"]), true, None;
    "p2p-source-producer" => Producer, None, true, Some("it names a peer for the routing sidecar to pull cached KV from over a P2P connector (`x-kv-cache-source-host-port`), and pdsim simulates no P2P KV pulls");
    // Data layer, Alpha (`datalayer/extractor/topology`): it stamps each
    // endpoint with hostname, rack, zone and region from pod labels, which
    // topology-affinity-filter and -scorer read (`plugins/datalayer`).
    "topology-extractor" => DataLayer, Some(&["hostname", "rack", "zone", "region"]), true, None;
    // Parsers: pdsim's requests arrive as tokens already, so parsing is moot
    // (`parsers/vllmhttp`: vLLM's /inference/v1/generate; `parsers/sglanghttp`:
    // SGLang's /generate); neither factory reads parameters.
    "vllmhttp-parser" => Parser, None, false, None;
    "sglanghttp-parser" => Parser, None, false, None;
    // For the Gateway API conformance tests only.
    "header-based-testing-filter" => Filter, None, false, Some("it is registered for the Gateway API conformance tests, which pick endpoints by a test header that pdsim's requests do not carry");
    "destination-endpoint-served-verifier" => Other, None, false, Some("it is registered for the Gateway API conformance tests, to check which endpoint served a request");
    // Multi-cluster variants, Alpha: they route across the InferencePools of
    // several clusters.
    "multicluster-approx-prefix-cache-producer" => Producer, None, true, Some(MULTI_CLUSTER);
    "multicluster-file-discovery" => DataLayer, None, true, Some(MULTI_CLUSTER);
    "multicluster-kv-cache-utilization-scorer" => Scorer, None, true, Some(MULTI_CLUSTER);
    "multicluster-metrics-data-source" => DataLayer, None, true, Some(MULTI_CLUSTER);
    "multicluster-metrics-extractor" => DataLayer, None, true, Some(MULTI_CLUSTER);
    "multicluster-prefix-cache-scorer" => Scorer, None, true, Some(MULTI_CLUSTER);
    "multicluster-queue-scorer" => Scorer, None, true, Some(MULTI_CLUSTER);
    "multicluster-session-affinity-filter" => Filter, None, true, Some(MULTI_CLUSTER);
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

#[cfg(test)]
mod tests {
    use super::{PLUGINS, REMOVED, Role, lookup};

    /// Every type `registerInTreePlugins` (`cmd/epp/runner/runner.go` at
    /// llm-d-router ebab687) registers, its name constant resolved to the
    /// string: 97 types (`prefill-filter` and `decode-filter` are registered
    /// twice).
    const REGISTERED: &[&str] = &[
        "active-request-scorer",
        "agent-identity",
        "always-disagg-multimodal-decider",
        "always-disagg-pd-decider",
        "anthropic-parser",
        "approx-prefix-cache-producer",
        "burst-prefix-cache-producer",
        "by-label",
        "by-label-selector",
        "concurrency-detector",
        "context-length-aware",
        "core-metrics-extractor",
        "data-parallel-profile-handler",
        "dcgm-data-source",
        "dcgm-extractor",
        "decode-filter",
        "destination-endpoint-served-verifier",
        "disagg-headers-handler",
        "disagg-profile-handler",
        "disaggregatedset-rollout-screener",
        "edf-ordering-policy",
        "encode-filter",
        "endpoint-attribute-filter",
        "endpoint-attribute-scorer",
        "endpoint-notification-source",
        "fcfs-ordering-policy",
        "file-discovery",
        "global-strict-fairness-policy",
        "header-based-testing-filter",
        "header-label-affinity-scorer",
        "header-profile-handler",
        "inflight-load-producer",
        "k8s-notification-source",
        "kv-cache-utilization-scorer",
        "label-selector-filter",
        "latency-scorer",
        "latency-slo-admitter",
        "load-aware-scorer",
        "lora-affinity-scorer",
        "max-score-picker",
        "metrics-data-source",
        "mm-embeddings-cache-producer",
        "mm-embeddings-cache-scorer",
        "models-data-extractor",
        "models-data-source",
        "multicluster-approx-prefix-cache-producer",
        "multicluster-file-discovery",
        "multicluster-kv-cache-utilization-scorer",
        "multicluster-metrics-data-source",
        "multicluster-metrics-extractor",
        "multicluster-prefix-cache-scorer",
        "multicluster-queue-scorer",
        "multicluster-session-affinity-filter",
        "no-hit-lru-scorer",
        "openai-parser",
        "p2p-source-producer",
        "passthrough-parser",
        "pd-profile-handler",
        "precise-prefix-cache-producer",
        "precise-prefix-cache-scorer",
        "predicted-latency-producer",
        "prefill-filter",
        "prefill-header-handler",
        "prefix-based-pd-decider",
        "prefix-cache-affinity-filter",
        "prefix-cache-scorer",
        "priority-holdback-policy",
        "priority-then-time-eviction-order-policy",
        "probabilistic-admitter",
        "program-aware-fairness",
        "queue-scorer",
        "random-picker",
        "request-attribute-reporter",
        "round-robin-fairness-policy",
        "running-requests-size-scorer",
        "session-affinity-filter",
        "session-affinity-scorer",
        "session-id-producer",
        "sglanghttp-parser",
        "sheddable-eviction-filter",
        "single-profile-handler",
        "slo-deadline-ordering-policy",
        "slo-headroom-tier-filter",
        "soft-reflective-ceiling-policy",
        "static-usage-limit-policy",
        "token-load-scorer",
        "token-producer",
        "tokenizer",
        "topology-affinity-filter",
        "topology-affinity-scorer",
        "topology-extractor",
        "utilization-detector",
        "utilization-filter",
        "vertexai-parser",
        "vllmgrpc-parser",
        "vllmhttp-parser",
        "weighted-random-picker",
    ];

    #[test]
    fn every_type_the_epp_registers_is_known_and_nothing_else() {
        for name in REGISTERED {
            assert!(lookup(name).is_some(), "`{name}` is registered by the EPP");
        }
        for p in PLUGINS {
            assert!(
                REGISTERED.contains(&p.name),
                "`{}` is not registered",
                p.name
            );
        }
        assert_eq!(PLUGINS.len(), REGISTERED.len(), "a type listed twice");
        for (name, _) in REMOVED {
            assert!(!REGISTERED.contains(name), "`{name}` is registered");
        }
    }

    #[test]
    fn a_type_pdsim_does_not_run_says_why_and_the_parsers_run() {
        for p in PLUGINS {
            if let Some(why) = p.not_simulated {
                assert!(why.len() > 20, "`{}`: {why}", p.name);
            }
        }
        for parser in PLUGINS
            .iter()
            .filter(|p| p.role == Role::Parser && p.params.is_some())
        {
            assert_eq!(parser.not_simulated, None, "{}", parser.name);
        }
        assert!(
            lookup("multicluster-queue-scorer")
                .unwrap()
                .not_simulated
                .unwrap()
                .contains("one cluster")
        );
    }
}
