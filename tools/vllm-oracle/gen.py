#!/usr/bin/env python3
"""Seeded random workloads for the differential oracle.

    gen.py OUT_DIR RELEASE [--seed S] [--per-family N]

writes OUT_DIR/<case>/config.json and OUT_DIR/<case>/workload.jsonl for
every family below, N cases each (default 40), the case name being
<family>-<index>. The same seed gives the same files byte for byte (Python's
`random.Random` with an explicit seed, no clock). Only the standard library
is used, so it runs without the virtual environment.

Families, each aimed at one group of decisions:
  share        same-step prefix sharing: bursts of requests over shared
               prefixes (block-aligned and not), prefix caching on or off
  press-fcfs   KV pressure under fcfs: a small pool, preemption and recompute
  press-prio   KV pressure under priority: random priorities, victims
  chunk        chunked prefill: small token budgets, long prompts, the
               long-prefill cap (often on)
  seqcap       the sequence cap: max_num_seqs 1..4, many requests
  spec         speculative decoding (ngram), one acceptance count per case
               (pdsim can force only that)
  spec-vary    speculative decoding with acceptance varied per request and
               step
  async        async scheduling (AsyncScheduler) over mixed workloads
  async-press  async scheduling under KV pressure: preemption while a step
               is in flight (stale output), fcfs and priority, drafts often
  async-chunk  async scheduling with chunked prefill: small budgets, long
               prompts, the long-prefill cap, the sequence cap
  async-pd     async scheduling with P/D through the scripted connector
  nochunk      enable_chunked_prefill false: whole prompts or nothing
  pd-gate      the reserve gate on async KV loads: decode-side requests
               parked beside chunked prefills in a tight pool, drafts often
  mixed        everything drawn at random
  pd           P/D through the scripted connector: prefill-side requests
               (kv: produce, one output token, blocks held until
               kv_ready_step), decode-side ones (kv: consume, KV arriving at
               kv_ready_step) and local ones, a tight pool half the time
  hybrid       a hybrid model's Mamba groups (0.31.0 only): states cached at
               block boundaries, chunks cut to reach them, hits only where
               every group kept a state, shared prefixes and resent prompts
  hybrid-async the same under async scheduling
  hybrid-press the same in a tight pool (preemption), fcfs and priority
  hybrid-none  prefix caching off: one state block a group, updated in place
  sparse       DeepSeek-V4.1's KV groups (0.31.0 only): sliding-window groups
               of small blocks, the full group, the compressor ring; bounded
               replay (hits within the window dropped, longer ones
               recompute it), shared prefixes and resent prompts
  sparse-async the same under async scheduling
  sparse-press the same in a tight pool (preemption), fcfs and priority
  sparse-cached the window groups in the prefix cache (no bounded replay):
               window tails kept at reachable boundaries, sync or async
  eagle        a drafter with a model (the oracle's `drafter` switch:
               EAGLE half the time, DFlash or a draft model otherwise):
               lookahead slots in every allocation (num_spec_tokens, one
               more for DFlash) and, for the EAGLE family, a prefix hit's
               last block dropped; acceptance varied
  eagle-press  the same in a tight pool (preemption), fcfs and priority
  eagle-async  the same under async scheduling, often in a tight pool
  eagle-pd     the same with P/D's decode side: async KV loads parked
               without lookahead slots, beside 0.31.0's spec-step reserve
"""

import argparse
import json
import os
import random

FAMILIES = [
    "share",
    "press-fcfs",
    "press-prio",
    "chunk",
    "seqcap",
    "spec",
    "spec-vary",
    "async",
    "mixed",
    "async-press",
    "async-chunk",
    "async-pd",
    "pd",
    "pd-gate",
    "nochunk",
    "hybrid",
    "hybrid-async",
    "hybrid-press",
    "hybrid-none",
    "sparse",
    "sparse-async",
    "sparse-press",
    "sparse-cached",
    "eagle",
    "eagle-press",
    "eagle-async",
    "eagle-pd",
    "spin",
    "pd-prio",
]
# vLLM 0.31.0's MambaManager and DeepSeek-V4.1 layout are the ones pdsim
# follows.
HYBRID_RELEASES = {"0.31.0"}


def prompt_pool(rng, n, lo, hi):
    """Shared prefixes: random token lists the requests cut from."""
    return [[rng.randrange(1, 9000) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def make_prompt(rng, pool, bs, share_p, max_len):
    """A prompt: maybe a cut of a shared prefix (block aligned half the
    time), then a unique tail."""
    prompt = []
    if pool and rng.random() < share_p:
        base = rng.choice(pool)
        if rng.random() < 0.5:
            cut = (rng.randint(0, len(base)) // bs) * bs
        else:
            cut = rng.randint(1, len(base))
        prompt = base[:cut]
    tail = rng.randint(1 if prompt else 2, max(2, max_len // 3))
    prompt = prompt + [rng.randrange(1, 9000) for _ in range(tail)]
    return prompt[:max_len]


def base_config(rng, release):
    bs = rng.choice([16, 16, 16, 8, 32])
    return {
        "release": release,
        "block_size": bs,
        "num_gpu_blocks": 2000,
        "max_num_seqs": rng.choice([4, 8, 16, 32]),
        "max_num_batched_tokens": rng.choice([64, 128, 256, 512, 1024]),
        "max_model_len": 4096,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "scheduling_policy": "fcfs",
        "async_scheduling": False,
    }


def gate_shape(rng, cfg):
    """Decode-side requests parked beside chunked prefills in a tight pool
    (the reserve gate on async loads), sync or async: the config's budgets,
    then (roles, max_prompt, n_req, max_out)."""
    cfg["async_scheduling"] = rng.random() < 0.5
    cfg["max_num_batched_tokens"] = rng.choice([32, 48, 64, 100])
    cfg["max_num_seqs"] = rng.randint(2, 8)
    roles = "consume"
    max_prompt = rng.choice([160, 320, 480])
    n_req = rng.randint(6, 14)
    max_out = rng.choice([4, 12, 24])
    return roles, max_prompt, n_req, max_out


def case(rng, family, release):
    cfg = base_config(rng, release)
    bs = cfg["block_size"]
    n_req = rng.randint(4, 16)
    max_prompt = 160
    max_out = 24
    arrive_span = rng.randint(0, 20)
    share_p = 0.5
    burst = rng.random() < 0.5
    spec_k = 0
    accept_mode = None
    prio = False

    if family == "share":
        share_p = 0.9
        burst = True
        cfg["enable_prefix_caching"] = rng.random() < 0.85
        cfg["max_num_batched_tokens"] = rng.choice([256, 512, 1024, 2048])
    elif family in ("press-fcfs", "press-prio"):
        prio = family == "press-prio"
        cfg["scheduling_policy"] = "priority" if prio else "fcfs"
        n_req = rng.randint(6, 16)
        max_prompt = rng.choice([48, 96, 160])
        max_out = rng.choice([16, 32, 48])
    elif family == "chunk":
        cfg["max_num_batched_tokens"] = rng.choice([16, 32, 48, 64, 100])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 8, 16, 24, 40])
        max_prompt = rng.choice([200, 400, 600])
        n_req = rng.randint(3, 10)
        max_out = 12
    elif family == "seqcap":
        cfg["max_num_seqs"] = rng.randint(1, 4)
        n_req = rng.randint(6, 16)
        max_out = rng.choice([4, 12, 24])
    elif family in ("spec", "spec-vary"):
        spec_k = rng.randint(1, 5)
        accept_mode = "const" if family == "spec" else "vary"
        max_out = rng.choice([12, 24, 40])
    elif family == "async":
        cfg["async_scheduling"] = True
        if rng.random() < 0.3:
            cfg["scheduling_policy"] = "priority"
            prio = True
        if rng.random() < 0.3:
            spec_k = rng.randint(1, 4)
            accept_mode = "const"
    elif family == "async-press":
        cfg["async_scheduling"] = True
        prio = rng.random() < 0.5
        cfg["scheduling_policy"] = "priority" if prio else "fcfs"
        n_req = rng.randint(6, 16)
        max_prompt = rng.choice([48, 96, 160])
        max_out = rng.choice([16, 32, 48])
        if rng.random() < 0.4:
            spec_k = rng.randint(1, 4)
            accept_mode = rng.choice(["const", "vary"])
    elif family == "async-chunk":
        cfg["async_scheduling"] = True
        cfg["max_num_batched_tokens"] = rng.choice([16, 32, 48, 64, 100])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 8, 16, 24, 40])
        cfg["max_num_seqs"] = rng.randint(1, 8)
        max_prompt = rng.choice([200, 400, 600])
        n_req = rng.randint(3, 10)
        max_out = 12
    elif family == "async-pd":
        cfg["async_scheduling"] = True
        roles = rng.choice(["produce", "consume", "both"])
        max_out = rng.choice([4, 12, 24])
    elif family == "nochunk":
        cfg["enable_chunked_prefill"] = False
        cfg["async_scheduling"] = rng.random() < 0.5
        cfg["max_num_batched_tokens"] = rng.choice([192, 256, 384])
        # vLLM refuses a budget below max_model_len without chunking.
        cfg["max_model_len"] = cfg["max_num_batched_tokens"]
        cfg["max_num_seqs"] = rng.randint(2, 8)
        max_prompt = 150
        max_out = rng.choice([8, 16, 32])
    elif family == "pd-gate":
        roles, max_prompt, n_req, max_out = gate_shape(rng, cfg)
        if rng.random() < 0.5:
            spec_k = rng.randint(1, 4)
            accept_mode = "const"
    elif family == "mixed":
        cfg["scheduling_policy"] = rng.choice(["fcfs", "priority"])
        prio = cfg["scheduling_policy"] == "priority"
        cfg["long_prefill_token_threshold"] = rng.choice([0, 0, 16, 64])
        cfg["enable_prefix_caching"] = rng.random() < 0.8
        cfg["max_num_seqs"] = rng.randint(1, 16)
        cfg["async_scheduling"] = rng.random() < 0.25
        if rng.random() < 0.3:
            spec_k = rng.randint(1, 4)
            accept_mode = rng.choice(["const", "vary"])
        max_prompt = rng.choice([64, 160, 320])
    elif family == "pd":
        roles = rng.choice(["produce", "consume", "both"])
        max_out = rng.choice([4, 12, 24])
    elif family == "pd-prio":
        # Requests whose KV arrived beside waiting ones of other priorities:
        # 0.31.0 takes the former first (`kv_holding_waiting`), 0.29.0
        # compares the two queues' heads.
        cfg["scheduling_policy"] = "priority"
        prio = True
        cfg["async_scheduling"] = rng.random() < 0.5
        roles = rng.choice(["consume", "both"])
        n_req = rng.randint(6, 16)
        max_out = rng.choice([4, 12, 24])
    elif family.startswith("hybrid"):
        # Blocks stand for Mamba-aligned attention blocks (1,040 tokens for
        # Nemotron-H-8B), so prompts span several and budgets are cut
        # around them.
        share_p = 0.8
        cfg["max_num_batched_tokens"] = rng.choice([32, 48, 64, 100, 256])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 0, 0, 24, 40])
        max_prompt = rng.choice([100, 200, 320])
        max_out = rng.choice([8, 24, 40])
        cfg["enable_prefix_caching"] = family != "hybrid-none"
        cfg["async_scheduling"] = family == "hybrid-async" or (
            family in ("hybrid-press", "hybrid-none") and rng.random() < 0.5
        )
        if family == "hybrid-press" and rng.random() < 0.5:
            cfg["scheduling_policy"] = "priority"
            prio = True
        cfg["mamba"] = {
            "groups": rng.randint(1, 6),
            "mode": "align" if cfg["enable_prefix_caching"] else "none",
        }
    elif family.startswith("sparse"):
        # The window (128 tokens for DeepSeek-V4.1) equals the full block,
        # the window block is a quarter of it (32), the ring block 8.
        share_p = 0.8
        bs = cfg["block_size"] = rng.choice([16, 32])
        cfg["max_num_batched_tokens"] = rng.choice([32, 48, 64, 100, 256])
        cfg["long_prefill_token_threshold"] = rng.choice([0, 0, 0, 24, 40])
        max_prompt = rng.choice([100, 200, 320])
        max_out = rng.choice([8, 24, 40])
        cfg["async_scheduling"] = family == "sparse-async" or (
            family in ("sparse-press", "sparse-cached") and rng.random() < 0.5
        )
        if family == "sparse-press" and rng.random() < 0.5:
            cfg["scheduling_policy"] = "priority"
            prio = True
        cfg["sparse"] = {
            "window_groups": rng.randint(1, 5),
            "window": bs,
            "window_block": bs // 4,
            "ring_block": rng.choice([8, None]),
            "bounded_replay": family != "sparse-cached",
        }
    elif family.startswith("eagle"):
        drafter = rng.choice(["eagle", "eagle", "dflash", "draft_model"])
        spec_k = rng.randint(1, 4)
        accept_mode = rng.choice(["const", "vary"])
        max_out = rng.choice([12, 24, 40])
        if family == "eagle-press":
            prio = rng.random() < 0.5
            n_req = rng.randint(6, 16)
            max_prompt = rng.choice([48, 96, 160])
        elif family == "eagle-async":
            cfg["async_scheduling"] = True
            prio = rng.random() < 0.3
            n_req = rng.randint(6, 16)
            max_prompt = rng.choice([48, 96, 160])
        elif family == "eagle-pd":
            roles, max_prompt, n_req, max_out = gate_shape(rng, cfg)
        cfg["scheduling_policy"] = "priority" if prio else "fcfs"
    else:
        raise ValueError(family)

    # vLLM refuses a token budget below the sequence cap
    # (SchedulerConfig: max_num_batched_tokens >= max_num_seqs); clamping
    # after the draws leaves every valid case as it was.
    cfg["max_num_seqs"] = min(cfg["max_num_seqs"], cfg["max_num_batched_tokens"])

    if spec_k:
        # vLLM refuses async scheduling with the CPU n-gram drafter; its GPU
        # twin is allowed, and both reserve no lookahead slots.
        method = "ngram_gpu" if cfg["async_scheduling"] else "ngram"
        cfg["speculative"] = {"method": method, "num_spec_tokens": spec_k}
        if family.startswith("eagle"):
            cfg["speculative"]["drafter"] = drafter

    pool = prompt_pool(rng, rng.randint(1, 3), bs, max(bs + 1, max_prompt))
    reqs = []
    const_accept = rng.randint(0, spec_k) if spec_k else 0
    for i in range(n_req):
        prompt = make_prompt(rng, pool, bs, share_p, max_prompt)
        max_tokens = rng.randint(1, max_out)
        if burst and rng.random() < 0.6:
            arrive = 0
        else:
            arrive = rng.randint(0, arrive_span)
        r = {"id": i, "arrive_step": arrive, "prompt": prompt, "max_tokens": max_tokens}
        if prio:
            r["priority"] = rng.randint(0, 3)
        if family in ("pd", "async-pd", "pd-gate", "eagle-pd", "pd-prio") and rng.random() < (
            0.5 if family in ("pd-gate", "eagle-pd") else 0.75
        ):
            kind = roles if roles != "both" else rng.choice(["produce", "consume"])
            r["kv"] = kind
            if kind == "produce":
                # The P/D proxy sends the prefill side max_tokens 1.
                r["max_tokens"] = 1
            r["kv_ready_step"] = arrive + rng.randint(0, 12)
        if spec_k:
            if accept_mode == "const":
                r["accepted"] = [const_accept] * max_tokens
            else:
                r["accepted"] = [rng.randint(0, spec_k) for _ in range(max_tokens)]
        reqs.append(r)
    reqs.sort(key=lambda r: (r["arrive_step"], r["id"]))

    # The pool: plenty, or tight enough to preempt but never too small for
    # one request alone (vLLM would wait forever; so would pdsim).
    # A model drafter's lookahead slots come on top of the drafts (one more
    # for DFlash), and an async load must fit beside 0.31.0's spec-step
    # reserve.
    lookahead = 0
    if family.startswith("eagle"):
        lookahead = spec_k + 1 if drafter == "dflash" else spec_k
    need = max(
        -(-(len(r["prompt"]) + r["max_tokens"] + spec_k + 1 + lookahead) // bs) for r in reqs
    )
    if lookahead:
        need += -(-(1 + spec_k + lookahead) // bs)
    total = sum(-(-(len(r["prompt"]) + r["max_tokens"]) // bs) for r in reqs)
    if "mamba" in cfg:
        # Up to two states a group a request, and a hit state besides.
        states = 3 * cfg["mamba"]["groups"]
        need += states
        total += states * len(reqs)
    if "sparse" in cfg:
        # The window groups hold a request's window and its chunk in flight
        # (the admission cap, in small blocks), the ring one block.
        sp = cfg["sparse"]
        cap = -(-(sp["window"] - 1 + 2 * cfg["max_num_batched_tokens"]) // sp["window_block"]) + 1
        longest = max(len(r["prompt"]) + r["max_tokens"] for r in reqs)
        window = sp["window_groups"] * (min(-(-longest // sp["window_block"]), cap) + 1) + 1
        need += window
        total += window * len(reqs)
    if family == "sparse-press" or (family == "sparse-cached" and rng.random() < 0.5):
        # The window shrinks once a prefill ends, so the pool is made
        # tighter than the others' for preemption to happen.
        cfg["num_gpu_blocks"] = 1 + rng.randint(need + 1, need + 1 + total // 8)
    elif family in (
        "press-fcfs",
        "press-prio",
        "async-press",
        "pd-gate",
        "hybrid-press",
        "sparse-press",
        "eagle-press",
        "eagle-pd",
    ) or (
        family == "eagle-async" and rng.random() < 0.6
    ) or (
        family in ("mixed", "pd", "async-pd", "pd-prio") and rng.random() < 0.5
    ):
        cfg["num_gpu_blocks"] = 1 + max(need + 1, rng.randint(need + 1, max(need + 2, total // 2)))
    else:
        cfg["num_gpu_blocks"] = 1 + max(need + 1, total + rng.randint(0, 50))
    return cfg, reqs


def spin_case(rng, release):
    """A few long requests that together need about the whole pool, under
    async scheduling with a KV connector (one request moves KV), so block
    frees are deferred: vLLM 0.29.0 preempts victims whose blocks wait for
    the step in flight and can spin for ever, each request admitted again
    on its cached prefix and preempted before any produces a token. The
    case is compared over its first `max_steps` steps; on 0.31.0, which
    spares such a victim, the same cases drain."""
    bs = 16
    k = rng.randint(1, 3)
    drafter = rng.choice(["ngram", "eagle"])
    lookahead = k if drafter == "eagle" else 0
    usable = rng.randint(12, 60)
    n = rng.randint(2, 4)
    cfg = {
        "release": release,
        "block_size": bs,
        "num_gpu_blocks": usable + 1,
        "max_num_seqs": 8,
        "max_num_batched_tokens": rng.choice([64, 128, 256, 512]),
        "max_model_len": 4096,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "scheduling_policy": rng.choice(["fcfs", "priority"]),
        "async_scheduling": True,
        "speculative": {"method": "ngram_gpu", "num_spec_tokens": k, "drafter": drafter},
        "max_steps": 400,
    }
    reqs = []
    for i in range(n):
        prompt = [rng.randrange(1, 9000) for _ in range(rng.randint(bs * usable // (n + 1), bs * usable // n))]
        out = rng.randint(8, 80)
        # Each request alone fits at its longest, with its drafts and
        # lookahead slots (else it could never finish, spin or not).
        while out > 1 and -(-(len(prompt) + out + k + 1 + lookahead) // bs) > usable:
            out -= 1
        while -(-(len(prompt) + out + k + 1 + lookahead) // bs) > usable:
            prompt.pop()
        r = {"id": i, "arrive_step": rng.randint(0, 3), "prompt": prompt, "max_tokens": out}
        if cfg["scheduling_policy"] == "priority":
            r["priority"] = rng.randint(0, 1)
        if i == 0:
            r["kv"] = rng.choice(["consume", "produce"])
            if r["kv"] == "produce":
                r["max_tokens"] = 1
            r["kv_ready_step"] = r["arrive_step"] + rng.randint(0, 6)
        r["accepted"] = [rng.randint(0, k) for _ in range(r["max_tokens"])]
        reqs.append(r)
    reqs.sort(key=lambda r: (r["arrive_step"], r["id"]))
    return cfg, reqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("release")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--per-family", type=int, default=31)
    args = ap.parse_args()
    # One stream per (release, family, index): adding a family or changing
    # the count leaves the other cases as they were.
    for family in FAMILIES:
        if family.startswith(("hybrid", "sparse")) and args.release not in HYBRID_RELEASES:
            continue
        for i in range(args.per_family):
            rng = random.Random(f"{args.seed}/{args.release}/{family}/{i}")
            if family == "spin":
                cfg, reqs = spin_case(rng, args.release)
            else:
                cfg, reqs = case(rng, family, args.release)
            d = os.path.join(args.out_dir, f"{family}-{i:03d}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(json.dumps(cfg, sort_keys=True) + "\n")
            with open(os.path.join(d, "workload.jsonl"), "w") as f:
                for r in reqs:
                    f.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
