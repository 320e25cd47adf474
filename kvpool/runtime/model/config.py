"""ModelConfig: the frozen, validated part of a Hugging Face ``config.json`` the model needs.

Supported families: Llama (``LlamaForCausalLM``), Qwen2 (``Qwen2ForCausalLM``, bias on q/k/v),
Qwen3 (``Qwen3ForCausalLM``: an RMSNorm on each query and key head before RoPE, q/k/v/o bias when
``attention_bias``), Granite 3 (``GraniteForCausalLM``: Llama scaled by four multipliers, of the
embeddings, of each residual branch, of the attention scores and of the logits), Phi-3 and
Phi-4 (``Phi3ForCausalLM``: q/k/v and gate/up stored fused, optional sliding window) and Mistral
(``MistralForCausalLM``, optional sliding window). RoPE parameters, a partial rotary factor
(Phi-3's) among them, are read from either layout transformers has used (rope_config.py).

Every error is a :class:`ModelConfigError` that names the offending key and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import ModelConfigError, ModelLoadError
from .rope_config import RopeScaling, check_partial_rotary, parse_rope

__all__ = ["ModelConfig", "ModelConfigError", "RopeScaling"]

# model_type -> the transformers architecture name whose weight layout we load.
_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "granite": "GraniteForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "mistral": "MistralForCausalLM",
}
_MULTIPLIERS = ("embedding_multiplier", "residual_multiplier", "attention_multiplier",
                "logits_scaling")  # Granite's


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape and numerics of a Llama-family decoder.

    Invariant (checked in ``__post_init__``): ``num_attention_heads % num_key_value_heads == 0``,
    ``head_dim`` is even, every size is a positive int, ``rms_norm_eps > 0``, ``rope_theta > 0``,
    ``rotary_dim`` is even and positive (a factor below 1 only for a family that honours it).
    """

    model_type: str  # "llama" | "qwen2" | "qwen3" | "granite" | "phi3" | "mistral"
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # < num_attention_heads means grouped-query attention
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = RopeScaling()
    partial_rotary_factor: float = 1.0  # Phi-3: RoPE on the first rotary_dim dims of each head
    qkv_bias: bool = False  # Qwen2 always; Llama when attention_bias
    o_bias: bool = False  # Llama when attention_bias
    mlp_bias: bool = False  # Llama when mlp_bias
    qk_norm: bool = False  # Qwen3: RMSNorm over each query and key head (q_norm, k_norm)
    # Granite: embeddings * embedding_multiplier, each residual branch * residual_multiplier,
    # attention scores * attention_multiplier (None: 1/sqrt(head_dim)), logits / logits_scaling
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None
    logits_scaling: float = 1.0
    sliding_window: int | None = None  # Mistral: key visible iff q_pos - k_pos < sliding_window
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.model_type not in _ARCHITECTURES:
            raise ModelConfigError(
                "model_type",
                f"unsupported {self.model_type!r}; supported: {sorted(_ARCHITECTURES)}",
            )
        for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelConfigError(key, f"must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelConfigError(
                "num_key_value_heads",
                f"{self.num_key_value_heads} must divide num_attention_heads="
                f"{self.num_attention_heads} (grouped-query attention)",
            )
        if self.head_dim % 2:
            raise ModelConfigError("head_dim", f"must be even for RoPE, got {self.head_dim}")
        if not (isinstance(self.rms_norm_eps, (int, float)) and 0 < self.rms_norm_eps < 1):
            raise ModelConfigError("rms_norm_eps", f"must be in (0, 1), got {self.rms_norm_eps!r}")
        if not (isinstance(self.rope_theta, (int, float)) and math.isfinite(self.rope_theta)
                and self.rope_theta > 0):
            raise ModelConfigError("rope_theta",
                                   f"must be a positive number, got {self.rope_theta!r}")
        check_partial_rotary(self.model_type, self.partial_rotary_factor, head_dim=self.head_dim)
        if self.sliding_window is not None and (
                isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int)
                or self.sliding_window <= 0):
            raise ModelConfigError(
                "sliding_window",
                f"must be a positive integer or null, got {self.sliding_window!r}")
        for key in _MULTIPLIERS:
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not math.isfinite(value) or value <= 0):
                raise ModelConfigError(key, f"must be a positive number, got {value!r}")
        for tid in self.eos_token_ids:
            if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
                raise ModelConfigError("eos_token_id", f"token ids must be ints >= 0, got {tid!r}")

    # ------------------------------------------------------------------ derived sizes
    @property
    def architecture(self) -> str:
        """The transformers class name whose checkpoint layout this config describes."""
        return _ARCHITECTURES[self.model_type]

    @property
    def context_length(self) -> int:
        """The longest sequence the model takes, as vLLM 0.33 derives it.

        NOTE(rope-context): linear and dynamic RoPE stretch ``max_position_embeddings`` by
        their factor; llama3, yarn and longrope leave it as written, already the scaled length
        (vLLM 0.33's ``_get_and_verify_max_len`` skips their factor, as transformers'
        ``_compute_yarn_parameters`` reads max_position_embeddings). A yarn config whose
        max_position_embeddings is the unscaled length (Qwen2.5's recipe adds rope_scaling
        alone) is therefore served at that length, as vLLM 0.33 serves it: raise
        max_position_embeddings to ``original * factor``, or allow a longer --max-model-len
        (engine/context_fit.py NOTE(long-context))."""
        if self.rope_scaling.rope_type in ("linear", "dynamic"):
            return int(self.max_position_embeddings * self.rope_scaling.factor)
        return self.max_position_embeddings

    @property
    def rotary_dim(self) -> int:
        """The leading dimensions of each head that RoPE rotates, truncated as transformers
        and vLLM truncate them; the rest pass through unrotated."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_pretrained(cls, path: str | Path) -> "ModelConfig":
        """Read ``<path>/config.json`` (or ``path`` itself when it names a file)."""
        path = Path(path)
        file = path if path.is_file() else path / "config.json"
        if not file.is_file():
            raise ModelLoadError(
                f"{file} not found: point the model path at a local Hugging Face directory "
                "that contains config.json (hub downloads are not supported)")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:  # a load error: ModelConfigError names a key
            raise ModelLoadError(f"{file} is not valid JSON: {exc}") from exc
        return cls.from_hf_dict(data)

    @classmethod
    def from_hf_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """Parse a config.json dict as written by transformers 4.x or 5.x."""
        if not isinstance(d, Mapping):
            raise ModelConfigError("top level", f"must be a JSON object, got {type(d).__name__}")
        model_type = _parse_model_type(d)
        hidden_act = d.get("hidden_act", "silu")
        if hidden_act != "silu":
            raise ModelConfigError("hidden_act", f"only 'silu' is supported, got {hidden_act!r}")
        hidden, heads = _required(d, "hidden_size"), _required(d, "num_attention_heads")
        head_dim = _parse_head_dim(d, hidden, heads)
        theta, scaling, partial = parse_rope(d, model_type, head_dim)
        family = _parse_family(d, model_type)
        eos = d.get("eos_token_id")
        eos_ids = () if eos is None else (tuple(eos) if isinstance(eos, (list, tuple)) else (eos,))
        return cls(
            model_type=model_type,
            hidden_size=hidden,
            intermediate_size=_required(d, "intermediate_size"),
            num_hidden_layers=_required(d, "num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            vocab_size=_required(d, "vocab_size"),
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            rope_theta=theta,
            rope_scaling=scaling,
            partial_rotary_factor=partial,
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
            **family,
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """A transformers 5.x style config.json dict (``rope_parameters``) for this config."""
        rope: dict[str, Any] = {"rope_type": self.rope_scaling.rope_type,
                                "rope_theta": self.rope_theta}
        if self.rope_scaling.rope_type != "default":
            rope.update({k: v for k, v in asdict(self.rope_scaling).items() if v not in ((), None)})
        if self.partial_rotary_factor != 1.0:
            rope["partial_rotary_factor"] = self.partial_rotary_factor
        out: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta,
            "rope_parameters": rope,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": (list(self.eos_token_ids) if len(self.eos_token_ids) > 1
                             else (self.eos_token_ids[0] if self.eos_token_ids else None)),
            "torch_dtype": "float32",
        }
        if self.rope_scaling.rope_type == "longrope":  # read before rope's: NOTE(longrope-original)
            out["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
        if self.model_type in ("llama", "qwen3", "granite"):
            out["attention_bias"] = self.o_bias
        if self.model_type in ("llama", "granite"):
            out["mlp_bias"] = self.mlp_bias
        if self.model_type == "granite":
            out.update({key: getattr(self, key) for key in _MULTIPLIERS})
        if self.model_type in ("mistral", "phi3"):
            out["sliding_window"] = self.sliding_window
        return out


def _required(d: Mapping[str, Any], key: str) -> Any:
    if d.get(key) is None:
        raise ModelConfigError(key, "required key is missing")
    return d[key]


def _parse_model_type(d: Mapping[str, Any]) -> str:
    """``model_type``, else the family a listed architecture names; checked before any other
    key.

    NOTE(architectures-first): vLLM picks the model class from ``architectures``, so that list
    is read first: a config naming no supported class (Gemma, GPT-2, a Llama with a
    ``...ForSequenceClassification`` head) is refused by its class names, not by whichever
    size or activation key of that family happens to differ from Llama's.
    """
    archs = d.get("architectures") or []
    if isinstance(archs, str) or not isinstance(archs, (list, tuple)):
        raise ModelConfigError("architectures", f"must be a list of class names, got {archs!r}")
    by_arch = {v: k for k, v in _ARCHITECTURES.items()}
    families = [by_arch[a] for a in archs if a in by_arch]
    if archs and not families:
        raise ModelConfigError(
            "architectures", f"unsupported {list(archs)!r}; kvpool serves these causal-LM "
            f"classes only: {sorted(by_arch)}")
    model_type = d.get("model_type") or (families[0] if families else None)
    if model_type is None:
        raise ModelConfigError("model_type", "missing, and no architectures; set model_type to "
                                             f"one of {sorted(_ARCHITECTURES)}")
    if model_type not in _ARCHITECTURES:
        raise ModelConfigError(
            "model_type", f"unsupported {model_type!r}; supported: {sorted(_ARCHITECTURES)}")
    return model_type


def _parse_head_dim(d: Mapping[str, Any], hidden: Any, heads: Any) -> Any:
    """``head_dim``, else ``hidden_size / num_attention_heads`` when that divides."""
    head_dim = d.get("head_dim")
    if head_dim is None:
        if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0 \
                or hidden % heads:
            raise ModelConfigError(
                "head_dim", f"absent and hidden_size={hidden!r} is not a multiple of "
                f"num_attention_heads={heads!r}; add head_dim")
        head_dim = hidden // heads
    return head_dim


def _parse_family(d: Mapping[str, Any], model_type: str) -> dict[str, Any]:
    """The fields one family sets its own way: biases (Llama's, Granite's and Qwen3's flags,
    Qwen2's fixed q/k/v bias), Qwen3's per-head q/k norms, Granite's multipliers and the
    sliding window of Mistral and Phi-3."""
    family: dict[str, Any] = {"qkv_bias": False, "o_bias": False, "mlp_bias": False,
                              "qk_norm": model_type == "qwen3", "sliding_window": None}
    if model_type in ("llama", "qwen3", "granite"):
        family["qkv_bias"] = family["o_bias"] = bool(d.get("attention_bias", False))
        family["mlp_bias"] = model_type != "qwen3" and bool(d.get("mlp_bias", False))
    if model_type == "granite":
        # transformers' GraniteConfig defaults every multiplier to 1.0, attention's too
        family.update({key: 1.0 if d.get(key) is None else d[key] for key in _MULTIPLIERS})
    elif model_type == "qwen2":
        family["qkv_bias"] = True
    elif model_type in ("mistral", "phi3"):
        family["sliding_window"] = d.get("sliding_window")
    if model_type in ("qwen2", "qwen3") and d.get("use_sliding_window"):
        raise ModelConfigError(
            "use_sliding_window", "Qwen sliding-window layers are not supported; set it to "
            "false (the released Qwen2, Qwen2.5 and Qwen3 checkpoints do)")
    return family
