#!/usr/bin/env python3
"""Golden data for pdsim's secondary offload tiers from vLLM's own tiering manager.

Runs vLLM's `vllm/v1/kv_offload/tiering/manager.py` (`TieringOffloadingManager`
over `CPUPrimaryTierOffloadingManager`, i.e. the CPU manager and its LRU or ARC
policy) and `tiering/async_lookup.py` (`AsyncLookupManager`), loaded from the
files of an unpacked vLLM wheel, on seeded random sequences of what the
OffloadingConnector and the engine's steps do to them, and writes every call
and what the managers answered as JSON. The Rust test
`crates/engine/tests/tiering_oracle.rs` replays the same calls through
`pdsim_engine::tiering::Tiering` and requires the same answers.

The secondary tier is a stand-in for `tiering/fs/manager.py` with what that
tier does to the manager: a set of files (a write adds its chunks when its job
ends, unless the tier is full; nothing is ever deleted), jobs that end when
the script says so and are reported by `get_finished_jobs` in the order they
ended, and the real `AsyncLookupManager` for lookups, whose worker thread is
replaced by the script answering the oldest posted batch from the files as
they are then (what `FsAsyncLookupManager.batch_lookup` checks). Everything
else runs as shipped; torch, numpy, metrics and the shared-memory region are
stubbed.

Usage:

    python3 tools/vllm-oracle/tiering_manager.py TREE [CASES] > golden.json

TREE is an unpacked vllm 0.31.0 wheel (`pip download --no-deps vllm==0.31.0`).
"""

import importlib.util
import json
import os
import random
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offload_manager  # noqa: E402  (its stubs and loaders)


def load_tiering(tree):
    base, cpu = offload_manager.load_vllm(tree)
    np = sys.modules["numpy"]
    np.array = lambda values, dtype=None: list(values)
    common = sys.modules["vllm.v1.kv_offload.cpu.common"]
    common.CPULoadStoreSpec.chunk_ids = property(lambda self: self.ids)
    offload_manager.stub("vllm.v1.kv_offload.cpu.shared_offload_region", SharedOffloadRegion=object)

    class Tracker:
        primary_tier_label = "primary"

        def __init__(self, *args, **kwargs):
            pass

        def tier_label(self, i):
            return str(i)

        def __getattr__(self, _name):
            return lambda *a, **k: None

    offload_manager.stub("vllm.v1.kv_offload.tiering.metrics", TieringMetricsTracker=Tracker)
    offload_manager.package("vllm.v1.kv_offload.tiering", f"{tree}/vllm/v1/kv_offload/tiering")
    tiering = f"{tree}/vllm/v1/kv_offload/tiering"
    if not os.path.exists(f"{tiering}/backpressure.py"):
        # 0.29.0: its AsyncLookupManager has no probe generations (a late
        # answer lands on a newer probe of the same key), which pdsim does
        # not mirror and refuses.
        raise SystemExit("not vLLM 0.31.0's tiering: pdsim mirrors 0.31.0's only")
    offload_manager.load("vllm.v1.kv_offload.tiering.backpressure", f"{tiering}/backpressure.py")
    tbase = offload_manager.load("vllm.v1.kv_offload.tiering.base", f"{tiering}/base.py")
    lookups = offload_manager.load("vllm.v1.kv_offload.tiering.async_lookup", f"{tiering}/async_lookup.py")
    manager = offload_manager.load("vllm.v1.kv_offload.tiering.manager", f"{tiering}/manager.py")
    return base, tbase, lookups, manager


def make_tier(base, tbase, lookups_mod, capacity, view, log):
    class Posted:
        """The worker's queue, logging each batch posted to it."""

        def __init__(self):
            self.batches = []

        def put(self, batch):
            self.batches.append(batch)
            log.append(["lookup", len(batch)])

        def get_nowait(self):
            return self.batches.pop(0)

        def empty(self):
            return not self.batches

    class Lookups(lookups_mod.AsyncLookupManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._lookup_queue = Posted()

        def _worker(self):
            return

        def batch_lookup(self, keys, req_context):
            raise AssertionError("answered by the script")

        def answer_oldest(self, files):
            batch = self._lookup_queue.get_nowait()
            results = []
            for entry in batch:
                key, generation = entry[0], entry[-1]
                results.append((key, generation, key in files))
            self._pending_results.put(results)

    class Tier(tbase.SecondaryTierManager):
        medium = None

        def __init__(self):
            super().__init__(offloading_spec=None, primary_kv_view=view, tier_type="fs")
            self.capacity = capacity
            self.files = set()
            self.in_flight = {}
            self.done = []
            self.lookups = Lookups(tier_type="fs")

        def lookup(self, key, req_context):
            found = self.lookups.lookup(key, req_context)
            if found is None:
                return base.LookupResult.RETRY
            return base.LookupResult.HIT if found else base.LookupResult.MISS

        def submit_store(self, job):
            self.in_flight[job.job_id] = (list(job.keys), True)
            log.append(["write", job.job_id, len(job.keys)])

        def submit_load(self, job):
            self.in_flight[job.job_id] = (list(job.keys), False)
            log.append(["read", job.job_id, len(job.keys)])

        def end(self, job_id):
            keys, write = self.in_flight.pop(job_id)
            if write:
                for key in keys:
                    if key not in self.files and len(self.files) < self.capacity:
                        self.files.add(key)
            self.done.append(job_id)

        def get_finished_jobs(self):
            out = [tbase.JobResult(job_id=j, success=True) for j in self.done]
            self.done = []
            return out

        def on_new_request(self, req_context):
            return base.RequestOffloadingContext()

        def on_request_finished(self, req_context):
            self.lookups.cleanup(req_context.req_id)

        def on_schedule_end(self, context):
            self.lookups.flush()

        def drain_jobs(self):
            raise AssertionError("no reset in these runs")

    return Tier()


def number_of(key):
    return int.from_bytes(key[:8], "big")


def run_case(base, tbase, lookups_mod, manager_mod, seed, policy):
    rng = random.Random(seed)
    capacity = rng.randint(3, 12)
    tier_capacity = rng.randint(4, 30)
    view = memoryview(bytearray(capacity * 8)).cast("B", (capacity, 8))

    class Region:
        def create_kv_memoryview(self):
            return view

        def cleanup(self):
            pass

    primary = manager_mod.CPUPrimaryTierOffloadingManager(
        num_chunks=capacity, mmap_region=Region(), cache_policy=policy
    )
    log = []
    tier = make_tier(base, tbase, lookups_mod, tier_capacity, view, log)
    manager = manager_mod.TieringOffloadingManager(primary, [tier])
    key_of = lambda n: offload_manager.key_of(base, n)  # noqa: E731
    prefixes = [[p * 8 + i + 1 for i in range(8)] for p in range(3)]
    fresh = 1000
    live = {}
    next_req = 0
    ops = []
    for _ in range(rng.randint(60, 200)):
        choice = rng.random()
        op = None
        if choice < 0.08 or not live:
            prefix = rng.choice(prefixes)
            length = rng.randint(1, 8)
            keys = prefix[: rng.randint(0, length)]
            tail = length - len(keys)
            keys += list(range(fresh, fresh + tail))
            fresh += tail
            ctx = base.ReqContext(req_id=str(next_req))
            for i, number in enumerate(keys):
                ctx.set_offload_key_position(key_of(number), (i + 1) * 16)
            manager.on_new_request(ctx)
            live[next_req] = {"keys": keys, "ctx": ctx, "next": 0, "loading": []}
            op = {"op": "new", "req": next_req, "keys": keys}
            next_req += 1
        else:
            req_id = rng.choice(sorted(live))
            req = live[req_id]
            keys = [key_of(n) for n in req["keys"]]
            if choice < 0.35:
                # `_maximal_prefix_lookup` from a start chunk: on to a miss.
                first = rng.randint(0, len(keys) - 1)
                results = []
                for key in keys[first:]:
                    r = manager.lookup(key, req["ctx"])
                    results.append(r.name)
                    if r == base.LookupResult.MISS:
                        break
                op = {"op": "lookup", "req": req_id, "first": first, "results": results}
            elif choice < 0.40 and not req["loading"]:
                hit = 0
                for key in keys:
                    if primary.lookup(key, req["ctx"]) != base.LookupResult.HIT:
                        break
                    hit += 1
                start = rng.randint(0, hit)
                if start < hit:
                    req["loading"] = keys[start:hit]
                    manager.prepare_load(req["loading"], req["ctx"])
                    op = {"op": "load", "req": req_id, "first": start, "count": hit - start}
            elif choice < 0.46 and req["loading"]:
                manager.complete_load(req["loading"], req["ctx"])
                req["loading"] = []
                op = {"op": "loaded", "req": req_id}
            elif choice < 0.60:
                if req["next"] < len(keys):
                    end = rng.randint(req["next"] + 1, len(keys))
                    offer = keys[req["next"] : end]
                    out = manager.prepare_store(offer, req["ctx"])
                    op = {"op": "store", "req": req_id, "first": req["next"], "count": end - req["next"]}
                    if out is None:
                        op["ok"] = False
                    else:
                        op["ok"] = True
                        op["stored"] = [number_of(k) for k in out.keys_to_store]
                        # The connector makes a store job (and completes it)
                        # only when something is stored.
                        if out.keys_to_store:
                            manager.complete_store(out.keys_to_store, req["ctx"])
                        req["next"] = end
            elif choice < 0.72:
                manager.on_schedule_end(base.ScheduleEndContext(new_req_ids=[], preempted_req_ids=[]))
                op = {"op": "schedule_end"}
            elif choice < 0.84:
                if tier.in_flight:
                    job = rng.choice(sorted(tier.in_flight))
                    tier.end(job)
                    op = {"op": "job_done", "job": job}
            elif choice < 0.96:
                if not tier.lookups._lookup_queue.empty():
                    tier.lookups.answer_oldest(tier.files)
                    op = {"op": "answer"}
            elif not req["loading"]:
                manager.on_request_finished(req["ctx"])
                del live[req_id]
                op = {"op": "finish", "req": req_id}
        if op is None:
            continue
        op["io"] = list(log)
        log.clear()
        chunks = primary._policy.get
        held = sorted(number_of(k) for k in all_keys(primary))
        op["held"] = held
        op["pending"] = [n for n in held if not chunks(key_of(n)).is_ready]
        op["files"] = sorted(number_of(k) for k in tier.files)
        ops.append(op)
    return {
        "seed": seed,
        "policy": policy,
        "capacity": capacity,
        "tier_capacity": tier_capacity,
        "ops": ops,
    }


def all_keys(manager):
    return offload_manager.all_keys(manager)


def main():
    tree = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    base, tbase, lookups, manager = load_tiering(tree)
    out = [
        run_case(base, tbase, lookups, manager, seed, policy)
        for policy in ["lru", "arc"]
        for seed in range(cases)
    ]
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
