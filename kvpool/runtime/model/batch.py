"""Batch metadata for one paged forward: what the engine passes in, and its tensor form.

The engine describes each sequence of a step by one :class:`SeqChunk` (plain ints only, so the
model never sees core/sched objects)::

    sequence tokens:  t0 t1 t2 t3 t4 t5 t6 | t7 t8 t9        block_size = 4
                      \\___ start = 7 ___/   \\_ token_ids _/   (the query of this step)
    block_table:      [ 12,          3,          40 ]         block ids in the pool
    positions:        0..3 -> blk 12 | 4..7 -> blk 3 | 8..11 -> blk 40
    slot of pos p:    block_table[p // block_size] * block_size + p % block_size
                      (the model stores it as the pair (block, offset) because the pool is
                       block-major: kv[block, layer, k|v, offset, kv_head, head_dim])

A query token at absolute position ``p`` attends to the keys at positions ``[0, p]`` of its own
sequence, so one forward can mix fresh prefills (``start == 0``), prefill chunks over a cached
prefix or earlier chunks (``start > 0, len(token_ids) > 1``) and decodes (``len(token_ids) == 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Sequence

import torch

__all__ = ["DecodeGroup", "PagedBatch", "PreparedBatch", "PrefillSpan", "SeqChunk"]

# Decodes are batched in groups of similar context width (blocks): a group holds widths in
# (max / GROUP_RATIO, max], so padding wastes under half of a group's gather and attention
# work (one padded batch over widths 1..48 wastes about half); a group smaller than
# MIN_GROUP_ROWS joins the next wider one (each group costs a gather and an SDPA call per layer).
GROUP_RATIO = 2
MIN_GROUP_ROWS = 8


@dataclass(frozen=True, slots=True)
class SeqChunk:
    """One sequence's share of a forward step (owned by the engine, read-only to the model).

    Invariant checked by :meth:`PreparedBatch.build`: ``len(token_ids) >= 1``, ``start >= 0`` and
    ``len(block_table) * block_size >= start + len(token_ids)``.
    """

    token_ids: Sequence[int]  # the new tokens whose K/V this step writes (the query)
    start: int  # tokens of this sequence already in the cache (absolute position of token_ids[0])
    block_table: Sequence[int]  # pool block ids in sequence order; may hold spare trailing blocks

    @property
    def context_len(self) -> int:
        """Tokens this chunk attends over once its own K/V are written."""
        return self.start + len(self.token_ids)


@dataclass(frozen=True, slots=True)
class PagedBatch:
    """The sequences of one forward. ``forward`` returns one logits row per entry, in order."""

    seqs: Sequence[SeqChunk]

    @classmethod
    def from_lists(cls, token_ids: Sequence[Sequence[int]], starts: Sequence[int],
                   block_tables: Sequence[Sequence[int]]) -> "PagedBatch":
        if not len(token_ids) == len(starts) == len(block_tables):
            raise ValueError("token_ids, starts and block_tables must have one entry per sequence")
        return cls(tuple(SeqChunk(t, s, b) for t, s, b in zip(token_ids, starts, block_tables)))

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.seqs)


@dataclass(slots=True)
class PrefillSpan:
    """A multi-token query: attended by itself (one SDPA call per layer)."""

    token_start: int  # first row of this chunk in the flattened token tensors
    token_end: int  # one past its last row
    start: int  # cached tokens before the chunk
    context_len: int  # start + query length
    context_blocks: torch.Tensor | None  # [ceil(context_len / block_size)] long; None if start == 0
    mask: torch.Tensor | None  # [q_len, context_len] additive bias (0 or -inf); None: plain causal


@dataclass(slots=True)
class DecodeGroup:
    """Single-token queries attended together: one padded gather and one SDPA call per layer."""

    rows: torch.Tensor | None  # [G] long rows of the flattened tokens; None: every row, in order
    block_table: torch.Tensor  # [G, width] long, padded with a valid id
    key_bias: torch.Tensor  # [G, 1, 1, width * block_size] 0 / -inf


@dataclass(slots=True)
class PreparedBatch:
    """Tensor form of a :class:`PagedBatch`, built once per forward and shared by every layer."""

    input_ids: torch.Tensor  # [T] long, the flattened queries
    positions: torch.Tensor  # [T] long, absolute position of each token
    slot_blocks: torch.Tensor  # [T] long, block receiving each token's K/V
    slot_offsets: torch.Tensor  # [T] long, offset inside that block
    last_token_index: torch.Tensor  # [S] long, row of each sequence's last token
    prefills: list[PrefillSpan]
    decode_groups: list[DecodeGroup]  # the 1-token queries, grouped by context width

    @property
    def num_decodes(self) -> int:
        return sum(g.block_table.shape[0] for g in self.decode_groups)

    @classmethod
    def build(cls, batch: PagedBatch, *, block_size: int, num_blocks: int, vocab_size: int,
              device: torch.device, dtype: torch.dtype = torch.float32,
              sliding_window: int | None = None) -> "PreparedBatch":
        """Validate ``batch`` against the pool geometry and lay it out as tensors on ``device``.

        Masks are additive biases in ``dtype`` (the model's), built once here rather than
        converted from booleans by every layer's attention call.
        """
        seqs = batch.seqs
        if not seqs:
            raise ValueError("PagedBatch has no sequences")
        rows = _lay_out(seqs, block_size, num_blocks, sliding_window, device, dtype)
        ids_cpu = torch.tensor(list(chain.from_iterable(s.token_ids for s in seqs)),
                               dtype=torch.long)
        if ids_cpu.min() < 0 or ids_cpu.max() >= vocab_size:
            raise ValueError(f"token ids must lie in [0, {vocab_size}), got "
                             f"min={int(ids_cpu.min())} max={int(ids_cpu.max())}")
        groups = _decode_groups(rows.dec_rows, rows.dec_tables, rows.dec_ctx, rows.num_rows,
                                block_size, sliding_window, device, dtype)
        # One host->device transfer for the three per-token index rows.
        pos_slots = torch.tensor((rows.positions, rows.slot_blocks, rows.slot_offsets),
                                 dtype=torch.long, device=device)
        return cls(
            input_ids=ids_cpu.to(device),
            positions=pos_slots[0],
            slot_blocks=pos_slots[1],
            slot_offsets=pos_slots[2],
            last_token_index=torch.tensor(rows.last_rows, dtype=torch.long, device=device),
            prefills=rows.prefills,
            decode_groups=groups,
        )


@dataclass(slots=True)
class _Rows:
    """A batch laid out in plain lists: one entry per token for the index rows, one per
    sequence for the last rows, per prefill for the spans, per decode for the ``dec_`` lists."""

    positions: list[int] = field(default_factory=list)
    slot_blocks: list[int] = field(default_factory=list)
    slot_offsets: list[int] = field(default_factory=list)
    last_rows: list[int] = field(default_factory=list)
    prefills: list[PrefillSpan] = field(default_factory=list)
    dec_rows: list[int] = field(default_factory=list)
    dec_tables: list[list[int]] = field(default_factory=list)
    dec_ctx: list[int] = field(default_factory=list)
    num_rows: int = 0


def _lay_out(seqs: Sequence[SeqChunk], block_size: int, num_blocks: int,
             sliding_window: int | None, device: torch.device, dtype: torch.dtype) -> _Rows:
    """Each checked chunk's tokens appended to the rows: a decode's one slot and its table, a
    prefill's range of slots and its span."""
    r = _Rows()
    positions, slot_blocks, slot_offsets = r.positions, r.slot_blocks, r.slot_offsets
    row = 0
    for i, seq in enumerate(seqs):
        q_len, start, table = len(seq.token_ids), seq.start, seq.block_table
        used = _checked_blocks(i, seq, block_size, num_blocks)
        r.last_rows.append(row + q_len - 1)
        if q_len == 1:  # decode fast path: one slot, no ranges
            positions.append(start)
            slot_blocks.append(table[start // block_size])
            slot_offsets.append(start % block_size)
            r.dec_rows.append(row)
            r.dec_tables.append(list(used))
            r.dec_ctx.append(start + 1)
        else:
            pos_range = range(start, start + q_len)
            positions.extend(pos_range)
            slot_blocks.extend(table[p // block_size] for p in pos_range)
            slot_offsets.extend(p % block_size for p in pos_range)
            r.prefills.append(_prefill_span(row, q_len, start, used, sliding_window, device,
                                            dtype))
        row += q_len
    r.num_rows = row
    return r


def _checked_blocks(i: int, seq: SeqChunk, block_size: int, num_blocks: int) -> Sequence[int]:
    """The blocks chunk ``i``'s context needs, after the checks of :class:`SeqChunk`."""
    q_len, start, table = len(seq.token_ids), seq.start, seq.block_table
    ctx = start + q_len
    if q_len < 1:
        raise ValueError(f"sequence {i}: token_ids is empty (every chunk needs >= 1 token)")
    if start < 0:
        raise ValueError(f"sequence {i}: start must be >= 0, got {start}")
    n_blocks = -(-ctx // block_size)
    if len(table) < n_blocks:
        raise ValueError(
            f"sequence {i}: block_table has {len(table)} blocks but {ctx} tokens need "
            f"{n_blocks} of size {block_size}; append blocks before the forward")
    used = table[:n_blocks]
    if min(used) < 0 or max(used) >= num_blocks:
        raise ValueError(f"sequence {i}: block ids must lie in [0, {num_blocks}), "
                         f"got {list(used)}")
    return used


def _decode_groups(rows: list[int], tables: list[list[int]], ctx: list[int], num_rows: int,
                   block_size: int, sliding_window: int | None, device: torch.device,
                   dtype: torch.dtype) -> list[DecodeGroup]:
    """Split the decodes into :class:`DecodeGroup` s of similar width (see GROUP_RATIO)."""
    if not rows:
        return []
    merged = _width_groups(tables)
    if len(merged) == 1:
        merged[0].sort()  # one group: keep row order (the all-decode fast path needs it)
    groups = []
    for part in merged:
        part_rows = [rows[i] for i in part]
        width = max(len(tables[i]) for i in part)
        # NOTE(padding): pad with the row's first block, a real id, so the gather stays in
        # bounds; the validity mask hides those keys (and any stale bytes past ctx).
        table = torch.tensor([tables[i] + [tables[i][0]] * (width - len(tables[i]))
                              for i in part], dtype=torch.long, device=device)
        ctx_t = torch.tensor([ctx[i] for i in part], dtype=torch.long, device=device)[:, None]
        key_pos = torch.arange(width * block_size, device=device)[None, :]
        visible = key_pos < ctx_t
        if sliding_window is not None:
            visible &= key_pos > ctx_t - 1 - sliding_window
        all_rows = len(merged) == 1 and len(part_rows) == num_rows
        groups.append(DecodeGroup(
            rows=None if all_rows else torch.tensor(part_rows, dtype=torch.long, device=device),
            block_table=table, key_bias=_bias(visible, dtype)[:, None, None, :]))
    return groups


def _width_groups(tables: list[list[int]]) -> list[list[int]]:
    """The decodes' indices, widest first, cut where the width drops below the group's
    max / GROUP_RATIO; a part under MIN_GROUP_ROWS joins the wider group before it."""
    order = sorted(range(len(tables)), key=lambda i: len(tables[i]), reverse=True)
    parts: list[list[int]] = []
    for i in order:
        if parts and len(tables[i]) * GROUP_RATIO > len(tables[parts[-1][0]]):
            parts[-1].append(i)
        else:
            parts.append([i])
    merged: list[list[int]] = []
    absorbed: list[int] = []  # per group: narrow rows it took in from smaller parts
    for part in parts:
        # a small part joins the wider group before it, as long as that group's narrow rows
        # stay fewer than MIN_GROUP_ROWS (several small parts in a row would otherwise add up
        # to a padded crowd); else it starts a group of its own
        if merged and len(part) < MIN_GROUP_ROWS and \
                absorbed[-1] + len(part) < MIN_GROUP_ROWS:
            merged[-1].extend(part)
            absorbed[-1] += len(part)
        else:
            merged.append(part)
            absorbed.append(0)
    return merged


def _prefill_span(row: int, q_len: int, start: int, blocks: Sequence[int],
                  sliding_window: int | None, device: torch.device,
                  dtype: torch.dtype) -> PrefillSpan:
    """Span of a multi-token query; its mask is relative to absolute positions.

    ::

        keys k:     0 ........ start-1 | start ........ ctx-1
        query i (absolute start+i) sees  k <= start + i   (and k > start+i-window, Mistral)

    With ``start == 0`` and no window that is the plain lower-triangular mask, and the kernel's
    ``is_causal`` is used; otherwise ``is_causal`` would align the triangle to the top-left and
    hide the cached prefix from the first queries, so an explicit mask is built.
    """
    ctx = start + q_len
    mask = None
    if start > 0 or (sliding_window is not None and ctx > sliding_window):
        q_pos = torch.arange(start, ctx, device=device)[:, None]
        k_pos = torch.arange(ctx, device=device)[None, :]
        visible = k_pos <= q_pos
        if sliding_window is not None:
            visible &= k_pos > q_pos - sliding_window
        mask = _bias(visible, dtype)
    context_blocks = None
    if start > 0:
        context_blocks = torch.tensor(list(blocks), dtype=torch.long, device=device)
    return PrefillSpan(row, row + q_len, start, ctx, context_blocks, mask)


def _bias(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean visibility -> additive attention bias (0 where visible, -inf elsewhere)."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(
        ~visible, float("-inf"))
