"""bench/sched_nano.py: nano-vllm's own ``Scheduler`` on bench.sched's workloads.

nano-vllm is not part of this repository: its sources are imported from ``--nanovllm-src`` /
``$NANOVLLM_SRC`` (default /tmp/nanovllm_src). Its package ``__init__`` (the model runner:
torch, flash-attn) is skipped by creating ``nanovllm`` as a bare package; ``engine/scheduler.py``,
``block_manager.py``, ``sequence.py``, ``config.py`` and ``sampling_params.py`` run unmodified
(they need numpy, xxhash and transformers). ``Config`` wants a model folder: a temporary one
holds a ``config.json`` (no weights, nothing fetched).

How it is driven (docs/benchmarks.md, bench.sched): the token streams, ``max_num_seqs`` and
``max_num_batched_tokens`` of kvpool's workload; ``kvcache_block_size`` 256, the smallest
``Config`` accepts (kvpool's workloads use 16), so ``num_kvcache_blocks`` holds kvpool's token
capacity in 256-token blocks (per sequence for decode, rounded up; over the pool for mixed,
rounded down). ``--nanovllm-block-size 16`` sets kvpool's block size past that check (on the
Config after it is built, and on ``Sequence.block_size``): a side figure, not nano-vllm as it
ships. Per step ``schedule()`` then ``postprocess(seqs, [5] * n, is_prefill)``; decode
outputs never end (``ignore_eos``, ``max_tokens`` 2**20). nano-vllm has no host pool: under
mixed256 it preempts by recompute (its only mode), counted by wrapping the instance's
``preempt`` (one extra call per preemption).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import random
import sys
import tempfile
import time
import types
from types import SimpleNamespace

BLOCK = 256  # nano-vllm's Config asserts kvcache_block_size % 256 == 0
TOKEN = 5  # the constant sampled token (kvpool's arm samples the same)


class _BareLoader(importlib.abc.Loader):
    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = list(spec.submodule_search_locations)
        return mod

    def exec_module(self, module):
        pass


class _BareFinder(importlib.abc.MetaPathFinder):
    """``nanovllm`` as a bare package (its ``__init__`` imports the model runner)."""

    def __init__(self, src: str):
        self.src = src

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "nanovllm":
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _BareLoader(), is_package=True)
        spec.submodule_search_locations = [os.path.join(self.src, "nanovllm")]
        return spec


def _model_dir() -> str:
    """A model folder for ``Config``: a config.json only (Qwen3's shape, no weights)."""
    path = tempfile.mkdtemp(prefix="kvpool-nanovllm-")
    atexit.register(shutil.rmtree, path, True)  # the folder lives as long as the process
    cfg = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 32000,
           "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
           "max_position_embeddings": 1 << 20}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return path


def load(src: str, block: int = BLOCK) -> SimpleNamespace | None:
    """nano-vllm's engine classes from ``src`` (``block``-token blocks), or None (with the
    reason printed)."""
    src = os.path.abspath(src)
    if not os.path.isfile(os.path.join(src, "nanovllm", "engine", "scheduler.py")):
        print(f"(nano-vllm sources not found under {src}: nano-vllm's scheduler skipped)")
        return None
    if src not in sys.path:
        sys.path.insert(0, src)
    sys.meta_path.insert(0, _BareFinder(src))
    try:
        sched = importlib.import_module("nanovllm.engine.scheduler")
        seq = importlib.import_module("nanovllm.engine.sequence")
        sp = importlib.import_module("nanovllm.sampling_params")
    except Exception as e:  # noqa: BLE001  (the baseline is optional; its deps may be absent)
        print(f"(nano-vllm does not import here: {e!r}; nano-vllm's scheduler skipped)")
        return None
    seq.Sequence.block_size = block  # what nano-vllm's LLMEngine sets from its Config
    nv = SimpleNamespace(Config=sched.Config, Scheduler=sched.Scheduler, Sequence=seq.Sequence,
                         SamplingParams=sp.SamplingParams, model=_model_dir(), block=block)
    nv.info = {"src": src, "kvcache_block_size": block, "preemption": "recompute",
               "past_config_check": block % BLOCK != 0}
    return nv


def _scheduler(nv: SimpleNamespace, num_seqs: int, batched: int, blocks: int):
    cfg = nv.Config(nv.model, max_num_batched_tokens=batched, max_num_seqs=num_seqs,
                    num_kvcache_blocks=blocks, kvcache_block_size=BLOCK)
    cfg.kvcache_block_size = nv.block  # BLOCK unless --nanovllm-block-size (see above)
    return nv.Scheduler(cfg)


def bench_decode(nv: SimpleNamespace, num_seqs: int, steps: int, kv_block: int) -> dict:
    """kvpool's bench_decode for nano-vllm: the same prompts, capacity and batch limits."""
    per_seq = -(-(8 + steps // kv_block + 4) * kv_block // nv.block)
    sched = _scheduler(nv, num_seqs, max(8192, num_seqs), num_seqs * per_seq)
    rng = random.Random(0)
    endless = nv.SamplingParams(max_tokens=1 << 20, ignore_eos=True)
    for _ in range(num_seqs):
        sched.add(nv.Sequence([rng.randrange(32000) for _ in range(128)], endless))
    while True:  # prefill everything
        seqs, prefill = sched.schedule()
        sched.postprocess(seqs, [TOKEN] * len(seqs), prefill)
        if not prefill and len(seqs) == num_seqs:
            break
    t_sched = t_done = 0.0
    n = short = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        seqs, prefill = sched.schedule()
        t1 = time.perf_counter()
        sampled = [TOKEN] * len(seqs)
        t2 = time.perf_counter()
        sched.postprocess(seqs, sampled, prefill)
        t3 = time.perf_counter()
        t_sched += t1 - t0
        t_done += t3 - t2
        n += len(seqs)
        short += prefill or len(seqs) != num_seqs
    total = t_sched + t_done
    return {"seconds": total, "seq_steps": n, "us_per_seq_step": 1e6 * total / n,
            "schedule_us": 1e6 * t_sched / n, "step_done_us": 1e6 * t_done / n,
            "seqs_per_step": n / steps, "short_steps": short}


def _counting_preempt(sched) -> list[int]:
    count = [0]
    preempt = sched.preempt

    def counted(seq) -> None:
        count[0] += 1
        preempt(seq)

    sched.preempt = counted
    return count


def bench_mixed(nv: SimpleNamespace, num_seqs: int, steps: int, kv_device_tokens: int) -> dict:
    """kvpool's bench_mixed for nano-vllm: the same arrivals over the same device tokens."""
    rng = random.Random(1)
    sched = _scheduler(nv, num_seqs, 4096, kv_device_tokens // nv.block)
    preemptions = _counting_preempt(sched)
    added = 0

    def top_up() -> None:
        nonlocal added
        while len(sched.waiting) + len(sched.running) < num_seqs + num_seqs // 4:
            prompt = [rng.randrange(32000) for _ in range(rng.randint(64, 512))]
            params = nv.SamplingParams(max_tokens=rng.randint(32, 256), ignore_eos=True)
            sched.add(nv.Sequence(prompt, params))
            added += 1

    def step() -> int:
        seqs, prefill = sched.schedule()
        sched.postprocess(seqs, [TOKEN] * len(seqs), prefill)
        return len(seqs)

    for _ in range(150):  # warm up into a full pool
        top_up()
        step()
    base_pre, base_done = preemptions[0], added - len(sched.waiting) - len(sched.running)
    elapsed = 0.0
    n = 0
    for _ in range(steps):
        top_up()
        t0 = time.perf_counter()
        seqs, prefill = sched.schedule()
        sched.postprocess(seqs, [TOKEN] * len(seqs), prefill)
        elapsed += time.perf_counter() - t0
        n += len(seqs)
    done = added - len(sched.waiting) - len(sched.running)
    return {"seconds": elapsed, "seq_steps": n, "us_per_seq_step": 1e6 * elapsed / n,
            "preemptions_recompute": preemptions[0] - base_pre, "finished": done - base_done}
