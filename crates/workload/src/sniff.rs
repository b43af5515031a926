//! Telling trace formats apart, and one reader type for all of them.
//!
//! A user points pdsim at a trace file and should not have to say what kind
//! it is when the file says so itself. The formats differ from their first
//! bytes: a Mooncake row is a JSON object, a TraceV2 CSV's header row starts
//! with `request_id`, an Azure CSV's header row names `TIMESTAMP` and
//! `ContextTokens`, and an inference-perf configuration is YAML (or one line
//! of JSON, as the training runs' `profile.yaml`) whose first key is one of
//! inference-perf's top-level keys (`api`, `data`, `load`, …). The file
//! name's extension decides only when the content cannot: an empty file, or
//! a `.yaml`/`.yml` file, which no trace format uses. Detection looks at a
//! prefix of the input through [`BufRead::fill_buf`], so it consumes nothing
//! and opens nothing.

use crate::inference_perf::TOP_LEVEL_KEYS;
use crate::{
    AzureReader, BurstGptReader, InferencePerf, MooncakeReader, RequestSource, RequestSpec,
    StagePlan, TraceError, TraceV2Reader,
};
use pdsim_spec::files::{MAX_DOCUMENT_BYTES, UTF8_BOM, foreign_encoding};
use pdsim_spec::scenario::TraceHeader;
use std::io::{BufRead, Read};

/// The trace file formats pdsim reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Mooncake FAST'25 JSON Lines ([`MooncakeReader`]).
    Mooncake,
    /// BLIS / inference-sim TraceV2 CSV ([`TraceV2Reader`]).
    TraceV2,
    /// Azure LLM inference trace 2023 CSV ([`AzureReader`]).
    Azure,
    /// BurstGPT CSV ([`BurstGptReader`]).
    BurstGpt,
    /// An inference-perf configuration ([`InferencePerf`]).
    InferencePerf,
}

impl TraceFormat {
    /// The format of a file called `name` whose first bytes are `head`
    /// (any prefix of the file holding its first line will do).
    pub fn detect(name: &str, head: &[u8]) -> Result<TraceFormat, TraceError> {
        if let Some(encoding) = foreign_encoding(head) {
            return Err(TraceError::new(
                name,
                1,
                None,
                format!("the file {encoding}"),
            ));
        }
        let head = head.strip_prefix(UTF8_BOM).unwrap_or(head);
        let start = head
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(head.len());
        let head = &head[start..];
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".yaml") || lower.ends_with(".yml") || inference_perf_keys(head) {
            return Ok(TraceFormat::InferencePerf);
        }
        if head.first() == Some(&b'{') {
            return Ok(TraceFormat::Mooncake);
        }
        let first_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
        let fields: Vec<&[u8]> = first_line
            .split(|&b| b == b',')
            .map(|f| f.trim_ascii())
            .collect();
        if fields.first() == Some(&&b"request_id"[..]) {
            return Ok(TraceFormat::TraceV2);
        }
        if fields.contains(&&b"TIMESTAMP"[..]) && fields.contains(&&b"ContextTokens"[..]) {
            return Ok(TraceFormat::Azure);
        }
        if fields.contains(&&b"Timestamp"[..])
            && fields.contains(&&b"Request tokens"[..])
            && fields.contains(&&b"Response tokens"[..])
        {
            return Ok(TraceFormat::BurstGpt);
        }
        if head.is_empty() && (lower.ends_with(".jsonl") || lower.ends_with(".json")) {
            return Ok(TraceFormat::Mooncake);
        }
        Err(TraceError::new(
            name,
            1,
            None,
            "cannot tell the trace format: expected a Mooncake JSON Lines row (`{`), a TraceV2 \
             header row starting with `request_id`, an Azure header row \
             `TIMESTAMP,ContextTokens,GeneratedTokens`, a BurstGPT header row \
             `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, or an \
             inference-perf configuration \
             (YAML starting with one of its keys: api, data, load, …)",
        ))
    }

    /// Detects the format of `input` from the bytes it has buffered,
    /// without consuming any.
    pub fn sniff<R: BufRead>(name: &str, input: &mut R) -> Result<TraceFormat, TraceError> {
        let head = input
            .fill_buf()
            .map_err(|e| TraceError::new(name, 1, None, format!("cannot read the trace: {e}")))?;
        TraceFormat::detect(name, head)
    }
}

/// Whether `head` (past blanks) starts like an inference-perf configuration:
/// a first YAML line `key:` or a one-line JSON object `{"key":`, with `key`
/// one of inference-perf's top-level keys. A Mooncake row's first key is
/// `timestamp` or another row field, never one of these.
fn inference_perf_keys(head: &[u8]) -> bool {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.trim_ascii())
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"));
    let Some(first) = lines.next() else {
        return false;
    };
    let key = if let Some(rest) = first.strip_prefix(b"{") {
        // Pretty-printed JSON puts the first key on the next line.
        let rest = match rest.trim_ascii_start() {
            b"" => lines.next().unwrap_or_default(),
            rest => rest,
        };
        let Some(rest) = rest.strip_prefix(b"\"") else {
            return false;
        };
        match rest.iter().position(|&b| b == b'"') {
            Some(end) => &rest[..end],
            None => return false,
        }
    } else if first.first() == Some(&b'"') {
        return false;
    } else {
        match first.iter().position(|&b| b == b':') {
            Some(end) => first[..end].trim_ascii(),
            None => return false,
        }
    };
    TOP_LEVEL_KEYS.iter().any(|k| k.as_bytes() == key)
}

/// Any of the trace readers, chosen by format.
pub enum TraceReader<R> {
    /// A Mooncake JSON Lines trace.
    Mooncake(MooncakeReader<R>),
    /// A TraceV2 CSV.
    TraceV2(TraceV2Reader<R>),
    /// An Azure LLM inference trace.
    Azure(AzureReader<R>),
    /// A BurstGPT trace.
    BurstGpt(BurstGptReader<R>),
    /// An inference-perf configuration, read whole (it is a small document).
    InferencePerf(Box<InferencePerf>),
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `input` in `format`. A TraceV2 CSV needs the `header`
    /// its Scenario gives; the other formats ignore it. `seed` draws what
    /// an inference-perf configuration leaves random (its shuffle, arrivals
    /// and lengths); the recorded traces ignore it.
    pub fn new(
        format: TraceFormat,
        input: R,
        name: &str,
        header: Option<&TraceHeader>,
        seed: u64,
    ) -> Result<TraceReader<R>, TraceError> {
        Ok(match format {
            TraceFormat::InferencePerf => {
                let mut text = String::new();
                let read = input
                    .take(MAX_DOCUMENT_BYTES + 1)
                    .read_to_string(&mut text)
                    .map_err(|e| {
                        TraceError::new(
                            name,
                            0,
                            None,
                            format!("cannot read the configuration: {e}"),
                        )
                    })?;
                if read as u64 > MAX_DOCUMENT_BYTES {
                    return Err(TraceError::new(
                        name,
                        0,
                        None,
                        format!(
                            "the configuration is larger than the {MAX_DOCUMENT_BYTES} bytes \
                             pdsim reads as a document"
                        ),
                    ));
                }
                TraceReader::InferencePerf(Box::new(InferencePerf::new(&text, name, seed)?))
            }
            TraceFormat::Mooncake => TraceReader::Mooncake(MooncakeReader::new(input, name)),
            TraceFormat::Azure => TraceReader::Azure(AzureReader::new(input, name)?),
            TraceFormat::BurstGpt => TraceReader::BurstGpt(BurstGptReader::new(input, name)?),
            TraceFormat::TraceV2 => {
                let Some(header) = header else {
                    return Err(TraceError::new(
                        name,
                        0,
                        None,
                        "a TraceV2 CSV needs its header (trace_version, time_unit, mode) from \
                         the Scenario's workload.trace.header",
                    ));
                };
                TraceReader::TraceV2(TraceV2Reader::new(header, input, name)?)
            }
        })
    }

    /// Detects the format of `input` ([`TraceFormat::sniff`]) and opens the
    /// matching reader.
    pub fn sniff(
        mut input: R,
        name: &str,
        header: Option<&TraceHeader>,
        seed: u64,
    ) -> Result<TraceReader<R>, TraceError> {
        let format = TraceFormat::sniff(name, &mut input)?;
        TraceReader::new(format, input, name, header, seed)
    }

    /// The load stages of an inference-perf configuration; empty for the
    /// recorded traces, which have none.
    pub fn stages(&self) -> &[StagePlan] {
        match self {
            TraceReader::InferencePerf(r) => r.stages(),
            _ => &[],
        }
    }

    /// The client's per-request timeout in seconds of an inference-perf
    /// configuration (`load.request_timeout`, else aiohttp's 300 s); `None`
    /// for the recorded traces, whose rows carry their own deadlines if any.
    pub fn client_timeout_s(&self) -> Option<f64> {
        match self {
            TraceReader::InferencePerf(r) => Some(r.client_timeout_s()),
            _ => None,
        }
    }

    /// What the reader approximates, one message each, for the run to print
    /// (only an inference-perf configuration and a BurstGPT file with
    /// sessions have any).
    pub fn notes(&self) -> &[String] {
        match self {
            TraceReader::InferencePerf(r) => r.notes(),
            TraceReader::BurstGpt(r) => r.notes(),
            _ => &[],
        }
    }

    /// The format being read.
    pub fn format(&self) -> TraceFormat {
        match self {
            TraceReader::Mooncake(_) => TraceFormat::Mooncake,
            TraceReader::TraceV2(_) => TraceFormat::TraceV2,
            TraceReader::Azure(_) => TraceFormat::Azure,
            TraceReader::BurstGpt(_) => TraceFormat::BurstGpt,
            TraceReader::InferencePerf(_) => TraceFormat::InferencePerf,
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            TraceReader::Mooncake(r) => r.next(),
            TraceReader::TraceV2(r) => r.next(),
            TraceReader::Azure(r) => r.next(),
            TraceReader::BurstGpt(r) => r.next(),
            TraceReader::InferencePerf(r) => r.next(),
        }
    }
}

impl<R: BufRead> RequestSource for TraceReader<R> {
    fn slo_classes(&self) -> &[String] {
        match self {
            TraceReader::Mooncake(r) => r.slo_classes(),
            TraceReader::TraceV2(r) => r.slo_classes(),
            TraceReader::Azure(r) => r.slo_classes(),
            TraceReader::BurstGpt(r) => r.slo_classes(),
            TraceReader::InferencePerf(r) => r.slo_classes(),
        }
    }

    fn outputs_raised(&self) -> u64 {
        match self {
            TraceReader::Mooncake(r) => r.outputs_raised(),
            TraceReader::TraceV2(r) => r.outputs_raised(),
            TraceReader::Azure(r) => r.outputs_raised(),
            TraceReader::BurstGpt(r) => r.outputs_raised(),
            TraceReader::InferencePerf(r) => r.outputs_raised(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TraceFormat, TraceReader};
    use std::io::BufReader;

    #[test]
    fn formats_are_told_apart_by_content_then_extension() {
        let cases: &[(&str, &[u8], TraceFormat)] = &[
            ("a.jsonl", b"{\"timestamp\": 0}\n", TraceFormat::Mooncake),
            (
                "a.csv",
                b"\xef\xbb\xbf  {\"timestamp\": 0}",
                TraceFormat::Mooncake,
            ),
            (
                "a.csv",
                b"request_id,client_id,tenant_id\n0,a,b",
                TraceFormat::TraceV2,
            ),
            (
                "a.txt",
                b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n",
                TraceFormat::Azure,
            ),
            (
                "BurstGPT_1.csv",
                b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT",
                TraceFormat::BurstGpt,
            ),
            (
                "b3.csv",
                b"Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens\n",
                TraceFormat::BurstGpt,
            ),
            ("a.jsonl", b"", TraceFormat::Mooncake),
            ("config.yml", b"", TraceFormat::InferencePerf),
            (
                "c.txt",
                b"# load test\napi:\n  type: completion\n",
                TraceFormat::InferencePerf,
            ),
            (
                "profile",
                b"{\"api\":{\"streaming\":true},\"load\":{}}\n",
                TraceFormat::InferencePerf,
            ),
            (
                "m.jsonl",
                b"{\"timestamp\": 0, \"input_length\": 3}\n",
                TraceFormat::Mooncake,
            ),
            (
                "c.json",
                b"{\n  \"load\": {\"stages\": []}\n}\n",
                TraceFormat::InferencePerf,
            ),
        ];
        for (name, head, format) in cases {
            assert_eq!(TraceFormat::detect(name, head).unwrap(), *format, "{name}");
        }
        for head in [&b"\xff\xfe{\0"[..], b"\xfe\xff\0{", b"r\0e\0q\0"] {
            let e = TraceFormat::detect("a.jsonl", head).unwrap_err();
            assert_eq!(e.line, 1);
            assert!(e.message.starts_with("the file is UTF-16 text"), "{e}");
            assert!(e.message.contains("pdsim reads UTF-8"), "{e}");
        }
        // Azure needs both of its columns: one alone is no Azure header.
        for head in [&b"TIMESTAMP,Other\n"[..], b"ContextTokens,Other\n"] {
            assert!(TraceFormat::detect("a.csv", head).is_err(), "{head:?}");
        }
        // BurstGPT needs all three of its columns.
        for head in [
            &b"Timestamp,Other\n"[..],
            b"Timestamp,Request tokens\n",
            b"Request tokens,Response tokens\n",
        ] {
            assert!(TraceFormat::detect("a.csv", head).is_err(), "{head:?}");
        }
        let e = TraceFormat::detect("a.csv", b"a,b,c\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.line), ("a.csv", 1));
        assert!(TraceFormat::detect("a.csv", b"").is_err());
    }

    /// The sniffed reader reports the outputs its inner reader raised:
    /// BurstGPT's failed rows (0 response tokens) are replayed as 1 token.
    #[test]
    fn the_sniffed_reader_counts_the_outputs_its_trace_raised() {
        use crate::RequestSource;
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    1,ChatGPT,10,0,10,Conversation log\n\
                    2,ChatGPT,10,5,15,Conversation log\n\
                    3,ChatGPT,10,0,10,Conversation log\n";
        let mut reader =
            TraceReader::sniff(BufReader::new(text.as_bytes()), "BurstGPT_1.csv", None, 0).unwrap();
        assert_eq!(reader.format(), TraceFormat::BurstGpt);
        assert_eq!(reader.by_ref().count(), 3);
        assert_eq!(reader.outputs_raised(), 2);
    }

    #[test]
    fn sniffing_consumes_nothing() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n";
        let reader =
            TraceReader::sniff(BufReader::new(text.as_bytes()), "az.csv", None, 0).unwrap();
        assert_eq!(reader.format(), TraceFormat::Azure);
        assert_eq!(reader.count(), 1);
        let e = TraceReader::new(TraceFormat::TraceV2, text.as_bytes(), "t.csv", None, 0)
            .err()
            .unwrap();
        assert!(e.message.contains("header"), "{e}");
    }

    #[test]
    fn only_an_inference_perf_configuration_carries_a_client_timeout() {
        // `load.request_timeout: null` is aiohttp's 300 s session timeout;
        // a given value is used as is; a recorded trace has none.
        let config = |timeout: &str| {
            format!(
                "api: {{type: completion, streaming: true}}\ndata:\n  type: shared_prefix\n  shared_prefix: {{num_groups: 1, num_prompts_per_group: 1, system_prompt_len: 10, question_len: 10, output_len: 10}}\nload:\n  type: constant\n  stages: [{{rate: 1.0, duration: 2}}]\n  request_timeout: {timeout}\nserver: {{type: vllm, model_name: m, base_url: 'http://x', ignore_eos: true}}\n"
            )
        };
        for (timeout, want) in [("null", 300.0), ("42.5", 42.5)] {
            let text = config(timeout);
            let reader = TraceReader::sniff(BufReader::new(text.as_bytes()), "c.yaml", None, 0)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(reader.client_timeout_s(), Some(want));
        }
        let mooncake =
            b"{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1]}\n";
        let reader = TraceReader::sniff(BufReader::new(&mooncake[..]), "t.jsonl", None, 0).unwrap();
        assert_eq!(reader.client_timeout_s(), None);
        assert!(reader.notes().is_empty());
        // The configuration's notes reach the run through the sniffed reader:
        // inference-perf's client concurrency is unknown without
        // `num_workers`, which its reader says.
        let text = config("null");
        let reader =
            TraceReader::sniff(BufReader::new(text.as_bytes()), "c.yaml", None, 0).unwrap();
        assert!(
            reader.notes().iter().any(|n| n.contains("CPU count")),
            "{:?}",
            reader.notes()
        );
    }

    #[test]
    fn the_sniffed_reader_names_the_classes_its_trace_names() {
        use crate::RequestSource;
        let header = pdsim_spec::scenario::TraceHeader {
            trace_version: 3,
            time_unit: "microseconds".into(),
            mode: "generated".into(),
            workload_seed: Some(42),
            server: None,
            goodput_slo_targets: Default::default(),
            session_context_growth: None,
        };
        let head = "request_id,client_id,tenant_id,slo_class,vllm_priority,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason,adapter\n";
        let row = |id: u32, class: &str, at: u64| {
            format!("{id},c1,,{class},0,,0,,0,true,10,2,10,0,0,0,0,,0,0,{at},{at},0,0,0,ok,,,\n")
        };
        let text = format!(
            "{head}{}{}{}",
            row(1, "gold", 0),
            row(2, "", 5),
            row(3, "silver", 9)
        );
        let mut reader =
            TraceReader::sniff(BufReader::new(text.as_bytes()), "t.csv", Some(&header), 0).unwrap();
        let classes: Vec<u16> = reader.by_ref().map(|r| r.unwrap().slo_class).collect();
        let names = reader.slo_classes();
        let name = |i: u16| names[i as usize].as_str();
        assert_eq!(
            classes.iter().map(|c| name(*c)).collect::<Vec<_>>(),
            ["gold", "", "silver"]
        );
    }
}
