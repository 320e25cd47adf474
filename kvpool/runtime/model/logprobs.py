"""Log-probabilities of chosen tokens and the top-k alternatives, batched over logits rows.

NOTE(raw-logprobs): the values are ``log_softmax`` in float32 of the *raw* logits the model
returned -- before logit_bias, penalties, temperature, min_p, top-k/top-p -- which is vLLM's
default (``logprobs_mode="raw_logprobs"``). They are what transformers' ``log_softmax`` of the
same model gives, whatever sampling controls the request used.

One call costs one ``log_softmax`` over the rows that asked, one ``gather``, one ``topk`` with
the largest ``k`` among them and one comparison pass for the ranks; everything reaches Python
by a single ``tolist()`` per tensor (no per-row tensor indexing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["TokenLogprob", "compute_logprobs"]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The logprob of one chosen (sampled or prompt) token, with the k most likely ones."""

    token_id: int  # the chosen token
    logprob: float  # its log-probability under the raw model distribution
    rank: int  # 1 + how many tokens are strictly more likely
    top: tuple[tuple[int, float], ...]  # the k most likely (token id, logprob), best first


def compute_logprobs(logits: torch.Tensor, token_ids: Sequence[int] | torch.Tensor,
                     ks: Sequence[int], picks: Sequence[Sequence[int]] | None = None
                     ) -> list[TokenLogprob]:
    """One :class:`TokenLogprob` per row of ``logits [R, vocab]``: ``token_ids[r]`` is row r's
    chosen token and ``ks[r]`` how many alternatives it keeps (0 = none). NOTE(picks): a row
    whose ``picks[r]`` is not empty (vLLM's logprob_token_ids) keeps those tokens instead of
    the k most likely, after its chosen token, each once, in the order asked."""
    rows = logits.shape[0]
    if len(ks) != rows or len(token_ids) != rows:
        raise ValueError(f"need one token id and one k per logits row ({rows})")
    if rows == 0:
        return []
    lp = torch.log_softmax(logits.float(), dim=-1)
    ids = torch.as_tensor(token_ids, dtype=torch.long, device=lp.device)
    chosen = lp.gather(1, ids[:, None])
    ranks = ((lp > chosen).sum(dim=-1) + 1).tolist()
    chosen_l = chosen[:, 0].tolist()
    kmax = min(max(ks), lp.shape[-1])
    if kmax > 0:
        top_v, top_i = lp.topk(kmax, dim=-1)
        top_v, top_i = top_v.tolist(), top_i.tolist()
    ids_l = ids.tolist()
    out = []
    for r in range(rows):
        k = min(ks[r], kmax)
        top = tuple(zip(top_i[r][:k], top_v[r][:k])) if k > 0 else ()
        if picks is not None and picks[r]:
            top = _picked(lp[r], ids_l[r], picks[r])
        out.append(TokenLogprob(ids_l[r], chosen_l[r], ranks[r], top))
    return out


def _picked(row: torch.Tensor, chosen: int, picks: Sequence[int]) -> tuple[tuple[int, float], ...]:
    """NOTE(picks): the chosen token, then each of ``picks`` not listed yet, with its logprob
    in ``row`` (one gather)."""
    order = list(dict.fromkeys((chosen, *picks)))
    return tuple(zip(order, row[torch.tensor(order, device=row.device)].tolist()))
