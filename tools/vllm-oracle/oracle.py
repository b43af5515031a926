#!/usr/bin/env python3
"""Drive vLLM's own V1 Scheduler (or AsyncScheduler) step by step, with no
model and no GPU, and print one canonical JSON line per step.

    oracle.py CONFIG WORKLOAD            one case to stdout
    oracle.py --batch CASES_DIR          every CASES_DIR/<case>/{config.json,
                                         workload.jsonl} to CASES_DIR/<case>/vllm.jsonl
                                         (one process: vLLM imports in ~20 s)

The formats are described in README.md next to this file. Run it with the
virtual environment that `setup` builds for the config's release; `run`
picks it.

What the harness plays: the engine core's loop (`EngineCore.step` for the
synchronous scheduler, `EngineCore.step_with_batch_queue` with a queue of two
for async scheduling, both in vllm/v1/engine/core.py) and the model runner
(it samples one token for every request that is not a partial prefill, plus
the drafts the workload says were accepted, and proposes `num_spec_tokens`
drafts for every request that sampled, as an n-gram drafter that always
finds a match would). Everything else is vLLM's code.
"""

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
# fake_connector.py is imported by vLLM by module name.
sys.path.insert(0, HERE)
MODEL_DIR = os.path.join(HERE, "model")

# Output token ids live far above any prompt token id the generator uses, and
# are a function of (request, output position) only, so a request that is
# preempted and recomputed regenerates the same tokens (and the same block
# hashes), and no two requests share an output block: pdsim gives each
# request's output its own content segment, which is the same thing.
OUTPUT_TOKEN_BASE = 1_000_000

# A run that has not drained by then is a livelock in the harness or the
# workload (a request that can never fit); fail loudly instead of hanging.
MAX_STEPS = 100_000

CONFIG_KEYS = {
    "release",
    "block_size",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "long_prefill_token_threshold",
    "enable_prefix_caching",
    "scheduling_policy",
    "async_scheduling",
    "speculative",
    "enable_chunked_prefill",
    "mamba",
    "sparse",
    "max_steps",
}
REQUEST_KEYS = {
    "id",
    "arrive_step",
    "prompt",
    "max_tokens",
    "priority",
    "accepted",
    "kv",
    "kv_ready_step",
}

# `speculative.drafter`: the drafting method the scheduler is told of, with
# the lookahead slots it reserves (`VllmConfig.num_lookahead_tokens`,
# vllm/config/vllm.py).
DRAFTERS = {
    "ngram": lambda k: 0,
    "eagle": lambda k: k,
    "dflash": lambda k: k + 1,
    "draft_model": lambda k: k,
}


class InputError(Exception):
    pass


def load_config(path):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}")
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: the engine config must be one JSON object")
    unknown = set(cfg) - CONFIG_KEYS
    if unknown:
        raise InputError(f"{path}: unknown keys {sorted(unknown)}")
    for key in CONFIG_KEYS - {"speculative", "enable_chunked_prefill", "mamba", "sparse", "max_steps"}:
        if key not in cfg:
            raise InputError(f"{path}: missing key `{key}`")
    if cfg["scheduling_policy"] not in ("fcfs", "priority"):
        raise InputError(f"{path}: `scheduling_policy` must be fcfs or priority")
    max_steps = cfg.get("max_steps", MAX_STEPS)
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or not 1 <= max_steps <= MAX_STEPS:
        raise InputError(f"{path}: `max_steps` must be an integer in 1..={MAX_STEPS}")
    spec = cfg.get("speculative")
    if spec is not None:
        if spec.get("method") not in ("ngram", "ngram_gpu"):
            raise InputError(
                f"{path}: `speculative.method`: only ngram and ngram_gpu are supported "
                "(other drafters need a draft model)"
            )
        if not isinstance(spec.get("num_spec_tokens"), int) or spec["num_spec_tokens"] < 1:
            raise InputError(f"{path}: `speculative.num_spec_tokens` must be >= 1")
        unknown = set(spec) - {"method", "num_spec_tokens", "drafter"}
        if unknown:
            raise InputError(f"{path}: `speculative`: unknown keys {sorted(unknown)}")
        if spec.get("drafter", "ngram") not in DRAFTERS:
            raise InputError(f"{path}: `speculative.drafter` must be one of {sorted(DRAFTERS)}")
    mamba = cfg.get("mamba")
    if mamba is not None:
        if set(mamba) != {"groups", "mode"}:
            raise InputError(f"{path}: `mamba` takes `groups` and `mode`")
        if mamba["mode"] not in ("align", "none"):
            raise InputError(f"{path}: `mamba.mode` must be align or none")
        if (mamba["mode"] == "align") != cfg["enable_prefix_caching"]:
            raise InputError(
                f"{path}: `mamba.mode` is align exactly when prefix caching is on "
                "(MambaModelConfig.verify_and_update_config)"
            )
    sparse = cfg.get("sparse")
    if sparse is not None:
        want = {"window_groups", "window", "window_block", "ring_block", "bounded_replay"}
        if set(sparse) != want:
            raise InputError(f"{path}: `sparse` takes {sorted(want)}")
        if cfg["block_size"] % sparse["window_block"]:
            raise InputError(f"{path}: `sparse.window_block` must divide `block_size`")
        if mamba is not None:
            raise InputError(f"{path}: `sparse` and `mamba` are different models")
    return cfg


def load_workload(path):
    reqs = []
    try:
        f = open(path)
    except OSError as e:
        raise InputError(f"{path}: {e}")
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{lineno}: {e}")
            unknown = set(r) - REQUEST_KEYS
            if unknown:
                raise InputError(f"{path}:{lineno}: unknown keys {sorted(unknown)}")
            for key in ("id", "arrive_step", "prompt", "max_tokens"):
                if key not in r:
                    raise InputError(f"{path}:{lineno}: missing key `{key}`")
            if not r["prompt"] or not all(
                isinstance(t, int) and 0 <= t < OUTPUT_TOKEN_BASE for t in r["prompt"]
            ):
                raise InputError(
                    f"{path}:{lineno}: `prompt` must be a non-empty list of token ids "
                    f"in 0..{OUTPUT_TOKEN_BASE}"
                )
            if r.get("kv") is not None:
                if r["kv"] not in ("produce", "consume"):
                    raise InputError(f"{path}:{lineno}: `kv` must be produce or consume")
                if not isinstance(r.get("kv_ready_step"), int):
                    raise InputError(
                        f"{path}:{lineno}: `kv_ready_step` (an integer) goes with `kv`"
                    )
            elif "kv_ready_step" in r:
                raise InputError(f"{path}:{lineno}: `kv_ready_step` without `kv`")
            reqs.append(r)
    ids = [r["id"] for r in reqs]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: request ids must be unique")
    return reqs


class Harness:
    def __init__(self, cfg, reqs):
        import inspect

        import torch
        import vllm.platforms

        # vLLM 0.15.1 picks the CPU platform only for a CPU build or macOS
        # (vllm/platforms/__init__.py cpu_platform_plugin), not from
        # VLLM_TARGET_DEVICE as later releases do; without it the device type
        # cannot be inferred. Later releases detect it themselves.
        if vllm.platforms.cpu_platform_plugin() is None:
            from vllm.platforms.cpu import CpuPlatform

            vllm.platforms._current_platform = CpuPlatform()
        from vllm.config import (
            CacheConfig,
            ModelConfig,
            SchedulerConfig,
            SpeculativeConfig,
            VllmConfig,
        )
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )

        mamba = cfg.get("mamba")
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.utils.hashing import sha256

        self.cfg = cfg
        bs = cfg["block_size"]
        model_config = ModelConfig(
            model=MODEL_DIR,
            skip_tokenizer_init=True,
            max_model_len=cfg["max_model_len"],
            dtype="float16",
            seed=0,
        )
        scheduler_config = SchedulerConfig(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"],
            is_encoder_decoder=False,
            long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
            enable_chunked_prefill=cfg.get("enable_chunked_prefill", True),
            policy=cfg["scheduling_policy"],
            async_scheduling=cfg["async_scheduling"],
        )
        cache_config = CacheConfig(
            block_size=bs,
            enable_prefix_caching=cfg["enable_prefix_caching"],
        )
        spec = cfg.get("speculative")
        speculative_config = None
        if spec is not None:
            speculative_config = SpeculativeConfig(
                method=spec["method"],
                num_speculative_tokens=spec["num_spec_tokens"],
                prompt_lookup_max=4,
                prompt_lookup_min=1,
            )
        # P/D: the scripted connector (fake_connector.py) stands in for
        # NixlConnector when any request produces or consumes KV.
        import fake_connector

        fake_connector.SCRIPT.clear()
        kv_transfer_config = None
        if any(r.get("kv") for r in reqs):
            from vllm.config import KVTransferConfig

            for r in reqs:
                if r.get("kv"):
                    fake_connector.SCRIPT[f"{r['id']:010d}"] = (r["kv"], r["kv_ready_step"])
            kv_transfer_config = KVTransferConfig(
                kv_connector="FakeConnector",
                kv_connector_module_path="fake_connector",
                kv_role="kv_both",
            )
        vllm_config = VllmConfig(
            model_config=model_config,
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            speculative_config=speculative_config,
            kv_transfer_config=kv_transfer_config,
        )
        # The CPU platform turns async scheduling off (vllm/platforms/cpu.py,
        # check_and_update_config); the class chosen below is what makes the
        # difference, and the flag is put back so the config says what runs.
        vllm_config.scheduler_config.async_scheduling = cfg["async_scheduling"]
        # The CPU platform may also override the block size; the oracle runs
        # the block size asked for, as a GPU engine would.
        vllm_config.cache_config.block_size = bs
        cache_config.num_gpu_blocks = cfg["num_gpu_blocks"]
        attention = KVCacheGroupSpec(
            ["layer"],
            FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32),
        )
        groups = [attention]
        extra_config = {}
        if mamba is not None:
            # A hybrid (Nemotron-H): its Mamba groups come first, as its
            # first layer is a Mamba2 mixer (_get_kv_cache_groups_uniform_
            # page_size keeps layer order), each state padded to the
            # attention page. In align mode the state block is the
            # attention block; in none mode it spans max_model_len
            # (MambaModelConfig.verify_and_update_config). What the engine
            # would resolve on its own is set by hand: the cache mode, and
            # the retention interval get_kv_cache_config copies from the
            # cache config (0 by default).
            from vllm.v1.kv_cache_interface import MambaSpec

            mode = mamba["mode"]
            mamba_bs = bs if mode == "align" else cfg["max_model_len"]
            page = attention.kv_cache_spec.page_size_bytes
            groups = [
                KVCacheGroupSpec(
                    [f"mamba{g}"],
                    MambaSpec(
                        block_size=mamba_bs,
                        shapes=((1,),),
                        dtypes=(torch.float32,),
                        page_size_padded=page,
                        mamba_cache_mode=mode,
                    ),
                )
                for g in range(mamba["groups"])
            ] + [attention]
            vllm_config.cache_config.mamba_cache_mode = mode
            vllm_config.cache_config.mamba_block_size = mamba_bs
            extra_config["prefix_cache_retention_interval"] = (
                vllm_config.cache_config.prefix_cache_retention_interval
            )
        sparse = cfg.get("sparse")
        if sparse is not None:
            # DeepSeek-V4.1 (research/deepseek-v4.1-in-vllm-0.31.0.md §2):
            # sliding-window groups of `window_block`-token blocks over a
            # `window`-token window (bounded replay: not prefix-cacheable,
            # a hit's last window recomputed), the full group of compressed
            # latents and indexer keys (MLA, `block_size`), and the
            # compressor's ring, one block a request. Layer 0 is window-only,
            # so the window groups come first.
            from vllm.v1.kv_cache_interface import (
                CircularBufferSpec,
                MLAAttentionSpec,
                SlidingWindowMLASpec,
            )

            full = MLAAttentionSpec(
                block_size=bs, num_kv_heads=1, head_size=8, dtype=torch.uint8
            )
            window = [
                KVCacheGroupSpec(
                    [f"swa{g}"],
                    SlidingWindowMLASpec(
                        block_size=sparse["window_block"],
                        num_kv_heads=1,
                        head_size=8,
                        dtype=torch.uint8,
                        sliding_window=sparse["window"],
                        bounded_replay=sparse["bounded_replay"],
                        model_version="deepseek_v4",
                    ),
                )
                for g in range(sparse["window_groups"])
            ]
            groups = window + [KVCacheGroupSpec(["full"], full)]
            if sparse["ring_block"]:
                groups.append(
                    KVCacheGroupSpec(
                        ["ring"],
                        CircularBufferSpec(
                            block_size=sparse["ring_block"],
                            num_kv_heads=1,
                            head_size=8,
                            dtype=torch.uint8,
                        ),
                    )
                )
            extra_config["prefix_cache_retention_interval"] = (
                vllm_config.cache_config.prefix_cache_retention_interval
            )
        kv_cache_config = KVCacheConfig(
            num_blocks=cfg["num_gpu_blocks"],
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            **extra_config,
        )
        drafter = spec.get("drafter", "ngram") if spec is not None else "ngram"
        if drafter != "ngram":
            # A drafter with a model, as the scheduler sees it. EAGLE, DFlash
            # and a draft model need a draft model, which this harness does
            # not have, but the scheduler and its KV cache manager learn of
            # the method only through `SpeculativeConfig.use_eagle()`,
            # `use_dflash()` and `uses_draft_model()`, read when the
            # Scheduler is built: `VllmConfig.num_lookahead_tokens`
            # (lookahead slots in every `allocate_slots` and in
            # `_spec_decode_step_blocks`: num_speculative_tokens for EAGLE
            # and the draft model, one more for DFlash),
            # `num_prefill_lookahead_tokens` (1 for the EAGLE family, which
            # `_reserve_prefill_lookahead` leaves alone) and
            # `use_eagle_block_drop()` (the EAGLE family drops a prefix
            # hit's last block, `drop_eagle_block`). So the n-gram config
            # answers those as the method would, on this instance, before the
            # Scheduler reads them; the drafts come from this harness either
            # way.
            sc = vllm_config.speculative_config
            k = spec["num_spec_tokens"]
            if drafter in ("eagle", "dflash"):
                object.__setattr__(sc, "use_eagle", lambda: True)
            if drafter == "dflash":
                object.__setattr__(sc, "use_dflash", lambda: True)
            if drafter == "draft_model":
                object.__setattr__(sc, "uses_draft_model", lambda: True)
            assert vllm_config.num_lookahead_tokens == DRAFTERS[drafter](k)
        cls = AsyncScheduler if cfg["async_scheduling"] else Scheduler
        # `hash_block_size` is newer than 0.15.1's Scheduler.__init__.
        extra = {}
        # The engine core's scheduler block size (`resolve_kv_cache_block_sizes`,
        # vllm/v1/core/kv_cache_utils.py): one group's block, or the LCM of
        # the groups' (a none-mode Mamba block spans max_model_len), hashes
        # at the GCD when every Mamba group aligns.
        sched_bs = bs
        hash_bs = bs
        if mamba is not None and mamba["mode"] != "align":
            import math

            sched_bs = hash_bs = math.lcm(bs, cfg["max_model_len"])
        if sparse is not None and not sparse["bounded_replay"]:
            # The window groups are prefix-cacheable: hashes at the GCD of
            # the cacheable groups' blocks, the window block.
            hash_bs = sparse["window_block"]
        # AsyncScheduler passes its keyword arguments on to Scheduler, whose
        # signature says whether the release knows the parameter.
        if "hash_block_size" in inspect.signature(Scheduler.__init__).parameters:
            extra["hash_block_size"] = hash_bs
        self.sched = cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=sched_bs,
            log_stats=False,
            **extra,
        )
        # 0.15.1's Request.__init__ requires `eos_token_id` (None: the
        # requests ignore EOS); later releases dropped the argument.
        self.request_extra = {}
        from vllm.v1.request import Request

        if "eos_token_id" in inspect.signature(Request.__init__).parameters:
            self.request_extra["eos_token_id"] = None
        # sha256 over the pickled tokens: deterministic across processes.
        init_none_hash(sha256)
        self.block_hasher = get_request_block_hasher(hash_bs, sha256)
        self.num_spec = spec["num_spec_tokens"] if spec else 0
        self.async_mode = cfg["async_scheduling"]

    def make_request(self, r):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)
        return Request(
            # Zero-padded so vLLM's string comparison of ids (Request.__lt__,
            # the last priority tie-break) orders them as the numbers do.
            request_id=f"{r['id']:010d}",
            prompt_token_ids=list(r["prompt"]),
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(r["arrive_step"]),
            priority=r.get("priority", 0),
            block_hasher=self.block_hasher,
            **self.request_extra,
        )

    def model_output(self, so, samples, accepted_of, verify_count):
        """The ModelRunnerOutput for scheduler output `so`, built when the
        engine core would receive it. `samples[req_id]` says whether the
        request was past its prompt when scheduled (not a partial prefill)."""
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        req_ids = list(so.num_scheduled_tokens.keys())
        sampled = []
        for rid in req_ids:
            if not samples[rid]:
                sampled.append([])
                continue
            drafts = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            accepted = 0
            if drafts:
                idx = verify_count.get(rid, 0)
                verify_count[rid] = idx + 1
                forced = accepted_of.get(rid) or []
                accepted = min(forced[idx] if idx < len(forced) else 0, drafts)
            req = self.sched.requests.get(rid)
            base = len(req.output_token_ids) if req is not None else 0
            num = int(rid)
            sampled.append(
                [
                    OUTPUT_TOKEN_BASE + num * 100_000 + base + j
                    for j in range(1 + accepted)
                ]
            )
        kv_out = None
        connector = self.sched.connector
        if connector is not None:
            recv, send = connector.take_finished(connector.current_step)
            kv_out = KVConnectorOutput(finished_recving=recv, finished_sending=send)
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=kv_out,
        )

    def propose_drafts(self, so, samples):
        """Synchronous spec decoding: after each step the engine core hands the
        drafter's proposals to the scheduler (EngineCore.post_step)."""
        from vllm.v1.outputs import DraftTokenIds

        if not self.num_spec or so.total_num_scheduled_tokens == 0:
            return
        ids, drafts = [], []
        for rid in so.num_scheduled_tokens:
            req = self.sched.requests.get(rid)
            if req is None or req.is_finished():
                continue
            ids.append(rid)
            # The n-gram proposer drafts nothing for a request that sampled
            # nothing, a partial prefill (NgramProposer.propose,
            # vllm/v1/spec_decode/ngram_proposer.py).
            if not samples[rid]:
                drafts.append([])
                continue
            # Placeholder token ids: the scheduler only counts them.
            drafts.append([OUTPUT_TOKEN_BASE - 1] * self.num_spec)
        if ids:
            self.sched.update_draft_token_ids(DraftTokenIds(ids, drafts))

    def run(self, reqs, out):
        sched = self.sched
        by_step = {}
        for r in reqs:
            by_step.setdefault(r["arrive_step"], []).append(r)
        last_arrival = max(by_step) if by_step else -1
        accepted_of = {f"{r['id']:010d}": r.get("accepted") for r in reqs}
        verify_count = {}
        queue = []  # async batch queue: (scheduler output, samples), oldest first
        step = 0
        while True:
            for r in by_step.get(step, []):
                sched.add_request(self.make_request(r))
            # Done when every request has arrived and finished. (The engine
            # core calls schedule() once more to report the finished ids;
            # that call decides nothing and is not printed.)
            # Requests held for a P/D transfer stay in `sched.requests`.
            if (
                step > last_arrival
                and sched.get_num_unfinished_requests() == 0
                and not sched.requests
                and not queue
            ):
                break
            # A case that spins (a livelock of vLLM's own) is compared over
            # its first `max_steps` steps and stops there.
            if step >= self.cfg.get("max_steps", MAX_STEPS):
                if "max_steps" in self.cfg:
                    break
                raise RuntimeError(f"not drained after {MAX_STEPS} steps")
            scheduled, drafts, preempted, finished = {}, {}, [], []
            if sched.connector is not None:
                sched.connector.current_step = step
            if not self.async_mode:
                if sched.has_requests():
                    so = sched.schedule()
                    samples = self.samples(so)
                    scheduled, drafts, preempted = self.describe(so)
                    finished = self.update(so, samples, accepted_of, verify_count)
                    self.propose_drafts(so, samples)
            else:
                # EngineCore.step_with_batch_queue with batch_queue_size 2.
                executed = False
                if sched.has_requests():
                    so = sched.schedule()
                    executed = so.total_num_scheduled_tokens > 0
                    queue.append((so, self.samples(so)))
                    scheduled, drafts, preempted = self.describe(so)
                    if len(queue) < 2 and (executed or sched.has_requests()):
                        queue_done = True
                    else:
                        queue_done = False
                else:
                    queue_done = not queue
                if not queue_done:
                    old, samples = queue.pop(0)
                    finished = self.update(old, samples, accepted_of, verify_count)
            free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
            computed = {str(int(r.request_id)): r.num_computed_tokens for r in sched.running}
            line = {
                "step": step,
                "scheduled": scheduled,
                "drafts": drafts,
                "preempted": preempted,
                "finished": finished,
                "computed": computed,
                "free_blocks": free,
            }
            out.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
            step += 1

    def samples(self, so):
        # `is_prefill_chunk` is set in _update_after_schedule: the request
        # will not sample this step.
        # 0.15.1 has no such flag: there the model runner samples for a
        # request whose computed tokens reach its tokens after the step
        # (v1/worker/gpu_model_runner.py, `discard_request_mask`).
        return {
            rid: (
                not req.is_prefill_chunk
                if hasattr(req, "is_prefill_chunk")
                else req.num_computed_tokens >= req.num_tokens
            )
            for rid in so.num_scheduled_tokens
            for req in (self.sched.requests[rid],)
        }

    def describe(self, so):
        scheduled = {str(int(k)): v for k, v in so.num_scheduled_tokens.items()}
        drafts = {
            str(int(k)): len(v)
            for k, v in so.scheduled_spec_decode_tokens.items()
            if len(v) > 0
        }
        preempted = sorted(int(k) for k in (so.preempted_req_ids or ()))
        return scheduled, drafts, preempted

    def update(self, so, samples, accepted_of, verify_count):
        mro = self.model_output(so, samples, accepted_of, verify_count)
        outputs = self.sched.update_from_output(so, mro)
        finished = []
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    finished.append(int(o.request_id))
        return sorted(finished)


def run_case(config_path, workload_path, out):
    cfg = load_config(config_path)
    reqs = load_workload(workload_path)
    Harness(cfg, reqs).run(reqs, out)


def main(argv):
    import logging

    logging.disable(logging.WARNING)
    if len(argv) == 3 and argv[1] == "--batch":
        cases_dir = argv[2]
        names = sorted(
            d
            for d in os.listdir(cases_dir)
            if os.path.isfile(os.path.join(cases_dir, d, "config.json"))
        )
        for i, name in enumerate(names):
            d = os.path.join(cases_dir, name)
            tmp = os.path.join(d, "vllm.jsonl.tmp")
            try:
                with open(tmp, "w") as out:
                    run_case(os.path.join(d, "config.json"), os.path.join(d, "workload.jsonl"), out)
            except Exception as e:  # noqa: BLE001 - one case's failure is reported, the batch goes on
                # vLLM refused the case or did not drain it: no decisions to
                # compare. The reason goes to vllm.error; the caller decides.
                os.remove(tmp)
                with open(os.path.join(d, "vllm.error"), "w") as err:
                    err.write(f"{type(e).__name__}: {e}\n")
                print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
                continue
            os.replace(tmp, os.path.join(d, "vllm.jsonl"))
            if (i + 1) % 25 == 0 or i + 1 == len(names):
                print(f"[{i + 1}/{len(names)}] {name}", file=sys.stderr)
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    run_case(argv[1], argv[2], sys.stdout)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
