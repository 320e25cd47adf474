"""The context-length rule at the edge: how many tokens each prompt of a request may generate.

NOTE(clamp): as vLLM's server (``get_max_tokens``): a prompt that leaves room for at least
one token is served, and the tokens it may generate are lowered to the room it leaves::

    prompt > max_model_len              -> 400 context_length_exceeded, param the prompt's
    prompt == max_model_len             -> 400 (no room for one token: vLLM's input check,
                                           which holds for echo with max_tokens 0 too)
    max_tokens given                    -> min(max_tokens, max_model_len - prompt), and
                                           within --generation-config DIR's max_new_tokens
                                           (NOTE(gen-ceiling), generation_config.py)
    max_tokens unset                    -> min(the default, max_model_len - prompt); the
                                           default is --generation-config's max_new_tokens,
                                           else completions' 16, else (chat, Responses) the
                                           room left, each within --max-tokens-limit

The model's own generation_config.json (``--generation-config auto``) sets only the default:
an explicit ``max_tokens`` above its ``max_new_tokens`` is served in full, as vLLM serves it
(its ``get_max_tokens`` takes the file's value as a fallback, not a cap, for ``auto``).

A request that hits the clamp ends with ``finish_reason: "length"``; ``max_tokens`` above
``--max-tokens-limit`` (default: max_model_len, vLLM's own bound) stays a 400 before this
rule. Each prompt of a several-prompt completions request gets its own budget (vLLM computes
one per prompt); each of its ``n`` / ``best_of`` sequences gets that budget. ``kvpool serve``
caps max_model_len to what the KV cache holds (context_fit.py), so the clamp is the
effective context; where n sequences cannot all grow to it together, they run as n child
requests, each with the whole budget (NOTE(apart) in kvpool/sched/request_checker.py), as
vLLM runs them; what one sequence cannot hold stays the pool's 400 (``check_pool``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpool.errors import RequestError, context_length_error
from kvpool.sched import exceeds_context

__all__ = ["token_budgets", "truncate_to"]


def truncate_to(keep: int, max_model_len: int) -> int:
    """vLLM's ``truncate_prompt_tokens``: -1 keeps max_model_len - 1 tokens (its
    ``max_truncation_tokens``: one position held back so the request generates), any other
    k keeps k."""
    return max_model_len - 1 if keep == -1 else keep


def token_budgets(lengths: Sequence[int], max_tokens: int | None, default_max: int | None, *,
                  max_model_len: int, limit: int, prompt_param: str,
                  ceiling: int | None = None) -> tuple[int, ...]:
    """The tokens each prompt (of ``lengths`` tokens, none empty) may generate (NOTE(clamp));
    ``max_tokens`` as asked (None: unset), ``default_max`` the default when unset, ``ceiling``
    the most any request generates (NOTE(gen-ceiling); None: none)."""
    for i, n in enumerate(lengths):
        if exceeds_context(n, 1, max_model_len):  # no room to generate one token
            which = "" if len(lengths) == 1 else f" (prompt {i})"
            raise _too_long(prompt_param, f"the prompt{which} has {n} tokens", max_model_len)
    ask = min(default_max or limit, limit) if max_tokens is None else max_tokens
    if ceiling is not None:
        ask = min(ask, ceiling)
    return tuple(min(ask, max_model_len - n) for n in lengths)


def _too_long(param: str, what: str, max_model_len: int) -> RequestError:
    return context_length_error(max_model_len, f"{what}, which leaves no room to generate",
                                param, named=True)
