"""Mooncake trace loading and deterministic token synthesis for replay.

A Mooncake trace line (JSON)::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ..., 13]}

``timestamp`` is the arrival in milliseconds; ``hash_ids[i]`` names the content of prompt
tokens ``[512 i, 512 (i + 1))``: equal ids at equal positions mean an equal prefix.

Token synthesis (``TokenSynth``) keeps that structure for the real prefix cache::

    hash block i (512 tokens) = 512 / block_size pool blocks
    token[512 i + j] = mix(seed, hash_ids[i], j) % vocab      if the hash block is full
                     = mix(seed, UNIQUE + request index, j)    in a partial last hash block

so two requests with the same leading hash ids produce the same token ids, hence the same
chained block hashes; a partial tail never matches anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TRACE_BLOCK = 512  # tokens per Mooncake hash id
_UNIQUE = 1 << 40  # offset of the per-request ids used for partial tail blocks
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One trace line. Invariant: ``input_length <= len(hash_ids) * 512``."""

    index: int  # line number (0-based): the request's identity in the replay
    arrival_s: float  # timestamp converted to seconds
    input_length: int  # prompt tokens
    output_length: int  # tokens to generate (max_tokens; eos is ignored)
    hash_ids: tuple[int, ...]  # 512-token prefix blocks


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """Read a Mooncake JSONL trace (the first ``limit`` lines when given)."""
    out: list[TraceRequest] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
                ids = tuple(int(h) for h in d["hash_ids"])
                req = TraceRequest(len(out), float(d["timestamp"]) / 1000.0,
                                   int(d["input_length"]), int(d["output_length"]), ids)
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: not a Mooncake trace line "
                                 f"(timestamp, input_length, output_length, hash_ids): {e}"
                                 ) from None
            if any(h < 0 for h in ids):
                raise ValueError(f"{path}:{lineno}: hash_ids must be >= 0")
            out.append(req)
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


class TokenSynth:
    """Deterministic prompt token ids for trace requests (see the module docstring).

    Invariant: ``prompt(r)`` depends only on ``(seed, r.hash_ids, r.input_length, r.index)``
    and its first ``512 k`` tokens only on ``(seed, r.hash_ids[:k])`` for full blocks.
    """

    def __init__(self, vocab_size: int = 32000, seed: int = 0) -> None:
        if vocab_size < 2:
            raise ValueError("vocab_size must be >= 2")
        self.vocab_size = vocab_size  # token ids are in [0, vocab_size)
        self.seed = np.uint64(seed & 0xFFFFFFFF)  # mixed into every token
        self._pos = np.arange(TRACE_BLOCK, dtype=np.uint64)

    def prompt(self, r: TraceRequest) -> list[int]:
        n = r.input_length
        nblocks = -(-n // TRACE_BLOCK)
        ids = np.asarray(r.hash_ids[:nblocks], dtype=np.uint64)
        if n % TRACE_BLOCK:
            ids = ids.copy()
            ids[-1] = np.uint64(_UNIQUE + r.index)  # partial tail: unique to this request
        with np.errstate(over="ignore"):
            x = (ids[:, None] * np.uint64(TRACE_BLOCK) + self._pos[None, :]) \
                ^ (self.seed << np.uint64(44))
        toks = (_mix(x.ravel()[:n]) % np.uint64(self.vocab_size)).astype(np.int64)
        return toks.tolist()


def trace_summary(reqs: list[TraceRequest]) -> dict:
    blocks = sum(len(r.hash_ids) for r in reqs)
    return {"requests": len(reqs), "trace_blocks": blocks,
            "unique_trace_blocks": len({h for r in reqs for h in r.hash_ids}),
            "prompt_tokens": sum(r.input_length for r in reqs),
            "output_tokens": sum(max(1, r.output_length) for r in reqs),
            "duration_s": (reqs[-1].arrival_s - reqs[0].arrival_s) if reqs else 0.0}
