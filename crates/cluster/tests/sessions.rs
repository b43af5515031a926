//! Conversations replayed closed-loop (inference-sim's `SessionManager`,
//! `sim/workload/session.go`): a later turn is sent its think time after the
//! client has the previous turn's whole answer, its prompt repeats that
//! turn's prompt and answer so the engine's cached blocks of both are a
//! prefix hit, and a turn that fails or times out cancels the turns after
//! it. A turn the trace lists after a later arrival is read, and sent, late,
//! and counted as such.

use pdsim_cluster::{Cluster, MemorySink, Outcome, RequestRecord, RunStats, build, run};
use pdsim_core::prompt::content_id;
use pdsim_core::{Prompt, Segment, SimDuration, SimTime};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{RequestSpec, SessionTurn, TurnClient};

// One engine, so every turn of a conversation meets its own cached blocks.
const SCENARIO: &str = include_str!("../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/real-runs/llama-2-7b-tp1.yaml");

fn cluster() -> Cluster {
    let files = MemoryFiles::new()
        .with("s.yaml", SCENARIO)
        .with("d.yaml", DEPLOYMENT);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("builds")
}

fn run_all(specs: &[RequestSpec]) -> (RunStats, Vec<RequestRecord>) {
    let mut sink = MemorySink::default();
    let stats = run(
        &cluster(),
        &mut specs.iter().cloned().map(Ok),
        5,
        true,
        &mut sink,
    )
    .expect("runs");
    assert_eq!(stats.blocks_held_at_end, 0, "every block was freed");
    let mut records = sink.records;
    records.sort_by_key(|r| r.source_line);
    (stats, records)
}

const KEY: u64 = 77;

fn output_id(round: u32) -> u64 {
    content_id(KEY ^ round as u64, 0x7465_7374)
}

/// Turn `round` of conversation `KEY`: its prompt is `history` (the
/// segments before) and `new` tokens of its own; it answers `output`.
fn turn(
    round: u32,
    at_ms: u64,
    history: &[Segment],
    new: u32,
    output: u32,
    think_ms: u64,
) -> RequestSpec {
    let mut segments = history.to_vec();
    segments.push(Segment {
        id: content_id(1000 + round as u64, 0x006e_6577),
        tokens: new,
    });
    RequestSpec {
        arrival: SimTime::from_ms(at_ms),
        prompt: Prompt::new(segments),
        output_tokens: output,
        priority: 0,
        slo_class: 0,
        source_line: round as u64 + 1,
        deadline: None,
        session: Some(SessionTurn {
            key: KEY,
            round,
            think_time: SimDuration::from_ms(think_ms),
            client: TurnClient::Session,
        }),
        output_id: Some(output_id(round)),
    }
}

/// Two turns: 1000 prompt tokens answered with 100, then the history plus
/// 50 new tokens, sent 2 s after the answer. The trace logged the second
/// turn at 60 s, which closed-loop replay does not use.
fn conversation() -> Vec<RequestSpec> {
    let first = turn(0, 0, &[], 1000, 100, 0);
    let mut history = first.prompt.segments.clone();
    history.push(Segment {
        id: output_id(0),
        tokens: 100,
    });
    let second = turn(1, 60_000, &history, 50, 10, 2_000);
    vec![first, second]
}

#[test]
fn a_later_turn_is_sent_its_think_time_after_the_answer_and_hits_it() {
    let (stats, records) = run_all(&conversation());
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.outcome == Outcome::Completed));
    let (first, second) = (&records[0], &records[1]);
    assert_eq!(
        second.arrival,
        first.finished + SimDuration::from_ms(2_000),
        "sent 2 s after the first turn's answer, not at its logged 60 s"
    );
    // The engine cached the prompt and the answer's full 16-token blocks
    // (the answer's last token is never fed back, so 1099 tokens have KV):
    // the second turn hits all 68 of them.
    assert_eq!(second.cached_tokens, 1088, "{second:?}");
    assert_eq!(stats.session_turns_sent, 1);
    assert_eq!(stats.session_turns_not_sent, 0);
    assert_eq!(stats.session_turns_late, 0);
}

#[test]
fn without_the_answer_in_the_prompt_only_the_prompt_hits() {
    // The same turns, but the second prompt repeats only the first prompt:
    // its answer's blocks do not match, so the hit stops at the prompt's
    // last full block.
    let mut specs = conversation();
    specs[1].prompt.segments.remove(1);
    let (_, records) = run_all(&specs);
    assert_eq!(records[1].cached_tokens, 992, "{:?}", records[1]);
}

#[test]
fn a_timed_out_turn_cancels_the_turns_after_it() {
    let mut specs = conversation();
    // The client gives up on the first turn before its answer is done.
    specs[0].deadline = Some(SimTime::from_ms(300));
    let (stats, records) = run_all(&specs);
    assert_eq!(records.len(), 1, "the second turn is never sent");
    assert_eq!(records[0].outcome, Outcome::Aborted);
    assert_eq!(stats.session_turns_sent, 0);
    assert_eq!(stats.session_turns_not_sent, 1);
}

/// Inserts, before the conversation's second turn, a request of no
/// conversation arriving at 30 s (line 10, 200 tokens of its own), so the
/// second turn is read from the trace only then.
fn list_an_unrelated_request_at_30_s_before_the_second_turn(specs: &mut Vec<RequestSpec>) {
    let mut other = specs[0].clone();
    other.session = None;
    other.output_id = None;
    other.deadline = None;
    other.source_line = 10;
    other.arrival = SimTime::from_ms(30_000);
    other.prompt = Prompt::new(vec![Segment { id: 5, tokens: 200 }]);
    specs.insert(1, other);
}

#[test]
fn a_turn_read_after_its_conversation_was_cancelled_is_not_sent() {
    let mut specs = conversation();
    specs[0].deadline = Some(SimTime::from_ms(300));
    // A request of no conversation at 30 s, listed before the second turn:
    // the second turn is read only then, long after the first turn's
    // timeout cancelled the conversation.
    list_an_unrelated_request_at_30_s_before_the_second_turn(&mut specs);
    let (stats, records) = run_all(&specs);
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records.iter().all(|r| r.source_line != 2));
    assert_eq!(stats.session_turns_sent, 0);
    assert_eq!(stats.session_turns_not_sent, 1);
}

#[test]
fn a_turn_listed_after_a_later_arrival_is_sent_late_and_counted() {
    let mut specs = conversation();
    // A request of no conversation at 30 s, listed before the second turn:
    // the second turn is read only when it arrives, 28 s or so after its
    // due time.
    list_an_unrelated_request_at_30_s_before_the_second_turn(&mut specs);
    let (stats, records) = run_all(&specs);
    assert_eq!(records.len(), 3);
    let second = records.iter().find(|r| r.source_line == 2).unwrap();
    assert_eq!(second.arrival, SimTime::from_ms(30_000), "sent when read");
    assert_eq!(stats.session_turns_late, 1);
    let due = records[0].finished + SimDuration::from_ms(2_000);
    assert_eq!(
        stats.session_turn_max_late_ns,
        SimTime::from_ms(30_000).since(due).as_ns()
    );
}

#[test]
fn a_later_turn_without_its_first_turn_is_counted_as_not_sent() {
    let specs = vec![conversation().remove(1)];
    let (stats, records) = run_all(&specs);
    assert!(records.is_empty());
    assert_eq!(stats.session_turns_not_sent, 1);
}

// --- inference-perf's multi-turn client (`TurnClient::InferencePerf`) -----

/// A turn of inference-perf user session `KEY`: `own` is the turn's own text
/// (the first turn's is the system prompt and the question, a later one's
/// the question); the simulator sends it after the session's context. The
/// client's timeout is 300 s from the scheduled time, moved with the send.
fn ip_turn(round: u32, at_ms: u64, own: &[Segment], output: u32) -> RequestSpec {
    let arrival = SimTime::from_ms(at_ms);
    RequestSpec {
        arrival,
        prompt: Prompt::new(own.to_vec()),
        output_tokens: output,
        priority: 0,
        slo_class: 0,
        source_line: round as u64 + 1,
        deadline: Some(arrival + SimDuration::from_ms(300_000)),
        session: Some(SessionTurn {
            key: KEY,
            round,
            think_time: SimDuration::ZERO,
            client: TurnClient::InferencePerf,
        }),
        output_id: Some(output_id(round)),
    }
}

const SYSTEM: Segment = Segment {
    id: 11,
    tokens: 150,
};
const QUESTION: Segment = Segment {
    id: 12,
    tokens: 600,
};

/// Turn 1 is scheduled 100 ms after turn 0, long before turn 0's 100
/// tokens are generated: it waits on the session's lock and is sent the
/// moment turn 0 ends, with no think time, after the context turn 0 left
/// (its prompt and answer), whose cached blocks it hits.
#[test]
fn an_inference_perf_turn_waits_for_the_turn_before_it_and_carries_its_context() {
    let specs = vec![
        ip_turn(0, 0, &[SYSTEM, QUESTION], 100),
        ip_turn(1, 100, &[QUESTION], 10),
    ];
    let (stats, records) = run_all(&specs);
    assert!(records.iter().all(|r| r.outcome == Outcome::Completed));
    let (first, second) = (&records[0], &records[1]);
    assert!(first.finished > SimTime::from_ms(100), "{first:?}");
    assert_eq!(second.arrival, first.finished, "sent when turn 0 ends");
    assert_eq!(first.prompt_tokens, 750);
    assert_eq!(
        second.prompt_tokens,
        750 + 100 + 600,
        "context, then its question"
    );
    // Turn 0's prompt and the 99 answer tokens fed back have KV: 849
    // tokens, 53 whole 16-token blocks.
    assert_eq!(second.cached_tokens, 848, "{second:?}");
    assert_eq!(stats.session_turns_sent, 1);
}

/// A turn scheduled after the turn before it ended is sent at its own
/// time: inference-perf's worker sleeps until then, and the lock is free.
#[test]
fn an_inference_perf_turn_scheduled_after_the_previous_answer_is_sent_on_time() {
    let specs = vec![
        ip_turn(0, 0, &[SYSTEM, QUESTION], 100),
        ip_turn(1, 60_000, &[QUESTION], 10),
    ];
    let (_, records) = run_all(&specs);
    assert!(records[0].finished < SimTime::from_ms(60_000));
    assert_eq!(records[1].arrival, SimTime::from_ms(60_000));
    assert_eq!(records[1].prompt_tokens, 1450);
}

/// inference-perf's client goes on after a failed turn, with the context
/// from before it: turn 0 times out, turn 1 is sent when it does, with no
/// context at all, and turn 2 after turn 1's prompt and answer. The
/// timeout of a turn that waited counts from its send.
#[test]
fn after_a_failed_inference_perf_turn_the_session_goes_on_with_the_context_before_it() {
    let mut specs = vec![
        ip_turn(0, 0, &[SYSTEM, QUESTION], 100),
        ip_turn(1, 100, &[QUESTION], 10),
        ip_turn(2, 200, &[QUESTION], 10),
    ];
    // The client gives up on turn 0 after 300 ms, before its answer ends.
    specs[0].deadline = Some(SimTime::from_ms(300));
    // Turn 1's client would give up 250 ms after its scheduled 100 ms, but
    // it waits 200 ms for turn 0: counted from its send (300 ms), 250 ms
    // is enough for 600 tokens and 10 more.
    specs[1].deadline = Some(SimTime::from_ms(350));
    let (stats, records) = run_all(&specs);
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].outcome, Outcome::Aborted);
    assert_eq!(records[0].finished, SimTime::from_ms(300));
    assert_eq!(
        records[1].arrival,
        SimTime::from_ms(300),
        "sent when turn 0 gave up"
    );
    assert_eq!(records[1].outcome, Outcome::Completed, "{:?}", records[1]);
    assert!(records[1].finished > SimTime::from_ms(350));
    assert_eq!(records[1].prompt_tokens, 600, "turn 0 left no context");
    assert_eq!(records[2].arrival, records[1].finished);
    assert_eq!(records[2].prompt_tokens, 600 + 10 + 600);
    assert_eq!(records[2].outcome, Outcome::Completed);
    assert_eq!(stats.session_turns_sent, 2);
    assert_eq!(stats.session_turns_not_sent, 0);
}

/// A server's error response is an answer to inference-perf's client: it
/// makes the context the prompt it sent, with no answer text. Turn 0 is
/// longer than Llama-2's 4,096-token context, so vLLM refuses it; turn 1
/// carries it all the same, and is refused too.
#[test]
fn a_refused_inference_perf_turn_still_joins_the_context() {
    let long = Segment {
        id: 13,
        tokens: 5_000,
    };
    let specs = vec![
        ip_turn(0, 0, &[long], 100),
        ip_turn(1, 100, &[Segment { id: 14, tokens: 10 }], 10),
    ];
    let (stats, records) = run_all(&specs);
    assert_eq!(records[0].outcome, Outcome::Rejected);
    assert_eq!(records[1].outcome, Outcome::Rejected);
    assert_eq!(records[1].arrival, SimTime::from_ms(100));
    assert_eq!(records[1].prompt_tokens, 5_010, "{:?}", records[1]);
    assert_eq!(stats.session_turns_sent, 1);
}

/// A source that gives no content id for a turn's answer: the context
/// still holds the answer's tokens, under an id of the conversation's own
/// that matches nothing the engine cached, so only the prompt before it
/// hits (750 tokens, 46 whole blocks).
#[test]
fn an_inference_perf_answer_without_a_content_id_is_counted_but_not_shared() {
    let mut specs = vec![
        ip_turn(0, 0, &[SYSTEM, QUESTION], 100),
        ip_turn(1, 100, &[QUESTION], 10),
    ];
    for s in &mut specs {
        s.output_id = None;
    }
    let (_, records) = run_all(&specs);
    assert_eq!(records[1].prompt_tokens, 1450);
    assert_eq!(records[1].cached_tokens, 736, "{:?}", records[1]);
}
