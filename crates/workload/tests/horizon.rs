//! Arrival times that do not fit: a timestamp whose nanoseconds overflow, or
//! that lies beyond the one-year horizon, is an input error naming the file,
//! the line and the column, in every trace format; a synthetic rate too low
//! for its requests is an error naming the rate. A gap that fits (10^9 ms,
//! about 11.6 days) is read as is.

use pdsim_core::{ARRIVAL_HORIZON, SimTime};
use pdsim_spec::catalog::{LengthDistribution, Shape};
use pdsim_spec::scenario::TraceHeader;
use pdsim_workload::{
    AzureReader, MooncakeReader, RequestSpec, Synthetic, TraceError, TraceV2Reader,
};
use std::collections::BTreeMap;

const TRACEV2_HEAD: &str = "request_id,client_id,tenant_id,slo_class,vllm_priority,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason\n";

fn header() -> TraceHeader {
    TraceHeader {
        trace_version: 3,
        time_unit: "us".into(),
        mode: "real".into(),
        workload_seed: None,
        server: None,
        goodput_slo_targets: BTreeMap::new(),
        session_context_growth: None,
    }
}

fn mooncake(timestamps: &[&str]) -> Vec<Result<RequestSpec, TraceError>> {
    let text: String = timestamps
        .iter()
        .map(|t| {
            format!("{{\"timestamp\": {t}, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [1]}}\n")
        })
        .collect();
    MooncakeReader::new(text.as_bytes(), "m.jsonl").collect()
}

fn tracev2(arrivals_us: &[&str]) -> Vec<Result<RequestSpec, TraceError>> {
    let body: String = arrivals_us
        .iter()
        .map(|at| format!("1,c,,,0,,0,,0,true,8,2,8,0,0,0,0,,0,0,{at},{at},0,0,0,ok,,\n"))
        .collect();
    let text = format!("{TRACEV2_HEAD}{body}");
    TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
        .unwrap()
        .collect()
}

fn azure(times: &[&str]) -> Vec<Result<RequestSpec, TraceError>> {
    let body: String = times.iter().map(|t| format!("{t},8,2\n")).collect();
    let text = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{body}");
    AzureReader::new(text.as_bytes(), "a.csv")
        .unwrap()
        .collect()
}

/// The one error among `items`, which must be on `line` in `column`.
fn only_error(items: &[Result<RequestSpec, TraceError>], line: u64, column: &str) -> String {
    let errors: Vec<&TraceError> = items.iter().filter_map(|i| i.as_ref().err()).collect();
    assert_eq!(errors.len(), 1, "{items:?}");
    let e = errors[0];
    assert_eq!((e.line, e.column.as_deref()), (line, Some(column)), "{e}");
    e.to_string()
}

#[test]
fn mooncake_timestamps_past_the_horizon_or_overflowing_are_errors_on_their_line() {
    // 10^9 ms (about 11.6 days) fits.
    let items = mooncake(&["0", "1000000000"]);
    assert_eq!(
        items[1].as_ref().unwrap().arrival,
        SimTime(1_000_000_000_000_000)
    );
    // 10^12 ms (about 31.7 years) is past the horizon.
    let items = mooncake(&["0", "1000000000000"]);
    let message = only_error(&items, 2, "timestamp");
    assert!(message.starts_with("m.jsonl:2: timestamp: "), "{message}");
    assert!(message.contains("one year"), "{message}");
    // Relative to the first row: a late origin does not count.
    let items = mooncake(&["1000000000000", "1000000000001"]);
    assert_eq!(items[1].as_ref().unwrap().arrival, SimTime::from_ms(1));
    // Nanoseconds overflow u64, and values past u64 itself.
    let items = mooncake(&["0", "18446744073709551"]);
    only_error(&items, 2, "timestamp");
    let items = mooncake(&["0", "1e300"]);
    only_error(&items, 2, "timestamp");
    let items = mooncake(&["0", "99999999999999999999999"]);
    only_error(&items, 2, "timestamp");
    // Exactly the horizon is accepted; one millisecond more is not.
    let horizon_ms = (ARRIVAL_HORIZON.as_ns() / 1_000_000).to_string();
    let past_ms = (ARRIVAL_HORIZON.as_ns() / 1_000_000 + 1).to_string();
    let items = mooncake(&["0", &horizon_ms, &past_ms]);
    assert_eq!(items[1].as_ref().unwrap().arrival, ARRIVAL_HORIZON);
    only_error(&items, 3, "timestamp");
}

#[test]
fn tracev2_arrivals_past_the_horizon_or_overflowing_are_errors_on_their_line() {
    // Line 1 is the column header.
    let items = tracev2(&["0", "1000000000000"]);
    assert_eq!(
        items[1].as_ref().unwrap().arrival,
        SimTime(1_000_000_000_000_000)
    );
    let items = tracev2(&["0", "1000000000000000"]);
    let message = only_error(&items, 3, "arrival_time_us");
    assert!(message.contains("one year"), "{message}");
    // TraceV2 keeps the trace's own origin, so a first row past the
    // horizon is refused too.
    let items = tracev2(&["1000000000000000"]);
    only_error(&items, 2, "arrival_time_us");
    for overflowing in [
        "18446744073709552",
        "18446744073709551615",
        "1e30",
        "nan",
        "-1",
    ] {
        let items = tracev2(&["0", overflowing]);
        only_error(&items, 3, "arrival_time_us");
    }
}

#[test]
fn azure_times_past_the_horizon_are_errors_on_their_line() {
    let items = azure(&["2023-11-16 18:15:46", "2023-11-28 07:00:00"]);
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    // 31.7 years later: past the horizon, though it fits in nanoseconds.
    let items = azure(&["2023-11-16 18:15:46", "2055-08-01 00:00:00"]);
    let message = only_error(&items, 3, "TIMESTAMP");
    assert!(message.contains("days after the first row"), "{message}");
    // The whole accepted range of years, first to last.
    let items = azure(&["1970-01-01 00:00:00", "2500-12-31 23:59:59"]);
    only_error(&items, 3, "TIMESTAMP");
}

fn shape() -> Shape {
    let d = |tokens| LengthDistribution {
        tokens,
        tokens_stdev: 0.0,
        tokens_min: 0,
        tokens_max: 0,
    };
    Shape {
        prefix_tokens: 0,
        prompt: d(16.0),
        output: d(2.0),
    }
}

#[test]
fn a_synthetic_rate_too_low_for_its_requests_is_an_error_naming_the_rate() {
    for rate in [1e-300, 1e-320, 5e-324, 1e-12] {
        let items: Vec<_> = Synthetic::new("chat", &shape(), 5, rate, 0)
            .unwrap()
            .collect();
        // The first arrival is already past the horizon; the stream ends.
        assert_eq!(items.len(), 1, "{rate}: {items:?}");
        let e = items[0].as_ref().unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.column.as_deref()),
            ("chat", 0, Some("rate"))
        );
        assert!(e.message.contains("too low a rate"), "{e}");
        assert!(e.message.len() < 250, "{e}");
    }
    // 10^-4 per second for 20 requests is about 2.3 days: it fits.
    let items: Vec<_> = Synthetic::new("chat", &shape(), 20, 1e-4, 0)
        .unwrap()
        .collect();
    assert_eq!(items.len(), 20);
    assert!(items.iter().all(Result::is_ok));
    // A rate that fits for some requests and not for all: the stream ends
    // with the error at the first arrival past the horizon.
    let items: Vec<_> = Synthetic::new("chat", &shape(), 1_000, 1e-5, 0)
        .unwrap()
        .collect();
    let last = items.last().unwrap();
    assert!(last.is_err(), "{last:?}");
    assert!(
        items[..items.len() - 1]
            .iter()
            .all(|i| { i.as_ref().is_ok_and(|r| r.arrival <= ARRIVAL_HORIZON) })
    );
    assert!(items.len() > 100 && items.len() < 1_000, "{}", items.len());
}
