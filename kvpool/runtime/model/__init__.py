"""Llama-family model over the paged KV pool, its loader, the built-in tiny model and sampling.

Driving it from an engine::

    model = load_model(path, torch.float32, "cpu")        # or: _, model, tok = build_tiny_model()
    kv = allocate_kv_cache(num_blocks, model.config, block_size, model.dtype, model.device)
    logits = model(PagedBatch([SeqChunk(new_ids, start, block_table), ...]), kv)  # [S, vocab]
    next_ids = Sampler()(logits, [params...], [generator or None...])

This package never imports kvpool.core/sched: block tables arrive as plain ints.
"""

from .attention import KVCacheLayout, allocate_kv_cache, kv_bytes_per_block
from .batch import PagedBatch, PreparedBatch, SeqChunk
from .byte_tokenizer import build_byte_tokenizer
from .config import ModelConfig, RopeScaling
from .errors import ModelConfigError, ModelError, ModelLoadError, WeightLoadError
from .llama import LlamaModel
from .logprobs import TokenLogprob, compute_logprobs
from .loader import load_model, load_tokenizer, resolve_dtype
from .sampling import Sampler, SamplingParams, SamplingParamsError, SeqHistory, make_generator
from .tiny import TINY_MODEL_NAME, build_tiny_model, save_tiny_model, tiny_config
from .tokenizer import IncrementalDetokenizer, Tokenizer

__all__ = [
    "IncrementalDetokenizer", "KVCacheLayout", "LlamaModel", "ModelConfig", "ModelConfigError",
    "ModelError", "ModelLoadError", "PagedBatch", "PreparedBatch", "RopeScaling", "Sampler",
    "SamplingParams", "SamplingParamsError", "SeqChunk", "SeqHistory", "TINY_MODEL_NAME",
    "TokenLogprob", "Tokenizer", "compute_logprobs",
    "WeightLoadError", "allocate_kv_cache", "build_byte_tokenizer", "build_tiny_model",
    "kv_bytes_per_block", "load_model", "load_tokenizer", "make_generator", "resolve_dtype",
    "save_tiny_model", "tiny_config",
]
