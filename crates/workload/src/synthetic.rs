//! Synthetic requests from a catalog workload shape.
//!
//! A BLIS workload shape (`research/blis-documents.md` §4; the `Shape` of
//! `pdsim_spec::catalog`) gives the prompt and output lengths as a mean, a
//! standard deviation and optional bounds, plus a prefix length every
//! request shares (a system prompt). This generator turns a shape, a request
//! count and an arrival rate into the same [`RequestSpec`] stream a trace
//! reader yields, so everything downstream treats both alike.
//!
//! - Arrivals are a Poisson process started at time zero: gaps are
//!   exponential with mean `1 / rate`, drawn from
//!   `Stream::new(seed, Purpose::Arrivals, 0)` and rounded to whole
//!   nanoseconds, so the first request arrives after one gap. An arrival
//!   past [`pdsim_core::ARRIVAL_HORIZON`] (one year) is an error naming the
//!   rate, and the stream ends there.
//! - Lengths are drawn from `Stream::new(seed, Purpose::Lengths, 0)`, the
//!   prompt before the output for each request: a normal with the shape's
//!   mean and standard deviation, clipped to `[tokens_min, tokens_max]`
//!   (a bound of 0 is unset) and to at least 1, then rounded. Clipping moves
//!   the sample mean when the bounds are not symmetric about the mean, as it
//!   does in BLIS.
//! - `prefix_tokens` is counted inside the prompt length (BLIS refuses a
//!   shape whose prefix is longer than its mean prompt): every prompt starts
//!   with one segment of `prefix_tokens` tokens shared by all requests of
//!   the run, then a unique tail. A drawn prompt no longer than the prefix
//!   is lengthened to the prefix plus one token, so every request has
//!   something of its own to compute.
//!
//! Arrivals and lengths use separate streams (`DESIGN.md` decision 3), so
//! changing the rate never changes the lengths a seed gives, and the same
//! seed gives the same requests on every machine.

use crate::{
    MAX_TOKENS, RequestSource, RequestSpec, SYNTHETIC_PREFIX_SALT, SYNTHETIC_TAIL_SALT, TraceError,
};
use pdsim_core::prompt::{content_id, mix64};
use pdsim_core::{ARRIVAL_HORIZON, Prompt, Purpose, Segment, SimDuration, SimTime, Stream};
use pdsim_spec::catalog::{LengthDistribution, Shape};
use rand_distr::{Distribution, Exp, Normal};

/// A finite stream of requests drawn from a workload shape.
pub struct Synthetic {
    /// The shape's name and the rate, for the message about an arrival
    /// beyond the horizon.
    name: String,
    rate_per_s: f64,
    requests: u64,
    emitted: u64,
    now: SimTime,
    gap: Exp<f64>,
    prompt: Lengths,
    output: Lengths,
    prefix_id: u64,
    prefix_tokens: u64,
    tail_salt: u64,
    arrivals: Stream,
    lengths: Stream,
}

/// One length distribution, checked and ready to draw from.
struct Lengths {
    normal: Normal<f64>,
    mean: f64,
    low: f64,
    high: f64,
}

impl Lengths {
    fn new(name: &str, key: &str, d: &LengthDistribution) -> Result<Lengths, TraceError> {
        let error = |field: &str, message: String| {
            TraceError::new(name, 0, Some(&format!("{key}.{field}")), message)
        };
        if !d.tokens.is_finite() || d.tokens < 1.0 {
            return Err(error(
                "tokens",
                format!("the mean, {}, must be at least 1", d.tokens),
            ));
        }
        if !d.tokens_stdev.is_finite() || d.tokens_stdev < 0.0 {
            return Err(error(
                "tokens_stdev",
                format!("{} must be a finite number, not negative", d.tokens_stdev),
            ));
        }
        if d.tokens_min < 0 || d.tokens_min as u64 > MAX_TOKENS {
            return Err(error(
                "tokens_min",
                format!("{} must lie in [0, {MAX_TOKENS}]", d.tokens_min),
            ));
        }
        if d.tokens_max < 0 {
            return Err(error("tokens_max", format!("{} is negative", d.tokens_max)));
        }
        let low = d.tokens_min.max(1) as f64;
        let high = if d.tokens_max == 0 {
            MAX_TOKENS
        } else {
            (d.tokens_max as u64).min(MAX_TOKENS)
        };
        if (high as f64) < low {
            return Err(error(
                "tokens_max",
                format!("{} is below tokens_min, {}", d.tokens_max, d.tokens_min),
            ));
        }
        let normal = Normal::new(d.tokens, d.tokens_stdev)
            .map_err(|e| error("tokens_stdev", format!("no normal distribution: {e}")))?;
        Ok(Lengths {
            normal,
            mean: d.tokens,
            low,
            high: high as f64,
        })
    }

    fn draw(&self, stream: &mut Stream) -> u64 {
        let x = self.normal.sample(stream.rng());
        let x = if x.is_finite() { x } else { self.mean };
        x.clamp(self.low, self.high).round() as u64
    }
}

impl Synthetic {
    /// `requests` requests of `shape` arriving at `rate_per_s` requests per
    /// second on average, drawn under `seed`. `name` (the shape's name) is
    /// used in messages about the shape's parameters.
    pub fn new(
        name: &str,
        shape: &Shape,
        requests: u64,
        rate_per_s: f64,
        seed: u64,
    ) -> Result<Synthetic, TraceError> {
        if !rate_per_s.is_finite() || rate_per_s <= 0.0 {
            return Err(TraceError::new(
                name,
                0,
                Some("rate"),
                format!("{rate_per_s} requests per second must be a positive number"),
            ));
        }
        let gap = Exp::new(rate_per_s).map_err(|e| {
            TraceError::new(
                name,
                0,
                Some("rate"),
                format!("no exponential distribution: {e}"),
            )
        })?;
        if shape.prefix_tokens < 0 || shape.prefix_tokens as u64 >= MAX_TOKENS {
            return Err(TraceError::new(
                name,
                0,
                Some("prefix_tokens"),
                format!("{} must lie in [0, {MAX_TOKENS})", shape.prefix_tokens),
            ));
        }
        Ok(Synthetic {
            name: name.to_string(),
            rate_per_s,
            requests,
            emitted: 0,
            now: SimTime::ZERO,
            gap,
            prompt: Lengths::new(name, "prompt", &shape.prompt)?,
            output: Lengths::new(name, "output", &shape.output)?,
            prefix_id: content_id(seed, SYNTHETIC_PREFIX_SALT),
            prefix_tokens: shape.prefix_tokens as u64,
            tail_salt: SYNTHETIC_TAIL_SALT ^ mix64(seed),
            arrivals: Stream::new(seed, Purpose::Arrivals, 0),
            lengths: Stream::new(seed, Purpose::Lengths, 0),
        })
    }
}

/// A rate for messages: plain when it reads well that way, else in
/// scientific notation (`1e-300`, not three hundred zeros).
fn rate_text(rate: f64) -> String {
    if (1e-3..1e6).contains(&rate) {
        format!("{rate}")
    } else {
        format!("{rate:e}")
    }
}

impl Iterator for Synthetic {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.emitted == self.requests {
            return None;
        }
        let index = self.emitted;
        self.emitted += 1;
        let gap_s = self.gap.sample(self.arrivals.rng());
        // A gap too long for nanoseconds, or an arrival past the horizon,
        // means the rate is too low for the run to be simulated: an input
        // error, after which the stream ends.
        let at = SimDuration::checked_from_secs_f64(gap_s)
            .and_then(|gap| self.now.checked_add(gap))
            .filter(|at| *at <= ARRIVAL_HORIZON);
        let Some(at) = at else {
            self.emitted = self.requests;
            let after_s = self.now.as_ns() as f64 / 1e9 + gap_s;
            return Some(Err(TraceError::new(
                &self.name,
                0,
                Some("rate"),
                format!(
                    "request {} would arrive {after_s:.3e} s after the start, beyond the one \
                     year ({} s) of simulated time pdsim replays: {} requests per second is \
                     too low a rate for {} requests",
                    index + 1,
                    ARRIVAL_HORIZON.as_ns() / 1_000_000_000,
                    rate_text(self.rate_per_s),
                    self.requests
                ),
            )));
        };
        self.now = at;
        let prompt = self
            .prompt
            .draw(&mut self.lengths)
            .max(self.prefix_tokens + 1);
        let output = self.output.draw(&mut self.lengths);
        let segments = vec![
            Segment {
                id: self.prefix_id,
                tokens: self.prefix_tokens as u32,
            },
            Segment {
                id: content_id(index, self.tail_salt),
                tokens: (prompt - self.prefix_tokens) as u32,
            },
        ];
        Some(Ok(RequestSpec {
            arrival: self.now,
            prompt: Prompt::new(segments),
            output_tokens: output as u32,
            priority: 0,
            slo_class: 0,
            source_line: index + 1,
            deadline: None,
            session: None,
            output_id: None,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.requests - self.emitted).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl RequestSource for Synthetic {}

#[cfg(test)]
mod tests {
    use super::Synthetic;
    use crate::RequestSpec;
    use pdsim_spec::catalog::{LengthDistribution, Shape};

    fn dist(tokens: f64, stdev: f64, min: i64, max: i64) -> LengthDistribution {
        LengthDistribution {
            tokens,
            tokens_stdev: stdev,
            tokens_min: min,
            tokens_max: max,
        }
    }

    fn shape() -> Shape {
        Shape {
            prefix_tokens: 200,
            prompt: dist(1000.0, 300.0, 0, 0),
            output: dist(250.0, 80.0, 1, 500),
        }
    }

    fn run(seed: u64) -> Vec<RequestSpec> {
        Synthetic::new("chat", &shape(), 20_000, 10.0, seed)
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn its_size_hint_is_the_requests_left() {
        let mut s = Synthetic::new("chat", &shape(), 3, 10.0, 7).unwrap();
        assert_eq!(s.size_hint(), (3, Some(3)));
        s.next().unwrap().unwrap();
        assert_eq!(s.size_hint(), (2, Some(2)));
        s.by_ref().for_each(|r| {
            r.unwrap();
        });
        assert_eq!(s.size_hint(), (0, Some(0)));
    }

    #[test]
    fn the_same_seed_gives_the_same_requests() {
        let a: Vec<RequestSpec> = Synthetic::new("chat", &shape(), 50, 10.0, 7)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let b: Vec<RequestSpec> = Synthetic::new("chat", &shape(), 50, 10.0, 7)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let c: Vec<RequestSpec> = Synthetic::new("chat", &shape(), 50, 10.0, 8)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Lengths do not depend on the rate: separate streams.
        let d: Vec<RequestSpec> = Synthetic::new("chat", &shape(), 50, 99.0, 7)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            a.iter()
                .zip(&d)
                .all(|(x, y)| x.prompt.tokens() == y.prompt.tokens())
        );
        assert_ne!(a[0].arrival, d[0].arrival);
    }

    #[test]
    fn sample_means_are_near_the_shape() {
        let all = run(42);
        let n = all.len() as f64;
        let prompt = all.iter().map(|r| r.prompt.tokens() as f64).sum::<f64>() / n;
        let output = all.iter().map(|r| r.output_tokens as f64).sum::<f64>() / n;
        // Standard errors are 300/√20000 ≈ 2.1 and 80/√20000 ≈ 0.6 tokens.
        assert!((prompt - 1000.0).abs() < 12.0, "{prompt}");
        assert!((output - 250.0).abs() < 4.0, "{output}");
        assert!(all.iter().all(|r| (1..=500).contains(&r.output_tokens)));
        let span = all.last().unwrap().arrival.as_ns() as f64 / 1e9;
        // 20,000 arrivals at 10/s: 2,000 s, standard deviation √20000/10 ≈ 14 s.
        assert!((span - 2000.0).abs() < 70.0, "{span}");
        assert!(all.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert_eq!(all[0].source_line, 1);
    }

    #[test]
    fn every_prompt_shares_the_prefix_and_has_its_own_tail() {
        let all = run(3);
        let prefix = all[0].prompt.segments[0];
        assert_eq!(prefix.tokens, 200);
        assert!(all.iter().all(|r| r.prompt.segments[0] == prefix));
        assert!(
            all.iter()
                .all(|r| r.prompt.segments.len() == 2 && r.prompt.segments[1].tokens >= 1)
        );
        assert_ne!(all[0].prompt.segments[1].id, all[1].prompt.segments[1].id);
    }

    #[test]
    fn bad_parameters_are_errors_naming_the_key() {
        let cases: Vec<(Shape, f64, &str)> = vec![
            (shape(), 0.0, "rate"),
            (shape(), f64::NAN, "rate"),
            (
                Shape {
                    prefix_tokens: -1,
                    ..shape()
                },
                1.0,
                "prefix_tokens",
            ),
            (
                Shape {
                    prompt: dist(0.5, 1.0, 0, 0),
                    ..shape()
                },
                1.0,
                "prompt.tokens",
            ),
            (
                Shape {
                    prompt: dist(10.0, -1.0, 0, 0),
                    ..shape()
                },
                1.0,
                "prompt.tokens_stdev",
            ),
            (
                Shape {
                    output: dist(10.0, 1.0, 20, 5),
                    ..shape()
                },
                1.0,
                "output.tokens_max",
            ),
            (
                Shape {
                    output: dist(10.0, 1.0, -2, 5),
                    ..shape()
                },
                1.0,
                "output.tokens_min",
            ),
        ];
        for (s, rate, key) in cases {
            let e = Synthetic::new("chat", &s, 3, rate, 1).err().expect(key);
            assert_eq!(
                (e.file.as_str(), e.line, e.column.as_deref()),
                ("chat", 0, Some(key)),
                "{e}"
            );
        }
    }

    #[test]
    fn zero_stdev_gives_constant_lengths() {
        let s = Shape {
            prefix_tokens: 0,
            prompt: dist(64.0, 0.0, 0, 0),
            output: dist(8.0, 0.0, 0, 0),
        };
        let all: Vec<RequestSpec> = Synthetic::new("c", &s, 10, 1.0, 1)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(
            all.iter()
                .all(|r| r.prompt.tokens() == 64 && r.output_tokens == 8)
        );
        assert!(all.iter().all(|r| r.prompt.segments.len() == 1));
    }

    #[test]
    fn synthetic_requests_are_all_of_the_one_unnamed_class() {
        use crate::RequestSource;
        let source = Synthetic::new("chat", &shape(), 10, 10.0, 1).unwrap();
        assert_eq!(source.slo_classes(), &[String::new()][..]);
        assert!(source.map(Result::unwrap).all(|r| r.slo_class == 0));
    }
}
