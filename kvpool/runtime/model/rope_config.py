"""The RoPE part of a Hugging Face ``config.json``: theta, frequency scaling and the share of
each head that is rotated (``partial_rotary_factor``), from either layout transformers has used:

* 4.x: top-level ``rope_theta`` and ``partial_rotary_factor`` plus an optional ``rope_scaling``
  dict (``type`` or ``rope_type``: ``linear``, ``dynamic``, ``llama3``, ``yarn`` or
  ``longrope``);
* 5.x: ``rope_parameters = {"rope_type": "default", "rope_theta": ...,
  "partial_rotary_factor": ...}``.

Every error is a :class:`ModelConfigError` that names the offending key and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ModelConfigError

__all__ = ["PARTIAL_ROTARY_FAMILIES", "RopeScaling", "check_partial_rotary", "parse_rope"]

_SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear", "dynamic", "yarn", "longrope")
# NOTE(partial-rotary): the families whose transformers modeling code rotates only the first
# int(head_dim * partial_rotary_factor) dimensions (Phi-3's apply_rotary_pos_emb slices them).
# Llama, Qwen2/3, Granite and Mistral rotate the whole head whatever the key says while vLLM's
# get_rope honours it for every family, so for those a factor < 1 has no single meaning: it
# is refused rather than served one way or the other (docs/architecture.md, "The model").
PARTIAL_ROTARY_FAMILIES = ("phi3",)


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """RoPE frequency scaling. ``rope_type == "default"`` means none (other fields unused);
    ``linear`` divides every frequency by ``factor``; ``dynamic`` raises theta once
    (NOTE(dynamic-ntk)); ``llama3`` and ``yarn`` blend scaled and unscaled frequencies by
    wavelength (kvpool/runtime/model/attention.py ``rope_inv_freq``); ``longrope`` divides them
    by ``short_factor`` or ``long_factor`` (NOTE(longrope-regime))."""

    rope_type: str = "default"  # "default" | "llama3" | "linear" | "dynamic" | "yarn" | "longrope"
    factor: float = 1.0  # the divisor of the scaled frequencies (longrope: context growth)
    low_freq_factor: float = 1.0  # llama3: wavelengths above orig_ctx / low_freq_factor are scaled
    high_freq_factor: float = 4.0  # llama3: wavelengths below orig_ctx / high_freq_factor are kept
    # llama3, yarn, longrope: pretraining length; dynamic: max_position_embeddings, which
    # ``factor`` stretches (vLLM's table length)
    original_max_position_embeddings: int = 8192
    max_trained_positions: int | None = None  # dynamic, as written (None: max_position_embeddings)
    beta_fast: float = 32.0  # yarn: rotations above which a frequency is kept
    beta_slow: float = 1.0  # yarn: rotations below which a frequency is scaled
    attention_factor: float = 1.0  # yarn, longrope: cos and sin are multiplied by it
    truncate: bool = True  # yarn: the ramp's ends rounded to whole dimensions
    short_factor: tuple[float, ...] = ()  # longrope: per-frequency divisors, rotary_dim / 2
    long_factor: tuple[float, ...] = ()  # longrope: the same past the pretraining length


def parse_rope(d: Mapping[str, Any], model_type: str,
               head_dim: int) -> tuple[float, RopeScaling, float]:
    """(theta, scaling, partial_rotary_factor) from ``rope_parameters`` (5.x) or
    ``rope_theta``/``rope_scaling``/``partial_rotary_factor`` (4.x); ``head_dim`` sizes the
    longrope factor lists.

    NOTE(phi3-yarn): transformers' Phi3Config renames an old config's "yarn" (or "su") to
    "longrope", so a Phi-3 checkpoint saying "yarn" was trained with LongRoPE and is read
    as such (served as YaRN its output would differ from transformers' without a word)."""
    params = d.get("rope_parameters")
    key = "rope_parameters"
    if params is None:
        params = dict(d.get("rope_scaling") or {})
        key = "rope_scaling"
        params.setdefault("rope_theta", d.get("rope_theta", 10000.0))
    if not isinstance(params, Mapping):
        raise ModelConfigError(key, f"must be an object, got {type(params).__name__}")
    if params and all(isinstance(v, Mapping) for v in params.values()):
        raise ModelConfigError(key, "per-layer-type RoPE parameters are not supported by "
                                    "Llama/Qwen/Mistral; use one flat object")
    partial = _parse_partial(d, params, key, model_type)
    theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
    type_key = _type_key(params, key)
    rope_type = params.get(type_key, "default") or "default"
    if model_type == "phi3" and rope_type in ("yarn", "su"):  # NOTE(phi3-yarn)
        rope_type = "longrope"
    if rope_type not in _SUPPORTED_ROPE_TYPES:
        raise ModelConfigError(
            f"{key}.{type_key}", f"unsupported RoPE type {rope_type!r}; supported: "
            f"{list(_SUPPORTED_ROPE_TYPES)}")
    return theta, _scaling(rope_type, params, key, d, model_type, int(head_dim * partial)), partial


def _type_key(params: Mapping[str, Any], key: str) -> str:
    """The spelling of the RoPE type the file used, ``rope_type`` or the legacy ``type``.
    Both, disagreeing, is refused as vLLM refuses it (``rope_type: null`` beside ``type:
    dynamic`` was served as plain RoPE with half the context, without a word)."""
    if "rope_type" in params and "type" in params and params["rope_type"] != params["type"]:
        raise ModelConfigError(f"{key}.rope_type", f"{params['rope_type']!r} disagrees with "
                               f"{key}.type {params['type']!r}: keep one of the two keys")
    return "rope_type" if "rope_type" in params else "type"


def _scaling(rope_type: str, params: Mapping[str, Any], key: str, d: Mapping[str, Any],
             model_type: str, rotary_dim: int) -> RopeScaling:
    """The :class:`RopeScaling` of a supported ``rope_type``, read from ``params``."""
    max_pos = d.get("max_position_embeddings", 2048)
    if rope_type == "default":
        return RopeScaling()
    if rope_type == "linear":
        return RopeScaling("linear", _positive(params.get("factor"), f"{key}.factor"))
    if rope_type == "dynamic":
        return _dynamic(params, key, max_pos, rotary_dim)
    if rope_type == "yarn":
        return _yarn(params, key, max_pos)
    if rope_type == "longrope":
        return _longrope(params, key, d, model_type, rotary_dim)
    return _llama3(params, key)


def _parse_partial(d: Mapping[str, Any], params: Mapping[str, Any], key: str,
                   model_type: str) -> float:
    """The rope object's ``partial_rotary_factor``, else the top-level one, else 1.0: the
    object's wins, as transformers 5 merges a 4.x config (``setdefault``), and vLLM too."""
    if params.get("partial_rotary_factor") is not None:
        partial, where = params["partial_rotary_factor"], f"{key}.partial_rotary_factor"
    else:
        partial, where = d.get("partial_rotary_factor"), "partial_rotary_factor"
    if partial is None:
        return 1.0
    check_partial_rotary(model_type, partial, where=where)
    return float(partial)


def check_partial_rotary(model_type: str, partial: Any, where: str = "partial_rotary_factor",
                         head_dim: int | None = None) -> None:
    """A factor in (0, 1], below 1 only for the families of NOTE(partial-rotary), and (given
    ``head_dim``) rotating a positive even number of dimensions."""
    if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not (
            math.isfinite(partial) and 0 < partial <= 1):
        raise ModelConfigError(where, f"must be a number in (0, 1], got {partial!r}")
    if partial != 1 and model_type not in PARTIAL_ROTARY_FAMILIES:
        raise ModelConfigError(
            where, f"{partial!r} is not supported for model_type {model_type!r}: transformers "
            "rotates the whole head for this family (its modeling code ignores the key) while "
            "vLLM rotates only part of it, so the checkpoint's meaning is ambiguous; remove "
            f"the key or set it to 1.0 (partial rotary is served for {PARTIAL_ROTARY_FAMILIES})")
    rotary_dim = None if head_dim is None else int(head_dim * partial)  # ModelConfig.rotary_dim
    if rotary_dim is not None and (rotary_dim <= 0 or rotary_dim % 2):
        raise ModelConfigError(where, f"int(head_dim * {partial!r}) = {rotary_dim} must be a "
                                      "positive even number of rotated dimensions")


def _positive(value: Any, where: str, rope_type: str = "this") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ModelConfigError(where, f"{rope_type} RoPE needs a positive number, got {value!r}")
    return value


def _llama3(params: Mapping[str, Any], key: str) -> RopeScaling:
    values = {name: _positive(params.get(name), f"{key}.{name}", "llama3") for name in (
        "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
    if values["high_freq_factor"] <= values["low_freq_factor"]:
        raise ModelConfigError(f"{key}.high_freq_factor",
                               "must be greater than low_freq_factor for llama3 RoPE")
    values["original_max_position_embeddings"] = int(values["original_max_position_embeddings"])
    return RopeScaling(rope_type="llama3", **values)


def _dynamic(params: Mapping[str, Any], key: str, max_pos: Any,
             rotary_dim: int) -> RopeScaling:
    """Dynamic NTK RoPE as vLLM serves it (``DynamicNTKScalingRotaryEmbedding``).

    NOTE(dynamic-ntk): vLLM computes one table per model, ``theta * (factor * max_pos /
    max_trained - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))`` with ``max_pos`` the
    checkpoint's max_position_embeddings and ``max_trained`` the rope object's
    ``max_trained_positions`` (default max_pos: theta then stays as written), and derives a
    context of ``max_pos * factor``. transformers instead recomputes theta from each forward
    call's length past max_pos. So up to max_position_embeddings tokens kvpool, vLLM and
    transformers agree (a ``max_trained_positions`` changes theta for vLLM and kvpool only);
    past it transformers raises theta with the length, vLLM's table (max_pos rows) runs out,
    and kvpool keeps rotating by its one table: a KV cache holds keys rotated once
    (docs/architecture.md, "The model")."""
    if params.get("alpha") is not None:
        raise ModelConfigError(f"{key}.alpha", "dynamic RoPE by alpha is not supported; give "
                                              "a factor instead")
    factor = _positive(params.get("factor"), f"{key}.factor", "dynamic")
    max_pos = int(_positive(max_pos, "max_position_embeddings", "dynamic"))
    trained = params.get("max_trained_positions")
    if trained is not None:
        trained = int(_positive(trained, f"{key}.max_trained_positions", "dynamic"))
    if factor * max_pos / (trained or max_pos) - (factor - 1) <= 0:
        raise ModelConfigError(f"{key}.max_trained_positions",
                               f"{trained} makes the NTK base negative for factor {factor}")
    if rotary_dim <= 2:
        raise ModelConfigError("head_dim", f"dynamic RoPE needs more than 2 rotated dimensions, "
                                           f"got {rotary_dim}")
    return RopeScaling("dynamic", factor, original_max_position_embeddings=max_pos,
                       max_trained_positions=trained)


def _yarn(params: Mapping[str, Any], key: str, max_pos: int) -> RopeScaling:
    """YaRN as transformers computes it: the pretraining length defaults to
    ``max_position_embeddings`` (``max_pos``) and ``factor`` to their ratio; the attention
    factor, when not given, is ``0.1 ln(factor) + 1``, or DeepSeek's ratio of two such terms
    with ``mscale`` and ``mscale_all_dim``; the betas default to 32 and 1."""
    orig = params.get("original_max_position_embeddings") or max_pos
    orig = int(_positive(orig, f"{key}.original_max_position_embeddings", "yarn"))
    factor = params.get("factor")
    factor = _positive(max_pos / orig if factor is None else factor, f"{key}.factor", "yarn")
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        attention = (_mscale(factor, mscale) / _mscale(factor, mscale_all)
                     if mscale and mscale_all else _mscale(factor, 1.0))
    return RopeScaling(
        "yarn", factor, original_max_position_embeddings=orig,
        beta_fast=_positive(params.get("beta_fast") or 32, f"{key}.beta_fast", "yarn"),
        beta_slow=_positive(params.get("beta_slow") or 1, f"{key}.beta_slow", "yarn"),
        attention_factor=_positive(attention, f"{key}.attention_factor", "yarn"),
        truncate=bool(params.get("truncate", True)))


def _mscale(factor: float, mscale: float) -> float:
    """YaRN's attention temperature term (its paper's equation 21)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _longrope(params: Mapping[str, Any], key: str, d: Mapping[str, Any], model_type: str,
              rotary_dim: int) -> RopeScaling:
    """LongRoPE as transformers computes it: ``factor`` defaults to ``max_position_embeddings``
    over the pretraining length, and the attention factor to ``sqrt(1 + ln(factor) /
    ln(original))`` (1 when the factor is at most 1); each factor list holds one positive
    divisor per rotated frequency."""
    orig = _longrope_original(params, key, d, model_type)
    max_pos = d.get("max_position_embeddings", 2048)
    factor = params.get("factor")
    factor = _positive(max_pos / orig if factor is None else factor, f"{key}.factor", "longrope")
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
    short, long = (_factor_list(params.get(name), f"{key}.{name}", rotary_dim)
                   for name in ("short_factor", "long_factor"))
    return RopeScaling("longrope", factor, original_max_position_embeddings=orig,
                       attention_factor=_positive(attention, f"{key}.attention_factor",
                                                  "longrope"),
                       short_factor=short, long_factor=long)


def _longrope_original(params: Mapping[str, Any], key: str, d: Mapping[str, Any],
                       model_type: str) -> int:
    """The pretraining length. NOTE(longrope-original): transformers' standardize_rope_params
    gives the top-level key priority over the rope object's, and Phi3Config defaults it to
    4096 even where only the rope object has one; a rope object that disagrees with the
    length transformers would use is refused rather than silently overridden."""
    inner = params.get("original_max_position_embeddings")
    top = d.get("original_max_position_embeddings")
    if top is None:
        top = 4096 if model_type == "phi3" else inner or d.get("max_position_embeddings", 2048)
    orig = int(_positive(top, "original_max_position_embeddings", "longrope"))
    if inner is not None and inner != orig:
        raise ModelConfigError(
            f"{key}.original_max_position_embeddings", f"{inner!r} disagrees with the "
            f"{orig} transformers reads from the top-level original_max_position_embeddings"
            f"{' (Phi3Config default)' if 'original_max_position_embeddings' not in d else ''}"
            "; set both to the pretraining context length")
    return orig


def _factor_list(value: Any, where: str, rotary_dim: int) -> tuple[float, ...]:
    """A list of ``rotary_dim / 2`` positive finite numbers (one per rotated frequency)."""
    if not isinstance(value, (list, tuple)) or len(value) != rotary_dim // 2:
        got = f"{len(value)} entries" if isinstance(value, (list, tuple)) else repr(value)
        raise ModelConfigError(where, f"longrope needs a list of rotary_dim / 2 = "
                                      f"{rotary_dim // 2} numbers, got {got}")
    for x in value:
        _positive(x, where, "longrope")
    return tuple(float(x) for x in value)
