//! inflight-load-producer
//! (`requestcontrol/dataproducer/inflightload/producer.go`): the EPP's own
//! count, per endpoint, of the requests it sent and the prompt tokens they
//! still owe, which the load-aware consumers read instead of (or beside)
//! the scraped metrics.

use crate::plugins::Checks;

/// The counters per endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InFlightLoad {
    pub(crate) requests: Vec<u64>,
    pub(crate) tokens: Vec<u64>,
}

/// The in-flight load a request added to its endpoints, to be taken off
/// again at the first chunk and at the end of the stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) decode: Option<(usize, u64)>,
    pub(crate) prefill: Option<(usize, u64)>,
    /// The other profile is the one literally named `prefill`, whose entry
    /// the first chunk releases whole.
    pub(crate) prefill_named: bool,
}

impl InFlightLoad {
    pub fn new(endpoints: usize) -> InFlightLoad {
        InFlightLoad {
            requests: vec![0; endpoints],
            tokens: vec![0; endpoints],
        }
    }

    /// PreRequest: the target's load grows by one request and by the
    /// prompt tokens its index lacks; the ticket's entry for it.
    pub fn add(&mut self, endpoint: usize, tokens: u64) -> (usize, u64) {
        self.requests[endpoint] += 1;
        self.tokens[endpoint] += tokens;
        (endpoint, tokens)
    }

    fn release(&mut self, slot: Option<(usize, u64)>) {
        if let Some((e, tokens)) = slot {
            self.requests[e] = self.requests[e].saturating_sub(1);
            self.tokens[e] = self.tokens[e].saturating_sub(tokens);
        }
    }

    /// ResponseBody at the first chunk (`releaseTokensEarly`): with
    /// `addEstimatedOutputTokens` off (the only setting pdsim accepts) the
    /// tokens stood for the prompt, which every target has now computed, so
    /// each target's tokens are released; its request stays counted, except
    /// that the entry of the profile named `prefill` goes whole (`release`),
    /// its request included: the prefill worker has handed off.
    pub fn first_chunk(&mut self, ticket: &mut Ticket) {
        if ticket.prefill_named {
            let prefill = ticket.prefill.take();
            self.release(prefill);
        }
        for (e, tokens) in [ticket.decode.as_mut(), ticket.prefill.as_mut()]
            .into_iter()
            .flatten()
        {
            self.tokens[*e] = self.tokens[*e].saturating_sub(*tokens);
            *tokens = 0;
        }
    }

    /// ResponseBody at the end of the stream (the `PluginState.Delete`
    /// eviction): release what is left, once.
    pub fn end_of_stream(&mut self, ticket: &mut Ticket) {
        let (decode, prefill) = (ticket.decode.take(), ticket.prefill.take());
        self.release(decode);
        self.release(prefill);
    }
}

/// The producer's parameters pdsim does not honour are refused, never
/// ignored: estimated output tokens need an output-length estimator pdsim
/// does not model (`inflightload/producer.go`).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    let adds = parameters
        .get("addEstimatedOutputTokens")
        .and_then(serde_yaml::Value::as_bool)
        .unwrap_or(false);
    for key in [
        "addEstimatedOutputTokens",
        "outputRatio",
        "maxEstimatedOutputTokens",
    ] {
        if parameters.contains_key(key) && (adds || key != "addEstimatedOutputTokens") {
            c.not_simulated(
                key,
                format!("estimated output tokens (`{key}`) are not simulated; the in-flight load counts prompt tokens only"),
            );
        }
    }
}
