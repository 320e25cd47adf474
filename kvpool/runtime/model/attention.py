"""Paged attention over the block-major pool, the pool's layout and the rotary embedding.

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

The paged KV pool tensor (``KVCacheLayout``): one tensor per pool, block-major.

::

    kv[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]
       \\_ block id  \\_ layer   \\_ 0 = K, 1 = V
                                   \\_ slot offset inside the block

Each block's bytes for every layer form one contiguous chunk of
:meth:`KVCacheLayout.bytes_per_block` bytes, so swap, copy-on-write and defrag move a block with
a single ``kv[dst].copy_(kv[src])`` (or a host<->device copy of ``kv[b]``), whatever the depth.

NOTE(finite): pools are zero-filled, not ``torch.empty``. The batched decode gathers whole blocks
and masks the slots past each sequence's length; a masked slot contributes exactly 0 only if its
bytes are finite (``-inf + NaN`` and ``0 * NaN`` are NaN). Zero-filled pools that are only ever
written with real K/V or block copies stay finite; never fill a pool with ``torch.empty``.

Rotary position embedding (``RotaryEmbedding``, RoPE) with the Hugging Face Llama
``rotate_half`` convention. A head vector ``x`` of size ``d`` is split in halves
``x = [x1 | x2]`` (NOT interleaved pairs)::

    rotate_half(x) = [-x2 | x1]
    rope(x, pos)   = x * cos(pos * f) + rotate_half(x) * sin(pos * f)
    f              = [inv_freq | inv_freq],   inv_freq[i] = theta ** (-2i / d),  i < d/2

Positions are absolute token indices within the sequence, so a chunk that starts at position
``start`` (a cached prefix or an earlier prefill chunk) rotates exactly as a one-shot prefill would.

With a partial rotary factor (Phi-3's ``partial_rotary_factor``) ``d`` above is
``ModelConfig.rotary_dim``: only a head's first ``rotary_dim`` dimensions are rotated, by
frequencies over ``rotary_dim``, and the rest pass through (``RotaryEmbedding.apply_partial``).

NOTE(longrope-regime): LongRoPE (Phi-3-128k, Phi-3.5, Phi-4-mini) divides ``inv_freq`` by a
short or a long factor list. kvpool picks one list per model, as vLLM does: the long one when
the served context (max_model_len) is longer than ``original_max_position_embeddings``, else
the short one (``RotaryEmbedding.fit_context``; ``--max-model-len`` at most the original length
selects it). A key is then rotated the same whatever the step that wrote it: chunked prefill, a
cached prefix and a sequence crossing the length all agree, and the KV stored in a shared tier
names its set (``RotaryEmbedding.table``, in kvpool/runtime/model/fingerprint.py).
transformers instead judges each forward call by its largest position: it agrees with kvpool on
prompts longer than the original length (long) and, with the short set, on sequences that stay
below it; a short prompt served with the long set (the default for a long-context checkpoint)
reads as vLLM's, not as transformers' ``generate``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .batch import DecodeGroup, PreparedBatch, PrefillSpan
from .config import ModelConfig
from .rope_config import RopeScaling

__all__ = ["KVCacheLayout", "PagedAttention", "RotaryEmbedding", "allocate_kv_cache",
           "kv_bytes_per_block", "rope_inv_freq"]

log = logging.getLogger(__name__)
_UPCAST = (torch.bfloat16, torch.float16)


class PagedAttention:
    """Stateless paged-attention kernel for one model geometry (shared by all its layers)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int,
                 scale: float | None = None) -> None:
        if num_heads % num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.group = num_heads // num_kv_heads  # query heads per KV head
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else scale  # Granite sets it

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


@dataclass(frozen=True, slots=True)
class KVCacheLayout:
    """Geometry of one pool. Invariant: every field positive; ``dtype`` is a floating dtype."""

    num_layers: int
    block_size: int  # tokens per block
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        for name in ("num_layers", "block_size", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"KVCacheLayout.{name} must be a positive int, got {value!r}")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(
                f"KVCacheLayout.dtype must be a floating torch.dtype, got {self.dtype!r}")

    @classmethod
    def for_model(cls, config: ModelConfig, block_size: int, dtype: torch.dtype) -> "KVCacheLayout":
        return cls(config.num_hidden_layers, block_size, config.num_key_value_heads,
                   config.head_dim, dtype)

    @classmethod
    def of(cls, kv: torch.Tensor) -> "KVCacheLayout":
        """The layout of an existing pool tensor (raises if it is not block-major 6-D)."""
        if kv.dim() != 6 or kv.shape[2] != 2:
            raise ValueError("expected a pool tensor [num_blocks, num_layers, 2, block_size, "
                             f"num_kv_heads, head_dim], got shape {tuple(kv.shape)}")
        _, layers, _, block_size, heads, head_dim = kv.shape
        return cls(layers, block_size, heads, head_dim, kv.dtype)

    def shape(self, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks, self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def elements_per_block(self) -> int:
        return self.num_layers * 2 * self.block_size * self.num_kv_heads * self.head_dim

    @property
    def bytes_per_block(self) -> int:
        return self.elements_per_block * torch.empty((), dtype=self.dtype).element_size()

    def num_blocks_for_bytes(self, budget_bytes: int) -> int:
        """How many blocks fit in ``budget_bytes`` (for sizing a pool from a memory budget)."""
        return max(0, int(budget_bytes) // self.bytes_per_block)

    def allocate(self, num_blocks: int, device: torch.device | str = "cpu") -> torch.Tensor:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks <= 0:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        # NOTE(inference-mode): allocate a normal tensor even when called under
        # torch.inference_mode(), else copies made outside it (swap, defrag) would raise.
        with torch.inference_mode(False):
            return torch.zeros(self.shape(num_blocks), dtype=self.dtype, device=device)


def allocate_kv_cache(num_blocks: int, model_config: ModelConfig, block_size: int,
                      dtype: torch.dtype = torch.float32,
                      device: torch.device | str = "cpu") -> torch.Tensor:
    """A zeroed block-major pool ``[num_blocks, layers, 2, block_size, kv_heads, head_dim]``."""
    return KVCacheLayout.for_model(model_config, block_size, dtype).allocate(num_blocks, device)


def kv_bytes_per_block(model_config: ModelConfig, block_size: int,
                       dtype: torch.dtype = torch.float32) -> int:
    """Bytes one block holds across all layers (K and V): the unit of swap/defrag copies."""
    return KVCacheLayout.for_model(model_config, block_size, dtype).bytes_per_block


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """float32 inverse frequencies ``[head_dim // 2]`` (longrope: ``[2, head_dim // 2]``, the
    short then the long set), scaled as configured; ``head_dim`` is the rotated width
    (``ModelConfig.rotary_dim``), as transformers' rope functions take it.

    NOTE(oracle): computed in float32 from an int64 arange, as transformers does, so the cos/sin
    tables match the reference bit for bit.
    """
    # device="cpu" explicitly: the model may be built under torch.device("meta").
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    if scaling.rope_type == "default":
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    if scaling.rope_type == "dynamic":  # one table, vLLM's: rope_config.py NOTE(dynamic-ntk)
        length = scaling.original_max_position_embeddings
        ratio = scaling.factor * length / (scaling.max_trained_positions or length)
        base = theta * (ratio - (scaling.factor - 1)) ** (head_dim / (head_dim - 2))
        return 1.0 / (base ** exponents)
    if scaling.rope_type == "yarn":
        return _yarn_inv_freq(inv_freq, head_dim, theta, scaling)
    if scaling.rope_type == "longrope":  # [2, head_dim // 2]: short, long (NOTE(longrope-regime))
        # NOTE(oracle): transformers' operations in its order, so the table matches bit for bit
        return torch.stack([1.0 / (torch.tensor(factors, dtype=torch.float32, device="cpu")
                                   * theta ** exponents)
                            for factors in (scaling.short_factor, scaling.long_factor)])
    if scaling.rope_type != "llama3":  # ModelConfig already rejects this; keep the guard local
        raise ValueError(f"unsupported rope_type {scaling.rope_type!r}")
    # Llama 3.1: keep high frequencies, divide low ones by `factor`, blend linearly in between
    # (in wavelength space, relative to the pretraining context length).
    ctx = scaling.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    long_wave = wavelen > ctx / scaling.low_freq_factor
    short_wave = wavelen < ctx / scaling.high_freq_factor
    scaled = torch.where(long_wave, inv_freq / scaling.factor, inv_freq)
    blend = (ctx / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - blend) * scaled / scaling.factor + blend * scaled
    return torch.where(~short_wave & ~long_wave, blended, scaled)


def _yarn_inv_freq(inv_freq: torch.Tensor, head_dim: int, theta: float,
                   scaling: RopeScaling) -> torch.Tensor:
    """YaRN (Peng et al. 2023): frequencies that turn more than ``beta_fast`` times over the
    pretraining length are kept, those under ``beta_slow`` divided by ``factor``, and a linear
    ramp over the dimensions between blends the two, as transformers computes it."""
    def dim_at(rotations: float) -> float:  # the dimension that turns ``rotations`` times
        return (head_dim * math.log(scaling.original_max_position_embeddings
                                    / (rotations * 2 * math.pi))) / (2 * math.log(theta))
    low, high = dim_at(scaling.beta_fast), dim_at(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    dims = torch.arange(head_dim // 2, dtype=torch.float32, device="cpu")  # not meta either
    ramp = ((dims - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: the frequency as it is, 0: divided by factor
    # NOTE(oracle): transformers' operations in its order, so the table matches bit for bit
    pos = theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float()
                    / head_dim)
    return 1.0 / (scaling.factor * pos) * (1 - keep) + inv_freq * keep


class RotaryEmbedding:
    """Applies RoPE to query and key heads in place of a ``[tokens, heads, head_dim]`` tensor.

    Not an ``nn.Module`` on purpose: its table is derived from the config, never loaded from a
    checkpoint, so it survives ``to_empty``/meta-device construction unchanged.
    """

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling,
                 rotary_dim: int | None = None, context_length: int = 0) -> None:
        """``context_length``: the served context LongRoPE's set is first picked for (the
        model's; the engine refits it to its max_model_len: ``fit_context``)."""
        self.head_dim = head_dim
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        # float32, CPU master copy; over the rotated dimensions only (transformers' Phi-3)
        self._inv_freq = rope_inv_freq(self.rotary_dim, theta, scaling)
        self._factor = (scaling.attention_factor if scaling.rope_type in ("yarn", "longrope")
                        else 1.0)
        # longrope: [short, long]; fit_context picks the row (NOTE(longrope-regime))
        self._sets = self._inv_freq if scaling.rope_type == "longrope" else None
        self._original = scaling.original_max_position_embeddings
        self._inv_freq_by_device: dict[torch.device, torch.Tensor] = {}
        self.long_context = False
        if self._sets is not None:
            self._pick(context_length)

    @classmethod
    def from_config(cls, config: ModelConfig) -> "RotaryEmbedding":
        return cls(config.head_dim, config.rope_theta, config.rope_scaling, config.rotary_dim,
                   config.context_length)

    def _inv_freq_on(self, device: torch.device) -> torch.Tensor:
        cached = self._inv_freq_by_device.get(device)
        if cached is None:
            cached = self._inv_freq.to(device)
            self._inv_freq_by_device[device] = cached
        return cached

    def fit_context(self, max_model_len: int) -> None:
        """Pick LongRoPE's set for a served context of ``max_model_len`` tokens: the long one
        past the original length (NOTE(longrope-regime)), said in the log with how to get the
        short one; other RoPE types have one table."""
        if self._sets is None:
            return
        self._pick(max_model_len)
        if self.long_context:
            log.info("LongRoPE: the long factors serve every sequence (max_model_len %d is past "
                     "the model's original %d tokens); --max-model-len %d or less serves "
                     "short prompts with the short factors", max_model_len, self._original,
                     self._original)

    def _pick(self, max_model_len: int) -> None:
        self.long_context = max_model_len > self._original
        self._inv_freq = self._sets[int(self.long_context)]
        self._inv_freq_by_device.clear()

    @property
    def table(self) -> torch.Tensor:
        """The inverse frequencies in use, ``[rotary_dim // 2]`` float32 on the CPU."""
        return self._inv_freq

    def cos_sin(self, positions: torch.Tensor,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of shape ``[tokens, 1, rotary_dim]`` (broadcast over heads) in ``dtype``.

        Computed once per forward and shared by every layer.
        """
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq_on(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if self._factor != 1.0:  # yarn's and longrope's attention factor (transformers' order)
            cos, sin = cos * self._factor, sin * self._factor
        return cos.to(dtype)[:, None, :], sin.to(dtype)[:, None, :]

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x * cos + rotate_half(x) * sin`` for ``x`` of shape ``[tokens, heads, head_dim]``."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    @staticmethod
    def apply_partial(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """:meth:`apply` on the first ``cos.shape[-1]`` dimensions of each head of ``x``; the
        rest are passed through as they are."""
        dim = cos.shape[-1]
        return torch.cat((RotaryEmbedding.apply(x[..., :dim], cos, sin), x[..., dim:]), dim=-1)
