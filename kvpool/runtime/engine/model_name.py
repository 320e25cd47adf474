"""The model, its tokenizer and the name it is served under.

NOTE(served-name): with no ``--served-model-name`` the model is served under ``--model``
exactly as given (``/models/llama``, ``./llama/``), vLLM's default
(vllm/config/model.py get_served_model_name): the name vLLM clients, lm-eval ``model_args``,
benchmarks and gateways hold. The same name labels the metrics (``model_name``) and the KV
events' ``model_names``. The prefix hashes' and the remote tier's ``model_id`` is not a path:
a directory's basename unless a name was given (:func:`cache_model_id`), so replicas loading one
checkpoint from different paths still share the tier and the router's index. The built-in
model is served as ``kvpool-tiny``; a hub id read from the local cache keeps the hub id
(serve.py sets it as the served name, NOTE(hf-cache)).

kvpool used to serve a local directory under its basename (``llama``). For deployments that
still send it, that basename is an *alias* (:func:`name_aliases`): a request naming it is served
and answered as the served name; the alias is never listed in /v1/models nor used in answers,
metrics or KV events (README, `--served-model-name`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.model import (TINY_MODEL_NAME, build_tiny_model, load_model,
                                  load_tokenizer, resolve_dtype)
from kvpool.runtime.model.dtype_policy import checkpoint_dtype, choose_dtype

log = logging.getLogger(__name__)


def served_name(config: EngineConfig) -> str:
    """The engine's name: --served-model-name, else --model as given, else the tiny model's."""
    return config.served_model_name or config.model or TINY_MODEL_NAME


def cache_model_id(config: EngineConfig) -> str:
    """The model's name in the prefix hashes and the shared tier's namespace: the served name
    when one was given, else a directory's basename (NOTE(served-name)): replicas loading one
    checkpoint from different paths (``/a/llama``, ``/b/llama/``) hash alike and share the
    tier, which the weights' fingerprint then keeps to the same weights and config."""
    if config.served_model_name or not config.model:
        return served_name(config)
    return Path(config.model).name or config.model


def name_aliases(config: EngineConfig) -> dict[str, str]:
    """{kvpool's old default name: the served name it stands for} (NOTE(served-name)); empty
    where a name was given or the old name is the served one."""
    if config.served_model_name or not config.model:
        return {}
    old = Path(config.model).name
    return {old: config.model} if old and old != config.model else {}


def build_model(config: EngineConfig):
    """(model, tokenizer, served name) for the config: a local HF directory or the tiny model."""
    name, why, slow = choose_dtype(config.dtype, config.device, checkpoint_dtype(config.model))
    (log.warning if slow else log.info)("dtype %s: %s%s", name, why,
                                        " (slow here: consider --dtype auto)" if slow else "")
    dtype = resolve_dtype(name)
    if config.model is None:
        _, model, tok = build_tiny_model(config.seed, dtype, config.device)
    else:
        model = load_model(config.model, dtype, config.device)
        tok = load_tokenizer(config.tokenizer or config.model, model_dir=config.model)
    return model, tok, served_name(config)
