"""Paged attention over the block-major pool (see ``kv_cache.py`` for the layout).

Per layer, for the flattened new tokens of a step:

1. ``write``: scatter each token's K/V into its slot ``(slot_blocks[t], slot_offsets[t])``.
2. ``attend``:
   * multi-token queries (prefill chunks) run one SDPA call each. A fresh prefill uses the new
     K/V directly with ``is_causal=True``; a chunk with ``start > 0`` gathers its context blocks
     ``[0, start + q_len)`` from the pool and uses an explicit position-relative mask;
   * single-token queries (decodes) are batched in groups of similar context width
     (``batch.GROUP_RATIO``): per group one padded gather of their block tables and one SDPA
     call with a per-row key-validity bias.

GQA uses SDPA's ``enable_gqa``: query head ``j`` reads KV head ``j // (num_heads //
num_kv_heads)``, the pairing of ``repeat_interleave`` (not ``repeat``), without materializing the
repeated K/V.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .batch import DecodeGroup, PreparedBatch, PrefillSpan

__all__ = ["PagedAttention"]

_UPCAST = (torch.bfloat16, torch.float16)


class PagedAttention:
    """Stateless paged-attention kernel for one model geometry (shared by all its layers)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        if num_heads % num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.group = num_heads // num_kv_heads  # query heads per KV head
        self.scale = 1.0 / math.sqrt(head_dim)

    @staticmethod
    def write(kv: torch.Tensor, layer: int, k: torch.Tensor, v: torch.Tensor,
              prep: PreparedBatch) -> None:
        """Store ``k, v`` (``[T, kv_heads, head_dim]``) into their slots of ``layer``."""
        index = (prep.slot_blocks, prep.slot_offsets)
        kv[:, layer, 0].index_put_(index, k)
        kv[:, layer, 1].index_put_(index, v)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor,
               layer: int, prep: PreparedBatch) -> torch.Tensor:
        """Attention output ``[T, heads, head_dim]`` for queries ``q`` (``[T, heads, head_dim]``).

        ``k, v`` are this step's new keys/values (already written by :meth:`write`).
        """
        if prep.num_decodes == 0 and len(prep.prefills) == 1:
            return self._prefill(q, k, v, kv, layer, prep.prefills[0])
        out = torch.empty_like(q)
        for group in prep.decode_groups:
            dec_out = self._decode(q, kv, layer, group)
            if group.rows is None:
                return dec_out  # every row is a decode, in order
            out.index_copy_(0, group.rows, dec_out)
        for span in prep.prefills:
            out[span.token_start:span.token_end] = self._prefill(q, k, v, kv, layer, span)
        return out

    def _prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor,
                 layer: int, span: PrefillSpan) -> torch.Tensor:
        a, b = span.token_start, span.token_end
        if span.context_blocks is None:  # fresh prefill: the context is exactly the new tokens
            ks, vs = k[a:b], v[a:b]
        else:  # sliced to the exact context: slots past it are never read
            ks = self._gather(kv, layer, 0, span.context_blocks)[:span.context_len]
            vs = self._gather(kv, layer, 1, span.context_blocks)[:span.context_len]
        # [L, H, D] -> [1, H, L, D] as strided views (SDPA takes any stride with unit last dim).
        # NOTE(causal): is_causal aligns the triangle top-left, which is only right when the
        # query covers the whole context; otherwise span.mask is relative to absolute positions.
        out = F.scaled_dot_product_attention(
            q[a:b].transpose(0, 1).unsqueeze(0), ks.transpose(0, 1).unsqueeze(0),
            vs.transpose(0, 1).unsqueeze(0), attn_mask=span.mask, is_causal=span.mask is None,
            scale=self.scale, enable_gqa=self.group > 1)
        return out.squeeze(0).transpose(0, 1)

    def _decode(self, q: torch.Tensor, kv: torch.Tensor, layer: int,
                group: DecodeGroup) -> torch.Tensor:
        table, bias = group.block_table, group.key_bias
        num = table.shape[0]
        flat = table.reshape(-1)
        # [N, L, Hkv, D] gathered, viewed as [N, Hkv, L, D] without a copy.
        keys = self._gather(kv, layer, 0, flat).view(num, -1, self.num_kv_heads, self.head_dim)
        values = self._gather(kv, layer, 1, flat).view(num, -1, self.num_kv_heads, self.head_dim)
        qd = q if group.rows is None else q.index_select(0, group.rows)
        dtype = qd.dtype
        if dtype in _UPCAST and qd.device.type == "cpu":
            # NOTE(bf16-decode): the CPU flash kernel is ~5x slower for 1-token queries in bf16
            # than in float32 (bench.step's profile: 21% of a Qwen2-0.5B decode step); the
            # gathered K/V are small next to the weights, so upcast them once per layer.
            qd, keys, values, bias = qd.float(), keys.float(), values.float(), bias.float()
        # NOTE(padding): padded and past-the-end slots are masked out; their stale bytes are
        # finite (pools are zero-filled and only ever hold real K/V), so they contribute 0.
        out = F.scaled_dot_product_attention(
            qd.unsqueeze(2), keys.transpose(1, 2), values.transpose(1, 2),
            attn_mask=bias, scale=self.scale, enable_gqa=self.group > 1)
        return out.squeeze(2).to(dtype)

    @staticmethod
    def _gather(kv: torch.Tensor, layer: int, which: int, blocks: torch.Tensor) -> torch.Tensor:
        """``[len(blocks) * block_size, kv_heads, head_dim]``: the listed blocks, in order."""
        pool = kv[:, layer, which]  # [num_blocks, block_size, Hkv, D] strided view
        got = pool.index_select(0, blocks)
        return got.view(-1, pool.shape[-2], pool.shape[-1])
