"""Rotary position embedding (RoPE) with the Hugging Face Llama ``rotate_half`` convention.

A head vector ``x`` of size ``d`` is split in halves ``x = [x1 | x2]`` (NOT interleaved pairs)::

    rotate_half(x) = [-x2 | x1]
    rope(x, pos)   = x * cos(pos * f) + rotate_half(x) * sin(pos * f)
    f              = [inv_freq | inv_freq],   inv_freq[i] = theta ** (-2i / d),  i < d/2

Positions are absolute token indices within the sequence, so a chunk that starts at position
``start`` (a cached prefix or an earlier prefill chunk) rotates exactly as a one-shot prefill would.
"""

from __future__ import annotations

import math

import torch

from .config import ModelConfig, RopeScaling

__all__ = ["RotaryEmbedding", "rope_inv_freq"]


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """float32 inverse frequencies ``[head_dim // 2]``, with llama3 scaling when configured.

    NOTE(oracle): computed in float32 from an int64 arange, as transformers does, so the cos/sin
    tables match the reference bit for bit.
    """
    # device="cpu" explicitly: the model may be built under torch.device("meta").
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    if scaling.rope_type == "default":
        return inv_freq
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


class RotaryEmbedding:
    """Applies RoPE to query and key heads in place of a ``[tokens, heads, head_dim]`` tensor.

    Not an ``nn.Module`` on purpose: its table is derived from the config, never loaded from a
    checkpoint, so it survives ``to_empty``/meta-device construction unchanged.
    """

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling) -> None:
        self.head_dim = head_dim
        self._inv_freq = rope_inv_freq(head_dim, theta, scaling)  # float32, CPU master copy
        self._inv_freq_by_device: dict[torch.device, torch.Tensor] = {}

    @classmethod
    def from_config(cls, config: ModelConfig) -> "RotaryEmbedding":
        return cls(config.head_dim, config.rope_theta, config.rope_scaling)

    def _inv_freq_on(self, device: torch.device) -> torch.Tensor:
        cached = self._inv_freq_by_device.get(device)
        if cached is None:
            cached = self._inv_freq.to(device)
            self._inv_freq_by_device[device] = cached
        return cached

    def cos_sin(self, positions: torch.Tensor,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of shape ``[tokens, 1, head_dim]`` (broadcast over heads) in ``dtype``.

        Computed once per forward and shared by every layer.
        """
        freqs = positions.to(torch.float32)[:, None] * self._inv_freq_on(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x * cos + rotate_half(x) * sin`` for ``x`` of shape ``[tokens, heads, head_dim]``."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin
