#!/usr/bin/env python3
"""Golden data for pdsim's offload tier from vLLM's own CPU offloading manager.

Runs vLLM's `vllm/v1/kv_offload/cpu/manager.py` with its cache policies
(`cpu/policies/lru.py`, `cpu/policies/arc.py`), loaded from the files of an
unpacked vLLM wheel, on seeded random sequences of what the OffloadingConnector
does to it, and writes every call and what the manager answered as JSON. The
Rust test `crates/engine/tests/offload_oracle.rs` (golden files in
`crates/engine/tests/offload-golden/`) replays the same calls through
`pdsim_engine::offload::OffloadManager` and requires the same answers.

The connector's calls are made as pdsim makes them (see
`crates/engine/src/offload.rs`): a store completes right after it is prepared;
with 0.29.0 (`--recency touch`) a lookup touches all of the request's keys and
so does a store that stored something, before it completes
(`offloading/scheduler.py`, `_touch`); with 0.31.0 (`--recency request_end`)
the request's end calls `on_request_finished`.

Needs no vLLM dependencies: torch, numpy and the few vLLM modules the manager
imports only for types and metrics are stubbed; the manager and policies run
as shipped. Usage:

    pip download --no-deps vllm==0.31.0   # unzip vllm/v1/kv_offload/** and
                                          # vllm/distributed/kv_transfer/** to TREE
    python3 tools/vllm-oracle/offload_manager.py TREE request_end > golden.json
"""

import importlib.util
import json
import random
import sys
import types
from dataclasses import dataclass


def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def package(name, path):
    module = stub(name)
    module.__path__ = [path]
    return module


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_vllm(tree):
    stub("torch", Tensor=object, dtype=object, device=object)
    stub("numpy", ndarray=object, int32=int, int64=int)

    class Stats:
        def __getattr__(self, _name):
            return lambda *a, **k: None

    class Logger:
        def __getattr__(self, _name):
            return lambda *a, **k: None

    stub("vllm.logger", init_logger=lambda _name: Logger())
    stub("vllm.v1.kv_hints", KvHintsEnvelope=object)
    stub("vllm.v1.kv_offload.config", OffloadingConfig=object)
    stub(
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics",
        OffloadingConnectorStats=Stats,
    )
    for name in [
        "vllm",
        "vllm.v1",
        "vllm.v1.kv_offload",
        "vllm.v1.kv_offload.cpu",
        "vllm.v1.kv_offload.cpu.policies",
    ]:
        package(name, f"{tree}/{name.replace('.', '/')}")
    base = load("vllm.v1.kv_offload.base", f"{tree}/vllm/v1/kv_offload/base.py")
    common = f"{tree}/vllm/v1/kv_offload/cpu/common.py"

    @dataclass
    class CPULoadStoreSpec:
        ids: list

    # cpu/common.py builds numpy arrays; its spec is only handed back here.
    stub(
        "vllm.v1.kv_offload.cpu.common",
        CPULoadStoreSpec=CPULoadStoreSpec,
        CPUOffloadingMetrics=types.SimpleNamespace(
            CPU_CACHE_USAGE_PERC="u",
            CPU_ALLOCATION_SIZE="a",
            CPU_CACHE_WRITE_USAGE_PERC="w",
            CPU_CACHE_READ_USAGE_PERC="r",
            STORES_SKIPPED="s",
        ),
    )
    del common
    policies = f"{tree}/vllm/v1/kv_offload/cpu/policies"
    load("vllm.v1.kv_offload.cpu.policies.base", f"{policies}/base.py")
    load("vllm.v1.kv_offload.cpu.policies.lru", f"{policies}/lru.py")
    load("vllm.v1.kv_offload.cpu.policies.arc", f"{policies}/arc.py")
    load("vllm.v1.kv_offload.cpu.policies.factory", f"{policies}/factory.py")
    manager = load("vllm.v1.kv_offload.cpu.manager", f"{tree}/vllm/v1/kv_offload/cpu/manager.py")
    return base, manager


def key_of(base, number):
    return base.make_offload_key(number.to_bytes(8, "big"), 0)


def number_of(key):
    return int.from_bytes(key[:8], "big")


def run_case(base, manager_mod, seed, policy, recency):
    """One random run; returns its calls with the manager's answers."""
    rng = random.Random(seed)
    capacity = rng.randint(2, 12)
    try:
        manager = manager_mod.CPUOffloadingManager(num_chunks=capacity, cache_policy=policy)
    except TypeError:  # 0.29.0 counts blocks
        manager = manager_mod.CPUOffloadingManager(num_blocks=capacity, cache_policy=policy)
    has_request_end = hasattr(manager, "on_request_finished")
    if recency == "request_end" and not has_request_end:
        raise SystemExit("this vLLM's manager has no on_request_finished: use --recency touch")
    # Keys stand for chained block hashes, so a key is always at the same
    # position: shared prefixes (which evicted keys return through) and
    # tails of fresh keys.
    prefixes = [[p * 8 + i + 1 for i in range(8)] for p in range(6)]
    fresh = 1000
    live = {}
    next_req = 0
    ops = []
    for _ in range(rng.randint(20, 80)):
        choice = rng.random()
        if choice < 0.25 or not live:
            # A new request: a prompt of up to 8 chunks from a shared prefix
            # and a tail of its own keys.
            prefix = rng.choice(prefixes)
            length = rng.randint(1, 8)
            keys = prefix[: rng.randint(0, length)]
            tail = length - len(keys)
            keys += list(range(fresh, fresh + tail))
            fresh += tail
            ctx = base.ReqContext(req_id=str(next_req))
            for i, number in enumerate(keys):
                if hasattr(ctx, "set_offload_key_position"):
                    ctx.set_offload_key_position(key_of(base, number), (i + 1) * 16)
            manager.on_new_request(ctx) if hasattr(manager, "on_new_request") else None
            live[next_req] = {"keys": keys, "ctx": ctx, "next": 0, "loading": []}
            ops.append({"op": "new", "req": next_req, "keys": keys})
            next_req += 1
            continue
        req_id = rng.choice(sorted(live))
        req = live[req_id]
        keys = [key_of(base, n) for n in req["keys"]]
        if choice < 0.4:
            # The connector's lookup: a run of hits from the start.
            hit = 0
            for key in keys:
                if manager.lookup(key, req["ctx"]) != base.LookupResult.HIT:
                    break
                hit += 1
            if recency == "touch":
                manager.touch(keys, req["ctx"])
            ops.append({"op": "lookup", "req": req_id, "hit": hit})
        elif choice < 0.5 and not req["loading"]:
            hit = 0
            for key in keys:
                if manager.lookup(key, req["ctx"]) != base.LookupResult.HIT:
                    break
                hit += 1
            start = min(rng.randint(0, hit), hit)
            if start < hit:
                load_keys = keys[start:hit]
                manager.prepare_load(load_keys, req["ctx"])
                req["loading"] = load_keys
                ops.append({"op": "load", "req": req_id, "first": start, "count": hit - start})
        elif choice < 0.6 and req["loading"]:
            manager.complete_load(req["loading"], req["ctx"])
            req["loading"] = []
            ops.append({"op": "loaded", "req": req_id})
        elif choice < 0.85:
            # A store offer from the next chunk not offered yet.
            if req["next"] >= len(keys):
                continue
            end = rng.randint(req["next"] + 1, len(keys))
            offer = keys[req["next"] : end]
            out = manager.prepare_store(offer, req["ctx"])
            answer = {"op": "store", "req": req_id, "first": req["next"], "count": end - req["next"]}
            if out is None:
                answer["ok"] = False
            else:
                answer["ok"] = True
                answer["stored"] = [number_of(k) for k in out.keys_to_store]
                answer["evicted"] = [number_of(k) for k in out.evicted_keys]
                if out.keys_to_store:
                    if recency == "touch":
                        # `_touch` covers every key the request has.
                        manager.touch(keys, req["ctx"])
                    manager.complete_store(out.keys_to_store, req["ctx"])
                req["next"] = end
            ops.append(answer)
        else:
            if req["loading"]:
                continue
            if recency == "request_end":
                manager.on_request_finished(req["ctx"])
            del live[req_id]
            ops.append({"op": "finish", "req": req_id})
        ops[-1]["held"] = sorted(number_of(k) for k in all_keys(manager))
        if policy == "arc":
            p = manager._policy
            ops[-1]["arc"] = [len(p.t1), len(p.t2), len(p.b1), len(p.b2), p.target_t1_size]
    return {"seed": seed, "policy": policy, "recency": recency, "capacity": capacity, "ops": ops}


def all_keys(manager):
    p = manager._policy
    if hasattr(p, "t1"):
        return list(p.t1) + list(p.t2)
    return list(getattr(p, "chunks", None) or getattr(p, "blocks", {}))


def main():
    tree, recency = sys.argv[1], sys.argv[2]
    cases = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    base, manager = load_vllm(tree)
    out = [
        run_case(base, manager, seed, policy, recency)
        for policy in ["lru", "arc"]
        for seed in range(cases)
    ]
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
