//! Several offload tiers behind vLLM's OffloadingConnector
//! (`TieringOffloadingSpec`): the host-memory tier of [`crate::offload`] as
//! the primary tier, and filesystem tiers (NVMe) behind it.
//!
//! Mirrors `vllm/v1/kv_offload/tiering/manager.py`
//! (`TieringOffloadingManager`), `tiering/fs/manager.py`
//! (`FileSystemTierManager`) and `tiering/async_lookup.py`
//! (`AsyncLookupManager`) of vLLM 0.31.0 (checked call by call against
//! them by `tests/tiering_oracle.rs`; 0.29.0's lookup manager has no probe
//! generations and is refused by the cluster's build):
//!
//! * **Every chunk goes to every tier.** When a chunk's store into the
//!   primary tier completes (`complete_store`), it is cascaded to each
//!   secondary tier: the primary pins it for reading (`prepare_read`, not
//!   a use of the request) until the tier's write job ends. No
//!   back-pressure detector is configured unless the spec asks for one
//!   (`SecondaryTierFactory.create_secondary_tier`), so no cascade is
//!   dropped.
//! * **The primary is the gateway.** A lookup asks the primary first
//!   (`HIT`, or `HIT_PENDING` while a chunk is being written); on a miss
//!   it asks the secondary tiers in order. A filesystem tier answers from
//!   its asynchronous lookup cache: a key it has never probed is queued,
//!   the queue is posted once per step (`flush` at `on_schedule_end`) to a
//!   worker that checks the files, and the verdicts are applied at the
//!   first lookup after the next flush; until then the answer is `RETRY`.
//!   A verdict stays cached while any request that asked for it lives. A
//!   hit in a secondary tier starts a promotion: room for the chunk is
//!   made in the primary at once (`prepare_write`, evicting as a store
//!   does; if it cannot, the lookup is a `MISS`), the chunk answers
//!   `HIT_PENDING`, and the step's promotions are submitted as one read
//!   job per (tier, request) at the step's end. When the job ends the
//!   chunk is ready (`complete_write`) and a later lookup finds it.
//! * **Completions are polled**, at most once a step: at the first lookup
//!   or store of the step, or at its end (`_maybe_process_finished_jobs`).
//!   A finished cascade unpins its chunks; a finished promotion makes its
//!   chunks ready.
//! * **A filesystem tier never evicts.** `FileSystemTierManager` writes one
//!   file per chunk and deletes none; pdsim gives the tier the bytes the
//!   deployment names and a write that would exceed them fails, as a full
//!   filesystem fails it (`ENOSPC` from `batch_store_block`): the file is
//!   not there and the chunk is not in the tier.
//!
//! The engine only decides; the event loop times the jobs (the device's
//! bandwidth and latency) and reports their ends through
//! [`Tiering::io_done`] and [`Tiering::lookup_done`].

use std::collections::VecDeque;

use pdsim_core::RequestId;
use pdsim_core::kv_events::KvEventBatch;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::offload::{Lookup, OffloadManager, RequestState};

/// What the tiering manager's lookup of one chunk answers (`LookupResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierLookup {
    Miss,
    /// Ready in the primary tier.
    Hit,
    /// Held, but being written into the primary tier.
    Pending,
    /// A secondary tier has not answered yet.
    Retry,
}

/// Work the engine hands to the event loop to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierIo {
    /// Copy `chunks` chunks from the primary into secondary tier `tier`.
    Write { tier: u8, job: u64, chunks: u32 },
    /// Copy `chunks` chunks from secondary tier `tier` into the primary.
    Read { tier: u8, job: u64, chunks: u32 },
    /// Probe secondary tier `tier` for `keys` keys.
    Lookup { tier: u8, batch: u64, keys: u32 },
}

/// Counters of one secondary tier, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Chunks written into the tier.
    pub written: u64,
    /// Chunk writes that failed because the tier was full.
    pub failed_writes: u64,
    /// Chunks promoted from the tier into the primary.
    pub promoted: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Queued for the next flush.
    Pending,
    /// Posted to the worker.
    InFlight,
    Resolved,
}

/// One key's probe (`LookupState`).
#[derive(Clone, Debug)]
struct Probe {
    generation: u64,
    phase: Phase,
    result: Option<bool>,
    /// The requests that asked for it.
    requests: Vec<RequestId>,
}

/// A filesystem tier (`FileSystemTierManager` with its
/// `FsAsyncLookupManager`).
#[derive(Clone, Debug)]
pub struct FsTier {
    /// Chunks the tier's bytes hold.
    capacity: u64,
    /// Chunks whose file is complete.
    files: FxHashSet<u64>,
    probes: FxHashMap<u64, Probe>,
    /// Keys each live request asked for, in the order asked.
    req_keys: FxHashMap<RequestId, Vec<u64>>,
    /// Keys queued for the next flush, with their probe's generation.
    batch: Vec<(u64, u64)>,
    /// Batches posted and not answered, by batch number.
    posted: VecDeque<(u64, Vec<(u64, u64)>)>,
    /// Answers not applied yet.
    answers: Vec<(u64, u64, bool)>,
    need_drain: bool,
    next_generation: u64,
    next_batch: u64,
    pub stats: TierStats,
}

impl FsTier {
    pub fn new(capacity: u64) -> FsTier {
        FsTier {
            capacity,
            files: FxHashSet::default(),
            probes: FxHashMap::default(),
            req_keys: FxHashMap::default(),
            batch: Vec::new(),
            posted: VecDeque::new(),
            answers: Vec::new(),
            need_drain: false,
            next_generation: 0,
            next_batch: 0,
            stats: TierStats::default(),
        }
    }

    /// Chunks held.
    fn len(&self) -> u64 {
        self.files.len() as u64
    }

    /// The chunks held, in key order (for tests and reports).
    pub fn keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.files.iter().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// `AsyncLookupManager.lookup`: the cached verdict, `None` until the
    /// worker has answered.
    fn lookup(&mut self, key: u64, req: RequestId) -> Option<bool> {
        if self.need_drain {
            self.drain();
            self.need_drain = false;
        }
        let probe = self.probes.entry(key).or_insert_with(|| {
            let generation = self.next_generation;
            self.next_generation += 1;
            self.batch.push((key, generation));
            Probe {
                generation,
                phase: Phase::Pending,
                result: None,
                requests: Vec::new(),
            }
        });
        if !probe.requests.contains(&req) {
            probe.requests.push(req);
            self.req_keys.entry(req).or_default().push(key);
        }
        probe.result
    }

    /// `AsyncLookupManager.drain_results`.
    fn drain(&mut self) {
        for (key, generation, found) in std::mem::take(&mut self.answers) {
            let Some(probe) = self.probes.get_mut(&key) else {
                continue;
            };
            if probe.generation != generation {
                continue;
            }
            if probe.requests.is_empty() {
                self.probes.remove(&key);
                continue;
            }
            probe.result = Some(found);
            probe.phase = Phase::Resolved;
        }
    }

    /// `AsyncLookupManager.flush`: posts the queued keys; returns the
    /// batch number and size if any were posted.
    fn flush(&mut self) -> Option<(u64, u32)> {
        self.drain();
        self.need_drain = true;
        let mut posted = Vec::new();
        for (key, generation) in std::mem::take(&mut self.batch) {
            if let Some(probe) = self.probes.get_mut(&key)
                && probe.generation == generation
            {
                probe.phase = Phase::InFlight;
                posted.push((key, generation));
            }
        }
        if posted.is_empty() {
            return None;
        }
        let batch = self.next_batch;
        self.next_batch += 1;
        let n = posted.len() as u32;
        self.posted.push_back((batch, posted));
        Some((batch, n))
    }

    /// The worker checked batch `batch`: each key is found if its file is
    /// complete now.
    fn answer(&mut self, batch: u64) {
        let Some(at) = self.posted.iter().position(|(b, _)| *b == batch) else {
            return;
        };
        let (_, keys) = self.posted.remove(at).expect("position found");
        for (key, generation) in keys {
            self.answers
                .push((key, generation, self.files.contains(&key)));
        }
    }

    /// `AsyncLookupManager.cleanup`: the request's references go; a probe
    /// nobody asks for any more is forgotten unless it is in flight.
    fn cleanup(&mut self, req: RequestId) {
        for key in self.req_keys.remove(&req).unwrap_or_default() {
            let Some(probe) = self.probes.get_mut(&key) else {
                continue;
            };
            probe.requests.retain(|&r| r != req);
            if probe.requests.is_empty() && probe.phase != Phase::InFlight {
                self.probes.remove(&key);
            }
        }
    }

    /// A write job's files are complete: each chunk is in the tier, unless
    /// the tier is full.
    fn written(&mut self, keys: &[u64]) {
        for &key in keys {
            if self.files.contains(&key) {
                continue;
            }
            if self.len() >= self.capacity {
                self.stats.failed_writes += 1;
            } else {
                self.files.insert(key);
                self.stats.written += 1;
            }
        }
    }
}

/// A transfer between the primary and a secondary tier (`TransferJob`).
#[derive(Clone, Debug)]
struct Job {
    tier: u8,
    keys: Vec<u64>,
    promotion: bool,
}

/// The secondary tiers of one engine and the jobs between them and the
/// primary (`TieringOffloadingManager`, less the primary it drives: the
/// engine keeps that as its [`OffloadManager`]).
#[derive(Clone, Debug)]
pub struct Tiering {
    pub tiers: Vec<FsTier>,
    jobs: FxHashMap<u64, Job>,
    /// Jobs ended and not processed yet, in the order they ended.
    finished: Vec<u64>,
    /// Promotions started this step, by (tier, request), in the order
    /// first started (`_pending_load_submissions`).
    promotions: Vec<(u8, RequestId, Vec<u64>)>,
    /// Completions were processed this step (`_processed_jobs_this_step`).
    polled: bool,
    next_job: u64,
    /// Work for the event loop to time.
    io: Vec<TierIo>,
}

impl Tiering {
    /// Secondary tiers holding `capacities` chunks each, in order.
    pub fn new(capacities: &[u64]) -> Tiering {
        Tiering {
            tiers: capacities.iter().map(|&c| FsTier::new(c)).collect(),
            jobs: FxHashMap::default(),
            finished: Vec::new(),
            promotions: Vec::new(),
            polled: false,
            next_job: 0,
            io: Vec::new(),
        }
    }

    /// Jobs submitted and lookups posted since the caller last took them.
    pub fn take_io(&mut self, into: &mut Vec<TierIo>) {
        into.append(&mut self.io);
    }

    /// `_maybe_process_finished_jobs`: at most once a step.
    pub fn poll(&mut self, primary: &mut OffloadManager, mut log: Option<&mut KvEventBatch>) {
        if self.polled {
            return;
        }
        self.polled = true;
        // Tier by tier, each tier's jobs in the order they ended
        // (`get_finished_jobs` per tier in `_process_finished_jobs`).
        let finished = std::mem::take(&mut self.finished);
        for tier in 0..self.tiers.len() as u8 {
            for job_id in &finished {
                let Some(job) = self.jobs.get(job_id) else {
                    continue;
                };
                if job.tier != tier {
                    continue;
                }
                let job = self.jobs.remove(job_id).expect("job found");
                if job.promotion {
                    for &key in &job.keys {
                        primary.complete_write(key, log.as_deref_mut());
                    }
                } else {
                    primary.unpin_reads(&job.keys);
                }
            }
        }
    }

    /// `TieringOffloadingManager.lookup` of chunk `chunk` (key `key`) for
    /// request `req`.
    pub fn lookup(
        &mut self,
        primary: &mut OffloadManager,
        key: u64,
        chunk: u32,
        req: RequestId,
        state: &mut RequestState,
        mut log: Option<&mut KvEventBatch>,
    ) -> TierLookup {
        self.poll(primary, log.as_deref_mut());
        match primary.lookup(key) {
            Lookup::Hit => return TierLookup::Hit,
            Lookup::Pending => return TierLookup::Pending,
            Lookup::Miss => {}
        }
        let mut retry = false;
        for (i, tier) in self.tiers.iter_mut().enumerate() {
            match tier.lookup(key, req) {
                Some(true) => {
                    // `_initiate_promotion`: room in the primary now, the
                    // read job at the step's end.
                    if !primary.prepare_write(chunk, key, state, log.as_deref_mut()) {
                        return TierLookup::Miss;
                    }
                    tier.stats.promoted += 1;
                    let i = i as u8;
                    match self
                        .promotions
                        .iter_mut()
                        .find(|(t, r, _)| *t == i && *r == req)
                    {
                        Some((_, _, keys)) => keys.push(key),
                        None => self.promotions.push((i, req, vec![key])),
                    }
                    return TierLookup::Pending;
                }
                None => retry = true,
                Some(false) => {}
            }
        }
        if retry {
            TierLookup::Retry
        } else {
            TierLookup::Miss
        }
    }

    /// `complete_store` of the primary's new chunks `keys`: each secondary
    /// tier gets a write job, the chunks pinned until it ends.
    pub fn cascade(&mut self, primary: &mut OffloadManager, keys: &[u64]) {
        if keys.is_empty() {
            return;
        }
        for tier in 0..self.tiers.len() as u8 {
            primary.pin_reads(keys);
            let job = self.next_job;
            self.next_job += 1;
            self.jobs.insert(
                job,
                Job {
                    tier,
                    keys: keys.to_vec(),
                    promotion: false,
                },
            );
            self.io.push(TierIo::Write {
                tier,
                job,
                chunks: keys.len() as u32,
            });
        }
    }

    /// `on_schedule_end`: process completions, submit the step's
    /// promotions, and post each tier's queued lookups.
    pub fn schedule_end(&mut self, primary: &mut OffloadManager, log: Option<&mut KvEventBatch>) {
        self.poll(primary, log);
        self.polled = false;
        // One job per (tier, request): tiers in the order their first
        // promotion came, each tier's requests in theirs (the nested
        // dicts of `_pending_load_submissions`).
        let mut promotions = std::mem::take(&mut self.promotions);
        let mut tier_order: Vec<u8> = Vec::new();
        for (tier, _, _) in &promotions {
            if !tier_order.contains(tier) {
                tier_order.push(*tier);
            }
        }
        promotions.sort_by_key(|(tier, _, _)| tier_order.iter().position(|t| t == tier));
        for (tier, _, keys) in promotions {
            let job = self.next_job;
            self.next_job += 1;
            self.io.push(TierIo::Read {
                tier,
                job,
                chunks: keys.len() as u32,
            });
            self.jobs.insert(
                job,
                Job {
                    tier,
                    keys,
                    promotion: true,
                },
            );
        }
        for (i, tier) in self.tiers.iter_mut().enumerate() {
            if let Some((batch, keys)) = tier.flush() {
                self.io.push(TierIo::Lookup {
                    tier: i as u8,
                    batch,
                    keys,
                });
            }
        }
    }

    /// Job `job` ended: a write's files are complete now; either is
    /// processed at the next poll.
    pub fn io_done(&mut self, job: u64) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        if !j.promotion {
            let (tier, keys) = (j.tier as usize, j.keys.clone());
            self.tiers[tier].written(&keys);
        }
        self.finished.push(job);
    }

    /// Tier `tier`'s worker answered lookup batch `batch`.
    pub fn lookup_done(&mut self, tier: u8, batch: u64) {
        if let Some(t) = self.tiers.get_mut(tier as usize) {
            t.answer(batch);
        }
    }

    /// The request ended (`_maybe_finalize_request` → each tier's
    /// `on_request_finished`): its lookup references go.
    pub fn request_finished(&mut self, req: RequestId) {
        for tier in &mut self.tiers {
            tier.cleanup(req);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TierIo, TierLookup, Tiering};
    use crate::offload::{EvictionPolicy, OffloadConfig, OffloadManager, Release, RequestState};
    use pdsim_core::RequestId;

    fn primary(chunks: u64) -> OffloadManager {
        OffloadManager::new(OffloadConfig {
            chunks,
            policy: EvictionPolicy::Lru,
            release: Release::V0_31_0,
        })
    }

    fn store(p: &mut OffloadManager, t: &mut Tiering, keys: &[u64]) -> Vec<u64> {
        let offer: Vec<(u32, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (i as u32, k))
            .collect();
        let mut req = RequestState::default();
        let inserted = p
            .store_keys(&offer, &mut req, keys.iter().copied(), None)
            .expect("stored")
            .to_vec();
        p.cascade_inserted(t);
        inserted
    }

    fn io(t: &mut Tiering) -> Vec<TierIo> {
        let mut v = Vec::new();
        t.take_io(&mut v);
        v
    }

    /// A stored chunk is written to the secondary tier and pinned in the
    /// primary until the write ends; the file exists from then on.
    #[test]
    fn a_cascade_pins_the_chunk_until_its_write_ends() {
        let (mut p, mut t) = (primary(1), Tiering::new(&[10]));
        store(&mut p, &mut t, &[7]);
        assert_eq!(
            io(&mut t),
            vec![TierIo::Write {
                tier: 0,
                job: 0,
                chunks: 1
            }]
        );
        // The primary is full and its only chunk pinned: a new store fails.
        let mut r = RequestState::default();
        assert!(
            p.store_keys(&[(0, 8)], &mut r, [8].into_iter(), None)
                .is_none()
        );
        t.io_done(0);
        assert_eq!(
            t.tiers[0].len(),
            1,
            "the file is complete at the write's end"
        );
        t.schedule_end(&mut p, None);
        assert!(
            p.store_keys(&[(0, 8)], &mut r, [8].into_iter(), None)
                .is_some()
        );
        assert!(!p.contains(7), "unpinned by the poll, then evicted");
    }

    /// A key in the secondary tier only: RETRY until the worker answers
    /// after a flush, then a promotion (HIT_PENDING) whose read job is
    /// submitted at the step's end, then HIT once the read has ended and
    /// been polled.
    #[test]
    fn a_secondary_hit_is_promoted_through_retry_and_pending() {
        let (mut p, mut t) = (primary(4), Tiering::new(&[10]));
        t.tiers[0].written(&[5]);
        let (req, mut st) = (RequestId(1), RequestState::default());
        assert_eq!(
            t.lookup(&mut p, 5, 0, req, &mut st, None),
            TierLookup::Retry
        );
        assert_eq!(
            t.lookup(&mut p, 5, 0, req, &mut st, None),
            TierLookup::Retry
        );
        t.schedule_end(&mut p, None);
        assert_eq!(
            io(&mut t),
            vec![TierIo::Lookup {
                tier: 0,
                batch: 0,
                keys: 1
            }]
        );
        // Not answered yet: still RETRY in the next step.
        assert_eq!(
            t.lookup(&mut p, 5, 0, req, &mut st, None),
            TierLookup::Retry
        );
        t.schedule_end(&mut p, None);
        assert!(io(&mut t).is_empty(), "a key in flight is not posted again");
        t.lookup_done(0, 0);
        // Answers are applied at the first lookup after the next flush.
        t.schedule_end(&mut p, None);
        assert_eq!(
            t.lookup(&mut p, 5, 0, req, &mut st, None),
            TierLookup::Pending
        );
        assert_eq!(p.lookup(5), crate::offload::Lookup::Pending);
        t.schedule_end(&mut p, None);
        assert_eq!(
            io(&mut t),
            vec![TierIo::Read {
                tier: 0,
                job: 0,
                chunks: 1
            }]
        );
        assert_eq!(
            t.lookup(&mut p, 5, 0, req, &mut st, None),
            TierLookup::Pending
        );
        t.schedule_end(&mut p, None);
        t.io_done(0);
        assert_eq!(t.lookup(&mut p, 5, 0, req, &mut st, None), TierLookup::Hit);
        assert_eq!(t.tiers[0].stats.promoted, 1);
    }

    /// A key in no tier is a MISS once the worker has said so; the verdict
    /// is cached while a request that asked lives, and forgotten after.
    #[test]
    fn a_miss_is_cached_while_its_requests_live() {
        let (mut p, mut t) = (primary(4), Tiering::new(&[10]));
        let (a, mut st) = (RequestId(1), RequestState::default());
        assert_eq!(t.lookup(&mut p, 9, 0, a, &mut st, None), TierLookup::Retry);
        t.schedule_end(&mut p, None);
        t.lookup_done(0, 0);
        t.schedule_end(&mut p, None);
        assert_eq!(t.lookup(&mut p, 9, 0, a, &mut st, None), TierLookup::Miss);
        // Written now, but the cached verdict stands while `a` lives.
        t.tiers[0].written(&[9]);
        assert_eq!(t.lookup(&mut p, 9, 0, a, &mut st, None), TierLookup::Miss);
        t.request_finished(a);
        assert_eq!(
            t.lookup(&mut p, 9, 0, RequestId(2), &mut st, None),
            TierLookup::Retry,
            "probed afresh"
        );
    }

    /// Promotions are submitted one job per (tier, request), the tiers in
    /// the order their first promotion came and each tier's requests in
    /// theirs, as `_pending_load_submissions` (a dict of dicts) iterates.
    #[test]
    fn promotions_are_submitted_tier_by_tier_in_first_come_order() {
        let (mut p, mut t) = (primary(8), Tiering::new(&[10, 10]));
        t.tiers[1].written(&[1, 3]);
        t.tiers[0].written(&[2]);
        let mut st = RequestState::default();
        let asks = [(RequestId(1), 1), (RequestId(2), 2), (RequestId(3), 3)];
        for (req, key) in asks {
            assert_eq!(
                t.lookup(&mut p, key, 0, req, &mut st, None),
                TierLookup::Retry
            );
        }
        t.schedule_end(&mut p, None);
        t.lookup_done(0, 0);
        t.lookup_done(1, 0);
        t.schedule_end(&mut p, None);
        io(&mut t);
        for (req, key) in asks {
            assert_eq!(
                t.lookup(&mut p, key, 0, req, &mut st, None),
                TierLookup::Pending
            );
        }
        t.schedule_end(&mut p, None);
        let reads: Vec<TierIo> = io(&mut t)
            .into_iter()
            .filter(|i| matches!(i, TierIo::Read { .. }))
            .collect();
        assert_eq!(
            reads,
            vec![
                TierIo::Read {
                    tier: 1,
                    job: 0,
                    chunks: 1
                },
                TierIo::Read {
                    tier: 1,
                    job: 1,
                    chunks: 1
                },
                TierIo::Read {
                    tier: 0,
                    job: 2,
                    chunks: 1
                },
            ]
        );
    }

    /// A full tier refuses writes (a full filesystem), evicting nothing.
    #[test]
    fn a_full_tier_fails_writes_and_keeps_what_it_has() {
        let (mut p, mut t) = (primary(8), Tiering::new(&[2]));
        store(&mut p, &mut t, &[1, 2, 3]);
        t.io_done(0);
        assert_eq!(t.tiers[0].len(), 2);
        assert_eq!(
            (t.tiers[0].stats.written, t.tiers[0].stats.failed_writes),
            (2, 1)
        );
    }

    /// No room in the primary for a promotion (every chunk pinned): the
    /// secondary hit counts as a MISS.
    #[test]
    fn a_promotion_without_room_is_a_miss() {
        let (mut p, mut t) = (primary(1), Tiering::new(&[10]));
        store(&mut p, &mut t, &[1]);
        t.tiers[0].written(&[2]);
        let (req, mut st) = (RequestId(1), RequestState::default());
        assert_eq!(
            t.lookup(&mut p, 2, 0, req, &mut st, None),
            TierLookup::Retry
        );
        t.schedule_end(&mut p, None);
        t.lookup_done(0, 1);
        t.lookup_done(0, 0);
        t.schedule_end(&mut p, None);
        assert_eq!(t.lookup(&mut p, 2, 0, req, &mut st, None), TierLookup::Miss);
    }
}
