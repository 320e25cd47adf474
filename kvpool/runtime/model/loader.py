"""Load a local Hugging Face model directory: config.json, safetensors weights, tokenizer.json.

::

    <dir>/config.json                        required (ModelConfig.from_pretrained)
    <dir>/model.safetensors                  one file, or
    <dir>/model.safetensors.index.json       {"weight_map": {tensor: shard}} + the shards, or
    <dir>/*.safetensors                      any other set of safetensors files
    <dir>/tokenizer.json                     for load_tokenizer
    <dir>/generation_config.json             optional: eos/bos ids (config.json's when absent)
    <dir>/tokenizer_config.json              optional: eos_token/bos_token strings
    <dir>/special_tokens_map.json            optional: the older layout's eos_token/bos_token

Only local paths: a hub id is read from the local Hugging Face cache's snapshot when the cache
holds it (hf_cache.py, resolved by ``kvpool serve``), else rejected with a clear message;
nothing is ever downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from safetensors import SafetensorError, safe_open

from .config import ModelConfig
from .errors import ModelLoadError
from .llama import LlamaModel
from .tokenizer import Tokenizer

__all__ = ["SafetensorsCheckpoint", "load_model", "load_tokenizer", "resolve_dtype"]

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``torch.float32`` / ``"bfloat16"`` / ``"fp16"``... -> a floating torch dtype."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ModelLoadError(f"dtype must be floating point, got {dtype}")
        return dtype
    try:
        return _DTYPES[str(dtype).lower().removeprefix("torch.")]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


def _model_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        hint = (" (looks like a hub id the Hugging Face cache does not hold: download it "
                "yourself and pass its local directory, or its cache with HF_HOME; kvpool never "
                "downloads)" if not p.exists() and str(path).count("/") == 1 else "")
        raise ModelLoadError(
            f"model directory {str(p)!r} does not exist or is not a directory{hint}")
    return p


class SafetensorsCheckpoint:
    """The safetensors files of a model directory, read lazily one tensor at a time.

    Invariant: ``files`` is non-empty and every file exists (checked at construction).
    """

    INDEX = "model.safetensors.index.json"

    def __init__(self, directory: str | Path) -> None:
        self.directory = _model_dir(directory)
        self.files = self._find_files()

    def _find_files(self) -> list[Path]:
        d = self.directory
        index = d / self.INDEX
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ModelLoadError(f"{index}: not a safetensors index with a 'weight_map' "
                                     f"object ({exc})") from exc
            files = [d / name for name in dict.fromkeys(weight_map.values())]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise ModelLoadError(f"{index} lists shards that are missing from {d}: {missing}")
            return files
        single = d / "model.safetensors"
        if single.is_file():
            return [single]
        files = sorted(d.glob("*.safetensors"))
        if files:
            return files
        if any(d.glob("*.bin")) or any(d.glob("*.pt")):
            raise ModelLoadError(f"{d} holds only PyTorch pickle weights (*.bin/*.pt); convert "
                                 "them to safetensors (transformers: model.save_pretrained(dir)):"
                                 " pickles are never loaded")
        raise ModelLoadError(f"no *.safetensors weights in {d} (expected model.safetensors or "
                             f"{self.INDEX} with its shards)")

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, cpu tensor)`` for every tensor of every file."""
        for file in self.files:
            try:
                with safe_open(str(file), framework="pt", device="cpu") as f:
                    for name in f.keys():
                        yield name, f.get_tensor(name)
            except SafetensorError as exc:
                raise ModelLoadError(f"{file}: unreadable safetensors file ({exc})") from exc


def load_model(path: str | Path, dtype: torch.dtype | str = torch.float32,
               device: torch.device | str = "cpu") -> LlamaModel:
    """Build a :class:`LlamaModel` from a local HF directory (``model.config`` is its config).

    The module is created on the meta device and materialized once on ``device``, so no time is
    spent on a random init that the checkpoint overwrites.
    """
    directory = _model_dir(path)
    dtype = resolve_dtype(dtype)
    config = ModelConfig.from_pretrained(directory)
    checkpoint = SafetensorsCheckpoint(directory)
    with torch.device("meta"):
        model = LlamaModel(config, dtype)
    model.to_empty(device=device)
    model.load_hf_weights(checkpoint.tensors())
    return model.eval().requires_grad_(False)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path}: invalid JSON ({exc})") from exc
    return data if isinstance(data, dict) else {}


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _special_token_id(tok: Tokenizer, content: str | None) -> list[int]:
    tid = None if content is None else tok.token_to_id(content)
    return [] if tid is None else [tid]


def _token_string(value: Any) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    content = value.get("content") if isinstance(value, dict) else value
    return content if isinstance(content, str) else None


def special_token_strings(directory: Path, keys: Sequence[str]) -> dict[str, str]:
    """The tokenizer's special-token strings named ``keys`` (``bos_token``, ``eos_token`` ...),
    read as transformers reads them; the chat template sees the same ones.

    NOTE(special-tokens-map): the older layout (many Llama/Mistral fine-tunes) keeps them in
    special_tokens_map.json. transformers (5.x, vLLM 0.33's) reads that file only when
    tokenizer_config.json has no ``added_tokens_decoder``, and then its values win."""
    tcfg = _read_json(directory / "tokenizer_config.json")
    found = {k: s for k in keys if (s := _token_string(tcfg.get(k))) is not None}
    if "added_tokens_decoder" not in tcfg:
        legacy = _read_json(directory / "special_tokens_map.json")
        found.update((k, s) for k in keys if (s := _token_string(legacy.get(k))) is not None)
    return found


def _generation_config(model_dir: Path) -> dict[str, Any]:
    """The model's generation config: generation_config.json, or config.json only when that
    file is absent.

    NOTE(gen-eos): as vLLM's ``try_get_generation_config`` (``GenerationConfig.from_pretrained``,
    falling back to ``from_model_config``) and transformers' ``generate``: an EOS id that
    config.json lists but generation_config.json leaves out does not stop generation.
    """
    gen_file = model_dir / "generation_config.json"
    return _read_json(gen_file if gen_file.is_file() else model_dir / "config.json")


def load_tokenizer(path: str | Path, split_special_tokens: bool = False,
                   model_dir: str | Path | None = None) -> Tokenizer:
    """Load ``<path>/tokenizer.json`` with its EOS/BOS ids.

    EOS ids are the union, in this order, of the tokenizer's ``eos_token``
    (NOTE(special-tokens-map): the primary, as vLLM takes its tokenizer's) and the model's
    generation config ``eos_token_id`` (NOTE(gen-eos): what transformers' ``generate`` stops
    on; vLLM stops on each too). Every one ends a sequence (sched/sequence.py NOTE(eos-ids)).
    BOS is the generation config's, else the tokenizer's. The generation config is read from
    ``model_dir`` (default ``path``): a tokenizer served from its own directory (``--tokenizer``)
    keeps the model's EOS ids, as vLLM reads it from the model.
    """
    directory = _model_dir(path)
    model = directory if model_dir is None else _model_dir(model_dir)
    file = directory / "tokenizer.json"
    if not file.is_file():
        hint = (" (found tokenizer.model: convert it to tokenizer.json with transformers' "
                "AutoTokenizer.from_pretrained(dir).save_pretrained(dir))"
                if (directory / "tokenizer.model").exists() else "")
        raise ModelLoadError(f"{file} not found: kvpool needs a `tokenizers` tokenizer.json{hint}")
    gen = _generation_config(model)
    specials = special_token_strings(directory, ("bos_token", "eos_token"))
    try:
        tok = Tokenizer.from_file(file, name=directory.name,
                                  split_special_tokens=split_special_tokens)
    except Exception as exc:  # tokenizers raises a bare Exception for malformed JSON
        raise ModelLoadError(f"{file}: not a valid tokenizer.json ({exc})") from exc
    eos = _special_token_id(tok, specials.get("eos_token")) + _ids(gen.get("eos_token_id"))
    bos = _ids(gen.get("bos_token_id")) or _special_token_id(tok, specials.get("bos_token"))
    tok.eos_token_ids = tuple(dict.fromkeys(eos))
    tok.bos_token_id = bos[0] if bos else None
    return tok
