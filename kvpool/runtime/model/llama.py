"""LlamaModel: a Llama/Qwen2/Qwen3/Granite/Phi-3/Mistral decoder that reads and writes the paged
KV pool.

One ``forward`` serves a whole scheduler step: the new tokens of every sequence are flattened into
one ``[T, hidden]`` matrix for the embedding, the fused QKV / gate-up projections, the MLP and the
norms; only attention is per-sequence (see ``attention.py``). It returns the logits of each
sequence's last new token, ``[num_seqs, vocab]`` float32.

Parameters use transformers' names with two fusions (loaded by :meth:`LlamaModel.load_hf_weights`)::

    layers.{i}.self_attn.qkv_proj   = cat(q_proj, k_proj, v_proj)   rows [q | k | v]
    layers.{i}.mlp.gate_up_proj     = cat(gate_proj, up_proj)        rows [gate | up]

Phi-3 checkpoints store both fused already, under these names.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCacheLayout, PagedAttention, RotaryEmbedding
from .batch import PagedBatch, PreparedBatch
from .config import ModelConfig
from .errors import WeightLoadError

__all__ = ["LlamaModel"]


class RMSNorm(nn.Module):
    """``w * x / sqrt(mean(x^2) + eps)``, reduced in float32 as transformers does."""

    def __init__(self, size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class _MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * self.inter, bias=cfg.mlp_bias,
                                      dtype=dtype)
        self.down_proj = nn.Linear(self.inter, cfg.hidden_size, bias=cfg.mlp_bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.inter, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class _Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, kernel: PagedAttention) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.q_size, self.kv_size = cfg.q_size, cfg.kv_size
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size,
                                  bias=cfg.qkv_bias, dtype=dtype)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=cfg.o_bias, dtype=dtype)
        if cfg.qk_norm:  # Qwen3: each query and key head normed before RoPE
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype)
        self.qk_norm = cfg.qk_norm
        self.kernel = kernel
        # chosen once here, so a full-rotary model's step pays no per-layer test or slicing
        self.rotate = (RotaryEmbedding.apply if cfg.rotary_dim == cfg.head_dim
                       else RotaryEmbedding.apply_partial)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                layer: int, prep: PreparedBatch) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        qk = qkv[:, :self.q_size + self.kv_size].view(t, self.heads + self.kv_heads, self.head_dim)
        if self.qk_norm:
            qk = torch.cat([self.q_norm(qk[:, :self.heads]), self.k_norm(qk[:, self.heads:])], 1)
        # RoPE on q and k heads together (same positions, same tables): one pass, not two.
        qk = self.rotate(qk, cos, sin)
        q, k = qk[:, :self.heads], qk[:, self.heads:]
        v = qkv[:, self.q_size + self.kv_size:].view(t, self.kv_heads, self.head_dim)
        # NOTE(order): write before attend; the chunk's own keys are part of its context.
        self.kernel.write(kv, layer, k, v, prep)
        out = self.kernel.attend(q, k, v, kv, layer, prep)
        return self.o_proj(out.reshape(t, self.q_size))


class _DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, kernel: PagedAttention) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = _Attention(cfg, dtype, kernel)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = _MLP(cfg, dtype)
        self.residual = cfg.residual_multiplier  # Granite's; 1.0 elsewhere

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor,
                layer: int, prep: PreparedBatch) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(h), cos, sin, kv, layer, prep)
        h = h + (attn if self.residual == 1.0 else attn * self.residual)
        mlp = self.mlp(self.post_attention_layernorm(h))
        return h + (mlp if self.residual == 1.0 else mlp * self.residual)


class LlamaModel(nn.Module):
    """Llama-family causal LM over a block-major paged KV pool.

    Invariant: ``lm_head is None`` iff ``config.tie_word_embeddings`` (the output projection is
    then the embedding matrix itself, so the tie survives meta-device construction).
    """

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.config = config
        self.dtype = dtype
        self.rope = RotaryEmbedding.from_config(config)
        kernel = PagedAttention(config.num_attention_heads, config.num_key_value_heads,
                                config.head_dim, config.attention_multiplier)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(_DecoderLayer(config, dtype, kernel)
                                    for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.lm_head = (None if config.tie_word_embeddings else
                        nn.Linear(config.hidden_size, config.vocab_size, bias=False, dtype=dtype))

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def kv_layout(self, block_size: int) -> KVCacheLayout:
        return KVCacheLayout.for_model(self.config, block_size, self.dtype)

    # ------------------------------------------------------------------ forward
    def prepare(self, batch: PagedBatch, kv_cache: torch.Tensor) -> PreparedBatch:
        """Validate ``batch`` against ``kv_cache`` and build its tensors (done by ``forward``)."""
        layout = KVCacheLayout.of(kv_cache)
        expected = self.kv_layout(layout.block_size)
        if layout != expected:
            raise ValueError(f"kv_cache layout {layout} does not match the model's {expected}")
        if kv_cache.device != self.device:
            raise ValueError(f"kv_cache is on {kv_cache.device}, the model on {self.device}")
        return PreparedBatch.build(
            batch, block_size=layout.block_size, num_blocks=kv_cache.shape[0],
            vocab_size=self.config.vocab_size, device=self.device, dtype=self.dtype,
            sliding_window=self.config.sliding_window)

    @torch.inference_mode()
    def forward(self, batch: PagedBatch | PreparedBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        """Write the batch's K/V into ``kv_cache`` and return last-token logits ``[S, vocab]``.

        ``kv_cache`` is a pool from :func:`allocate_kv_cache` in the model's dtype and device.
        The logits are created under ``torch.inference_mode``: read them freely, but ``clone()``
        before editing them in place outside inference mode.
        """
        prep = batch if isinstance(batch, PreparedBatch) else self.prepare(batch, kv_cache)
        h = self._hidden(prep, kv_cache)
        if h.shape[0] != prep.last_token_index.shape[0]:
            h = h.index_select(0, prep.last_token_index)  # norm/lm_head only where needed
        return self._head(h)

    @torch.inference_mode()
    def forward_with_prompt_logits(self, batch: PagedBatch, kv_cache: torch.Tensor,
                                   full: Sequence[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``forward`` plus the logits of *every* query position of the sequences ``full``
        (indices into ``batch.seqs``): ``(last [S, vocab], [ [q_len_i, vocab] per i in full ])``.

        What prompt logprobs need; only those rows pay for the extra norm/lm_head rows, in the
        same single forward (no second pass)::

            flattened rows:  | seq 0 (q=3) | seq 1 (q=1) | seq 2 (q=4)  |    full = [2]
            head rows:       last of 0, 1, 2  ++  rows 4..7 of seq 2
        """
        prep = self.prepare(batch, kv_cache)
        h = self._hidden(prep, kv_cache)
        last = prep.last_token_index
        spans = []
        for i in full:
            q = len(batch.seqs[i].token_ids)
            end = int(last[i]) + 1
            spans.append(torch.arange(end - q, end, device=last.device))
        rows = torch.cat([last, *spans])
        logits = self._head(h.index_select(0, rows))
        s = last.shape[0]
        return logits[:s], list(logits[s:].split([len(x) for x in spans])) if spans else []

    def _hidden(self, prep: PreparedBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        h = F.embedding(prep.input_ids, self.embed_tokens.weight)
        if self.config.embedding_multiplier != 1.0:  # Granite
            h = h * self.config.embedding_multiplier
        cos, sin = self.rope.cos_sin(prep.positions, h.dtype)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, kv_cache, i, prep)
        return h

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(h)
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(h, weight).float()
        scaling = self.config.logits_scaling  # Granite divides its logits
        return logits if scaling == 1.0 else logits / scaling

    # ------------------------------------------------------------------ checkpoint names
    def _hf_map(self) -> dict[str, tuple[str, slice | None]]:
        """transformers tensor name -> (our parameter name, rows of it or None for all)."""
        out: dict[str, tuple[str, slice | None]] = {
            "model.embed_tokens.weight": ("embed_tokens.weight", None),
            "model.norm.weight": ("norm.weight", None),
        }
        if self.lm_head is not None:
            out["lm_head.weight"] = ("lm_head.weight", None)
        for i in range(self.config.num_hidden_layers):
            src, dst = f"model.layers.{i}.", f"layers.{i}."
            out.update({src + name: (dst + ours, rows)
                        for name, (ours, rows) in self._layer_map().items()})
        return out

    def _layer_map(self) -> dict[str, tuple[str, slice | None]]:
        """``_hf_map`` within one layer (names after ``model.layers.{i}.``)."""
        cfg = self.config
        q, kv, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
        fused = cfg.model_type == "phi3"  # Phi-3 stores q/k/v and gate/up fused, as ours
        out: dict[str, tuple[str, slice | None]] = {}
        for s in ["weight"] + (["bias"] if cfg.qkv_bias else []):
            qkv = f"self_attn.qkv_proj.{s}"
            out.update({qkv: (qkv, None)} if fused else {
                f"self_attn.q_proj.{s}": (qkv, slice(0, q)),
                f"self_attn.k_proj.{s}": (qkv, slice(q, q + kv)),
                f"self_attn.v_proj.{s}": (qkv, slice(q + kv, q + 2 * kv))})
        for s in ["weight"] + (["bias"] if cfg.o_bias else []):
            out[f"self_attn.o_proj.{s}"] = (f"self_attn.o_proj.{s}", None)
        for norm in ("q_norm", "k_norm") if cfg.qk_norm else ():
            out[f"self_attn.{norm}.weight"] = (f"self_attn.{norm}.weight", None)
        for s in ["weight"] + (["bias"] if cfg.mlp_bias else []):
            gate_up = f"mlp.gate_up_proj.{s}"
            out.update({gate_up: (gate_up, None)} if fused else {
                f"mlp.gate_proj.{s}": (gate_up, slice(0, inter)),
                f"mlp.up_proj.{s}": (gate_up, slice(inter, 2 * inter))})
            out[f"mlp.down_proj.{s}"] = (f"mlp.down_proj.{s}", None)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out[f"{norm}.weight"] = (f"{norm}.weight", None)
        return out

    @torch.no_grad()
    def load_hf_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy transformers-named tensors into the (possibly fused) parameters.

        Raises :class:`WeightLoadError` for an unexpected or mis-shaped tensor, and, after the
        iterable is exhausted, for any expected tensor that never came.
        """
        mapping = self._hf_map()
        params = dict(self.named_parameters())
        seen: set[str] = set()
        for name, tensor in weights:
            if name.endswith("rotary_emb.inv_freq"):
                continue  # derived from the config, old checkpoints stored it
            if name == "lm_head.weight" and self.lm_head is None:
                continue  # tied: some checkpoints store the copy anyway
            target = mapping.get(name)
            if target is None:
                raise WeightLoadError(
                    f"unexpected checkpoint tensor {name!r} for {self.config.architecture}; "
                    "the checkpoint does not match config.json (check attention_bias/mlp_bias/"
                    "tie_word_embeddings)")
            param_name, rows = target
            dst = params[param_name] if rows is None else params[param_name][rows]
            if tuple(tensor.shape) != tuple(dst.shape):
                raise WeightLoadError(f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)},"
                                      f" config.json implies {tuple(dst.shape)}")
            dst.copy_(tensor.to(device=dst.device, dtype=dst.dtype))
            seen.add(name)
        missing = sorted(set(mapping) - seen)
        if missing:
            more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
            raise WeightLoadError(f"checkpoint lacks {len(missing)} tensors: {missing[:5]}{more}")

    def hf_state_dict(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(transformers name, tensor)`` pairs, un-fused, for saving a HF checkpoint."""
        params = dict(self.named_parameters())
        for name, (param_name, rows) in self._hf_map().items():
            t = params[param_name].detach()
            yield name, (t if rows is None else t[rows]).contiguous()
