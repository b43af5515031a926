//! burst-prefix-cache-producer (`requestcontrol/dataproducer/burstprefix/
//! {plugin,assign,types}.go`): requests arriving within a window are held
//! and then placed jointly, so that requests sharing a prompt land on the
//! same replica and the shared prefix is prefilled once. Each request then
//! carries a `PrefixCacheMatchInfo` with a full match on its assigned
//! replica and none elsewhere, which a prefix-cache-scorer naming this
//! producer reads.
//!
//! How pdsim runs it, and why:
//!
//! - The window opens with the first request of a batch and seals
//!   `windowDurationMs` later (`Produce` starts a `time.AfterFunc` when it
//!   finds no batch); a request arriving after the seal starts the next
//!   batch. The event loop holds each member until the seal.
//! - The EPP snapshots the endpoints' scraped metrics before the producers
//!   run (`director.go`, `toSchedulerEndpoints` clones them), so a member
//!   is scheduled on the metrics of its arrival, which a [`BurstMember`]
//!   keeps. In-flight counters are dynamic attributes, read when scheduled.
//! - The EPP orders producers that do not depend on each other by a
//!   topological sort over Go maps (`datalayer/data_graph.go`,
//!   `util.TopologicalSort`), so their order is random per EPP start.
//!   pdsim fixes one of the EPP's orders: this producer first among the
//!   stateful producers, so the approx and precise producers and the
//!   in-flight producer run when the batch seals, on their state then.
//! - A request that finds the batch full (`maxBatchSize`) gets an error
//!   from `Produce`; the director then skips the producers after it and
//!   schedules the request at once without their data
//!   (`runDataProducerPlugins` returns the first error; the request is not
//!   failed).

use super::prefixhash::block_hashes;
use crate::config::Plugin;
use crate::cycle::EndpointView;
use crate::plugins::{Checks, param_f64};
use pdsim_core::Prompt;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// `defaultWindowDurationMs`, `maxWindowDurationMs` (`types.go`).
const DEFAULT_WINDOW_MS: i64 = 100;
const MAX_WINDOW_MS: i64 = 10_000;
/// `defaultBlockSizeTokens`, `defaultMaxPrefixBlocks`,
/// `defaultMaxBatchSize` (`types.go`).
const DEFAULT_BLOCK_SIZE_TOKENS: i64 = 64;
const DEFAULT_MAX_PREFIX_BLOCKS: usize = 2048;
const DEFAULT_MAX_BATCH_SIZE: i64 = 1000;

/// The producer's configuration as `newDataProducer` accepts it (the
/// loader has refused what it refuses).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BurstSettings {
    pub window_ns: u64,
    /// `maxPerReplica`; `None` for -1, no cap.
    pub max_per_replica: Option<i64>,
    pub block_size: u32,
    /// `maxPrefixTokensToMatch / blockSizeTokens` when positive, else
    /// `defaultMaxPrefixBlocks`.
    pub max_blocks: usize,
    pub min_colocate_blocks: usize,
    /// `maxBatchSize`; `None` for -1, no cap.
    pub max_batch: Option<usize>,
    /// `balanceBy: tokens`.
    pub by_tokens: bool,
}

impl BurstSettings {
    pub fn new(plugin: &Plugin) -> BurstSettings {
        let int = |key: &str, default: i64| param_f64(plugin, key).map_or(default, |v| v as i64);
        let block = int("blockSizeTokens", DEFAULT_BLOCK_SIZE_TOKENS).max(1);
        let max_tokens = int("maxPrefixTokensToMatch", 0);
        let window_ms = int("windowDurationMs", DEFAULT_WINDOW_MS).clamp(1, MAX_WINDOW_MS);
        let per_replica = int("maxPerReplica", -1);
        let batch = int("maxBatchSize", DEFAULT_MAX_BATCH_SIZE);
        BurstSettings {
            window_ns: window_ms as u64 * 1_000_000,
            max_per_replica: (per_replica >= 1).then_some(per_replica),
            block_size: u32::try_from(block).unwrap_or(u32::MAX),
            max_blocks: if max_tokens > 0 {
                usize::try_from(max_tokens / block).unwrap_or(usize::MAX)
            } else {
                DEFAULT_MAX_PREFIX_BLOCKS
            },
            min_colocate_blocks: usize::try_from(int("minColocateBlocks", 0).max(0))
                .unwrap_or(usize::MAX),
            max_batch: (batch >= 1).then(|| usize::try_from(batch).unwrap_or(usize::MAX)),
            by_tokens: plugin
                .parameters
                .get("balanceBy")
                .and_then(serde_yaml::Value::as_str)
                == Some("tokens"),
        }
    }
}

/// `newDataProducer`'s checks of the decoded parameters (over the defaults
/// of `types.go`), each failure reported through `bad` as (key, message).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    let mut bad = |key: &str, message: &str| c.bad(key, message);
    let int = |key: &str, default: f64| {
        parameters
            .get(key)
            .and_then(serde_yaml::Value::as_f64)
            .unwrap_or(default)
    };
    let window = int("windowDurationMs", DEFAULT_WINDOW_MS as f64);
    if window <= 0.0 {
        bad(
            "windowDurationMs",
            &format!("windowDurationMs must be > 0 (current value: {window})"),
        );
    } else if window > MAX_WINDOW_MS as f64 {
        bad(
            "windowDurationMs",
            &format!("windowDurationMs must be <= {MAX_WINDOW_MS} (current value: {window})"),
        );
    }
    // Without the key `maxPerReplica` is -1 (unlimited), which passes.
    if let Some(per_replica) = parameters
        .get("maxPerReplica")
        .and_then(serde_yaml::Value::as_f64)
        && per_replica != -1.0
        && per_replica < 1.0
    {
        bad(
            "maxPerReplica",
            &format!("maxPerReplica must be -1 (unlimited) or >= 1 (current value: {per_replica})"),
        );
    }
    let block = int("blockSizeTokens", DEFAULT_BLOCK_SIZE_TOKENS as f64);
    if block <= 0.0 {
        bad(
            "blockSizeTokens",
            &format!("blockSizeTokens must be > 0 (current value: {block})"),
        );
    }
    let max_tokens = int("maxPrefixTokensToMatch", 0.0);
    if max_tokens < 0.0 {
        bad(
            "maxPrefixTokensToMatch",
            &format!("maxPrefixTokensToMatch must be >= 0 (current value: {max_tokens})"),
        );
    } else if max_tokens > 0.0 && max_tokens < block {
        bad(
            "maxPrefixTokensToMatch",
            &format!(
                "maxPrefixTokensToMatch ({max_tokens}) must be 0 or >= blockSizeTokens ({block}); a smaller positive value yields zero prefix blocks"
            ),
        );
    }
    let min_colocate = int("minColocateBlocks", 0.0);
    if min_colocate < 0.0 {
        bad(
            "minColocateBlocks",
            &format!("minColocateBlocks must be >= 0 (current value: {min_colocate})"),
        );
    }
    let batch = int("maxBatchSize", DEFAULT_MAX_BATCH_SIZE as f64);
    if batch != -1.0 && batch < 1.0 {
        bad(
            "maxBatchSize",
            &format!("maxBatchSize must be -1 (unlimited) or >= 1 (current value: {batch})"),
        );
    }
    if let Some(mode) = parameters
        .get("balanceBy")
        .and_then(serde_yaml::Value::as_str)
        && !matches!(mode, "" | "requests" | "tokens")
    {
        bad(
            "balanceBy",
            &format!("balanceBy must be \"requests\" or \"tokens\" (current value: {mode:?})"),
        );
    }
}

/// A request held in the batch: what `Produce` computed on arrival and
/// the metrics the EPP snapshotted then.
#[derive(Clone, Debug)]
pub struct BurstMember {
    /// The caller's token for the request.
    pub token: u32,
    /// The endpoints as the EPP saw them when the request arrived, shared
    /// with the other members that found them the same (they change only
    /// at a scrape), so a large burst holds one copy per scrape, not one
    /// per request.
    pub views: Arc<[EndpointView]>,
    pub(crate) hashes: Vec<u64>,
    /// The replica the seal assigned; `None`: no affinity.
    pub(crate) assigned: Option<usize>,
}

/// What became of a request that `Produce` took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BurstJoin {
    /// It opened a batch, which seals at this simulated time (ns).
    Opened { seal_at_ns: u64 },
    /// It joined the open batch.
    Joined,
    /// The open batch already holds `maxBatchSize` requests: `Produce`
    /// failed, and the request is scheduled at once without the data of
    /// this and the later producers.
    Full,
}

/// The producer and its open batch.
#[derive(Clone, Debug)]
pub(crate) struct BurstPrefixProducer {
    pub(crate) settings: BurstSettings,
    batch: Vec<BurstMember>,
    /// The last snapshot a member took.
    snapshot: Option<Arc<[EndpointView]>>,
}

impl BurstPrefixProducer {
    pub fn new(plugin: &Plugin) -> BurstPrefixProducer {
        BurstPrefixProducer {
            settings: BurstSettings::new(plugin),
            batch: Vec::new(),
            snapshot: None,
        }
    }

    /// `Produce` up to the wait: hash the prompt, then join the open batch
    /// or open one, unless the open one is full.
    pub fn join(
        &mut self,
        token: u32,
        prompt: &Prompt,
        views: &[EndpointView],
        now_ns: u64,
    ) -> BurstJoin {
        let s = &self.settings;
        if s.max_batch.is_some_and(|max| self.batch.len() >= max) {
            return BurstJoin::Full;
        }
        let opened = self.batch.is_empty();
        let snapshot = match &self.snapshot {
            Some(last) if **last == *views => Arc::clone(last),
            _ => {
                let fresh: Arc<[EndpointView]> = views.into();
                self.snapshot = Some(Arc::clone(&fresh));
                fresh
            }
        };
        self.batch.push(BurstMember {
            token,
            views: snapshot,
            hashes: block_hashes(prompt, s.block_size, s.max_blocks),
            assigned: None,
        });
        if opened {
            BurstJoin::Opened {
                seal_at_ns: now_ns.saturating_add(s.window_ns),
            }
        } else {
            BurstJoin::Joined
        }
    }

    /// `seal`: the batch closes (the next request opens a new one), its
    /// members are placed jointly, and all are released in the order they
    /// joined. `ids` names the endpoints as the EPP does, for the tie-break.
    pub fn seal(&mut self, ids: &[String]) -> Vec<BurstMember> {
        let mut members = std::mem::take(&mut self.batch);
        // The replicas are the first placeable member's endpoints, with
        // their running counts as that member's snapshot has them
        // (`assign`: `replicas = e.pods`).
        let running: Vec<u32> = members
            .iter()
            .find(|m| !m.hashes.is_empty())
            .map(|m| m.views.iter().map(|v| v.running).collect())
            .unwrap_or_default();
        let s = &self.settings;
        let replicas = Replicas {
            names: &ids[..running.len().min(ids.len())],
            running: &running,
        };
        let hashes: Vec<&[u64]> = members.iter().map(|m| m.hashes.as_slice()).collect();
        let assigned = assign(
            &hashes,
            &replicas,
            s.max_per_replica,
            s.min_colocate_blocks,
            s.by_tokens,
        );
        for (member, replica) in members.iter_mut().zip(assigned) {
            member.assigned = replica;
        }
        members
    }

    /// The match info `Produce` attaches once the batch is sealed: every
    /// block on the assigned replica, none elsewhere.
    pub fn match_info(&self, member: &BurstMember, matches: &mut [u32]) -> (u32, u32) {
        let total = u32::try_from(member.hashes.len()).unwrap_or(u32::MAX);
        for (e, m) in matches.iter_mut().enumerate() {
            *m = if member.assigned == Some(e) { total } else { 0 };
        }
        (total, self.settings.block_size)
    }
}

/// The replicas a batch is placed over: endpoint `i` is named `names[i]`
/// (`namespace/name`) and runs `running[i]` requests.
pub(crate) struct Replicas<'a> {
    pub names: &'a [String],
    pub running: &'a [u32],
}

impl Replicas<'_> {
    fn len(&self) -> usize {
        self.names.len()
    }

    /// `less`: lower load in the batch, then fewer running requests, then
    /// the lower name.
    fn less(&self, load: &[i64], a: usize, b: usize) -> bool {
        (load[a], self.running[a], &self.names[a]) < (load[b], self.running[b], &self.names[b])
    }
}

/// `assign`: groups requests by identical prefix (all their block
/// hashes), places identical groups and then the single requests sharing
/// at least `min_colocate` leading blocks with another request, each tier
/// longest prefix first, and returns each request's replica (`None`: no
/// affinity). `k` caps how many of one group a replica takes.
pub(crate) fn assign(
    hashes: &[&[u64]],
    replicas: &Replicas<'_>,
    k: Option<i64>,
    min_colocate: usize,
    by_tokens: bool,
) -> Vec<Option<usize>> {
    let mut out = vec![None; hashes.len()];
    let n = replicas.len();
    if n == 0 {
        return out;
    }
    // Groups in the order their first member joined (`order`).
    let mut group_of: FxHashMap<&[u64], usize> = FxHashMap::default();
    let mut groups: Vec<(&[u64], Vec<usize>)> = Vec::new();
    for (i, h) in hashes.iter().enumerate() {
        if h.is_empty() {
            continue;
        }
        match group_of.get(h) {
            Some(&g) => groups[g].1.push(i),
            None => {
                group_of.insert(h, groups.len());
                groups.push((h, vec![i]));
            }
        }
    }
    let shared = shared_prefix_groups(&groups, min_colocate);
    let (mut group_units, mut single_units) = (Vec::new(), Vec::new());
    for (g, (_, members)) in groups.iter().enumerate() {
        if members.len() >= 2 {
            group_units.push(g);
        } else if shared[g] {
            single_units.push(g);
        }
    }
    if group_units.is_empty() && single_units.is_empty() {
        return out;
    }
    // Longest prefix first within each tier, stable (`sortByPrefixLen`).
    let count = |g: usize| groups[g].0.len() as i64;
    group_units.sort_by_key(|g| std::cmp::Reverse(count(*g)));
    single_units.sort_by_key(|g| std::cmp::Reverse(count(*g)));
    let total: i64 = group_units
        .iter()
        .chain(&single_units)
        .map(|&g| {
            if by_tokens {
                count(g)
            } else {
                groups[g].1.len() as i64
            }
        })
        .sum();
    // The fair share per replica, rounded up.
    let max_share = (total + n as i64 - 1) / n as i64;
    let mut index = BatchIndex::default();
    let mut load = vec![0i64; n];
    for &g in group_units.iter().chain(&single_units) {
        let (key, members) = (groups[g].0, &groups[g].1);
        let unit = Unit {
            members,
            key,
            cost: count(g),
        };
        place_group(
            &unit,
            replicas,
            k,
            min_colocate,
            max_share,
            by_tokens,
            &mut index,
            &mut load,
            &mut out,
        );
    }
    out
}

/// `sharedPrefixKeys`: the groups whose first `min_colocate` blocks some
/// other request of the batch shares (none when `min_colocate` is 0).
fn shared_prefix_groups(groups: &[(&[u64], Vec<usize>)], min_colocate: usize) -> Vec<bool> {
    if min_colocate == 0 {
        return vec![false; groups.len()];
    }
    let mut count: FxHashMap<&[u64], usize> = FxHashMap::default();
    for (key, members) in groups {
        if key.len() >= min_colocate {
            *count.entry(&key[..min_colocate]).or_default() += members.len();
        }
    }
    groups
        .iter()
        .map(|(key, _)| key.len() >= min_colocate && count[&key[..min_colocate]] >= 2)
        .collect()
}

/// `batchIndex`: which replicas hold each block placed in this batch.
#[derive(Default)]
struct BatchIndex {
    holders: FxHashMap<u64, Vec<usize>>,
}

impl BatchIndex {
    fn add(&mut self, key: &[u64], replica: usize) {
        for h in key {
            let holders = self.holders.entry(*h).or_default();
            if !holders.contains(&replica) {
                holders.push(replica);
            }
        }
    }

    /// `longestPrefix`: per replica, the leading blocks it holds, the walk
    /// stopping at the first block no replica holds.
    fn longest_prefix(&self, key: &[u64], n: usize) -> Vec<i64> {
        let mut res = vec![0; n];
        for h in key {
            let Some(holders) = self.holders.get(h).filter(|h| !h.is_empty()) else {
                break;
            };
            for r in holders {
                res[*r] += 1;
            }
        }
        res
    }
}

/// One placement unit: an identical group, or a single request.
struct Unit<'a> {
    members: &'a [usize],
    key: &'a [u64],
    /// Its prefix blocks.
    cost: i64,
}

/// `placeGroup`: the first replica gets the prefix preference (bounded by
/// the fair share); members past `k` spill to the least loaded replicas.
#[allow(clippy::too_many_arguments)]
fn place_group(
    unit: &Unit<'_>,
    replicas: &Replicas<'_>,
    k: Option<i64>,
    min_colocate: usize,
    max_share: i64,
    by_tokens: bool,
    index: &mut BatchIndex,
    load: &mut [i64],
    out: &mut [Option<usize>],
) {
    let n = replicas.len();
    let mut prefer = min_colocate > 0;
    let matches = if prefer || by_tokens {
        index.longest_prefix(unit.key, n)
    } else {
        vec![0; n]
    };
    let mut per_replica = vec![0i64; n];
    let mut i = 0;
    let members = unit.members;
    while i < members.len() {
        let target = pick_replica(
            replicas,
            &per_replica,
            k,
            load,
            &matches,
            min_colocate as i64,
            max_share,
            prefer,
        );
        let mut run = (members.len() - i) as i64;
        if let Some(k) = k {
            // Overflow: more members than k per replica can hold; place one
            // and rebalance.
            run = run.min((k - per_replica[target]).max(1));
        }
        for m in &members[i..i + run as usize] {
            out[*m] = Some(target);
        }
        let first_touch = per_replica[target] == 0;
        per_replica[target] += run;
        if !by_tokens {
            load[target] += run;
        } else if first_touch {
            // The prefix once per replica, less what it already holds.
            load[target] += (unit.cost - matches[target]).max(0);
        }
        i += run as usize;
        prefer = false;
    }
    for m in members {
        if let Some(r) = out[*m] {
            index.add(unit.key, r);
        }
    }
}

/// `pickReplica`: with the preference, the replica sharing the longest
/// prefix (at least `min_colocate` blocks) with room for the group and
/// below its fair share; otherwise the least loaded.
#[allow(clippy::too_many_arguments)]
fn pick_replica(
    replicas: &Replicas<'_>,
    per_replica: &[i64],
    k: Option<i64>,
    load: &[i64],
    matches: &[i64],
    min_colocate: i64,
    max_share: i64,
    prefer: bool,
) -> usize {
    let full = |r: usize| k.is_some_and(|k| per_replica[r] >= k);
    if prefer {
        let mut best: Option<usize> = None;
        for r in 0..replicas.len() {
            if full(r) || load[r] >= max_share || matches[r] < min_colocate {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => {
                    matches[r] > matches[b]
                        || (matches[r] == matches[b] && replicas.less(load, r, b))
                }
            };
            if better {
                best = Some(r);
            }
        }
        if let Some(b) = best {
            return b;
        }
    }
    // `pickLeastLoaded`: among those with room, else among all.
    let least = |room: bool| {
        (0..replicas.len())
            .filter(|r| !room || !full(*r))
            .reduce(|b, r| if replicas.less(load, r, b) { r } else { b })
    };
    least(true).or_else(|| least(false)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    //! Go's own cases (`burstprefix/assign_test.go`), over pods named
    //! pod1, pod2, … with no running requests.
    use super::{Replicas, assign};
    use std::collections::BTreeMap;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("pod{i}")).collect()
    }

    /// `group(n, prefix)` repeated per group, assigned with `k`, `min`
    /// and `by_tokens`; returns each request's pod name ("" for none).
    fn run(
        pods: usize,
        groups: &[(usize, &[u64])],
        k: Option<i64>,
        min: usize,
        by_tokens: bool,
    ) -> Vec<String> {
        let names = names(pods);
        let running = vec![0; pods];
        let hashes: Vec<&[u64]> = groups
            .iter()
            .flat_map(|(n, prefix)| std::iter::repeat_n(*prefix, *n))
            .collect();
        let replicas = Replicas {
            names: &names,
            running: &running,
        };
        assign(&hashes, &replicas, k, min, by_tokens)
            .into_iter()
            .map(|r| r.map_or(String::new(), |r| names[r].clone()))
            .collect()
    }

    fn counts(assigned: &[String]) -> BTreeMap<&str, usize> {
        let mut c = BTreeMap::new();
        for a in assigned {
            *c.entry(a.as_str()).or_default() += 1;
        }
        c
    }

    fn map(pairs: &[(&'static str, usize)]) -> BTreeMap<&'static str, usize> {
        pairs.iter().copied().collect()
    }

    const P123: &[u64] = &[1, 2, 3];

    #[test]
    fn unlimited_colocates_a_whole_group_and_a_cap_spreads_or_fills() {
        // UnlimitedColocatesWholeGroup.
        assert!(
            run(4, &[(8, P123)], None, 0, false)
                .iter()
                .all(|a| a == "pod1")
        );
        // CapSpreadsEvenly: k = 2, 8 samples, 4 replicas.
        let a = run(4, &[(8, P123)], Some(2), 0, false);
        assert_eq!(
            counts(&a),
            map(&[("pod1", 2), ("pod2", 2), ("pod3", 2), ("pod4", 2)])
        );
        // CapFillsBeforeSpilling: k = 4 uses two replicas.
        let a = run(4, &[(8, P123)], Some(4), 0, false);
        assert_eq!(counts(&a), map(&[("pod1", 4), ("pod2", 4)]));
        // OverflowGuardBalancesBeyondCap: k·replicas < members.
        let a = run(2, &[(8, P123)], Some(2), 0, false);
        assert_eq!(counts(&a), map(&[("pod1", 4), ("pod2", 4)]));
    }

    #[test]
    fn singletons_and_empty_prompts_get_no_affinity() {
        // SingletonGetsNoAffinity.
        assert_eq!(run(2, &[(1, P123)], None, 0, false), [""]);
        // EmptyPrefixGetsNoAffinity.
        assert_eq!(run(2, &[(2, &[])], None, 0, false), ["", ""]);
        // LoneSingletonGetsNoAffinity: the identical group still co-locates.
        let a = run(2, &[(2, P123), (1, &[5, 5, 5])], None, 2, false);
        assert_eq!(a[2], "");
        assert_eq!(a[0], a[1]);
    }

    #[test]
    fn distinct_groups_spread_over_replicas() {
        // DistinctGroupsSpreadAcrossReplicas.
        let a = run(4, &[(8, P123), (8, &[9, 9, 9])], None, 0, false);
        assert!(a[..8].iter().all(|x| x == "pod1"));
        assert!(a[8..].iter().all(|x| x == "pod2"));
        // SingleReplicaPlacesEverything.
        let a = run(1, &[(4, P123), (4, &[9, 9, 9])], None, 2, false);
        assert!(a.iter().all(|x| x == "pod1"));
    }

    #[test]
    fn prefix_sharing_units_colocate_within_the_fair_share() {
        // SharedPrefixFamiliesColocateWithinFairShare.
        let families: &[(usize, &[u64])] = &[
            (2, &[1, 2, 3]),
            (2, &[1, 2, 4]),
            (2, &[7, 8, 5]),
            (2, &[7, 8, 6]),
        ];
        let a = run(2, families, None, 2, false);
        assert_eq!(a[0], a[2]);
        assert_eq!(a[4], a[6]);
        assert_ne!(a[0], a[4]);
        assert_eq!(counts(&a), map(&[("pod1", 4), ("pod2", 4)]));
        // SharedPrefixBelowThresholdDoesNotColocate: min 3.
        let a = run(2, families, None, 3, false);
        assert_ne!(a[0], a[2]);
        assert_eq!(counts(&a), map(&[("pod1", 4), ("pod2", 4)]));
        // FairShareSpreadsPrefixSharingGroups.
        let four: &[(usize, &[u64])] = &[
            (2, &[1, 2, 3]),
            (2, &[1, 2, 4]),
            (2, &[1, 2, 5]),
            (2, &[1, 2, 6]),
        ];
        let a = run(4, four, None, 2, false);
        assert_eq!(
            counts(&a),
            map(&[("pod1", 2), ("pod2", 2), ("pod3", 2), ("pod4", 2)])
        );
        // OverlappingSingletonsColocateWithoutGroups.
        let singles: &[(usize, &[u64])] = &[
            (1, &[1, 2, 3]),
            (1, &[1, 2, 4]),
            (1, &[1, 2, 5]),
            (1, &[1, 2, 6]),
        ];
        let a = run(2, singles, None, 2, false);
        assert_eq!(counts(&a), map(&[("pod1", 2), ("pod2", 2)]));
        // SingletonAttachesToOverlappingGroup.
        let mixed: &[(usize, &[u64])] = &[
            (2, &[1, 2, 3]),
            (1, &[1, 2, 8]),
            (2, &[7, 8, 5]),
            (1, &[7, 8, 9]),
        ];
        let a = run(2, mixed, None, 2, false);
        assert_eq!(a[0], a[1]);
        assert_eq!(a[0], a[2]);
        assert_eq!(a[3], a[5]);
        assert_eq!(counts(&a), map(&[("pod1", 3), ("pod2", 3)]));
    }

    #[test]
    fn token_balancing_spreads_long_prefixes_and_discounts_shared_blocks() {
        // BalanceByTokensSpreadsLargePrefix.
        let units: &[(usize, &[u64])] = &[(2, &[1, 2, 3, 4]), (2, &[5]), (2, &[6])];
        let a = run(2, units, None, 0, false);
        assert_eq!(a[0], a[4], "by requests a short unit joins the long one");
        let a = run(2, units, None, 0, true);
        assert_ne!(a[0], a[2]);
        assert_eq!(a[2], a[4], "by tokens the short units pack together");
        // BalanceByTokensDiscountsSharedPrefix: 9 shared leading blocks.
        let units: &[(usize, &[u64])] = &[
            (2, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
            (2, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 11]),
            (2, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 12]),
        ];
        let a = run(2, units, None, 9, true);
        assert_eq!(a[0], a[2]);
        assert_eq!(a[2], a[4]);
    }

    #[test]
    fn a_cap_that_does_not_divide_the_group_fills_then_spills_the_rest() {
        // k = 4 and 6 samples: 4 on one replica, the last 2 on the next.
        let a = run(4, &[(6, P123)], Some(4), 0, false);
        assert_eq!(counts(&a), map(&[("pod1", 4), ("pod2", 2)]));
    }

    #[test]
    fn without_min_colocate_a_shared_prefix_draws_nothing() {
        // Two groups sharing two leading blocks, and a larger one: with
        // minColocateBlocks 0 placement is by load only, so the second
        // group goes to the emptier replica instead of joining the first.
        let units: &[(usize, &[u64])] = &[(2, &[1, 2, 3]), (2, &[1, 2, 4]), (4, &[9, 9, 9])];
        let a = run(2, units, None, 0, false);
        assert_ne!(a[0], a[2]);
        // With 2 the shared prefix draws it (under the fair share of 4).
        let a = run(2, units, None, 2, false);
        assert_eq!(a[0], a[2]);
    }

    #[test]
    fn token_balancing_charges_a_replica_once_per_unit() {
        // k = 1 over two replicas for a group of 4 under token balancing:
        // each replica is charged the prefix once, at its first sample; the
        // third and fourth samples find both at the cap, and the
        // least-loaded fallback (equal loads, then the name) takes pod1
        // both times, its load unchanged (`placeGroup`, `firstTouch`).
        let a = run(2, &[(4, P123)], Some(1), 0, true);
        assert_eq!(counts(&a), map(&[("pod1", 3), ("pod2", 1)]));
    }

    #[test]
    fn pick_replica_prefers_the_longest_shared_prefix_then_the_least_loaded() {
        use super::pick_replica;
        let names = names(3);
        let running = [0; 3];
        let replicas = Replicas {
            names: &names,
            running: &running,
        };
        let none = [0i64; 3];
        let pick = |matches: [i64; 3], load: [i64; 3]| {
            pick_replica(&replicas, &none, None, &load, &matches, 2, 10, true)
        };
        // The longest match wins, wherever it is, even against less load.
        assert_eq!(pick([3, 2, 0], [1, 0, 0]), 0);
        assert_eq!(pick([2, 3, 0], [0, 0, 0]), 1);
        // Equal matches: the less loaded, then the lower name.
        assert_eq!(pick([3, 3, 0], [1, 0, 0]), 1);
        assert_eq!(pick([3, 3, 0], [0, 1, 0]), 0);
        // Below minColocateBlocks or at the fair share: not preferred, and
        // the least loaded takes it.
        assert_eq!(pick([1, 1, 1], [2, 1, 0]), 2);
        assert_eq!(pick([9, 0, 0], [10, 3, 5]), 1);
        // Without the preference, least loaded among those under the cap,
        // else among all.
        let full = [1i64, 0, 0];
        let load = [0i64, 1, 2];
        assert_eq!(
            pick_replica(&replicas, &full, Some(1), &load, &none, 0, 10, false),
            1
        );
        let all_full = [1i64; 3];
        assert_eq!(
            pick_replica(&replicas, &all_full, Some(1), &load, &none, 0, 10, false),
            0
        );
    }

    #[test]
    fn ties_go_to_fewer_running_requests_then_the_lower_name() {
        // `less`: equal batch load, then running requests, then name.
        let names = names(3);
        let hashes: Vec<&[u64]> = vec![P123, P123];
        let replicas = Replicas {
            names: &names,
            running: &[5, 2, 2],
        };
        assert_eq!(
            assign(&hashes, &replicas, None, 0, false),
            [Some(1), Some(1)]
        );
        let replicas = Replicas {
            names: &names,
            running: &[0, 2, 0],
        };
        assert_eq!(
            assign(&hashes, &replicas, None, 0, false),
            [Some(0), Some(0)]
        );
    }
}
