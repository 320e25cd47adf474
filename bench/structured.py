"""Structured output cost: the per-step grammar mask beside the engine step.

    python -m bench.structured [--json FILE] [--quick] [--repeats N] [--min-seconds S]

- ``step_ms.{free,json}``: one EngineCore step (tiny model, CPU) decoding ``--batch`` sequences,
  without and with a json_schema response_format (alternating runs, bench/common.py);
- ``neighbour_ms.{alone,beside}``: how long a plain 8-token greedy request takes (add to last
  token, stepping an EngineCore) alone and beside an n=4 request whose grammar is the heaviest
  kind the budget admits (``HEAVY``: a 10k-long counted repeat, ~10 ms a mask per sequence
  here); alternating rounds;
- ``mask_us.v512`` / ``mask_us.v150k``: GrammarMatchers.token_mask + apply_token_mask for the
  same batch, per step, on the tiny model's vocabulary and on a synthetic 150k byte-level
  vocabulary (random byte strings: a real 150k BPE is not available offline).
"""

from __future__ import annotations

import gc
import random
import time

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models

from bench import common
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.model import SamplingParams, Tokenizer, build_byte_tokenizer
from kvpool.runtime.model.byte_tokenizer import byte_alphabet
from kvpool.runtime.model.grammar import GrammarSpec, apply_token_mask
from kvpool.runtime.model.grammar_matchers import GrammarMatchers

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 4}},
    "required": ["name", "age", "tags"], "additionalProperties": False}
SPEC = GrammarSpec.json_schema(SCHEMA, "person")
HEAVY = GrammarSpec.json_schema({"type": "string", "pattern": "^x{10000}$"}, "heavy")


def big_tokenizer(n: int, seed: int = 0) -> Tokenizer:
    """A byte-level vocabulary of ``n`` tokens (the 256 bytes, then random byte strings)."""
    rng = random.Random(seed)
    alpha = byte_alphabet()
    vocab = {"</s>": 0}
    for ch in alpha:
        vocab[ch] = len(vocab)
    pool = [alpha[b] for b in range(32, 127)]
    while len(vocab) < n:
        vocab.setdefault("".join(rng.choice(pool) for _ in range(rng.randint(2, 8))), len(vocab))
    backend = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.decoder = decoders.ByteLevel()
    return Tokenizer(backend, eos_token_ids=(0,))


def mask_workload(tok: Tokenizer, batch: int, steps: int):
    g = GrammarMatchers(tok, tok.vocab_size)
    spec = g.compiler.compile(SPEC)  # the vocabulary and the matcher, outside the timing
    gen = torch.Generator().manual_seed(0)
    eos = tok.eos_token_id

    def run() -> dict:
        seqs = list(range(batch))
        g.add(seqs, spec)
        spent, n = 0.0, 0
        for _ in range(steps):
            live = [s for s in seqs if s in g]
            if not live:
                break
            logits = torch.randn(len(live), tok.vocab_size, generator=gen)
            t = time.perf_counter()
            mask = g.token_mask(live)
            apply_token_mask(logits, mask)
            spent += time.perf_counter() - t
            n += 1
            tokens = logits.argmax(dim=-1).tolist()
            for s in g.advance(live, tokens):
                g.remove(s)
            for s, t_ in zip(live, tokens):
                if t_ == eos:
                    g.remove(s)
        for s in seqs:
            g.remove(s)
        return {"seconds": spent, "mask_us": spent / max(n, 1) * 1e6}
    return run


def step_workload(core: EngineCore, batch: int, steps: int, constrained: bool):
    tok = core.tokenizer
    counter = iter(range(10**9))
    spec = core.grammars.compiler.compile(SPEC)  # what AsyncEngine.compile_grammar does

    def run() -> dict:
        tag = next(counter)
        p = SamplingParams(max_tokens=steps, temperature=1.0, seed=tag, ignore_eos=True,
                           response_format=spec if constrained else None)
        for i in range(batch):
            core.add_request(f"{tag}-{i}", tok.encode(f"person {i} as JSON"), p)
        core.step()  # the prefill, not timed
        spent, n = 0.0, 0
        while core.has_work():
            t = time.perf_counter()
            core.step()
            spent += time.perf_counter() - t
            n += 1
        return {"seconds": spent, "step_ms": spent / max(n, 1) * 1e3}
    return run


def neighbour_workload(core: EngineCore, beside: bool):
    """The plain request's latency, alone or beside a heavy n=4 grammar request."""
    tok = core.tokenizer
    heavy = SamplingParams(n=4, max_tokens=200, temperature=1.0, seed=1,
                           response_format=core.grammars.compiler.compile(HEAVY))
    plain = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    counter = iter(range(10**9))

    def run() -> dict:
        tag = next(counter)
        if beside:
            core.add_request(f"h{tag}", tok.encode("x"), heavy)
            core.step()  # the heavy request decodes before the plain one arrives
        t = time.perf_counter()
        core.add_request(f"p{tag}", tok.encode("The quick brown fox"), plain)
        while not any(o.finished and o.request_id == f"p{tag}" for o in core.step()):
            pass
        spent = time.perf_counter() - t
        core.abort(f"h{tag}")
        while core.has_work():
            core.step()
        return {"seconds": spent, "latency_ms": spent * 1e3}
    return run


def main(argv: list[str] | None = None) -> dict:
    ap = common.bench_parser("structured", __doc__)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args(argv)
    timing = common.timing_from_args(args)
    torch.set_num_threads(1)
    # the start-up heap (torch's and kvpool's modules) frozen, as bench/sched.py and kvpool
    # serve do (NOTE(gc-freeze)): bench.common's gc.collect() before every run walked all
    # of it, ~0.2 s a run; what the bench builds below is collected as before
    gc.collect()
    gc.freeze()
    steps = 8 if timing.quick else 24
    res: dict = {"batch": args.batch, "timing": common.timing_info(timing),
                 "machine": common.machine()}
    core = EngineCore(EngineConfig(block_size=16, num_device_blocks=256, num_host_blocks=16,
                                   max_model_len=256, max_num_seqs=args.batch, seed=0))
    try:
        runs = common.alternate({"free": step_workload(core, args.batch, steps, False),
                                 "json": step_workload(core, args.batch, steps, True)}, timing)
        near = common.alternate({"alone": neighbour_workload(core, False),
                                 "beside": neighbour_workload(core, True)}, timing)
    finally:
        core.close()
    common.put_runs(res, runs["free"], {"step_ms.free": "step_ms"})
    common.put_runs(res, runs["json"], {"step_ms.json": "step_ms"})
    for key, rs in near.items():
        common.put_runs(res, rs, {f"neighbour_ms.{key}": "latency_ms"})
    vocabs = {"v512": build_byte_tokenizer(), "v150k": big_tokenizer(20_000 if timing.quick
                                                                     else 150_000)}
    for key, tok in vocabs.items():
        common.put_runs(res, common.measure(mask_workload(tok, args.batch, steps), timing),
                        {f"mask_us.{key}": "mask_us"})
    common.print_stats(res)
    common.write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
