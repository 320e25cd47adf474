"""The differential KV harness of tests/runtime/test_kv_differential.py: a request's output never
depends on what else runs.

``make_trial(seed)`` draws a mix of requests (prompts sharing block-aligned prefixes, exact
duplicates, greedy and seeded sampling, n up to 4, logprobs, prompt logprobs, penalties, stop
strings) and a pool just large enough for the largest one alone. ``solo`` runs each request
alone on a roomy engine; ``crowded`` runs them all at once on the small pool, where they
preempt (swap or recompute), share prefix blocks (copy-on-write, forks), are defragmented,
fail (step faults, a failed copy), disconnect, and then come back for a second wave served
from the prefix cache. ``differences`` compares each request's tokens, finish reasons,
logprobs and prompt logprobs with its solo run; after each wave the pool must hold no block
and the engine must have found no invariant violation (``check_invariants`` every step).
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.engine.output_processor import RequestOutput
from kvpool.runtime.model import SamplingParams
from stress.faults import InjectedFaults
from tests.configs import engine_config

ALPHABET = "abcdefghijklmnopqrstuvwxyz ,."
LOGPROB_TOL = 1e-3  # batch composition changes float32 sums in the last bits only
MAX_LEN = 160


@dataclass
class Trial:
    """One mix: the requests, the crowded engine's config, and what goes wrong on it."""

    prompts: list[str]
    params: list[SamplingParams]
    config: dict[str, Any]
    step_faults: set[int] = field(default_factory=set)  # requests whose step raises once
    copy_fail: str | None = None  # a copy kind whose next batch fails
    copy_delay: str | None = None  # a copy kind whose every batch is slow
    disconnect: dict[int, int] = field(default_factory=dict)  # request -> updates read first
    stagger: list[float] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(lo, hi)))


def _params(rng: random.Random) -> SamplingParams:
    greedy = rng.random() < 0.5
    return SamplingParams(
        n=rng.choice([1, 1, 2, 3, 4]), max_tokens=rng.randint(1, 24), ignore_eos=True,
        temperature=0.0 if greedy else rng.choice([0.7, 1.0, 1.5]),
        seed=None if greedy else rng.randrange(1 << 30), top_k=rng.choice([-1, -1, 20]),
        logprobs=rng.choice([None, 0, 2]), prompt_logprobs=rng.choice([None, None, None, 1]),
        presence_penalty=rng.choice([0.0, 0.0, 1.5]),
        frequency_penalty=rng.choice([0.0, 0.0, 1.0]),
        repetition_penalty=rng.choice([1.0, 1.0, 1.3]), min_p=rng.choice([0.0, 0.0, 0.05]),
        stop=rng.choice([(), (), ("e",), ("ab", "x")]))


def _prompts(rng: random.Random, bs: int, count: int) -> list[str]:
    prefixes = [_text(rng, 1, 40) for _ in range(2)]
    prefixes += [_text(rng, bs, bs) * rng.randint(1, max(1, 32 // bs)) for _ in range(2)]
    out: list[str] = []
    for _ in range(count):
        if out and rng.random() < 0.25:
            out.append(rng.choice(out))  # the same prompt again: every full block a hit
        else:
            out.append(rng.choice(prefixes) + rng.choice(["", _text(rng, 1, 2 * bs)]))
    return out


def make_trial(seed: int, mode: str | None = None, faults: bool = True) -> Trial:
    """A seeded random mix; ``mode`` forces the preemption mode (None: the cost model's);
    ``faults`` adds step faults, a failed copy, slow copies and disconnects."""
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4, 8, 16])
    prompts = _prompts(rng, bs, rng.randint(8, 14))
    params = [_params(rng) for _ in prompts]
    need = max(math.ceil(len(p) / bs) + sp.n * (math.ceil(sp.max_tokens / bs) + 1)
               for p, sp in zip(prompts, params))
    ndev = need + rng.randint(0, 2)
    config = dict(block_size=bs, num_device_blocks=ndev,
                  num_host_blocks=rng.choice([ndev // 2, ndev, 2 * ndev]),
                  preemption_mode=mode, defrag_threshold=rng.choice([None, 0.0, 0.2]),
                  max_num_batched_tokens=rng.choice([16, 32, 256]),
                  max_num_seqs=rng.choice([4, 8, 16]), max_model_len=MAX_LEN,
                  eviction_policy=rng.choice(["lru", "adaptive", "classlru"]))
    trial = Trial(prompts, params, config, stagger=[0.0] * len(prompts),
                  priority=[rng.choice([0, 0, 1, -1]) for _ in prompts])
    if faults:
        idx = range(len(prompts))
        trial.step_faults = {i for i in idx if rng.random() < 0.1}
        trial.copy_fail = rng.choice([None, "swap_in", "swap_out", "cow", "defrag"])
        trial.copy_delay = rng.choice([None, "swap_in", "swap_out", "cow", "defrag"])
        trial.disconnect = {i: rng.randint(0, 3) for i in idx if rng.random() < 0.15}
        trial.stagger = [rng.choice([0.0, 0.0, 0.005]) for _ in idx]
    return trial


async def _one(eng: AsyncEngine, rid: str, prompt: str, params: SamplingParams, *,
               stagger: float = 0.0, priority: int = 0, leave_after: int | None = None):
    """One request's whole output; None for a client that leaves after ``leave_after``
    updates (0: before any)."""
    if stagger:
        await asyncio.sleep(stagger)
    stream = eng.generate(rid, prompt, params, priority=priority)
    if leave_after is None:
        return await collect(stream)
    seen = 0
    while seen < leave_after:
        try:
            await stream.__anext__()
        except StopAsyncIteration:
            break
        seen += 1
    await stream.aclose()
    return None


async def solo(trial: Trial) -> list[RequestOutput]:
    """Each request alone, one after another, on a roomy engine without prefix caching."""
    cfg = engine_config("small", block_size=trial.config["block_size"], num_host_blocks=0,
                        num_device_blocks=4096 // trial.config["block_size"],
                        enable_prefix_caching=False, max_model_len=MAX_LEN)
    eng = AsyncEngine(cfg)
    await eng.start()
    try:
        return [await _one(eng, f"solo{i}", p, sp)
                for i, (p, sp) in enumerate(zip(trial.prompts, trial.params))]
    finally:
        await eng.shutdown()


def _faults(trial: Trial) -> InjectedFaults:
    plan = InjectedFaults()
    for i in trial.step_faults:
        plan.arm(f"w1-{i}")
    if trial.copy_fail:
        plan.add(trial.copy_fail, fail=True, times=1)
    if trial.copy_delay:
        plan.add(trial.copy_delay, delay=0.002, fail=False, times=None)
    return plan


async def _wave(eng: AsyncEngine, trial: Trial, tag: str, crowd: bool) -> list:
    return await asyncio.gather(*(
        _one(eng, f"{tag}-{i}", p, sp, stagger=trial.stagger[i], priority=trial.priority[i],
             leave_after=trial.disconnect.get(i) if crowd else None)
        for i, (p, sp) in enumerate(zip(trial.prompts, trial.params))))


async def _drained(eng: AsyncEngine) -> None:
    """Wait for the aborts of the clients that left, then check that no block is held."""
    for _ in range(500):
        if eng.core.manager.stats().num_seqs == 0:
            break
        await asyncio.sleep(0.01)
    st = eng.core.manager.stats()
    assert (st.num_seqs, st.device.num_used, st.host.num_used) == (0, 0, 0), st
    assert eng.core.invariant_violations == 0


@dataclass
class Crowded:
    first: list  # the crowded wave's outputs (None where the client left)
    second: list  # the same requests again, without faults, mostly from the prefix cache
    snapshot: Any  # the engine's MetricsSnapshot after both
    defrag_moves: int


async def crowded(trial: Trial) -> Crowded:
    """All requests at once on the trial's small pool, then all again."""
    plan = _faults(trial)
    eng = AsyncEngine(engine_config("small", **trial.config), faults=plan)
    eng.invariant_check_interval = 1
    await eng.start()
    try:
        first = await _wave(eng, trial, "w1", crowd=True)
        await _drained(eng)
        plan.clear()
        second = await _wave(eng, trial, "w2", crowd=False)
        await _drained(eng)
        snap = eng.snapshot()
    finally:
        await eng.shutdown()
    return Crowded(first, second, snap, eng.core.scheduler.stats().defrag_moves)


def _logprobs(lps) -> list[tuple[int, float]]:
    return [(lp.token_id, lp.logprob) for lp in lps or () if lp is not None]


def _close(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return len(a) == len(b) and all(
        ta == tb and abs(la - lb) <= LOGPROB_TOL for (ta, la), (tb, lb) in zip(a, b))


def differences(ref: RequestOutput, out: RequestOutput) -> list[str]:
    """What differs between a request's solo output and ``out`` ([] when nothing does)."""
    diffs = []
    if not _close(_logprobs(ref.prompt_logprobs), _logprobs(out.prompt_logprobs)):
        diffs.append("prompt logprobs")
    a = sorted(ref.outputs, key=lambda c: c.index)
    b = sorted(out.outputs, key=lambda c: c.index)
    if len(a) != len(b):
        return diffs + [f"{len(b)} completions, solo {len(a)}"]
    for x, y in zip(a, b):
        if (x.token_ids, x.finish_reason) != (y.token_ids, y.finish_reason):
            diffs.append(f"completion {x.index}: {y.token_ids} {y.finish_reason}, "
                         f"solo {x.token_ids} {x.finish_reason}")
        elif not _close(_logprobs(x.logprobs), _logprobs(y.logprobs)):
            diffs.append(f"completion {x.index}: logprobs")
    return diffs
