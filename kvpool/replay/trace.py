"""Trace loading (formats: kvpool/replay/formats.py) and deterministic token synthesis.

Every format becomes ``TraceRequest``s: arrival in seconds, prompt and output tokens, and hash
ids of trace blocks of ``block`` tokens (512 for Mooncake, 16 for Bailian, ``--trace-block-size``
to override): ``hash_ids[i]`` names the content of prompt tokens ``[block i, block (i + 1))``,
so equal ids at equal positions mean an equal prefix. Formats without prefix information
(Azure, BurstGPT) get ids unique to each request; so do the blocks a record's hash_ids leave
uncovered (``input_length > len(hash_ids) * block``).

NOTE(excess-ids): a record's ids past ``ceil(input_length / block)`` name tokens the prompt
does not have; they are ignored (both replays see the same blocks: the instant one counted
them, the timed one never synthesised them), and ``Trace.trimmed`` / ``Trace.first_trimmed``
say how many records had them and where the first is, for a warning (many extra ids mean ids
of smaller blocks than the format's: ``--trace-block-size``; docs/benchmarks.md "Trace formats").

NOTE(short-ids): a record whose ids cover fewer blocks than ``ceil(input_length / block)`` is
padded with fresh ids (a trace may truncate its ids), and ``Trace.padded`` /
``Trace.first_padded`` count it for a warning (notices.py): both published prefix formats list
exactly that many ids, so short ids almost always mean a wrong block size or format (the
Mooncake trace read with 16-token blocks replayed at hit rate 0.0013 instead of 0.2627,
silently). Formats without ids (Azure, BurstGPT) are not counted.

NOTE(empty-prompt): a record with 0 prompt tokens is dropped (counted in ``Trace.dropped``): the
scheduler, like any engine, refuses an empty prompt, so the timed replay stopped on it.

NOTE(time-order): the requests are in arrival order, whatever the file's: records whose
timestamps go back (a trace concatenated from shards) are sorted by arrival, a stable sort that
keeps equal arrivals in file order, and ``Trace.reordered`` / ``Trace.first_back`` say how many
records went back and where the first one is (docs/benchmarks.md "Trace formats"). Replayed in
file order, each such record's queueing was measured from a time long past: a 10 s queue inside
a 0.05 s makespan, and a negative trace duration. ``limit`` keeps the file's first records.

Token synthesis (``TokenSynth``) keeps that structure for the real prefix cache::

    token[block i + j] = mix(seed, hash_ids[i], j) % vocab      if the trace block is full
                       = mix(seed, UNIQUE + request index, j)    in a partial last block

so two requests with the same leading hash ids produce the same token ids, hence the same
chained block hashes; a partial tail never matches anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvpool.replay.formats import (DEFAULT_BLOCK, FORMATS, HAS_PREFIX, ID_LIMIT, FormatClues,
                                   Row, detect, read_rows)
from kvpool.replay.lines import MAX_LINE, TraceLines

TRACE_BLOCK = 512  # tokens per Mooncake hash id (the default block)
_UNIQUE = ID_LIMIT  # offset of the per-request ids used for partial tail blocks (2**40)
_FRESH = 1 << 41  # offset of the ids given to blocks without a trace hash id
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One trace record. Invariant: ``len(hash_ids) == ceil(input_length / block)`` (the
    trace's block: NOTE(excess-ids))."""

    index: int  # request number (0-based, records kept): its identity in the replay
    arrival_s: float  # arrival in seconds
    input_length: int  # prompt tokens
    output_length: int  # tokens to generate (max_tokens; eos is ignored)
    hash_ids: Sequence[int]  # trace blocks (a tuple; a range for ids unique to it)


@dataclass(slots=True)
class Trace:
    """A loaded trace: its requests and how they were read."""

    requests: list[TraceRequest]
    format: str  # one of formats.FORMATS
    block: int  # tokens per hash id
    dropped: int = 0  # records skipped: NOTE(empty-prompt), NOTE(burstgpt-fails)
    prefix_info: bool = True  # False: the format has none, every prompt unique
    reordered: int = 0  # records arriving before one above them in the file: NOTE(time-order)
    first_back: int | None = None  # the line of the first of them (None: the file is in order)
    trimmed: int = 0  # records with hash ids past their input_length: NOTE(excess-ids)
    first_trimmed: int | None = None  # the line of the first of them
    padded: int = 0  # records with fewer hash ids than input_length needs: NOTE(short-ids)
    first_padded: int | None = None  # the line of the first of them
    clues: FormatClues = field(default_factory=FormatClues)  # NOTE(format-clues), formats.py


def _open_format(lines: TraceLines, fmt: str) -> str:
    """``fmt``, or for ``auto`` the format of the file's first non-blank line (peeked, not
    read: a pipe cannot rewind, NOTE(peek) in lines.py)."""
    if fmt == "auto":
        first = lines.peek()
        if first is None:
            return "mooncake"  # empty: nothing to misread
        try:
            return detect(first[0])
        except ValueError as e:
            raise ValueError(f"{lines.name}:{first[1]}: {e}; or pass --trace-format") from None
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}: one of auto, {', '.join(FORMATS)}")
    return fmt


def read_trace(path: str | Path, limit: int | None = None, fmt: str = "auto",
               block_size: int | None = None, max_line: int = MAX_LINE) -> Trace:
    """Read a trace file (the first ``limit`` requests when given); ``fmt`` is ``auto`` or
    one of formats.FORMATS, ``block_size`` the tokens per hash id (default: the format's).
    The requests come in arrival order (NOTE(time-order)). ValueError names ``file:line`` of
    a record it cannot read (NOTE(bounded-lines) in lines.py); OSError if the file cannot be
    opened or read."""
    with TraceLines.open(path, max_line) as lines:
        fmt = _open_format(lines, fmt)
        block = DEFAULT_BLOCK[fmt] if block_size is None else block_size
        if block < 1:
            raise ValueError(f"trace block size must be >= 1, got {block}")
        trace = Trace([], fmt, block, prefix_info=HAS_PREFIX[fmt])
        rows = read_rows(lines, fmt, trace.clues) if limit is None or limit > 0 else iter(())
        kept = _kept(rows, trace, limit)
    trace.requests = _requests(_time_order(kept, trace), trace)
    return trace


def _kept(rows, trace: Trace, limit: int | None) -> list[Row]:
    """The rows to replay, up to ``limit``; the others counted in ``trace.dropped``."""
    out: list[Row] = []
    for row in rows:
        if row.input_length == 0 or (trace.format == "burstgpt" and row.output_length == 0):
            trace.dropped += 1  # NOTE(empty-prompt), NOTE(burstgpt-fails)
            continue
        out.append(row)
        if limit is not None and len(out) >= limit:
            break  # before the next record is read
    return out


def _time_order(rows: list[Row], trace: Trace) -> list[Row]:
    """``rows`` sorted by arrival (stable); NOTE(time-order) counts those that went back."""
    latest = -math.inf
    for row in rows:
        if row.arrival_s < latest:
            trace.reordered += 1
            if trace.first_back is None:
                trace.first_back = row.lineno
        latest = max(latest, row.arrival_s)
    return sorted(rows, key=lambda r: r.arrival_s) if trace.reordered else rows


def _requests(rows: list[Row], trace: Trace) -> list[TraceRequest]:
    """The requests of ``rows``: ids padded with fresh ones where they leave blocks uncovered
    (NOTE(short-ids)), cut where they run past the prompt (NOTE(excess-ids)); both counted in
    ``trace``."""
    out: list[TraceRequest] = []
    fresh = 0
    for row in rows:
        need = -(-row.input_length // trace.block)
        ids: Sequence[int] = row.hash_ids or ()
        if len(ids) > need:
            ids = ids[:need]
            trace.trimmed += 1
            if trace.first_trimmed is None or row.lineno < trace.first_trimmed:
                trace.first_trimmed = row.lineno
        elif len(ids) < need:  # uncovered blocks: content unique to this request
            if row.hash_ids is not None:  # NOTE(short-ids): a format with ids gave too few
                trace.padded += 1
                if trace.first_padded is None or row.lineno < trace.first_padded:
                    trace.first_padded = row.lineno
            extra = range(_FRESH + fresh, _FRESH + fresh + need - len(ids))
            fresh += len(extra)
            ids = tuple(ids) + tuple(extra) if ids else extra
        out.append(TraceRequest(len(out), row.arrival_s, row.input_length,
                                row.output_length, ids))
    return out


def load_trace(path: str | Path, limit: int | None = None, fmt: str = "auto",
               block_size: int | None = None) -> list[TraceRequest]:
    """The requests of ``read_trace``."""
    return read_trace(path, limit, fmt, block_size).requests


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
    and its first ``block k`` tokens only on ``(seed, r.hash_ids[:k])`` for full blocks.
    """

    def __init__(self, vocab_size: int = 32000, seed: int = 0, block: int = TRACE_BLOCK) -> None:
        if vocab_size < 2:
            raise ValueError("vocab_size must be >= 2")
        if block < 1:
            raise ValueError("trace block size must be >= 1")
        self.vocab_size = vocab_size  # token ids are in [0, vocab_size)
        self.seed = np.uint64(seed & 0xFFFFFFFF)  # mixed into every token
        self.block = block  # tokens per trace hash id
        self._pos = np.arange(block, dtype=np.uint64)

    def prompt(self, r: TraceRequest) -> list[int]:
        n, block = r.input_length, self.block
        nblocks = -(-n // block)
        ids = np.array(r.hash_ids[:nblocks], dtype=np.uint64)
        if len(ids) < nblocks:
            raise ValueError(f"request {r.index}: {n} prompt tokens need {nblocks} hash ids of "
                             f"{block} tokens, it has {len(r.hash_ids)}")
        if n % block:
            ids[-1] = np.uint64(_UNIQUE + r.index)  # partial tail: unique to this request
        with np.errstate(over="ignore"):
            x = (ids[:, None] * np.uint64(block) + self._pos[None, :]) \
                ^ (self.seed << np.uint64(44))
        toks = (_mix(x.ravel()[:n]) % np.uint64(self.vocab_size)).astype(np.int64)
        return toks.tolist()


def trace_summary(reqs: list[TraceRequest]) -> dict:
    """The report's counts of ``reqs`` (``unique_trace_blocks``: NOTE(summary-ids))."""
    blocks = sum(len(r.hash_ids) for r in reqs)
    return {"requests": len(reqs), "trace_blocks": blocks,
            "unique_trace_blocks": _unique_ids(reqs),
            "prompt_tokens": sum(r.input_length for r in reqs),
            "output_tokens": sum(max(1, r.output_length) for r in reqs),
            "duration_s": (reqs[-1].arrival_s - reqs[0].arrival_s) if reqs else 0.0}


def _unique_ids(reqs: list[TraceRequest]) -> int:
    """How many distinct ids ``reqs`` hold. NOTE(summary-ids): a ``range`` of ids is fresh by
    construction (``_requests``: no other request and no trace id has them), so it counts whole
    without being iterated; only ids held in tuples (the trace's own) are sorted in one array of
    8 bytes an id. A set of every id was 2.1 GB for a 200k-row Azure CSV whose prompts share
    nothing, after the replay had run (a set of the listed ids alone: 40-80 bytes an id)."""
    fresh = listed = 0
    for r in reqs:
        if isinstance(r.hash_ids, range):
            fresh += len(r.hash_ids)
        else:
            listed += len(r.hash_ids)
    if not listed:
        return fresh
    ids = np.fromiter(chain.from_iterable(r.hash_ids for r in reqs
                                          if not isinstance(r.hash_ids, range)),
                      dtype=np.int64, count=listed)
    ids.sort()
    return fresh + 1 + int(np.count_nonzero(ids[1:] != ids[:-1]))
