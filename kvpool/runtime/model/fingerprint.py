"""A fingerprint of a model as loaded, its weights and its config (the remote tier's namespace,
kvpool/server/remote_setup.py).

NOTE(weights-print): blocks stored in a shared tier are valid only for the weights that
computed them. The namespace named the weights by the model directory's path, so new weights
of the same geometry at the same path (a fine-tune rolled out in place, a checkpoint
re-downloaded) read the old weights' KV from Redis: wrong tokens, no error, the hits counted.
The fingerprint is a digest of each parameter's name, shape, dtype and ``SAMPLES`` of its
values at fixed, evenly spaced positions: any fine-tune moves nearly every value, so samples
from every tensor tell two checkpoints apart, while two replicas loading the same files (from
any path, copied or downloaded apart) get the same fingerprint and share the tier. It reads a
few thousand values, not the weights: milliseconds for any model. The config as loaded joins
them (a canonical JSON of every ``ModelConfig`` field, sorted keys): the same weights under
another ``rms_norm_eps``, Granite multiplier, partial rotary factor or YaRN/LongRoPE attention
factor compute other K and V. A config.json edited in place, or in a copy of the directory as
the --hf-overrides refusal advises, kept the weights and the served name, so the tier served
the old config's KV, hits counted. A field that changes no KV (eos_token_ids) splits the
namespace too: a cold tier, never a wrong token. The RoPE table in use joins them as well: a
LongRoPE model's keys differ with the factor set its served context picked
(attention.py NOTE(longrope-regime)), which max_model_len decides and the config alone does
not say, so replicas serving different contexts never share KV.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import torch

__all__ = ["SAMPLES", "weights_fingerprint"]

SAMPLES = 64  # values read per parameter tensor


def weights_fingerprint(model: torch.nn.Module) -> str:
    """32 hex digits naming ``model``'s weights, config and RoPE table (NOTE(weights-print))."""
    h = hashlib.blake2b(digest_size=16)
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        flat = p.detach().reshape(-1)
        n = flat.numel()
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
        if n:
            at = torch.linspace(0, n - 1, steps=min(n, SAMPLES), device=flat.device).long()
            h.update(flat[at].to(torch.float32).cpu().numpy().tobytes())
    config = getattr(model, "config", None)
    if dataclasses.is_dataclass(config):
        h.update(b"config;" + json.dumps(dataclasses.asdict(config), sort_keys=True,
                                         separators=(",", ":")).encode())
    rope = getattr(model, "rope", None)
    if rope is not None:
        h.update(b"rope;" + rope.table.numpy().tobytes())
    return h.hexdigest()
