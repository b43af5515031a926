//! A Chrome/Perfetto trace of a run (Trace Event Format, JSON): one
//! process per pool with one track per engine core, a slice per step named
//! by its batch (prefill and decode tokens, requests, padding in `args`);
//! KV transfers as async slices on a "KV transfers" process; and one
//! counter track per link with its utilisation per second. Open it in
//! ui.perfetto.dev or chrome://tracing. Written as events happen.
//!
//! A counter holds its value until its next event, and the event loop
//! reports only the windows a link carried bytes in; so after a link's
//! last busy window before a quiet one the track gets a 0 at the quiet
//! window's start. A quiet stretch costs one event, however long.

use pdsim_cluster::{LINK_WINDOW_NS, LinkWindow, RecordSink, RequestRecord, StepSample};
use std::collections::BTreeMap;
use std::io::Write;

/// The process id of the KV-transfer tracks and of the link counters.
const TRANSFERS_PID: u32 = 10_000;
const LINKS_PID: u32 = 10_001;

/// How every trace pdsim writes begins. The `otherData` key, a dictionary
/// of metadata in the Trace Event Format that Perfetto and chrome://tracing
/// read past, says that pdsim wrote the file: `pdsim run --perfetto`
/// replaces an existing file only when it begins so, and tells its own
/// unfinished traces apart from a user's file by it.
pub const HEAD: &str =
    "{\"otherData\":{\"writer\":\"pdsim\"},\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";

/// How traces of pdsim before [`HEAD`] began: the head and the first two
/// events, the names of the KV-transfer and link processes, which together
/// no other writer produces. A file that begins so is one pdsim wrote.
pub const OLD_HEAD: &str = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":10000,\"args\":{\"name\":\"KV transfers\"}},\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":10001,\"args\":{\"name\":\"links\"}}";

pub struct PerfettoSink<W: Write> {
    out: W,
    error: Option<String>,
    first: bool,
    pool_names: Vec<String>,
    named_pools: Vec<bool>,
    named_cores: Vec<bool>,
    /// Each link's (GPU, kind) last window with bytes, which its counter
    /// still shows.
    link_last_window: BTreeMap<(u32, &'static str), u64>,
}

/// Microseconds with nanosecond precision, printed the same everywhere.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000, ns % 1_000)
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W, pool_names: Vec<String>) -> PerfettoSink<W> {
        let mut sink = PerfettoSink {
            out,
            error: None,
            first: true,
            named_pools: vec![false; pool_names.len()],
            pool_names,
            named_cores: Vec::new(),
            link_last_window: BTreeMap::new(),
        };
        sink.raw(HEAD);
        for (pid, name) in [(TRANSFERS_PID, "KV transfers"), (LINKS_PID, "links")] {
            sink.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
                json_string(name)
            ));
        }
        // The head reaches the file at once, not when the buffer first
        // fills: a run beside this one tells an unfinished trace of pdsim's
        // from a user's file by it.
        if sink.error.is_none()
            && let Err(e) = sink.out.flush()
        {
            sink.error = Some(e.to_string());
        }
        sink
    }

    fn raw(&mut self, text: &str) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(text.as_bytes())
        {
            self.error = Some(e.to_string());
        }
    }

    fn event(&mut self, json: &str) {
        if !self.first {
            self.raw(",\n");
        }
        self.first = false;
        self.raw(json);
    }

    /// A link's utilisation counter at the start of `window`.
    fn link_counter(&mut self, gpu: u32, kind: &str, window: u64, utilization: f64) {
        self.event(&format!(
            "{{\"ph\":\"C\",\"name\":{},\"pid\":{LINKS_PID},\"ts\":{},\"args\":{{\"utilization\":{:.4}}}}}",
            json_string(&format!("gpu {gpu} {kind}")),
            us(window.saturating_mul(LINK_WINDOW_NS)),
            utilization
        ));
    }

    /// Closes the JSON and flushes; reports the first write error. Every
    /// link's counter drops to 0 after its last busy window.
    pub fn finish(mut self) -> Result<W, String> {
        for ((gpu, kind), last) in std::mem::take(&mut self.link_last_window) {
            self.link_counter(gpu, kind, last + 1, 0.0);
        }
        self.raw("\n]}\n");
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush().map_err(|e| e.to_string())?;
        Ok(self.out)
    }
}

impl<W: Write> RecordSink for PerfettoSink<W> {
    fn record(&mut self, r: &RequestRecord) {
        if let (Some(start), Some(end), Some((pool, pod, rank))) =
            (r.transfer_start, r.transfer_end, r.prefill)
        {
            let name = json_string(&format!(
                "KV {pool}/{pod}/{rank} → {}/{}/{}",
                r.pool, r.pod, r.rank
            ));
            let id = r.id.0;
            self.event(&format!(
                "{{\"ph\":\"b\",\"cat\":\"kv\",\"name\":{name},\"id\":{id},\"pid\":{TRANSFERS_PID},\"tid\":0,\"ts\":{},\"args\":{{\"bytes\":{},\"request\":{id}}}}}",
                us(start.as_ns()),
                r.transfer_bytes
            ));
            self.event(&format!(
                "{{\"ph\":\"e\",\"cat\":\"kv\",\"name\":{name},\"id\":{id},\"pid\":{TRANSFERS_PID},\"tid\":0,\"ts\":{}}}",
                us(end.as_ns())
            ));
        }
    }

    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}

    fn link_window(&mut self, w: LinkWindow) {
        let window = w.window_start.as_ns() / LINK_WINDOW_NS;
        let last = self.link_last_window.insert((w.gpu, w.kind), window);
        if let Some(last) = last.filter(|last| last + 1 < window) {
            self.link_counter(w.gpu, w.kind, last + 1, 0.0);
        }
        self.link_counter(w.gpu, w.kind, window, w.utilization);
    }

    fn step(&mut self, s: &StepSample) {
        let pid = u32::from(s.pool) + 1;
        let pool = s.pool as usize;
        if self.named_pools.get(pool) == Some(&false) {
            self.named_pools[pool] = true;
            let name = json_string(&format!("pool {}", self.pool_names[pool]));
            self.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{name}}}}}"
            ));
        }
        let core = s.core as usize;
        if self.named_cores.len() <= core {
            self.named_cores.resize(core + 1, false);
        }
        if !self.named_cores[core] {
            self.named_cores[core] = true;
            let name = json_string(&format!("pod {} rank {}", s.pod, s.rank));
            self.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":{name}}}}}",
                s.core
            ));
        }
        let name = match (s.prefill_tokens > 0, s.decode_requests > 0) {
            (true, true) => "mixed",
            (true, false) => "prefill",
            _ => "decode",
        };
        self.event(&format!(
            "{{\"ph\":\"X\",\"name\":\"{name}\",\"pid\":{pid},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{\"requests\":{},\"prefill_requests\":{},\"decode_requests\":{},\"prefill_tokens\":{},\"decode_tokens\":{},\"padded_tokens\":{}}}}}",
            s.core,
            us(s.start.as_ns()),
            us(s.duration.as_ns()),
            s.requests,
            s.prefill_requests,
            s.decode_requests,
            s.prefill_tokens,
            s.decode_tokens,
            s.padded_tokens
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdsim_core::{SimDuration, SimTime};

    #[test]
    fn the_trace_is_json_with_named_tracks_and_step_slices() {
        let mut sink = PerfettoSink::new(Vec::new(), vec!["decode".into()]);
        let step = StepSample {
            core: 3,
            pool: 0,
            pod: 1,
            rank: 2,
            start: SimTime(1_500),
            duration: SimDuration(2_000_000),
            requests: 4,
            prefill_requests: 1,
            decode_requests: 3,
            prefill_tokens: 100,
            decode_tokens: 3,
            padded_tokens: 104,
        };
        sink.step(&step);
        sink.step(&step);
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["name"], "mixed");
        assert_eq!(slices[0]["ts"], 1.5);
        assert_eq!(slices[0]["dur"], 2000.0);
        // Each track is named once.
        assert_eq!(
            events.iter().filter(|e| e["name"] == "thread_name").count(),
            1
        );
        assert!(text.contains("pool decode") && text.contains("pod 1 rank 2"));
    }

    #[test]
    fn the_trace_begins_by_saying_pdsim_wrote_it() {
        // The head is on the file as soon as the sink exists, before any
        // event fills the buffer.
        let mut file = std::io::BufWriter::new(Vec::new());
        let sink = PerfettoSink::new(&mut file, vec!["decode".into()]);
        drop(sink);
        assert!(file.get_ref().starts_with(HEAD.as_bytes()));
        // A finished trace is the Trace Event Format's object form, its
        // metadata under `otherData`, every event still in `traceEvents`.
        let text =
            String::from_utf8(PerfettoSink::new(Vec::new(), vec![]).finish().unwrap()).unwrap();
        assert!(text.starts_with(HEAD) && !text.starts_with(OLD_HEAD));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["otherData"]["writer"], "pdsim");
        assert_eq!(json["displayTimeUnit"], "ms");
        let events = json["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 2, "the two process names");
        // The old head is this one without `otherData`, then those names.
        let old = text.replacen("\"otherData\":{\"writer\":\"pdsim\"},", "", 1);
        assert!(old.starts_with(OLD_HEAD), "{old}");
    }

    #[test]
    fn a_link_counter_drops_to_zero_when_the_link_goes_quiet() {
        let mut sink = PerfettoSink::new(Vec::new(), vec![]);
        let window = |s: u64, gpu: u32, utilization: f64| LinkWindow {
            window_start: SimTime(s * LINK_WINDOW_NS),
            gpu,
            kind: "nic-out",
            bytes: 1.0,
            utilization,
        };
        // Busy at 0 and 1, quiet for a year, busy again; another link once.
        sink.link_window(window(0, 0, 0.5));
        sink.link_window(window(1, 0, 0.25));
        sink.link_window(window(1, 3, 0.125));
        sink.link_window(window(31_536_000, 0, 1.0));
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let counters: Vec<(String, f64, f64)> = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["ts"].as_f64().unwrap() / 1e6,
                    e["args"]["utilization"].as_f64().unwrap(),
                )
            })
            .collect();
        let on = |gpu: &str| -> Vec<(f64, f64)> {
            counters
                .iter()
                .filter(|c| c.0 == gpu)
                .map(|c| (c.1, c.2))
                .collect()
        };
        assert_eq!(
            on("gpu 0 nic-out"),
            [
                (0.0, 0.5),
                (1.0, 0.25),
                (2.0, 0.0),
                (31_536_000.0, 1.0),
                (31_536_001.0, 0.0)
            ]
        );
        assert_eq!(on("gpu 3 nic-out"), [(1.0, 0.125), (2.0, 0.0)]);
    }
}
