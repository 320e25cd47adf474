"""bench/logprobs.py: the cost of logprobs in a decode step (target: <= 1.2x).

    python -m bench.logprobs [--json FILE] [--quick] [--repeats N] [--min-seconds S]

Two EngineCores on the built-in tiny model (4 layers, hidden 128, vocab 512,
``torch.set_num_threads(1)``), each with 32 sequences of a 16-token prompt decoding with
``ignore_eos``: one asks for ``logprobs=5`` (the completions ``logprobs`` / chat
``top_logprobs``), the other for none. A run times whole ``EngineCore.step()`` calls (forward,
sampling, logprobs, output processing) once every sequence is decoding; the two alternate run
by run (``bench.common``), so machine noise hits both. ``step.ratio`` is the median of the
per-round ratios (time with / time without). Never pass/fail.

NOTE(vocab): the tiny model's head is small (512 ids), so the lm_head is cheap and the fixed
per-step costs of logprobs (one log_softmax, topk and rank pass over [32, vocab], one tolist per
tensor, a TokenLogprob per sequence) weigh more than they would beside a real model's forward.
"""

from __future__ import annotations

import gc
import time

import torch

from bench.common import (Timing, alternate, bench_parser, machine, print_runs, put, ratio_stat,
                          stat, timing_from_args, timing_info, write_json)
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams

NUM_SEQS = 32
PROMPT_LEN = 16
TOP_K = 5


class DecodeLoop:
    """One EngineCore kept at NUM_SEQS decoding sequences; ``run(steps)`` times the steps."""

    def __init__(self, logprobs: int | None, budget: int) -> None:
        self.core = EngineCore(EngineConfig(num_device_blocks=2048, num_host_blocks=0,
                                            max_num_seqs=NUM_SEQS, max_model_len=4096,
                                            max_num_batched_tokens=2048, block_size=16))
        self.params = SamplingParams(max_tokens=budget, temperature=0.8, seed=None,
                                     ignore_eos=True, logprobs=logprobs)
        self.budget = budget
        self.left = 0
        self.gen = 0

    def _refill(self) -> None:
        for rid in list(self.core.outputs.requests):
            self.core.abort(rid)
        while self.core.has_work():
            self.core.step()
        self.gen += 1
        for i in range(NUM_SEQS):
            prompt = [(7 * i + j) % 500 + 3 for j in range(PROMPT_LEN)]
            self.core.add_request(f"g{self.gen}-{i}", prompt, self.params)
        self.core.step()  # the 32 prefills (512 tokens fit one step)
        self.left = self.budget - 1

    def run(self, steps: int) -> dict:
        if self.left < steps + 1:
            self._refill()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.core.step()
        dt = time.perf_counter() - t0
        self.left -= steps
        return {"seconds": dt, "steps_per_s": steps / dt}


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("logprobs", __doc__)
    args = ap.parse_args(argv)
    timing: Timing = timing_from_args(args)
    torch.set_num_threads(1)  # the tiny model: OpenMP fork/join costs more than it saves
    # the start-up heap (torch's and kvpool's modules) frozen, as bench/sched.py and kvpool
    # serve do (NOTE(gc-freeze)): bench.common's gc.collect() before every run walked all
    # of it, ~0.2 s a run; what the bench builds below is collected as before
    gc.collect()
    gc.freeze()
    steps = 5 if timing.quick else 20
    loops = {"plain": DecodeLoop(None, 1024), "logprobs": DecodeLoop(TOP_K, 1024)}
    for loop in loops.values():  # warm both (allocator, first-call costs)
        loop.run(steps)
    runs = alternate({k: (lambda lp=lp: lp.run(steps)) for k, lp in loops.items()}, timing)
    res: dict = {"machine": machine(), "timing": timing_info(timing)}
    put(res, "step.ms_plain", stat([{"ms": 1e3 / r["steps_per_s"]} for r in runs["plain"]],
                                   "ms"))
    put(res, "step.ms_logprobs", stat([{"ms": 1e3 / r["steps_per_s"]}
                                       for r in runs["logprobs"]], "ms"))
    # ratio = time with / time without = rate without / rate with, per round
    put(res, "step.ratio", ratio_stat(runs["plain"], "steps_per_s", runs["logprobs"],
                                      "steps_per_s"))
    res.update({"seqs": NUM_SEQS, "top_logprobs": TOP_K, "vocab": 512})
    print_runs(res, timing, "with and without logprobs",
               ["step.ms_plain", "step.ms_logprobs", "step.ratio"],
               note=f"{NUM_SEQS} decoding sequences, top_logprobs={TOP_K}")
    write_json(args.json, res)
    for loop in loops.values():
        loop.core.close()


if __name__ == "__main__":
    main()
