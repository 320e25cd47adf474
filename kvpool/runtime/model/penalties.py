"""Logit adjustments before sampling, batched over the rows that use them.

Order (vLLM v1's, so a request reads the same here as there)::

    logits -> logit_bias -> min_tokens mask -> repetition -> frequency/presence   (all rows;
              greedy rows then take the argmax of the result)
           -> / temperature -> min_p -> top-k -> top-p -> sample                 (sampled rows)

- ``logit_bias``: ``logits[t] += bias`` for each listed token.
- ``min_tokens``: while a sequence has generated fewer, its stop tokens (``stop_token_ids`` and
  the eos, unless ``ignore_eos``) are masked to -inf, so they cannot end it early.
- ``repetition_penalty`` p (vLLM / HF): over prompt + generated tokens,
  ``logit > 0 ? logit / p : logit * p``.
- ``frequency_penalty`` f, ``presence_penalty`` r (OpenAI): over generated tokens,
  ``logit -= f * count + r * (count > 0)``.
- ``min_p`` m: keep tokens whose probability (after temperature) is >= m * the top probability.
- vLLM's ``allowed_token_ids``: every other token is masked to -inf; ``bad_words`` (as token
  sequences): the last token of a word is masked when the sequence's generated tokens end with
  the rest of it (a one-token word is always masked). Both after the bias, as in vLLM v1.

Each step builds what it needs from the rows' histories: one ``bincount`` over the flattened
ids of the penalised rows gives their ``[rows, vocab]`` counts; rows that use nothing cost one
attribute check each, and no tensor is built when no row uses a feature.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any, Sequence

import torch

__all__ = ["SeqHistory", "apply_logit_adjustments", "apply_min_p"]


@dataclass(frozen=True, slots=True)
class SeqHistory:
    """The tokens one sampled row has seen: its prompt and what it generated so far."""

    prompt_ids: Sequence[int]  # the request's prompt (shared by its n sequences)
    output_ids: Sequence[int]  # this sequence's accepted tokens, oldest first


def _counts(lists: Sequence[Sequence[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """``[len(lists), vocab]`` float occurrence counts; ids outside the vocabulary are ignored
    (a model may have fewer logits than its tokenizer has ids)."""
    lengths = torch.tensor([len(x) for x in lists], device=device)
    ids = torch.tensor(list(chain.from_iterable(lists)), dtype=torch.long, device=device)
    rows = torch.repeat_interleave(torch.arange(len(lists), device=device), lengths)
    ok = (ids >= 0) & (ids < vocab)
    flat = torch.bincount(rows[ok] * vocab + ids[ok], minlength=len(lists) * vocab)
    return flat.view(len(lists), vocab).to(torch.float32)


def _index_add(logits: torch.Tensor, rows: list[int], cols: list[int], values) -> None:
    """``logits[rows[j], cols[j]] += values[j]`` (or ``= values`` for a float), skipping columns
    past the vocabulary: such a token can never be sampled, so its bias changes nothing."""
    vocab = logits.shape[1]
    keep = [j for j, c in enumerate(cols) if 0 <= c < vocab]
    if not keep:
        return
    r = torch.tensor([rows[j] for j in keep], device=logits.device)
    c = torch.tensor([cols[j] for j in keep], device=logits.device)
    if isinstance(values, float):
        logits[r, c] = values
    else:
        v = torch.tensor([values[j] for j in keep], dtype=logits.dtype, device=logits.device)
        logits.index_put_((r, c), v, accumulate=True)


def _banned_by_words(words: Sequence[Sequence[int]], output: Sequence[int]) -> list[int]:
    """The last token of each bad word whose other tokens end ``output``."""
    out = []
    for w in words:
        head = len(w) - 1
        if head == 0 or (len(output) >= head and list(output[-head:]) == list(w[:-1])):
            out.append(w[-1])
    return out


def _keep_only(logits: torch.Tensor, row: int, ids: Sequence[int]) -> None:
    keep = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
    cols = torch.tensor([t for t in ids if t < logits.shape[1]], dtype=torch.long,
                        device=logits.device)
    keep[cols] = True
    logits[row].masked_fill_(~keep, float("-inf"))


def apply_logit_adjustments(logits: torch.Tensor, params: Sequence[Any],
                            histories: Sequence[SeqHistory] | None,
                            eos_token_ids: Sequence[int]) -> torch.Tensor:
    """Bias, min_tokens and penalties on float32 ``logits [rows, vocab]``, in place."""
    bias_rows, bias_cols, bias_vals = [], [], []
    mask_rows, mask_cols = [], []
    pen: list[int] = []
    for i, p in enumerate(params):
        if p.logit_bias:
            for tok, b in p.logit_bias:
                bias_rows.append(i)
                bias_cols.append(tok)
                bias_vals.append(b)
        if not p.needs_history:  # SamplingParams.needs_history
            continue
        if histories is None:
            raise ValueError("penalties and min_tokens need each row's token history")
        if p.min_tokens and len(histories[i].output_ids) < p.min_tokens:
            stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eos_token_ids))
            mask_rows += [i] * len(stops)
            mask_cols += sorted(stops)
        banned = _banned_by_words(p.bad_words_ids, histories[i].output_ids)
        mask_rows += [i] * len(banned)
        mask_cols += banned
        if p.frequency_penalty or p.presence_penalty or p.repetition_penalty != 1.0:
            pen.append(i)
    if bias_rows:
        _index_add(logits, bias_rows, bias_cols, bias_vals)
    for i, p in enumerate(params):
        if p.allowed_token_ids:
            _keep_only(logits, i, p.allowed_token_ids)
    if mask_rows:
        _index_add(logits, mask_rows, mask_cols, float("-inf"))
    if pen:
        _penalize(logits, [params[i] for i in pen], [histories[i] for i in pen], pen)
    return logits


def _penalize(logits: torch.Tensor, params: list[Any], hist: list[SeqHistory],
              rows: list[int]) -> None:
    dev, vocab = logits.device, logits.shape[1]
    idx = torch.tensor(rows, device=dev)
    x = logits[idx]
    counts = _counts([h.output_ids for h in hist], vocab, dev)
    rep = [float(p.repetition_penalty) for p in params]
    if any(r != 1.0 for r in rep):
        seen = (counts > 0) | (_counts([h.prompt_ids for h in hist], vocab, dev) > 0)
        r = torch.tensor(rep, device=dev)[:, None]
        x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    freq = torch.tensor([float(p.frequency_penalty) for p in params], device=dev)[:, None]
    pres = torch.tensor([float(p.presence_penalty) for p in params], device=dev)[:, None]
    x = x - freq * counts - pres * (counts > 0).to(x.dtype)
    logits[idx] = x


def apply_min_p(x: torch.Tensor, min_p: Sequence[float]) -> torch.Tensor:
    """Mask tokens below ``min_p * max prob`` per row (``min_p`` 0 keeps everything)."""
    probs = torch.softmax(x, dim=-1)
    m = torch.tensor(list(min_p), dtype=probs.dtype, device=x.device)[:, None]
    keep = probs >= m * probs.max(dim=-1, keepdim=True).values
    return x.masked_fill(~keep, float("-inf"))
